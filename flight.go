package redlock

import (
	"sync"
	"sync/atomic"
)

// flight counts running goroutines, and lets Close wait for none to be left
// with a deadline of its own (a sync.WaitGroup cannot be waited for with a
// deadline without a goroutine that may outlive the wait). Starting and
// ending a goroutine is one atomic add unless someone is waiting.
type flight struct {
	stopped atomic.Bool // set when Close has returned: held releases are no longer retried
	n       atomic.Int64
	waiting atomic.Bool
	mu      sync.Mutex
	idle    chan struct{} // closed when n reaches 0 while waited for
}

func (f *flight) add() { f.n.Add(1) }

func (f *flight) done() {
	if f.n.Add(-1) == 0 && f.waiting.Load() {
		f.mu.Lock()
		if f.n.Load() == 0 && f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
		f.mu.Unlock()
	}
}

// wait returns a channel closed once no goroutine is running.
func (f *flight) wait() <-chan struct{} {
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
