package kv

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// HistoryOp is one client operation as a linearizability checker sees
// it: when it was called and when it returned (nanoseconds on one clock
// that every client shares), what it did, and what it answered. An
// operation without an answer (the client gave up: Answered false) may
// or may not have been applied, and at any time after its call.
type HistoryOp struct {
	Client   uint64 `json:"client"`
	Seq      uint64 `json:"seq"`
	Call     int64  `json:"call"`
	Return   int64  `json:"return,omitempty"`
	Answered bool   `json:"answered"`
	Op       Op     `json:"op"`
	Result   Result `json:"result"`
}

// CheckHistory reports whether h is linearizable for the key-value
// store (each key a register; porcupine, partitioned by key). It fails
// with an error that says so, or that the checker ran out of time.
func CheckHistory(h []HistoryOp, timeout time.Duration) error {
	ops := make([]porcupine.Operation, len(h))
	for i, o := range h {
		ret := o.Return
		if !o.Answered {
			ret = math.MaxInt64
		}
		ops[i] = porcupine.Operation{ClientId: i, Input: o, Call: o.Call, Output: o, Return: ret}
	}
	switch res, _ := porcupine.CheckOperationsVerbose(historyModel, ops, timeout); res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("kv: history of %d operations is not linearizable (porcupine: Illegal)", len(h))
	default:
		return fmt.Errorf("kv: history of %d operations: porcupine gave up after %v (%s)", len(h), timeout, res)
	}
}

// register is one key's value in the model: present or not.
type register struct {
	value   string
	present bool
}

// historyModel is the sequential key-value store, one register per key,
// over HistoryOps (input and output the same op).
var historyModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(HistoryOp).Op.Key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, _ any) (bool, any) {
		st, o := state.(register), input.(HistoryOp)
		op, res, unknown := o.Op, o.Result, !o.Answered
		switch op.Kind {
		case OpGet:
			if unknown {
				return true, st
			}
			if !st.present {
				return res.Status == StatusNotFound, st
			}
			return res.Status == StatusOK && string(res.Value) == st.value, st
		case OpPut:
			return unknown || res.Status == StatusOK, register{string(op.Value), true}
		case OpDelete:
			if !st.present {
				return unknown || res.Status == StatusNotFound, st
			}
			return unknown || res.Status == StatusOK, register{}
		case OpCAS:
			switch {
			case !st.present:
				return unknown || res.Status == StatusNotFound, st
			case st.value != string(op.Expect):
				return unknown || res.Status == StatusMismatch && string(res.Value) == st.value, st
			}
			return unknown || res.Status == StatusOK, register{string(op.Value), true}
		}
		return false, st
	},
	DescribeOperation: func(input, _ any) string {
		o := input.(HistoryOp)
		if !o.Answered {
			return fmt.Sprintf("c%d#%d %v → no answer", o.Client, o.Seq, o.Op)
		}
		return fmt.Sprintf("c%d#%d %v → %v", o.Client, o.Seq, o.Op, o.Result)
	},
}
