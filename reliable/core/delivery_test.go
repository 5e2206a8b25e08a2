package core

import (
	"testing"
	"unsafe"
)

// The cores keep a Delivery per message of a turn in a reused slice that
// grows to the largest turn; a bigger Delivery is that much more
// allocated per run (issue 18: the Unreliable flag, placed last, took it
// from 48 to 56 bytes and SimGoodput's lossy 64-byte runs' B/op +22 %).
func TestDeliverySize(t *testing.T) {
	if got := unsafe.Sizeof(Delivery{}); got != 48 {
		t.Errorf("core.Delivery is %d bytes, want 48 (a field placed where padding does not hide it?)", got)
	}
}
