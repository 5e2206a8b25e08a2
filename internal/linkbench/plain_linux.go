package linkbench

import (
	"errors"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
)

// plain is the baseline the report compares against: an AF_PACKET socket
// used the simple way, one send(2) per frame and one blocking recv(2) per
// frame, no rings, no batching.
type plain struct {
	fd    int
	ifi   *net.Interface
	buf   []byte
	stats link.Stats
	sa    unix.SockaddrLinklayer
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPlain(ifname string) (link.Link, error) {
	ifi, err := link.LookupInterface(ifname)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(link.EtherTypeRbcast)))
	if err != nil {
		return nil, link.SocketError("socket", ifname, err)
	}
	p := &plain{fd: fd, ifi: ifi, buf: make([]byte, link.EthernetHeaderLen+ifi.MTU)}
	p.sa = unix.SockaddrLinklayer{Protocol: htons(link.EtherTypeRbcast), Ifindex: ifi.Index}
	if err := unix.Bind(fd, &p.sa); err != nil {
		unix.Close(fd)
		return nil, link.SocketError("bind", ifname, err)
	}
	// The default buffers: this is the baseline "as a program would
	// usually do it".
	return p, nil
}

func (p *plain) Send(frames [][]byte) (int, error) {
	for i, f := range frames {
		for {
			err := unix.Sendto(p.fd, f, 0, &p.sa)
			if err == nil {
				break
			}
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				p.stats.SendRetries++
				time.Sleep(50 * time.Microsecond)
				continue
			}
			return i, err
		}
		p.stats.FramesSent++
		p.stats.BytesSent += uint64(len(f))
	}
	return len(frames), nil
}

func (p *plain) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	timeout := -1
	if !deadline.IsZero() {
		timeout = int(time.Until(deadline).Milliseconds())
		if timeout < 0 {
			timeout = 0
		}
	}
	pfd := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, os.ErrDeadlineExceeded
		}
		break
	}
	n, _, err := unix.Recvfrom(p.fd, p.buf, 0)
	if err != nil {
		return 0, err
	}
	p.stats.FramesReceived++
	p.stats.BytesReceived += uint64(n)
	frames[0] = link.Frame{Data: p.buf[:n], Time: time.Now()}
	return 1, nil
}

func (p *plain) MTU() int                       { return p.ifi.MTU }
func (p *plain) HardwareAddr() net.HardwareAddr { return p.ifi.HardwareAddr }
func (p *plain) Stats() (link.Stats, error) {
	s := p.stats
	st, err := unix.GetsockoptTpacketStats(p.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		s.KernelPackets += uint64(st.Packets)
		s.KernelDrops += uint64(st.Drops)
		p.stats.KernelPackets, p.stats.KernelDrops = s.KernelPackets, s.KernelDrops
	}
	return s, nil
}
func (p *plain) Close() error { return unix.Close(p.fd) }
