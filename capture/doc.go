// Package capture lets a developer see every frame an rbcast node sends
// and receives (DESIGN.md, "Who uses it": the developer chasing a bug).
//
//   - Wrap decorates any link.Link (AF_PACKET, ring, the simulator) so that
//     its frames go to a pcapng file through a Writer: one interface block
//     per link naming the node and interface, EPB direction flags,
//     nanosecond timestamps (virtual ones in the simulator), and kernel
//     drop counts in interface statistics blocks. Several links may share
//     one Writer, so a whole simulated group lands in one file.
//   - Recorder is a flight recorder: the last N bytes of frames in memory,
//     written out as pcapng by Dump, DumpFile or on a signal.
//   - LayerTypeRbcast is a gopacket layer for EtherType 0x88B5, so that
//     gopacket.NewPacket and DecodingLayerParser decode rbcast frames.
//   - wireshark/rbcast.lua is a Wireshark/tshark dissector for the same
//     format (docs/wire-format.md), with a CRC-32C check.
//
// Recording never blocks or fails the node: frames are copied into
// bounded rings allocated up front, and a full ring drops (and counts) the
// record. See docs/capture.md.
package capture
