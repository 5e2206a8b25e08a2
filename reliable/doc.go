// Package reliable is rbcast's reliable broadcast over one Ethernet
// segment: every message a member sends reaches every live member of its
// group exactly once, in the promised order, although the segment drops,
// duplicates and reorders frames. It is the runtime that drives a
// protocol core over a link; the cores themselves — deterministic state
// machines with no I/O — live in packages of their own (reliable/pbp,
// reliable/seq, reliable/member) and are reached through this package
// only.
//
// # Joining a group
//
// Join starts this process's membership of a group over a link.Link and
// returns a Group: Send broadcasts a message (blocking, or returning the
// context's error, while the send window is full: that is the
// back-pressure), Recv and RecvAppend return delivered messages (or
// Config.Deliver receives them on the event loop, from the received
// frame), Events reports membership changes (a member failed, stalled,
// left; this member left or was removed), Stats and Members show the
// counters and who is live, and Close (or Leave) leaves cleanly once what
// was sent is acknowledged. One event loop goroutine per Group owns the
// core's stepper (core.Stepper): it waits on the link, steps the core,
// transmits its frames in one batch and hands out deliveries and events
// after letting go of the Group's lock, so Config.Deliver and OnEvent may
// call the Group's methods (TrySend there: a Send that waits for window
// room would wait for the loop it runs on). Send and Leave post to the
// loop: Send hands the message to the core and wakes it.
//
// Members are named either by a static list (Config.Members and Self:
// every member's id, MAC and incarnation) or by registration at Join
// (Config.Size members, exactly one of them Config.Server), after which
// every member holds the same list. A member silent for
// Config.FailureTimeout (DefaultFailureTimeout) is removed, and counts as
// having acknowledged everything; the removal is an Event, a log line and
// a counter.
//
// # Orders
//
// Config.Order chooses the guarantee:
//
//   - FIFO (the default) delivers each sender's messages in the order it
//     sent them, to every other member; different senders' messages may
//     interleave differently at different members, and a member does not
//     receive its own. It runs PBP (Auld's thesis, ch. 3) in one of two
//     repair modes, Config.Mode: PBP2, negative acknowledgements (the
//     default), or PBP1, positive ones.
//   - Total delivers one sequence, the same at every member, every
//     member's own messages included: a sequencer numbers the messages
//     (Tanenbaum, Kaashoek and Bal's broadcast, with Config.Method,
//     Resilience and Quorum choosing how messages reach the sequencer and
//     when a numbered one is delivered), and a new sequencer is elected
//     when it fails.
//
// Both orders have the same API; docs/protocols.md states each guarantee
// exactly and what lies outside it.
//
// # Driver
//
// A Driver runs a member without goroutines and without waiting: its Step
// takes the same turns as Group's event loop on whatever the link holds
// and returns the next deadline, and Propose and Leave take the caller's
// time. The simulator (testnet) binds Drivers to its endpoints to run many
// members deterministically in virtual time; IsWindowFull tells a
// Propose's back-pressure from a failure.
//
// # Files
//
// StartFiles runs the file core (reliable/files: files to every member,
// after IBRMP) over a link of its own beside a group, on a CoreLoop:
// Files.Send queues a file, Subscribe hands out the files received and
// the sender's verdicts. rbcastd's files (sendfile, recvfile, run
// -inbox) run on it; the core's types are re-exported here (FilesConfig,
// FileReport, ...).
//
// # What the link must do
//
// Any link.Link serves: it moves whole Ethernet II frames of at most
// MTU()+14 bytes to and from every other member of the segment, by
// broadcast and by unicast to a member's MAC (repair requests and
// registration answers go to one member), and receives frames of the group's EtherType (Config.EtherType,
// frame.EtherType by default) but not its own outgoing ones. The largest
// message follows from the link's MTU (Group.MaxMessage; a larger one is
// a *TooLargeError naming both sizes). Frames Recv returns may be views
// into the link's ring, valid until the next Recv: a message delivered to
// Config.Deliver is such a view. A link that can be woken (link.Waker)
// lets an idle event loop sleep until its next timer instead of polling
// every Config.MaxWait; a link that stages (link.Stager) has the loop copy
// frames into its transmit queue while a kicker goroutine has the kernel
// send them, and one that can send past that queue (link.NowSender) takes
// retransmissions first. The runtime finds these through decorators with
// link.StagerOf, link.NowSenderOf and link.WakerOf.
//
// # Adding a protocol core
//
// A core implements core.Core and is named in one table, protocols (in
// protocols.go): how its settings are checked, its shared configuration
// (hashed by registration) and how it starts. The runtime has no other
// branch on which core it drives.
package reliable
