package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/slot"
)

// Semaphores (WithPermits) and shared locks (WithShared): the keys and the
// plans. Both keep a marker in the resource's own key while held (see
// internal/script), so an exclusive lock of the resource waits for them.
//
// A permit is a lock on one of n permit keys of the resource: each node's
// acquire takes a free one (in an order drawn from the attempt's value), and
// the attempt wins when a quorum took the same permit of every resource.
// Two holders of one permit at once would need two quorums of nodes each
// holding that permit key with their own value: the mutual exclusion
// argument of the plain lock, per permit. So at most n hold a permit.
//
// A shared lock is a reader in a sorted set beside the resource, scored by
// its expiry on the node's clock, with the marker alive at least as long
// as its longest reader. A reader's and an exclusive lock's quorums share a
// node, which refuses whichever came second.

// lockKind is what a lock holds of its resources.
type lockKind struct {
	permits int  // a semaphore of this many permits (>= 2); 0 or 1: exclusive
	shared  bool // a shared (read) lock
	// term, for an election's term (an exclusive, fenced lock): its
	// extensions also keep its record (script.ElectExtend).
	term *termRecord
}

// kindOf returns the kind of lock cfg asks for.
func kindOf(cfg *config) lockKind {
	return lockKind{permits: cfg.permits, shared: cfg.shared}
}

// exclusive reports whether the kind is the plain lock.
func (k lockKind) exclusive() bool { return k.permits <= 1 && !k.shared && k.term == nil }

// permitKey returns the key of resource's permit i (1-based), in its slot.
func permitKey(resource string, i int) string {
	return "redlock:permit:{" + slot.Tag(resource) + "}:" + resource + ":" + strconv.Itoa(i)
}

// readersKey returns the key of resource's readers, in its slot.
func readersKey(resource string) string {
	return "redlock:readers:{" + slot.Tag(resource) + "}:" + resource
}

// kindKeys returns the KEYS of k's scripts on resources: per resource, the
// resource, then its n permit keys or its readers' key.
func (k lockKind) keys(resources []string) []string {
	switch {
	case k.shared:
		keys := make([]string, 0, 2*len(resources))
		for _, r := range resources {
			keys = append(keys, r, readersKey(r))
		}
		return keys
	case k.permits > 1:
		keys := make([]string, 0, (k.permits+1)*len(resources))
		for _, r := range resources {
			keys = append(keys, r)
			for i := 1; i <= k.permits; i++ {
				keys = append(keys, permitKey(r, i))
			}
		}
		return keys
	}
	return resources
}

// kindAcquirePlan is the acquire plan of a semaphore or a shared lock.
func kindAcquirePlan(k lockKind, resources []string, ttl time.Duration) *plan {
	p := acquirePlan(resources, ttl)
	p.keys, p.undoKeys = k.keys(resources), k.keys(resources)
	if k.shared {
		p.s, p.undo = script.SharedAcquire, script.SharedCleanup
		return p
	}
	p.s, p.undo = script.PermitAcquire, script.PermitCleanup
	p.args = append(p.args, k.permits)
	p.undoArgs = []any{k.permits}
	return p
}

// kindExtendPlan extends a semaphore's permits (picks), a shared lock, or
// a term (token: its number).
func kindExtendPlan(k lockKind, resources []string, picks []any, value string, token uint64, until time.Time, ttl time.Duration) *plan {
	p := extendPlan(resources, value, until, ttl)
	if k.term != nil {
		p.s, p.keys = script.ElectExtend, k.term.keys
		p.args = append(p.args, strconv.FormatUint(token, 10), k.term.id)
		return p
	}
	p.keys = k.keys(resources)
	if k.shared {
		p.s = script.SharedExtend
		return p
	}
	p.s = script.PermitExtend
	p.args = append(append(p.args, k.permits), picks...)
	return p
}

// kindReleasePlan releases a semaphore's permits (picks) or a shared lock.
func kindReleasePlan(k lockKind, resources []string, picks []any, value string, until time.Time) *plan {
	p := releasePlan(resources, value, until)
	if k.term != nil {
		return p // a term's release is the plain one
	}
	p.keys = k.keys(resources)
	if k.shared {
		p.s = script.SharedRelease
		return p
	}
	p.s = script.PermitRelease
	p.args = append(append(p.args, k.permits), picks...)
	return p
}

// parsePicks turns an acquire's "2,1" into the permit of each resource, as
// the scripts' ARGV.
func parsePicks(s string) []any {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// acquire is Acquire after validation.
func (r *Redlock) acquire(ctx context.Context, cfg *config, resources []string, ttl time.Duration) (*Lock, error) {
	keys := append([]string(nil), resources...) // the caller may reuse theirs
	p := acquirePlan(keys, ttl)
	switch k := kindOf(cfg); {
	case cfg.fencing:
		p = fencedAcquirePlan(keys, ttl)
	case !k.exclusive():
		p = kindAcquirePlan(k, keys, ttl)
	case cfg.fair:
		p = fairAcquirePlan(keys, ttl, cfg)
	}
	p.handTag = tagOf(cfg, ttl)
	return r.grant(ctx, cfg, p)
}
