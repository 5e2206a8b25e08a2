package frame

import "fmt"

// MismatchReason says why a keyed member refused a station's frame
// (KeyMismatch).
type MismatchReason uint8

const (
	// MismatchKey: the frame's tag verifies under none of the group's
	// keys (another key, or a key id the group does not have).
	MismatchKey MismatchReason = 1
	// MismatchUnauthenticated: the frame has no authentication section,
	// and the group requires one.
	MismatchUnauthenticated MismatchReason = 2
)

func (r MismatchReason) String() string {
	switch r {
	case MismatchKey:
		return "the group uses another key"
	case MismatchUnauthenticated:
		return "the group requires a key and this station sent none"
	}
	return fmt.Sprintf("MismatchReason(%d)", uint8(r))
}

// AuthEncrypted is the auth section's algorithm id whose body is
// encrypted (link/auth's AES-256-GCM): ParseSealed checks such a frame up
// to its body, for the verifier; Parse refuses it until it is decrypted.
const AuthEncrypted uint8 = 2

const keyMismatchLen = 10

// KeyMismatchBody is the body of a KeyMismatch frame: reason (1) | type
// of the refused frame (1) | fingerprint (8) of the replying member's
// active key (link/auth: derived from the key, so it names the key
// without revealing it).
type KeyMismatchBody struct {
	Reason      MismatchReason
	Refused     Type
	Fingerprint uint64
}

func (k *KeyMismatchBody) FrameType() Type { return KeyMismatch }
func (k *KeyMismatchBody) Len() int        { return keyMismatchLen }
func (k *KeyMismatchBody) AppendBody(b []byte) []byte {
	b = append(b, byte(k.Reason), byte(k.Refused))
	return be.AppendUint64(b, k.Fingerprint)
}
func (k *KeyMismatchBody) flags() Flags { return 0 }

func checkKeyMismatch(body []byte, start int) error {
	if len(body) != keyMismatchLen {
		return decodeErr(ErrBody, "keymismatch", start, "KeyMismatch body is %d bytes, must be %d", len(body), keyMismatchLen)
	}
	if r := MismatchReason(body[0]); r != MismatchKey && r != MismatchUnauthenticated {
		return decodeErr(ErrBody, "keymismatch.reason", start, "reason %d (want 1 or 2)", r)
	}
	return nil
}

// KeyMismatch reads a KeyMismatch body.
func (v View) KeyMismatch() KeyMismatchBody {
	b := v.Body()
	return KeyMismatchBody{Reason: MismatchReason(b[0]), Refused: Type(b[1]), Fingerprint: be.Uint64(b[2:])}
}
