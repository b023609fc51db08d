package redlocktest_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// A lock whose holder never releases it (a crashed process) can be taken
// by another once its ttl has passed, and not before: the nodes' keys
// expire in real time.
func TestTTLExpiresInRealTime(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	crashed, other := newRedlock(t, nodes), newRedlock(t, nodes)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	start := time.Now()
	_, err := crashed.Acquire(ctx, []string{"job"}, ttl)
	require.NoError(t, err)

	if time.Since(start) < ttl/2 { // not when a loaded machine slowed the Acquire down
		_, err = other.Acquire(ctx, []string{"job"}, ttl, redlock.WithRetryCount(0))
		require.ErrorIs(t, err, redlock.ErrResourceLocked, "Acquire at once of a held lock")
	}

	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = other.Acquire(ctx5, []string{"job"}, ttl,
		redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Millisecond), redlock.WithRetryJitter(0))
	took := time.Since(start)
	require.NoError(t, err, "Acquire of a lock whose holder crashed")
	t.Logf("the lock was free again %v after the crashed holder's Acquire (ttl %v)", took, ttl)
	assert.GreaterOrEqual(t, took, ttl, "taken again before its ttl")
	assert.Less(t, took, ttl+2*time.Second, "taken again long after its ttl")
}

// warm makes every node's client connect, so that a fault meets open
// connections, as it does in a running program.
func warm(t *testing.T, rl *redlock.Redlock) {
	t.Helper()
	lock, err := rl.Acquire(context.Background(), []string{"warm"}, time.Second)
	require.NoError(t, err, "Acquire on healthy nodes")
	_, err = lock.Release(context.Background())
	require.NoError(t, err)
}

// votedFor returns the nodes that voted for the last attempt of err (an
// *ExecutionError) and its votes against.
func votes(t *testing.T, err error) ([]int, []*redlock.NodeError) {
	t.Helper()
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	last := ee.Attempts[len(ee.Attempts)-1]
	return last.VotesFor, last.VotesAgainst
}

// A hung node costs a call its node timeout, never more: with one of three
// hung a lock is acquired on the quorum without waiting for it; with two,
// Acquire fails after the node timeout, plus at most one more for the
// cleanup of what it may have written there, with an error that is not
// ErrResourceLocked. Heal brings the nodes back.
func TestHangEndsAtTheNodeTimeout(t *testing.T) {
	const nodeTimeout = 500 * time.Millisecond
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes, redlock.WithNodeTimeout(nodeTimeout))
	warm(t, rl)
	ctx := context.Background()

	nodes.Hang(2)
	start := time.Now()
	lock, err := rl.Acquire(ctx, []string{"one-hung"}, time.Second, redlock.WithRetryCount(0))
	took := time.Since(start)
	require.NoError(t, err, "Acquire with node 2 of 3 hung")
	assert.NotContains(t, lock.Attempts()[0].VotesFor, 2)
	assert.Less(t, took, nodeTimeout, "Acquire with one node hung waited for it")
	t.Logf("Acquire with 1 of 3 hung: %v", took)

	nodes.Hang(1)
	start = time.Now()
	_, err = rl.Acquire(ctx, []string{"two-hung"}, time.Second, redlock.WithRetryCount(0))
	took = time.Since(start)
	require.Error(t, err, "Acquire with nodes 1 and 2 of 3 hung")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	t.Logf("Acquire with 2 of 3 hung, node timeout %v: %v: %v", nodeTimeout, took, err)
	assert.GreaterOrEqual(t, took, nodeTimeout, "Acquire failed before the node timeout")
	assert.Less(t, took, 2*nodeTimeout+time.Second, "Acquire outlived the node timeout and its cleanup's")
	_, against := votes(t, err)
	require.NotEmpty(t, against)
	for _, ne := range against {
		var te *redlock.NodeTimeoutError
		if assert.ErrorAs(t, ne, &te, "node %d's vote against", ne.Node) {
			// The node timeout, or (a call that had to open a connection
			// to the hung node, its others being parked there) the wait
			// for a connection's set-up, 5 of them capped at the validity.
			assert.GreaterOrEqual(t, te.Timeout, nodeTimeout, "node %d's vote against: %v", ne.Node, ne)
		}
		assert.Contains(t, []int{1, 2}, ne.Node, "a healthy node voted against: %v", ne)
	}

	nodes.Heal(1)
	nodes.Heal(2)
	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lock, err = rl.Acquire(ctx5, []string{"healed"}, time.Second)
	require.NoError(t, err, "Acquire once healed")
	_, err = lock.Release(ctx)
	require.NoError(t, err)
	// Every node answers again, once a probe has closed its circuit.
	require.Eventually(t, func() bool {
		in, err := rl.Inspect(ctx5, "healed")
		return err == nil && in.Answered == 3
	}, 4*time.Second, 20*time.Millisecond, "every node answers once healed")
}

// A node hung before its client ever connected is waited for as a
// connection's set-up: 5 node timeouts (redlock's rule), not forever.
func TestHangBeforeTheFirstConnection(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes, redlock.WithNodeTimeout(100*time.Millisecond))
	nodes.Hang(1)
	nodes.Hang(2)
	start := time.Now()
	_, err := rl.Acquire(context.Background(), []string{"r"}, time.Second, redlock.WithRetryCount(0))
	took := time.Since(start)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	t.Logf("Acquire with 2 of 3 hung from the start: %v: %v", took, err)
	assert.GreaterOrEqual(t, took, 100*time.Millisecond)
	assert.Less(t, took, 6*100*time.Millisecond+time.Second)
	nodes.Heal(1) // a Redlock closes at once once its calls are answered
	nodes.Heal(2)
}

// A node that is down refuses connections: a lock is still acquired on the
// quorum with one of three down, and with two down Acquire fails with an
// error that is not ErrResourceLocked. Heal brings them back, at the same
// addresses.
func TestDown(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	warm(t, rl)
	ctx := context.Background()

	nodes.Down(0)
	lock, err := rl.Acquire(ctx, []string{"one-down"}, time.Second, redlock.WithRetryCount(0))
	require.NoError(t, err, "Acquire with node 0 of 3 down")
	assert.ElementsMatch(t, []int{1, 2}, lock.Attempts()[0].VotesFor)
	_, err = lock.Release(ctx)
	require.NoError(t, err, "Release with node 0 of 3 down")

	nodes.Down(2)
	start := time.Now()
	_, err = rl.Acquire(ctx, []string{"two-down"}, time.Second, redlock.WithRetryCount(0))
	took := time.Since(start)
	require.Error(t, err, "Acquire with nodes 0 and 2 of 3 down")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("Acquire with 2 of 3 down: %v: %v", took, err)
	assert.Less(t, took, 2*time.Second, "twice the node timeout (500ms), and room")
	_, against := votes(t, err)
	for _, ne := range against {
		assert.Contains(t, []int{0, 2}, ne.Node, "a healthy node voted against: %v", ne)
	}

	nodes.Heal(0)
	nodes.Heal(2)
	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = rl.Acquire(ctx5, []string{"healed"}, time.Second)
	require.NoError(t, err, "Acquire once healed")
}

// ping sends PING on c and reads one line of the answer.
func ping(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	return r.ReadString('\n')
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// What Down and Heal do on the wire: open connections are cut, new ones
// refused; after Heal, the same address answers.
func TestDownOnTheWire(t *testing.T) {
	nodes := redlocktest.New(t, 1)
	addr := nodes.Addrs()[0]
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := ping(c, r, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)

	nodes.Down(0)
	_, err = ping(c, r, time.Second)
	require.Error(t, err, "PING on a connection open when the node went down")
	assert.False(t, isTimeout(err), "the connection was not cut: %v", err)
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "dial a node that is down")
	assert.Contains(t, err.Error(), "refused")
	nodes.Down(0) // twice is once

	nodes.Heal(0)
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err, "dial a healed node")
	defer c2.Close()
	line, err = ping(c2, bufio.NewReader(c2), time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
}

// What Hang and Heal do on the wire: connections are taken, requests read
// and never answered, and none reaches the node (a SET sent while hung is
// not there after); Heal cuts the connections opened before it.
func TestHangOnTheWire(t *testing.T) {
	nodes := redlocktest.New(t, 1)
	addr := nodes.Addrs()[0]
	before, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer before.Close()
	rb := bufio.NewReader(before)
	_, err = ping(before, rb, time.Second)
	require.NoError(t, err)

	nodes.Hang(0)
	_, err = ping(before, rb, 200*time.Millisecond)
	assert.True(t, isTimeout(err), "PING on a hung node's open connection: %v, want a timeout", err)
	during, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "dial a hung node")
	defer during.Close()
	_, err = during.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(during)
	_, err = ping(during, rd, 200*time.Millisecond)
	assert.True(t, isTimeout(err), "PING on a new connection to a hung node: %v, want a timeout", err)

	nodes.Heal(0)
	for name, c := range map[string]struct {
		net.Conn
		*bufio.Reader
	}{"before": {before, rb}, "during": {during, rd}} {
		_, err := ping(c.Conn, c.Reader, time.Second)
		assert.Error(t, err, "the connection opened %s the hang, after Heal", name)
		assert.False(t, isTimeout(err), "the connection opened %s the hang was not cut: %v", name, err)
	}
	err = nodes.Clients()[0].Get(context.Background(), "k").Err()
	assert.Equal(t, redis.Nil, err, "GET of a key SET while the node hung")
}

// Restart empties a node, its scripts included, and cuts its connections;
// the other nodes keep theirs. A node restarted while down comes back
// empty at Heal.
func TestRestart(t *testing.T) {
	nodes := redlocktest.New(t, 2)
	ctx := context.Background()
	c0, c1 := nodes.Clients()[0], nodes.Clients()[1]
	for _, c := range []redis.UniversalClient{c0, c1} {
		require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	}
	sha, err := c0.ScriptLoad(ctx, "return 1").Result()
	require.NoError(t, err)
	raw, err := net.Dial("tcp", nodes.Addrs()[0])
	require.NoError(t, err)
	defer raw.Close()
	rr := bufio.NewReader(raw)
	_, err = ping(raw, rr, time.Second) // the proxy has taken the connection
	require.NoError(t, err)

	nodes.Restart(0)
	_, err = ping(raw, rr, time.Second)
	assert.Error(t, err, "a connection open across a restart")
	assert.Equal(t, redis.Nil, c0.Get(ctx, "k").Err(), "GET k on the restarted node")
	exists, err := c0.ScriptExists(ctx, sha).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, exists, "a script on the restarted node")
	assert.Equal(t, "v", c1.Get(ctx, "k").Val(), "the other node's key")

	require.NoError(t, c0.Set(ctx, "k", "v", 0).Err())
	nodes.Down(0)
	nodes.Restart(0)
	_, err = net.DialTimeout("tcp", nodes.Addrs()[0], time.Second)
	assert.Error(t, err, "a node restarted while down is still down")
	nodes.Heal(0)
	assert.Equal(t, redis.Nil, c0.Get(ctx, "k").Err(), "GET k on a node restarted while down")
}

// A lock held by Using stays held through a restart of one of its nodes:
// the next extension writes its key there again.
func TestRestartDuringUsingKeepsTheLock(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	// The first extension a second after the grant, far from the restart.
	rl := newRedlock(t, nodes, redlock.WithAutomaticExtensionThreshold(time.Second))
	ctx := context.Background()
	holders := func() int {
		in, err := rl.Inspect(ctx, "r")
		if err != nil || len(in.Holders) != 1 {
			return -1
		}
		return in.Holders[0].Nodes
	}
	err := rl.Using(ctx, []string{"r"}, 2*time.Second, func(ctx context.Context) error {
		// The acquire returned at a quorum; its third write may be landing.
		require.Eventually(t, func() bool { return holders() == 3 }, time.Second, time.Millisecond, "the lock on every node")
		nodes.Restart(0)
		assert.Equal(t, 2, holders(), "nodes holding the lock just after a restart")
		assert.Eventually(t, func() bool { return holders() == 3 }, 3*time.Second, 10*time.Millisecond,
			"the lock on every node after its next extension")
		return ctx.Err()
	})
	assert.NoError(t, err, "Using across a restart")
}

// A call with a context already cancelled sends nothing and leaves the
// nodes as they were.
func TestCancelledContext(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rl.Acquire(ctx, []string{"r"}, time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	ran := false
	err = rl.Using(ctx, []string{"r"}, time.Second, func(context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran, "Using ran fn with a cancelled ctx")
	assert.ErrorIs(t, nodes.Lose("r"), redlock.ErrNotHeld, "Lose of what a cancelled Acquire tried")
	_, err = rl.Acquire(context.Background(), []string{"r"}, time.Second, redlock.WithRetryCount(0))
	assert.NoError(t, err)
}

// Heal of a node that is down listens again on its address; if another
// socket took the port meanwhile, Heal panics saying so, and the node stays
// down until a Heal that can listen.
func TestHealWhenThePortIsTaken(t *testing.T) {
	nodes := redlocktest.New(t, 1)
	addr := nodes.Addrs()[0]
	nodes.Down(0)
	thief, err := net.Listen("tcp", addr)
	require.NoError(t, err, "listen on a down node's address")
	assert.PanicsWithValue(t,
		"redlocktest: Heal(0): listening again on "+addr+", the node's address: listen tcp "+addr+": bind: address already in use",
		func() { nodes.Heal(0) })
	require.NoError(t, thief.Close())
	nodes.Heal(0)
	assert.NoError(t, nodes.Clients()[0].Ping(context.Background()).Err(), "PING once healed")
}

// One node is a Redlock of one (quorum 1); five tolerate two faults of any
// kind, and not three.
func TestOneAndFiveNodes(t *testing.T) {
	ctx := context.Background()
	one := redlocktest.New(t, 1)
	rl1, err := redlock.Open(one.List())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl1.Close() }) // its own variable: rl is another Redlock below
	_, err = rl1.Acquire(ctx, []string{"r"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, one.Lose("r"))

	five := redlocktest.New(t, 5)
	rl := newRedlock(t, five)
	warm(t, rl)
	five.Down(0)
	five.Hang(3)
	lock, err := rl.Acquire(ctx, []string{"r"}, time.Minute, redlock.WithRetryCount(0))
	require.NoError(t, err, "Acquire with 2 of 5 faulted")
	assert.ElementsMatch(t, []int{1, 2, 4}, lock.Attempts()[0].VotesFor)
	_, err = lock.Release(ctx)
	require.NoError(t, err)
	five.Restart(4) // empty is healthy: a third fault is one that does not answer
	five.Down(4)
	_, err = rl.Acquire(ctx, []string{"r2"}, time.Minute, redlock.WithRetryCount(0))
	require.Error(t, err, "Acquire with 3 of 5 faulted")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	five.Heal(3) // before rl.Close, which would wait for the calls parked there
}
