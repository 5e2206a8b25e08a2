package replay

import (
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// WriteTimeline writes one line per frame: frame number, time since the
// first frame, direction, interface, sender (id.incarnation), type,
// sequence number, ack vector, payload size, flags and type-specific
// fields. Frames that did not decode show the error instead.
func WriteTimeline(w io.Writer, c *Capture) error {
	var t0 time.Time
	if len(c.Records) > 0 {
		t0 = c.Records[0].Time
	}
	fmt.Fprintf(w, "# %s: %s, %d frames, %d interfaces, first frame at %s\n", c.Path, c.Format, len(c.Records), len(c.Interfaces), t0.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "# %6s %14s %-3s %-6s %-8s %-10s %10s  %s\n", "frame", "time(s)", "dir", "iface", "sender", "type", "seq", "details")
	for i := range c.Records {
		r := &c.Records[i]
		d := r.Time.Sub(t0)
		iface := c.Interfaces[r.Iface].Label()
		if r.Err != nil {
			if _, err := fmt.Fprintf(w, "%8d %14.9f %-3s %-6s %-8s %-10s %10s  %d bytes: %v\n", r.N, d.Seconds(), r.Dir, iface, "-", "ERROR", "-", len(r.Data), r.Err); err != nil {
				return err
			}
			continue
		}
		v := r.View
		sender := fmt.Sprintf("%d.%d", v.Sender(), v.Incarnation())
		if v.Sender() == frame.NoMember {
			sender = fmt.Sprintf("-.%d", v.Incarnation())
		}
		details := Details(v)
		if r.UDPSrc.IsValid() {
			details += fmt.Sprintf(" [udp %s > %s]", r.UDPSrc, r.UDPDst)
		}
		if _, err := fmt.Fprintf(w, "%8d %14.9f %-3s %-6s %-8s %-10s %10d  %s\n", r.N, d.Seconds(), r.Dir, iface, sender, v.Type(), v.Seq(), details); err != nil {
			return err
		}
	}
	return nil
}

// Details describes a decoded frame beyond its header's identity: the ack
// vector (compact), payload size, flags and the type's body fields.
func Details(v frame.View) string {
	var b strings.Builder
	if n := v.AckCount(); n > 0 {
		fmt.Fprintf(&b, "acks@%d=[", v.AckBase())
		const show = 8
		for i := range min(n, show) {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, v.Ack(i))
		}
		if n > show {
			fmt.Fprintf(&b, " +%d", n-show)
		}
		b.WriteString("]")
	}
	if v.Group() != 0 {
		fmt.Fprintf(&b, " g%d", v.Group())
	}
	if v.ViewID() != 0 {
		fmt.Fprintf(&b, " v%d", v.ViewID())
	}
	if v.Type() == frame.SeqData {
		u := v.SeqDataUID()
		fmt.Fprintf(&b, " epoch %d safe %d held %d req %d#%d", v.SeqDataEpoch(), v.SeqDataSafe(), v.SeqDataHeld(), u.Origin, u.Seq)
	}
	if v.Type() == frame.SeqMember {
		c := v.SeqMemberChange()
		fmt.Fprintf(&b, " epoch %d safe %d held %d member %d.%d %v", c.Epoch, c.Safe, c.Held, c.Member, c.Incarnation, c.Change)
		if c.Reason != frame.ReasonNone {
			fmt.Fprintf(&b, " (%v)", c.Reason)
		}
	}
	switch v.Type() {
	case frame.Data, frame.SeqRequest, frame.SeqData, frame.Datagram:
		msgs := 0
		for it := v.Messages(); ; msgs++ {
			if _, ok := it.Next(); !ok {
				break
			}
		}
		fmt.Fprintf(&b, " %dB", len(v.Payload()))
		if msgs != 1 {
			fmt.Fprintf(&b, " (%d msgs)", msgs)
		}
	case frame.Nack:
		fmt.Fprintf(&b, " to %d want %s", v.NackTarget(), rangeList(v.NackRanges()))
	case frame.SeqRetransmit:
		fmt.Fprintf(&b, " epoch %d want %s", v.RetransmitEpoch(), rangeList(v.RetransmitRanges()))
	case frame.Start:
		ml := v.Members()
		b.WriteString(" members")
		for i := range ml.Len() {
			m := ml.At(i)
			fmt.Fprintf(&b, " %d=%v.%d", m.ID, net.HardwareAddr(m.MAC[:]), m.Incarnation)
		}
	case frame.Join:
		j := v.Join()
		fmt.Fprintf(&b, " want id %d window %d mtu %d nonce %x hash %x", j.Requested, j.Window, j.MTU, j.Nonce, j.ConfigHash)
	case frame.Welcome:
		wl := v.Welcome()
		fmt.Fprintf(&b, " assigned %d of %d nonce %x hash %x", wl.Assigned, wl.Members, wl.Nonce, wl.ConfigHash)
	case frame.SeqAccept:
		al := v.Accepts()
		fmt.Fprintf(&b, " epoch %d safe %d held %d %d accepts", v.AcceptEpoch(), v.AcceptSafe(), v.AcceptHeld(), al.Len())
		const show = 4
		for i := range min(al.Len(), show) {
			e := al.At(i)
			fmt.Fprintf(&b, " %d=%d#%d", e.Global, e.UID.Origin, e.UID.Seq)
		}
		if al.Len() > show {
			fmt.Fprintf(&b, " +%d", al.Len()-show)
		}
	case frame.SeqStatusRequest:
		// The second field is the highest global sequenced, then the safe
		// cursor (v2) and the all-held cursor (v3).
		fmt.Fprintf(&b, " epoch %d sequenced %d safe %d held %d", v.StatusEpoch(), v.StatusDelivered(), v.StatusSafe(), v.StatusHeld())
	case frame.SeqStatusReply:
		fmt.Fprintf(&b, " epoch %d delivered %d", v.StatusEpoch(), v.StatusDelivered())
	case frame.PcodeData:
		// PCODE (reliable/pcode): the ack vector is the sender's pcv.
		d := v.PcodeData()
		fmt.Fprintf(&b, " step %d global %d %v to %s %dB", d.Step, d.Global, d.Stream, pcodeTargets(d.Targets), len(d.Data))
	case frame.PcodeNack:
		n := v.PcodeNack()
		if n.Kind == frame.NackGlobal {
			fmt.Fprintf(&b, " global nack (global %d)", n.Last)
		} else {
			fmt.Fprintf(&b, " %v nack to %d %v after %d", n.Kind, n.Target, n.Stream, n.Last)
		}
		if n.Step != 0 {
			fmt.Fprintf(&b, " step %d", n.Step)
		}
	case frame.PcodeStatus:
		fmt.Fprintf(&b, " global %d", v.PcodeStatusGlobal())
		if e := v.PcodeStatusEcho(); e != 0 {
			fmt.Fprintf(&b, " echo %d", e)
		}
	case frame.PcodeAbort:
		a := v.PcodeAbort()
		fmt.Fprintf(&b, " abort at step %d: %v (member %d): %q", a.Step, a.Reason, a.Member, a.Text)
	case frame.FileOffer:
		// Files (reliable/files, after IBRMP): the seq is the block number
		// of FileData, the report number of FileStatus.
		o := v.FileOffer()
		fmt.Fprintf(&b, " file %d %q %dB in %d blocks of %d", o.ID, o.Name, o.Size, o.Blocks(), o.BlockSize)
		if o.Hash == ([frame.FileHashLen]byte{}) {
			fmt.Fprintf(&b, " %v in FileEnd", o.Alg)
		} else {
			fmt.Fprintf(&b, " %v %x", o.Alg, o.Hash[:8])
		}
	case frame.FileData:
		fmt.Fprintf(&b, " file %d block %d %dB", v.FileID(), v.Seq(), len(v.FileBlock()))
	case frame.FileEnd:
		id, blocks, srtt, _ := v.FileEnd()
		fmt.Fprintf(&b, " file %d end: %d blocks, srtt %dµs, awaiting [", id, blocks, srtt)
		for i, ml := 0, v.FileAwaited(); i < ml.Len(); i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, ml.At(i))
		}
		b.WriteString("]")
		if h, ok := v.FileEndHash(); ok {
			fmt.Fprintf(&b, " hash %x", h[:8]) // under the offer's algorithm
		}
	case frame.FileStatus:
		st := v.FileStatus()
		fmt.Fprintf(&b, " file %d.%d %v", st.ID, st.Incarnation, st.State)
		if st.State == frame.FileFailed {
			fmt.Fprintf(&b, " (%v)", st.Reason)
		}
		fmt.Fprintf(&b, " held %d top %d credit %d", st.Held, st.Top, st.Credit)
		if rl := v.FileMissing(); rl.Len() > 0 {
			fmt.Fprintf(&b, " missing %s", rangeList(rl))
		}
	case frame.FileGone:
		g := v.FileGone()
		fmt.Fprintf(&b, " file %d gone: %v", g.ID, g.Reason)
	case frame.SeqElection:
		e := v.Election()
		fmt.Fprintf(&b, " epoch %d %v candidate %d last %d", e.Epoch, e.Phase, e.Candidate, e.LastGlobal)
	case frame.ViewJoin:
		j := v.ViewJoin()
		fmt.Fprintf(&b, " want id %d mtu %d nonce %x hash %x", j.Requested, j.MTU, j.Nonce, j.ConfigHash)
	case frame.ViewPrepare, frame.ViewCommit:
		fmt.Fprintf(&b, " view %d from %d members", v.ViewNext(), v.ViewBase())
		ml := v.ViewMembers()
		for i := range ml.Len() {
			m := ml.At(i)
			fmt.Fprintf(&b, " %d=%v.%d", m.ID, net.HardwareAddr(m.MAC[:]), m.Incarnation)
		}
		if v.Type() == frame.ViewCommit {
			cl := v.CommitCuts()
			b.WriteString(" cuts")
			for i := range cl.Len() {
				x := cl.At(i)
				fmt.Fprintf(&b, " %d<%d(from %d, holder %d)", x.Member, x.Cut, x.From, x.Holder)
			}
			fmt.Fprintf(&b, " accepted by a majority of %d:", v.CommitBaseCount())
			for i := range ml.Len() {
				if v.CommitFromBase(i) {
					fmt.Fprintf(&b, " %d", ml.At(i).ID)
				}
			}
		}
	case frame.ViewFlush:
		fmt.Fprintf(&b, " view %d from %d to coordinator %d sent %d delivered", v.ViewNext(), v.ViewBase(), v.FlushCoord(), v.FlushSent())
		dl := v.FlushDelivered()
		for i := range dl.Len() {
			d := dl.At(i)
			fmt.Fprintf(&b, " %d<%d", d.Member, d.Next)
			switch {
			case d.Left:
				b.WriteString(" left")
			case d.Gone:
				b.WriteString(" gone")
			}
		}
	case frame.ViewRelay:
		f := v.RelayFrame()
		fmt.Fprintf(&b, " of view %d: %v from %d seq %d %dB", v.RelayBase(), f.Type(), f.Sender(), f.Seq(), len(f.Payload()))
	case frame.ViewRefuse:
		r := v.ViewRefuse()
		fmt.Fprintf(&b, " nonce %x reason %d hash %x", r.Nonce, r.Reason, r.ConfigHash)
	case frame.GroupRemove:
		fmt.Fprintf(&b, " view %d", v.RemovedView())
	case frame.ViewSuspect:
		fmt.Fprintf(&b, " suspects %v", v.Suspects())
	}
	f := v.Flags()
	for _, fl := range []struct {
		bit  frame.Flags
		name string
	}{{frame.FlagRetransmit, "RETX"}, {frame.FlagAckRequest, "ACKREQ"}, {frame.FlagBundle, "BUNDLE"}, {frame.FlagAuth, "AUTH"}} {
		if f&fl.bit != 0 {
			b.WriteString(" " + fl.name)
		}
	}
	return strings.TrimSpace(b.String())
}

// pcodeTargets lists a PCODE target bitmap's member ids.
func pcodeTargets(ts frame.Targets) string {
	var ids []string
	for i, x := range ts {
		for bit := range 8 {
			if x&(1<<bit) != 0 {
				ids = append(ids, fmt.Sprint(8*i+bit))
			}
		}
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func rangeList(rl frame.RangeList) string {
	var parts []string
	for i := range rl.Len() {
		r := rl.At(i)
		if r.First == r.Last {
			parts = append(parts, fmt.Sprint(r.First))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r.First, r.Last))
		}
	}
	return strings.Join(parts, ",")
}
