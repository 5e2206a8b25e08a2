package core

// Churn is churn for the package's external tests: a stepper whose core
// reported n events, and those events in order.
func Churn(n int) (*Stepper, []Event) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	return s, churn(s, f, n)
}

// SameEvent is sameEvent for the package's external tests.
var SameEvent = sameEvent
