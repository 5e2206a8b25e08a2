package orca

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// flagWaiter is a Waiter done when its flag is set; its channel gets a
// value after (as a call's wake).
type flagWaiter struct {
	ready atomic.Bool
	ch    chan struct{}
}

func (w *flagWaiter) Ready() bool           { return w.ready.Load() }
func (w *flagWaiter) Wake() <-chan struct{} { return w.ch }
func (w *flagWaiter) String() string        { return "a flag" }

// selectWait is groupEnv.Wait as it was before the node watched its
// group's end (groupEnv.watch): a select over the waiter's channel, ctx
// and the group's Done, which every waiter of the node shares.
func selectWait(ctx context.Context, w Waiter, groupDone <-chan struct{}) error {
	for {
		wake := w.Wake()
		if w.Ready() {
			return nil
		}
		select {
		case <-wake:
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-groupDone:
			return ErrClosed
		}
	}
}

// BenchmarkWaitWake: 64 callers of a node, each waiting for its write,
// are woken by one goroutine (the replica) in groups of 17 (a batch's
// writes at 64 callers), and wait again: groupEnv.Wait, a receive from
// the waiter's own channel, against selectWait. One op is one wake-up and
// the wait it ends; what differs between the two is the wait's own cost.
func BenchmarkWaitWake(b *testing.B) {
	const callers, batch = 64, 17
	for _, name := range []string{"receive", "select"} {
		b.Run(name, func(b *testing.B) {
			e := &groupEnv{}
			groupDone := make(chan struct{})
			ws := make([]*flagWaiter, callers)
			for i := range ws {
				ws[i] = &flagWaiter{ch: make(chan struct{}, 1)}
			}
			rounds := b.N/callers + 1
			var waiting sync.WaitGroup
			var start, round sync.WaitGroup
			start.Add(1)
			for _, w := range ws {
				waiting.Add(1)
				go func() {
					defer waiting.Done()
					start.Wait()
					for range rounds {
						var err error
						if name == "receive" {
							err = e.Wait(bg, w)
						} else {
							err = selectWait(bg, w, groupDone)
						}
						if err != nil {
							panic(fmt.Sprint("wait: ", err))
						}
						w.ready.Store(false)
						round.Done()
					}
				}()
			}
			b.ResetTimer()
			start.Done()
			for range rounds {
				round.Add(callers)
				for i, w := range ws {
					w.ready.Store(true)
					select {
					case w.ch <- struct{}{}:
					default:
					}
					if (i+1)%batch == 0 {
						runtime.Gosched() // the next delivery
					}
				}
				round.Wait()
			}
			waiting.Wait()
			close(groupDone)
		})
	}
}
