package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func seedGolden(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, c := range goldenCases() {
		h := c.h
		b, err := Append(nil, &h, c.body)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzParse feeds arbitrary bytes to the decoder: it must never panic, and
// whatever it accepts must survive decode→encode→decode unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range seedGolden(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// ParseSealed accepts what Parse does, and more only for an
		// encrypted body, whose header and auth section it can read.
		s, serr := ParseSealed(b)
		if serr == nil {
			s.Type()
			s.Auth()
			s.AuthKey()
		}
		// ParseNoCRC accepts what Parse does, and more only when the
		// CRC is wrong: with the CRC rewritten it agrees with Parse.
		nv, nerr := ParseNoCRC(b)
		if nerr == nil {
			exercise(nv)
			fixed := append([]byte(nil), nv...)
			SetCRC(fixed)
			if _, err := Parse(fixed); err != nil {
				t.Fatalf("ParseNoCRC accepts a frame Parse refuses with its CRC rewritten: %v", err)
			}
		}
		v, err := Parse(b)
		if err == nil && nerr != nil {
			t.Fatalf("Parse accepts a frame ParseNoCRC refuses: %v", nerr)
		}
		if err != nil && nerr == nil && !errors.Is(err, ErrChecksum) {
			t.Fatalf("ParseNoCRC accepts a frame Parse refuses for another reason than its CRC: %v", err)
		}
		if err != nil {
			if serr == nil {
				if alg, _, _ := s.Auth(); alg != AuthEncrypted {
					t.Fatalf("ParseSealed accepts a frame Parse refuses (%v) without an encrypted body", err)
				}
			}
			return
		}
		if serr != nil {
			t.Fatalf("Parse accepts a frame ParseSealed refuses: %v", serr)
		}
		exercise(v)
		assertRoundTrip(t, b)
	})
}

// FuzzBody reaches the type-specific decoders, which random bytes almost
// never reach through the CRC: it builds a well-formed header around
// arbitrary ack and body bytes and seals it with a correct CRC.
func FuzzBody(f *testing.F) {
	for _, s := range seedGolden(f) {
		v, _ := Parse(s)
		f.Add(uint8(v.Type()), uint16(v.Flags()), s[HeaderLen:HeaderLen+v.AckCount()*AckEntryLen], []byte(s[v.authStart():len(v)-CRCLen]))
	}
	f.Fuzz(func(t *testing.T, typ uint8, flags uint16, acks, body []byte) {
		acks = acks[:len(acks)/AckEntryLen*AckEntryLen]
		n := HeaderLen + len(acks) + len(body) + CRCLen
		if n > 0xffff {
			return
		}
		b := make([]byte, 0, n)
		b = append(b, Version, typ)
		b = binary.BigEndian.AppendUint16(b, flags)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = append(b, 0, 1, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(len(acks)/AckEntryLen))
		b = append(b, acks...)
		b = append(b, body...)
		b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
		v, err := Parse(b)
		if err != nil {
			return
		}
		exercise(v)
		assertRoundTrip(t, b)
	})
}

// FuzzSplitEthernet checks the Ethernet header decoder never panics, that
// what it returns lies inside the input, and that a header it accepts
// re-encodes to its own bytes, or, VLAN-tagged, to its untagged canonical
// form, which splits to the same addresses and frame.
func FuzzSplitEthernet(f *testing.F) {
	for _, s := range seedGolden(f) {
		f.Add(AppendEthernet(nil, Broadcast, [6]byte{2, 0, 0, 0, 0, 1}, EtherType), s)
	}
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0x00, 0, 1, 0x88, 0xb5}, []byte{})
	f.Fuzz(func(t *testing.T, eth, rest []byte) {
		b := append(append([]byte{}, eth...), rest...)
		h, rb, err := SplitEthernet(b, EtherType)
		if err != nil {
			return
		}
		if len(h)+len(rb) != len(b) || h.EtherType() != EtherType {
			t.Fatalf("split %d+%d of %d bytes", len(h), len(rb), len(b))
		}
		canon := AppendEthernet(nil, h.Dst(), h.Src(), h.EtherType())
		if len(h) == EthernetHeaderLen && !bytes.Equal(canon, h) {
			t.Fatalf("header %x re-encodes to %x", h, canon)
		}
		ch, crb, err := SplitEthernet(append(canon, rb...), EtherType)
		if err != nil || !bytes.Equal(ch, canon) || !bytes.Equal(crb, rb) || ch.Src() != h.Src() || ch.Dst() != h.Dst() {
			t.Fatalf("header %x: canonical form %x splits to %x, %d bytes after (%v)", h, canon, ch, len(crb), err)
		}
	})
}

// exercise calls every accessor valid for the frame's type, so a layout
// check that lets a bad frame through shows up as a panic here.
func exercise(v View) {
	_ = v.Header()
	for i := range v.AckCount() {
		_ = v.Ack(i)
	}
	_, _, _ = v.Auth()
	_ = v.AuthInput(nil)
	it := v.Messages()
	for {
		if _, ok := it.Next(); !ok {
			break
		}
	}
	switch v.Type() {
	case Nack:
		_ = v.NackTarget()
		for i, rl := 0, v.NackRanges(); i < rl.Len(); i++ {
			_ = rl.At(i)
		}
	case Join:
		_ = v.Join()
	case Welcome:
		_ = v.Welcome()
	case Start:
		for i, ml := 0, v.Members(); i < ml.Len(); i++ {
			_ = ml.At(i)
		}
	case SeqData:
		_, _ = v.SeqDataEpoch(), v.SeqDataUID()
	case SeqAccept:
		for i, al := 0, v.Accepts(); i < al.Len(); i++ {
			_ = al.At(i)
		}
	case SeqStatusRequest, SeqStatusReply:
		_, _ = v.StatusEpoch(), v.StatusDelivered()
	case SeqRetransmit:
		for i, rl := 0, v.RetransmitRanges(); i < rl.Len(); i++ {
			_ = rl.At(i)
		}
	case PcodeData, PcodeNack, PcodeStatus, PcodeAbort:
		_ = v.decodePcode()
		if v.Type() == PcodeData {
			d := v.PcodeData()
			_, _ = d.Targets.Count(), d.Targets.Has(9)
		}
	case FileOffer, FileData, FileEnd, FileStatus, FileGone:
		_ = v.FileID()
		_ = v.decodeFile()
		if v.Type() == FileStatus {
			st := v.FileStatus()
			for i, rl := 0, v.FileMissing(); i < rl.Len(); i++ {
				if r := rl.At(i); r.Last >= st.Top {
					panic("a missing range at or above top passed validation")
				}
			}
		}
	case SeqElection:
		_ = v.Election()
	case SeqMember:
		_ = v.SeqMemberChange()
	case ViewJoin:
		_ = v.ViewJoin()
	case ViewPrepare:
		_, _ = v.ViewNext(), v.ViewBase()
		for i, ml := 0, v.ViewMembers(); i < ml.Len(); i++ {
			_ = ml.At(i)
		}
	case ViewFlush:
		_, _ = v.FlushCoord(), v.FlushSent()
		for i, dl := 0, v.FlushDelivered(); i < dl.Len(); i++ {
			_ = dl.At(i)
		}
	case ViewCommit:
		for i, ml := 0, v.ViewMembers(); i < ml.Len(); i++ {
			_ = ml.At(i)
		}
		for i, cl := 0, v.CommitCuts(); i < cl.Len(); i++ {
			_ = cl.At(i)
		}
		_ = v.CommitBaseCount()
		for i, ml := 0, v.ViewMembers(); i < ml.Len(); i++ {
			_ = v.CommitFromBase(i)
		}
	case ViewRelay:
		_, _ = v.RelayBase(), v.RelayFrame().Type()
	case ViewRefuse:
		_ = v.ViewRefuse()
	case GroupRemove:
		_ = v.RemovedView()
	case ViewSuspect:
		_ = v.Suspects()
	}
}
