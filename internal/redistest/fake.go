package redistest

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/driver"
)

// Fake stands in for a node in the library's unit tests, without Redis: it
// answers every command with Result (or Err) after Delay, or, while Hang is
// open, not at all. It implements only what the library sends calls
// through (driver.Node's Do); a unit test puts it in a node's place.
type Fake struct {
	Result any
	Err    error
	Delay  time.Duration
	Hang   chan struct{} // when set, every call blocks until it is closed
}

// Do answers each command as the fake does, after one wait for the round.
func (f *Fake) Do(_ context.Context, cmds []*driver.Cmd) {
	if f.Hang != nil {
		<-f.Hang
	} else if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	for _, c := range cmds {
		c.Reply, c.Err = f.Result, f.Err
	}
}

// Info names the fake.
func (f *Fake) Info() driver.Info { return driver.Info{Addr: "fake"} }

// Subscribe is not for fakes: a unit test waits without wake-ups.
func (f *Fake) Subscribe(context.Context, string, bool) driver.Subscription {
	panic("redistest.Fake has no subscriptions")
}
