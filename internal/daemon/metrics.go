package daemon

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// MetricsHandler serves the daemon's metrics for Prometheus (the text
// format, or OpenMetrics when the scraper asks for it): every rbcastd_
// metric carries the label group; the Go runtime's (go_) and the
// process's (process_) come from client_golang's collectors.
// docs/metrics.md lists them; dist/grafana-rbcastd.json shows them.
func (d *Daemon) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{"group": strconv.FormatUint(uint64(d.cfg.Group.Group), 10)}
	prometheus.WrapRegistererWith(labels, reg).MustRegister(&collector{d: d})
	if d.files != nil {
		prometheus.WrapRegistererWith(labels, reg).MustRegister(filesCollector{d.files})
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// metric is one rbcastd_ metric without labels of its own, read from the
// status (and the group's Stats, zero before the group starts).
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s *Status, st *reliable.Stats) float64
}

func newMetric(name, help string, kind prometheus.ValueType, value func(s *Status, st *reliable.Stats) float64) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), kind, value}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// plainMetrics are the metrics of the hand-written exposition before
// client_golang (names kept), and the link's and runtime's counters.
var plainMetrics = []metric{
	newMetric("rbcastd_ready", "1 once the group has started.", gauge, func(s *Status, _ *reliable.Stats) float64 { return b2f(s.Ready) }),
	newMetric("rbcastd_self", "This member's id (-1 before the group starts).", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Self) }),
	newMetric("rbcastd_accepted_total", "Messages accepted from local clients.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Accepted) }),
	newMetric("rbcastd_sent_messages_total", "Messages proposed to the group.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Sent) }),
	newMetric("rbcastd_delivered_messages_total", "Messages delivered from other members (under -order total, every member's, this one's included).", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Delivered) }),
	newMetric("rbcastd_data_frames_sent_total", "Data frames sent (first transmissions).", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.DataFrames) }),
	newMetric("rbcastd_retransmissions_total", "Data frames sent again.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Retransmissions) }),
	newMetric("rbcastd_nacks_sent_total", "Negative acknowledgements (repair requests) sent.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.NacksSent) }),
	newMetric("rbcastd_nacks_received_total", "Negative acknowledgements addressed to this member.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.NacksReceived) }),
	newMetric("rbcastd_in_flight_frames", "Frames sent and not yet acknowledged by every live member.", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.InFlight) }),
	newMetric("rbcastd_pending_frames", "Frames accepted and waiting for send window room.", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Pending) }),
	newMetric("rbcastd_window_frames", "The send window (FIFO).", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Window) }),
	newMetric("rbcastd_unsettled_messages", "This member's messages not yet held by every live member (what a flush waits for).", gauge, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Protocol.Unsettled) }),
	newMetric("rbcastd_queued_messages", "Delivered messages waiting for the fan-out to local readers.", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Queued) }),
	newMetric("rbcastd_held_data_frames_total", "Data frames left unstepped because local readers were slow.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.HeldData) }),
	newMetric("rbcastd_repair_p50_seconds", "Median repair latency over the recent 256 repairs (deprecated: use the histogram rbcastd_repair_latency_seconds).", gauge, func(s *Status, _ *reliable.Stats) float64 { return s.RepairP50ms / 1000 }),
	newMetric("rbcastd_repair_p99_seconds", "99th percentile repair latency over the recent 256 repairs (deprecated: use the histogram rbcastd_repair_latency_seconds).", gauge, func(s *Status, _ *reliable.Stats) float64 { return s.RepairP99ms / 1000 }),
	newMetric("rbcastd_kernel_drops_total", "Frames the kernel dropped because the daemon did not read fast enough.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.KernelDrops) }),
	newMetric("rbcastd_bad_frames_total", "Received frames dropped as undecodable (rbcastd_dropped_frames_total says why).", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.BadFrames) }),
	newMetric("rbcastd_clients", "Connected local API clients.", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Clients) }),
	newMetric("rbcastd_subscribers", "Local readers subscribed to deliveries.", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Subscribers) }),
	newMetric("rbcastd_epoch", "The sequencer's epoch (-order total).", gauge, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Epoch) }),
	newMetric("rbcastd_foreign_group_frames_total", "Frames of another group that reached the protocol (none with the kernel group filter: docs/groups.md).", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.ForeignGroupFrames) }),
	newMetric("rbcastd_link_frames_received_total", "Frames the link returned.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.FramesReceived) }),
	newMetric("rbcastd_link_frames_sent_total", "Frames the link sent.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.FramesSent) }),
	newMetric("rbcastd_link_received_bytes_total", "Bytes of the frames the link returned.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.BytesReceived) }),
	newMetric("rbcastd_link_sent_bytes_total", "Bytes of the frames the link sent.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.BytesSent) }),
	newMetric("rbcastd_link_kernel_packets_total", "Frames the kernel queued for the daemon's socket (with the group filter, its group's only).", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.KernelPackets) }),
	newMetric("rbcastd_link_kernel_freezes_total", "Times the kernel froze the receive ring for want of a free block (TPACKET_V3).", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.KernelFreezes) }),
	newMetric("rbcastd_link_filtered_total", "Frames the link dropped itself (wrong EtherType or group, runts).", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.Filtered) }),
	newMetric("rbcastd_link_spin_hits_total", "Waits for a frame that the ring's receive spin ended with one (-spin).", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.SpinHits) }),
	newMetric("rbcastd_link_spin_misses_total", "Receive spins of the ring that ended without a frame, after which it slept.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.SpinMisses) }),
	newMetric("rbcastd_link_spin_skips_total", "Waits for a frame that slept at once: the ring's adaptive spin (-spin-adapt) was off.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.SpinSkips) }),
	newMetric("rbcastd_link_send_retries_total", "Sends that met back-pressure and were retried.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.Link.SendRetries) }),
	newMetric("rbcastd_retransmissions_sent_now_total", "Retransmissions sent past the link's transmit queue.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.RetransmitsSentNow) }),
	newMetric("rbcastd_membership_events_lost_total", "Membership events the runtime's event channel could not hold.", counter, func(_ *Status, st *reliable.Stats) float64 { return float64(st.EventsLost) }),
	newMetric("rbcastd_rejoins_total", "Times the group went on without this daemon (-membership views: removed, a losing component, a minority) and it joined again as a new incarnation.", counter, func(s *Status, _ *reliable.Stats) float64 { return float64(s.Rejoins) }),
	newMetric("rbcastd_view_changes_total", "Changes of the membership. Under -membership views: every view this daemon installed after its first, whatever changed (a join, a rejoin, this daemon's own included, a failure, a leave), counted on across its rejoins. Otherwise: removals of members (failed, stalled, left) and readmissions (-order total).", counter, viewChanges),
}

// Labelled metrics.
var (
	descInfo          = prometheus.NewDesc("rbcastd_group_info", "The group's configuration: delivery order, repair protocol, wire protocol version (value 1).", []string{"order", "mode", "protocol_version"}, nil)
	descMemberState   = prometheus.NewDesc("rbcastd_member_state", "Member state: 0 dead, 1 suspected, 2 alive.", []string{"member"}, nil)
	descMembers       = prometheus.NewDesc("rbcastd_members", "Members in each state (alive, suspected, dead).", []string{"state"}, nil)
	descMemberBytes   = prometheus.NewDesc("rbcastd_member_delivered_bytes_total", "Bytes delivered from each member.", []string{"member"}, nil)
	descMemberMsgs    = prometheus.NewDesc("rbcastd_member_delivered_messages_total", "Messages delivered from each member.", []string{"member"}, nil)
	descMemberGaps    = prometheus.NewDesc("rbcastd_member_gaps_repaired_total", "Gaps in each member's stream detected and filled (under -order total: in the global order, counted against the sequencer).", []string{"member"}, nil)
	descRepairLatency = prometheus.NewDesc("rbcastd_repair_latency_seconds", "Repair latency: from detecting a gap in a sender's stream to filling it.", []string{"sender"}, nil)
	descSelfDelivery  = prometheus.NewDesc("rbcastd_self_delivery_latency_seconds", "Delivery latency of this member's own messages under -order total: from the group accepting one to its delivery back here, in its place of the total order.", nil, nil)
	descPairNacks     = prometheus.NewDesc("rbcastd_pair_nacks_total", "Repair requests (NACKs; under -order total, retransmission requests to the sequencer) from receiver to sender, as this member sent or received them.", []string{"sender", "receiver"}, nil)
	descPairRetx      = prometheus.NewDesc("rbcastd_pair_retransmitted_frames_total", "Frames retransmitted from sender to receiver (receiver \"all\": to the whole group), as this member sent or received them.", []string{"sender", "receiver"}, nil)
	descAuthDropped   = prometheus.NewDesc("rbcastd_auth_dropped_frames_total", "Frames dropped by authentication (-key-file), by reason: unauthenticated, algorithm, unknown_key, bad_tag, replay, too_old, earlier_incarnation, own.", []string{"reason"}, nil)
	descAuthVerified  = prometheus.NewDesc("rbcastd_auth_verified_frames_total", "Frames whose authentication tag verified (-key-file).", nil, nil)
	descEvents        = prometheus.NewDesc("rbcastd_membership_events_total", "Membership events by kind (failed, stalled, left, returned; self left; sequencer failed, sequencer changed; self removed; join refused; view installed; group removed; other: a kind this daemon does not name).", []string{"kind"}, nil)
	descAckLag        = prometheus.NewDesc("rbcastd_ack_lag_frames", "Frames member holds fewer of sender's stream than the sender's last, as this member last heard their acknowledgements (the acknowledgement matrix; live members only).", []string{"member", "sender"}, nil)
	descDropped       = prometheus.NewDesc("rbcastd_dropped_frames_total", "Received frames dropped before the protocol, by reason.", []string{"reason"}, nil)
	descView          = prometheus.NewDesc("rbcastd_view", "The installed view's id (-membership views; a fixed group: 0). Absent before the group starts and while this daemon joins again.", nil, nil)
	descViewMembers   = prometheus.NewDesc("rbcastd_view_members", "The installed view's members (-membership views; a fixed group: its size, the dead included). Absent before the group starts and while this daemon joins again.", nil, nil)
)

// collector reads the daemon at each scrape.
type collector struct{ d *Daemon }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range plainMetrics {
		ch <- m.desc
	}
	for _, d := range []*prometheus.Desc{descInfo, descMemberState, descMembers, descMemberBytes, descMemberMsgs, descMemberGaps,
		descRepairLatency, descSelfDelivery, descPairNacks, descPairRetx, descEvents, descDropped, descAckLag, descAuthDropped, descAuthVerified, descView, descViewMembers} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s, st, g := c.d.status()
	ready := g != nil
	for _, m := range plainMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&s, &st))
	}
	ch <- prometheus.MustNewConstMetric(descInfo, gauge, 1, s.Order, s.Mode, strconv.Itoa(frame.Version))
	states := map[string]int{StateAlive: 0, StateSuspected: 0, StateDead: 0}
	for _, m := range s.Members {
		id := strconv.Itoa(m.ID)
		v := 2.0
		switch m.State {
		case StateDead:
			v = 0
		case StateSuspected:
			v = 1
		}
		states[m.State]++
		ch <- prometheus.MustNewConstMetric(descMemberState, gauge, v, id)
		if !m.Self || st.Order == reliable.Total {
			ch <- prometheus.MustNewConstMetric(descMemberBytes, counter, float64(m.DeliveredBytes), id)
		}
	}
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(descMembers, gauge, float64(n), state)
	}
	switch {
	case st.View != nil:
		ch <- prometheus.MustNewConstMetric(descView, gauge, float64(st.View.ID))
		ch <- prometheus.MustNewConstMetric(descViewMembers, gauge, float64(len(st.View.Members)))
	case ready && !c.d.cfg.Group.Views:
		// A fixed group (registered or static) has one view, its members
		// fixed when it started.
		ch <- prometheus.MustNewConstMetric(descView, gauge, 0)
		ch <- prometheus.MustNewConstMetric(descViewMembers, gauge, float64(len(s.Members)))
	}
	for _, m := range st.Members {
		id := strconv.Itoa(int(m.ID))
		ch <- prometheus.MustNewConstMetric(descMemberMsgs, counter, float64(m.Delivered), id)
		ch <- prometheus.MustNewConstMetric(descMemberGaps, counter, float64(m.Repairs), id)
	}
	for _, l := range s.AckLag {
		sender := strconv.Itoa(l.Sender)
		for _, m := range l.Members {
			ch <- prometheus.MustNewConstMetric(descAckLag, gauge, float64(m.Behind), strconv.Itoa(m.Member), sender)
		}
	}
	b := st.BadFrames
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"not_rbcast", b.NotRbcast}, {"short", b.Short}, {"length", b.Length}, {"version", b.Version}, {"type", b.Type},
		{"flags", b.Flags}, {"group", b.Group}, {"checksum", b.Checksum}, {"ack_vector", b.AckVector}, {"auth", b.Auth},
		{"body", b.Body}, {"other", b.Other}} {
		ch <- prometheus.MustNewConstMetric(descDropped, counter, float64(r.n), r.reason)
	}
	if a := st.Auth; a != nil {
		dropped := authStatus(a).Dropped
		for _, r := range AuthReasons {
			ch <- prometheus.MustNewConstMetric(descAuthDropped, counter, float64(dropped[r]), r)
		}
		ch <- prometheus.MustNewConstMetric(descAuthVerified, counter, float64(a.Verified))
	}
	for k, n := range st.EventCounts {
		if n > 0 {
			ch <- prometheus.MustNewConstMetric(descEvents, counter, float64(n), eventKindLabel(k))
		}
	}
	var lat reliable.Latencies
	if ready {
		lat = g.Latencies()
	}
	for _, p := range lat.Peers {
		if int(p.ID) == s.Self && st.Order != reliable.Total {
			continue // nothing to repair from itself
		}
		ch <- histogram(descRepairLatency, &p.Repair, strconv.Itoa(int(p.ID)))
	}
	ch <- histogram(descSelfDelivery, &lat.SelfDelivery)
	if ready {
		nacks, retx := c.d.watch.wire.pairs(s.Self)
		for _, p := range nacks {
			ch <- prometheus.MustNewConstMetric(descPairNacks, counter, float64(p.N), strconv.Itoa(p.Sender), strconv.Itoa(p.Receiver))
		}
		for _, p := range retx {
			rcv := "all"
			if p.Receiver >= 0 {
				rcv = strconv.Itoa(p.Receiver)
			}
			ch <- prometheus.MustNewConstMetric(descPairRetx, counter, float64(p.N), strconv.Itoa(p.Sender), rcv)
		}
	}
}

// histogram converts a reliable.Histogram into a Prometheus one, in
// seconds.
func histogram(desc *prometheus.Desc, h *reliable.Histogram, labels ...string) prometheus.Metric {
	bounds := reliable.LatencyBounds()
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		cum += h.Counts[i]
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(desc, h.Count(), float64(h.Sum)/1e9, buckets, labels...)
}

// viewChanges is rbcastd_view_changes_total: under views every view
// installed here after the first, over every membership; otherwise the
// events that change the set of live members.
func viewChanges(s *Status, st *reliable.Stats) float64 {
	if s.Membership == "views" {
		return float64(max(s.ViewsInstalled-1, 0))
	}
	c := &st.EventCounts
	return float64(c[reliable.MemberFailed] + c[reliable.MemberStalled] + c[reliable.MemberLeft] + c[reliable.MemberReturned])
}

// eventKindLabel is the kind label of Stats.EventCounts[k]: the kind's
// name, or "other" for bucket 0, which counts the kinds reliable does
// not name.
func eventKindLabel(k int) string {
	if k == 0 {
		return "other"
	}
	return reliable.EventKind(k).String()
}
