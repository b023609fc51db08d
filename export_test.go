package redlock

import (
	"time"

	"github.com/go-redlock/redlock/internal/lane"
)

// QueuedWaiters returns how many of r's waiting Acquires queue for the
// resources, so that a test can start the next one once the last has
// joined, rather than after a sleep.
func QueuedWaiters(r *Redlock, resources []string) int { return r.wake.Queued(resources) }

// ShardedChannel is where a Cluster announces the release of key.
func ShardedChannel(key string) string { return shardedChannel(key) }

// ValueWithIdentity is a new lock value that records identity id.
func ValueWithIdentity(id string) string { return (&config{idSuffix: identitySuffix(id)}).newValue() }

// DefaultIdentity is the identity a lock records when WithIdentity is not given.
func DefaultIdentity() string { return defaultIdentity() }

// WriteBackSent reports whether a fenced attempt sent its token's
// write-back (which may raise counters even when the attempt fails).
func WriteBackSent(st ExecutionStats) bool { return st.fence == fenceSent }

// Holding returns how many held locks of r listen for their force release.
func Holding(r *Redlock) int { return r.wake.Holding() }

// Listening returns how many nodes r's shared release subscription is
// confirmed and open on.
func Listening(r *Redlock) int { return r.wake.Listening() }

// MaxCarries bounds the attempts a wake carries over past open breakers.
const MaxCarries = maxCarries

// In tests, a lane whose server refused a call of many extensions tries
// one again after 300ms instead of a minute.
func init() { lane.ManyRetry = 300 * time.Millisecond }

// PoisonStates sets poisonStates (see attempt.go).
func PoisonStates(on bool) { poisonStates.Store(on) }

// StatesReused returns how many attempts' states went back to be reused,
// and how many were marked released instead (PoisonStates).
func StatesReused() (back, marked int64) { return reused.Load(), (poisoned.Load() + 1) / 2 }

// PlansFreed returns how many plans of acquires, extensions and releases
// their calls gave back (counted with PoisonStates set).
func PlansFreed() int64 { return plansFreed.Load() }
