package redlock

import (
	"sort"
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

// maxPermits bounds WithPermits: each acquire reads every permit key of
// its resources on every node.
const maxPermits = 1024

// lockKind is what a lock holds of its resources.
type lockKind struct {
	permits int  // a semaphore of this many permits (>= 2); 0 or 1: exclusive
	shared  bool // a shared (read) lock
}

// kindOf returns the kind of lock cfg asks for.
func kindOf(cfg *config) lockKind {
	return lockKind{permits: cfg.permits, shared: cfg.shared}
}

// exclusive reports whether the kind is the plain lock.
func (k lockKind) exclusive() bool { return k.permits <= 1 && !k.shared }

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

// kindExtendPlan extends a semaphore's permits (picks) or a shared lock.
func kindExtendPlan(k lockKind, resources []string, picks []any, value string, until time.Time, ttl time.Duration) *plan {
	p := extendPlan(resources, value, until, ttl)
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

// choose decides a semaphore's attempt on its groups of votes for (the
// nodes that took each choice of permits): the largest wins when it is a
// quorum (won), and the votes for of the other groups become votes
// against, as contention. A node that took other permits than the winner's
// releases them at once (see stray); when the attempt failed, its cleanup
// releases them all.
func (as *attemptState) choose(st *ExecutionStats, groups map[string][]int, won bool) {
	best, top := "", -1
	for picks, g := range groups {
		if len(g) > top || len(g) == top && picks < best { // ties: the same choice on every call
			best, top = picks, len(g)
		}
	}
	if won {
		as.winner.Store(&best)
		st.picks = best
	}
	in := map[int]bool{}
	for _, i := range groups[best] {
		in[i] = true
	}
	keep := st.VotesFor[:0]
	var moved []int
	for _, i := range st.VotesFor {
		if in[i] {
			keep = append(keep, i)
		} else {
			moved = append(moved, i)
		}
	}
	st.VotesFor = keep
	sort.Ints(moved)
	for _, i := range moved {
		st.VotesAgainst = append(st.VotesAgainst, report(as.cfg, &NodeError{Node: i, Addr: as.q.nodes[i].Addr(), Op: OpAcquire,
			Err: &ResourceLockedError{Op: OpAcquire, Requested: len(as.keys), split: true}}))
		if won {
			as.stray(i)
		}
	}
}

// stray releases, on node i, the permits a won semaphore attempt's node
// took when they are not the winner's: that node is no part of the lock.
func (as *attemptState) stray(i int) {
	w := as.winner.Load()
	if w == nil || as.nodes[i].picks == *w || as.cleanup == nil {
		return
	}
	as.clean(i)
}

// extendPlan is the plan that extends l by ttl.
func (l *Lock) extendPlan(ttl time.Duration) *plan {
	if l.kind.exclusive() {
		return extendPlan(l.resources, l.value, l.until(), ttl)
	}
	return kindExtendPlan(l.kind, l.resources, l.picks, l.value, l.until(), ttl)
}

// releasePlan is the plan that releases l, counting until as its
// expiration.
func (l *Lock) releasePlan(until time.Time) *plan {
	if l.kind.exclusive() {
		return releasePlan(l.resources, l.value, until)
	}
	return kindReleasePlan(l.kind, l.resources, l.picks, l.value, until)
}
