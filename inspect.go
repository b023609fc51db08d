package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// that hold it: its token, or above when a later attempt raised the
	// counter; for an election, the term. 0 otherwise.
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
