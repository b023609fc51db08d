package redlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// Lost means lost: how a holder learns that its lock is gone, and why it
// never takes a lost lock back.
//
//   - An extension counts only the nodes that still held the lock. Where a
//     key was missing it writes it back (a rolling restart keeps the
//     lock's spread) but that node votes against; so does a node whose keys
//     an earlier attempt or failed extension of the lock wrote back, until
//     an extension wins without it.
//   - A failed extension leaves nothing: what it wrote back is released,
//     and when the lock is gone from a quorum, every node's copy is.
//   - A force release reaches its holder at once: every held lock listens
//     for the release announcements of its own value (the waiters'
//     subscriptions), and one that names it ends the lock.

// extension is one Extend call's record of the nodes that lost its lock.
type extension struct {
	lost    []atomic.Bool // the lock's (lockLife.lostOn)
	unknown []atomic.Bool // the call's: sent, and no answer came in an attempt not won
	// restores: a node answered that it had lost the lock's keys in this
	// call; then a node whose answer was lost may have written them back
	// too, and counts as lost.
	restores atomic.Bool
	failed   atomic.Bool // the call failed: a write-back that lands later is undone
	expired  atomic.Bool // it failed for good: any write that lands later is undone
	drop     func(node int)
}

// judge turns node i's answer to the extension (rep, err) into its vote:
// a node that wrote keys back, or whose keys were written back since the
// lock last held a quorum without it, votes against; so does one whose
// earlier answer in the call was lost, when another node's showed that
// keys were lost (its call may have written them back). won: the attempt
// was decided for already, so a write-back there is the spread the lock
// keeps. sent: the call went out (an error then leaves its effect unknown).
func (x *extension) judge(i int, rep script.Reply, err error, won, sent bool) error {
	switch {
	case rep.Restored && !won:
		x.restores.Store(true)
		x.lost[i].Store(true)
	case err != nil && !isReply(err) && sent && !won:
		x.unknown[i].Store(true)
	case err == nil && (x.lost[i].Load() || x.unknown[i].Load() && x.restores.Load()):
		err = &ResourceLockedError{Op: OpExtend, Requested: rep.Resources, restored: true}
	}
	// Read after lost was written: extend sets failed, then reads lost.
	if x.failed.Load() {
		if x.unknown[i].Load() && x.restores.Load() && !x.lost[i].Swap(true) {
			x.drop(i) // its answer came after the call failed: it may have written keys back
		} else if rep.Restored || err == nil && x.expired.Load() {
			x.drop(i)
		}
	}
	return err
}

// silent records that node i's call was sent and the collector gave up on
// it (its effect is unknown until it answers, if ever).
func (x *extension) silent(i int, won bool) {
	if !won {
		x.unknown[i].Store(true)
	}
}

// failedFor ends an Extend call that failed: it releases the lock where
// the call wrote it back, or on every node when the lock is gone from a
// quorum (expired), and so does each write of the call that lands later.
func (x *extension) failedFor(n int, expired bool) {
	x.expired.Store(expired)
	x.failed.Store(true)
	for i := range n {
		if x.unknown[i].Load() && x.restores.Load() {
			x.lost[i].Store(true) // it may have written keys back
		}
		if expired || x.lost[i].Load() {
			x.drop(i)
		}
	}
}

// newExtension returns the record of p, an Extend of lock under cfg.
func (r *Redlock) newExtension(lock *Lock, cfg *config, p *plan) *extension {
	return &extension{lost: lock.life.lostNodes(r.size()), unknown: make([]atomic.Bool, r.size()),
		drop: func(i int) { r.dropOn(lock, cfg, p, i) }}
}

// dropOn releases p's lock on node i, sent on its own, with the kind's
// cleanup (only its own value, announcing nothing: the lock's holder would
// take an announcement of its value for a force release): a failed
// extension's write-back, or what is left of a lock gone from a quorum.
func (r *Redlock) dropOn(lock *Lock, cfg *config, p *plan, i int) {
	s, keys, args := script.Cleanup, p.res, []any{lock.value}
	if p.undo != nil {
		s, keys, args = p.undo, p.undoKeys, append([]any{lock.value}, p.undoArgs...)
	}
	sendCleanup(cfg, r.nodes[i], s, p.res, keys, args, p.acked, nil)
}

// lostNodes returns the lock's record of the nodes whose keys an extension
// wrote back (see extension), made on first use.
func (lf *lockLife) lostNodes(n int) []atomic.Bool {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.lostOn == nil {
		lf.lostOn = make([]atomic.Bool, n)
	}
	return lf.lostOn
}

// waitingKind is a kind whose lock may be handed to a waiter by id (the
// fair queue's): a release announced to that id is the lock's too.
type waitingKind interface{ waiterID() string }

// hold makes l listen for release announcements of its own value (its
// fair waiter's id too): one from any node ends the lock (forced). With
// WithWakeOnRelease(false) it opens no subscription: it hears them while
// another call's subscriptions run.
func (r *Redlock) hold(l *Lock) {
	tags := []string{l.value[:min(valueLen, len(l.value))]}
	if wk, ok := l.kind.(waitingKind); ok {
		if id := wk.waiterID(); id != "" {
			tags = append(tags, id[:min(valueLen, len(id))])
		}
	}
	lf, cfg, res := l.life, l.cfg, l.resources
	h := r.wake.Hold(res, tags, func(node int, key string) {
		lf.forced(r, node, key)
		lf.reportForced(context.Background(), cfg, res) // once per lock, whoever learns it first
	}, lf.over, cfg.wake)
	// An announcement may have come before Hold returned (the holder was
	// set under mu then): such a lock, forced, released or lost, listens
	// no more.
	lf.mu.Lock()
	lf.holder = h
	done := lf.forcedErr != nil || lf.releasing.Load() || lf.gone.Load()
	lf.mu.Unlock()
	if done {
		r.wake.Unhold(h)
	}
}

// unhold stops lf listening (its release started, or it is lost).
func (r *Redlock) unhold(lf *lockLife) {
	lf.mu.Lock()
	h := lf.holder
	lf.mu.Unlock()
	r.wake.Unhold(h)
}

// over reports whether the lock can no longer be held: released, lost, or
// past its expiration (the Waker forgets such holders).
func (lf *lockLife) over() bool {
	return lf.releasing.Load() || lf.gone.Load() || !time.Now().Before(lf.expiry())
}

// forced ends the lock on node's announcement that key was released with
// its value, unless its own release started: a force release, or a release
// through a copy of its value. Every handle is spent, Using's context and
// a term end, and its next Extend returns the error.
func (lf *lockLife) forced(r *Redlock, node int, key string) {
	if lf.releasing.Load() {
		return
	}
	err := &ExecutionError{Op: OpExtend, Resources: []string{key}, sentinel: ErrLockExpired,
		reason: fmt.Sprintf("force-released: node %d (%s) announced %q released from this lock's value; another caller may hold it now",
			node, r.nodes[node].Addr(), key)}
	lf.mu.Lock()
	if lf.forcedErr != nil || lf.handed {
		lf.mu.Unlock()
		return
	}
	lf.forcedErr = err
	lf.gone.Store(true) // under mu: startRelease hands no lost lock over
	if lf.lostCh == nil {
		lf.lostCh = make(chan struct{})
	}
	close(lf.lostCh)
	lf.mu.Unlock()
	r.unhold(lf)
}

// lostC returns a channel closed when a force release of the lock was
// heard.
func (lf *lockLife) lostC() <-chan struct{} {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.lostCh == nil {
		lf.lostCh = make(chan struct{})
	}
	return lf.lostCh
}

// forcedError returns the force release heard, or nil.
func (lf *lockLife) forcedError() error {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.forcedErr == nil {
		return nil
	}
	return lf.forcedErr
}

// reportForced tells the observer, once, that the lock was force-released.
func (lf *lockLife) reportForced(ctx context.Context, cfg *config, resources []string) {
	if err := lf.forcedError(); err != nil {
		lf.reportLost(ctx, cfg, resources, err)
	}
}
