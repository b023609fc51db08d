package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// Regression tests from a helper's probes of the election.

// Observe's channel closes when ctx ends while a minority node hangs (its
// subscription never completes): it does not wait for that node. (Was: it
// stayed open until the node answered.)
func TestObserveClosesWithAHungNode(t *testing.T) {
	t.Parallel()
	for _, fault := range []redistest.Fault{redistest.DropReplies, redistest.Partition} {
		t.Run(fault.String(), func(t *testing.T) {
			f := newProxied(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
			ctx := context.Background()
			term, err := f.rl.Election("obs").Campaign(ctx, "a", 2*time.Second)
			require.NoError(t, err)
			defer term.Resign(ctx)
			f.Proxies[2].Set(fault)
			defer f.Proxies[2].Heal()
			octx, cancel := context.WithCancel(ctx)
			ch, err := f.rl.Election("obs").Observe(octx)
			require.NoError(t, err)
			l := <-ch
			assert.Equal(t, term.Number(), l.Term)
			cancel()
			closed := make(chan struct{})
			go func() {
				for range ch {
				}
				close(closed)
			}()
			select {
			case <-closed: // while the node still hangs
			case <-time.After(10 * time.Second):
				t.Fatalf("Observe's channel still open with one node %v", fault)
			}
		})
	}
}

// Observe and Leader never show a term that was not granted: a Campaign
// cut short by its ctx while the nodes' replies are late (they took its
// acquire) is no term. (Was: 35 of 38 such campaigns were sent by Observe.)
func TestObserveNeverSendsAFailedCampaign(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	for _, p := range f.Proxies {
		p.SetLatency(0, 20*time.Millisecond) // replies 20ms late
	}
	var cs []redis.UniversalClient // the watcher reads straight from the nodes
	for _, nd := range f.Nodes {
		c := nd.Client()
		cs = append(cs, c)
		t.Cleanup(func() { _ = c.Close() })
	}
	watcher, err := redlock.New(cs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = watcher.Close() })
	octx, ostop := context.WithCancel(context.Background())
	obs, err := watcher.Election("phantom").Observe(octx)
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		observed []redlock.Leader
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for l := range obs {
			mu.Lock()
			observed = append(observed, l)
			mu.Unlock()
		}
	}()
	require.Eventually(t, func() bool { // the watcher is subscribed on every node
		for _, p := range f.Peek {
			m, err := p.PubSubNumSub(context.Background(), redlock.ElectedChannel).Result()
			if err != nil || m[redlock.ElectedChannel] < 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	granted := map[uint64]bool{}
	failed := 0
	for i := range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(25+2*i)*time.Millisecond) // some are granted
		term, err := f.rl.Election("phantom").Campaign(ctx, fmt.Sprint("try", i), time.Second)
		cancel()
		if err == nil {
			granted[term.Number()] = true
			require.NoError(t, term.Resign(context.Background()))
		} else {
			require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
			failed++
		}
	}
	// Every term granted is announced; the last one seen is the last
	// granted, or a failed campaign would have been sent after it.
	ostop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, l := range observed {
		assert.True(t, granted[l.Term], "Observe sent %+v: a term whose Campaign failed", l)
	}
	t.Logf("%d campaigns granted, %d cut short; Observe sent %d terms", len(granted), failed, len(observed))
	assert.NotZero(t, failed, "campaigns cut short")
	assert.NotEmpty(t, observed, "granted terms observed")
}

// A Campaign that waits (another process leads) ends with ErrClosed when
// its Redlock is closed. (Was: it went on campaigning, and later won a term
// that nobody held.)
func TestCloseEndsAWaitingCampaign(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, fast...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader, err := f.rl.Election("cw").Campaign(ctx, "leader", 2*time.Second)
	require.NoError(t, err)
	rl, _ := ownRedlock(t, f, viaF, fast...)
	got := make(chan error, 1)
	go func() {
		_, err := rl.Election("cw").Campaign(ctx, "ghost", 2*time.Second)
		got <- err
	}()
	queued(t, rl, electionKey("cw"), 1, f.Peek...)
	require.NoError(t, rl.Close())
	select {
	case err := <-got:
		assert.ErrorIs(t, err, redlock.ErrClosed)
	case <-ctx.Done():
		t.Fatal("Campaign still waiting after its Redlock was closed")
	}
	l, err := f.rl.Election("cw").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "leader", l.ID)
	require.NoError(t, leader.Resign(ctx))
}

// Observe reads the leader at least once a second when nothing is
// announced: a term recorded on the nodes without an announcement (as a
// node without pub/sub would have it) is seen by the poll.
func TestObservePollsWithoutAnnouncements(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := f.rl.Election("quiet").Observe(ctx)
	require.NoError(t, err)
	key := electionKey("quiet")
	rec := "redlock:leader:{" + key + "}:" + key
	time.Sleep(100 * time.Millisecond) // past Observe's first read
	wrote := time.Now()
	for _, p := range f.Peek { // no PUBLISH: only the poll can see it
		require.NoError(t, p.Set(ctx, key, "0123456789abcdef0123456789abcdef", 10*time.Second).Err())
		require.NoError(t, p.Set(ctx, rec, "0123456789abcdef0123456789abcdef:5:quiet-one", 0).Err())
	}
	select {
	case l := <-ch:
		assert.Equal(t, redlock.Leader{ID: "quiet-one", Term: 5}, l)
		took := time.Since(wrote)
		t.Logf("seen by the poll %v after it was written", took.Round(time.Millisecond))
		assert.Less(t, took, 3*time.Second, "the poll runs at least once a second")
	case <-ctx.Done():
		t.Fatal("Observe never saw a term that was not announced")
	}
}
