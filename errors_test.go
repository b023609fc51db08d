package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// Each error a newcomer meets says what happened and what to do, with the
// redlock: prefix once. These are produced on real nodes.

// onePrefix checks that err's text has the "redlock:" prefix once, and
// returns the text.
func onePrefix(t *testing.T, err error) string {
	t.Helper()
	require.Error(t, err)
	s := err.Error()
	assert.Equal(t, 1, strings.Count(s, "redlock: "), "one redlock: prefix in %q", s)
	return s
}

// Errors that retrying cannot fix end the call after its first attempt,
// whatever the retry count, and name the cause and the remedy.
func TestRefusalsEndTheCallAtOnce(t *testing.T) {
	t.Parallel()
	nodes := redistest.Start(t, 3)
	ctx := context.Background()
	admin := nodes[0].Client()
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", "secret").Err())
	t.Cleanup(func() {
		_ = nodes[0].Client(&redis.Options{Password: "secret"}).ConfigSet(ctx, "requirepass", "").Err()
	})
	acl := nodes[1].Client()
	require.NoError(t, acl.Do(ctx, "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "+get").Err())
	require.NoError(t, acl.Do(ctx, "ACL", "SETUSER", "noset", "on", ">pw", "~*", "+evalsha", "+eval", "+exists").Err())
	require.NoError(t, nodes[2].Client().HSet(ctx, "hash", "f", "v").Err())

	cases := []struct {
		name   string
		node   *redistest.Node
		client *redis.Options
		key    string
		want   []string // in the text
	}{
		{"NOAUTH", nodes[0], nil, "k", []string{`node 0 (` + nodes[0].Addr() + `) answered "NOAUTH`, "set Password"}},
		{"WRONGPASS", nodes[0], &redis.Options{Password: "wrong"}, "k", []string{"WRONGPASS", "Username or Password is wrong"}},
		{"NOPERM", nodes[1], &redis.Options{Username: "noeval", Password: "pw"}, "k", []string{"NOPERM", "ACL user may not run", "EVALSHA"}},
		{"script refused", nodes[1], &redis.Options{Username: "noset", Password: "pw"}, "k", []string{"script", "ACL user may not run"}}, // the server's words vary: Redis 7.0 "can't run this command", 7.2 and Valkey "ACL failure in script"
		{"WRONGTYPE", nodes[2], nil, "hash", []string{"WRONGTYPE", "holds other data"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, redistest.Setup{On: []*redistest.Node{tc.node}, Client: tc.client}, redlock.WithRetryCount(10))
			_, err := f.rl.Acquire(ctx, []string{tc.key}, time.Second)
			s := onePrefix(t, err)
			t.Log(s)
			for _, w := range tc.want {
				assert.Contains(t, s, w)
			}
			assert.Contains(t, s, "retrying cannot fix")
			var ee *redlock.ExecutionError
			require.ErrorAs(t, err, &ee)
			assert.Len(t, ee.Attempts, 1, "attempts before giving up")
			var ne *redlock.NodeError
			require.ErrorAs(t, err, &ne, "the refusing node's error is unwrapped")
			assert.Equal(t, 0, ne.Node)
			assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
			assert.NotErrorIs(t, err, redlock.ErrInvalidArgument)
		})
	}

	t.Run("a refusing minority does not end the call", func(t *testing.T) {
		f := newFixture(t, redistest.Setup{On: nodes})
		l, err := f.rl.Acquire(ctx, []string{"minority"}, time.Second)
		require.NoError(t, err, "node 0 asks for a password, nodes 1 and 2 vote for")
		_, err = l.Release(ctx)
		require.NoError(t, err)
	})
	t.Run("a refusing majority does", func(t *testing.T) {
		other := redistest.Start(t, 1)
		f := newFixture(t, redistest.Setup{On: []*redistest.Node{nodes[0], other[0], nodes[1]},
			Client: &redis.Options{Username: "noeval", Password: "pw"}}, redlock.WithRetryCount(10))
		// node 0: WRONGPASS (no such user there); node 1: WRONGPASS too
		// (a fresh node has no such user); node 2: NOPERM.
		_, err := f.rl.Acquire(ctx, []string{"majority"}, time.Second)
		s := onePrefix(t, err)
		assert.Contains(t, s, "refused by")
		var ee *redlock.ExecutionError
		require.ErrorAs(t, err, &ee)
		assert.Len(t, ee.Attempts, 1)
	})
}

// On a Cluster, resources in different hash slots are the caller's bad
// input: the error matches ErrInvalidArgument, says to use a hash tag, and
// ends the call at once.
func TestCrossSlotIsInvalidArgument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Cluster: true}, redlock.WithRetryCount(10))
	_, err := f.rl.Acquire(context.Background(), []string{"a", "b"}, time.Second)
	s := onePrefix(t, err)
	t.Log(s)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, s, "CROSSSLOT")
	assert.Contains(t, s, "hash tag")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	// The call ends at the first answer that refuses: an attempt before it
	// may have had none in time (a new Cluster client loads its slots
	// first: over 100ms on a loaded machine).
	require.NotEmpty(t, ee.Attempts)
	for i, a := range ee.Attempts {
		crossSlot := false
		for _, ne := range a.VotesAgainst {
			crossSlot = crossSlot || strings.Contains(ne.Error(), "CROSSSLOT")
		}
		assert.Equal(t, i == len(ee.Attempts)-1, crossSlot, "attempt %d of %d refused with CROSSSLOT", i+1, len(ee.Attempts))
	}
}

// A node that cannot be reached is reported with the client's own error
// (a refused connection, an address that does not resolve), not only as a
// timeout. Setting up the connection is bounded by the client's dial
// timeout, not the node timeout (far nodes): go-redis takes about 1.7s to
// give up resolving an address, longer than the lock's validity here, so
// the first attempts say that the set-up is still under way, and the cause
// shows in the calls after it gave up.
func TestUnreachableNodeNamesTheCause(t *testing.T) {
	t.Parallel()
	down := redistest.StartNode(t)
	addr := down.Addr()
	down.Kill()
	cases := map[string]struct{ addr, want string }{
		"refused":      {addr, "connection refused"},
		"no such host": {"nosuchhost.invalid:6379", "lookup nosuchhost.invalid"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: tc.addr})
			t.Cleanup(func() { _ = c.Close() })
			rl, err := redlock.New([]redis.UniversalClient{c}, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithRetryCount(0))
			require.NoError(t, err)
			t.Cleanup(func() { _ = rl.Close() })
			var s string
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				_, err := rl.Acquire(context.Background(), []string{"k"}, time.Second)
				s = onePrefix(t, err)
				if !strings.Contains(s, "setting up a connection") {
					assert.Contains(t, s, "100ms (WithNodeTimeout)", "the timeout and its option are named")
				}
				if strings.Contains(s, tc.want) {
					break
				}
			}
			t.Log(s)
			assert.Contains(t, s, tc.want, "the client's error is named")
		})
	}
}

// Contention reads as contention, with the counts; a try-lock does not
// speak of a retry window.
func TestContentionReadsAsContention(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, fast...)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"c"}, time.Minute)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"c"}, time.Second, redlock.WithRetryCount(0))
	s := onePrefix(t, err)
	t.Log(s)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.Regexp(t, regexp.MustCompile(`^redlock: acquire \["c"\]: held by another lock on (2 of 3 nodes \(quorum 2; 1 not waited for once that decided it\)|3 of 3 nodes \(quorum 2\))$`), s)

	_, err = f.rl.Acquire(ctx, []string{"c"}, time.Second, redlock.WithRetryCount(2))
	s = onePrefix(t, err)
	t.Log(s)
	assert.Regexp(t, regexp.MustCompile(`^redlock: acquire \["c"\]: held by another lock on (2 of 3 nodes \(quorum 2; 1 not waited for once that decided it\)|3 of 3 nodes \(quorum 2\)), after 3 attempts in \d+ms$`), s)

	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = f.rl.Acquire(dctx, []string{"c"}, time.Second, redlock.WithRetryCount(-1))
	s = onePrefix(t, err)
	t.Log(s)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.Contains(t, s, "context deadline exceeded after")
	assert.Contains(t, s, "held by another lock on")

	for _, s := range []string{"retry window", "applied to"} {
		assert.NotContains(t, err.Error(), s)
	}
	_, err = l.Release(ctx)
	require.NoError(t, err)
	_, err = l.Release(ctx)
	assert.Equal(t, `redlock: release ["c"]: the lock was already released`, onePrefix(t, err))
}

// A hung node's vote names the timeout and its option.
func TestNodeTimeoutNamesItsOption(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 1, Client: redistest.NoClientTimeouts}, redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithRetryCount(0))
	warm(t, f.rl)
	f.Nodes[0].Pause()
	t.Cleanup(f.Nodes[0].Resume)
	_, err := f.rl.Acquire(context.Background(), []string{"k"}, time.Second)
	s := onePrefix(t, err)
	t.Log(s)
	assert.Contains(t, s, "node 0 ("+f.Nodes[0].Addr()+"): no answer within 50ms (WithNodeTimeout)", "the node is named by its address")
	assert.Contains(t, s, "no quorum: 0 of 1 nodes voted for, 1 needed")
}

// Using's error, when fn returns context.Cause(ctx) as README advises,
// says that the lock was lost once, with one prefix, and matches both
// ErrExtensionFailed and the extension's own error.
func TestUsingLostLockSaidOnce(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	err := f.rl.Using(context.Background(), []string{"u"}, time.Second, func(ctx context.Context) error {
		for i := range f.Nodes {
			require.NoError(t, f.Peek[i].Set(context.Background(), "u", "another", 10*time.Second).Err()) // taken: a key merely deleted is written back
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	s := onePrefix(t, err)
	t.Log(s)
	assert.Equal(t, 1, strings.Count(s, "lost while fn ran"))
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed)
	assert.ErrorIs(t, err, redlock.ErrLockExpired)
	assert.Regexp(t, regexp.MustCompile(`^redlock: the lock was lost while fn ran: extend \["u"\]: no longer held: the lock's value is gone from (2 of 3 nodes \(quorum 2; 1 not waited for once that decided it\)|3 of 3 nodes \(quorum 2\))$`), s)

	// fn's own error and the loss are both said, once each.
	boom := errors.New("boom")
	err = f.rl.Using(context.Background(), []string{"u2"}, time.Second, func(ctx context.Context) error {
		for i := range f.Nodes {
			require.NoError(t, f.Peek[i].Set(context.Background(), "u2", "another", 10*time.Second).Err())
		}
		<-ctx.Done()
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed)
	assert.Equal(t, 1, strings.Count(err.Error(), "lost while fn ran"))
}

// Bad input names what was wrong and the option or remedy.
func TestInvalidInputNamesTheRemedy(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 1)
	ctx := context.Background()
	_, ttlErr := f.rl.Acquire(ctx, []string{"k"}, 1500*time.Microsecond)
	_, optErr := f.rl.Acquire(ctx, []string{"k"}, time.Second, redlock.WithNodeTimeout(0))
	usingErr := f.rl.Using(ctx, []string{"k"}, 500*time.Millisecond, func(context.Context) error { return nil })
	for _, c := range []struct {
		err  error
		want string
	}{
		{ttlErr, "Round(time.Millisecond)"},
		{optErr, "(WithNodeTimeout)"},
		{usingErr, "WithAutomaticExtensionThreshold"},
	} {
		s := onePrefix(t, c.err)
		assert.ErrorIs(t, c.err, redlock.ErrInvalidArgument, s)
		assert.Contains(t, s, c.want)
	}
}

// fn's own error is kept whole when it carries the loss: wrapped, as a type
// of its own, or joined with another error; the loss is said once.
func TestUsingKeepsFnsOwnError(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	rollback := errors.New("rollback failed")
	cases := map[string]func(cause error) error{
		"wrapped": func(c error) error { return fmt.Errorf("fetching orders: %w", c) },
		"joined":  func(c error) error { return errors.Join(c, rollback) },
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			key := "keep-" + name
			var returned error
			err := f.rl.Using(context.Background(), []string{key}, time.Second, func(ctx context.Context) error {
				for i := range f.Nodes {
					require.NoError(t, f.Peek[i].Set(context.Background(), key, "another", 10*time.Second).Err()) // taken
				}
				<-ctx.Done()
				returned = mk(context.Cause(ctx))
				return returned
			})
			s := onePrefix(t, err)
			assert.Equal(t, returned.Error(), s, "fn's error, as fn returned it")
			assert.ErrorIs(t, err, redlock.ErrExtensionFailed)
			assert.Equal(t, 1, strings.Count(s, "lost while fn ran"))
			if name == "joined" {
				assert.ErrorIs(t, err, rollback)
			}
		})
	}
}
