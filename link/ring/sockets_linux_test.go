package ring

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
)

// withoutCaps runs fn on an OS thread of its own whose capabilities are
// all dropped (Linux keeps them per thread), and checks first that the
// thread can no longer create a packet socket. The thread ends with fn.
func withoutCaps(t *testing.T, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var none [2]unix.CapUserData
		if err := unix.Capset(&hdr, &none[0]); err != nil {
			errc <- fmt.Errorf("capset: %w", err)
			return
		}
		if fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.Close(fd)
			errc <- errors.New("a packet socket was created with no capability: the test proves nothing")
			return
		} else if !errors.Is(err, unix.EPERM) {
			errc <- fmt.Errorf("socket without capabilities: %v, want EPERM", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// TestSocketsSetupUnprivileged: the sockets OpenSockets creates with
// CAP_NET_RAW become a working link in Setup on a thread without any
// capability (a daemon sets the rings up after dropping its privileges),
// and receive nothing before Setup binds them.
func TestSocketsSetupUnprivileged(t *testing.T) {
	topo := up(t, "so", 2, 1500)
	for _, v := range versions {
		for _, m := range txModes {
			t.Run(v.String()+"/"+m.String(), func(t *testing.T) {
				cfg := Config{Version: v, TxMode: m}
				tx := openOn(t, topo.Hosts[0], cfg)
				var s *Sockets
				if err := topo.Hosts[1].Do(func() (err error) {
					s, err = OpenSockets(topo.Hosts[1].Iface, cfg)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got, want := s.HardwareAddr().String(), topo.Hosts[1].MAC.String(); got != want {
					t.Errorf("HardwareAddr = %s, want %s", got, want)
				}
				if s.MTU() != 1500 {
					t.Errorf("MTU = %d, want 1500", s.MTU())
				}
				// Sent before Setup: never received. A link of host 1
				// open all along sees it, so it has passed the interface.
				witness := openOn(t, topo.Hosts[1], Config{})
				before := buildFrame(make([]byte, 200), tx.HardwareAddr(), link.EtherTypeRbcast, 1, 200)
				if _, err := tx.Send([][]byte{before}); err != nil {
					t.Fatal(err)
				}
				frames := make([]link.Frame, 8)
				if n, err := witness.Recv(time.Now().Add(2*time.Second), frames); n != 1 || err != nil {
					t.Fatalf("the witness link: %d frames, %v; want the frame sent before Setup", n, err)
				}
				witness.Close()
				var rx *Link
				if err := withoutCaps(t, func() (err error) {
					rx, err = s.Setup()
					return err
				}); err != nil {
					t.Fatalf("Setup without capabilities: %v", err)
				}
				defer rx.Close()
				if _, err := s.Setup(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("a second Setup: %v, want net.ErrClosed", err)
				}
				after := buildFrame(make([]byte, 300), tx.HardwareAddr(), link.EtherTypeRbcast, 2, 300)
				if _, err := tx.Send([][]byte{after}); err != nil {
					t.Fatal(err)
				}
				n, err := rx.Recv(time.Now().Add(2*time.Second), frames)
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				if n != 1 || string(frames[0].Data) != string(after) {
					t.Fatalf("received %d frames, the first %d bytes; want only the frame sent after Setup (300 bytes)", n, len(frames[0].Data))
				}
				// And it sends.
				back := buildFrame(make([]byte, 100), rx.HardwareAddr(), link.EtherTypeRbcast, 3, 100)
				if _, err := rx.Send([][]byte{back}); err != nil {
					t.Fatalf("Send: %v", err)
				}
			})
		}
	}
}

// TestSocketsClose: Close before Setup releases the sockets, and Setup
// then fails.
func TestSocketsClose(t *testing.T) {
	topo := up(t, "sc", 1, 1500)
	var s *Sockets
	if err := topo.Hosts[0].Do(func() (err error) {
		s, err = OpenSockets(topo.Hosts[0].Iface, Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fd := s.l.rx.fd
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("the receive socket (fd %d) is still open after Close: %v", fd, err)
	}
	if _, err := s.Setup(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Setup after Close: %v, want net.ErrClosed", err)
	}
}
