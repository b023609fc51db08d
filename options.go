package redlock

import (
	"time"

	"github.com/go-redlock/redlock/internal/lane"
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
// count against n within the window, and does past it. An error that retrying cannot fix (a wrong password, an ACL,
// resources in different Cluster slots) ends the call at once.
func WithRetryCount(n int) CallOption {
	return func(c *config) { c.retryCount = n }
}

// WithRetryDelay sets the base delay between two attempts, at most 24h.
// Default: 200ms.
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
// After a timeout, calls to that node fail at once without being sent until
// a probe answers (one call sent alone per node timeout), so a silent node
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
