package lane

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/pause"
)

// MaxHeld bounds the releases a lane holds while its breaker is open; past
// it the oldest are given up (their Done gets the failure).
const MaxHeld = 4096

// ManyRetry is how long a lane whose server refused a Many call sends its
// calls one by one before it tries a Many call again.
var ManyRetry = time.Minute

// MaxParked bounds the workers parked on one lane (a node, or a Cluster
// shard) that does not answer: while that many are parked, the lane sends
// nothing new, not even a probe.
const MaxParked = 4

// breakerState is a lane's circuit breaker state; see the package doc.
type breakerState uint8

const (
	closed breakerState = iota
	open
	halfOpen
)

// Lane is one server's queue, worker and circuit breaker; see the package
// doc.
type Lane struct {
	node  *Node
	owner *flight.Flight // counts every worker and held call, for Close
	shard string         // a Cluster shard primary's address; "" otherwise
	// base is the node timeout: the least silence that opens the breaker,
	// so that a caller's shorter per-call timeout (which bounds only its
	// own wait) never marks the node sick for everyone.
	base time.Duration

	mu      sync.Mutex
	queue   []*Call
	spare   []*Call // a queue's buffer, sent and cleared, for the next queue
	working bool    // a worker is sending the queue (parked ones do not count)
	state   breakerState
	retryAt time.Time     // open: when a probe may go
	silence time.Duration // open: the node timeout that passed
	parked  int           // detached workers still inside the client
	probing bool          // half-open: the probe is admitted and not yet answered
	held    []*Call       // releases refused while open, sent when the node answers
	closing bool          // flushed for Close: a release refused from now on is given up
	reached bool          // some call got past dialing the node: a write may be there
	cause   error         // the client's last network error here, until the node answers
	out     time.Time     // when the oldest round still out was sent; zero when none is
	retry   *time.Timer   // sends a held release as the probe when the lane is idle
	// ready is set once a connection to the node has been set up (see
	// setUp) and answered, and cleared by a network error (a refused or
	// broken connection): until then, the worker sets one up before it
	// sends. setting is set while it does.
	ready   bool
	setting bool
	// slowSetUp is set when a set-up outlasted its calls' wait, until one
	// succeeds: the node looks silent, and the next set-ups (the breaker's
	// probes) are waited for one node timeout, as a call is.
	slowSetUp bool
	// loaded holds the scripts the server is known to have cached since
	// the lane's last set-up (or its last NOSCRIPT): the others go with
	// their source (EVAL), so that a first call costs one round trip.
	loaded map[string]struct{}
	// manyOff is until when calls go one by one after the server refused
	// a Many call (see Call.Many): an ACL may be changed back, and a client
	// may reconnect without a set-up of the lane's (another client's, or
	// go-redis's idle connections), so merging is tried again after
	// ManyRetry, at the cost of one refused call.
	manyOff time.Time
	// rtt is how long the last answered round took (ns), late ones
	// included, less a pause of the process's own (see round): what a
	// timeout's error quotes when it is above the timeout.
	rtt atomic.Int64
	// dog is the watchdog of the lane's last round answered in time, idle,
	// for its next round to reuse; nil when none is.
	dog *watchdog
	// worker is work as a func value, made once: `go l.work()` would
	// allocate a closure for each worker started (one per uncontended call).
	worker func()
}

// makeLane returns the lane of nd (of shard, a Cluster shard primary's
// address, or "").
func makeLane(nd *Node, owner *flight.Flight, base time.Duration, shard string) *Lane {
	l := &Lane{node: nd, owner: owner, base: base, shard: shard}
	l.worker = l.work
	return l
}

// Submit queues c and starts a worker if none runs, or ends c at once when
// the lane is open (a release is then held) or its node is another's twin
// (a Write or Release).
func (l *Lane) Submit(c *Call) {
	if twin := l.node.twin.Load(); twin != nil && c.Kind != Cleanup {
		c.H.Done(Result{Err: twin, Acks: -1, Local: -1})
		return
	}
	l.mu.Lock()
	if err := l.admit(time.Now()); err != nil {
		dropped := l.hold(c)
		l.mu.Unlock()
		for _, d := range dropped {
			d.H.Done(Result{Err: err, Acks: -1, Local: -1})
		}
		return
	}
	l.queue = append(l.queue, c)
	if l.working {
		setting := l.setting
		l.mu.Unlock()
		if setting {
			connecting(c) // it waits behind a connection being set up
		}
		return
	}
	l.working = true
	l.mu.Unlock()
	l.owner.Add()
	go l.worker()
}

// troubled reports whether the lane has lately missed its node: its
// breaker is not closed, a set-up outlasted its wait, or the client met a
// network error there. Called with mu held.
func (l *Lane) troubled() bool {
	return l.state != closed || l.slowSetUp || l.cause != nil
}

// recovered tells the node's OnRecover hook that the lane heard its node
// after trouble. Called without mu.
func (l *Lane) recovered() {
	if f := l.node.onRecover; f != nil {
		f()
	}
}

// LastCause returns the client's last network error on the lane since the
// node last answered, or nil.
func (l *Lane) LastCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Sick reports whether the node looks silent: its circuit is not closed
// (silent past its timeout lately), or a round has been out for more than
// half a node timeout. (The second rule sees a hung node before its first
// timeout ends: a subscriber would otherwise connect to it in that moment,
// and park there.)
func (l *Lane) Sick() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state != closed || !l.out.IsZero() && time.Since(l.out) > l.base/2
}

// Probe sends c as the breaker's probe when the circuit is not closed, a
// probe may go (see admit) and nothing else is queued or being sent: a
// lane that no call uses (the node of a subscription waiting for it to
// answer) closes once its node answers, rather than when the next call
// comes. It reports whether c was sent.
func (l *Lane) Probe(c *Call) bool {
	l.mu.Lock()
	idle := l.state != closed && !l.probing && !l.working && len(l.queue) == 0 &&
		!(l.state == open && (l.parked >= MaxParked || time.Now().Before(l.retryAt)))
	l.mu.Unlock()
	if !idle || l.owner.Stopped() {
		return false
	}
	l.Submit(c)
	return true
}

// admit returns nil when a new call may queue, or the reason it may not.
// Called with mu held.
func (l *Lane) admit(now time.Time) error {
	switch {
	case l.state == closed:
		return nil
	case l.probing, l.state == open && (l.parked >= MaxParked || now.Before(l.retryAt)):
		return &TimeoutError{Timeout: l.silence, CircuitOpen: true, Shard: l.shard, Cause: l.cause}
	}
	l.state, l.probing = halfOpen, true // this call is the probe
	return nil
}

// work sends the queue, batch after batch, until it is empty or the worker
// is detached by the watchdog.
func (l *Lane) work() {
	defer l.owner.Done()
	for {
		l.mu.Lock()
		var batch []*Call
		batch, l.queue = l.queue, l.spare[:0]
		l.spare = nil
		if len(batch) == 0 {
			l.working = false
			l.spare = batch
			l.mu.Unlock()
			return
		}
		cold := !l.ready && l.node.setsUp()
		l.setting = cold
		l.mu.Unlock()
		if cold {
			switch l.setUp(batch) {
			case setUpDetached:
				return // parked in the client until it returns, and done
			case setUpFailed:
				continue // the batch was failed, unsent
			}
		}
		sendable := batch[:0]
		for _, c := range batch {
			// Kind first: a Write that is not sendable is no longer
			// ours to read.
			if w := c.Kind == Write; c.H.Sendable() || !w {
				sendable = append(sendable, c)
			}
		}
		if len(sendable) == 0 {
			l.mu.Lock()
			l.probing = false // a probe that was not worth sending: the next call probes
			l.mu.Unlock()
			continue
		}
		if !l.send(sendable) {
			return // detached: parked until the client returned, and done
		}
		clear(batch)
		l.mu.Lock()
		l.spare = batch[:0] // the next queue reuses it
		l.mu.Unlock()
	}
}

// Batch states: the worker and the watchdog race to move a batch out of
// batchRunning.
const (
	batchRunning int32 = iota
	batchAnswered
	batchSilent
)

// send sends batch and hands out the answers. It reports false when the
// batch went silent past its node timeout and this worker was detached (it
// then returns only once the client has).
func (l *Lane) send(batch []*Call) bool {
	timeout := l.base
	for _, c := range batch {
		timeout = max(timeout, c.Timeout)
	}
	onTime := l.round(batch, timeout, bySHA, nil)
	// The node answered; those whose script it lacks (NOSCRIPT: a restarted
	// or flushed node, or a script not used on it yet) go again with the
	// script itself, in a round trip with a watchdog of its own (none for a
	// worker already detached, and counted as parked), together with the
	// calls that must still run after them (see resends).
	if again := resends(batch, onTime); len(again) > 0 {
		first := make([]Result, len(again))
		for i, c := range again {
			first[i] = c.res
		}
		if onTime {
			// Its watchdog tells Silent what the first run answered (a
			// release whose first run deleted its keys stays a success).
			onTime = l.round(again, timeout, withSource, first)
		} else {
			for _, c := range again {
				c.src = true
			}
			_, _ = l.run(again, false)
		}
		for i, c := range again {
			c.res.First = &first[i]
		}
	}

	// What the node said: a reply (even an error reply) shows it alive;
	// a timeout is its silence; a network error (refused, reset, closed)
	// is neither: it costs nothing, and opens nothing.
	spoke, silent, reached := false, false, false
	var cause error // a network error: why the node may be silent
	for _, c := range batch {
		err := c.res.Err
		reached = reached || !undialed(err)
		switch {
		case err != nil && IsTimeout(err):
			c.res.Err = &TimeoutError{Timeout: c.Timeout, Shard: l.shard, Cause: err}
			silent = true
		case isReply(err):
			spoke = true
		case !errors.Is(err, driver.ErrClosed):
			cause = err
		}
	}
	var resend, failed []*Call
	l.mu.Lock()
	recovered := spoke && l.troubled()
	l.reached = l.reached || reached
	switch {
	case spoke:
		l.cause = nil
	case cause != nil:
		l.cause = cause
	}
	if cause != nil {
		l.ready = false // the next batch sets up a connection first
	} else if spoke {
		l.ready = true
	}
	switch {
	case !onTime:
		l.parked--
		if spoke && l.state == open {
			l.state = halfOpen // it answered after all: probe at once
		}
	case spoke:
		l.state, l.probing = closed, false
	case silent:
		// The client gave up before the watchdog (its own timeout, or it
		// honoured the deadline): the node was silent all the same.
		failed = l.trip(timeout)
	default:
		l.state, l.probing = closed, false
	}
	if spoke {
		resend = l.unhold()
	}
	// A release that got no reply is held (a copy, for a Release: its
	// Result stands as it is) and sent again: its delete may not have
	// landed. (batch is not changed: the watchdog may be reading it.) A
	// call held itself belongs to the held list from here on, and another
	// worker may send it at once: this one does not touch it again
	// (again[i]).
	var again []bool
	for i, c := range batch {
		// A release to a node that nothing of this lane ever reached (every
		// connection to it was refused, and no round is still out on an
		// older connection) is not held: no write is there to delete, and a
		// dead node costs no retry, nor Close's wait. (Not on a Cluster: a
		// lock's calls may have gone through another lane before the slot
		// map was known.) Nor is one refused once Close began (its flush):
		// the node is down, not silent, and Close would wait for it to its
		// deadline.
		err := c.res.Err
		refusedAtClose := undialed(err) && l.closing
		if c.Kind != Write && !isReply(err) && !errors.Is(err, driver.ErrClosed) && !refusedAtClose &&
			(l.reached || l.parked > 0 || l.node.cluster != nil || !undialed(err)) {
			if d, ok := c.H.(Doubter); ok && c.Kind == Cleanup {
				d.Unanswered() // before another worker may send it again
			}
			for _, d := range l.hold(c) {
				if d != c {
					failed = append(failed, d)
				}
			}
			if c.Kind == Cleanup {
				if again == nil {
					again = make([]bool, len(batch))
				}
				again[i] = true
			}
		}
	}
	l.arm()
	l.mu.Unlock()
	for _, c := range failed {
		c.H.Done(Result{Err: &TimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard, Cause: cause}, Acks: -1, Local: -1})
	}
	if len(resend) > 0 {
		// The node has just answered: every held release goes out now,
		// in one batch, without waiting for the breaker's probe.
		l.requeue(resend)
	}
	if spoke && l.node.cluster != nil {
		l.node.mapped.Store(true)
	}
	twin := l.node.twin.Load()
	for i, c := range batch {
		if again != nil && again[i] {
			continue // held: done when sent again
		}
		if twin != nil && c.Kind == Write {
			// Learnt in this batch: it ran on a server that an earlier
			// node claimed; its answer is set aside.
			c.res = Result{Err: twin, Acks: -1, Local: -1}
		}
		c.res.Late = !onTime
		c.H.Done(c.res)
	}
	if recovered {
		// After the batch's own answers: a caller whose attempt is in it
		// is not woken for what it has just heard.
		l.recovered()
	}
	return onTime
}

// resends returns the calls of a batch just answered to send again with
// their scripts: each one the node lacked (NOSCRIPT), and each later one
// that ran but shares a key with one sent again before it. A pipeline runs
// in order; a call that answered NOSCRIPT did not run, so a later call on
// its keys ran too early: a lock's release before its own acquire (which
// the re-send then writes, to stay for its whole ttl), a write-back before
// its acquire, another lock's acquire before the release that frees it.
// Sent again after the re-sent ones, in the batch's order, each runs where
// its keys are as they would have been in order: a release then deletes
// what the acquire before it wrote. (The answers may differ from the
// batch's order: in [acquire A (NOSCRIPT), acquire B], B wins the key and A
// finds it held. Either answer is consistent.) Every script may run twice:
// a write writes what it wrote the first time (an acquire lets its own
// value through), and a release's second run finds what its first left
// (Result.First holds the first run's answer).
//
// A batch that went silent past its node timeout (onTime false) was
// reported silent already, and its worker is detached: the lane has sent
// newer calls since, on other connections (the held copy of a release, as
// the breaker's probe), so no order can be kept with them. Its writes that
// the node lacked are not sent again: they wrote nothing, and now never
// will. Only its releases that the node lacked go again, which delete only
// their own value and may run in any order.
func resends(batch []*Call, onTime bool) []*Call {
	var again []*Call
	var keys map[string]struct{} // the keys of the calls sent again so far
	for _, c := range batch {
		switch {
		case c.res.Err != nil && hasPrefix(c.res.Err, "NOSCRIPT"), c.res.manyErr && isReply(c.res.Err):
			// Its script (or its Many call's) was not cached, or its
			// Many call was refused: it goes again alone, with its source.
			if !onTime && c.Kind == Write {
				continue
			}
		case !onTime || keys == nil || !isReply(c.res.Err) || !touches(c.Keys, keys):
			// Before the first NOSCRIPT; or it did not run for sure
			// (no reply: the connection failed); or on other keys.
			continue
		}
		if keys == nil {
			keys = make(map[string]struct{}, len(c.Keys))
		}
		for _, k := range c.Keys {
			keys[k] = struct{}{}
		}
		again = append(again, c)
	}
	return again
}

// touches reports whether any of keys is in set.
func touches(keys []string, set map[string]struct{}) bool {
	for _, k := range keys {
		if _, ok := set[k]; ok {
			return true
		}
	}
	return false
}

// round sends calls (their EVALSHAs, or withSource their scripts) in one
// round trip, watched: when no answer comes within timeout, the watchdog
// (silent) opens the breaker and detaches this worker. first is, for a
// second round (see resends), what each call's first run answered; nil for
// a first round. It reports whether the answer came in time.
func (l *Lane) round(calls []*Call, timeout time.Duration, how evalBy, first []Result) bool {
	// The client gets no deadline: the lane's own timer bounds the wait (a
	// client that honours ctx deadlines would otherwise report the node's
	// silence as context.DeadlineExceeded), and a parked call is counted.
	sent := time.Now()
	l.mu.Lock()
	if l.out.IsZero() {
		l.out = sent
	}
	w := l.dog // the lane's idle watchdog, when it has one
	l.dog = nil
	l.mu.Unlock()
	if w == nil {
		w = &watchdog{l: l}
		// Made stopped: fire reads w.t (to wait longer), which is set
		// before the Reset below, and so before it fires.
		w.t = time.AfterFunc(time.Hour, w.fire)
		w.t.Stop()
	}
	w.calls, w.first, w.timeout, w.wait = calls, first, timeout, pause.Begin(sent, timeout)
	w.state.Store(batchRunning)
	w.t.Reset(timeout) // what it was set to above happens before it fires
	ask := how == bySHA && l.node.asking()
	l.choose(calls, how)
	if id, answered := l.run(calls, ask); answered {
		l.node.servers.identified(l.node, id)
	}
	// The round trip less what the wait allowed for a pause: a timeout's
	// error quotes it as the node's.
	now := time.Now()
	_, added := w.wait.Paused(now)
	l.learn(calls, now.Sub(sent)-added)
	w.wait.End()
	onTime := w.state.CompareAndSwap(batchRunning, batchAnswered)
	// Stop reports true only when fire was not started, and never will be
	// for this round: then nothing but this round holds w, and the next
	// round may take it. (A watchdog that fired, whose fire raced this
	// answer, or that waited longer for a pause, is left to its goroutine.)
	idle := w.t.Stop() && onTime && !w.longer.Load()
	if idle {
		w.calls, w.first = nil, nil
	}
	l.mu.Lock()
	if l.out.Equal(sent) {
		l.out = time.Time{}
	}
	if idle {
		l.dog = w
	}
	l.mu.Unlock()
	return onTime
}

// watchdog is a round's timer: when the round has no answer after timeout,
// it tells the lane (silent). A lane keeps one idle watchdog, which its
// next round reuses (see round): an uncontended lane makes no timer per
// round.
//
// The timeout counts the node's silence, not the client's (a pause.Wait):
// an answer that came while this process was paused waits unread in the
// socket.
type watchdog struct {
	l       *Lane
	t       *time.Timer // runs fire
	state   atomic.Int32
	calls   []*Call
	first   []Result
	timeout time.Duration
	wait    pause.Wait  // from when the round was sent
	longer  atomic.Bool // set once fire ran: w is not reused (its timer may be set again)
}

// fire is the round's silence, unless its answer came first or its wait
// has time left (a pause of the process's own): then it fires again then.
func (w *watchdog) fire() {
	if w.state.Load() != batchRunning {
		return
	}
	// Set first: a watchdog whose timer may fire again is not reused
	// (one that is due is not either: its round is not on time).
	w.longer.Store(true)
	now := time.Now()
	if !w.wait.Due(w.t, now) {
		return
	}
	if w.state.CompareAndSwap(batchRunning, batchSilent) {
		paused, _ := w.wait.Paused(now)
		w.l.silent(w.calls, w.first, w.timeout, paused)
	}
}

// silent is the watchdog: batch has no answer after timeout. It opens the
// breaker, fails what queued behind the batch, detaches the worker and
// tells the batch's calls.
//
// It reads nothing a Call keeps that a worker writes: once the worker sees
// the batch cut off, it may hold a Cleanup, and another worker send it
// again (and write its result) while this still runs.
func (l *Lane) silent(batch []*Call, first []Result, timeout, paused time.Duration) {
	l.mu.Lock()
	l.parked++
	l.working = false
	queued := l.trip(timeout)
	cause := l.cause
	l.mu.Unlock()
	for i, c := range batch {
		var f *Result
		if first != nil {
			f = &first[i]
		}
		c.H.Silent(Result{Err: &TimeoutError{Timeout: c.Timeout, Shard: l.shard, Cause: cause, RoundTrip: l.RoundTrip(), Paused: paused}, First: f, Acks: -1, Local: -1})
	}
	for _, c := range queued {
		c.H.Done(Result{Err: &TimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard, Cause: cause}, Acks: -1, Local: -1})
	}
}

// trip opens the breaker after a silence of timeout, holds the queued
// releases, and returns the other queued calls (and any release dropped
// past MaxHeld), which the caller must fail. Called with mu held.
func (l *Lane) trip(timeout time.Duration) []*Call {
	l.state, l.retryAt, l.silence, l.probing = open, time.Now().Add(timeout), timeout, false
	var failed []*Call
	for _, c := range l.queue {
		failed = append(failed, l.hold(c)...)
	}
	l.queue = nil
	l.arm()
	return failed
}

// hold keeps a release refused by an open breaker (or cut off by its
// silence), to be sent when the node answers again (see arm), and returns
// the calls to fail now: a Write, a Release (its Held copy is kept in its
// place, a Cleanup), and the oldest held call past MaxHeld. Held calls count
// as in flight for Close. Called with mu held.
func (l *Lane) hold(c *Call) []*Call {
	fail := []*Call{}
	switch c.Kind {
	case Cleanup:
		l.held = append(l.held, c)
	case Release:
		fail = append(fail, c)
		l.held = append(l.held, c.H.Held())
	default:
		return []*Call{c}
	}
	l.owner.Add()
	if len(l.held) > MaxHeld {
		fail = append(fail, l.held[0])
		l.held = l.held[1:]
		l.owner.Done()
	}
	l.arm()
	return fail
}

// arm makes sure a held release is sent again, even if no other call comes:
// an idle lane (a quiet Cluster shard) must not keep a write for its whole
// ttl. The oldest held release is sent one node timeout from now (as the
// probe, when the breaker is open), while fewer than MaxParked workers are
// parked and the owner is not stopped. Called with mu held.
func (l *Lane) arm() {
	if l.retry != nil || len(l.held) == 0 || l.parked >= MaxParked || l.owner.Stopped() {
		return
	}
	l.retry = time.AfterFunc(max(time.Until(l.retryAt), l.base), l.retryHeld)
}

// retryHeld sends the oldest held release.
func (l *Lane) retryHeld() {
	l.mu.Lock()
	l.retry = nil
	if len(l.held) == 0 || l.parked >= MaxParked || l.owner.Stopped() {
		l.mu.Unlock()
		return
	}
	c := l.held[0]
	l.held = l.held[1:]
	l.mu.Unlock()
	l.Submit(c)
	l.owner.Done()
}

// flush sends every held release now, past the breaker (for Close).
func (l *Lane) flush() {
	l.mu.Lock()
	l.closing = true
	held := l.unhold()
	l.mu.Unlock()
	if len(held) > 0 {
		l.requeue(held)
	}
}

// requeue queues held calls past the breaker and starts a worker if none
// runs; they stop counting as held.
func (l *Lane) requeue(calls []*Call) {
	l.mu.Lock()
	l.queue = append(l.queue, calls...)
	start := !l.working
	l.working = true
	l.mu.Unlock()
	if start {
		l.owner.Add()
		go l.worker()
	}
	for range calls {
		l.owner.Done() // counted while held
	}
}

// unhold returns every held call, to send again now that the node answers.
// Called with mu held.
func (l *Lane) unhold() []*Call {
	held := l.held
	l.held = nil
	return held
}
