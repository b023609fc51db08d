package redlock

import (
	"time"

	"github.com/go-redlock/redlock/internal/lane"
)

// An Option changes a setting. Options given to [New] become the defaults of
// that Redlock; options given to a call (Acquire, Extend, Release, Using)
// override them for that call only. A Lock remembers the options it was
// acquired with, and Extend and Release on it start from those.
//
// Option values are immutable and may be shared between goroutines. A nil
// Option is ignored.
type Option func(*config)

// config holds every setting. It is copied, never shared for writing: the
// per-call state (attempt counters, jitter) lives in the call.
type config struct {
	driftFactor        float64
	retryCount         int
	retryDelay         time.Duration
	retryJitter        time.Duration
	extensionThreshold time.Duration
	nodeTimeout        time.Duration
	onError            func(error)
	wake               bool
	fencing            bool
	permits            int           // WithPermits; 0 and 1: exclusive
	shared             bool          // WithShared
	handOver           int           // WithHandOver: local hand-overs in a row; 0: off
	handOverWindow     time.Duration // WithHandOver: how long a chain of them may last
	fair               bool          // WithFairQueue
	ack                *lane.Ack     // WithReplicaAck, WithAOFAck; nil: none
	observer           *Observer     // WithObserver; nil: none
}

// defaultConfig holds every default, node-redlock's where it has one.
func defaultConfig() config {
	return config{
		driftFactor:        0.01,
		retryCount:         10,
		retryDelay:         200 * time.Millisecond,
		retryJitter:        100 * time.Millisecond,
		extensionThreshold: 500 * time.Millisecond,
		nodeTimeout:        100 * time.Millisecond,
		wake:               true,
		permits:            1,
		handOver:           defaultHandOver,
		handOverWindow:     defaultHandOverWindow,
	}
}

// maxPermits bounds WithPermits: each acquire reads every permit key of
// its resources on every node.
const maxPermits = 1024

// Bounds of the duration options. A node timeout below minNodeTimeout leaves
// no time for any answer; maxDuration keeps every sum of delays (a retry
// delay plus its jitter, a threshold plus Using's 100ms) far from overflowing.
const (
	minNodeTimeout = time.Millisecond
	maxDuration    = 24 * time.Hour
)

// validate reports the first setting that is out of range.
func (c *config) validate() error {
	switch {
	case !(c.driftFactor >= 0 && c.driftFactor < 1): // also catches NaN
		return invalid("drift factor %v is outside [0, 1) (WithDriftFactor)", c.driftFactor)
	case c.retryCount < -1:
		return invalid("retry count %d is below -1 (WithRetryCount: 0 tries once, -1 retries until ctx ends)", c.retryCount)
	case c.retryDelay < 0 || c.retryDelay > maxDuration:
		return invalid("retry delay %v is outside [0, %v] (WithRetryDelay)", c.retryDelay, maxDuration)
	case c.retryJitter < 0 || c.retryJitter > maxDuration:
		return invalid("retry jitter %v is outside [0, %v] (WithRetryJitter)", c.retryJitter, maxDuration)
	case c.extensionThreshold < 0 || c.extensionThreshold > maxDuration:
		return invalid("automatic extension threshold %v is outside [0, %v] (WithAutomaticExtensionThreshold)", c.extensionThreshold, maxDuration)
	case c.nodeTimeout < minNodeTimeout || c.nodeTimeout > maxDuration:
		return invalid("node timeout %v is outside [%v, %v] (WithNodeTimeout)", c.nodeTimeout, minNodeTimeout, maxDuration)
	case c.permits < 1 || c.permits > maxPermits:
		return invalid("%d permits is outside [1, %d] (WithPermits; 1 is the exclusive lock)", c.permits, maxPermits)
	case c.permits > 1 && c.shared:
		return invalid("WithPermits(%d) and WithShared(true) together: a lock is a semaphore or a shared lock, not both", c.permits)
	case c.handOver < 0 || c.handOver > maxHandOver:
		return invalid("%d hand-overs is outside [0, %d] (WithHandOver; 0 turns hand-over off)", c.handOver, maxHandOver)
	case c.handOver > 0 && (c.handOverWindow <= 0 || c.handOverWindow > maxDuration):
		return invalid("hand-over window %v is outside (0, %v] (WithHandOver)", c.handOverWindow, maxDuration)
	case c.fair && (c.fencing || c.permits > 1 || c.shared):
		return invalid("WithFairQueue with WithFencing, WithPermits or WithShared: the fair queue is for the plain exclusive lock; " +
			"drop one of them (WithHandOver hands a fenced lock over within a process)")
	case c.fencing && (c.permits > 1 || c.shared):
		return invalid("WithFencing with a semaphore or a shared lock: a fencing token orders holders that exclude each other, " +
			"and permits or shared locks are held side by side; fence the exclusive lock that writes")
	}
	if a := c.ack; a != nil {
		name := "WithReplicaAck"
		if a.AOF {
			name = "WithAOFAck"
		}
		switch {
		case a.Replicas < 0:
			return invalid("%d replicas is negative (%s)", a.Replicas, name)
		case a.Timeout < time.Millisecond || a.Timeout%time.Millisecond != 0:
			return invalid("replica wait %v is not a positive whole number of milliseconds (%s)", a.Timeout, name)
		case 2*a.Timeout >= c.nodeTimeout:
			return invalid("replica wait %v is not below half the node timeout %v: a node that must be sent the scripts again "+
				"(after a restart) waits twice, and would be given up on; lower the wait in %s or raise WithNodeTimeout", a.Timeout, c.nodeTimeout, name)
		}
	}
	return nil
}

// with returns a copy of c with opts applied and validated. Without options
// it returns c itself, so the common call allocates nothing here.
func (c *config) with(opts []Option) (*config, error) {
	if len(opts) == 0 {
		return c, nil
	}
	cc := *c
	for _, o := range opts {
		if o != nil {
			o(&cc)
		}
	}
	if err := cc.validate(); err != nil {
		return nil, err
	}
	return &cc, nil
}

// WithDriftFactor sets the fraction of the ttl that is taken off a lock's
// validity for clock drift between nodes; 2 ms are taken off as well. It must
// be in [0, 1). Default: 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *config) { c.driftFactor = f }
}

// WithRetryCount sets how many times a failed attempt is retried: 0 means a
// single attempt (a try-lock), -1 means retry until ctx ends. Default: 10.
//
// With n > 0, an Acquire tries for a window of n × the retry delay (default
// 10 × 200ms = 2s): a retry that a release announcement woke early
// ([WithWakeOnRelease]) does not count against n within that window, and
// does past it. An error that retrying cannot fix (a wrong password, an ACL,
// resources in different Cluster slots) ends the call at once.
func WithRetryCount(n int) Option {
	return func(c *config) { c.retryCount = n }
}

// WithRetryDelay sets the base delay between two attempts, at most 24h.
// Default: 200ms.
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) { c.retryDelay = d }
}

// WithRetryJitter sets the jitter added to each retry delay: a uniformly
// random amount in [-j, +j), so that contending callers spread out. The delay
// never goes below zero. At most 24h. Default: 100ms.
func WithRetryJitter(j time.Duration) Option {
	return func(c *config) { c.retryJitter = j }
}

// WithAutomaticExtensionThreshold sets how long before a lock's expiration
// [Redlock.Using] extends it, at most 24h. Using requires ttl >= threshold +
// 100ms, and a threshold of at least the node timeout ([WithNodeTimeout]): an
// extension may need a whole node timeout to hear from a quorum, and the lock
// must not expire meanwhile. Default: 500ms.
func WithAutomaticExtensionThreshold(d time.Duration) Option {
	return func(c *config) { c.extensionThreshold = d }
}

// WithNodeTimeout sets how long one attempt waits for a node's answer to a
// script call. A node that has not answered by then votes against, and the
// attempt is decided without it. The timeout is enforced by redlock itself,
// so it holds even when the go-redis client has no timeout of its own (or
// ignores context deadlines, as go-redis does unless ContextTimeoutEnabled is
// set). For acquire and extend it is further capped at the lock's validity,
// since a later answer could not be used. It must be in [1ms, 24h].
//
// Only a node's own silence past this timeout counts against it: after one,
// calls to that node (on a Cluster, that shard) fail at once without being
// sent, until one node timeout has passed, when one call is sent alone as a
// probe; an answer to it ends the pause. So a node that does not answer holds
// at most 4 of redlock's call goroutines, however many calls are made
// meanwhile, and costs each caller nothing more than a vote against. A
// release it does not reply to is kept and sent again when it answers. A
// node's first connection is waited for 5 node timeouts. Default: 100ms.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout = d }
}

// WithErrorHandler sets a function that receives every vote against, as a
// [*NodeError], the way node-redlock emits its "error" event: contention,
// network and Redis errors, and per-node timeouts, including those of the
// cleanup after a failed acquire and those that arrive after the call that
// caused them has returned. It is called from redlock's goroutines, possibly
// concurrently, and must not block for long. A nil handler turns it off.
// Default: none.
//
// For example, to log with log/slog:
//
//	redlock.WithErrorHandler(func(err error) { slog.Warn("redlock vote", "err", err) })
func WithErrorHandler(fn func(err error)) Option {
	return func(c *config) { c.onError = fn }
}

// WithWakeOnRelease sets whether a waiting Acquire wakes as soon as one of
// its resources is released, instead of only after its retry delay. Every
// release announces the resources it freed on [ReleasedChannel] on its node (on a Cluster, with sharded pub/sub
// on a channel in each resource's slot); the Redlock subscribes on every
// node, one connection each (on a Cluster, one per resource waited for),
// when an Acquire first has to wait. The Acquires of one Redlock that wait
// for the same resources queue, first come first served: an announcement
// wakes the longest waiter, which tries again at once; the others go on
// waiting, or try at their retry delay. A new Acquire that may wait joins
// the queue, when there is one, before its first attempt. A wake does not
// use up a retry: the retry window is at least retries × delay, whatever is
// announced. The cleanup of a failed attempt announces nothing. A node that
// does not allow pub/sub, or a lost announcement, costs at most
// the retry delay. [Redlock.Close] ends the subscriptions. Default: true.
func WithWakeOnRelease(on bool) Option {
	return func(c *config) { c.wake = on }
}

// WithFencing sets whether Acquire and Using draw a fencing token for the
// lock ([Lock.Token], [TokenFrom]): a number that grows with every fenced
// lock granted on a resource, which the protected resource checks so that a
// holder paused past its expiration (a GC pause, a stopped VM) cannot write
// after the next holder did. Default: false.
//
// Each node keeps a counter per resource, under the key
// "redlock:fence:{tag}:resource" (tag is the resource's hash tag, or the
// resource itself; so a Redis Cluster keeps it in the resource's slot),
// with no expiry ([FenceKey] gives the name; names in redlock:fence:* are
// refused as resources): about 110 bytes per resource ever fenced (measured
// on Redis 7.0; the figures are in README.md). A fenced
// Acquire makes one more round trip after its quorum: it writes the token
// back to the nodes, and the lock is granted when a quorum took it within
// the lock's validity. On healthy nodes the first fenced lock of a resource
// gets 1, the next 2, and so on; for several resources, 1 + the highest of
// their counters, written back to each. Unfenced locks and failed attempts
// leave the counters alone (a write-back that reached some nodes but not a
// quorum in time may skip a number).
//
// The guarantee holds under the same assumptions as mutual exclusion, a
// majority of nodes up and keeping their data; the package doc gives the
// argument and what breaks it. The option applies to Acquire and Using;
// Extend keeps the token, and Release leaves the counters as they are.
func WithFencing(on bool) Option {
	return func(c *config) { c.fencing = on }
}

// WithReplicaAck makes a node's vote for an acquire, an extend or a fencing
// write-back count only once the write has reached at least replicas of the
// node's replicas, waiting for them up to timeout (the WAIT command, sent
// on the same connection right after the script). A node whose write falls
// short votes against with a [*ReplicaAckError]; the write stays there until
// the failed attempt's cleanup or the lock's release deletes it. So a lock
// survives a failover of a node (a Sentinel group, a Cluster shard) to a
// replica that took it. Releases are not waited for. ExecutionStats
// .ReplicaAcks says how many replicas each node's write reached.
//
// timeout must be a whole number of milliseconds, below half the node
// timeout ([WithNodeTimeout]): each call waits for its replicas within it,
// twice on a node that lacks the scripts (after a restart). A node ends a
// WAIT up to 1000/hz ms after its timeout (100ms with Redis's default hz
// 10), so leave that much room too: WithNodeTimeout(500ms) for a wait of
// 100ms, say. On a
// Redis Cluster, the script and WAIT go to the shard's primary on one of its
// own connections. replicas 0 turns it off. WAIT is not consensus: Redis's
// documentation notes that a failover can still lose an acknowledged write
// in rare cases (a replica that took it but is not the one promoted).
// Default: off.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) {
		if replicas == 0 {
			c.ack = nil
			return
		}
		c.ack = &lane.Ack{Replicas: replicas, Timeout: timeout}
	}
}

// WithAOFAck is [WithReplicaAck] with WAITAOF (Redis 7.2 and later): the
// write must be in the append-only file of at least replicas replicas, and,
// with local, of the node itself (which then needs appendonly yes). On a
// node older than 7.2 every such vote is a refusal that says so, and the
// call ends: it never passes for a wait that was not made. local false and
// replicas 0 turns it off. Default: off.
func WithAOFAck(local bool, replicas int, timeout time.Duration) Option {
	return func(c *config) {
		if !local && replicas == 0 {
			c.ack = nil
			return
		}
		l := 0
		if local {
			l = 1
		}
		c.ack = &lane.Ack{Replicas: replicas, Local: l, AOF: true, Timeout: timeout}
	}
}

// WithPermits makes Acquire and Using take one of n permits of each
// resource: a counting semaphore, at most n holders at once, which keeps
// its bound while a minority of nodes fails. The Lock holds its permit;
// Extend and Release work on it, and a release wakes one waiter. Each
// resource has n permit keys on every node ("redlock:permit:{tag}:" +
// resource + ":" + i, in its Cluster slot), and its own key holds
// "redlock:permits:n" while a permit is held. A permit is a lock on one of
// the permit keys, granted when a quorum took the same one, so the argument
// for mutual exclusion bounds each permit to one holder. Each acquire reads
// the n permit keys on every node, so n is at most 1024.
//
// All the users of a resource must agree on its kind: a semaphore call on a
// resource held as a semaphore of another n, or as a shared lock, fails at
// once with an error naming both; an exclusive lock of a resource that
// permits are held on waits until they are all released (and a semaphore
// waits for an exclusive holder). WithPermits(1), the default, is the
// exclusive lock, unchanged on the wire. It cannot be combined with
// [WithFencing] or [WithShared]. n out of [1, 1024] is refused.
func WithPermits(n int) Option {
	return func(c *config) { c.permits = n }
}

// WithShared makes Acquire and Using take a shared (read) lock when on:
// shared locks of a resource are held side by side, and an exclusive lock
// (the default kind) excludes them all, and is excluded by any. Extend and
// Release work on it as on any lock. Each resource's readers are a sorted
// set beside it ("redlock:readers:{tag}:" + resource), and its own key
// holds "redlock:shared" while a reader holds it, so an exclusive acquire
// waits. An exclusive acquire that finds readers marks the resource
// ("redlock:shared:w:" and until when) on each node: no new reader is
// granted there until the readers have left, so a writer waits at most for
// the longest reader already in, however many readers come and go. The
// mark lasts 2 s (or the writer's ttl, when shorter) from the writer's last
// attempt: a writer that gave up keeps new readers out no longer than that,
// and one that retries less often than every 2 s (WithRetryDelay) may let
// readers in between its attempts. Safety is by intersection:
// a reader's quorum and a writer's share a node, which refuses whichever
// came second. It cannot be combined with [WithFencing] or [WithPermits].
// Default: off.
func WithShared(on bool) Option {
	return func(c *config) { c.shared = on }
}

// WithHandOver sets how a Release hands the lock to an Acquire of the same
// Redlock that waits for it (the same resources, in any order, with the
// same ttl, fencing and acknowledgement; [WithWakeOnRelease] on), instead of
// releasing it: nothing is sent, the nodes keep the lock's value, which is
// now the waiter's, and the waiter's Lock expires when the releasing
// holder's would have. [ExecutionResult].HandedOver reports it, the
// observer is told of the release as of any other, and the waiter's Acquire
// returns at once. A fenced lock ([WithFencing]) draws a new token first,
// its old token + 1 written to a quorum of counters (one round trip, instead
// of the release's, the wake's and the acquire's two).
//
// The lock is released for real instead when: max hand-overs in a row have
// been made since the nodes granted it, or window has passed since then (so
// that waiters in other processes get their turn); less than half its ttl
// is left; an Extend of it is in flight; no such waiter waits. The
// argument that mutual exclusion and validity hold is in the package doc
// ("Contended locks"). max 0 turns it off; max is at most 2^20 and window
// must be positive. Only exclusive locks are handed over, and not with
// [WithFairQueue], whose queue decides who is next. Default: on, 16 in a
// row within 100ms: under contention in one process, the lock is busy
// nearly all the time (94% against 65% without, in benchmarks/README.md),
// and a waiter elsewhere waits at most 100ms more than it would have.
func WithHandOver(max int, window time.Duration) Option {
	return func(c *config) { c.handOver, c.handOverWindow = max, window }
}

// WithFairQueue sets whether an Acquire of an exclusive lock that finds its
// resources held queues for them on the nodes, first come first served
// across processes: each node orders a resource's waiters by when each began
// waiting (on its own clock: one behind by d is served as if it came d
// earlier). A release hands each resource to the head, which holds the lock
// once a quorum of nodes announced it ([WithWakeOnRelease]). A waiter asks
// again at least every third of a second (5/3 node timeouts if longer) to
// keep its place; one that gives up leaves at once, one that vanished after
// a second (a lock handed to it stays for its ttl).
//
// Only Acquires with this option queue. Other clients (a plain Acquire,
// node-redlock, redsync, SET NX) find a resource handed to a waiter held;
// one they free themselves, or that expires, goes to the first of them or
// the head to reach a quorum. A plain Release of this library wakes the
// head, which tries at once; others announce nothing, and a client that
// takes the resource again as soon as it frees it overtakes the head until
// an attempt of the head's finds it free. Mutual exclusion holds with all.
// The queues are two sorted sets per resource ("redlock:queue:" and
// "redlock:qlive:", then "{tag}:" + resource, in its Cluster slot), which
// expire two seconds after the last waiter asked. It cannot be combined with
// [WithFencing], [WithPermits] or [WithShared], and turns [WithHandOver]
// off. Default: off (a queue write per contended attempt).
func WithFairQueue(on bool) Option {
	return func(c *config) { c.fair = on }
}
