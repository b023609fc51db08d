// Package dial gives the go-redis clients that redlock makes (Open, the
// test kit) a dialer that never makes go-redis log.
//
// go-redis logs each failed dial ("connection pool: failed to dial") on
// its global logger, up to a pool's size of lines each time a node goes
// down, and the only way to quiet it is redis.SetLogger, which would
// replace a user's own logger. A [Quiet] dialer never fails: when the node
// refuses, it returns a connection that fails its first read or write with
// the dial's error, which go-redis returns to the call as it would the
// dial's, without a line. Within [Every] of a failed dial it does not dial
// again (a call fails at once, as go-redis's own pool does once it gave
// up dialing); after it, the next call's dial is the probe. It reports each
// change of the node's state (down, up) once to Changed, as the latest dial
// to begin found it: a refusal still on its way when a later dial got
// through says nothing.
package dial

import (
	"context"
	"net"
	"sync"
	"time"
)

// Every is how long a node that refused stays refused without a dial.
const Every = time.Second

// Func dials like a go-redis Options.Dialer.
type Func func(ctx context.Context, network, addr string) (net.Conn, error)

// Quiet wraps a dialer. It is safe for concurrent use.
type Quiet struct {
	dial    Func
	changed func(up bool, err error)
	every   time.Duration // Every, but in tests

	mu    sync.Mutex
	down  bool
	err   error     // the last failed dial's error, while down
	tried time.Time // when the last failed dial began
	// latest is when the dial whose answer set down began: an answer to
	// a dial that began before it is stale (it was on its way while the
	// node changed) and says nothing of the node.
	latest time.Time
}

// New returns a Quiet over d; changed (nil: none) is called, outside any
// lock, once each time the node stops or starts accepting connections.
func New(d Func, changed func(up bool, err error)) *Quiet {
	return &Quiet{dial: d, changed: changed, every: Every}
}

// Dial dials as the wrapped dialer, or returns a connection that fails
// with the node's refusal.
func (q *Quiet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	q.mu.Lock()
	if q.down && time.Since(q.tried) < q.every {
		err := q.err
		q.mu.Unlock()
		return refused{err}, nil
	}
	q.mu.Unlock()
	start := time.Now()
	c, err := q.dial(ctx, network, addr)
	if err != nil && ctx.Err() != nil {
		// The caller gave up (its deadline or cancel): that says nothing
		// of the node.
		return refused{err}, nil
	}
	q.mu.Lock()
	if start.Before(q.latest) {
		q.mu.Unlock()
		if err != nil {
			return refused{err}, nil
		}
		return c, nil
	}
	q.latest = start
	was := q.down
	q.down = err != nil
	if err != nil {
		q.err, q.tried = err, start
	}
	q.mu.Unlock()
	if was != (err != nil) && q.changed != nil {
		q.changed(err == nil, err)
	}
	if err != nil {
		return refused{err}, nil
	}
	return c, nil
}

// Down reports whether the node's last dial failed.
func (q *Quiet) Down() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.down
}

// refused is a connection to a node that refused: every read and write
// fails with the dial's error.
type refused struct{ err error }

func (r refused) Read([]byte) (int, error)         { return 0, r.err }
func (r refused) Write([]byte) (int, error)        { return 0, r.err }
func (r refused) Close() error                     { return nil }
func (r refused) LocalAddr() net.Addr              { return nowhere{} }
func (r refused) RemoteAddr() net.Addr             { return nowhere{} }
func (r refused) SetDeadline(time.Time) error      { return nil }
func (r refused) SetReadDeadline(time.Time) error  { return nil }
func (r refused) SetWriteDeadline(time.Time) error { return nil }

// nowhere is a refused connection's address.
type nowhere struct{}

func (nowhere) Network() string { return "tcp" }
func (nowhere) String() string  { return "(refused)" }
