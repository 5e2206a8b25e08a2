package frame

import (
	"bytes"
	"errors"
	"testing"
)

// Encoded and Placed bodies encode byte for byte what Payload and Bundle
// do, with and without an auth section and after an Ethernet header;
// Placed writes only the header and the CRC around bytes already in
// place, and is refused when the buffer lacks the room.
func TestEncodedAndPlaced(t *testing.T) {
	msgs := [][]byte{[]byte("first message"), []byte("2nd"), bytes.Repeat([]byte{0xa5}, 300)}
	var bundle []byte
	for _, m := range msgs {
		bundle = be.AppendUint16(bundle, uint16(len(m)))
		bundle = append(bundle, m...)
	}
	src := [6]byte{2, 0, 0, 0, 0, 1}
	for _, auth := range []Authenticator{nil, fixedAuth{alg: 9, tag: []byte{1, 2, 3, 4}}} {
		h := baseHeader()
		h.Auth = auth
		for _, c := range []struct {
			name    string
			want    Body
			body    []byte
			bundled bool
		}{
			{"one message", &Payload{T: Data, Data: msgs[0]}, msgs[0], false},
			{"bundle", &Bundle{T: Data, Msgs: msgs}, bundle, true},
		} {
			eth := AppendEthernet(nil, Broadcast, src, EtherType)
			want, err := Append(eth, &h, c.want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Append(AppendEthernet(nil, Broadcast, src, EtherType), &h, &Encoded{T: Data, Data: c.body, Bundled: c.bundled})
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("auth %v, %s: Encoded gives %x, %v; want %x", auth != nil, c.name, got, err, want)
			}
			// Placed: the body is written once where it will stay; the
			// header goes in front of it, the CRC after it. Sending the
			// frame again with a new header rewrites only those.
			pre := EthernetHeaderLen + PrefixLen(&h)
			buf := make([]byte, pre, len(want)+8)
			buf = append(buf, c.body...)
			for seq := uint32(42); seq < 44; seq++ {
				h.Seq = seq
				want, _ := Append(AppendEthernet(nil, Broadcast, src, EtherType), &h, c.want)
				got, err := Append(AppendEthernet(buf[:0], Broadcast, src, EtherType), &h, &Placed{T: Data, N: len(c.body), Bundled: c.bundled})
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("auth %v, %s, seq %d: Placed gives %x, %v; want %x", auth != nil, c.name, seq, got, err, want)
				}
				if &got[0] != &buf[0] {
					t.Fatalf("auth %v, %s: Placed moved the frame out of its buffer", auth != nil, c.name)
				}
				if !bytes.Equal(buf[pre:], c.body) {
					t.Fatalf("auth %v, %s: Placed changed the body in place", auth != nil, c.name)
				}
				v, err := Parse(got[EthernetHeaderLen:])
				if err != nil || v.Seq() != seq {
					t.Fatalf("auth %v, %s: Placed frame does not parse as seq %d: %v", auth != nil, c.name, seq, err)
				}
			}
			h.Seq = 42
			short := make([]byte, pre, pre+len(c.body)-1)
			if _, err := Append(short[:EthernetHeaderLen], &h, &Placed{T: Data, N: len(c.body)}); !errors.Is(err, ErrInvalid) {
				t.Errorf("auth %v, %s: Placed body in a buffer one byte short: %v, want ErrInvalid", auth != nil, c.name, err)
			}
		}
	}
}
