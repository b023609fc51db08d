package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	mrand "math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxOutstanding bounds, per node, the calls that have passed their timeout
// and are still waiting for the node. Past it the node is not called at all
// (it votes against with a *NodeTimeoutError) until some of those calls
// return, so a hung node costs at most this many parked goroutines however
// many locks are taken meanwhile.
const maxOutstanding = 16

// Redlock runs the Redlock algorithm over N independent Redis nodes: a lock
// is held when a majority (quorum n/2+1) of nodes hold its random value.
//
// A Redlock is safe for concurrent use by multiple goroutines and must not
// be copied. New starts no goroutine. Each call's goroutines end when the
// node they talk to answers (see [WithNodeTimeout]); the subscriptions that
// wake waiting Acquires (one goroutine per node, started by the first
// Acquire that waits) end with [Redlock.Close]. It does not own the clients:
// closing them is the caller's job.
type Redlock struct {
	nodes []*node
	cfg   *config
	wake  waker // subscriptions to release announcements, see WithWakeOnRelease
}

// node is one member of the quorum.
type node struct {
	client redis.UniversalClient
	// outstanding counts this node's calls that passed their timeout and
	// have not returned yet (see maxOutstanding).
	outstanding atomic.Int32
	batch       batcher
	// sharded is set for a Redis Cluster, where releases are announced
	// with sharded pub/sub, on one channel per resource.
	sharded bool
}

// script returns the script and arguments that run s on this node: on a
// Cluster, a release announces on each resource's sharded channel.
func (nd *node) script(s *script, keys []string, args []any) (*script, []any) {
	if !nd.sharded || s != releaseScript {
		return s, args
	}
	sharded := make([]any, 0, len(args)+len(keys))
	sharded = append(sharded, args...)
	for _, k := range keys {
		sharded = append(sharded, shardedChannel(k))
	}
	return releaseShardedScript, sharded
}

// New returns a Redlock over clients, one per independent Redis node. A
// redis.Client, a FailoverClient (Sentinel) or a ClusterClient each count as
// one node; on a Cluster, a multi-resource lock needs all its resources in one
// hash slot (use a hash tag such as "{orders}:1").
//
// opts become the defaults of every call. New returns an error matching
// [ErrInvalidArgument] when clients is empty, holds a nil client or the same
// client twice, or an option is out of range. It sends nothing to Redis.
func New(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	if len(clients) == 0 {
		return nil, invalid("no clients: a Redlock needs at least one Redis client")
	}
	nodes := make([]*node, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, invalid("clients[%d] is nil", i)
		}
		// The same client twice would let one node vote twice.
		for j := range i {
			if clients[j] == c {
				return nil, invalid("clients[%d] is the same client as clients[%d]", i, j)
			}
		}
		_, sharded := c.(*redis.ClusterClient)
		nodes[i] = &node{client: c, sharded: sharded}
	}
	def := defaultConfig()
	cfg, err := def.with(opts)
	if err != nil {
		return nil, err
	}
	return &Redlock{nodes: nodes, cfg: cfg}, nil
}

// isNil reports whether c is nil or an interface holding a nil pointer.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Nodes returns the number of nodes (the membership size).
func (r *Redlock) Nodes() int {
	if r == nil {
		return 0
	}
	return len(r.nodes)
}

// Quorum returns how many nodes must vote for an operation: n/2+1.
func (r *Redlock) Quorum() int {
	if r == nil {
		return 0
	}
	return len(r.nodes)/2 + 1
}

// ExecutionStats describes one attempt of an operation on every node.
//
// An attempt is decided as soon as its outcome is certain: when a quorum has
// voted for, or when so many have voted against that a quorum is out of
// reach. Nodes that had not answered by then are in neither list; their
// answers still reach the [WithErrorHandler] handler when they come.
type ExecutionStats struct {
	// Start is when the attempt began; a successful lock's expiration is
	// counted from it.
	Start time.Time
	// MembershipSize is the number of nodes, QuorumSize n/2+1.
	MembershipSize int
	QuorumSize     int
	// VotesFor lists the indexes (into the clients given to New) of the
	// nodes that voted for, in the order their answers arrived.
	VotesFor []int
	// VotesAgainst holds each vote against, with its reason.
	VotesAgainst []*NodeError
	// Late reports that a quorum voted for, but only after the lock's
	// validity had passed, so the attempt counted as a failure.
	Late bool
}

// ExecutionResult is what a successful Release returns.
type ExecutionResult struct {
	// Attempts holds the statistics of each attempt (only the last one when
	// retries are unlimited).
	Attempts []ExecutionStats
	// Start is when the successful attempt began.
	Start time.Time
}

// vote is one node's answer in one attempt.
type vote struct {
	node int
	err  *NodeError // nil: for
}

// Call states, one per node per attempt. The node's goroutine and the
// attempt's deadline race to move it out of callRunning; the winner sends the
// node's vote, so every node votes exactly once per attempt and each vote
// against reaches the error handler once.
const (
	callRunning   int32 = iota
	callDone            // the node answered
	callAbandoned       // the deadline passed first and voted for it
)

// attemptState is shared between an attempt's collector and its node
// goroutines, which may outlive the attempt.
type attemptState struct {
	votes  chan vote      // buffered for every node: a send never blocks
	calls  []atomic.Int32 // one call state per node
	left   atomic.Int32   // goroutines still running; the last one cleans up
	stop   func() bool    // unregisters the deadline's AfterFunc
	cancel context.CancelFunc

	// For the release of a failed acquire attempt (see releaseAttempt).
	ctx     context.Context // the caller's; its cancellation is stripped when releasing
	cfg     *config
	keys    []string
	value   any
	clean   []atomic.Bool // the node surely wrote nothing (held by another)
	release atomic.Bool   // the attempt failed: release on every node
}

// attempt runs s on every node at once and collects votes until the outcome
// is certain. It returns when a quorum has voted either way, not when every
// node has: a slow or hung minority never holds it up, and no node holds it
// up for longer than timeout.
func (r *Redlock) attempt(ctx context.Context, cfg *config, s *script, keys []string, args []any, timeout time.Duration) (ExecutionStats, *attemptState) {
	n := len(r.nodes)
	q := n/2 + 1
	st := ExecutionStats{Start: time.Now(), MembershipSize: n, QuorumSize: q, VotesFor: make([]int, 0, n)}

	// callCtx carries the per-node deadline to the client (go-redis honours
	// it while waiting for a pooled connection, and for reads when
	// ContextTimeoutEnabled is set). It is not cancelled when the attempt is
	// decided: the slower nodes should still get the write. The last
	// goroutine to finish cancels it.
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	as := &attemptState{votes: make(chan vote, n), calls: make([]atomic.Int32, n), cancel: cancel}
	if s.op == OpAcquire {
		as.ctx, as.cfg, as.keys, as.value, as.clean = ctx, cfg, keys, args[0], make([]atomic.Bool, n)
	}
	as.left.Store(int32(n))
	// At the deadline (or when the caller's ctx ends), every call still
	// running votes against in its node's place. This does not wait for the
	// collector: a call that runs on after the attempt was decided at quorum
	// is counted as outstanding all the same, which is what bounds the
	// goroutines parked on a hung node.
	as.stop = context.AfterFunc(callCtx, func() {
		var reason error = &NodeTimeoutError{}
		if err := ctx.Err(); err != nil {
			reason = err
		}
		for i := range n {
			if as.calls[i].CompareAndSwap(callRunning, callAbandoned) {
				r.nodes[i].outstanding.Add(1)
				as.votes <- vote{node: i, err: r.report(cfg, &NodeError{Node: i, Op: s.op, Err: reason})}
			}
		}
	})
	for i, nd := range r.nodes {
		if out := nd.outstanding.Load(); out >= maxOutstanding {
			as.calls[i].Store(callDone)
			as.votes <- vote{node: i, err: r.report(cfg, &NodeError{Node: i, Op: s.op, Err: &NodeTimeoutError{Outstanding: int(out)}})}
			as.finish()
			continue
		}
		go r.call(callCtx, cfg, as, s, i, keys, args)
	}

	// Every node votes once, by the deadline at the latest, and decided is
	// true once all have voted, so this loop ends.
	for {
		if done, _ := decided(n, len(st.VotesFor), len(st.VotesAgainst)); done {
			break
		}
		st.add(<-as.votes)
	}
	return st, as
}

// decided reports whether an attempt on n nodes with these votes has a
// certain outcome, and whether that outcome is a quorum for (n/2+1 votes).
// A quorum for is out of reach once more than n-q nodes voted against.
// Deciding on either threshold is what keeps an even n from hanging on a
// split vote: node-redlock waits for a quorum of votes against, which never
// comes when n=2 splits 1:1. Once all n have voted, one of the two holds.
func decided(n, votesFor, votesAgainst int) (done, won bool) {
	q := n/2 + 1
	switch {
	case votesFor >= q:
		return true, true
	case votesAgainst > n-q:
		return true, false
	}
	return false, false
}

// add records v in st.
func (st *ExecutionStats) add(v vote) {
	if v.err == nil {
		st.VotesFor = append(st.VotesFor, v.node)
	} else {
		st.VotesAgainst = append(st.VotesAgainst, v.err)
	}
}

// call runs s on node i and sends its vote, unless the deadline has already
// voted for it.
func (r *Redlock) call(ctx context.Context, cfg *config, as *attemptState, s *script, i int, keys []string, args []any) {
	defer as.finish()
	nd := r.nodes[i]
	var ne *NodeError
	ns, nargs := nd.script(s, keys, args)
	lead, err := nd.batch.do(ctx, nd.client, ns, keys, nargs)
	if lead {
		// Our own vote first; then run the calls that queued behind ours.
		defer nd.batch.lead(nd.client)
	}
	if err != nil {
		ne = &NodeError{Node: i, Op: s.op, Err: err}
		if _, ok := err.(*ResourceLockedError); ok && as.clean != nil {
			as.clean[i].Store(true)
		}
	}
	if as.calls[i].CompareAndSwap(callRunning, callDone) {
		if ne != nil {
			r.report(cfg, ne)
		}
		as.votes <- vote{node: i, err: ne}
	} else {
		// The deadline voted for this call and reported it; the late
		// answer is dropped.
		r.nodes[i].outstanding.Add(-1)
	}
	// A failed acquire attempt is released on this node only now that this
	// node's acquire has returned: sent earlier, on another connection, the
	// release could reach the node first and the acquire then stay behind.
	if as.release.Load() && !as.clean[i].Load() {
		r.releaseNode(as, i)
	}
}

// releaseAttempt releases a failed acquire attempt's value on every node
// that may have written it, without waiting: at once on the nodes whose call
// has returned, and from each other node's own goroutine once its call
// returns (see call). The flag is set before the states are read and each
// goroutine sets its state before it reads the flag, so no node is missed; a
// node may be released twice, which is harmless.
func (r *Redlock) releaseAttempt(as *attemptState) {
	as.release.Store(true)
	for i := range r.nodes {
		if as.calls[i].Load() != callRunning && !as.clean[i].Load() && r.nodes[i].outstanding.Load() < maxOutstanding {
			go r.releaseNode(as, i)
		}
	}
}

// releaseNode runs the release script for as's value on node i, bounded by
// the node timeout (where the client honours it), reporting a failure.
func (r *Redlock) releaseNode(as *attemptState, i int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(as.ctx), as.cfg.nodeTimeout)
	defer cancel()
	nd := r.nodes[i]
	s, args := nd.script(releaseScript, as.keys, []any{as.value})
	if err := s.run(ctx, nd.client, as.keys, args); err != nil {
		var rle *ResourceLockedError
		if !errors.As(err, &rle) { // "not there" is what a partial attempt leaves
			r.report(as.cfg, &NodeError{Node: i, Op: OpRelease, Err: err})
		}
	}
}

// finish marks one of the attempt's goroutines done. The last one stops the
// deadline's AfterFunc (nothing is left for it to do) and releases the
// context's timer.
func (as *attemptState) finish() {
	if as.left.Add(-1) == 0 {
		as.stop()
		as.cancel()
	}
}

// report passes a vote against to the error handler and returns it.
func (r *Redlock) report(cfg *config, ne *NodeError) *NodeError {
	if cfg.onError != nil {
		cfg.onError(ne)
	}
	return ne
}

// drift is the part of a ttl that is not trusted because the nodes' clocks
// may run at different rates: round(f*ttl) + 2ms, as in node-redlock (and
// the Redis distlock spec's "small constant" for the Redis expiry resolution).
//
// A drift that would reach the ttl is capped at the ttl (no validity left,
// which validateTTL refuses); the cap also keeps the conversion back to a
// Duration from overflowing for ttls near the largest Duration.
func drift(f float64, ttl time.Duration) time.Duration {
	ms := math.Round(f*float64(ttl/time.Millisecond)) + 2
	if ms >= float64(ttl/time.Millisecond) {
		return ttl
	}
	return time.Duration(ms) * time.Millisecond
}

// validateTTL refuses a ttl that Redis cannot take or that leaves no validity.
func validateTTL(ttl time.Duration, cfg *config) error {
	switch {
	case ttl <= 0:
		return invalid("ttl %v is not positive", ttl)
	case ttl%time.Millisecond != 0:
		return invalid("ttl %v is not a whole number of milliseconds", ttl)
	}
	if d := drift(cfg.driftFactor, ttl); ttl <= d {
		return invalid("ttl %v leaves no validity after the clock drift allowance of %v", ttl, d)
	}
	return nil
}

// validateResources refuses an empty list, an empty name and a duplicate.
func validateResources(resources []string) error {
	if len(resources) == 0 {
		return invalid("no resources to lock")
	}
	for i, res := range resources {
		if res == "" {
			return invalid("resources[%d] is empty", i)
		}
		for j := range i {
			if resources[j] == res {
				return invalid("resources[%d] %q duplicates resources[%d]", i, res, j)
			}
		}
	}
	return nil
}

// valueLen is the length of a lock's value.
const valueLen = 32

// randomValue returns valueLen random hex characters, unique to one lock.
func randomValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// retryDelay returns delay + a uniform jitter in [-j, j), never below 0, as
// node-redlock's max(0, delay + floor((rand*2-1)*j)).
func retryDelay(cfg *config) time.Duration {
	d := cfg.retryDelay
	if j := cfg.retryJitter; j > 0 {
		d += time.Duration((mrand.Float64()*2 - 1) * float64(j))
	}
	return max(d, 0)
}

// sleep waits for d, or for a wake (nil: none), or until ctx ends, and
// reports whether ctx is still alive. With spread, a wake is followed by a
// random pause of up to a millisecond.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}, spread bool) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wake:
		// Waiters in other Redlocks (other processes) wake on the same
		// announcement. One that just split the nodes with such a
		// competitor pauses at random, so that one of them usually takes
		// every node before the other tries.
		if spread {
			return sleep(ctx, time.Duration(mrand.Int64N(int64(time.Millisecond))), nil, false)
		}
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// plan is one operation to run with retries.
type plan struct {
	s     *script
	keys  []string
	args  []any
	ttl   time.Duration // acquire, extend: the new ttl, whose validity is checked
	until time.Time     // extend, release: the existing lock's expiration
}

// outcome is what execute settled on.
type outcome struct {
	attempts []ExecutionStats
	win      *ExecutionStats // the successful attempt, or nil
	value    string          // acquire: the successful attempt's value
	err      *ExecutionError
}

// execute runs p until an attempt succeeds, the retries are used up, ctx
// ends, or (extend, release) the lock is known to be lost.
func (r *Redlock) execute(ctx context.Context, cfg *config, p *plan) outcome {
	var o outcome
	fail := func(reason string, sentinel error, ctxErr error) outcome {
		o.err = &ExecutionError{Op: p.s.op, Resources: p.keys, Attempts: o.attempts, reason: reason, sentinel: sentinel, ctxErr: ctxErr}
		return o
	}
	if err := ctx.Err(); err != nil {
		return fail("not attempted", nil, err)
	}
	n, q := len(r.nodes), r.Quorum()
	unlimited := cfg.retryCount == -1
	var sentinel error // ErrResourceLocked when the last whole attempt was lost to contention
	// A waiting Acquire wakes when one of its resources is released. It
	// registers after its first failed attempt, so that an uncontended
	// Acquire pays nothing; a release between that attempt and the
	// registration costs at most one retry delay.
	var wake *waiter
	defer func() { r.unregister(wake, o.win != nil) }()
	var d time.Duration
	if p.ttl > 0 {
		d = drift(cfg.driftFactor, p.ttl)
	}
	// An Acquire that may wait joins the queue of this Redlock's waiters
	// for the same resources, when there is one, before its first attempt:
	// trying at once would jump the queue, and could split the nodes with
	// the head's attempt at the next release.
	if p.s.op == OpAcquire && cfg.wake && cfg.retryCount != 0 {
		if wake = r.register(p.keys, true); wake != nil && !sleep(ctx, retryDelay(cfg), wake.channel(), false) {
			return fail("not attempted", nil, ctx.Err())
		}
	}
	for i := 0; ; i++ {
		if p.s.op == OpExtend && !time.Now().Before(p.until) {
			return fail("cannot extend an already-expired lock", ErrLockExpired, nil)
		}
		if p.s.op == OpAcquire {
			// Every acquire attempt writes a value of its own, so that the
			// release of a failed attempt's partial writes (sent without
			// waiting, below) can never delete what a later attempt
			// wrote, whatever order the commands reach a node in. A fresh
			// slice: the previous attempt's goroutines may still read theirs.
			o.value = randomValue()
			p.args = []any{o.value, p.args[1]}
		}
		timeout := cfg.nodeTimeout
		if p.ttl > 0 {
			// An answer after the validity is over could not be used.
			timeout = min(timeout, p.ttl-d)
		}
		st, as := r.attempt(ctx, cfg, p.s, p.keys, p.args, timeout)
		locked := 0 // votes that say "held by another" / "no longer ours"
		for _, v := range st.VotesAgainst {
			if _, ok := v.Err.(*ResourceLockedError); ok {
				locked++
			}
		}
		if len(st.VotesFor) >= q {
			// The Redlock spec's step 4: the lock is only held if some
			// validity is left after the time the attempt took.
			if p.ttl > 0 && time.Since(st.Start) >= p.ttl-d {
				st.Late = true
			}
		}
		if unlimited {
			o.attempts = append(o.attempts[:0], st) // keep the last only
		} else {
			o.attempts = append(o.attempts, st)
		}
		last := &o.attempts[len(o.attempts)-1]
		if len(st.VotesFor) >= q && !st.Late {
			o.win = last
			return o
		}
		// A failed acquire attempt releases what it may have written
		// before anything else happens (the Redlock spec; node-redlock v5
		// keeps partial holds across retries, and waiters on one resource
		// can then split the nodes between them until they give up).
		// Only a node that said "held by another" surely wrote nothing; a
		// vote for, an error, or no answer yet may all mean a write. The
		// release runs even when ctx has ended, and is not waited for: a
		// failed or cancelled Acquire returns at once.
		if p.s.op == OpAcquire && locked < n {
			r.releaseAttempt(as)
		}

		// A quorum of "not held" for extend or release cannot change by
		// retrying: the value is gone from those nodes for good.
		if p.s.op != OpAcquire && locked > n-q {
			return fail("the lock is no longer held by a quorum", ErrLockExpired, nil)
		}
		// Contention is judged on the last attempt that ctx did not cut
		// short: one cut mid-way holds ctx errors, not the nodes' answers.
		if err := ctx.Err(); err != nil {
			return fail("cut short", sentinel, err)
		}
		sentinel = nil
		if p.s.op == OpAcquire && locked > n-q {
			sentinel = ErrResourceLocked
		}
		// A release after the lock's validity has passed gets one attempt
		// (to delete what may be left), not a retry window (node-redlock
		// retries for 2s, or for ever with -1).
		if p.s.op == OpRelease && !time.Now().Before(p.until) {
			return fail("the lock expired before it could be released", ErrLockExpired, nil)
		}
		if !unlimited && i >= cfg.retryCount {
			return fail("unable to achieve a quorum during its retry window", sentinel, nil)
		}
		if wake == nil && p.s.op == OpAcquire && cfg.wake {
			wake = r.register(p.keys, false)
		}
		if wake != nil {
			v := o.value // this attempt's cleanup must not wake us
			wake.self.Store(&v)
		}
		// Some votes for, yet no quorum: another waiter took the rest.
		split := p.s.op == OpAcquire && len(st.VotesFor) > 0
		if !sleep(ctx, retryDelay(cfg), wake.channel(), split) {
			return fail("cut short", sentinel, ctx.Err())
		}
	}
}

// Acquire locks resources for ttl on a quorum of nodes and returns the Lock.
// All resources are locked together or none is. Failed attempts are retried
// as the options say (Default: 10 retries, 200ms ± 100ms apart); whatever a
// failed attempt wrote is released before the next one.
//
// The Lock's expiration is the start of the successful attempt + ttl - drift
// ([WithDriftFactor]); an attempt that reaches a quorum only after that time
// counts as failed.
//
// Acquire returns an error matching [ErrInvalidArgument] for bad input (no or
// empty or duplicate resources, ttl not a positive whole number of
// milliseconds or not above the drift allowance, an option out of range),
// before anything is sent. Otherwise its errors are [*ExecutionError]s that
// match [ErrResourceLocked] on contention and ctx.Err() when ctx ended the
// call; a quorum lost to node failures matches neither.
func (r *Redlock) Acquire(ctx context.Context, resources []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := r.ready(ctx); err != nil {
		return nil, err
	}
	cfg, err := r.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	if err := validateResources(resources); err != nil {
		return nil, err
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return nil, err
	}
	return r.acquire(ctx, cfg, resources, ttl)
}

// acquire is Acquire after validation.
func (r *Redlock) acquire(ctx context.Context, cfg *config, resources []string, ttl time.Duration) (*Lock, error) {
	keys := append([]string(nil), resources...) // the caller may reuse theirs
	// execute draws each attempt's value; args[1] is the ttl.
	p := plan{s: acquireScript, keys: keys, args: []any{nil, int64(ttl / time.Millisecond)}, ttl: ttl}
	o := r.execute(ctx, cfg, &p)
	if o.err != nil {
		return nil, o.err
	}
	return &Lock{
		redlock:    r,
		cfg:        cfg,
		resources:  keys,
		value:      o.value,
		expiration: o.win.Start.Add(ttl - drift(cfg.driftFactor, ttl)),
		attempts:   o.attempts,
	}, nil
}

// Extend sets the ttl of lock's resources to ttl from now on a quorum of
// nodes and returns a new Lock with the new expiration; lock itself is spent
// and must not be used again. Options start from those lock was acquired
// with.
//
// Extend returns an error matching [ErrInvalidArgument] for a nil Lock, a
// Lock of another Redlock, a bad ttl or option. It returns an
// [*ExecutionError] matching [ErrLockExpired] at once, without retrying, when
// the lock's validity has passed, it was already released or extended, or a
// quorum of nodes no longer holds it; matching ctx.Err() when ctx ended the
// call; and matching neither when node failures kept it from a quorum.
func (r *Redlock) Extend(ctx context.Context, lock *Lock, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := r.owns(ctx, lock); err != nil {
		return nil, err
	}
	cfg, err := lock.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return nil, err
	}
	if lock.spent.Load() {
		return nil, &ExecutionError{Op: OpExtend, Resources: lock.resources, reason: "the lock was already released or extended", sentinel: ErrLockExpired}
	}
	p := plan{s: extendScript, keys: lock.resources, args: []any{lock.value, int64(ttl / time.Millisecond)}, ttl: ttl, until: lock.expiration}
	o := r.execute(ctx, cfg, &p)
	if o.err != nil {
		return nil, o.err
	}
	lock.spent.Store(true)
	return &Lock{
		redlock:    r,
		cfg:        lock.cfg,
		resources:  lock.resources,
		value:      lock.value,
		expiration: o.win.Start.Add(ttl - drift(cfg.driftFactor, ttl)),
		attempts:   o.attempts,
	}, nil
}

// Release deletes lock's resources on every node that still holds its value,
// and succeeds when a quorum did. The Lock is spent after a successful
// release, or one that found the lock gone; after a release that failed on
// node errors it may be released again. Options start from those lock was
// acquired with.
//
// Release returns an error matching [ErrInvalidArgument] for a nil Lock or a
// Lock of another Redlock. It returns an [*ExecutionError] matching
// [ErrLockExpired] at once when the lock was already released or extended, a
// quorum of nodes no longer holds it, or its validity had passed and one
// attempt did not find it on a quorum; matching ctx.Err() when ctx ended the
// call; and matching neither when node failures kept it from a quorum.
func (r *Redlock) Release(ctx context.Context, lock *Lock, opts ...Option) (*ExecutionResult, error) {
	if err := r.owns(ctx, lock); err != nil {
		return nil, err
	}
	cfg, err := lock.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	if lock.spent.Load() {
		// Another Lock with the same value may be alive (an extension):
		// deleting the keys now would release it.
		return nil, &ExecutionError{Op: OpRelease, Resources: lock.resources, reason: "the lock was already released or extended", sentinel: ErrLockExpired}
	}
	p := plan{s: releaseScript, keys: lock.resources, args: []any{lock.value}, until: lock.expiration}
	o := r.execute(ctx, cfg, &p)
	if o.err != nil {
		if errors.Is(o.err, ErrLockExpired) {
			lock.spent.Store(true)
		}
		return nil, o.err
	}
	lock.spent.Store(true)
	return &ExecutionResult{Attempts: o.attempts, Start: o.win.Start}, nil
}

// ready refuses a nil Redlock, one not made by New, and a nil ctx.
func (r *Redlock) ready(ctx context.Context) error {
	if r == nil || r.cfg == nil {
		return invalid("nil or zero Redlock: make one with New")
	}
	if ctx == nil {
		return invalid("nil context")
	}
	return nil
}

// owns refuses a nil Lock, a zero Lock, and a Lock acquired through another
// Redlock.
func (r *Redlock) owns(ctx context.Context, lock *Lock) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	switch {
	case lock == nil:
		return invalid("nil lock")
	case lock.redlock == nil:
		return invalid("zero Lock: locks come from Acquire or Extend")
	case lock.redlock != r:
		return invalid("the lock was acquired through another Redlock")
	}
	return nil
}
