package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

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

func (k termKind) won(*plan, *outcome) kind { return k }

func (k termKind) extend(l *Lock, ttl time.Duration) *plan {
	p := newExtendPlan(l.resources, l.value, l.until(), ttl)
	p.s, p.keys = script.ElectExtend, k.rec.keys
	p.args = append(p.args, strconv.FormatUint(l.token, 10), k.rec.id)
	return p
}

// release: a term's release is the plain one.
func (termKind) release(l *Lock, until time.Time) *plan {
	return newReleasePlan(l.resources, l.value, until)
}

func (termKind) handsOver() bool { return false }

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

// notLeading is the context of a Term that never led.
var notLeading = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(invalid("nil or zero Term: terms come from Campaign"))
	return ctx
}()

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

// end ends the term with cause (once), and waits for its end.
func (t *Term) end(ctx context.Context, cause error) error {
	t.once.Do(func() {
		defer close(t.done)
		t.cancel(cause)
		close(t.ext.stop)
		<-t.ext.exited
		_, err := t.ext.lock.Release(ctx)
		if t.ext.err != nil && errors.Is(err, ErrLockExpired) {
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
