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
// its resources is released, instead of only after its retry delay: every
// release announces the resources it freed on [ReleasedChannel], and the
// Redlock subscribes on every node (one connection each; on a Cluster,
// sharded, one per resource waited for) once an Acquire has to wait or a
// lock is held (a held lock hears its force release there). The waiters of
// one Redlock for the same resources are woken first come first served. A
// wake does not use up a retry; a lost announcement costs at most the retry
// delay. With false, no subscription is opened. Default: true.
func WithWakeOnRelease(on bool) LockOption {
	return func(c *config) { c.wake = on }
}

// WithFencing sets whether Acquire and Using draw a fencing token for the
// lock ([Lock.Token], [TokenFrom]): a number that grows with every fenced
// lock granted on a resource, which the protected resource checks so that a
// holder paused past its expiration (a GC pause, a stopped VM) cannot write
// after the next holder did. A fenced Acquire makes one more round trip,
// writing the token back to a quorum of the nodes' counters ([FenceKey];
// kept with no expiry, about 110 bytes per resource). Extend keeps the
// token; Release leaves the counters. The guarantee holds under the same
// assumptions as mutual exclusion (RELIABILITY.md). Default: false.
func WithFencing(on bool) LockOption {
	return func(c *config) { c.fencing = on }
}

// WithReplicaAck makes a node's vote for an acquire, an extend or a fencing
// write-back count only once the write reached at least replicas of the
// node's replicas within timeout (WAIT), so that a lock survives a failover
// of the node (a Sentinel group, a Cluster shard); a node that falls short
// votes against with a [*ReplicaAckError]. timeout must be whole
// milliseconds below half the node timeout, and the clients' ReadTimeout
// above timeout + 100ms. WAIT is not consensus: a failover can still lose
// an acknowledged write in rare cases. replicas 0 turns it off. Default: off.
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
// write must be in the append-only file of at least replicas replicas and,
// with local, of the node itself (appendonly yes). A node older than 7.2
// refuses, naming its version, and the call ends. Replicas report their
// file writes once a second, so give timeout a second or more, with a node
// timeout above twice that. local false and replicas 0 turns it off.
// Default: off.
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
// Extend and Release work on it, and a release wakes one waiter. A permit
// is a lock on one of n permit keys, granted when a quorum took the same
// one. All the users of a resource must agree on its kind: a call with
// another n, or as a shared lock, fails at once naming both; an exclusive
// lock waits for every permit to be released. WithPermits(1), the default,
// is the exclusive lock. n out of [1, 1024] is refused, and so is
// [WithShared] or [WithFencing] with it (fence the exclusive lock that
// writes).
func WithPermits(n int) LockOption {
	return func(c *config) { c.permits = n }
}

// WithShared makes Acquire and Using take a shared (read) lock when on:
// shared locks of a resource are held side by side, and an exclusive lock
// (the default kind) excludes them all and is excluded by any. Extend and
// Release work on it as on any lock. An exclusive acquire that finds
// readers keeps new ones out for 2 s from its last attempt, so a writer
// waits at most for the longest reader already in. It cannot be combined
// with [WithFencing] or [WithPermits]. Default: off.
func WithShared(on bool) LockOption {
	return func(c *config) { c.shared = on }
}

// WithHandOver sets how a Release hands the lock to an Acquire of the same
// Redlock that waits for it (same resources, ttl and options) instead of
// releasing it: nothing is sent, and the waiter gets the lock at once, valid
// as long as the releaser's was. It releases for real after max hand-overs
// in a row or window since the nodes granted it, with less than half the
// ttl left, or with no such waiter. max 0 turns it off (at most 2^20;
// window positive). It is refused with [WithPermits], [WithShared],
// [WithFairQueue] or WithWakeOnRelease(false). Default: 16 within 100ms.
func WithHandOver(max int, window time.Duration) HandOverOption {
	return func(c *config) { c.handOver, c.handOverWindow, c.given = max, window, c.given|givenHandOver }
}

// WithFairQueue sets whether an Acquire of an exclusive lock that finds its
// resources held queues for them on the nodes, first come first served
// across processes: a release hands each resource to the queue's head. A
// waiter keeps its place by asking at least every third of a second.
// Other clients (plain Acquires, node-redlock, SET NX) find a handed
// resource held, and may overtake the head; mutual exclusion holds with
// all. It is refused with [WithFencing], [WithPermits], [WithShared],
// [WithHandOver] or WithWakeOnRelease(false). Default: off.
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
