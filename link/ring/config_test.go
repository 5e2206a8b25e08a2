package ring

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestGeometry(t *testing.T) {
	page := os.Getpagesize()
	for _, v := range []Version{V2, V3} {
		for _, mtu := range []int{576, 1500, 9000, 65535} {
			r, err := Config{Version: v}.resolve(mtu)
			if err != nil {
				t.Fatalf("%v MTU %d: %v", v, mtu, err)
			}
			for _, g := range []Geometry{r.rx, r.tx} {
				if g.BlockSize < page || g.BlockSize&(g.BlockSize-1) != 0 {
					t.Errorf("%v MTU %d: block size %d not a power-of-two number of pages", v, mtu, g.BlockSize)
				}
				if g.FrameSize%tpacketAlignment != 0 {
					t.Errorf("%v MTU %d: frame size %d not TPACKET_ALIGNMENT aligned", v, mtu, g.FrameSize)
				}
				if g.FramesPerBlock() < 16 || g.FrameCount != g.FramesPerBlock()*g.BlockCount {
					t.Errorf("%v MTU %d: %+v: want >= 16 frames per block and FrameCount = per block * blocks", v, mtu, g)
				}
				if g.BlockCount < minBlocks {
					t.Errorf("%v MTU %d: %d blocks, want >= %d", v, mtu, g.BlockCount, minBlocks)
				}
			}
			// The largest frame must fit where the kernel puts it, under
			// V2 with rxRoom behind it.
			room := 0
			if v == V2 {
				room = rxRoom
			}
			if got := rxMacOffset(v) + 14 + mtu + room; got > r.rx.FrameSize {
				t.Errorf("%v MTU %d: frame and room end at %d, slot is %d", v, mtu, got, r.rx.FrameSize)
			}
			if got := txDataOffset + 14 + mtu; got > r.tx.FrameSize {
				t.Errorf("MTU %d: TX frame ends at %d, slot is %d", mtu, got, r.tx.FrameSize)
			}
		}
	}
	// Offsets the kernel computes (tpacket_rcv): netoff 80 (V2) / 96 (V3).
	if got := rxMacOffset(V2); got != 66 {
		t.Errorf("V2 mac offset = %d, want 66", got)
	}
	if got := rxMacOffset(V3); got != 82 {
		t.Errorf("V3 mac offset = %d, want 82", got)
	}
	r, _ := Config{}.resolve(1500)
	if r.Version != DefaultVersion || r.EtherType != 0x88B5 || r.timeoutMsec != 1 {
		t.Errorf("defaults: version %v, EtherType %#x, timeout %d ms", r.Version, r.EtherType, r.timeoutMsec)
	}
	// RxSpin: 0 is the default, a negative one never spins (resolved to 0).
	for _, tc := range []struct{ set, want time.Duration }{
		{0, DefaultRxSpin}, {-time.Microsecond, 0}, {-time.Hour, 0}, {time.Microsecond, time.Microsecond}, {time.Second, time.Second},
	} {
		if r, err := (Config{RxSpin: tc.set}).resolve(1500); err != nil || r.RxSpin != tc.want || r.adaptSpin {
			t.Errorf("RxSpin %v resolved to %v, adapting %v (%v), want %v, fixed", tc.set, r.RxSpin, r.adaptSpin, err, tc.want)
		}
		// AdaptiveSpin adapts up to the spin there is; never stays never.
		if r, err := (Config{RxSpin: tc.set, AdaptiveSpin: true}).resolve(1500); err != nil || r.RxSpin != tc.want || r.adaptSpin != (tc.want > 0) {
			t.Errorf("RxSpin %v with AdaptiveSpin resolved to %v, adapting %v (%v), want %v, adapting %v", tc.set, r.RxSpin, r.adaptSpin, err, tc.want, tc.want > 0)
		}
	}
	r, _ = Config{BlockTimeout: 1500 * time.Microsecond}.resolve(1500)
	if r.timeoutMsec != 2 {
		t.Errorf("BlockTimeout 1.5ms gave %d ms, want 2 (rounded up)", r.timeoutMsec)
	}
}

// RingBytes sizes the receive ring in whole blocks of the derived block
// size (rbcastd's files' link: -files-ring-mb); 0 is DefaultRingBytes,
// and BlockCount, when given, wins.
func TestRingBytes(t *testing.T) {
	for _, tc := range []struct {
		cfg        Config
		mtu        int
		wantBlocks int
		wantBytes  int
	}{
		{Config{Version: V3}, 9000, 64, 16 << 20},
		{Config{Version: V3, RingBytes: 64 << 20}, 9000, 256, 64 << 20},
		{Config{Version: V3, RingBytes: 64<<20 + 1000}, 9000, 256, 64 << 20},
		{Config{RingBytes: 1 << 20}, 1500, 16, 1 << 20},
		{Config{RingBytes: 1}, 1500, minBlocks, minBlocks * 64 << 10},
		{Config{RingBytes: 64 << 20, BlockCount: 4}, 1500, 4, 4 * 64 << 10},
	} {
		r, err := tc.cfg.resolve(tc.mtu)
		if err != nil {
			t.Fatalf("%+v at MTU %d: %v", tc.cfg, tc.mtu, err)
		}
		if r.rx.BlockCount != tc.wantBlocks || r.rx.Bytes() != tc.wantBytes {
			t.Errorf("%+v at MTU %d: %d blocks, %d bytes; want %d, %d", tc.cfg, tc.mtu, r.rx.BlockCount, r.rx.Bytes(), tc.wantBlocks, tc.wantBytes)
		}
		if r.tx.Bytes() != DefaultTxRingBytes && tc.mtu == 1500 {
			t.Errorf("%+v: transmit ring %d bytes, want the default %d", tc.cfg, r.tx.Bytes(), DefaultTxRingBytes)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		mtu  int
		want string
	}{
		{Config{Version: 1}, 1500, "Config.Version = 1"},
		{Config{EtherType: 0x0100}, 1500, "Config.EtherType = 0x0100"},
		{Config{BlockSize: 5000}, 1500, "Config.BlockSize = 5000: want a power of two"},
		{Config{BlockSize: 8192}, 9000, "Config.BlockSize = 8192 is too small"},
		{Config{Version: V3, BlockSize: 65536}, 65535, "Config.BlockSize = 65536 is too small"},
		{Config{BlockCount: 1}, 1500, "Config.BlockCount = 1: want at least 2"},
		{Config{RingBytes: -1}, 1500, "Config.RingBytes = -1"},
		{Config{RingBytes: 1 << 32}, 1500, "Config.RingBytes = 4294967296"},
		{Config{TxBlockSize: 3}, 1500, "Config.TxBlockSize = 3"},
		{Config{TxBlockCount: -1}, 1500, "Config.TxBlockCount = -1"},
		{Config{BlockTimeout: -time.Second}, 1500, "Config.BlockTimeout = -1s"},
		{Config{RxSpin: 2 * time.Second}, 1500, "Config.RxSpin = 2s: want at most a second (0: the default, 200µs; negative: never spin)"},
		{Config{MulticastGroups: []net.HardwareAddr{{0x02, 0, 0, 0, 0, 1}}}, 1500, "Config.MulticastGroups[0] = \"02:00:00:00:00:01\""},
		{Config{}, 70000, "MTU 70000"},
		{Config{Groups: make([]uint32, 1025)}, 1500, "Config.Groups has 1025 groups, more than link.MaxGroups (1024)"},
	} {
		_, err := tc.cfg.resolve(tc.mtu)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v at MTU %d: got error %v, want one containing %q", tc.cfg, tc.mtu, err, tc.want)
		}
	}
}
