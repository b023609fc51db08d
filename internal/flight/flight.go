// Package flight counts goroutines and calls in flight, so that a Close can
// wait for none to be left with a deadline of its own.
package flight

import (
	"sync"
	"sync/atomic"
)

// Flight counts what is running. A sync.WaitGroup cannot be waited for with
// a deadline without a goroutine that may outlive the wait; a Flight can.
// Starting and ending is one atomic add unless someone is waiting. The zero
// Flight is ready to use.
type Flight struct {
	stopped atomic.Bool
	n       atomic.Int64
	waiting atomic.Bool
	mu      sync.Mutex
	idle    chan struct{} // closed when n reaches 0 while waited for
}

// Add counts one more.
func (f *Flight) Add() { f.n.Add(1) }

// Done counts one fewer.
func (f *Flight) Done() {
	if f.n.Add(-1) == 0 && f.waiting.Load() {
		f.mu.Lock()
		if f.n.Load() == 0 && f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
		f.mu.Unlock()
	}
}

// Idle reports whether nothing is counted.
func (f *Flight) Idle() bool { return f.n.Load() == 0 }

// Wait returns a channel closed once nothing is counted.
func (f *Flight) Wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiting.Store(true)
	if f.n.Load() == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	return f.idle
}

// Stop marks the owner closed: what would start new work for it (a retry of
// a held release) does not.
func (f *Flight) Stop() { f.stopped.Store(true) }

// Stopped reports whether Stop was called.
func (f *Flight) Stopped() bool { return f.stopped.Load() }
