package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// electionKey is the lock key of the election called name.
func electionKey(name string) string { return "redlock:election:" + name }

// Candidates in separate Redlocks (as separate processes) lead one at a
// time, and each term's number is greater than every earlier one's.
func TestElectionOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	const candidates, terms = 4, 6
	var (
		inside atomic.Int32
		mu     sync.Mutex
		seen   []uint64 // term numbers, in the order their terms began
		over   atomic.Int32
	)
	var wg sync.WaitGroup
	for c := range candidates {
		rl, _ := ownRedlock(t, f, viaF, fast...)
		e := rl.Election("one")
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%d", c)
			for range terms {
				err := e.Lead(context.Background(), id, time.Second, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						over.Add(1)
					}
					defer inside.Add(-1)
					n, ok := redlock.TokenFrom(ctx)
					assert.True(t, ok, "Lead's fn gets the term's number as its fencing token")
					l, err := e.Leader(ctx)
					if assert.NoError(t, err) {
						assert.Equal(t, id, l.ID)
						assert.Equal(t, n, l.Term)
						mu.Lock()
						seen = append(seen, l.Term)
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
					return nil
				})
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, over.Load(), "two leaders at once")
	require.Len(t, seen, candidates*terms)
	assert.True(t, sort.SliceIsSorted(seen, func(i, j int) bool { return seen[i] < seen[j] }), "terms grow: %v", seen)
	for i := 1; i < len(seen); i++ {
		assert.Greater(t, seen[i], seen[i-1], "terms grow: %v", seen)
	}
	_, err := f.rl.Election("one").Leader(context.Background())
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "every term resigned")
}

// The Term: its id, number and context; Leader shows it to others; Resign
// ends its context before the release, and frees the election.
func TestTermLifecycle(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	e := f.rl.Election("life")
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader)

	term, err := e.Campaign(ctx, "pod-a", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "pod-a", term.ID())
	assert.Equal(t, "life", e.Name())
	assert.NotZero(t, term.Number())
	other, _ := ownRedlock(t, f, viaF, roomy) // its first call sets up its connections: 100ms is short under load
	l, err := other.Election("life").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.Leader{ID: "pod-a", Term: term.Number()}, l)
	for i, p := range f.Peek {
		// The write-back returns at a quorum: the last node's may still be
		// on its way.
		assert.Eventually(t, func() bool {
			return p.Get(ctx, redlock.FenceKey(electionKey("life"))).Val() == fmt.Sprint(term.Number())
		}, time.Second, time.Millisecond, "node %d's counter", i)
	}
	select {
	case <-term.Context().Done():
		t.Fatal("a live term's context ended")
	default:
	}

	require.NoError(t, term.Resign(ctx))
	<-term.Context().Done()
	assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrResigned)
	require.NoError(t, term.Resign(ctx), "a second Resign returns the first's result")
	_, err = other.Election("life").Leader(ctx)
	assert.ErrorIs(t, err, redlock.ErrNoLeader)
	for i, p := range f.Peek {
		// Resign returns at its release's quorum: the last node's delete
		// may still be on its way.
		assert.Eventually(t, func() bool { return p.Exists(ctx, electionKey("life")).Val() == 0 }, time.Second, time.Millisecond,
			"node %d still holds the resigned term", i)
	}

	next, err := e.Campaign(ctx, "pod-b", 2*time.Second)
	require.NoError(t, err)
	assert.Greater(t, next.Number(), term.Number())
	require.NoError(t, next.Resign(ctx))
}

// A Resign hands the election over at once: the waiting candidate, in
// another Redlock with a retry delay of an hour, leads on the release's
// announcement.
func TestResignHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var took []time.Duration
	for range 5 {
		leader, err := f.rl.Election("handover").Campaign(ctx, "a", 5*time.Second)
		require.NoError(t, err)
		rl, _ := ownRedlock(t, f, viaF, redlock.WithRetryDelay(time.Hour), redlock.WithRetryJitter(0))
		got := make(chan *redlock.Term, 1)
		go func() {
			term, err := rl.Election("handover").Campaign(ctx, "b", 5*time.Second)
			assert.NoError(t, err, "led only on the release's announcement")
			got <- term
		}()
		queued(t, rl, electionKey("handover"), 1, f.Peek...)
		start := time.Now()
		require.NoError(t, leader.Resign(ctx))
		term := <-got
		require.NotNil(t, term)
		took = append(took, time.Since(start))
		assert.Greater(t, term.Number(), leader.Number())
		require.NoError(t, term.Resign(ctx))
		require.NoError(t, rl.Close())
	}
	t.Logf("hand-over after Resign (Resign's start to the successor's Campaign returning): %v", took)
}

// A leader whose process dies (its clients closed, no Resign) is replaced
// once its lock expires, and its term's context ended before the
// successor's term began.
func TestDeadLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second
	opts := []redlock.Option{redlock.WithDriftFactor(0.05), redlock.WithRetryDelay(50 * time.Millisecond), redlock.WithRetryJitter(10 * time.Millisecond)}
	dead, deadOwn := ownRedlock(t, f, viaF, opts...)
	term, err := dead.Election("crash").Campaign(ctx, "dying", ttl)
	require.NoError(t, err)
	ended := make(chan time.Time, 1)
	go func() { <-term.Context().Done(); ended <- time.Now() }()

	var won atomic.Int64 // the successor's winning attempt's start
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Won && a.Op == redlock.OpAcquire {
			won.Store(a.Stats.Start.UnixNano())
		}
	}}
	next, _ := ownRedlock(t, f, viaF, append(opts, redlock.WithObserver(obs))...)
	got := make(chan *redlock.Term, 1)
	var granted atomic.Value
	go func() {
		t2, err := next.Election("crash").Campaign(ctx, "next", ttl)
		granted.Store(time.Now())
		assert.NoError(t, err)
		got <- t2
	}()
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	for _, c := range deadOwn.clients {
		require.NoError(t, c.Close())
	}
	t2 := <-got
	require.NotNil(t, t2)
	grantedAt := granted.Load().(time.Time)
	replaced := grantedAt.Sub(killed)
	end := <-ended
	assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrExtensionFailed)
	// The successor's term begins when it is granted (Campaign returns):
	// the dead term's context ended before. (Its winning attempt's start
	// is logged: on a starved machine it may be stamped before its calls
	// go out.)
	began := time.Unix(0, won.Load())
	assert.True(t, end.Before(grantedAt), "the dead term's context ended %v after the successor's Campaign returned", end.Sub(grantedAt))
	assert.Greater(t, t2.Number(), term.Number())
	t.Logf("replaced %v after the leader died (ttl %v); its context ended %v before the successor's winning attempt began",
		replaced.Round(time.Millisecond), ttl, began.Sub(end).Round(time.Millisecond))
	require.NoError(t, t2.Resign(ctx))
}

// A sick minority of nodes (two of five hung) costs the leader nothing: it
// keeps its term across several ttls, and Leader still shows it.
func TestSickMinorityKeepsTheTerm(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 5, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithAutomaticExtensionThreshold(300*time.Millisecond))
	ctx := context.Background()
	e := f.rl.Election("sick")
	term, err := e.Campaign(ctx, "steady", 800*time.Millisecond)
	require.NoError(t, err)
	f.Proxies[3].Set(redistest.DropReplies)
	f.Proxies[4].Set(redistest.DropReplies)
	deadline := time.Now().Add(3 * time.Second) // almost four ttls
	reads, shown := 0, 0
	for time.Now().Before(deadline) {
		// Leader never shows another leader or none; on a loaded machine
		// a healthy node may miss one read, and then it cannot tell.
		l, err := e.Leader(ctx)
		reads++
		if err == nil {
			shown++
			assert.Equal(t, redlock.Leader{ID: "steady", Term: term.Number()}, l)
		} else {
			assert.NotErrorIs(t, err, redlock.ErrNoLeader)
		}
		select {
		case <-term.Context().Done():
			t.Fatalf("the term ended with two of five nodes hung: %v", context.Cause(term.Context()))
		case <-time.After(100 * time.Millisecond):
		}
	}
	f.Proxies[3].Set(redistest.Healthy)
	f.Proxies[4].Set(redistest.Healthy)
	require.NoError(t, term.Resign(ctx))
	t.Logf("Leader showed the term in %d of %d reads with two of five nodes hung", shown, reads)
}

// Observe sends the current leader, then each new term in order, promptly
// on the grant's announcement; the channel closes when ctx ends.
func TestObserveFollowsTheTerms(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := f.rl.Election("watch")
	first, err := e.Campaign(ctx, "a", 5*time.Second)
	require.NoError(t, err)

	watcher, _ := ownRedlock(t, f, viaF)
	octx, stop := context.WithCancel(ctx)
	ch, err := watcher.Election("watch").Observe(octx)
	require.NoError(t, err)
	l := <-ch
	assert.Equal(t, redlock.Leader{ID: "a", Term: first.Number()}, l)
	require.Eventually(t, func() bool { // subscribed on every node
		for _, p := range f.Peek {
			m, err := p.PubSubNumSub(ctx, redlock.ElectedChannel).Result()
			if err != nil || m[redlock.ElectedChannel] < 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)

	var delays []time.Duration
	prev := first
	for i := range 5 {
		require.NoError(t, prev.Resign(ctx))
		next, err := e.Campaign(ctx, fmt.Sprintf("n%d", i), 5*time.Second)
		require.NoError(t, err)
		granted := time.Now()
		l := <-ch
		delays = append(delays, time.Since(granted))
		assert.Equal(t, redlock.Leader{ID: fmt.Sprintf("n%d", i), Term: next.Number()}, l)
		prev = next
	}
	require.NoError(t, prev.Resign(ctx))
	stop()
	for range ch { // closed once octx ended
	}
	t.Logf("Observe's delay after each Campaign returned: %v (its poll alone: up to 1s)", delays)
}

// A Term ends with Redlock.Close: its context (cause ErrClosed), then its
// lock; Campaign on a closed Redlock returns ErrClosed.
func TestCloseEndsTheTerm(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	rl, _ := ownRedlock(t, f, viaF)
	term, err := rl.Election("close").Campaign(ctx, "x", 5*time.Second)
	require.NoError(t, err)
	ch, err := rl.Election("close").Observe(ctx)
	require.NoError(t, err)
	<-ch
	require.NoError(t, rl.Close())
	select {
	case <-term.Context().Done():
	default:
		t.Fatal("Close left the term's context alive")
	}
	assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrClosed)
	_, err = f.rl.Election("close").Leader(ctx)
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "Close released the term")
	for range ch { // Observe's channel closes with the Redlock
	}
	_, err = rl.Election("close").Campaign(ctx, "y", 5*time.Second)
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// Lead returns fn's error and resigns; a term lost while fn runs (its key
// deleted behind its back) ends fn's context with ErrExtensionFailed, and
// Lead says so even when fn returns nil; Lead's ctx ending ends fn's.
func TestLeadEnds(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	e := f.rl.Election("lead")
	boom := errors.New("boom")
	err := e.Lead(ctx, "a", time.Second, func(context.Context) error { return boom })
	assert.ErrorIs(t, err, boom)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "Lead resigned")

	err = e.Lead(ctx, "a", time.Second, func(ctx context.Context) error {
		// Taken by another on every node (a key merely deleted is written
		// back by the next extension).
		for _, p := range f.Peek {
			require.NoError(t, p.Set(ctx, electionKey("lead"), "another", 10*time.Second).Err())
		}
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), redlock.ErrExtensionFailed)
		return nil
	})
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed)

	lctx, cancel := context.WithCancel(ctx)
	err = e.Lead(lctx, "a", time.Second, func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return context.Cause(ctx)
	})
	assert.ErrorIs(t, err, context.Canceled)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "Lead resigned")
}

// Leader cannot tell with a majority of nodes down: its error says so and
// is not ErrNoLeader.
func TestLeaderUnknownWithAMajorityDown(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, append(fast, redlock.WithNodeTimeout(100*time.Millisecond))...)
	ctx := context.Background()
	e := f.rl.Election("down")
	term, err := e.Campaign(ctx, "a", 5*time.Second)
	require.NoError(t, err)
	f.Nodes[1].Kill()
	f.Nodes[2].Kill()
	_, err = e.Leader(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrNoLeader)
	assert.Contains(t, err.Error(), "cannot be ruled out")
	_ = term.Resign(ctx)
}

// Bad input gets an error that names it, before anything is sent.
func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 1)
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	var nilElection *redlock.Election
	cases := map[string]func() error{
		"empty name": func() error { _, err := f.rl.Election("").Campaign(ctx, "a", time.Second); return err },
		"empty id":   func() error { _, err := f.rl.Election("x").Campaign(ctx, "", time.Second); return err },
		"long id": func() error {
			_, err := f.rl.Election("x").Campaign(ctx, string(make([]byte, 1025)), time.Second)
			return err
		},
		"short ttl":   func() error { _, err := f.rl.Election("x").Campaign(ctx, "a", 500*time.Millisecond); return err },
		"nil fn":      func() error { return f.rl.Election("x").Lead(ctx, "a", time.Second, nil) },
		"nil ctx":     func() error { var none context.Context; _, err := f.rl.Election("x").Leader(none); return err },
		"nil Elect":   func() error { _, err := nilElection.Leader(ctx); return err },
		"nil Redlock": func() error { return (*redlock.Redlock)(nil).Election("x").Lead(ctx, "a", time.Second, fn) },
		"nil Term":    func() error { return (*redlock.Term)(nil).Resign(ctx) },
	}
	cases["record key as a resource"] = func() error {
		_, err := f.rl.Acquire(ctx, []string{"redlock:leader:{redlock:election:x}:redlock:election:x"}, time.Second)
		return err
	}
	cases["election key as a resource"] = func() error { // only a candidate holds it, and is handed it
		_, err := f.rl.Acquire(ctx, []string{electionKey("x")}, time.Second, redlock.WithFencing(true))
		return err
	}
	cases["election key in Using"] = func() error {
		return f.rl.Using(ctx, []string{"y", electionKey("x")}, time.Second, func(context.Context) error { return nil })
	}
	cases["a shared term"] = func() error {
		_, err := f.rl.Election("x").Campaign(ctx, "a", time.Second, redlock.WithShared(true))
		return err
	}
	cases["permit key as a resource"] = func() error {
		_, err := f.rl.Acquire(ctx, []string{"redlock:permit:{x}:x:1"}, time.Second)
		return err
	}
	for name, call := range cases {
		err := call()
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
	}
	for _, term := range []*redlock.Term{nil, {}} {
		<-term.Context().Done() // a Term that never led
		assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrInvalidArgument)
		assert.Zero(t, term.Number())
	}
	ch, err := nilElection.Observe(ctx)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, closed := <-ch
	assert.False(t, closed, "Observe of a nil Election gives a closed channel")
	assert.Zero(t, f.DBSize(t, 0), "nothing was written")
}

// On a Redis Cluster (one ClusterClient node), the lock, counter and
// record share a slot: the election works there too.
func TestElectionOnACluster(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Cluster: true})
	ctx := context.Background()
	for _, name := range []string{"plain", "{tag}x", "odd}name"} {
		e := f.rl.Election(name)
		term, err := e.Campaign(ctx, "a", 2*time.Second)
		require.NoError(t, err, name)
		l, err := e.Leader(ctx)
		require.NoError(t, err, name)
		assert.Equal(t, redlock.Leader{ID: "a", Term: term.Number()}, l, name)
		require.NoError(t, term.Resign(ctx), name)
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, redlock.ErrNoLeader, name)
	}
}

// A term's extensions keep its record and counter on every node that holds
// its lock: a node that lost them (a restart from an old snapshot, a node
// the write-back missed) has them back at the next extension, so Leader
// sees a live term on a quorum.
func TestTermExtensionsKeepTheRecord(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	e := f.rl.Election("heal")
	term, err := e.Campaign(ctx, "a", time.Second)
	require.NoError(t, err)
	rec := "redlock:leader:{redlock:election:heal}:redlock:election:heal"
	counter := redlock.FenceKey(electionKey("heal"))
	// The record's write returns at a quorum: node 0's may land a moment
	// later (CI's Go 1.24 pass read it empty once).
	var want string
	require.Eventually(t, func() bool {
		want = f.Peek[0].Get(ctx, rec).Val()
		return want != "" && f.Peek[1].Get(ctx, rec).Val() == want
	}, 5*time.Second, time.Millisecond, "the term's record on nodes 0 and 1")
	for _, i := range []int{0, 1} {
		require.NoError(t, f.Peek[i].Del(ctx, rec, counter).Err())
	}
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader, "the records of two nodes of three are gone")
	require.Eventually(t, func() bool { // the next extension: within ttl - threshold
		_, err := e.Leader(ctx)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	for i, p := range f.Peek {
		assert.Equal(t, want, p.Get(ctx, rec).Val(), "node %d's record", i)
		assert.Equal(t, fmt.Sprint(term.Number()), p.Get(ctx, counter).Val(), "node %d's counter", i)
	}
	require.NoError(t, term.Resign(ctx))
}

// A campaign (or an Acquire) whose ctx ends right after a whole attempt
// that found the election held still says so: the error matches both
// ctx's and ErrResourceLocked.
func TestCampaignCutAfterAWholeAttemptIsContention(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	term, err := f.rl.Election("busy").Campaign(ctx, "a", 5*time.Second)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if !a.Won {
			cancel()
		}
	}}
	rl, _ := ownRedlock(t, f, viaF, redlock.WithObserver(obs))
	_, err = rl.Election("busy").Campaign(cctx, "b", 5*time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked, "%v", err)
	require.NoError(t, term.Resign(ctx))
}
