package redlock

import (
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// Semaphores (WithPermits). A permit is a lock on one of n permit keys of
// the resource: each node's acquire takes a free one (in an order drawn
// from the attempt's value), and the attempt wins when a quorum took the
// same permit of every resource (plan.choices: each node's choice is the
// permits it took). Two holders of one permit at once would need two
// quorums of nodes each holding that permit key with their own value: the
// mutual exclusion argument of the plain lock, per permit. So at most n
// hold a permit. While held, a marker in the resource's own key (see
// internal/script) makes an exclusive lock of the resource wait.

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

// semaphoreKind is the kind of a semaphore of permits (>= 2); picks is a
// held lock's permit of each resource, as the scripts' ARGV.
type semaphoreKind struct {
	permits int
	picks   []any
}

// permitKey returns the key of resource's permit i (1-based).
func permitKey(resource string, i int) string { return script.PermitKey(resource, i) }

// keys returns the KEYS of the semaphore's scripts on resources: per
// resource, the resource, then its permit keys.
func (k semaphoreKind) keys(resources []string) []string {
	keys := make([]string, 0, (k.permits+1)*len(resources))
	for _, r := range resources {
		keys = append(keys, r)
		for i := 1; i <= k.permits; i++ {
			keys = append(keys, permitKey(r, i))
		}
	}
	return keys
}

func (k semaphoreKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	p := acquirePlan(resources, ttl)
	p.keys, p.undoKeys = k.keys(resources), k.keys(resources)
	p.s, p.undo, p.choices = script.PermitAcquire, script.PermitCleanup, true
	p.single = false // a release frees one permit of several: waiters behind the head try too
	p.args = append(p.args, k.permits)
	p.undoArgs = []any{k.permits}
	return p
}

// won keeps the permits the quorum took: "2,1" is permit 2 of the first
// resource, 1 of the second.
func (k semaphoreKind) won(_ *plan, o outcome) kind {
	if o.choice != "" {
		parts := strings.Split(o.choice, ",")
		k.picks = make([]any, len(parts))
		for i, p := range parts {
			k.picks[i] = p
		}
	}
	return k
}

func (k semaphoreKind) extend(l *Lock, ttl time.Duration) *plan {
	p := newExtendPlan(l.resources, l.value, l.until(), ttl)
	p.keys, p.s = k.keys(l.resources), script.PermitExtend
	p.args = append(append(p.args, k.permits), k.picks...)
	p.undo, p.undoKeys, p.undoArgs = script.PermitCleanup, p.keys, []any{k.permits}
	return p
}

func (k semaphoreKind) release(l *Lock, until time.Time) *plan {
	p := newReleasePlan(l.resources, l.value, until)
	p.keys, p.s = k.keys(l.resources), script.PermitRelease
	p.args = append(append(p.args, k.permits), k.picks...)
	return p
}

// handsOver: permits are held side by side.
func (semaphoreKind) handsOver() bool { return false }
