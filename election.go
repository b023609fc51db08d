package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// Leader election: a term is a fenced lock on the election's key, kept
// extended while it lasts (Using's extender), whose fencing token is the
// term's number. Once granted, its extensions (script.ElectExtend, the
// first at once) also record the leader (value:term:id) beside the key on
// every node that holds it, and announce the term on ElectedChannel;
// Leader reads the records (leader.go).

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

// maxCandidateID is the longest candidate id, in bytes.
const maxCandidateID = 1024

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

// begin starts the term of lock: its context and its extender.
func (e *Election) begin(ctx context.Context, cfg *config, id string, ttl time.Duration, lock *Lock) (*Term, error) {
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t := &Term{id: id, lock: lock, ctx: withHeld(tctx, lock), cancel: cancel, done: make(chan struct{})}
	t.ext = &extender{cfg: cfg, ttl: ttl, lock: lock, cancel: cancel, stop: make(chan struct{}), exited: make(chan struct{}), abort: true}
	go t.ext.run(tctx)
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
	if err := validateTTL(ttl, cfg); err != nil {
		return nil, err
	}
	if ttl-100*time.Millisecond < cfg.extensionThreshold {
		return nil, invalid("ttl %v is less than the automatic extension threshold %v + 100ms: give the term a longer ttl, or lower WithAutomaticExtensionThreshold", ttl, cfg.extensionThreshold)
	}
	if cfg.extensionThreshold < cfg.nodeTimeout {
		return nil, invalid("automatic extension threshold %v is below the node timeout %v: the term could end while an "+
			"extension waits for its quorum; raise WithAutomaticExtensionThreshold or lower WithNodeTimeout", cfg.extensionThreshold, cfg.nodeTimeout)
	}
	if err := checkAck(e.r.nodes, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
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
		if lost := t.ext.err; lost != nil && (err == nil || !errors.Is(err, lost)) {
			err = join(err, lost)
		}
		err = join(err, rerr)
	}()
	return fn(t.ctx)
}

// leaderKey is where an election whose lock key is key keeps its leader
// record, in key's slot.
func leaderKey(key string) string { return script.Key(script.LeaderPrefix, key) }
