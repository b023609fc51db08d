package redlock

import (
	"context"
	"strconv"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// Fencing tokens (WithFencing). Each node keeps a counter per resource, the
// key fenceKey(resource), in the resource's hash slot. A fenced Acquire runs
// in two rounds:
//
//  1. The acquire itself (fencedAcquireSrc), which also answers the node's
//     highest counter among the resources. The token is 1 + the highest
//     counter among the nodes that voted for.
//  2. The write-back (writeBackSrc): on each node, counter = max(counter,
//     token) for every resource, only where every resource still holds this
//     lock's value. The lock is granted when a quorum took it within the
//     lock's validity; otherwise the attempt failed, and is cleaned up as
//     any failed attempt.
//
// The argument that tokens grow is in RELIABILITY.md ("Why it holds").

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

// FenceKey returns the key under which every node keeps resource's fencing
// counter (see [WithFencing]): "redlock:fence:{tag}:resource", where tag is
// resource's hash tag, or resource itself when it has none (or, for a
// resource with a '}' and no hash tag, a number that hashes to the same
// Cluster slot). It is there to inspect a counter, or to delete it together
// with the records it protects (a counter that vanished would start again
// at 1, and the protected records would refuse every new holder). A grant
// writes its token back to a quorum, not to every node: a node that voted
// against, or was slow, keeps a lower counter until a later grant reaches
// it. Read a counter as the highest of a quorum of nodes
// ([Redlock.Inspect]'s Counter), never from one node.
func FenceKey(resource string) string { return fenceKey(resource) }

// fenceKey returns the key of resource's fencing counter.
func fenceKey(resource string) string { return script.Key(script.FencePrefix, resource) }

// fencedKeys returns the KEYS of a fenced script: the resources, then their
// counters.
func fencedKeys(resources []string) []string {
	keys := make([]string, 0, 2*len(resources))
	keys = append(keys, resources...)
	for _, r := range resources {
		keys = append(keys, fenceKey(r))
	}
	return keys
}

// fencedKind is the kind of the fenced locks.
type fencedKind struct{}

func (fencedKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	return fencedAcquirePlan(resources, ttl)
}

func (k fencedKind) won(*plan, outcome) kind { return k }

func (fencedKind) extend(l *Lock, ttl time.Duration) *plan {
	return fencedExtendPlan(l.resources, l.value, l.token, l.until(), ttl)
}

func (fencedKind) release(l *Lock, until time.Time) *plan {
	return releasePlanWith(l.resources, l.life.valueArgs(l.value), until)
}

// handsOver: with a new token (fencedHooks.adoptHanded).
func (fencedKind) handsOver() bool { return true }

// fencedAcquirePlan locks resources for ttl and draws a fencing token.
func fencedAcquirePlan(resources []string, ttl time.Duration) *plan {
	p := acquirePlan(resources, ttl)
	p.s, p.keys, p.hooks = script.FencedAcquire, fencedKeys(resources), fencedHooks{}
	return p
}

// fencedHooks are a fenced acquire's steps: the write-back after a quorum,
// and a new token for a lock handed over.
type fencedHooks struct{ noHooks }

// sealed writes the token back (writeBack).
func (fencedHooks) sealed(c *run, p *plan, st ExecutionStats, as *attemptState) (ExecutionStats, uint64) {
	return c.r.writeBack(c.ctx, c.cfg, p, c.o.value, st, as, p.ttl-c.d)
}

// adoptHanded draws a new token for the lock handed over: the token + 1,
// written to a quorum of nodes that still hold the value (script.WriteBack),
// within the lock's validity. It disowns the offer when it cannot.
func (fencedHooks) adoptHanded(c *run, p *plan, off *handOff) bool {
	token := off.token + 1
	wb := &plan{op: OpFence, s: script.WriteBack, keys: p.keys, res: p.res, args: []any{off.value, strconv.FormatUint(token, 10)}, acked: p.acked, raises: true}
	timeout := min(c.cfg.nodeTimeout, time.Until(off.until).Truncate(time.Millisecond))
	if timeout <= 0 {
		c.r.disown(c.ctx, c.cfg, p, off)
		return false
	}
	st, as := c.r.attempt(c.ctx, c.cfg, wb, wb.args, nil, timeout)
	as.unref()
	if len(st.VotesFor) < c.r.needed() || !time.Now().Before(off.until) {
		c.r.disown(c.ctx, c.cfg, p, off)
		return false
	}
	off.token = token
	return true
}

// fencedExtendPlan extends a fenced lock (token) as newExtendPlan does, and
// raises its counters to the token on every node it extends, so that a
// node that lost them (restarted empty) has them again.
func fencedExtendPlan(resources []string, value string, token uint64, until time.Time, ttl time.Duration) *plan {
	p := newExtendPlan(resources, value, until, ttl)
	p.s, p.keys = script.FencedExtend, fencedKeys(resources)
	p.args = append(p.args, strconv.FormatUint(token, 10))
	return p
}

// writeBack runs a fenced acquire's second round, after its first (st, as)
// reached a quorum: it writes the token, 1 + the highest counter among the
// nodes that voted for, back to every node. It returns the attempt's
// statistics as its write-back's votes (counted from the first round's
// start), and the token. The round waits for the nodes no longer than
// the node timeout, and never past the lock's validity.
func (r *Redlock) writeBack(ctx context.Context, cfg *config, p *plan, value string, st ExecutionStats, as *attemptState, validity time.Duration) (ExecutionStats, uint64) {
	var top uint64
	for _, i := range st.VotesFor {
		top = max(top, as.nodes[i].counter)
	}
	token := top + 1 // top < script.MaxToken: the script and Read refuse more
	wb := &plan{op: OpFence, s: script.WriteBack, keys: p.keys, res: p.res, args: []any{value, strconv.FormatUint(token, 10)}, acked: p.acked, raises: true}
	timeout := min(cfg.nodeTimeout, time.Until(st.Start.Add(validity)).Truncate(time.Millisecond))
	if timeout <= 0 {
		// Too late to send anything: the attempt fails on its first round.
		st.Late, st.fence = true, fenceTooLate
		return st, token
	}
	wst, was := r.attempt(ctx, cfg, wb, wb.args, nil, timeout)
	was.unref()
	wst.Start, wst.token, wst.fence = st.Start, token, fenceSent
	return wst, token
}
