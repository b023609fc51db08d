package redlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a call to one node lives and ends.
//
// A node is one member of the quorum. It sends its calls through lanes, one
// per connection pool that really is one server: a redis.Client (or a
// FailoverClient) has one lane; a ClusterClient has one per shard primary,
// so that a hung shard holds up only the calls to its own slots. A lane has
// a queue, at most one worker goroutine sending it, and a circuit breaker.
//
//  1. Launch. An attempt submits one call per node to the lane of its
//     resources. An open lane refuses it at once: a vote against
//     (*NodeTimeoutError with CircuitOpen), nothing sent. Otherwise the call
//     queues, and a worker is started if none runs. A queued call is a few
//     words of memory, not a goroutine.
//  2. Send. The worker takes the whole queue (a single call, alone, when
//     half-open) and drops the calls that are no longer worth sending:
//     an acquire or extend whose attempt failed or was decided, whose
//     caller's ctx ended, or whose attempt's deadline passed. Nothing was
//     written for those, so nothing needs cleaning. Releases are always
//     sent. The rest go out in one pipeline with a deadline of one node
//     timeout from now, which no caller's ctx can cut short.
//  3. Vote. Each call's answer is its node's vote, unless the attempt's
//     collector already counted that node (its deadline passed or its ctx
//     ended): each node votes exactly once per attempt, and the vote channel
//     has room for every node, so no sender ever blocks.
//  4. Late answer. An answer that comes after its vote was counted still
//     records what cleanup needs: whether the node wrote the value, and, for
//     a release, that the node deleted it.
//  5. Cleanup. A failed acquire attempt is released on each node that may
//     have written it, once that node's acquire has answered (from the
//     worker, when the answer comes after the attempt failed), so that the
//     release can never overtake the acquire on another connection.
//  6. Silence. A watchdog fires when a batch has no answer after its node
//     timeout. It opens the breaker, fails the queued calls (a cleanup
//     release is held instead, and sent again as soon as the node answers
//     anything: a slow node still gets its cleanups), and detaches
//     the worker, which stays parked in the client until the node answers or
//     the client gives up. Only a node's own silence opens its breaker: a
//     caller that gives up early, or a call that waited in the queue behind
//     a busy node, says nothing about the node's health.
//
// The breaker's states:
//
//	closed    calls are queued and sent in batches.
//	open      the lane was silent past a node timeout: calls fail at once,
//	          until retryAt (one node timeout later) and only while fewer than
//	          maxParked workers are parked on the lane.
//	half-open the next call is sent alone, as a probe; calls that come
//	          while it is out fail at once, as when open.
//
//	closed    -> open       a batch was silent past its node timeout
//	open      -> half-open  retryAt passed and fewer than maxParked are parked,
//	                        or a parked batch came back with an answer
//	half-open -> closed     the probe was answered (any answer, even an error reply)
//	half-open -> open       the probe was silent too
//
// So a node that does not answer holds at most maxParked goroutines of this
// package, however many calls are made meanwhile; a node that answers within
// the node timeout is never opened, however many callers gave up on it.

// maxHeld bounds the cleanup releases a lane holds while its breaker is
// open; past it the oldest are given up (and reported).
const maxHeld = 4096

// maxParked bounds the workers parked on one lane (a node, or a Cluster
// shard) that does not answer: while that many are parked, the lane sends
// nothing new, not even a probe.
const maxParked = 4

// breakerState is a lane's circuit breaker state; see above.
type breakerState uint8

const (
	closed breakerState = iota
	open
	halfOpen
)

// node is one member of the quorum.
type node struct {
	index  int
	client redis.UniversalClient
	// cluster is set for a Redis Cluster: a lane per shard, and releases
	// announced with sharded pub/sub on one channel per resource.
	cluster *redis.ClusterClient
	// one is the lane of a node that is one server; on a Cluster, the lane
	// used until the Cluster's slot map is known (see laneFor).
	one *lane

	mu     sync.Mutex
	shards map[string]*lane // Cluster: by the shard primary's address
	mapped atomic.Bool      // Cluster: a call has been answered, so the slot map is loaded
}

func newNode(i int, c redis.UniversalClient, owner *flight) *node {
	nd := &node{index: i, client: c}
	nd.cluster, _ = c.(*redis.ClusterClient)
	nd.one = &lane{node: nd, owner: owner}
	return nd
}

// script returns the script and arguments that run s on this node: on a
// Cluster, a release announces on each resource's sharded channel.
func (nd *node) script(s *script, keys []string, args []any) (*script, []any) {
	if nd.cluster == nil || s != releaseScript {
		return s, args
	}
	sharded := make([]any, 0, len(args)+len(keys))
	sharded = append(sharded, args...)
	for _, k := range keys {
		sharded = append(sharded, shardedChannel(k))
	}
	return releaseShardedScript, sharded
}

// laneFor returns the lane that serves key. On a Cluster it is the lane of
// the shard primary that owns key's slot; before the Cluster client has
// loaded its slot map (which it does on its first command, in a worker), it
// is the node's own lane, so that looking the shard up never blocks the
// caller.
func (nd *node) laneFor(key string) *lane {
	if nd.cluster == nil || !nd.mapped.Load() {
		return nd.one
	}
	// With the slot map loaded this does not touch the network.
	c, err := nd.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return nd.one
	}
	addr := c.Options().Addr
	nd.mu.Lock()
	defer nd.mu.Unlock()
	l := nd.shards[addr]
	if l == nil {
		if nd.shards == nil {
			nd.shards = map[string]*lane{}
		}
		l = &lane{node: nd, owner: nd.one.owner, shard: addr}
		nd.shards[addr] = l
	}
	return l
}

// lane is one server's queue, worker and circuit breaker; see above.
type lane struct {
	node  *node
	owner *flight // the Redlock's: counts every worker, for Close
	shard string  // a Cluster shard primary's address; "" otherwise

	mu      sync.Mutex
	queue   []*call
	working bool // a worker is sending the queue (parked ones do not count)
	state   breakerState
	retryAt time.Time     // open: when a probe may go
	silence time.Duration // open: the node timeout that passed
	parked  int           // detached workers still inside the client
	probing bool          // half-open: the probe is admitted and not yet answered
	held    []*call       // cleanup releases refused while open, sent when the node answers
}

// call is one script call on one lane.
type call struct {
	s       *script
	keys    []string
	args    []any
	timeout time.Duration // how long the node may stay silent (the node timeout)
	err     error         // the answer, set by the worker

	// An attempt's call: its vote goes to at, as node's.
	at   *attemptState
	node int
	// A release sent on its own (the cleanup of a failed attempt): its
	// failures go to the error handler of cfg, and done is called once it
	// has been answered or given up on.
	cfg  *config
	done func()
}

// submit queues c on l and starts a worker if none runs, or fails c at once
// when l is open.
func (l *lane) submit(c *call) {
	l.mu.Lock()
	if err := l.admit(time.Now()); err != nil {
		dropped := l.hold(c)
		l.mu.Unlock()
		for _, d := range dropped {
			l.finish(d, err)
		}
		return
	}
	l.queue = append(l.queue, c)
	if l.working {
		l.mu.Unlock()
		return
	}
	l.working = true
	l.mu.Unlock()
	l.owner.add()
	go l.work()
}

// admit returns nil when a new call may queue, or the reason it may not.
// Called with mu held.
func (l *lane) admit(now time.Time) error {
	switch {
	case l.state == closed:
		return nil
	case l.probing, l.state == open && (l.parked >= maxParked || now.Before(l.retryAt)):
		return &NodeTimeoutError{Timeout: l.silence, CircuitOpen: true, Shard: l.shard}
	}
	l.state, l.probing = halfOpen, true // this call is the probe
	return nil
}

// work sends the queue, batch after batch, until it is empty or the worker
// is detached by the watchdog.
func (l *lane) work() {
	defer l.owner.done()
	for {
		l.mu.Lock()
		var batch []*call
		batch, l.queue = l.queue, nil
		if len(batch) == 0 {
			l.working = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		sendable := batch[:0]
		for _, c := range batch {
			if c.sendable() {
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
func (l *lane) send(batch []*call) bool {
	timeout := batch[0].timeout
	for _, c := range batch[1:] {
		timeout = max(timeout, c.timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var state atomic.Int32
	stop := context.AfterFunc(ctx, func() {
		if state.CompareAndSwap(batchRunning, batchSilent) {
			l.silent(batch, timeout)
		}
	})
	runBatch(ctx, l.node.client, batch)
	onTime := state.CompareAndSwap(batchRunning, batchAnswered)
	stop()
	cancel()

	answered := false // the node itself said something
	for _, c := range batch {
		if c.err != nil && isTimeout(c.err) {
			c.err = &NodeTimeoutError{Timeout: c.timeout, Shard: l.shard, Cause: c.err}
		} else {
			answered = true
		}
	}
	var resend, failed []*call
	l.mu.Lock()
	switch {
	case !onTime:
		l.parked--
		if answered && l.state == open {
			l.state = halfOpen // it answered after all: probe at once
		}
	case answered:
		l.state, l.probing = closed, false
	default:
		// The client gave up before the watchdog (its own timeout, or it
		// honoured the deadline): the node was silent all the same.
		failed = l.trip(timeout)
	}
	if answered {
		resend, l.held = l.held, nil
	} else {
		// No answer: a cleanup release in the batch is held for the
		// node's return, like those that queued behind it.
		// (batch is not changed: the watchdog may be reading it.)
		for _, c := range batch {
			if c.at == nil {
				failed = append(failed, l.hold(c)...)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range failed {
		l.finish(c, &NodeTimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard})
	}
	for _, c := range resend {
		l.submit(c)
	}
	if answered && l.node.cluster != nil {
		l.node.mapped.Store(true)
	}
	for _, c := range batch {
		if c.at != nil || answered {
			l.finish(c, c.err)
		}
	}
	return onTime
}

// silent is the watchdog: batch has no answer after timeout. It opens the
// breaker, fails what queued behind the batch, detaches the worker and
// counts the batch's calls as timed out.
func (l *lane) silent(batch []*call, timeout time.Duration) {
	l.mu.Lock()
	l.parked++
	l.working = false
	queued := l.trip(timeout)
	l.mu.Unlock()
	for _, c := range batch {
		if c.at != nil {
			c.at.vote(c.node, &NodeTimeoutError{Timeout: c.timeout, Shard: l.shard})
		}
	}
	for _, c := range queued {
		l.finish(c, &NodeTimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard})
	}
}

// trip opens the breaker after a silence of timeout, holds the queued
// cleanup releases, and returns the other queued calls (and any cleanup
// dropped past maxHeld), which the caller must fail. Called with mu held.
func (l *lane) trip(timeout time.Duration) []*call {
	l.state, l.retryAt, l.silence, l.probing = open, time.Now().Add(timeout), timeout, false
	var failed []*call
	for _, c := range l.queue {
		failed = append(failed, l.hold(c)...)
	}
	l.queue = nil
	return failed
}

// hold keeps a cleanup release refused by an open breaker, to be sent when
// the node next answers, and returns the calls to fail instead: c itself
// when it is an attempt's call, the oldest held one past maxHeld. Called with
// mu held.
func (l *lane) hold(c *call) []*call {
	if c.at != nil {
		return []*call{c}
	}
	l.held = append(l.held, c)
	if len(l.held) <= maxHeld {
		return nil
	}
	oldest := l.held[0]
	l.held = l.held[1:]
	return []*call{oldest}
}

// finish hands c's answer (or the reason it was not sent) to its attempt,
// or reports a standalone release's failure.
func (l *lane) finish(c *call, err error) {
	if c.at != nil {
		c.at.answer(c.node, err)
		return
	}
	var rle *ResourceLockedError
	if err != nil && !errors.As(err, &rle) { // "not there" is what a partial attempt leaves
		report(c.cfg, &NodeError{Node: l.node.index, Op: OpRelease, Err: err})
	}
	if c.done != nil {
		c.done()
	}
}

// sendable reports whether c is still worth sending, and records that it is
// being sent; a call that is not is counted as not sent.
func (c *call) sendable() bool {
	if c.at == nil {
		return true
	}
	return c.at.sending(c.node)
}

// isTimeout reports whether err says that the node did not answer in time:
// the batch's deadline (redlock's node timeout, noticed by the client), or
// the client's own read or write timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// runBatch runs a batch: alone when it is one call, else its EVALSHAs in one
// pipeline, where a call whose script the node lacks (NOSCRIPT) is run again
// on its own, which loads it.
func runBatch(ctx context.Context, c redis.UniversalClient, batch []*call) {
	if len(batch) == 1 {
		p := batch[0]
		p.err = p.s.run(ctx, c, p.keys, p.args)
		return
	}
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range batch {
			cmds[i] = pipe.EvalSha(ctx, p.s.hash, p.keys, p.args...)
		}
		return nil
	})
	for i, p := range batch {
		res, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			p.err = p.s.run(ctx, c, p.keys, p.args)
			continue
		}
		p.err = p.s.judge(res, err, len(p.keys))
	}
}
