package redlock

import (
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// Shared locks (WithShared). A shared lock is a reader in a sorted set
// beside the resource, scored by its expiry on the node's clock, with a
// marker in the resource's own key alive at least as long as its longest
// reader (see internal/script). A reader's and an exclusive lock's quorums
// share a node, which refuses whichever came second.

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

// sharedKind is the kind of the shared (read) locks.
type sharedKind struct{}

// readersKey returns the key of resource's readers.
func readersKey(resource string) string { return script.Key(script.ReadersPrefix, resource) }

// keys returns the KEYS of the shared scripts on resources: per resource,
// the resource, then its readers' key.
func (sharedKind) keys(resources []string) []string {
	keys := make([]string, 0, 2*len(resources))
	for _, r := range resources {
		keys = append(keys, r, readersKey(r))
	}
	return keys
}

func (k sharedKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	p := acquirePlan(resources, ttl)
	p.keys, p.undoKeys = k.keys(resources), k.keys(resources)
	p.s, p.undo = script.SharedAcquire, script.SharedCleanup
	p.single = false // readers share: every waiter may get in
	return p
}

func (k sharedKind) won(*plan, outcome) kind { return k }

func (k sharedKind) extend(l *Lock, ttl time.Duration) *plan {
	p := newExtendPlan(l.resources, l.value, l.until(), ttl)
	p.keys, p.s = k.keys(l.resources), script.SharedExtend
	p.undo, p.undoKeys = script.SharedCleanup, p.keys
	return p
}

func (k sharedKind) release(l *Lock, until time.Time) *plan {
	p := newReleasePlan(l.resources, l.value, until)
	p.keys, p.s = k.keys(l.resources), script.SharedRelease
	return p
}

// handsOver: readers are held side by side.
func (sharedKind) handsOver() bool { return false }
