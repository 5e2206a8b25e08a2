-- Wireshark/tshark dissector for rbcast, wire format version 4 (with PCODE, 0x30-0x33,
-- and files after IBRMP, 0x40-0x44).
--
-- The format is specified in docs/wire-format.md (the authority; this file
-- follows it field by field) and implemented in frame/. Every field of
-- every frame type is decoded; the CRC-32C is checked; bad lengths, bad
-- CRCs, unknown versions, types and critical flags, and malformed bodies
-- get expert info, so `tshark -z expert` lists them.
--
-- rbcast over UDP (link/udp, docs/udp.md): each datagram carries one whole
-- Ethernet frame. Datagrams whose payload looks like one of ours (our
-- EtherType, or the link's hello EtherType 0x88B6, and a Length field
-- that matches the payload) are found by a heuristic on ports no other
-- dissector claims; preference "UDP port" names the group's port outright
-- (tshark -o rbcast.udp_port:7000: needed on a port Wireshark knows, such
-- as 7000, AFS's), and "udp_heuristic" turns the heuristic off.
--
-- Use:
--   wireshark -X lua_script:capture/wireshark/rbcast.lua capture.pcapng
--   tshark -X lua_script:capture/wireshark/rbcast.lua -r capture.pcapng -V
-- or copy it to ~/.local/lib/wireshark/plugins/. Runs on Lua 5.2 (the
-- Wireshark 3.x/4.0 builds, which have bit32) and on Lua 5.3/5.4 (native
-- bit operators).

local rbcast = Proto("rbcast", "rbcast reliable broadcast")

local HEADER_LEN = 28
local CRC_LEN = 4
local OVERHEAD = HEADER_LEN + CRC_LEN
local MAX_AUTH_TAG = 64
local AUTH_FIXED = 11
local DEFAULT_ETHERTYPE = 0x88b5

local type_names = {
	[0x01] = "Data", [0x02] = "Ack", [0x03] = "Nack", [0x04] = "Join",
	[0x05] = "Welcome", [0x06] = "Start", [0x07] = "Leave", [0x08] = "Heartbeat",
	[0x10] = "SeqRequest", [0x11] = "SeqData", [0x12] = "SeqAccept",
	[0x13] = "SeqStatusRequest", [0x14] = "SeqStatusReply",
	[0x15] = "SeqRetransmit", [0x16] = "SeqElection", [0x17] = "SeqMember",
	[0x20] = "ViewJoin", [0x21] = "ViewPrepare", [0x22] = "ViewFlush", [0x23] = "ViewCommit",
	[0x24] = "ViewRelay", [0x25] = "ViewRefuse", [0x26] = "GroupRemove", [0x27] = "ViewSuspect", [0x28] = "Datagram",
	[0x38] = "KeyMismatch",
	[0x30] = "PcodeData", [0x31] = "PcodeNack", [0x32] = "PcodeStatus", [0x33] = "PcodeAbort",
	[0x40] = "FileOffer", [0x41] = "FileData", [0x42] = "FileEnd", [0x43] = "FileStatus", [0x44] = "FileGone",
}
local file_state_names = { [1] = "needs offer", [2] = "receiving", [3] = "done", [4] = "failed" }
local file_reason_names = {
	[0] = "none", [1] = "storage failed", [2] = "hash mismatch", [3] = "closed by the sender",
	[4] = "aborted by the sender", [5] = "unknown to the sender", [6] = "hash algorithm unknown to the receiver",
	[7] = "declined by the receiver", [8] = "blocks larger than the receiver's MTU",
	[9] = "larger than the receiver takes", [10] = "no room on the receiver's disk",
	[11] = "name too long for the receiver's file system", [12] = "larger than the receiver's file system allows",
	[13] = "name not a local file path at the receiver",
}
local file_hash_alg_names = { [1] = "sha256", [2] = "blake3" }
local refuse_names = { [1] = "configuration differs", [2] = "group full", [3] = "group removed" }
local stream_names = { [0] = "broadcast", [1] = "point-to-point" }
local nack_kind_names = { [1] = "request", [2] = "personal", [3] = "global" }
local abort_names = { [1] = "member silent", [2] = "calls do not match (A1)", [3] = "program stopped" }
local phase_names = { [1] = "call", [2] = "vote", [3] = "elected" }
local change_names = { [1] = "removed", [2] = "readmitted" }
local reason_names = {
	[0] = "none", [1] = "silent past the failure timeout",
	[2] = "did not vote in the election", [3] = "the sequencer before, replaced",
}
local crc_status_names = { [0] = "Bad", [1] = "Good" }

local f = {
	version = ProtoField.uint8("rbcast.version", "Version", base.DEC),
	type = ProtoField.uint8("rbcast.type", "Type", base.HEX, type_names),
	flags = ProtoField.uint16("rbcast.flags", "Flags", base.HEX),
	flag_auth = ProtoField.bool("rbcast.flags.auth", "AUTH (authentication section present)", 16, nil, 0x0001),
	flag_bundle = ProtoField.bool("rbcast.flags.bundle", "BUNDLE (several length-prefixed messages)", 16, nil, 0x0002),
	flag_crit_reserved = ProtoField.uint16("rbcast.flags.critical_reserved", "Reserved critical bits", base.HEX, nil, 0x00fc),
	flag_retransmit = ProtoField.bool("rbcast.flags.retransmit", "RETRANSMIT", 16, nil, 0x0100),
	flag_ack_request = ProtoField.bool("rbcast.flags.ack_request", "ACK_REQUEST", 16, nil, 0x0200),
	flag_hash_alg = ProtoField.bool("rbcast.flags.hash_alg", "HASH_ALG (a FileStatus: reads the offer's hash algorithm)", 16, nil, 0x0400),
	flag_adv_reserved = ProtoField.uint16("rbcast.flags.advisory_reserved", "Reserved advisory bits", base.HEX, nil, 0xf800),
	length = ProtoField.uint16("rbcast.length", "Length", base.DEC),
	sender = ProtoField.uint16("rbcast.sender", "Sender", base.DEC),
	group = ProtoField.uint32("rbcast.group", "Group", base.DEC),
	incarnation = ProtoField.uint32("rbcast.incarnation", "Incarnation", base.DEC),
	view = ProtoField.uint32("rbcast.view", "View", base.DEC),
	seq = ProtoField.uint32("rbcast.seq", "Seq", base.DEC),
	ack_base = ProtoField.uint16("rbcast.ack_base", "Ack base", base.DEC),
	ack_count = ProtoField.uint16("rbcast.ack_count", "Ack count", base.DEC),
	ack = ProtoField.uint32("rbcast.ack", "Expected seq", base.DEC),
	ack_member = ProtoField.uint16("rbcast.ack.member", "Member", base.DEC),
	auth_algorithm = ProtoField.uint8("rbcast.auth.algorithm", "Algorithm", base.DEC),
	auth_length = ProtoField.uint8("rbcast.auth.length", "Tag length", base.DEC),
	auth_key = ProtoField.uint8("rbcast.auth.key", "Key id", base.DEC),
	auth_counter = ProtoField.uint64("rbcast.auth.counter", "Counter", base.DEC),
	auth_tag = ProtoField.bytes("rbcast.auth.tag", "Tag"),
	body = ProtoField.bytes("rbcast.body", "Body"),
	payload = ProtoField.bytes("rbcast.payload", "Payload"),
	msg_count = ProtoField.uint16("rbcast.bundle.count", "Messages", base.DEC),
	msg_length = ProtoField.uint16("rbcast.msg.length", "Message length", base.DEC),
	msg = ProtoField.bytes("rbcast.msg", "Message"),
	nack_target = ProtoField.uint16("rbcast.nack.target", "Target", base.DEC),
	range_count = ProtoField.uint16("rbcast.range_count", "Ranges", base.DEC),
	range_first = ProtoField.uint32("rbcast.range.first", "First", base.DEC),
	range_last = ProtoField.uint32("rbcast.range.last", "Last", base.DEC),
	join_requested = ProtoField.uint16("rbcast.join.requested", "Requested id", base.DEC),
	join_window = ProtoField.uint16("rbcast.join.window", "Window", base.DEC),
	join_mtu = ProtoField.uint32("rbcast.join.mtu", "MTU", base.DEC),
	join_nonce = ProtoField.uint64("rbcast.join.nonce", "Nonce", base.HEX),
	join_config = ProtoField.uint64("rbcast.join.config_hash", "Config hash", base.HEX),
	welcome_nonce = ProtoField.uint64("rbcast.welcome.nonce", "Nonce", base.HEX),
	welcome_assigned = ProtoField.uint16("rbcast.welcome.assigned", "Assigned id", base.DEC),
	welcome_members = ProtoField.uint16("rbcast.welcome.members", "Members", base.DEC),
	welcome_config = ProtoField.uint64("rbcast.welcome.config_hash", "Config hash", base.HEX),
	start_count = ProtoField.uint16("rbcast.start.count", "Members", base.DEC),
	member_id = ProtoField.uint16("rbcast.member.id", "Id", base.DEC),
	member_mac = ProtoField.ether("rbcast.member.mac", "MAC"),
	member_incarnation = ProtoField.uint32("rbcast.member.incarnation", "Incarnation", base.DEC),
	epoch = ProtoField.uint32("rbcast.epoch", "Epoch", base.DEC),
	origin = ProtoField.uint16("rbcast.origin", "Origin", base.DEC),
	origin_incarnation = ProtoField.uint32("rbcast.origin.incarnation", "Origin incarnation", base.DEC),
	origin_seq = ProtoField.uint32("rbcast.origin.seq", "Origin seq", base.DEC),
	accept_count = ProtoField.uint16("rbcast.accept.count", "Accepts", base.DEC),
	accept_global = ProtoField.uint32("rbcast.accept.global", "Global seq", base.DEC),
	status_sequenced = ProtoField.uint32("rbcast.status.sequenced", "Highest sequenced", base.DEC),
	safe = ProtoField.uint32("rbcast.safe", "Safe cursor", base.DEC),
	held = ProtoField.uint32("rbcast.held", "All-held cursor", base.DEC),
	member_change = ProtoField.uint8("rbcast.member.change", "Change", base.DEC, change_names),
	member_reason = ProtoField.uint8("rbcast.member.reason", "Reason", base.DEC, reason_names),
	status_delivered = ProtoField.uint32("rbcast.status.delivered", "Highest delivered in order", base.DEC),
	election_phase = ProtoField.uint8("rbcast.election.phase", "Phase", base.DEC, phase_names),
	election_reserved = ProtoField.uint8("rbcast.election.reserved", "Reserved", base.DEC),
	election_candidate = ProtoField.uint16("rbcast.election.candidate", "Candidate", base.DEC),
	election_last_global = ProtoField.uint32("rbcast.election.last_global", "Last global", base.DEC),
	view_next = ProtoField.uint32("rbcast.view.next", "Next view", base.DEC),
	view_base = ProtoField.uint32("rbcast.view.base", "Base view", base.DEC),
	view_count = ProtoField.uint16("rbcast.view.members", "Members", base.DEC),
	flush_coord = ProtoField.uint16("rbcast.flush.coord", "Coordinator", base.DEC),
	flush_sent = ProtoField.uint32("rbcast.flush.sent", "Sent", base.DEC),
	flush_count = ProtoField.uint16("rbcast.flush.count", "Senders", base.DEC),
	flush_member = ProtoField.uint16("rbcast.flush.member", "Sender", base.DEC),
	flush_gone = ProtoField.uint8("rbcast.flush.gone", "Gone here", base.DEC, nil, 0x01),
	flush_left = ProtoField.uint8("rbcast.flush.left", "Left cleanly", base.DEC, nil, 0x02),
	flush_delivered = ProtoField.uint32("rbcast.flush.delivered", "Next to deliver", base.DEC),
	cut_count = ProtoField.uint16("rbcast.cut.count", "Cuts", base.DEC),
	cut_member = ProtoField.uint16("rbcast.cut.member", "Sender", base.DEC),
	cut_seq = ProtoField.uint32("rbcast.cut.cut", "Cut", base.DEC),
	cut_holder = ProtoField.uint16("rbcast.cut.holder", "Holder", base.DEC),
	cut_from = ProtoField.uint32("rbcast.cut.from", "From", base.DEC),
	commit_base_count = ProtoField.uint16("rbcast.commit.base_count", "Base members counted", base.DEC),
	commit_from_base = ProtoField.uint16("rbcast.commit.from_base", "Counts for the base", base.DEC),
	relay_base = ProtoField.uint32("rbcast.relay.base", "Base view", base.DEC),
	relay_frame = ProtoField.bytes("rbcast.relay.frame", "Relayed frame"),
	refuse_nonce = ProtoField.uint64("rbcast.refuse.nonce", "Nonce", base.HEX),
	refuse_reason = ProtoField.uint8("rbcast.refuse.reason", "Reason", base.DEC, refuse_names),
	refuse_config = ProtoField.uint64("rbcast.refuse.config_hash", "Config hash", base.HEX),
	removed_view = ProtoField.uint32("rbcast.remove.view", "View", base.DEC),
	suspect_count = ProtoField.uint16("rbcast.suspect.count", "Suspects", base.DEC),
	suspect_member = ProtoField.uint16("rbcast.suspect.member", "Suspect", base.DEC),
	mismatch_reason = ProtoField.uint8("rbcast.mismatch.reason", "Reason", base.DEC, { [1] = "the group uses another key", [2] = "the group requires a key" }),
	mismatch_refused = ProtoField.uint8("rbcast.mismatch.refused", "Refused frame type", base.DEC),
	mismatch_fingerprint = ProtoField.uint64("rbcast.mismatch.fingerprint", "Key fingerprint", base.HEX),
	pcode_step = ProtoField.uint64("rbcast.pcode.step", "Program step", base.DEC),
	pcode_global = ProtoField.uint32("rbcast.pcode.global", "GlobalCounter", base.DEC),
	pcode_stream = ProtoField.uint8("rbcast.pcode.stream", "Stream", base.DEC, stream_names),
	pcode_reserved = ProtoField.uint8("rbcast.pcode.reserved", "Reserved", base.DEC),
	pcode_targets_length = ProtoField.uint16("rbcast.pcode.targets_length", "Target bitmap length", base.DEC),
	pcode_target = ProtoField.uint16("rbcast.pcode.target", "Target", base.DEC),
	pcode_nack_kind = ProtoField.uint8("rbcast.pcode.nack.kind", "NACK kind", base.DEC, nack_kind_names),
	pcode_source = ProtoField.uint16("rbcast.pcode.source", "Source", base.DEC),
	pcode_last = ProtoField.uint32("rbcast.pcode.last", "Last received (LastRcvd)", base.DEC),
	pcode_echo = ProtoField.uint32("rbcast.pcode.echo", "Probe echo", base.DEC),
	pcode_point_base = ProtoField.uint16("rbcast.pcode.point_base", "Point-to-point base", base.DEC),
	pcode_point_count = ProtoField.uint16("rbcast.pcode.point_count", "Point-to-point entries", base.DEC),
	pcode_point = ProtoField.uint32("rbcast.pcode.point", "Point-to-point received", base.DEC),
	pcode_abort_reason = ProtoField.uint8("rbcast.pcode.abort.reason", "Reason", base.DEC, abort_names),
	pcode_member = ProtoField.uint16("rbcast.pcode.member", "Member", base.DEC),
	pcode_text_length = ProtoField.uint16("rbcast.pcode.text_length", "Text length", base.DEC),
	pcode_text = ProtoField.string("rbcast.pcode.text", "Text"),
	file_id = ProtoField.uint32("rbcast.file.id", "File id", base.DEC),
	file_size = ProtoField.uint64("rbcast.file.size", "Size", base.DEC),
	file_block_size = ProtoField.uint32("rbcast.file.block_size", "Block size", base.DEC),
	file_stamp = ProtoField.uint32("rbcast.file.stamp", "Stamp (sender's µs)", base.DEC),
	file_hash = ProtoField.bytes("rbcast.file.hash", "Hash (the offer's algorithm)"),
	file_hash_alg = ProtoField.uint8("rbcast.file.hash_alg", "Hash algorithm", base.DEC, file_hash_alg_names),
	file_name_length = ProtoField.uint16("rbcast.file.name_length", "Name length", base.DEC),
	file_name = ProtoField.string("rbcast.file.name", "Name"),
	file_blocks = ProtoField.uint32("rbcast.file.blocks", "Blocks", base.DEC),
	file_srtt = ProtoField.uint32("rbcast.file.srtt", "Sender's smoothed RTT (µs)", base.DEC),
	file_awaited_count = ProtoField.uint16("rbcast.file.awaited_count", "Awaited receivers", base.DEC),
	file_awaited = ProtoField.uint16("rbcast.file.awaited", "Awaited", base.DEC),
	file_incarnation = ProtoField.uint32("rbcast.file.incarnation", "Sender's incarnation", base.DEC),
	file_state = ProtoField.uint8("rbcast.file.state", "State", base.DEC, file_state_names),
	file_reason = ProtoField.uint8("rbcast.file.reason", "Reason", base.DEC, file_reason_names),
	file_credit = ProtoField.uint16("rbcast.file.credit", "Credit (repair frames)", base.DEC),
	file_held = ProtoField.uint32("rbcast.file.held", "Blocks held", base.DEC),
	file_top = ProtoField.uint32("rbcast.file.top", "Top (one past the highest block seen)", base.DEC),
	file_echo = ProtoField.uint32("rbcast.file.echo", "Echoed stamp", base.DEC),
	file_delay = ProtoField.uint32("rbcast.file.delay", "Held the stamp for (µs)", base.DEC),
	padding = ProtoField.bytes("rbcast.padding", "Bytes after the frame"),
	crc = ProtoField.uint32("rbcast.crc32c", "CRC-32C", base.HEX),
	crc_computed = ProtoField.uint32("rbcast.crc32c.computed", "Computed CRC-32C", base.HEX),
	crc_status = ProtoField.uint8("rbcast.crc32c.status", "CRC-32C status", base.DEC, crc_status_names),
}
local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
rbcast.fields = field_list

local e = {
	short = ProtoExpert.new("rbcast.short", "Frame shorter than the 32-byte header and CRC", expert.group.MALFORMED, expert.severity.ERROR),
	version = ProtoExpert.new("rbcast.version.unsupported", "Unsupported version (receivers drop it)", expert.group.PROTOCOL, expert.severity.WARN),
	type = ProtoExpert.new("rbcast.type.unknown", "Unknown frame type", expert.group.MALFORMED, expert.severity.ERROR),
	flags = ProtoExpert.new("rbcast.flags.unknown_critical", "Unknown critical flag (receivers drop the frame)", expert.group.PROTOCOL, expert.severity.ERROR),
	length = ProtoExpert.new("rbcast.length.bad", "Length field disagrees with the frame", expert.group.MALFORMED, expert.severity.ERROR),
	ack_vector = ProtoExpert.new("rbcast.ack_vector.bad", "Ack vector does not fit", expert.group.MALFORMED, expert.severity.ERROR),
	auth = ProtoExpert.new("rbcast.auth.bad", "Malformed authentication section", expert.group.MALFORMED, expert.severity.ERROR),
	body = ProtoExpert.new("rbcast.body.bad", "Malformed body", expert.group.MALFORMED, expert.severity.ERROR),
	crc = ProtoExpert.new("rbcast.crc32c.bad", "Bad CRC-32C", expert.group.CHECKSUM, expert.severity.ERROR),
	retransmit = ProtoExpert.new("rbcast.retransmission", "Retransmission", expert.group.SEQUENCE, expert.severity.NOTE),
}
rbcast.experts = { e.short, e.version, e.type, e.flags, e.length, e.ack_vector, e.auth, e.body, e.crc, e.retransmit }

-- The expert text is the headline (as registered) plus the detail, the way
-- frame.DecodeError reads: what is wrong, then what was found.
local headline = {
	[e.short] = "Frame shorter than the 32-byte header and CRC",
	[e.version] = "Unsupported version",
	[e.type] = "Unknown frame type",
	[e.flags] = "Unknown critical flag",
	[e.length] = "Length field disagrees with the frame",
	[e.ack_vector] = "Ack vector does not fit",
	[e.auth] = "Malformed authentication section",
	[e.body] = "Malformed body",
	[e.crc] = "Bad CRC-32C",
}
local function flag(item, ex, detail)
	item:add_proto_expert_info(ex, headline[ex] .. ": " .. detail)
end

rbcast.prefs.ethertype = Pref.uint("EtherType", DEFAULT_ETHERTYPE, "EtherType of rbcast frames (0x88B5 unless the group configures another)")
rbcast.prefs.udp_port = Pref.uint("UDP port", 0, "UDP port of rbcast over UDP (link/udp): every datagram to or from it carries an Ethernet frame (0: none; the heuristic still looks at every UDP datagram)")
rbcast.prefs.udp_heuristic = Pref.bool("Find rbcast in any UDP datagram", true, "Try every UDP datagram for an rbcast frame carried by link/udp (our EtherType and a Length that matches the datagram)")

-- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven.
-- bit32 exists in Lua 5.2; Lua 5.3+ has native operators, compiled with
-- load() so that a 5.2 parser never sees them.
local band, bxor, rshift
if bit32 then
	band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
else
	band = load("return function(a, b) return a & b end")()
	bxor = load("return function(a, b) return (a ~ b) & 0xffffffff end")()
	rshift = load("return function(a, n) return (a & 0xffffffff) >> n end")()
end

local bit_value = { 1, 2, 4, 8, 16, 32, 64, 128 }

local crc_table = {}
for i = 0, 255 do
	local c = i
	for _ = 1, 8 do
		if band(c, 1) ~= 0 then
			c = bxor(rshift(c, 1), 0x82f63b78)
		else
			c = rshift(c, 1)
		end
	end
	crc_table[i] = c
end

local function crc32c(s)
	local crc = 0xffffffff
	for i = 1, #s do
		crc = bxor(crc_table[band(bxor(crc, s:byte(i)), 0xff)], rshift(crc, 8))
	end
	return bxor(crc, 0xffffffff)
end

-- body_error adds expert info for a malformed body, naming the field and
-- its offset in the rbcast frame like frame.DecodeError does.
-- A view id pairs a number (high 24 bits) with the member id, modulo
-- 256, of the coordinator that proposed the view (low 8 bits).
local function view_id(item, v)
	if v ~= 0 then
		item:append_text(string.format(" (number %d, proposed by member %d)", math.floor(v / 256), v % 256))
	end
end

local function body_error(item, field, off, text)
	flag(item, e.body, string.format("%s at offset %d: %s", field, off, text))
end

local function add_ranges(tree, tvb, off, stop, field)
	local count = tvb(off, 2):uint()
	tree:add(f.range_count, tvb(off, 2))
	local need = 2 + count * 8
	if count == 0 or stop - off ~= need then
		body_error(tree, field, off, string.format("%d ranges need %d bytes, body has %d", count, need, stop - off))
	end
	local p = off + 2
	local i = 0
	while i < count and p + 8 <= stop do
		local first, last = tvb(p, 4):uint(), tvb(p + 4, 4):uint()
		local r = tree:add(rbcast, tvb(p, 8), string.format("Range %d: %u..%u", i, first, last))
		r:add(f.range_first, tvb(p, 4))
		r:add(f.range_last, tvb(p + 4, 4))
		-- serial-number arithmetic (RFC 1982): last before first?
		local d = (last - first) % 4294967296
		if d >= 2147483648 then
			body_error(r, field, p, string.format("range %d is %u..%u, last before first", i, first, last))
		end
		p = p + 8
		i = i + 1
	end
end

local function add_uid(tree, tvb, off)
	tree:add(f.origin, tvb(off, 2))
	tree:add(f.origin_incarnation, tvb(off + 2, 4))
	tree:add(f.origin_seq, tvb(off + 6, 4))
end

-- add_messages decodes a Data/SeqRequest/SeqData payload: one message, or a
-- bundle of length-prefixed ones.
local function add_messages(tree, tvb, off, stop, bundled)
	if stop <= off then
		if bundled then body_error(tree, "bundle", off, "empty bundle") end
		return
	end
	tree:add(f.payload, tvb(off, stop - off))
	if not bundled then return end
	local bt = tree:add(rbcast, tvb(off, stop - off), "Bundle")
	local p, i = off, 0
	while p < stop do
		if p + 2 > stop then
			body_error(bt, "bundle.length", p, "1 byte left where a 2-byte message length belongs")
			break
		end
		local n = tvb(p, 2):uint()
		if p + 2 + n > stop then
			body_error(bt, "bundle.length", p, string.format("message of %d bytes, %d left", n, stop - p - 2))
			break
		end
		local m = bt:add(rbcast, tvb(p, 2 + n), string.format("Message %d: %d bytes", i, n))
		m:add(f.msg_length, tvb(p, 2))
		if n > 0 then m:add(f.msg, tvb(p + 2, n)) end
		p = p + 2 + n
		i = i + 1
	end
	bt:add(f.msg_count, i):set_generated()
end

local fixed_body = {
	[0x04] = 24, [0x05] = 20, [0x13] = 16, [0x14] = 8, [0x16] = 12, [0x17] = 20,
	[0x20] = 22, [0x25] = 17, [0x26] = 4, [0x31] = 16, [0x38] = 10, [0x44] = 5,
	[0x02] = 0, [0x07] = 0, [0x08] = 0,
}

-- dissect_file decodes the file frames (reliable/files, after IBRMP;
-- frame/filesbody.go), checking what checkFileBody checks.
local function dissect_file(ty, name, tree, tvb, off, stop)
	local len = stop - off
	local function at_least(n, field)
		if len < n then
			body_error(tree, field, off, string.format("%s body is %d bytes, needs at least %d", name, len, n))
			if len > 0 then tree:add(f.body, tvb(off, len)) end
			return false
		end
		return true
	end
	if not at_least(4, "file") then return end
	local ii = tree:add(f.file_id, tvb(off, 4))
	if tvb(off, 4):uint() == 0 then body_error(ii, "file.id", off, "file id 0 is reserved") end
	if ty == 0x40 then
		if not at_least(54, "file.offer") then return end
		tree:add(f.file_size, tvb(off + 4, 8))
		local bi = tree:add(f.file_block_size, tvb(off + 12, 4))
		local bs = tvb(off + 12, 4):uint()
		if bs == 0 then
			body_error(bi, "file.offer.block_size", off + 12, "block size 0")
		elseif tvb(off + 4, 8):uint64() > UInt64(bs) * UInt64(0xffffffff) then
			body_error(bi, "file.offer.size", off + 4, "more blocks than 32-bit block numbers count")
		end
		tree:add(f.file_stamp, tvb(off + 16, 4))
		tree:add(f.file_hash, tvb(off + 20, 32))
		local n = tvb(off + 52, 2):uint()
		local ni = tree:add(f.file_name_length, tvb(off + 52, 2))
		if n == 0 or n > 4096 or (len ~= 54 + n and len ~= 55 + n) then
			body_error(ni, "file.offer.name", off + 52, string.format("name of %d bytes (want 1..4096), body has %d after the fixed part (the name, and the hash algorithm's byte if not SHA-256)", n, len - 54))
			return
		end
		tree:add(f.file_name, tvb(off + 54, n))
		if len == 55 + n then
			-- the hash's algorithm, when it is not SHA-256
			local a = tvb(off + 54 + n, 1):uint()
			local ai = tree:add(f.file_hash_alg, tvb(off + 54 + n, 1))
			if a == 0 or a == 1 then
				body_error(ai, "file.offer.hash_alg", off + 54 + n, string.format("hash algorithm %d (SHA-256 is an offer without the byte; 0 is reserved)", a))
			end
		end
	elseif ty == 0x41 then
		if not at_least(5, "file.data") then return end
		tree:add(f.payload, tvb(off + 4, len - 4))
	elseif ty == 0x42 then
		if not at_least(18, "file.end") then return end
		tree:add(f.file_blocks, tvb(off + 4, 4))
		tree:add(f.file_srtt, tvb(off + 8, 4))
		tree:add(f.file_stamp, tvb(off + 12, 4))
		local n = tvb(off + 16, 2):uint()
		local ni = tree:add(f.file_awaited_count, tvb(off + 16, 2))
		if len ~= 18 + 2 * n and len ~= 18 + 2 * n + 32 then
			body_error(ni, "file.end.awaited", off + 16, string.format("%d members need %d bytes (%d with the file's hash), body has %d", n, 18 + 2 * n, 18 + 2 * n + 32, len))
			return
		end
		for i = 0, n - 1 do
			local mi = tree:add(f.file_awaited, tvb(off + 18 + 2 * i, 2))
			if tvb(off + 18 + 2 * i, 2):uint() == 0xffff then
				body_error(mi, "file.end.awaited", off + 18 + 2 * i, "member id 0xffff is reserved for 'no member'")
			end
		end
		if len == 18 + 2 * n + 32 then
			-- the file's hash, when its offer's was all zeros
			local hi = tree:add(f.file_hash, tvb(off + 18 + 2 * n, 32))
			if tvb(off + 18 + 2 * n, 32):bytes():tohex() == string.rep("00", 32) then
				body_error(hi, "file.end.hash", off + 18 + 2 * n, "a hash of all zeros (leave it out instead)")
			end
		end
	elseif ty == 0x43 then
		if not at_least(30, "file.status") then return end
		tree:add(f.file_incarnation, tvb(off + 4, 4))
		local st, r = tvb(off + 8, 1):uint(), tvb(off + 9, 1):uint()
		local si = tree:add(f.file_state, tvb(off + 8, 1))
		local ri = tree:add(f.file_reason, tvb(off + 9, 1))
		if st < 1 or st > 4 then
			body_error(si, "file.status.state", off + 8, string.format("state %d (want 1 needs offer, 2 receiving, 3 done, 4 failed)", st))
		elseif (st == 4 and (r == 0 or r > 13)) or (st ~= 4 and r ~= 0) then
			body_error(ri, "file.status.reason", off + 9, string.format("reason %d with state %s", r, file_state_names[st]))
		end
		tree:add(f.file_credit, tvb(off + 10, 2))
		tree:add(f.file_held, tvb(off + 12, 4))
		local top = tvb(off + 16, 4):uint()
		tree:add(f.file_top, tvb(off + 16, 4))
		tree:add(f.file_echo, tvb(off + 20, 4))
		tree:add(f.file_delay, tvb(off + 24, 4))
		local n = tvb(off + 28, 2):uint()
		local ni = tree:add(f.range_count, tvb(off + 28, 2))
		if len ~= 30 + 8 * n then
			body_error(ni, "file.status.missing", off + 28, string.format("%d ranges need %d bytes, body has %d", n, 30 + 8 * n, len))
			return
		end
		local prev = -1
		for i = 0, n - 1 do
			local p = off + 30 + 8 * i
			local first, last = tvb(p, 4):uint(), tvb(p + 4, 4):uint()
			local rt = tree:add(rbcast, tvb(p, 8), string.format("Missing %d: blocks %u..%u", i, first, last))
			rt:add(f.range_first, tvb(p, 4))
			rt:add(f.range_last, tvb(p + 4, 4))
			if last < first or last >= top or first <= prev then
				body_error(rt, "file.status.missing", p, string.format("range %d is %u..%u (want first <= last < top %u, above the range before)", i, first, last, top))
			end
			prev = last
		end
	elseif ty == 0x44 then
		local ri = tree:add(f.file_reason, tvb(off + 4, 1))
		local r = tvb(off + 4, 1):uint()
		if r < 3 or r > 5 then
			body_error(ri, "file.gone.reason", off + 4, string.format("reason %d (want 3 closed, 4 aborted, 5 unknown)", r))
		end
	end
end

local function dissect_body(ty, flags, tree, tvb, off, stop)
	local len = stop - off
	local bundled = band(flags, 0x0002) ~= 0
	local name = type_names[ty] or "?"
	if bundled and ty ~= 0x01 and ty ~= 0x10 and ty ~= 0x11 then
		flag(tree, e.flags, "bundle flag on a " .. name .. " frame")
	end
	local want = fixed_body[ty]
	if want and len ~= want then
		body_error(tree, "body", off, string.format("%s body is %d bytes, must be %d", name, len, want))
		if len > 0 then tree:add(f.body, tvb(off, len)) end
		return
	end
	local function at_least(n, field)
		if len < n then
			body_error(tree, field, off, string.format("%s body is %d bytes, needs at least %d", name, len, n))
			if len > 0 then tree:add(f.body, tvb(off, len)) end
			return false
		end
		return true
	end
	if ty == 0x01 or ty == 0x10 or ty == 0x28 then
		add_messages(tree, tvb, off, stop, bundled)
	elseif ty == 0x03 then
		if not at_least(4, "nack") then return end
		tree:add(f.nack_target, tvb(off, 2))
		add_ranges(tree, tvb, off + 2, stop, "nack.ranges")
	elseif ty == 0x04 then
		local ri = tree:add(f.join_requested, tvb(off, 2))
		if tvb(off, 2):uint() == 0xffff then ri:append_text(" (any)") end
		tree:add(f.join_window, tvb(off + 2, 2))
		tree:add(f.join_mtu, tvb(off + 4, 4))
		tree:add(f.join_nonce, tvb(off + 8, 8))
		tree:add(f.join_config, tvb(off + 16, 8))
	elseif ty == 0x05 then
		tree:add(f.welcome_nonce, tvb(off, 8))
		local a = tree:add(f.welcome_assigned, tvb(off + 8, 2))
		if tvb(off + 8, 2):uint() == 0xffff then
			body_error(a, "welcome.assigned", off + 8, "assigned id 0xffff is reserved for 'no member'")
		end
		tree:add(f.welcome_members, tvb(off + 10, 2))
		tree:add(f.welcome_config, tvb(off + 12, 8))
	elseif ty == 0x06 then
		if not at_least(2, "start") then return end
		local n = tvb(off, 2):uint()
		tree:add(f.start_count, tvb(off, 2))
		if n == 0 or len ~= 2 + 12 * n then
			body_error(tree, "start.members", off, string.format("%d members need %d bytes, body has %d", n, 2 + 12 * n, len))
		end
		local p, i = off + 2, 0
		while i < n and p + 12 <= stop do
			local m = tree:add(rbcast, tvb(p, 12), string.format("Member %d", tvb(p, 2):uint()))
			m:add(f.member_id, tvb(p, 2))
			m:add(f.member_mac, tvb(p + 2, 6))
			m:add(f.member_incarnation, tvb(p + 8, 4))
			p, i = p + 12, i + 1
		end
	elseif ty == 0x11 then
		if not at_least(22, "seqdata") then return end
		tree:add(f.epoch, tvb(off, 4))
		tree:add(f.safe, tvb(off + 4, 4))
		tree:add(f.held, tvb(off + 8, 4))
		add_uid(tree, tvb, off + 12)
		add_messages(tree, tvb, off + 22, stop, bundled)
	elseif ty == 0x12 then
		if not at_least(14, "accept") then return end
		tree:add(f.epoch, tvb(off, 4))
		tree:add(f.safe, tvb(off + 4, 4))
		tree:add(f.held, tvb(off + 8, 4))
		local n = tvb(off + 12, 2):uint()
		tree:add(f.accept_count, tvb(off + 12, 2))
		if n == 0 or len ~= 14 + 14 * n then
			body_error(tree, "accept.entries", off + 12, string.format("%d entries need %d bytes, body has %d", n, 14 + 14 * n, len))
		end
		local p, i = off + 14, 0
		while i < n and p + 14 <= stop do
			local a = tree:add(rbcast, tvb(p, 14), string.format("Accept %d: global %u", i, tvb(p, 4):uint()))
			a:add(f.accept_global, tvb(p, 4))
			add_uid(a, tvb, p + 4)
			p, i = p + 14, i + 1
		end
	elseif ty == 0x13 then
		tree:add(f.epoch, tvb(off, 4))
		tree:add(f.status_sequenced, tvb(off + 4, 4))
		tree:add(f.safe, tvb(off + 8, 4))
		tree:add(f.held, tvb(off + 12, 4))
	elseif ty == 0x14 then
		tree:add(f.epoch, tvb(off, 4))
		tree:add(f.status_delivered, tvb(off + 4, 4))
	elseif ty == 0x15 then
		if not at_least(6, "retransmit") then return end
		tree:add(f.epoch, tvb(off, 4))
		add_ranges(tree, tvb, off + 4, stop, "retransmit.ranges")
	elseif ty == 0x16 then
		tree:add(f.epoch, tvb(off, 4))
		local ph = tree:add(f.election_phase, tvb(off + 4, 1))
		local pv = tvb(off + 4, 1):uint()
		if pv < 1 or pv > 3 then
			body_error(ph, "election.phase", off + 4, string.format("phase %d (want 1..3)", pv))
		end
		local rs = tree:add(f.election_reserved, tvb(off + 5, 1))
		if tvb(off + 5, 1):uint() ~= 0 then
			body_error(rs, "election.reserved", off + 5, string.format("reserved byte is %d, must be 0", tvb(off + 5, 1):uint()))
		end
		tree:add(f.election_candidate, tvb(off + 6, 2))
		tree:add(f.election_last_global, tvb(off + 8, 4))
	elseif ty == 0x17 then
		tree:add(f.epoch, tvb(off, 4))
		tree:add(f.safe, tvb(off + 4, 4))
		tree:add(f.held, tvb(off + 8, 4))
		local ch, rv = tvb(off + 12, 1):uint(), tvb(off + 13, 1):uint()
		local ci = tree:add(f.member_change, tvb(off + 12, 1))
		if ch ~= 1 and ch ~= 2 then
			body_error(ci, "member.change", off + 12, string.format("change %d (want 1 removed or 2 readmitted)", ch))
		end
		local ri = tree:add(f.member_reason, tvb(off + 13, 1))
		if rv > 3 or (ch == 2 and rv ~= 0) or (ch == 1 and rv == 0) then
			body_error(ri, "member.reason", off + 13, string.format("reason %d with change %s", rv, change_names[ch] or tostring(ch)))
		end
		local mi = tree:add(f.member_id, tvb(off + 14, 2))
		if tvb(off + 14, 2):uint() == 0xffff then
			body_error(mi, "member.member", off + 14, "member id 0xffff is reserved for 'no member'")
		end
		tree:add(f.member_incarnation, tvb(off + 16, 4))
	elseif ty == 0x20 then
		local ri = tree:add(f.join_requested, tvb(off, 2))
		if tvb(off, 2):uint() == 0xffff then ri:append_text(" (any)") end
		tree:add(f.join_nonce, tvb(off + 2, 8))
		tree:add(f.join_config, tvb(off + 10, 8))
		tree:add(f.join_mtu, tvb(off + 18, 4))
	elseif ty == 0x21 or ty == 0x23 then
		if not at_least(10, ty == 0x21 and "prepare" or "commit") then return end
		view_id(tree:add(f.view_next, tvb(off, 4)), tvb(off, 4):uint())
		view_id(tree:add(f.view_base, tvb(off + 4, 4)), tvb(off + 4, 4):uint())
		local n = tvb(off + 8, 2):uint()
		tree:add(f.view_count, tvb(off + 8, 2))
		local p = off + 10
		for i = 0, n - 1 do
			if p + 12 > stop then
				body_error(tree, "members", p, string.format("%d members need %d bytes", n, 12 * n))
				return
			end
			local m = tree:add(rbcast, tvb(p, 12), string.format("Member %d", tvb(p, 2):uint()))
			m:add(f.member_id, tvb(p, 2))
			m:add(f.member_mac, tvb(p + 2, 6))
			m:add(f.member_incarnation, tvb(p + 8, 4))
			p = p + 12
		end
		if ty == 0x23 then
			if p + 2 > stop then
				body_error(tree, "commit.cuts", p, "no room for the cut count")
				return
			end
			local k = tvb(p, 2):uint()
			tree:add(f.cut_count, tvb(p, 2))
			p = p + 2
			for i = 0, k - 1 do
				if p + 12 > stop then
					body_error(tree, "commit.cuts", p, string.format("%d cuts need %d bytes", k, 12 * k))
					return
				end
				local c = tree:add(rbcast, tvb(p, 12), string.format("Cut of member %d: %u (holder %d, from %u)", tvb(p, 2):uint(), tvb(p + 2, 4):uint(), tvb(p + 6, 2):uint(), tvb(p + 8, 4):uint()))
				c:add(f.cut_member, tvb(p, 2))
				c:add(f.cut_seq, tvb(p + 2, 4))
				c:add(f.cut_holder, tvb(p + 6, 2))
				c:add(f.cut_from, tvb(p + 8, 4))
				p = p + 12
			end
			local nb = math.floor((n + 7) / 8)
			if p + 2 + nb ~= stop then
				body_error(tree, "commit.accept", p, string.format("a view of %d members needs %d bytes (base count, from-base bitmap), %d left", n, 2 + nb, stop - p))
				return
			end
			local a = tree:add(rbcast, tvb(p, 2 + nb), string.format("Accepted once more than half of %d base members are heard", tvb(p, 2):uint()))
			a:add(f.commit_base_count, tvb(p, 2))
			for i = 0, n - 1 do
				local byte = tvb(p + 2 + math.floor(i / 8), 1):uint()
				if bit.band(byte, bit.rshift(0x80, i % 8)) ~= 0 then
					a:add(f.commit_from_base, tvb(p + 2 + math.floor(i / 8), 1), tvb(off + 10 + 12 * i, 2):uint())
				end
			end
		end
	elseif ty == 0x22 then
		if not at_least(16, "flush") then return end
		view_id(tree:add(f.view_next, tvb(off, 4)), tvb(off, 4):uint())
		view_id(tree:add(f.view_base, tvb(off + 4, 4)), tvb(off + 4, 4):uint())
		tree:add(f.flush_coord, tvb(off + 8, 2))
		tree:add(f.flush_sent, tvb(off + 10, 4))
		local n = tvb(off + 14, 2):uint()
		tree:add(f.flush_count, tvb(off + 14, 2))
		if len ~= 16 + 7 * n then
			body_error(tree, "flush.delivered", off + 14, string.format("%d entries need %d bytes, body has %d", n, 16 + 7 * n, len))
			return
		end
		for i = 0, n - 1 do
			local p = off + 16 + 7 * i
			local fl = tvb(p + 2, 1):uint()
			local gone = ""
			if fl == 3 then gone = " (left)" elseif band(fl, 1) ~= 0 then gone = " (gone here)" end
			local d = tree:add(rbcast, tvb(p, 7), string.format("From member %d: next %u%s", tvb(p, 2):uint(), tvb(p + 3, 4):uint(), gone))
			d:add(f.flush_member, tvb(p, 2))
			local gi = d:add(f.flush_gone, tvb(p + 2, 1))
			d:add(f.flush_left, tvb(p + 2, 1))
			if fl ~= 0 and fl ~= 1 and fl ~= 3 then
				body_error(gi, "flush.delivered.flags", p + 2, string.format("entry %d: flags are 0x%02x, want 0 (live), 1 (gone) or 3 (gone, left)", i, fl))
			end
			d:add(f.flush_delivered, tvb(p + 3, 4))
		end
	elseif ty == 0x24 then
		if not at_least(4 + OVERHEAD, "relay") then return end
		tree:add(f.relay_base, tvb(off, 4))
		tree:add(f.relay_frame, tvb(off + 4, len - 4))
	elseif ty == 0x25 then
		tree:add(f.refuse_nonce, tvb(off, 8))
		tree:add(f.refuse_reason, tvb(off + 8, 1))
		tree:add(f.refuse_config, tvb(off + 9, 8))
	elseif ty == 0x26 then
		tree:add(f.removed_view, tvb(off, 4))
	elseif ty == 0x27 then
		if not at_least(2, "suspect") then return end
		local n = tvb(off, 2):uint()
		tree:add(f.suspect_count, tvb(off, 2))
		if n == 0 or len ~= 2 + 2 * n then
			body_error(tree, "suspect.members", off, string.format("%d suspects need %d bytes, body has %d", n, 2 + 2 * n, len))
			return
		end
		for i = 0, n - 1 do
			tree:add(f.suspect_member, tvb(off + 2 + 2 * i, 2))
		end
	elseif ty == 0x38 then
		tree:add(f.mismatch_reason, tvb(off, 1))
		tree:add(f.mismatch_refused, tvb(off + 1, 1))
		tree:add(f.mismatch_fingerprint, tvb(off + 2, 8))
	elseif ty == 0x30 then
		-- PCODE (docs/wire-format.md, "PCODE"): a multicast to a target bitmap.
		if not at_least(16, "pcode.data") then return end
		tree:add(f.pcode_step, tvb(off, 8))
		tree:add(f.pcode_global, tvb(off + 8, 4))
		local st = tvb(off + 12, 1):uint()
		local si = tree:add(f.pcode_stream, tvb(off + 12, 1))
		if st > 1 then body_error(si, "pcode.data.stream", off + 12, string.format("stream %d (want 0 broadcast or 1 point-to-point)", st)) end
		local ri = tree:add(f.pcode_reserved, tvb(off + 13, 1))
		if tvb(off + 13, 1):uint() ~= 0 then body_error(ri, "pcode.data.reserved", off + 13, "reserved byte is not 0") end
		local n = tvb(off + 14, 2):uint()
		local ni = tree:add(f.pcode_targets_length, tvb(off + 14, 2))
		if n == 0 or n > 8192 or 16 + n > len then
			body_error(ni, "pcode.data.targets", off + 14, string.format("target bitmap of %d bytes (want 1..8192, %d left)", n, len - 16))
			return
		end
		local count = 0
		for i = 0, n - 1 do
			local byte = tvb(off + 16 + i, 1):uint()
			for bit = 0, 7 do
				if band(byte, bit_value[bit + 1]) ~= 0 then
					tree:add(f.pcode_target, tvb(off + 16 + i, 1), 8 * i + bit)
					count = count + 1
				end
			end
		end
		if count == 0 or (st == 1 and count ~= 1) then
			body_error(ni, "pcode.data.targets", off + 16, string.format("%d targets on the %s stream", count, stream_names[st] or "?"))
		end
		if 16 + n < len then tree:add(f.payload, tvb(off + 16 + n, len - 16 - n)) end
	elseif ty == 0x31 then
		local k = tvb(off, 1):uint()
		local ki = tree:add(f.pcode_nack_kind, tvb(off, 1))
		if k < 1 or k > 3 then body_error(ki, "pcode.nack.kind", off, string.format("kind %d (want 1 request, 2 personal, 3 global)", k)) end
		tree:add(f.pcode_stream, tvb(off + 1, 1))
		tree:add(f.pcode_source, tvb(off + 2, 2))
		tree:add(f.pcode_last, tvb(off + 4, 4))
		tree:add(f.pcode_step, tvb(off + 8, 8))
	elseif ty == 0x32 then
		if not at_least(12, "pcode.status") then return end
		tree:add(f.pcode_global, tvb(off, 4))
		tree:add(f.pcode_echo, tvb(off + 4, 4))
		tree:add(f.pcode_point_base, tvb(off + 8, 2))
		local n = tvb(off + 10, 2):uint()
		local ni = tree:add(f.pcode_point_count, tvb(off + 10, 2))
		if len ~= 12 + 4 * n then
			body_error(ni, "pcode.status.point", off + 10, string.format("%d entries need %d bytes, body has %d", n, 12 + 4 * n, len))
			return
		end
		for i = 0, n - 1 do tree:add(f.pcode_point, tvb(off + 12 + 4 * i, 4)) end
	elseif ty == 0x33 then
		if not at_least(14, "pcode.abort") then return end
		tree:add(f.pcode_abort_reason, tvb(off, 1))
		tree:add(f.pcode_reserved, tvb(off + 1, 1))
		tree:add(f.pcode_member, tvb(off + 2, 2))
		tree:add(f.pcode_step, tvb(off + 4, 8))
		local n = tvb(off + 12, 2):uint()
		local ni = tree:add(f.pcode_text_length, tvb(off + 12, 2))
		if len ~= 14 + n then
			body_error(ni, "pcode.abort.text", off + 12, string.format("text of %d bytes, body has %d after the fixed part", n, len - 14))
			return
		end
		if n > 0 then tree:add(f.pcode_text, tvb(off + 14, n)) end
	elseif ty >= 0x40 and ty <= 0x44 then
		dissect_file(ty, name, tree, tvb, off, stop)
	end
end

function rbcast.dissector(tvb, pinfo, tree)
	local avail = tvb:len()
	if avail == 0 then return 0 end
	pinfo.cols.protocol = "RBCAST"
	local root = tree:add(rbcast, tvb())
	if avail < OVERHEAD then
		flag(root, e.short, string.format("%d bytes, need at least %d", avail, OVERHEAD))
		pinfo.cols.info = "rbcast: short frame"
		return avail
	end

	local version = tvb(0, 1):uint()
	local vi = root:add(f.version, tvb(0, 1))
	local ty = tvb(1, 1):uint()
	local ti = root:add(f.type, tvb(1, 1))
	local flags = tvb(2, 2):uint()
	local fi = root:add(f.flags, tvb(2, 2))
	fi:add(f.flag_auth, tvb(2, 2))
	fi:add(f.flag_bundle, tvb(2, 2))
	fi:add(f.flag_crit_reserved, tvb(2, 2))
	fi:add(f.flag_retransmit, tvb(2, 2))
	fi:add(f.flag_ack_request, tvb(2, 2))
	fi:add(f.flag_hash_alg, tvb(2, 2))
	fi:add(f.flag_adv_reserved, tvb(2, 2))
	local length = tvb(4, 2):uint()
	local li = root:add(f.length, tvb(4, 2))
	local sender = tvb(6, 2):uint()
	local si = root:add(f.sender, tvb(6, 2))
	if sender == 0xffff then si:append_text(" (no id yet)") end
	root:add(f.group, tvb(8, 4))
	root:add(f.incarnation, tvb(12, 4))
	view_id(root:add(f.view, tvb(16, 4)), tvb(16, 4):uint())
	local seq = tvb(20, 4):uint()
	root:add(f.seq, tvb(20, 4))
	local ack_base = tvb(24, 2):uint()
	root:add(f.ack_base, tvb(24, 2))
	local ack_count = tvb(26, 2):uint()
	local aci = root:add(f.ack_count, tvb(26, 2))

	local name = type_names[ty] or string.format("Type(0x%02x)", ty)
	local info = string.format("%s sender=%s seq=%u", name, sender == 0xffff and "none" or tostring(sender), seq)
	if band(flags, 0x0100) ~= 0 then
		info = info .. " [RETRANSMIT]"
		fi:add_proto_expert_info(e.retransmit)
	end
	pinfo.cols.info = info
	root:append_text(": " .. info)

	if version ~= 4 then
		flag(vi, e.version, string.format("version %d, this dissector speaks 4", version))
		return avail
	end
	if not type_names[ty] then
		flag(ti, e.type, string.format("type 0x%02x", ty))
	end
	local unknown = band(flags, 0x00fc)
	if unknown ~= 0 then
		flag(fi, e.flags, string.format("critical flags 0x%04x", unknown))
	end

	-- The length field bounds the frame; Ethernet padding follows it.
	local n = length
	if length < OVERHEAD or length > avail then
		flag(li, e.length, string.format("length field %d, frame has %d bytes", length, avail))
		n = avail
	end
	root:set_len(n)

	local body_start = HEADER_LEN + ack_count * 4
	if body_start + CRC_LEN > n then
		flag(aci, e.ack_vector, string.format("%d entries need %d bytes, frame has %d", ack_count, body_start + CRC_LEN, n))
		return n
	end
	if ack_base + ack_count > 65536 then
		flag(aci, e.ack_vector, string.format("members %d..%d exceed the id space", ack_base, ack_base + ack_count - 1))
	end
	-- Sequencer frames (0x10-0x17; also Leave under Order Total, which
	-- the frame alone does not tell) carry two entries for the sequencer
	-- ack_base's stream: the sender's delivered and received cursors.
	local seq_acks = ty >= 0x10 and ty <= 0x17 and ack_count == 2
	if seq_acks then
		local at = root:add(rbcast, tvb(HEADER_LEN, 8), string.format("Ack vector: cursors in sequencer %d's global stream", ack_base))
		for i, label in ipairs({ "Delivered cursor", "Received cursor" }) do
			local item = at:add(f.ack, tvb(HEADER_LEN + (i - 1) * 4, 4))
			item:prepend_text(label .. ": ")
			item:add(f.ack_member, ack_base):set_generated()
		end
	elseif ack_count > 0 then
		local at = root:add(rbcast, tvb(HEADER_LEN, ack_count * 4), string.format("Ack vector: %d entries from member %d", ack_count, ack_base))
		for i = 0, ack_count - 1 do
			local r = tvb(HEADER_LEN + i * 4, 4)
			local item = at:add(f.ack, r)
			item:prepend_text(string.format("Member %d: ", ack_base + i))
			item:add(f.ack_member, ack_base + i):set_generated()
		end
	end

	local body_end = n - CRC_LEN
	if band(flags, 0x0001) ~= 0 then
		-- algorithm (1) | tag length (1) | key id (1) | counter (8) | tag
		-- (link/auth). The tag is shown, not verified: Wireshark's Lua has
		-- no AES-GCM, and we write no cryptography by hand; pcap-replay
		-- -key-file verifies (docs/auth.md).
		if body_start + AUTH_FIXED > body_end then
			flag(root, e.auth, string.format("flag set but no room for the auth section's %d fixed bytes", AUTH_FIXED))
		else
			local l = tvb(body_start + 1, 1):uint()
			local at = root:add(rbcast, tvb(body_start, math.min(AUTH_FIXED + l, body_end - body_start)), "Authentication")
			at:add(f.auth_algorithm, tvb(body_start, 1))
			local ali = at:add(f.auth_length, tvb(body_start + 1, 1))
			at:add(f.auth_key, tvb(body_start + 2, 1))
			at:add(f.auth_counter, tvb(body_start + 3, 8))
			if l < 1 or l > MAX_AUTH_TAG or body_start + AUTH_FIXED + l > body_end then
				flag(ali, e.auth, string.format("tag length %d, room for %d (max %d)", l, body_end - body_start - AUTH_FIXED, MAX_AUTH_TAG))
				body_start = body_end
			else
				at:add(f.auth_tag, tvb(body_start + AUTH_FIXED, l))
				body_start = body_start + AUTH_FIXED + l
			end
		end
	end

	if type_names[ty] then
		local bt = root:add(rbcast, tvb(body_start, body_end - body_start), string.format("%s body (%d bytes)", name, body_end - body_start))
		dissect_body(ty, flags, bt, tvb, body_start, body_end)
	elseif body_end > body_start then
		root:add(f.body, tvb(body_start, body_end - body_start))
	end

	local crc_item = root:add(f.crc, tvb(body_end, 4))
	local want = tvb(body_end, 4):uint()
	local got = crc32c(tvb:raw(0, body_end))
	root:add(f.crc_computed, got):set_generated()
	if got == want then
		root:add(f.crc_status, 1):set_generated()
	else
		root:add(f.crc_status, 0):set_generated()
		flag(crc_item, e.crc, string.format("frame says %08x, bytes give %08x", want, got))
		pinfo.cols.info = info .. " [BAD CRC]"
	end
	return n
end

-- link/udp's hello (EtherType 0x88B6): the members a member has heard from.
local HELLO_ETHERTYPE = 0x88b6
local hello = Proto("rbcast_hello", "rbcast link/udp hello")
local hello_kinds = { [1] = "ask", [2] = "answer" }
local hf = {
	version = ProtoField.uint8("rbcast_hello.version", "Version", base.DEC),
	kind = ProtoField.uint8("rbcast_hello.kind", "Kind", base.DEC, hello_kinds),
	count = ProtoField.uint16("rbcast_hello.count", "Members", base.DEC),
	addr4 = ProtoField.ipv4("rbcast_hello.addr", "Address"),
	addr6 = ProtoField.ipv6("rbcast_hello.addr6", "Address"),
	port = ProtoField.uint16("rbcast_hello.port", "Port", base.DEC),
	age = ProtoField.uint32("rbcast_hello.age", "Heard from, ms ago", base.DEC),
}
hello.fields = { hf.version, hf.kind, hf.count, hf.addr4, hf.addr6, hf.port, hf.age }
local he = { malformed = ProtoExpert.new("rbcast_hello.malformed", "Malformed hello", expert.group.MALFORMED, expert.severity.ERROR) }
hello.experts = { he.malformed }

function hello.dissector(tvb, pinfo, tree)
	pinfo.cols.protocol = "rbcast-hello"
	local n = tvb:len()
	local root = tree:add(hello, tvb(0, n))
	if n < 4 then
		root:add_proto_expert_info(he.malformed, string.format("%d bytes, want at least 4", n))
		return n
	end
	root:add(hf.version, tvb(0, 1))
	root:add(hf.kind, tvb(1, 1))
	root:add(hf.count, tvb(2, 2))
	local count = tvb(2, 2):uint()
	pinfo.cols.info = string.format("Hello (%s), %d members", hello_kinds[tvb(1, 1):uint()] or "?", count)
	local off = 4
	for i = 1, count do
		local fam = off < n and tvb(off, 1):uint() or 0
		local alen = (fam == 4 and 4) or (fam == 6 and 16) or 0
		if alen == 0 or off + 1 + alen + 6 > n then
			root:add_proto_expert_info(he.malformed, string.format("entry %d of %d does not fit or has family %d", i, count, fam))
			return n
		end
		local et = root:add(hello, tvb(off, 1 + alen + 6), string.format("Member %d", i))
		et:add(alen == 4 and hf.addr4 or hf.addr6, tvb(off + 1, alen))
		et:add(hf.port, tvb(off + 1 + alen, 2))
		et:add(hf.age, tvb(off + 3 + alen, 4))
		off = off + 1 + alen + 6
	end
	if off ~= n then
		root:add_proto_expert_info(he.malformed, string.format("%d bytes after the last entry", n - off))
	end
	return n
end

-- The carriage: a UDP datagram whose payload is a whole Ethernet frame,
-- handed to Wireshark's Ethernet dissector (which passes our EtherTypes
-- on to rbcast and rbcast_hello).
local carriage = Proto("rbcast_udp", "rbcast UDP carriage")
local eth = Dissector.get("eth_withoutfcs")

function carriage.dissector(tvb, pinfo, tree)
	tree:add(carriage, tvb(0, math.min(14, tvb:len())), "rbcast over UDP: the payload is an Ethernet frame")
	return eth:call(tvb, pinfo, tree)
end

-- ours reports whether a datagram's payload is a frame link/udp carries:
-- our EtherType with the rbcast Length equal to what follows the
-- Ethernet header, or a hello.
local function ours(tvb)
	local n = tvb:len()
	if n < 14 + 4 then return false end
	local et = tvb(12, 2):uint()
	if et == HELLO_ETHERTYPE then return tvb(14, 1):uint() == 1 end
	if et ~= rbcast.prefs.ethertype or n < 14 + OVERHEAD then return false end
	-- The Length field counts the rbcast frame; a sender may have padded
	-- it to Ethernet's 60-byte minimum.
	local l = tvb(14 + 4, 2):uint()
	return l >= OVERHEAD and l <= n - 14 and (l == n - 14 or n <= 60)
end

carriage:register_heuristic("udp", function(tvb, pinfo, tree)
	if not rbcast.prefs.udp_heuristic or not ours(tvb) then return false end
	carriage.dissector(tvb, pinfo, tree)
	return true
end)

local registered, registered_port = nil, 0
local function register()
	local t = DissectorTable.get("ethertype")
	if registered then t:remove(registered, rbcast) end
	registered = rbcast.prefs.ethertype
	t:add(registered, rbcast)
	local u = DissectorTable.get("udp.port")
	if registered_port ~= 0 then u:remove(registered_port, carriage) end
	registered_port = rbcast.prefs.udp_port
	if registered_port ~= 0 then u:add(registered_port, carriage) end
end

function rbcast.prefs_changed() register() end

DissectorTable.get("ethertype"):add(HELLO_ETHERTYPE, hello)
register()
