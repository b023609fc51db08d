package redlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
)

// The options that shape a lock ([LockOption]): taken where a lock or a
// term is made; and the validation of every setting (with).

// WithWakeOnRelease sets whether a waiting Acquire wakes as soon as one of
// its resources is released, instead of only after its retry delay. Every
// release announces the resources it freed on [ReleasedChannel] on its node (on a Cluster, with sharded pub/sub
// on a channel in each resource's slot); the Redlock subscribes on every
// node, one connection each (on a Cluster, one per resource waited for,
// closed when its last waiter leaves), when an Acquire first has to wait or
// a lock is first held: a held lock hears its force release on the same
// subscriptions (on a Cluster, only while a waiter of the process has the
// resource's open). With false, neither opens them. The Acquires of one Redlock that wait
// for the same resources queue, first come first served: an announcement
// wakes the longest waiter, which tries again at once; the others go on
// waiting, or try at their retry delay. A new Acquire that may wait joins
// the queue, when there is one, before its first attempt. A wake does not
// use up a retry: the retry window is at least retries × delay, whatever is
// announced. The cleanup of a failed attempt announces nothing. A node that
// does not allow pub/sub, or a lost announcement, costs at most
// the retry delay. [Redlock.Close] ends the subscriptions. Default: true.
func WithWakeOnRelease(on bool) LockOption {
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
// on Redis 7.0: benchmarks/README.md, "What each feature costs"). A fenced
// Acquire makes one more round trip after its quorum: it writes the token
// back to the nodes, and the lock is granted when a quorum took it within
// the lock's validity. On healthy nodes the first fenced lock of a resource
// gets 1, the next 2, and so on; for several resources, 1 + the highest of
// their counters, written back to each. Unfenced locks and failed attempts
// leave the counters alone (a write-back that reached some nodes but not a
// quorum in time may skip a number).
//
// The guarantee holds under the same assumptions as mutual exclusion, a
// majority of nodes up and keeping their data; RELIABILITY.md gives the
// argument ("Why it holds") and what breaks it ("Tokens and data loss").
// The option applies to Acquire and Using;
// Extend keeps the token, and Release leaves the counters as they are.
func WithFencing(on bool) LockOption {
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
// .ReplicaAcks says how many replicas each node's write reached. Three
// Sentinel groups as the nodes, each write acknowledged by one replica
// within 100ms (every node must have the replicas asked for):
//
//	a := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "locks-a", SentinelAddrs: sentinels})
//	// b and c likewise
//	rl, err := redlock.New([]redis.UniversalClient{a, b, c},
//		redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithReplicaAck(1, 100*time.Millisecond))
//
// timeout must be a whole number of milliseconds, below half the node
// timeout ([WithNodeTimeout]): each call waits for its replicas within it,
// twice on a node that lacks the scripts (after a restart). A node ends a
// WAIT up to 1000/hz ms after its timeout (100ms with Redis's default hz
// 10), so leave that much room too: WithNodeTimeout(500ms) for a wait of
// 100ms, say. go-redis reads WAIT's answer under the client's ReadTimeout,
// so a call on a client whose ReadTimeout is below the wait + 100ms is
// refused with an error matching [ErrInvalidArgument], before anything is
// sent. On a Redis Cluster, the script and WAIT go to the shard's primary
// on one of its own connections. The calls of a lock that waits for
// replicas, its release included, take lanes of their own on each node
// (with their own bound on parked goroutines, see [WithNodeTimeout]), so
// that plain locks never wait behind a WAIT. replicas 0 turns it off.
// WAIT is not consensus: Redis's documentation notes that a failover can
// still lose an acknowledged write in rare cases (a replica that took it but
// is not the one promoted); ask for every replica when that matters, and
// let the Sentinels or the Cluster promote the most up-to-date one.
// Default: off.
func WithReplicaAck(replicas int, timeout time.Duration) LockOption {
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
// node older than 7.2 every such vote is a refusal that names the node's
// server and version ("the node (Redis 6.2.9) lacks WAITAOF, which
// WithAOFAck needs ..."), and the call ends: it never passes for a wait that was not
// made. A replica tells its primary of a write it wrote to its file after
// answering the primary's request for acknowledgements only at its next
// report, once a second: a wait under 1s can then fall short though the
// replica has the write (RELIABILITY.md, "Servers"); give it a second or
// more, with a node timeout above twice that. local false and
// replicas 0 turns it off. Default: off.
func WithAOFAck(local bool, replicas int, timeout time.Duration) LockOption {
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
// for mutual exclusion bounds each permit to one holder (counting holders
// per node would not: RELIABILITY.md, "Why it holds"). Each node takes a
// free permit in an order drawn from the attempt's random value, so that
// contenders spread over the permits; a node that took another permit than
// the quorum's releases it at once. Each acquire reads the n permit keys on
// every node, so n is at most 1024.
//
// All the users of a resource must agree on its kind: a semaphore call on a
// resource held as a semaphore of another n, or as a shared lock, fails at
// once with an error naming both. An exclusive lock of a resource that
// permits are held on waits until they are all released, and a semaphore
// waits for an exclusive holder. WithPermits(1), the default, is the
// exclusive lock, unchanged on the wire. It cannot be combined with
// [WithShared], nor with [WithFencing]: a token orders holders that exclude
// each other, and permits are held side by side (fence the exclusive lock
// that writes). n out of [1, 1024] is refused.
func WithPermits(n int) LockOption {
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
func WithShared(on bool) LockOption {
	return func(c *config) { c.shared = on }
}

// WithHandOver sets how a Release hands the lock to an Acquire of the same
// Redlock that waits for it (the same resources, in any order, with the
// same ttl, fencing and acknowledgement; [WithWakeOnRelease] on), instead of
// releasing it. Nothing is sent then: the nodes keep the lock's value,
// which is now the waiter's, and the waiter's Lock expires when the
// releasing holder's would have. [ExecutionResult].HandedOver reports it, the
// observer is told of the release as of any other, and the waiter's Acquire
// returns at once. A fenced lock ([WithFencing]) draws a new token first,
// its old token + 1 written to a quorum of counters (one round trip, instead
// of the release's, the wake's and the acquire's two).
//
// The lock is released for real instead when: max hand-overs in a row have
// been made since the nodes granted it, or window has passed since then (so
// that waiters in other processes get their turn); less than half its ttl
// is left; an Extend of it is in flight; no such waiter waits. The
// argument that mutual exclusion and validity hold is in RELIABILITY.md
// ("Why it holds"). max 0 turns it off; max is at most 2^20 and window
// must be positive. Only exclusive locks are handed over, and not with
// [WithFairQueue], whose queue decides who is next, nor without
// [WithWakeOnRelease]: New's default does not apply to those, and
// WithHandOver given with [WithPermits], [WithShared], WithFairQueue or
// WithWakeOnRelease(false) (in the same call, or to New) is refused. A
// Release takes it too: WithHandOver(0, 0) there releases for real.
// Default: on, 16 in a row within 100ms: under contention in one process,
// the lock is busy nearly all the time (94% against 65% without, in
// benchmarks/README.md), and a waiter elsewhere waits at most 100ms more
// than it would have.
func WithHandOver(max int, window time.Duration) HandOverOption {
	return func(c *config) { c.handOver, c.handOverWindow, c.given = max, window, c.given|givenHandOver }
}

// WithFairQueue sets whether an Acquire of an exclusive lock that finds its
// resources held queues for them on the nodes, first come first served
// across processes: each node orders a resource's waiters by when each began
// waiting (on its own clock: one behind by d is served as if it came d
// earlier). A release hands each resource to the head, which holds the lock
// once a quorum of nodes announced it ([WithWakeOnRelease]). A waiter asks
// again at least every third of a second (5/3 node timeouts if longer) to
// keep its place; one that gives up leaves at once, one that vanished after
// a second (a lock handed to it stays for its ttl). A node hands the
// resource over after it answered the head's last attempt "queued", so the
// head counts its validity from the start of that attempt, never counting
// time that a node does not; with less than half its ttl left so counted,
// it makes an attempt instead (RELIABILITY.md, "Why it holds").
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
// [WithFencing], [WithPermits] or [WithShared], nor with
// [WithWakeOnRelease](false) (a waiter hears of a hand-over from the
// announcements). Its queue, not [WithHandOver], decides who is next: New's
// hand-over default does not apply to it, and WithHandOver given with it is
// refused. Default: off (a queue write per contended attempt).
func WithFairQueue(on bool) LockOption {
	return func(c *config) { c.fair = on }
}

// WithIdentity sets who takes the locks, the permits, the shared locks and
// the terms: [Redlock.Inspect] shows it for each holder, so that an
// operator can tell which host, process or job holds a resource. It is
// recorded in the lock's value (its 32 random hex characters, then "@" and
// the identity, escaped so that it holds no ':', '%', space or byte outside
// printable ASCII), so it costs no round trip. The clients of node-redlock,
// which compare values as opaque strings, exclude and are excluded as
// before. id is at most [MaxIdentity] bytes of printable UTF-8; "" records
// none (the value is the 32 hex characters alone). Default: the host name
// and the process id, "host/pid" (the host name cut to fit).
func WithIdentity(id string) LockOption {
	return func(c *config) { c.identity, c.idSuffix = id, identitySuffix(id) }
}

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
	}
	if err := c.shapeError(); err != nil {
		return err
	}
	if err := identityError(c.identity); err != nil {
		return err
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
func with[O Option](c *config, opts []O) (*config, error) {
	if len(opts) == 0 {
		return c, nil
	}
	cc := *c
	cc.given = 0
	apply(&cc, opts)
	if err := cc.validate(); err != nil {
		return nil, err
	}
	return &cc, nil
}

// apply applies opts to c, skipping nil ones.
func apply[O Option](c *config, opts []O) {
	for _, o := range opts {
		if any(o) != nil {
			o.apply(c)
		}
	}
}

// shapeError reports the first lock-shaping setting out of range, or
// combination that would mean nothing, naming the options as given.
func (c *config) shapeError() error {
	switch {
	case c.permits > 1 && c.shared:
		return invalid("WithPermits(%d) and WithShared(true) together: a lock is a semaphore or a shared lock, not both", c.permits)
	case c.handOver < 0 || c.handOver > maxHandOver:
		return invalid("%d hand-overs is outside [0, %d] (WithHandOver; 0 turns hand-over off)", c.handOver, maxHandOver)
	case c.handOver > 0 && (c.handOverWindow <= 0 || c.handOverWindow > maxDuration):
		return invalid("hand-over window %v is outside (0, %v] (WithHandOver)", c.handOverWindow, maxDuration)
	case c.fair && (c.fencing || c.permits > 1 || c.shared):
		return invalid("WithFairQueue(true) with %s: the fair queue is for the plain exclusive lock; "+
			"drop one of them (WithHandOver hands a fenced lock over within a process)", c.kindNames())
	case c.fencing && (c.permits > 1 || c.shared):
		return invalid("WithFencing(true) with %s: a fencing token orders holders that exclude each other, "+
			"and permits or shared locks are held side by side; fence the exclusive lock that writes", c.kindNames())
	case c.fair && !c.wake:
		return invalid("WithFairQueue(true) with WithWakeOnRelease(false): a fair waiter learns that the lock was handed to it " +
			"from the nodes' announcements, which it would not hear; drop WithWakeOnRelease(false)")
	case c.given&givenHandOver != 0 && c.handOver > 0 && (c.permits > 1 || c.shared || c.fair || !c.wake):
		return invalid("WithHandOver(%d, %v) with %s: hand-over passes an exclusive lock to a waiter of this Redlock that waits "+
			"for its release's announcement, which this lock has not; drop WithHandOver (the fair queue hands over through the nodes)",
			c.handOver, c.handOverWindow, c.noHandOverNames())
	}
	return nil
}

// kindNames names the options that make c a semaphore or a shared lock.
func (c *config) kindNames() string {
	if c.shared {
		return "WithShared(true)"
	}
	return fmt.Sprintf("WithPermits(%d)", c.permits)
}

// noHandOverNames names the options that leave no hand-over to c.
func (c *config) noHandOverNames() string {
	var names []string
	switch {
	case c.permits > 1, c.shared:
		names = append(names, c.kindNames())
	case c.fair:
		names = append(names, "WithFairQueue(true)")
	}
	if !c.wake {
		names = append(names, "WithWakeOnRelease(false)")
	}
	return strings.Join(names, " and ")
}

// termNames names the options that a term cannot take.
func (c *config) termNames() string {
	if c.fair {
		return "WithFairQueue(true)"
	}
	return c.kindNames()
}

// termOverride names the option that gives a campaign back the exclusive
// lock, over New's default.
func (c *config) termOverride() string {
	switch {
	case c.fair:
		return "WithFairQueue(false)"
	case c.shared:
		return "WithShared(false)"
	}
	return "WithPermits(1)"
}
