package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

// Leader is who leads an election: the id its candidate campaigned as and
// the number of its term.
type Leader struct {
	ID   string
	Term uint64
}

// Leader returns the current leader as a quorum of nodes holds it: the
// candidate whose term's lock and record a quorum hold. It returns an error
// matching [ErrNoLeader] when the nodes that answered rule a leader out: no
// candidate can lead on a quorum, whatever the others hold (no term, a term
// ended, or a candidate whose term is being granted). It returns an error
// matching neither when too few nodes answered to tell (each node's error
// joined in it). It waits for each node no longer
// than the node timeout, and returns once the answer is certain. Bad input
// (a nil or zero Election, an empty name, a nil ctx) gives an error
// matching [ErrInvalidArgument]; a closed Redlock, one matching
// [ErrClosed]; both before anything is sent.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.ready(ctx, "leader"); err != nil {
		return Leader{}, err
	}
	r := e.r
	n, q := r.size(), r.needed()
	answers := make(chan leaderRead, n)
	calls := make([]leaderCall, n)
	for i, nd := range r.nodes {
		c := &calls[i]
		c.node, c.out = i, answers
		c.Call = lane.Call{Kind: lane.Write, Hash: script.Leader.Hash, Src: script.Leader.Src, Keys: []string{e.key, e.rec}, Timeout: r.cfg.nodeTimeout, H: c}
		nd.Lane(e.key, false).Submit(&c.Call)
	}
	timer := time.NewTimer(r.cfg.nodeTimeout)
	defer timer.Stop()
	held := map[string]int{} // per leader value, the nodes that hold its record
	var errs []error
	top, pending, failed := 0, n, 0
	for pending > 0 {
		select {
		case a := <-answers:
			pending--
			switch {
			case a.err != nil:
				failed++
				errs = append(errs, &NodeError{Node: a.node, Addr: r.nodes[a.node].Addr(), Op: OpLeader, Err: fromLane(a.err)})
			case a.ok:
				held[a.rec.Value]++
				if top = max(top, held[a.rec.Value]); top >= q {
					return Leader{ID: a.rec.ID, Term: a.rec.Term}, nil
				}
			}
		case <-timer.C:
			errs = append(errs, fmt.Errorf("%d nodes did not answer within the node timeout %v", pending, r.cfg.nodeTimeout))
			failed, pending = failed+pending, 0
		case <-ctx.Done():
			return Leader{}, fmt.Errorf("redlock: leader of %q: %w", e.name, ctx.Err())
		}
		// Certain once no candidate can reach a quorum, whatever the nodes
		// not heard from (or failed) hold.
		if unknown := pending + failed; top+unknown < q {
			return Leader{}, noLeader(e.name, n, q, n-unknown, failed, pending)
		}
	}
	return Leader{}, fmt.Errorf("redlock: leader of %q: %d of %d nodes did not answer, so a leader cannot be ruled out: %w",
		e.name, failed, n, errors.Join(errs...))
}

// noLeader is Leader's ErrNoLeader, with what it knows: of n nodes, how
// many answered, failed, and were not waited for (pending: the read
// returns as soon as no candidate can reach the quorum q).
func noLeader(name string, n, q, answered, failed, pending int) error {
	if answered == n {
		return fmt.Errorf("%w in election %q: all %d nodes answered, and no candidate leads on a quorum (%d) of them", ErrNoLeader, name, n, q)
	}
	rest := ""
	if failed > 0 {
		rest += fmt.Sprintf("; %d failed", failed)
	}
	if pending > 0 {
		rest += fmt.Sprintf("; the read did not wait for the other %d", pending)
	}
	return fmt.Errorf("%w in election %q: %d of %d nodes answered, and no candidate can lead on a quorum (%d) whatever the others hold%s",
		ErrNoLeader, name, answered, n, q, rest)
}

// OpLeader is the read of an election's leader ([Election.Leader]), as it
// appears in a [NodeError].
const OpLeader Op = "leader"

// leaderRead is one node's answer to Leader.
type leaderRead struct {
	node int
	rec  script.Record
	ok   bool
	err  error
}

// leaderCall is one node's part of a Leader read: a lane.Handler.
type leaderCall struct {
	lane.Call
	node int
	out  chan<- leaderRead // room for every node: never blocks
	once sync.Once
}

func (c *leaderCall) Sendable() bool   { return true }
func (c *leaderCall) Held() *lane.Call { return nil }

func (c *leaderCall) Done(r lane.Result) {
	if r.Err != nil {
		c.send(leaderRead{node: c.node, err: r.Err})
		return
	}
	rec, ok, err := script.ReadRecord(r.Reply)
	c.send(leaderRead{node: c.node, rec: rec, ok: ok, err: err})
}

func (c *leaderCall) Silent(r lane.Result) { c.send(leaderRead{node: c.node, err: r.Err}) }

func (c *leaderCall) send(a leaderRead) { c.once.Do(func() { c.out <- a }) }

// observePoll is how often Observe reads the leader when no announcement
// comes: the most a leader change can go unseen on nodes without pub/sub,
// or when a term ends by expiry, which nothing announces.
const observePoll = time.Second

// Observe returns a channel that receives the current leader (if any),
// then each new term as it starts, in term order (a short term may be
// missed; none is sent twice). It reads the leader when a node announces a
// term on [ElectedChannel] and at least once a second. The channel is
// closed when ctx ends or the Redlock is closed. Observe returns an error
// matching [ErrInvalidArgument] for a nil or zero Election, an empty name
// or a nil ctx, and [ErrClosed] once the Redlock is closed (with a closed
// channel).
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	ch := make(chan Leader)
	if err := e.ready(ctx, "observe"); err != nil {
		close(ch)
		return ch, err
	}
	ctx, cancel := context.WithCancel(ctx)
	closed := e.r.terms.done()
	poke := make(chan struct{}, 1)
	e.subscribe(ctx, poke)
	go func() {
		// The subscriptions end with ctx, each once its node answers
		// (or its client's read times out, or the client is closed): the
		// channel is closed without waiting for a node that hangs.
		defer close(ch)
		defer cancel()
		var last uint64
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-closed:
				return
			case <-poke:
			case <-t.C:
			}
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(observePoll)
			l, err := e.Leader(ctx)
			if err != nil || l.Term <= last {
				continue
			}
			select {
			case ch <- l:
				last = l.Term
			case <-ctx.Done():
				return
			case <-closed:
				return
			}
		}
	}()
	return ch, nil
}

// subscribe listens on every node for this election's announcements on
// ElectedChannel, each poking poke, until ctx ends. Each node's
// subscription is made in its own goroutine: a node that does not answer
// holds up nothing but its own.
func (e *Election) subscribe(ctx context.Context, poke chan<- struct{}) {
	for _, nd := range e.r.nodes {
		go func() {
			// On a Cluster, PUBLISH reaches every shard.
			ps := nd.Subscribe(ctx, ElectedChannel, false)
			defer ps.Close()
			for ctx.Err() == nil {
				ev, err := ps.Receive(ctx)
				if err != nil {
					if driver.IsError(err) {
						return // refused (pub/sub denied by an ACL): the election polls
					}
					sleepOrWake(ctx, wake.ResubscribeAfter, nil) // a network error: Receive reconnects
					continue
				}
				if ev.Kind == driver.Message && ev.Payload == e.key {
					select {
					case poke <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
}
