package lane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/driver"
)

// Setting up a connection is not a node's answer being late. A node far
// away (30 ms, say) costs a new connection several round trips before its
// first command runs: the TCP handshake, HELLO and the client's other
// handshake commands, then a NOSCRIPT and the EVAL that follows for each
// script the server has not cached. Bounded by the node timeout, that cold
// call failed on every node, and the connection being set up was abandoned
// with it, so the next attempt started from scratch.
//
// So a lane that has no connection known to work (a new lane, or one whose
// last round ended in a network error: refused, reset, closed) and an empty
// pool sets one up before it sends: a PING through the client, beside a
// dial of its own that reports a refused or unresolvable address at once.
// Its calls wait for it for SetUpWait node timeouts (about five round trips
// of a node in reach), not one; the PING goes on past that, within the
// client's own dial timeout (DialTimeout, default 5s), when the calls that
// needed it gave up, so that the next attempt finds the connection ready in
// the pool. Its calls are told (Connector):
// their node's silence is counted from when they are sent, not before. And
// the first call of each script after a set-up (or after its NOSCRIPT)
// carries the script itself (EVAL), so that it costs one round trip once
// the connection is up.
//
// A Cluster's lanes, a node of another client than go-redis (which has its
// own connection handling: rueidis dials at once, and keeps its
// connections up) and a node whose calls go through a stand-in (tests) set
// nothing up.

// setUp outcomes.
type setUpResult uint8

const (
	setUpDone     setUpResult = iota // a connection is ready: send the batch
	setUpFailed                      // the batch was failed, unsent
	setUpDetached                    // the set-up went silent past its bound: the worker is detached
)

// setsUp reports whether a lane of the node that knows no working
// connection sets one up before it sends (see above): not when the client's
// pool holds an idle connection already (made by the caller, or by another
// lane), which is taken to work, as a call's would be.
func (nd *Node) setsUp() bool {
	c, ok := nd.client.(*redis.Client)
	if !ok || nd.conn != nd.native {
		return false
	}
	return c.PoolStats().IdleConns == 0
}

// SetUpWait is how many node timeouts a call waits for its lane to set up a
// connection: dialing and the handshake take about five round trips, each
// within the node timeout when the node is in reach. Past that, the lane's
// breaker opens as for a silence (for one node timeout), and the set-up goes
// on in the background, within the client's dial timeout, so that the next
// attempt finds the connection ready. Until a set-up succeeds, the next ones
// (the breaker's probes) are waited for one node timeout only: a node that
// took that long looks silent.
const SetUpWait = 5

// setUpBound is how long the set-up itself may take: the client's dial
// timeout (go-redis's default, 5s, when it has none of its own), and at
// least the calls' wait.
func (nd *Node) setUpBound(wait time.Duration) time.Duration {
	d := 5 * time.Second
	if c, ok := nd.client.(*redis.Client); ok && c.Options().DialTimeout > 0 {
		d = c.Options().DialTimeout
	}
	return max(d, wait)
}

// reach dials the node once, without the client's dial retries, and
// reports a refused or unresolvable address at once (a nil error
// otherwise, a timeout included: the set-up then says). go-redis retries a
// failed dial for about a second, which a node that refuses connections
// would cost every set-up. A FailoverClient (its address is the
// sentinels') is not dialed.
func (nd *Node) reach(ctx context.Context) error {
	c, ok := nd.client.(*redis.Client)
	if !ok || c.Options().Addr == "FailoverClient" {
		return nil
	}
	o := c.Options()
	var d net.Dialer
	conn, err := d.DialContext(ctx, o.Network, o.Addr)
	if err != nil {
		if IsTimeout(err) {
			return nil
		}
		return err
	}
	_ = conn.Close()
	return nil
}

// setUp sets up a connection to the node for batch, whose calls are told
// they wait for it. On failure the calls fail unsent: with the network
// error (a refused or unresolvable address: nothing opens), or, after
// SetUpWait node timeouts, with a *TimeoutError, the breaker opened for one
// node timeout (a node that accepts a connection and never answers is
// silent) while the set-up goes on, detached, until the client's dial
// timeout.
func (l *Lane) setUp(batch []*Call) setUpResult {
	for _, c := range batch {
		connecting(c)
	}
	l.mu.Lock()
	wait := SetUpWait * l.base
	if l.slowSetUp {
		wait = l.base
	}
	l.mu.Unlock()
	bound := l.node.setUpBound(SetUpWait * l.base)
	var state atomic.Int32
	watchdog := time.AfterFunc(wait, func() {
		if !state.CompareAndSwap(batchRunning, batchSilent) {
			return
		}
		l.mu.Lock()
		l.parked++
		l.working, l.setting = false, false // the next call starts a worker of its own
		l.slowSetUp = true
		failed := l.trip(l.base)
		for _, c := range batch {
			failed = append(failed, l.hold(c)...)
		}
		l.mu.Unlock()
		err := &TimeoutError{Timeout: wait, Shard: l.shard, Cause: &SetUpError{Took: wait}}
		for _, c := range failed {
			c.H.Done(Result{Err: err, Acks: -1, Local: -1})
		}
	})
	// The PING and a dial of our own go at once: the dial costs no time
	// when the node is in reach, and when it is refused or does not
	// resolve, the PING (in go-redis's dial retries) is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	pinged := make(chan error, 1)
	go func() { pinged <- l.node.client.Ping(ctx).Err() }()
	err := l.node.reach(ctx)
	if err != nil {
		cancel()
		<-pinged
	} else {
		err = <-pinged
	}
	cancel()
	onTime := state.CompareAndSwap(batchRunning, batchAnswered)
	watchdog.Stop()

	l.mu.Lock()
	spoke := isReply(err)
	recovered := spoke && l.troubled()
	if spoke {
		// The connection is in the pool, and the server's script cache
		// is not known: each script's next call carries its source.
		l.ready, l.cause, l.loaded, l.slowSetUp, l.manyOff = true, nil, nil, false, time.Time{}
	} else if !IsTimeout(err) && !errors.Is(err, driver.ErrClosed) {
		l.cause = err
	}
	if !onTime {
		// Detached: another worker may be setting up by now.
		l.parked--
		if spoke && l.state == open {
			l.state = halfOpen // it answered after all: probe at once
		}
		l.mu.Unlock()
		if recovered {
			l.recovered()
		}
		return setUpDetached
	}
	l.setting = false
	if spoke {
		// With the breaker not closed, the batch's answer tells the hook.
		recovered = recovered && l.state == closed
		l.mu.Unlock()
		if recovered {
			l.recovered()
		}
		return setUpDone
	}
	// Failed in time: a refused or unresolvable address costs nothing and
	// opens nothing (as a call's network error); the client's own timeout
	// is the node's silence.
	var failed []*Call
	refusedAtClose := undialed(err) && l.closing // see answer
	if IsTimeout(err) {
		l.slowSetUp = true
		failed = l.trip(l.base)
		err = &TimeoutError{Timeout: wait, Shard: l.shard, Cause: &SetUpError{Took: wait, Cause: err}}
	} else {
		l.state, l.probing = closed, false
		err = &SetUpError{Cause: err}
	}
	for _, c := range batch {
		if c.Kind != Write && !refusedAtClose && (l.reached || l.parked > 0) {
			// A release of a write that may be there: held, and sent
			// when the node answers.
			failed = append(failed, l.hold(c)...)
			continue
		}
		failed = append(failed, c)
	}
	l.mu.Unlock()
	for _, c := range failed {
		c.H.Done(Result{Err: err, Acks: -1, Local: -1})
	}
	return setUpFailed
}

// SetUpError is why a connection to the node could not be set up.
type SetUpError struct {
	Took  time.Duration // the bound that passed, when it did; 0 otherwise
	Cause error
}

func (e *SetUpError) Error() string {
	s := "setting up a connection"
	if e.Took > 0 {
		s += fmt.Sprintf(" took longer than %v (%d node timeouts, WithNodeTimeout; it goes on within the client's DialTimeout)", e.Took, SetUpWait)
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *SetUpError) Unwrap() error { return e.Cause }

// choose decides how each call of a round goes: with its source (EVAL)
// when the round resends them so (withSource), or when the server is not
// known to have cached its script; else by its hash.
func (l *Lane) choose(calls []*Call, how evalBy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	merge := how == bySHA && (l.manyOff.IsZero() || time.Now().After(l.manyOff))
	for _, c := range calls {
		_, known := l.loaded[c.Hash]
		c.src = how == withSource || !known
		c.merge = merge && c.Many != nil
		c.merged = false
	}
}

// manyBy returns how a Many call of m goes: by its hash once the server is
// known to have it cached.
func (l *Lane) manyBy(m *Many) evalBy {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.loaded[m.Hash]; known {
		return bySHA
	}
	return withSource
}

// learn records what a round's answers say of the server's script cache
// (a script it ran is cached; a NOSCRIPT says it is not), and how long the
// round took when the node answered.
func (l *Lane) learn(calls []*Call, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	answered := false
	for _, c := range calls {
		err := c.res.Err
		if c.merged {
			if c.res.manyErr && !hasPrefix(err, "NOSCRIPT") {
				// The node refused the Many call, or a command of it
				// for this call (an ACL without MGET or TYPE, say): its
				// calls go one by one for ManyRetry, or until the next
				// connection set-up.
				l.manyOff = time.Now().Add(ManyRetry)
			}
			switch {
			case c.res.manyFailed && hasPrefix(err, "NOSCRIPT"):
				delete(l.loaded, c.Many.Hash)
			case c.res.manyFailed:
				// An error before the script ran (BUSY, LOADING, a
				// refusal, the network): nothing learnt of its cache.
				answered = answered || isReply(err)
			case isReply(err):
				// The script ran: its answer, or this call's part of it.
				answered = true
				if l.loaded == nil {
					l.loaded = make(map[string]struct{}, 16)
				}
				l.loaded[c.Many.Hash] = struct{}{}
			}
			continue
		}
		switch {
		case err != nil && hasPrefix(err, "NOSCRIPT"):
			// Its next call carries it. (A set-up forgets every
			// script; a restart or a SCRIPT FLUSH on a connection that
			// stays up is learnt script by script: one NOSCRIPT each.)
			delete(l.loaded, c.Hash)
		case isReply(err):
			answered = true
			if err != nil {
				continue // an error reply may come before the script runs (NOAUTH, CROSSSLOT)
			}
			if l.loaded == nil {
				l.loaded = make(map[string]struct{}, 16)
			}
			l.loaded[c.Hash] = struct{}{}
		}
	}
	if answered {
		l.rtt.Store(int64(took))
	}
}

// RoundTrip returns how long the lane's last answered round took, or 0.
func (l *Lane) RoundTrip() time.Duration { return time.Duration(l.rtt.Load()) }
