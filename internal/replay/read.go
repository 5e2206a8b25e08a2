// Package replay reads rbcast captures (pcap or pcapng, ours or
// tcpdump's) and analyses them: a decoded timeline, per-sender gaps and
// repairs, protocol invariant checks, a deterministic re-run of one
// member's core (PBP, or the sequencer's for a total-order group) on
// exactly the frames its interface received, and
// re-injection onto a link. cmd/pcap-replay is its command-line face.
package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
)

// Dir is the direction of a captured frame as seen by its interface
// (package invariant's type, which Check hands the frames to).
type Dir = invariant.Dir

const (
	DirUnknown = invariant.DirUnknown // no direction information (pcap, tcpdump)
	DirIn      = invariant.DirIn      // received by the interface
	DirOut     = invariant.DirOut     // sent by the interface
)

// Interface is one capture interface: a pcapng IDB, or the single
// interface of a pcap file.
type Interface struct {
	Index       int
	Name        string
	Description string
	LinkType    layers.LinkType
	// Node, MAC and MTU are parsed from our description ("rbcast node 3 on
	// eth0 (02:00:00:00:00:01, MTU 1500)", capture.Wrap); Node is "" and
	// MAC zero when the description is not ours.
	Node string
	MAC  [6]byte
	MTU  int
	// Start is isb_starttime of the interface's last statistics block
	// (capture.Wrap writes the time the link was wrapped); zero if none.
	Start time.Time
	// Received and Dropped are isb_ifrecv and isb_ifdrop of that block.
	Received, Dropped uint64
	HasStats          bool
	// CaptureLost is how many of the interface's frames the capture lost
	// (the sum of its frames' Lost): frames it handled that the file does
	// not hold.
	CaptureLost uint64
}

// Label names the interface for output: "node 3" when the description is
// ours, else its name, else its index.
func (i *Interface) Label() string {
	switch {
	case i.Node != "":
		return "n" + i.Node
	case i.Name != "":
		return i.Name
	}
	return "if" + strconv.Itoa(i.Index)
}

// Record is one captured frame, decoded.
type Record struct {
	N      int   // frame number, from 1, in file order (as Wireshark numbers them)
	Offset int64 // byte offset of its block in the (decompressed) file
	Time   time.Time
	Iface  int
	Dir    Dir
	Data   []byte // the whole Ethernet frame as captured
	// Lost is how many frames of the interface the capture lost just
	// before this one (pcapng epb_dropcount; capture.Writer writes it when
	// its queue was full).
	Lost uint64

	Src, Dst [6]byte
	// UDPSrc and UDPDst are the addresses of the datagram that carried
	// the frame (ReadOptions.UDP); zero otherwise.
	UDPSrc, UDPDst netip.AddrPort
	// View is the decoded rbcast frame; nil when Err is set.
	View frame.View
	// Err says why the frame did not decode: not an Ethernet frame of our
	// EtherType, or a frame.DecodeError (kind, field, offset).
	Err error
}

// Capture is a whole capture file, read into memory.
type Capture struct {
	Path       string
	Format     string // "pcap" or "pcapng"
	Interfaces []Interface
	Records    []Record
	// HasDirection is true when some frame carries pcapng direction flags.
	HasDirection bool
}

// ReadOptions tune Read.
type ReadOptions struct {
	// EtherType of rbcast frames; 0 means frame.EtherType.
	EtherType uint16
	// Partial keeps the frames before a truncated or corrupt block: Read
	// then returns the capture and the error together.
	Partial bool
	// UDP reads a capture of link/udp's carriage (tcpdump on a member's
	// interface, -i any, or raw IP): each UDP datagram's payload is the
	// Ethernet frame; the IP and UDP headers are stripped (and kept in
	// Record.UDPSrc and UDPDst). UDPPorts, if not empty, are the
	// carriage's ports: other datagrams are not ours.
	UDP      bool
	UDPPorts []uint16
}

// FormatError says what is wrong with a capture file and where.
type FormatError struct {
	Path   string
	Offset int64 // byte offset in the file (after gzip decompression, for .gz captures)
	Detail string
	Err    error // io.ErrUnexpectedEOF for truncation, else nil or the reader's error
}

func (e *FormatError) Error() string {
	s := fmt.Sprintf("capture %s: byte offset %d: %s", e.Path, e.Offset, e.Detail)
	if e.Err != nil && e.Err != io.ErrUnexpectedEOF {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// Magic numbers of the formats (pcap: libpcap's savefile header, micro-
// and nanosecond variants in both byte orders; pcapng: the Section Header
// Block type).
const (
	magicPcapMicro = 0xa1b2c3d4
	magicPcapNano  = 0xa1b23c4d
	magicPcapng    = 0x0a0d0d0a
	pcapngBOM      = 0x1a2b3c4d
	// maxPcapRecord is libpcap's largest accepted record (MAXIMUM_SNAPLEN).
	maxPcapRecord = 262144
)

// ReadFile reads the capture at path.
func ReadFile(path string, opts ReadOptions) (*Capture, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer f.Close()
	// The magic first: a file that is no capture (/dev/zero, a FIFO of
	// something else) is refused without reading it to its end.
	head := make([]byte, 4)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if n < len(head) || !knownMagic(head) {
		return Parse(path, head[:n], opts)
	}
	rest, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return Parse(path, append(head, rest...), opts)
}

// knownMagic reports whether b starts as a file Parse reads: gzip, pcap
// in either byte order, or pcapng.
func knownMagic(b []byte) bool {
	if b[0] == 0x1f && b[1] == 0x8b {
		return true
	}
	for _, m := range []uint32{binary.LittleEndian.Uint32(b), binary.BigEndian.Uint32(b)} {
		if m == magicPcapMicro || m == magicPcapNano || m == magicPcapng {
			return true
		}
	}
	return false
}

// ReadFiles reads one capture or merges several — one per node, as each
// rbcastd -capture writes — into one: the interfaces of every file in
// order (with their statistics, which mergecap drops), the frames of all
// in time order as far as each file's own order allows (a file's frames
// are never reordered; the earliest of the files' next frames comes
// next, the first file's among equal times), numbered from 1 in that
// order. Errors name the file at fault. With opts.Partial, the frames
// before a bad block of any file are kept and the first error returned.
func ReadFiles(paths []string, opts ReadOptions) (*Capture, error) {
	if len(paths) == 1 {
		return ReadFile(paths[0], opts)
	}
	if len(paths) == 0 {
		return nil, errors.New("capture: no file to read")
	}
	var caps []*Capture
	var firstErr error
	for _, p := range paths {
		c, err := ReadFile(p, opts)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if c == nil {
			return nil, err
		}
		caps = append(caps, c)
	}
	return Merge(caps), firstErr
}

// Merge combines captures as ReadFiles does. The records' Data is shared
// with the inputs.
func Merge(caps []*Capture) *Capture {
	out := &Capture{Format: "merged"}
	var names []string
	bases := make([]int, len(caps))
	total := 0
	for k, c := range caps {
		names = append(names, c.Path)
		bases[k] = len(out.Interfaces)
		for _, intf := range c.Interfaces {
			intf.Index += bases[k]
			out.Interfaces = append(out.Interfaces, intf)
		}
		out.HasDirection = out.HasDirection || c.HasDirection
		total += len(c.Records)
	}
	// Merge, not sort: each file's frames stay in its own order, the order
	// its node handled them. A ring hands frames over in the order the
	// kernel queued them, and frames that two CPUs received at once can
	// be queued in the other order than their timestamps say; sorted by
	// time, a re-run (Simulate) stepped them in another order than the
	// node did and delivered across senders differently.
	out.Records = make([]Record, 0, total)
	next := make([]int, len(caps))
	for len(out.Records) < total {
		k := -1
		for j, c := range caps {
			if next[j] < len(c.Records) && (k < 0 || c.Records[next[j]].Time.Before(caps[k].Records[next[k]].Time)) {
				k = j
			}
		}
		r := caps[k].Records[next[k]]
		next[k]++
		r.Iface += bases[k]
		r.N = len(out.Records) + 1
		r.Offset = -1 // offsets are per file
		out.Records = append(out.Records, r)
	}
	out.Path = strings.Join(names, "+")
	if len(caps) == 1 {
		out.Format = caps[0].Format
	}
	return out
}

// Parse reads a capture held in data; name is used in errors. It never
// panics: a truncated or corrupt file gives a *FormatError naming the byte
// offset of the block at fault.
func Parse(name string, data []byte, opts ReadOptions) (c *Capture, err error) {
	if opts.EtherType == 0 {
		opts.EtherType = frame.EtherType
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, &FormatError{Path: name, Offset: 0, Detail: "gzip header", Err: err}
		}
		plain, err := io.ReadAll(io.LimitReader(zr, 1<<32))
		if err != nil {
			detail := "gzip stream (offset in the decompressed data)"
			if err == io.ErrUnexpectedEOF {
				detail = "truncated " + detail
			}
			return nil, &FormatError{Path: name, Offset: int64(len(plain)), Detail: detail, Err: err}
		}
		data = plain
	}
	if len(data) < 4 {
		return nil, &FormatError{Path: name, Offset: 0, Detail: fmt.Sprintf("file is %d bytes, too short for a pcap or pcapng header", len(data)), Err: io.ErrUnexpectedEOF}
	}
	c = &Capture{Path: name}
	le, be := binary.LittleEndian.Uint32(data), binary.BigEndian.Uint32(data)
	var walkErr error
	var offsets []int64
	var end int64
	switch {
	case le == magicPcapng:
		c.Format = "pcapng"
		offsets, end, walkErr = walkPcapng(name, data)
	case le == magicPcapMicro || be == magicPcapMicro || le == magicPcapNano || be == magicPcapNano:
		c.Format = "pcap"
		offsets, end, walkErr = walkPcap(name, data, le == magicPcapMicro || le == magicPcapNano)
	default:
		return nil, &FormatError{Path: name, Offset: 0, Detail: fmt.Sprintf("magic %08x is neither pcap (a1b2c3d4, a1b23c4d) nor pcapng (0a0d0d0a)", be)}
	}
	if walkErr != nil && (!opts.Partial || end == 0) {
		return nil, walkErr
	}
	// The walk found the block boundaries; pcapgo decodes the valid prefix.
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, &FormatError{Path: name, Offset: -1, Detail: fmt.Sprintf("pcapgo reader panicked: %v", r)}
		}
	}()
	if c.Format == "pcapng" {
		err = c.readNg(name, data[:end], offsets)
	} else {
		err = c.readPcap(name, data[:end], offsets)
	}
	if err != nil {
		return nil, err
	}
	for i := range c.Records {
		r := &c.Records[i]
		lt := c.Interfaces[r.Iface].LinkType
		switch {
		case opts.UDP:
			if err := r.unwrapUDP(lt, opts.UDPPorts); err != nil {
				r.Err = err
				continue
			}
		case lt != layers.LinkTypeEthernet:
			r.Err = fmt.Errorf("%w: link type %v (want Ethernet; capture with -i <interface>, not -i any; for link/udp's carriage, read with the UDP option)", errLinkType, lt)
			continue
		}
		r.decode(opts.EtherType)
	}
	c.nameUnknownNodes()
	return c, walkErr
}

// nameUnknownNodes gives interfaces captured before their node had an id
// (capture.Wrap's "node ?", as rbcastd writes for a member the
// registration server numbers) the id a Start frame lists for their MAC.
func (c *Capture) nameUnknownNodes() {
	unknown := false
	for i := range c.Interfaces {
		unknown = unknown || c.Interfaces[i].Node == "?"
	}
	if !unknown {
		return
	}
	ids := map[[6]byte]frame.MemberID{}
	for i := range c.Records {
		if v := c.Records[i].View; v != nil && v.Type() == frame.Start {
			ml := v.Members()
			for k := range ml.Len() {
				ids[ml.At(k).MAC] = ml.At(k).ID
			}
		}
	}
	for i := range c.Interfaces {
		if intf := &c.Interfaces[i]; intf.Node == "?" {
			if id, ok := ids[intf.MAC]; ok {
				intf.Node = strconv.Itoa(int(id))
			}
		}
	}
}

// walkPcapng checks every block's framing (type, length, trailing length)
// and returns the offsets of the packet blocks and the end of the last
// whole block.
func walkPcapng(name string, data []byte) (packets []int64, end int64, err error) {
	order := binary.ByteOrder(binary.LittleEndian)
	o := int64(0)
	n := int64(len(data))
	for o < n {
		if n-o < 12 {
			return packets, o, &FormatError{Path: name, Offset: o, Detail: fmt.Sprintf("truncated block header: %d bytes left, a block needs at least 12", n-o), Err: io.ErrUnexpectedEOF}
		}
		typ := binary.LittleEndian.Uint32(data[o:])
		if typ == magicPcapng {
			switch binary.LittleEndian.Uint32(data[o+8:]) {
			case pcapngBOM:
				order = binary.LittleEndian
			default:
				if binary.BigEndian.Uint32(data[o+8:]) != pcapngBOM {
					return packets, o, &FormatError{Path: name, Offset: o + 8, Detail: fmt.Sprintf("section header byte-order magic %x, want 1a2b3c4d", data[o+8:o+12])}
				}
				order = binary.BigEndian
			}
		} else {
			typ = order.Uint32(data[o:])
		}
		l := int64(order.Uint32(data[o+4:]))
		if l < 12 || l%4 != 0 {
			return packets, o, &FormatError{Path: name, Offset: o, Detail: fmt.Sprintf("block of type %#x has total length %d (must be a multiple of 4, at least 12)", typ, l)}
		}
		if o+l > n {
			return packets, o, &FormatError{Path: name, Offset: o, Detail: fmt.Sprintf("truncated block of type %#x: it claims %d bytes, %d remain", typ, l, n-o), Err: io.ErrUnexpectedEOF}
		}
		if t := int64(order.Uint32(data[o+l-4:])); t != l {
			return packets, o, &FormatError{Path: name, Offset: o + l - 4, Detail: fmt.Sprintf("block of type %#x at offset %d: trailing length %d differs from leading %d", typ, o, t, l)}
		}
		switch typ {
		case 2, 3, 6: // obsolete Packet Block, Simple Packet Block, Enhanced Packet Block
			packets = append(packets, o)
		}
		o += l
	}
	return packets, o, nil
}

// walkPcap checks every record header of a pcap file.
func walkPcap(name string, data []byte, little bool) (packets []int64, end int64, err error) {
	order := binary.ByteOrder(binary.BigEndian)
	if little {
		order = binary.LittleEndian
	}
	n := int64(len(data))
	if n < 24 {
		return nil, 0, &FormatError{Path: name, Offset: 0, Detail: fmt.Sprintf("truncated pcap file header: %d bytes of 24", n), Err: io.ErrUnexpectedEOF}
	}
	o := int64(24)
	for o < n {
		if n-o < 16 {
			return packets, o, &FormatError{Path: name, Offset: o, Detail: fmt.Sprintf("truncated record header: %d bytes of 16", n-o), Err: io.ErrUnexpectedEOF}
		}
		incl := int64(order.Uint32(data[o+8:]))
		if incl > maxPcapRecord {
			return packets, o, &FormatError{Path: name, Offset: o + 8, Detail: fmt.Sprintf("record claims %d captured bytes, more than the %d a pcap record may hold", incl, maxPcapRecord)}
		}
		if o+16+incl > n {
			return packets, o, &FormatError{Path: name, Offset: o, Detail: fmt.Sprintf("truncated record: %d captured bytes claimed, %d remain", incl, n-o-16), Err: io.ErrUnexpectedEOF}
		}
		packets = append(packets, o)
		o += 16 + incl
	}
	return packets, o, nil
}

func (c *Capture) readPcap(name string, data []byte, offsets []int64) error {
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		return &FormatError{Path: name, Offset: 0, Detail: "pcap file header", Err: err}
	}
	c.Interfaces = []Interface{{Index: 0, LinkType: r.LinkType()}}
	for k := 0; ; k++ {
		pkt, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &FormatError{Path: name, Offset: at(offsets, k, int64(len(data))), Detail: fmt.Sprintf("record %d", k+1), Err: err}
		}
		c.Records = append(c.Records, Record{N: k + 1, Offset: at(offsets, k, -1), Time: ci.Timestamp, Data: pkt})
	}
}

func (c *Capture) readNg(name string, data []byte, offsets []int64) error {
	stats := map[int]pcapgo.NgInterfaceStatistics{}
	r, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.NgReaderOptions{
		WantMixedLinkType:  true,
		SkipUnknownVersion: true,
		StatisticsCallback: func(id int, s pcapgo.NgInterfaceStatistics) { stats[id] = s },
	})
	if err != nil {
		return &FormatError{Path: name, Offset: 0, Detail: "pcapng section header", Err: err}
	}
	for k := 0; ; k++ {
		pkt, ci, o, err := r.ReadPacketDataWithOptions()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &FormatError{Path: name, Offset: at(offsets, k, int64(len(data))), Detail: fmt.Sprintf("block of frame %d (or a block before it)", k+1), Err: err}
		}
		rec := Record{N: k + 1, Offset: at(offsets, k, -1), Time: ci.Timestamp, Iface: ci.InterfaceIndex, Data: bytes.Clone(pkt)}
		if o.Flags != nil {
			switch o.Flags.Direction {
			case pcapgo.NgEpbFlagDirectionInbound:
				rec.Dir = DirIn
			case pcapgo.NgEpbFlagDirectionOutbound:
				rec.Dir = DirOut
			}
			if rec.Dir != DirUnknown {
				c.HasDirection = true
			}
		}
		if o.DropCount != nil {
			rec.Lost = *o.DropCount
		}
		c.Records = append(c.Records, rec)
	}
	for i := range r.NInterfaces() {
		ni, err := r.Interface(i)
		if err != nil {
			return &FormatError{Path: name, Offset: -1, Detail: fmt.Sprintf("interface %d", i), Err: err}
		}
		intf := Interface{Index: i, Name: ni.Name, Description: ni.Description, LinkType: ni.LinkType}
		parseDescription(&intf)
		if s, ok := stats[i]; ok {
			intf.Start, intf.Received, intf.Dropped, intf.HasStats = s.StartTime, s.PacketsReceived, s.PacketsDropped, true
		}
		c.Interfaces = append(c.Interfaces, intf)
	}
	for i := range c.Records {
		if c.Records[i].Iface >= len(c.Interfaces) {
			return &FormatError{Path: name, Offset: c.Records[i].Offset, Detail: fmt.Sprintf("frame %d names interface %d, the section has %d (multi-section files are not supported)", c.Records[i].N, c.Records[i].Iface, len(c.Interfaces))}
		}
		c.Interfaces[c.Records[i].Iface].CaptureLost += c.Records[i].Lost
	}
	return nil
}

func at(offsets []int64, k int, def int64) int64 {
	if k < len(offsets) {
		return offsets[k]
	}
	return def
}

// descRE matches the interface description capture.Wrap writes.
var descRE = regexp.MustCompile(`^rbcast node (\S+) on (.*) \(([0-9a-fA-F:]{17}), MTU (\d+)\)$`)

func parseDescription(i *Interface) {
	m := descRE.FindStringSubmatch(i.Description)
	if m == nil {
		return
	}
	mac, err := net.ParseMAC(m[3])
	if err != nil || len(mac) != 6 {
		return
	}
	i.Node = m[1]
	i.MAC = [6]byte(mac)
	i.MTU, _ = strconv.Atoi(m[4])
}

// errLinkType is the decode error of frames on a link type we cannot read.
var errLinkType = errors.New("not an Ethernet link type")

func (r *Record) decode(etherType uint16) {
	eth, body, err := frame.SplitEthernet(r.Data, etherType)
	if err != nil {
		r.Err = err
		return
	}
	r.Src, r.Dst = eth.Src(), eth.Dst()
	v, err := frame.Parse(body)
	if err != nil {
		r.Err = err
		return
	}
	r.View = v
}
