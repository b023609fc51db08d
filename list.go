package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// Every held lock at a glance (List): each node's keys read a page at a
// time with SCAN (script.Scan, through the node's lane, so that a silent
// node costs what it costs any call), and each resource found read on
// every node as Inspect reads it.

// ListOption is an option of [Redlock.List].
type ListOption func(*listConfig)

// listConfig is List's settings.
type listConfig struct {
	timeout time.Duration
	maxKeys int
	err     error // the first option refused
}

func defaultListConfig() listConfig { return listConfig{timeout: 5 * time.Second, maxKeys: 100_000} }

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
	timer := time.NewTimer(r.cfg.nodeTimeout)
	defer timer.Stop()
	select {
	case a := <-answer:
		if a.err != nil {
			return fail(fromLane(a.err))
		}
		return a
	case <-timer.C:
		c.gaveUp.Store(true)
		return fail(fmt.Errorf("no answer within the node timeout %v", r.cfg.nodeTimeout))
	case <-ctx.Done():
		c.gaveUp.Store(true)
		return fail(ctx.Err())
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
