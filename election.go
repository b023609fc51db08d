package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

// Leader election: a term is a fenced lock on the election's key, kept
// extended while it lasts (Using's extender), whose fencing token is the
// term's number. Once granted, its extensions (script.ElectExtend, the
// first at once) also record the leader (value:term:id) beside the key on
// every node that holds it, and announce the term on ElectedChannel;
// Election.Leader reads the records.

// The sentinels of the election.
var (
	// ErrNoLeader is matched by the error of [Election.Leader] when the
	// nodes that answered rule a leader out: no candidate can lead on a
	// quorum, whatever the nodes not heard from hold. Its text says how
	// many nodes answered, failed, and were not waited for.
	ErrNoLeader = errors.New("redlock: no leader")

	// ErrResigned is the cause ([context.Cause]) of a [Term]'s context
	// once the term was resigned ([Term.Resign], or [Election.Lead]'s fn
	// returned).
	ErrResigned = errors.New("redlock: the term was resigned")
)

// ElectedChannel is the pub/sub channel on which every node announces each
// term its election wrote (see [Election.Observe]); the message is the
// election's key, "redlock:election:" + its name.
const ElectedChannel = script.ElectedChannel

// Election is one named election among the candidates that use the same
// nodes: at most one of them leads at a time, under the same assumptions as
// a lock ([Redlock.Acquire]). Each term has a number, a fencing token
// greater than that of every earlier term of the election. An Election is
// a name: it holds no state and is safe for concurrent use; two Elections of
// the same name are the same election.
type Election struct {
	r    *Redlock
	name string
	key  string // the lock's key: "redlock:election:" + name
	rec  string // the leader record's key, in key's slot
}

// Election returns the election called name. Its lock is the key
// "redlock:election:" + name on every node, its fencing counter
// [FenceKey] of that key, and its leader record "redlock:leader:{tag}:" +
// that key, where tag is the key's hash tag (or the key): on a Redis
// Cluster all three are in one slot. A bad name is reported by the calls
// of the Election, not here.
func (r *Redlock) Election(name string) *Election {
	key := script.ElectionPrefix + name
	return &Election{r: r, name: name, key: key, rec: leaderKey(key)}
}

// Name returns the election's name.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// Campaign blocks until the candidate id (1 to 1024 bytes, shown by
// [Election.Leader]) leads the election, and returns its Term; or until ctx
// ends, with ctx's error. A term is a fenced lock on the election's key for
// ttl, extended as [Redlock.Using] extends its lock, with the term's number
// as its token; its context carries ctx's values, not its end. A dead
// leader is replaced within its ttl plus one retry delay. Resign the term
// when done (or use [Election.Lead]). Campaign returns [ErrInvalidArgument]
// for a bad name or id or what Using refuses, and [ErrClosed] once the
// Redlock is closed.
func (e *Election) Campaign(ctx context.Context, id string, ttl time.Duration, opts ...Option) (*Term, error) {
	cfg, err := e.check(ctx, id, ttl, opts)
	if err != nil {
		return nil, err
	}
	r := e.r
	// Close ends a campaign as it ends the terms.
	cctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	closed := r.terms.done()
	go func() {
		select {
		case <-closed:
			stop(ErrClosed)
		case <-cctx.Done():
		}
	}()
	camp := *cfg
	camp.retryCount = -1 // a campaign tries until ctx ends; the term's extensions and release retry as the options say
	tk := termKind{rec: &termRecord{keys: []string{e.key, fenceKey(e.key), e.rec}, id: id}}
	for {
		lock, err := r.grant(cctx, &camp, tk, tk.acquire([]string{e.key}, ttl, &camp))
		if err != nil {
			if errors.Is(context.Cause(cctx), ErrClosed) {
				return nil, fmt.Errorf("%w: %w", ErrClosed, err)
			}
			return nil, err
		}
		lock.cfg = cfg
		// Only a granted term is recorded and announced (its first
		// extension, at once), so that Leader and Observe never show an
		// attempt that failed after its write-back. A record round lost to
		// node failures is made again by the term's next extension.
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), lock.until())
		next, err := lock.Extend(rctx, ttl)
		cancel()
		switch {
		case err == nil:
			lock = next
		case errors.Is(err, ErrLockExpired): // lost at once: campaign again
			if cctx.Err() != nil {
				return nil, err
			}
			continue
		}
		return e.begin(ctx, cfg, id, ttl, lock)
	}
}

// Lead campaigns as id (see [Election.Campaign]), runs fn with the term's
// context once it leads, and resigns when fn returns (or panics).
// [TokenFrom](ctx) gives fn the term's number, to fence its writes. fn's
// context ends when the term is lost (its cause matching
// [ErrExtensionFailed]), when ctx ends, or when the Redlock is closed; fn
// should stop acting as the leader when it does. Lead returns Campaign's
// error when it never led; else fn's error, joined with an error matching
// ErrExtensionFailed when the term was lost while fn ran (even if fn
// returned nil) and with the resignation's error. To lead for as long as
// the process runs, call Lead in a loop until ctx ends.
func (e *Election) Lead(ctx context.Context, id string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return invalid("nil fn")
	}
	t, err := e.Campaign(ctx, id, ttl, opts...)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { t.cancel(context.Cause(ctx)) })
	defer func() {
		p := recover()
		stop()
		rerr := t.Resign(ctx)
		if p != nil {
			panic(p)
		}
		if lost := t.lost; lost != nil && (err == nil || !errors.Is(err, lost)) {
			err = join(err, lost)
		}
		err = join(err, rerr)
	}()
	return fn(t.ctx)
}

// Inspect is [Redlock.Inspect] of the election's lock: its Leader is the
// id the leader campaigned as, its Term the leader's term, and its one
// Holder the term's lock, whose Identity is the leader's process's
// ([WithIdentity]), not its campaign id.
func (e *Election) Inspect(ctx context.Context, opts ...Option) (Inspection, error) {
	if err := e.ready(ctx, "inspect"); err != nil {
		return Inspection{}, err
	}
	return e.r.Inspect(ctx, e.key, opts...)
}

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
	held := map[string]int{} // per leader value, the nodes that hold its record
	var lead *Leader
	var errs []error
	top, pending, failed := 0, n, 0
	r.fanOut(ctx, r.cfg, e.key, OpLeader, func(*lane.Node) lane.Call {
		return lane.Call{Kind: lane.Write, Hash: script.Leader.Hash, Src: script.Leader.Src, Keys: []string{e.key, e.rec}}
	}, func(a nodeReply) bool {
		pending--
		rec, ok, err := script.ReadRecord(a.reply)
		switch {
		case a.err != nil || err != nil:
			failed++
			if a.err == nil {
				a.err = &NodeError{Node: a.node, Addr: r.nodes[a.node].Addr(), Op: OpLeader, Err: err}
			}
			errs = append(errs, a.err)
		case ok:
			held[rec.Value]++
			if top = max(top, held[rec.Value]); top >= q {
				lead = &Leader{ID: rec.ID, Term: rec.Term}
				return true
			}
		}
		// Certain once no candidate can reach a quorum, whatever the nodes
		// not heard from (or failed) hold.
		return top+pending+failed < q
	})
	switch {
	case lead != nil:
		return *lead, nil
	case top+pending+failed < q:
		return Leader{}, noLeader(e.name, n, q, n-pending-failed, failed, pending)
	case ctx.Err() != nil:
		return Leader{}, fmt.Errorf("redlock: leader of %q: %w", e.name, ctx.Err())
	}
	// The node timeout passed: the nodes not heard from join the failed.
	if pending > 0 {
		errs = append(errs, fmt.Errorf("%d nodes did not answer within the node timeout %v", pending, r.cfg.nodeTimeout))
		failed, pending = failed+pending, 0
	}
	if top+failed < q {
		return Leader{}, noLeader(e.name, n, q, n-failed, failed, 0)
	}
	return Leader{}, fmt.Errorf("redlock: leader of %q: %d of %d nodes did not answer, so a leader cannot be ruled out: %w",
		e.name, failed, n, errors.Join(errs...))
}

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

// Term is one candidate's time as the leader, from Campaign until it is
// resigned or lost. It is safe for concurrent use.
type Term struct {
	id     string
	lock   *Lock // as granted; the extender holds the newest handle
	ext    *extender
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
	done   chan struct{} // closed once the term's end is complete
	err    error         // the resignation's error, once done is closed
	lost   error         // the extender's loss (matches ErrExtensionFailed), or nil, once done is closed
}

// ID returns the id the candidate campaigned as.
func (t *Term) ID() string {
	if t == nil {
		return ""
	}
	return t.id
}

// Number returns the term's number: its fencing token, greater than the
// number of every earlier term of the election (and of every fenced lock
// on its key). Pass it with every write the leader makes, to a store that
// refuses a number below the highest it has seen (see [WithFencing]).
func (t *Term) Number() uint64 {
	if t == nil {
		return 0
	}
	return t.lock.Token()
}

// Context returns the term's context. It ends when the term ends: resigned
// (cause [ErrResigned]), lost (its lock could not be extended: cause
// matching [ErrExtensionFailed], before the end of the lock's validity, at
// its cancel point at the latest; see [Election.Campaign]), or the Redlock
// closed (cause [ErrClosed]). It carries the values of Campaign's
// ctx. A nil or zero Term, which never led, has a context that has ended.
func (t *Term) Context() context.Context {
	if t == nil || t.ctx == nil {
		return notLeading
	}
	return t.ctx
}

// Resign ends the term: its context ends first, then it stops being
// extended, then its lock is released, so that a waiting candidate leads
// within a few round trips. It returns the release's error (none when the
// term was already lost); a second Resign waits for the first and returns
// the same. With ctx already ended, the release makes one attempt (see
// [Redlock.Release]).
func (t *Term) Resign(ctx context.Context) error {
	if t == nil || t.lock == nil {
		return invalid("nil or zero Term: terms come from Campaign")
	}
	if ctx == nil {
		return invalid("nil context: pass context.Background() or a request's context")
	}
	return t.end(ctx, ErrResigned)
}

// maxCandidateID is the longest candidate id, in bytes.
const maxCandidateID = 1024

// ready refuses a nil or zero Election, a bad name, and once the Redlock
// is closed, the call it names (see Redlock.open).
func (e *Election) ready(ctx context.Context, call string) error {
	if e == nil || e.r == nil {
		return invalid("nil or zero Election: make one with Redlock.Election")
	}
	if err := e.r.open(ctx, fmt.Sprintf("%s in election %q", call, e.name), nil); err != nil {
		return err
	}
	if e.name == "" {
		return invalid("empty election name: name the election (\"scheduler\", \"outbox-relay\")")
	}
	return nil // the key is script.ElectionPrefix + name: in no other namespace, and refused to anything but a campaign
}

// begin starts the term of lock: its context and its extender.
func (e *Election) begin(ctx context.Context, cfg *config, id string, ttl time.Duration, lock *Lock) (*Term, error) {
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t := &Term{id: id, lock: lock, ctx: withHeld(tctx, lock), cancel: cancel, done: make(chan struct{})}
	t.ext = &extender{cfg: cfg, ttl: ttl, lock: lock, cancel: cancel, abort: true}
	t.ext.start(tctx)
	if !e.r.terms.add(t) { // closed while it campaigned
		_ = t.end(context.WithoutCancel(ctx), ErrClosed)
		return nil, ErrClosed
	}
	return t, nil
}

// check validates a campaign's input and returns its settings.
func (e *Election) check(ctx context.Context, id string, ttl time.Duration, opts []Option) (*config, error) {
	if err := e.ready(ctx, "campaign"); err != nil {
		return nil, err
	}
	if id == "" || len(id) > maxCandidateID {
		return nil, invalid("candidate id of %d bytes: give 1 to %d bytes that name the candidate (a hostname, a pod name)", len(id), maxCandidateID)
	}
	cfg, err := with(e.r.cfg, opts)
	switch {
	case err != nil:
		return nil, err
	case cfg.permits > 1, cfg.shared, cfg.fair:
		return nil, invalid("%s for a campaign (given to it, or New's default): a term is an exclusive fenced lock; "+
			"drop it, or give the campaign %s", cfg.termNames(), cfg.termOverride())
	}
	fenced := *cfg
	cfg = &fenced
	cfg.fencing = true
	if err := e.r.door(cfg, []string{e.key}, false, ttl, &kept{"the term", "the term could end"}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// leaderKey is where an election whose lock key is key keeps its leader
// record, in key's slot.
func leaderKey(key string) string { return script.Key(script.LeaderPrefix, key) }

// termRecord is what a term's extensions keep on each node.
type termRecord struct {
	keys []string // the lock key, its counter, its record
	id   string
}

// termKind is the kind of an election's term: a fenced lock whose
// extensions also keep its record (script.ElectExtend), and which is never
// handed over in the process (a candidate takes it by its own attempt).
type termKind struct{ rec *termRecord }

func (termKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	return fencedAcquirePlan(resources, ttl)
}

func (k termKind) won(*plan, outcome) kind { return k }

func (k termKind) extend(l *Lock, ttl time.Duration) *plan {
	p := newExtendPlan(l.resources, l.value, l.until(), ttl)
	p.s, p.keys = script.ElectExtend, k.rec.keys
	p.args = append(p.args, strconv.FormatUint(l.token, 10), k.rec.id)
	return p
}

// release: a term's release is the plain one.
func (termKind) release(l *Lock, until time.Time) *plan {
	return releasePlanWith(l.resources, l.life.valueArgs(l.value), until)
}

func (termKind) handsOver() bool { return false }

// notLeading is the context of a Term that never led.
var notLeading = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(invalid("nil or zero Term: terms come from Campaign"))
	return ctx
}()

// end ends the term with cause (once), and waits for its end.
func (t *Term) end(ctx context.Context, cause error) error {
	t.once.Do(func() {
		defer close(t.done)
		t.cancel(cause)
		newest, lost := t.ext.halt()
		t.lost = lost
		_, err := newest.Release(ctx)
		if lost != nil && errors.Is(err, ErrLockExpired) {
			err = nil // lost: the term's context said so
		}
		t.err = err
		t.lock.redlock.terms.remove(t)
	})
	<-t.done
	return t.err
}

// termSet is a Redlock's live terms, which Close resigns.
type termSet struct {
	mu     sync.Mutex
	live   map[*Term]struct{}
	closed chan struct{} // closed by Close; nil until then
	shut   bool
}

// add records t, or reports false once the Redlock is closed.
func (s *termSet) add(t *Term) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return false
	}
	if s.live == nil {
		s.live = map[*Term]struct{}{}
	}
	s.live[t] = struct{}{}
	return true
}

func (s *termSet) remove(t *Term) {
	s.mu.Lock()
	delete(s.live, t)
	s.mu.Unlock()
}

// done returns a channel closed by Close.
func (s *termSet) done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == nil {
		s.closed = make(chan struct{})
		if s.shut {
			close(s.closed)
		}
	}
	return s.closed
}

// close resigns every live term, each release bounded by deadline, and
// waits for them.
func (s *termSet) close(deadline time.Time) {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return
	}
	s.shut = true
	if s.closed != nil {
		close(s.closed)
	}
	terms := make([]*Term, 0, len(s.live))
	for t := range s.live {
		terms = append(terms, t)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range terms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			_ = t.end(ctx, ErrClosed)
		}()
	}
	wg.Wait()
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

// observePoll is how often Observe reads the leader when no announcement
// comes: the most a leader change can go unseen on nodes without pub/sub,
// or when a term ends by expiry, which nothing announces.
const observePoll = time.Second

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
