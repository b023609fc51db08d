package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// What an operator undoes: taking a resource back (ForceRelease); and the
// calls of Inspect and ForceRelease, one script per node.

// ForceRelease takes resource back from its holders, whatever its kind: with
// no values, from every holder; with values (as [Inspection].Holders shows
// them), from those only. It is for an operator: a job killed with a long
// ttl, a lock whose holder is gone. Waiters are woken, fencing counters
// kept, and each removed holder is told at once (its Using context ends, its
// Extend fails with [ErrLockExpired]) or at its next extension. It returns
// nil when every node answered, [ErrInvalidArgument] for bad input,
// [ErrClosed] on a closed Redlock, [ErrNotHeld] when no node held any of the
// values, and otherwise an error joining each silent node's [*NodeError].
func (r *Redlock) ForceRelease(ctx context.Context, resource string, values ...string) error {
	cfg, err := r.operatorReady(ctx, string(OpForceRelease), resource, nil)
	if err != nil {
		return err
	}
	for i, v := range values {
		if v == "" {
			return invalid("values[%d] is empty: give values as Inspect shows them (Holder.Value), or none to remove every holder", i)
		}
	}
	args := []any{permitPrefix(resource), forceMargin.Milliseconds(), "publish", ReleasedChannel}
	for _, v := range values {
		args = append(args, v)
	}
	keys := []string{resource, queueKey(resource), readersKey(resource)}
	var errs []error
	removed := int64(0)
	for _, rep := range r.everyNode(ctx, cfg, resource, OpForceRelease, script.Force, keys, args) {
		if rep.err != nil {
			errs = append(errs, rep.err)
			continue
		}
		n, _ := rep.reply.(int64)
		removed += n
	}
	switch {
	case len(errs) == 0 && removed == 0 && len(values) > 0:
		return fmt.Errorf("%w: no node holds %s under %q, so nothing was released; give the values Inspect shows", ErrNotHeld, strings.Join(values, " or "), resource)
	case len(errs) == 0:
		return nil
	}
	reached := r.size() - len(errs)
	what := "fewer than a quorum: the holders may still hold it; try again"
	if reached >= r.needed() {
		what = "a quorum: no removed holder holds it on a quorum"
	}
	return fmt.Errorf("redlock: force release of %q reached %d of %d nodes, %s (a call sent to a silent node may still land there): %w",
		resource, reached, r.size(), what, errors.Join(errs...))
}

// Ops of the operator's calls, as they appear in a [NodeError].
const (
	OpInspect      Op = "inspect"
	OpForceRelease Op = "force release"
)

// forceMargin is how much longer a tombstone lasts than what its holder
// had left: room for an extension sent before the holder's validity ended.
const forceMargin = 2 * time.Second

// operatorReady refuses bad input to Inspect and ForceRelease, and returns
// the config of the call.
func (r *Redlock) operatorReady(ctx context.Context, call, resource string, opts []Option) (*config, error) {
	if err := r.open(ctx, call, []string{resource}); err != nil {
		return nil, err
	}
	if resource == "" {
		return nil, invalid("an empty resource: name the resource to inspect or release")
	}
	if !strings.HasPrefix(resource, script.ElectionPrefix) && script.Reserved(resource) != "" || strings.HasPrefix(resource, script.FencePrefix) {
		return nil, invalid("%q is one of redlock's own keys, not a resource: name the resource a lock was taken on "+
			"(an election's is %q + its name)", resource, script.ElectionPrefix)
	}
	return with(r.cfg, opts)
}

// permitPrefix is what a permit key of resource starts with (permitKey).
func permitPrefix(resource string) string { return strings.TrimSuffix(permitKey(resource, 0), "0") }

// nodeReply is one node's answer to an operator's call.
type nodeReply struct {
	node  int
	reply any
	err   error // a *NodeError
}

// everyNode runs s on every node and returns each node's answer, waiting
// for each no longer than cfg's node timeout or ctx; a node not heard from
// in time gets a *NodeError.
func (r *Redlock) everyNode(ctx context.Context, cfg *config, key string, op Op, s *script.Script, keys []string, args []any) []nodeReply {
	n := r.size()
	out := make([]nodeReply, n)
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = nodeReply{node: i, err: &NodeError{Node: i, Addr: r.nodes[i].Addr(), Op: op, Err: err}}
		}
		return out
	}
	answers := make(chan nodeReply, n)
	calls := make([]opCall, n)
	for i, nd := range r.nodes {
		c := &calls[i]
		c.node, c.out = i, answers
		ss, a := scriptFor(nd, s, []string{key}, args)
		if s == script.Force && nd.IsCluster() {
			a = slices.Clone(args)
			a[2], a[3] = "spublish", shardedChannel(key)
		}
		c.Call = lane.Call{Kind: lane.Write, Hash: ss.Hash, Src: ss.Src, Keys: keys, Args: a, Timeout: cfg.nodeTimeout, H: c}
		nd.Lane(key, false).Submit(&c.Call)
	}
	heard := make([]bool, n)
	timer := time.NewTimer(cfg.nodeTimeout)
	defer timer.Stop()
	for pending := n; pending > 0; {
		var late error
		select {
		case a := <-answers:
			pending--
			heard[a.node] = true
			out[a.node] = a
			if a.err != nil {
				out[a.node].err = &NodeError{Node: a.node, Addr: r.nodes[a.node].Addr(), Op: op, Err: fromLane(a.err)}
			}
			continue
		case <-timer.C:
			late = fmt.Errorf("no answer within the node timeout %v", cfg.nodeTimeout)
		case <-ctx.Done():
			late = ctx.Err()
		}
		for i := range out {
			if !heard[i] {
				calls[i].gaveUp.Store(true) // not sent yet: never
				out[i] = nodeReply{node: i, err: &NodeError{Node: i, Addr: r.nodes[i].Addr(), Op: op, Err: late}}
			}
		}
		break
	}
	return out
}

// opCall is one node's part of an operator's call: a lane.Handler.
type opCall struct {
	lane.Call
	node   int
	out    chan<- nodeReply // room for every node: never blocks
	once   sync.Once
	gaveUp atomic.Bool // the caller returned without its answer
}

func (c *opCall) Sendable() bool       { return !c.gaveUp.Load() }
func (c *opCall) Held() *lane.Call     { return nil }
func (c *opCall) Done(r lane.Result)   { c.send(nodeReply{node: c.node, reply: r.Reply, err: r.Err}) }
func (c *opCall) Silent(r lane.Result) { c.send(nodeReply{node: c.node, err: r.Err}) }
func (c *opCall) send(a nodeReply)     { c.once.Do(func() { c.out <- a }) }
