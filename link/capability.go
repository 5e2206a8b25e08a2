package link

// A Stager is a Link whose Send comes in two halves, so that one goroutine
// fills the transmit queue while another spends the kernel's transmit time
// (link/ring's TX ring; reliable's kicker goroutine).
//
// Stage queues frames for transmission after those staged before. It
// copies them (the caller may reuse them once it returns) and waits only
// while the queue is full; it does not ask the kernel to transmit. Its n
// and errors are Send's: a frame longer than the MTU allows is refused
// with ErrFrameTooLarge after the frames before it were staged.
//
// Kick has every frame staged so far transmitted, and frames staged while
// it runs too; it returns when the kernel has taken them. It may run on
// another goroutine concurrently with Stage, Send, SendNow and other Kicks;
// a Kick that finds another one running may return at once and leave its
// frames to that one, which sends them before it returns. A frame the
// kernel refuses only at Kick is reported by Kick's error.
//
// Staged frames reach the segment in the order staged; a Send goes out
// after the frames staged before it. They are counted in Stats as sent by
// the time Kick returns.
type Stager interface {
	Link
	Stage(frames [][]byte) (n int, err error)
	Kick() error
}

// A NowSender is a Link that can send frames past the ones it has staged
// (Stager) and not yet transmitted: SendNow's frames may overtake those.
// It is for frames whose order relative to the queued ones does not matter
// and whose delay does (reliable sends retransmissions with it). Otherwise
// SendNow is Send: frames go out in order, n and errors as Send's, counted
// in Stats as sent. It may run concurrently with Stage and Kick; like
// Send, on one goroutine at a time.
type NowSender interface {
	Link
	SendNow(frames [][]byte) (n int, err error)
}

// A Waker is a Link whose waiting Recv another goroutine can end early:
// Wake makes the Recv waiting now, or the next one if none is, return 0
// and an error that matches os.ErrDeadlineExceeded without waiting for
// its deadline. Frames are never lost to a Wake: a Recv that finds frames
// returns them (and the Wake then ends the next one), and frames that land
// while a Recv is being woken are returned by the next. Wakes do not add
// up: several before one Recv end that one only. A Recv may also return
// early once after a Wake it did not see; callers treat an early return
// like any other (look at their timers, call Recv again).
//
// An event loop that sleeps in Recv while other goroutines change what it
// must do next (a Send starting a retransmission timer) sleeps until its
// next timer and is woken for the rest, instead of polling. Wake is safe
// from any goroutine, also concurrently with Recv, Send and Close.
type Waker interface {
	Link
	Wake()
}

// A CRCSealer is a Link that writes the CRC32C of every frame it sends
// itself, over the bytes it puts on the wire, and never reads the CRC of
// the frames it is given (link/auth when it encrypts: the body it sends
// is new bytes). A runtime that finds one (SealsCRC) has its cores encode
// frames without a CRC (frame.Header.SkipCRC), which the link replaces.
// SealsCRC's answer does not change while the link is open.
type CRCSealer interface {
	Link
	SealsCRC() bool
}

// SealsCRC reports whether l writes every frame's CRC itself (CRCSealer).
// It is a send-side capability, never passed through Unwrap: it is l's
// own, for a decorator above a sealing link would see, record or pass on
// frames without their CRC. A decorator that looks at the frames it sends
// (capture.Link records them) does not report it, and the cores above it
// then write the CRC as always; one that passes them on unread and
// unchanged (auth.Keyless) may report the wrapped link's answer.
func SealsCRC(l Link) bool {
	s, ok := l.(CRCSealer)
	return ok && s.SealsCRC()
}

// A Wrapper is a decorator: a Link that passes what it is asked to the
// Link Unwrap returns, observing on the way (capture.Link records frames,
// the daemon's monitor looks at their headers). See the package doc for
// how capabilities pass through a Wrapper.
type Wrapper interface {
	Link
	Unwrap() Link
}

// StagerOf returns l as a Stager if it can stage: l has Stage and Kick,
// and if l is a Wrapper, StagerOf(l.Unwrap()) holds too (a decorator
// forwards staging, it cannot provide it). The Stager returned is l
// itself, so frames staged through it pass every decorator.
func StagerOf(l Link) (Stager, bool) { return forwarded[Stager](l) }

// forwarded returns l as a T if l is one and, if l is a Wrapper, the
// link it wraps is one too by the same rule: the capabilities a decorator
// can only forward (StagerOf, NowSenderOf, LenderOf).
func forwarded[T Link](l Link) (T, bool) {
	var none T
	s, ok := l.(T)
	if !ok {
		return none, false
	}
	if w, ok := l.(Wrapper); ok {
		if _, ok := forwarded[T](w.Unwrap()); !ok {
			return none, false
		}
	}
	return s, true
}

// NowSenderOf returns l as a NowSender if it can send past its queue, by
// the rule of StagerOf.
func NowSenderOf(l Link) (NowSender, bool) { return forwarded[NowSender](l) }

// WakerOf returns the Waker that ends l's Recv: l itself, or the first
// link on the way down that decorators (Wrappers) receive through. ok is
// false if no link on the way can be woken.
func WakerOf(l Link) (w Waker, ok bool) {
	for l != nil {
		if w, ok := l.(Waker); ok {
			return w, true
		}
		u, ok := l.(Wrapper)
		if !ok {
			return nil, false
		}
		l = u.Unwrap()
	}
	return nil, false
}

// Stage is how a decorator forwards Stage to the link it wraps: l's own
// Stage if StagerOf(l) reports it, else l.Send (the frames then go out
// before Stage returns, and Kick has nothing left to do).
func Stage(l Link, frames [][]byte) (int, error) {
	if s, ok := StagerOf(l); ok {
		return s.Stage(frames)
	}
	return l.Send(frames)
}

// Kick is how a decorator forwards Kick: l's own Kick if StagerOf(l)
// reports it, else nothing (Stage sent the frames).
func Kick(l Link) error {
	if s, ok := StagerOf(l); ok {
		return s.Kick()
	}
	return nil
}

// SendNow is how a decorator forwards SendNow: l's own SendNow if
// NowSenderOf(l) reports it, else l.Send (a link that cannot send past
// its queue has none, or Stage sent through Send).
func SendNow(l Link, frames [][]byte) (int, error) {
	if s, ok := NowSenderOf(l); ok {
		return s.SendNow(frames)
	}
	return l.Send(frames)
}

// A Loan names received bytes a Lender lends past Recv: on link/ring,
// the receive ring's slot (TPACKET_V2) or block (TPACKET_V3) they lie in,
// by its sequence number. Loans only grow: a later slot or block has a
// greater one. The zero Loan is none.
type Loan uint64

// A Lender is a Link whose received frames can be kept past the next Recv
// without a copy, and handed back later: link/ring keeps the slot or
// block a lent frame lies in from the kernel until every loan of it came
// back. Its methods belong to the receiving goroutine, like Recv.
//
// Loan reports whether data, bytes of a frame the last Recv returned (or
// a part of them), can be lent, and under which Loan. It changes nothing:
// bytes copied elsewhere (a decorator's scratch buffer) are not the
// link's and are refused. Lend then takes the loans a caller decided to
// keep, once per holder, before the next Recv; a loan not taken is
// released by that Recv as always. Return ends holds, each once.
//
// The link holds at most a bounded part of its buffer on loan, so that a
// holder that never returns (a member that never acknowledges) cannot
// stop it receiving. Due reports, after Lend, the loans it needs back
// before the next Recv: every loan before before. The holder copies what
// it keeps of them elsewhere and returns them (the copies counted in the
// link's Stats.LoansCalled). Close ends every loan: lent bytes are
// invalid after it, as the last Recv's frames are.
type Lender interface {
	Link
	Loan(data []byte) (Loan, bool)
	Lend(loans []Loan)
	Return(loans []Loan)
	Due() (before Loan, ok bool)
}

// LenderOf returns l as a Lender if it can lend received frames: l has
// the methods, and if l is a Wrapper, LenderOf(l.Unwrap()) holds too.
// Unlike the other receive-side capabilities it does not pass through
// Unwrap by itself: a decorator whose frames are not the wrapped link's
// last Recv's (link/mux queues them per group) must not be lent through,
// so a decorator offers it only by forwarding the methods.
func LenderOf(l Link) (Lender, bool) { return forwarded[Lender](l) }

// LoanFrom, Lend, Return and Due are how a decorator forwards Lender to
// the link it wraps: l's own methods if LenderOf(l) reports it, else no
// loan (and nothing to lend, return or call back).
func LoanFrom(l Link, data []byte) (Loan, bool) {
	if s, ok := LenderOf(l); ok {
		return s.Loan(data)
	}
	return 0, false
}

// Lend forwards Lender.Lend (see LoanFrom).
func Lend(l Link, loans []Loan) {
	if s, ok := LenderOf(l); ok {
		s.Lend(loans)
	}
}

// Return forwards Lender.Return (see LoanFrom).
func Return(l Link, loans []Loan) {
	if s, ok := LenderOf(l); ok {
		s.Return(loans)
	}
}

// Due forwards Lender.Due (see LoanFrom).
func Due(l Link) (Loan, bool) {
	if s, ok := LenderOf(l); ok {
		return s.Due()
	}
	return 0, false
}
