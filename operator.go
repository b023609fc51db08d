package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/pause"
	"github.com/go-redlock/redlock/internal/script"
)

// What an operator sees: who holds a resource (Inspect), whatever its kind,
// read on every node in one script call each (see operator.go).

// State is what the nodes say of a resource as a whole.
type State int

const (
	// Free: no holder can be on a quorum, whatever the nodes that did not
	// answer hold.
	Free State = iota
	// Held: a quorum of nodes holds one value (for a semaphore or a shared
	// lock: at least one permit or reader).
	Held
	// Unknown: the nodes that did not answer could make a quorum hold it.
	// Never read it as free.
	Unknown
)

// String returns the state's name: "free", "held" or "unknown".
func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Held:
		return "held"
	}
	return "unknown"
}

// Kind is the kind of lock a resource is held by, as [Redlock.Inspect]
// finds it on the nodes.
type Kind string

// The kinds. A fenced lock and a lock of the fair queue are KindLock (an
// [Inspection] gives their fencing counter and waiters).
const (
	KindNone      Kind = ""          // nothing holds it
	KindLock      Kind = "lock"      // an exclusive lock
	KindSemaphore Kind = "semaphore" // [WithPermits]
	KindShared    Kind = "shared"    // [WithShared]
	KindElection  Kind = "election"  // an [Election]'s term
)

// Holder is one holder of a resource: a lock, a permit, a reader or a term.
type Holder struct {
	Value    string        // the lock's value ([Lock.Value]), which ForceRelease takes
	Identity string        // who took it ([WithIdentity]); "" when its value records none
	TTL      time.Duration // the longest a node that holds it has left
	// Token is, for a fenced lock, the highest fencing counter of the nodes
	// that hold it: its token, or above when another attempt (a failed
	// one of the same call too) raised the counter; for an election, the
	// term. 0 otherwise.
	Token    uint64
	Nodes    int  // how many nodes hold it
	OnQuorum bool // a quorum of nodes holds it
	Permit   int  // a semaphore's permit it holds (1 to Permits), as most nodes say
}

// Waiter is a waiter of the fair queue ([WithFairQueue]).
type Waiter struct {
	ID       string // its id, which the resource holds once handed to it
	Identity string
	Nodes    int // how many nodes have it queued
}

// Inspection is what [Redlock.Inspect] found of a resource.
type Inspection struct {
	Resource string
	Kind     Kind
	State    State
	// Holders, the most nodes first: for an exclusive lock or a term, each
	// value found on any node (a quorum holds at most one); for a
	// semaphore, each permit's holder; for a shared lock, each reader.
	Holders []Holder
	// InUse is how many holders a quorum holds: the permits in use, the
	// readers, or 1 for a lock.
	InUse         int
	Permits       int  // a semaphore's limit
	WriterWaiting bool // a shared lock: an exclusive acquire waits for its readers to leave
	// Waiters is the fair queue, head first (as the node with the longest
	// queue has it), without a holder the resource was handed to. A holder
	// that took the resource at the head of the queue by its own attempt
	// keeps its place until it releases, and is listed as the head.
	Waiters []Waiter
	Counter uint64 // the highest fencing counter of the resource (an election: its last term)
	Term    uint64 // an election: the leader's term, 0 when none leads
	// Leader is, for an election, the id the leader campaigned as; its
	// Holder's Identity is its process's ([WithIdentity]).
	Leader   string
	Nodes    int
	Quorum   int
	Answered int
	Errors   []error // a *NodeError per node that did not answer
}

// Inspect reads resource on every node and says who holds it, whatever
// its kind: an exclusive lock (fenced or not, of the fair queue or not), a
// semaphore, a shared lock, or an election's term (the resource
// "redlock:election:" + the election's name). It waits for each node no
// longer than the node timeout (opts: [WithNodeTimeout]). A node that does
// not answer makes the State Unknown where its answer could matter, never
// Free; its error is in Errors. The error is for bad input (matching
// [ErrInvalidArgument]), a closed Redlock ([ErrClosed]; nothing is sent),
// and ctx ending before every node was heard.
func (r *Redlock) Inspect(ctx context.Context, resource string, opts ...Option) (Inspection, error) {
	cfg, err := r.operatorReady(ctx, string(OpInspect), resource, opts)
	if err != nil {
		return Inspection{}, err
	}
	keys := []string{resource, fenceKey(resource), queueKey(resource), queueLiveKey(resource), readersKey(resource), leaderKey(resource)}
	replies := r.everyNode(ctx, cfg, resource, OpInspect, script.Inspect, keys, []any{permitPrefix(resource)})
	in := Inspection{Resource: resource, Nodes: r.size(), Quorum: r.needed()}
	var views []nodeView
	for _, rep := range replies {
		if rep.err != nil {
			in.Errors = append(in.Errors, rep.err)
			continue
		}
		v, err := readView(rep.reply)
		if err != nil {
			in.Errors = append(in.Errors, &NodeError{Node: rep.node, Addr: r.nodes[rep.node].Addr(), Op: OpInspect, Err: err})
			continue
		}
		views = append(views, v)
	}
	in.Answered = len(views)
	in.judge(views)
	return in, ctx.Err()
}

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

// Every held lock at a glance (List): each node's keys read a page at a
// time with SCAN (script.Scan, through the node's lane, so that a silent
// node costs what it costs any call), and each resource found read on
// every node as Inspect reads it.

// ListOption is an option of [Redlock.List].
type ListOption func(*listConfig)

// WithListTimeout bounds how long [Redlock.List] reads the nodes: what it
// has not read by then is reported, not waited for. Default: 5s.
func WithListTimeout(d time.Duration) ListOption {
	return func(c *listConfig) {
		if d <= 0 && c.err == nil {
			c.err = invalid("WithListTimeout(%v): the bound must be positive", d)
		}
		c.timeout = d
	}
}

// WithListMaxKeys bounds how many keys (matching the pattern) [Redlock.List]
// scans on each node: it stops after the SCAN page that reaches n (SCAN's
// COUNT is a hint), and reports the node cut. Default: 100,000.
func WithListMaxKeys(n int) ListOption {
	return func(c *listConfig) {
		if n <= 0 && c.err == nil {
			c.err = invalid("WithListMaxKeys(%d): the bound must be positive", n)
		}
		c.maxKeys = n
	}
}

// Listing is what [Redlock.List] found: every resource held (or waited
// for) on some node, and what it read of each node.
type Listing struct {
	Pattern string // the SCAN MATCH pattern ("*" for all)
	// Resources is each resource found, by name, read on every node as
	// [Redlock.Inspect] reads it (free ones left out).
	Resources []Inspection
	Nodes     []NodeScan // what was read of each node, in the nodes' order
	Quorum    int
	// Unread is how many resources were found but not read before the
	// bound (WithListTimeout) or ctx ended.
	Unread int
}

// Complete reports whether every resource held on a quorum throughout the
// call (and matching the pattern) is in Resources: fewer than a quorum of
// nodes were left unscanned, and every resource found was read.
func (l *Listing) Complete() bool {
	cut := 0
	for _, n := range l.Nodes {
		if n.Err != nil {
			cut++
		}
	}
	return cut < l.Quorum && l.Unread == 0
}

// Entries returns the listing's holders and waiters, by resource, each
// resource's holders first (the most nodes first), then its waiters in
// queue order.
func (l *Listing) Entries() []Entry {
	var out []Entry
	for _, in := range l.Resources {
		role := map[Kind]Role{KindSemaphore: RolePermit, KindShared: RoleReader, KindElection: RoleTerm}[in.Kind]
		if role == "" {
			role = RoleLock
		}
		for _, h := range in.Holders {
			out = append(out, Entry{Resource: in.Resource, Kind: in.Kind, Role: role, Holder: h, State: entryState(h.Nodes, in)})
		}
		for _, w := range in.Waiters {
			h := Holder{Value: w.ID, Identity: w.Identity, Nodes: w.Nodes, OnQuorum: w.Nodes >= in.Quorum}
			out = append(out, Entry{Resource: in.Resource, Kind: in.Kind, Role: RoleWaiter, Holder: h, State: entryState(w.Nodes, in)})
		}
	}
	return out
}

// NodeScan is what [Redlock.List] read of one node.
type NodeScan struct {
	Node  int
	Addr  string
	Keys  int // keys scanned (of those matching the pattern)
	Pages int // SCAN pages read: one call each
	Reads int // resources read on it: one call each, sent in pipelines
	// Err says why the node was not scanned to its end: a *NodeError (it
	// did not answer, or refused), the bound or WithListMaxKeys reached, a
	// Redis Cluster (not scanned); nil when it was.
	Err error
}

// Role is what an [Entry] is to its resource.
type Role string

// The roles.
const (
	RoleLock   Role = "lock"   // an exclusive lock's holder (fenced or not, node-redlock's too)
	RolePermit Role = "permit" // a semaphore's permit
	RoleReader Role = "reader" // a shared lock's reader
	RoleTerm   Role = "term"   // an election's leader
	RoleWaiter Role = "waiter" // a waiter of the fair queue
)

// EntryState is how many nodes hold an [Entry].
type EntryState string

// The states of an entry.
const (
	EntryHeld    EntryState = "held"    // on a quorum (a waiter: queued on a quorum)
	EntryPartial EntryState = "partial" // on fewer, and the nodes that did not answer cannot change that
	EntryUnknown EntryState = "unknown" // on fewer, but the nodes that did not answer could make a quorum
)

// Entry is one holder or waiter of a Listing: a line of `redlock ls`.
type Entry struct {
	Resource string
	Kind     Kind
	Role     Role
	// Holder is the holder (for a waiter: Value is its id, TTL 0); an
	// Identity "" is a value that records none (node-redlock's).
	Holder
	State EntryState
}

// List returns every lock held on the nodes whose resource matches pattern
// (a SCAN MATCH glob; "" or "*": all): locks (node-redlock's too), permits,
// readers, fair-queue waiters and terms, each read as [Redlock.Inspect]
// reads it. It scans each node (never KEYS) within WithListTimeout and
// WithListMaxKeys; a node not scanned to the end (silent, cut, a Cluster)
// has its reason in [NodeScan].Err, and [Listing.Complete] says whether a
// lock may be missing. The error is for bad input ([ErrInvalidArgument]), a
// closed Redlock ([ErrClosed]), or ctx ending (with what was read).
func (r *Redlock) List(ctx context.Context, pattern string, opts ...ListOption) (*Listing, error) {
	if err := r.open(ctx, "List", nil); err != nil {
		return nil, err
	}
	lc := defaultListConfig()
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	if lc.err != nil {
		return nil, lc.err
	}
	if pattern == "" {
		pattern = "*"
	}
	if err := checkPattern(pattern); err != nil {
		return nil, err
	}
	bounded, cancel := context.WithTimeout(ctx, lc.timeout)
	defer cancel()
	l := &Listing{Pattern: pattern, Nodes: make([]NodeScan, r.size()), Quorum: r.needed()}
	cursors := make([]string, r.size())
	for i, nd := range r.nodes {
		l.Nodes[i] = NodeScan{Node: i, Addr: nd.Addr()}
		cursors[i] = "0"
		if nd.IsCluster() {
			l.Nodes[i].Err = fmt.Errorf("a Redis Cluster is not scanned (SCAN reads one server): locks held only on node %d (%s) are not listed", i, nd.Addr())
			cursors[i] = ""
		}
	}
	seen := map[string]bool{}
	for {
		var active []int
		for i, c := range cursors {
			if c != "" {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			break
		}
		if bounded.Err() != nil {
			for _, i := range active {
				l.Nodes[i].Err = r.cut(ctx, lc, i, l.Nodes[i].Keys)
			}
			break
		}
		var found []string
		for i, rep := range r.scanPages(bounded, active, cursors, pattern, lc.maxKeys, l.Nodes) {
			ns := &l.Nodes[active[i]]
			next, keys, err := readPage(rep)
			switch {
			case err != nil && rep.err == nil:
				ns.Err = &NodeError{Node: ns.Node, Addr: ns.Addr, Op: OpList, Err: err}
			case err != nil && bounded.Err() != nil && ctx.Err() == nil:
				ns.Err = r.cut(ctx, lc, ns.Node, ns.Keys)
			case err != nil:
				ns.Err = err
			}
			if err != nil {
				cursors[ns.Node] = ""
				continue
			}
			ns.Pages++
			ns.Keys += keys
			cursors[ns.Node] = next
			switch {
			case next == "0":
				cursors[ns.Node] = ""
			case ns.Keys >= lc.maxKeys:
				cursors[ns.Node] = ""
				ns.Err = fmt.Errorf("cut at WithListMaxKeys(%d) after %d keys: locks held only on node %d (%s) may be missing", lc.maxKeys, ns.Keys, ns.Node, ns.Addr)
			}
			for _, k := range rep.kept {
				if !seen[k] && listable(k) {
					seen[k] = true
					found = append(found, k)
				}
			}
		}
		for chunk := range slices.Chunk(found, listReads) {
			r.read(bounded, chunk, l)
		}
	}
	slices.SortFunc(l.Resources, func(a, b Inspection) int { return strings.Compare(a.Resource, b.Resource) })
	return l, ctx.Err()
}

// nodeView is one node's answer to Inspect.
type nodeView struct {
	kind          Kind
	holders       []Holder // Nodes 1
	waiters       []string
	writerWaiting bool
	permits       int
	counter       uint64
	leader        script.Record
	hasLeader     bool
}

// readView reads script.Inspect's answer.
func readView(res any) (nodeView, error) {
	var v nodeView
	a, ok := res.([]any)
	if !ok || len(a) != 8 {
		return v, &script.UnexpectedError{Reply: res}
	}
	value, _ := a[0].(string)
	pttl, _ := a[1].(int64)
	counter, _ := a[2].(string)
	waiters, _ := a[3].([]any)
	readers, _ := a[4].([]any)
	record, _ := a[5].(string)
	permits, _ := a[6].([]any)
	v.counter, _ = strconv.ParseUint(counter, 10, 64)
	for _, w := range waiters {
		if s, ok := w.(string); ok && strings.Contains(s, ":") {
			v.waiters = append(v.waiters, queueID(s))
		}
	}
	ttl := time.Duration(max(pttl, 0)) * time.Millisecond
	switch {
	case value == "" || value == script.Tombstone:
	case strings.HasPrefix(value, script.PermitsMarker):
		v.kind = KindSemaphore
		v.permits, _ = strconv.Atoi(strings.TrimPrefix(value, script.PermitsMarker))
		for i := 0; i+2 < len(permits); i += 3 {
			n, _ := strconv.Atoi(fmt.Sprint(permits[i]))
			val, _ := permits[i+1].(string)
			ms, _ := strconv.ParseInt(fmt.Sprint(permits[i+2]), 10, 64)
			v.holders = append(v.holders, Holder{Value: val, TTL: time.Duration(ms) * time.Millisecond, Permit: n})
		}
	case strings.HasPrefix(value, script.SharedMarker):
		v.kind = KindShared
		v.writerWaiting = strings.HasPrefix(value, script.SharedWriterWaits)
		for i := 0; i+1 < len(readers); i += 2 {
			val, _ := readers[i].(string)
			ms, _ := strconv.ParseInt(fmt.Sprint(readers[i+1]), 10, 64)
			v.holders = append(v.holders, Holder{Value: val, TTL: time.Duration(ms) * time.Millisecond})
		}
	default:
		v.kind = KindLock
		h := Holder{Value: value, TTL: ttl, Token: v.counter}
		if rec, ok, _ := script.ReadRecord(record); ok && rec.Value == value {
			v.kind, v.leader, v.hasLeader = KindElection, rec, true
			h.Token = rec.Term
		}
		v.holders = append(v.holders, h)
	}
	return v, nil
}

// judge sums up the nodes' views.
func (in *Inspection) judge(views []nodeView) {
	kinds := map[Kind]int{}
	for _, v := range views {
		if v.kind != KindNone {
			kinds[v.kind]++
		}
		in.Counter = max(in.Counter, v.counter)
		in.WriterWaiting = in.WriterWaiting || v.writerWaiting
		in.Permits = max(in.Permits, v.permits)
		if len(v.waiters) > len(in.Waiters) {
			in.Waiters = make([]Waiter, len(v.waiters))
			for i, id := range v.waiters {
				in.Waiters[i] = Waiter{ID: id, Identity: IdentityOf(id)}
			}
		}
	}
	for k, n := range kinds {
		if n > kinds[in.Kind] || n == kinds[in.Kind] && k < in.Kind {
			in.Kind = k
		}
	}
	for i := range in.Waiters {
		for _, v := range views {
			if slices.Contains(v.waiters, in.Waiters[i].ID) {
				in.Waiters[i].Nodes++
			}
		}
	}
	byValue := map[string]*Holder{}
	permitVotes := map[string]map[int]int{}
	terms := map[script.Record]int{}
	for _, v := range views {
		if v.hasLeader {
			terms[v.leader]++
		}
		for _, h := range v.holders {
			if in.Kind == KindSemaphore && v.kind != KindSemaphore {
				continue
			}
			s := byValue[h.Value]
			if s == nil {
				s = &Holder{Value: h.Value, Identity: IdentityOf(h.Value)}
				byValue[h.Value] = s
				permitVotes[h.Value] = map[int]int{}
			}
			s.Nodes++
			s.TTL = max(s.TTL, h.TTL)
			s.Token = max(s.Token, h.Token)
			permitVotes[h.Value][h.Permit]++
		}
	}
	for rec, n := range terms {
		if n >= in.Quorum {
			in.Term, in.Leader = rec.Term, rec.ID
		}
	}
	if in.Kind == KindElection {
		in.Counter = max(in.Counter, in.Term)
	}
	top := 0
	for val, h := range byValue {
		best := 0
		for p, n := range permitVotes[val] {
			if n > best || n == best && p < h.Permit {
				h.Permit, best = p, n
			}
		}
		h.OnQuorum = h.Nodes >= in.Quorum
		if h.OnQuorum {
			in.InUse++
		}
		top = max(top, h.Nodes)
		in.Holders = append(in.Holders, *h)
	}
	in.Waiters = slices.DeleteFunc(in.Waiters, func(w Waiter) bool { return byValue[w.ID] != nil })
	slices.SortFunc(in.Holders, func(a, b Holder) int {
		if a.Nodes != b.Nodes {
			return b.Nodes - a.Nodes
		}
		return strings.Compare(a.Value, b.Value)
	})
	unknown := in.Nodes - in.Answered
	switch {
	case top >= in.Quorum:
		in.State = Held
	case top+unknown >= in.Quorum:
		in.State = Unknown
	default:
		in.State = Free
	}
	if in.State == Free && len(in.Holders) == 0 {
		in.Kind = KindNone
	}
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
	return r.fanOut(ctx, cfg, key, op, func(nd *lane.Node) lane.Call {
		ss, a := scriptFor(nd, s, []string{key}, args)
		if s == script.Force && nd.IsCluster() {
			a = slices.Clone(args)
			a[2], a[3] = "spublish", shardedChannel(key)
		}
		return lane.Call{Kind: lane.Write, Hash: ss.Hash, Src: ss.Src, Keys: keys, Args: a}
	}, nil)
}

// fanOut is the one way a call other than a lock's attempt (which
// attempt.go runs, with its votes) goes to every node: call(nd) is node
// nd's call, sent through key's lane with cfg's node timeout; each answer
// goes to each (nil: none) as it comes, until each reports that the call
// is decided, every node answered, the node timeout passed or ctx ended. A
// node not heard from by then gets a *NodeError (the timeout's or ctx's),
// and its call, if its lane has not sent it yet, is never sent. An answer's
// error is a *NodeError too.
func (r *Redlock) fanOut(ctx context.Context, cfg *config, key string, op Op, call func(nd *lane.Node) lane.Call, each func(nodeReply) (decided bool)) []nodeReply {
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
		c.Call = call(nd)
		c.Call.Timeout, c.Call.H = cfg.nodeTimeout, c
		nd.Lane(key, false).Submit(&c.Call)
	}
	heard := make([]bool, n)
	wait := pause.Begin(time.Now(), cfg.nodeTimeout) // the nodes' silence, not this process's pause
	defer wait.End()
	timer := time.NewTimer(cfg.nodeTimeout)
	defer timer.Stop()
	for pending := n; pending > 0; {
		var late error
		select {
		case a := <-answers:
			pending--
			heard[a.node] = true
			if a.err != nil {
				a.err = &NodeError{Node: a.node, Addr: r.nodes[a.node].Addr(), Op: op, Err: fromLane(a.err)}
			}
			out[a.node] = a
			if each == nil || !each(a) {
				continue
			}
			late = errDecided
		case <-timer.C:
			if !wait.Due(timer, time.Now()) {
				continue
			}
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

// errDecided is the error of the nodes a fanOut did not wait for, once
// its answers had decided the call.
var errDecided = errors.New("not waited for: the call was decided without it")

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

// listConfig is List's settings.
type listConfig struct {
	timeout time.Duration
	maxKeys int
	err     error // the first option refused
}

func defaultListConfig() listConfig { return listConfig{timeout: 5 * time.Second, maxKeys: 100_000} }

// entryState is the state of what nodes of in's nodes hold.
func entryState(nodes int, in Inspection) EntryState {
	switch {
	case nodes >= in.Quorum:
		return EntryHeld
	case nodes+in.Nodes-in.Answered >= in.Quorum:
		return EntryUnknown
	}
	return EntryPartial
}

// Ops of List's calls, as they appear in a [NodeError].
const OpList Op = "list"

// listPage is how many keys a SCAN page asks for, and listReads how many
// resources are read at once: small enough that a page's calls take a
// node a few milliseconds, far below a node timeout, and that the calls of
// locks sharing the lanes wait little behind them.
const (
	listPage  = 1000
	listReads = 64
)

// cut is the error of node i, cut by List's bound (or the caller's ctx)
// after keys keys.
func (r *Redlock) cut(ctx context.Context, lc listConfig, i, keys int) error {
	why := fmt.Sprintf("cut at WithListTimeout(%v)", lc.timeout)
	if err := ctx.Err(); err != nil {
		why = "cut: " + err.Error()
	}
	return fmt.Errorf("%s after %d keys: locks held only on node %d (%s) may be missing", why, keys, i, r.nodes[i].Addr())
}

// checkPattern refuses a pattern SCAN would take in a way the caller did
// not mean, or that matches only redlock's own keys.
func checkPattern(p string) error {
	literal := -1 // where the pattern's literal start ends
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return invalid("pattern %q ends with a lone \\: escape it (\\\\) or drop it", p)
			}
			i++
		case '[':
			if !strings.Contains(p[i+1:], "]") {
				return invalid("pattern %q has a [ with no ]: close the class, or escape it (\\[)", p)
			}
		}
		if literal < 0 && strings.ContainsRune("*?[\\", rune(p[i])) {
			literal = i
		}
	}
	if literal < 0 {
		literal = len(p)
	}
	if ns := script.Reserved(p[:literal]); ns != "" && ns != script.ElectionPrefix || strings.HasPrefix(p[:literal], script.FencePrefix) {
		return invalid("pattern %q matches only redlock's own keys, not resources: give a resource's pattern (elections: %q)", p, script.ElectionPrefix+"*")
	}
	return nil
}

// listable reports whether key may be a resource: not one of redlock's own
// keys (a permit's holds a lock value too), and what Inspect reads.
func listable(key string) bool {
	ns := script.Reserved(key)
	return key != "" && (ns == "" || ns == script.ElectionPrefix) && !strings.HasPrefix(key, script.FencePrefix)
}

// pageReply is one node's answer to a SCAN page.
type pageReply struct {
	nodeReply
	kept []string
}

// readPage reads script.Scan's answer: the next cursor and how many keys
// the page held; the keys kept go to rep.kept.
func readPage(rep *pageReply) (next string, keys int, err error) {
	if rep.err != nil {
		return "", 0, rep.err
	}
	a, ok := rep.reply.([]any)
	if !ok || len(a) != 3 {
		return "", 0, &script.UnexpectedError{Reply: rep.reply}
	}
	next, _ = a[0].(string)
	n, _ := a[1].(int64)
	kept, _ := a[2].([]any)
	for _, k := range kept {
		if s, ok := k.(string); ok {
			rep.kept = append(rep.kept, s)
		}
	}
	if _, err := strconv.ParseUint(next, 10, 64); err != nil {
		return "", 0, &script.UnexpectedError{Reply: rep.reply}
	}
	return next, int(n), nil
}

// scanPages reads the next page of each active node at once, each waited
// for no longer than the node timeout or ctx.
func (r *Redlock) scanPages(ctx context.Context, active []int, cursors []string, pattern string, maxKeys int, scans []NodeScan) []*pageReply {
	out := make([]*pageReply, len(active))
	var wg sync.WaitGroup
	for j, i := range active {
		count := min(listPage, max(maxKeys-scans[i].Keys, 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j] = &pageReply{nodeReply: r.onNode(ctx, i, script.Scan, []any{cursors[i], pattern, count})}
		}()
	}
	wg.Wait()
	return out
}

// onNode runs s (which takes no keys) on node i, and waits for its answer
// no longer than the node timeout or ctx: a node not heard from in time
// gets a *NodeError, and a call not sent by then is never sent.
func (r *Redlock) onNode(ctx context.Context, i int, s *script.Script, args []any) nodeReply {
	nd := r.nodes[i]
	fail := func(err error) nodeReply {
		return nodeReply{node: i, err: &NodeError{Node: i, Addr: nd.Addr(), Op: OpList, Err: err}}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	answer := make(chan nodeReply, 1)
	c := &opCall{node: i, out: answer}
	c.Call = lane.Call{Kind: lane.Write, Hash: s.Hash, Src: s.Src, Args: args, Timeout: r.cfg.nodeTimeout, H: c}
	nd.Lane("", false).Submit(&c.Call)
	wait := pause.Begin(time.Now(), r.cfg.nodeTimeout) // the node's silence, not this process's pause
	defer wait.End()
	timer := time.NewTimer(r.cfg.nodeTimeout)
	defer timer.Stop()
	for {
		select {
		case a := <-answer:
			if a.err != nil {
				return fail(fromLane(a.err))
			}
			return a
		case <-timer.C:
			if !wait.Due(timer, time.Now()) {
				continue
			}
			c.gaveUp.Store(true)
			return fail(fmt.Errorf("no answer within the node timeout %v", r.cfg.nodeTimeout))
		case <-ctx.Done():
			c.gaveUp.Store(true)
			return fail(ctx.Err())
		}
	}
}

// read inspects the resources, all at once, and adds those held or waited
// for to l: a resource is read on every node, so that the nodes whose SCAN
// did not find it count as not holding it.
func (r *Redlock) read(ctx context.Context, resources []string, l *Listing) {
	ins := make([]Inspection, len(resources))
	errs := make([]error, len(resources))
	var wg sync.WaitGroup
	for i, res := range resources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ins[i], errs[i] = r.Inspect(ctx, res)
		}()
	}
	wg.Wait()
	for i := range l.Nodes {
		l.Nodes[i].Reads += len(resources)
	}
	for i, in := range ins {
		switch {
		case errs[i] != nil && !errors.Is(errs[i], ErrInvalidArgument):
			l.Unread++
		case len(in.Holders) > 0 || len(in.Waiters) > 0:
			l.Resources = append(l.Resources, in)
		}
	}
}
