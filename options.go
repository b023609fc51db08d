package redlock

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// An Option changes a setting. Options given to [New] become the defaults of
// that Redlock; options given to a call override them for that call. A Lock
// remembers the options it was acquired with, and Extend and Release start
// from those.
//
// Options are typed by where they mean something: a [CallOption] (drift,
// retries, node timeout, error handler, observer) goes to every call; a
// [LockOption] (fencing, permits, shared, fair queue, wake on release,
// acknowledgement, extension threshold) to New, Acquire, Using, Campaign and
// Lead; a [HandOverOption] ([WithHandOver]) to those and Release. Extend
// takes CallOptions only and Release a [ReleaseOption]: a misplaced option
// does not compile. Option values are immutable; a nil one is ignored.
type Option interface{ apply(*config) }

// CallOption is an [Option] that means something on every call, Extend and
// Release among them.
type CallOption func(*config)

func (o CallOption) apply(c *config) {
	if o != nil {
		o(c)
	}
}

func (CallOption) releaseOption() {}

// LockOption is an [Option] that shapes a lock: taken by New, Acquire,
// Using, Campaign and Lead, not by Extend or Release (which keep the
// lock's own).
type LockOption func(*config)

func (o LockOption) apply(c *config) {
	if o != nil {
		o(c)
	}
}

// ReleaseOption is an [Option] that Release takes: every [CallOption], and
// [WithHandOver] (WithHandOver(0, 0) releases for real, handing the lock
// to no waiter).
type ReleaseOption interface {
	Option
	releaseOption()
}

// HandOverOption is the [Option] that [WithHandOver] returns: it shapes
// the locks made with it, and a Release may take it too.
type HandOverOption func(*config)

func (o HandOverOption) apply(c *config) {
	if o != nil {
		o(c)
	}
}

func (HandOverOption) releaseOption() {}

// given marks the options a call (or New) was given itself, for the checks
// of combinations that would mean nothing (validate, Acquire).
type given uint8

const (
	givenHandOver given = 1 << iota
	givenThreshold
	givenDrift
)

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
	identity           string        // WithIdentity
	idSuffix           string        // identitySuffix(identity): what follows each value's random part
	given              given         // the options of the last with (or New) that set these bits
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
		identity:           defaultIdentity(),
		idSuffix:           identitySuffix(defaultIdentity()),
	}
}

// The default bound of a chain of in-process hand-overs (WithHandOver).
const (
	defaultHandOver       = 16
	defaultHandOverWindow = 100 * time.Millisecond
	maxHandOver           = 1 << 20
)

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

// WithDriftFactor sets the fraction of the ttl that is taken off a lock's
// validity for clock drift between nodes; 2 ms are taken off as well. It must
// be in [0, 1). A Release, which writes no ttl, reports it as an invalid
// argument (and releases all the same). Default: 0.01.
func WithDriftFactor(f float64) CallOption {
	return func(c *config) { c.driftFactor, c.given = f, c.given|givenDrift }
}

// WithRetryCount sets how many times a failed attempt is retried: 0 means a
// single attempt (a try-lock), -1 means retry until ctx ends. Default: 10.
//
// With n > 0, an Acquire tries for a window of n × the retry delay (default
// 10 × 200ms = 2s), plus what its n+1 attempts wait for the nodes: at most
// a node timeout each, so at most n × (delay + jitter) + (n+1) × the node
// timeout (4.1s by default; 2.4-3.5s measured with 2 of 3 nodes hung). A retry
// that a release announcement woke early ([WithWakeOnRelease]) does not
// count against n within the window, and does past it; a retry delay spent
// queued behind another waiter counts, attempt or not. An error that retrying cannot fix (a wrong password, an ACL,
// resources in different Cluster slots) ends the call at once.
func WithRetryCount(n int) CallOption {
	return func(c *config) { c.retryCount = n }
}

// WithRetryDelay sets the base delay between two attempts, at most 24h.
// Default: 200ms.
//
// An Acquire of one resource whose attempt split the nodes with others (it
// took some, and no value the other nodes named could hold a quorum, a
// node that did not answer counting as anyone's) pauses less, and not
// behind another waiter of its Redlock:
// a random time up to twice the attempt's, doubled for each such split in a
// row, at most the delay. Every contender releases what it wrote without
// announcing it, so no release would wake them while the resource is free.
// That pause counts as a retry.
func WithRetryDelay(d time.Duration) CallOption {
	return func(c *config) { c.retryDelay = d }
}

// WithRetryJitter sets the jitter added to each retry delay: a uniformly
// random amount in [-j, +j), so that contending callers spread out. The delay
// never goes below zero. At most 24h. Default: 100ms.
func WithRetryJitter(j time.Duration) CallOption {
	return func(c *config) { c.retryJitter = j }
}

// WithAutomaticExtensionThreshold sets how long before a lock's expiration
// [Redlock.Using] extends it, at most 24h. Using requires ttl >= threshold +
// 100ms, and a threshold of at least the node timeout ([WithNodeTimeout]): an
// extension may need a whole node timeout to hear from a quorum, and the lock
// must not expire meanwhile. Acquire, which does not extend, refuses it
// (New, Using, Campaign and Lead take it). Default: 500ms.
func WithAutomaticExtensionThreshold(d time.Duration) LockOption {
	return func(c *config) { c.extensionThreshold, c.given = d, c.given|givenThreshold }
}

// WithNodeTimeout sets how long one attempt waits for a node's answer; a
// node that has not answered by then votes against, whatever the client's
// own timeouts. For acquire and extend it is capped at the lock's validity.
// It counts the node's silence, not this process's: a pause of the process
// meanwhile (stopped, starved of CPU, collecting garbage) is added to it,
// at most 4 node timeouts more and never past the validity. After a
// timeout, calls to that node fail at once without being sent until a
// probe answers (one call sent alone per node timeout), so a silent node
// holds at most 4 of redlock's goroutines; a node's first connection is
// waited for 5 node timeouts. It must be in [1ms, 24h]. Default: 100ms.
func WithNodeTimeout(d time.Duration) CallOption {
	return func(c *config) { c.nodeTimeout = d }
}

// WithErrorHandler sets a function that receives every vote against as a
// [*NodeError] (contention, network and Redis errors, timeouts, those of
// cleanups and late answers included), as node-redlock's "error" event; and,
// for a Redlock made by [Open], each time a node stops accepting connections
// ([OpConnect]). It is called from redlock's goroutines, possibly
// concurrently, and must return quickly. nil turns it off. Default: none.
func WithErrorHandler(fn func(err error)) CallOption {
	return func(c *config) { c.onError = fn }
}

// Validation at the door: the settings (with, validate, shapeError) and a
// call's ttl and resources, refused before anything is sent with an error
// matching ErrInvalidArgument that names the bad value and what to do. The
// options that shape a lock ([LockOption]) are each in the file of their
// idea: WithFencing (fenced.go), WithPermits (semaphore.go), WithShared
// (shared.go), WithFairQueue (fair.go), WithHandOver (handover.go),
// WithReplicaAck and WithAOFAck (ack.go), WithWakeOnRelease (announce.go),
// WithIdentity (identity.go).

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

// validateTTL refuses a ttl that Redis cannot take or that leaves no validity.
func validateTTL(ttl time.Duration, cfg *config) error {
	switch {
	case ttl <= 0:
		return invalid("ttl %v is not positive: a lock needs a ttl such as 10*time.Second", ttl)
	case ttl < time.Millisecond:
		return invalid("ttl %v is under a millisecond, the least Redis takes: a time.Duration counts nanoseconds (10 is 10ns), "+
			"so give it a unit, such as 10*time.Second", ttl)
	case ttl%time.Millisecond != 0:
		return invalid("ttl %v is not a whole number of milliseconds, which is what Redis takes: round it with ttl.Round(time.Millisecond)", ttl)
	}
	if ttl <= drift(cfg.driftFactor, ttl) {
		return invalid("ttl %v leaves no validity after the clock drift allowance of %v (WithDriftFactor): use a longer ttl",
			ttl, driftAllowance(cfg.driftFactor, ttl))
	}
	return nil
}

// driftAllowance is the clock drift allowance as the docs give it,
// round(f × ttl in ms) + 2ms, for the error that refuses a ttl too short
// for it: drift caps it at the ttl, which would say a 1ms ttl's allowance
// is 1ms. It stops at the largest whole-millisecond Duration rather than
// overflow.
func driftAllowance(f float64, ttl time.Duration) time.Duration {
	const most = math.MaxInt64 / time.Millisecond
	ms := math.Round(f*float64(ttl/time.Millisecond)) + 2
	if ms >= float64(most) {
		return most * time.Millisecond
	}
	return time.Duration(ms) * time.Millisecond
}

// validateResources refuses an empty list, an empty name, a name in the
// fencing counters' namespace, and a duplicate.
func validateResources(resources []string) error {
	if len(resources) == 0 {
		return invalid("no resources to lock")
	}
	for i, res := range resources {
		if res == "" {
			return invalid("resources[%d] is empty", i)
		}
		if strings.HasPrefix(res, script.FencePrefix) {
			return invalid("resources[%d] %q is in the namespace of the fencing counters (%s*): give locks keys of their own", i, res, script.FencePrefix)
		}
		if ns := script.Reserved(res); ns != "" {
			return invalid("resources[%d] %q is in the namespace %s*, which redlock keeps for its own keys: give locks keys of their own", i, res, ns)
		}
		for j := range i {
			if resources[j] == res {
				return invalid("resources[%d] %q duplicates resources[%d]", i, res, j)
			}
		}
	}
	return nil
}
