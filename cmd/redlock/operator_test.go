package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// The tests of status, hold and release, on the built binary against real
// nodes.

// holdLine matches the one line hold prints once it holds the lock.
var holdLine = regexp.MustCompile(`^held value=(\S+) token=(\d+)$`)

// hold starts "redlock hold ARGS..." and returns it once it printed that it
// holds the lock, with the lock's value and token.
func (c *cluster) hold(t *testing.T, args ...string) (cmd *exec.Cmd, value string, token uint64) {
	t.Helper()
	cmd = c.command(append([]string{"hold"}, args...)...)
	errb := &lockedBuffer{}
	cmd.Stderr = errb
	out := lines(t, cmd)
	started(t, cmd)
	l := next(t, out)
	m := holdLine.FindStringSubmatch(l.text)
	require.NotNil(t, m, "hold %v printed %q, want \"held value=... token=N\" (stderr: %s)", args, l.text, errb.String())
	token, _ = strconv.ParseUint(m[2], 10, 64)
	go func() { // the pipe is read to its end, so that Wait may close it
		for range out {
			t.Errorf("hold %v printed a second line", args)
		}
	}()
	return cmd, m[1], token
}

// lockedBuffer is a buffer that a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// identity is the identity hold records for the process pid.
func identity(t *testing.T, pid int) string {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	return host + "/" + strconv.Itoa(pid) + " redlock hold"
}

// statusJSON runs status --json on resources, and returns its exit code
// and the inspections.
func (c *cluster) statusJSON(t *testing.T, args ...string) (int, []inspectionJSON) {
	t.Helper()
	r := c.run(t, append([]string{"status", "--json"}, args...)...)
	var ins []inspectionJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ins), "status --json %v: %s (stderr: %s)", args, r.stdout, r.stderr)
	return r.code, ins
}

// terminate sends cmd SIGTERM and returns its exit code.
func terminate(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	return exitOf(t, cmd)
}

// hold prints one line once it holds the lock; another process's status
// shows it held, with its identity, value and token; SIGTERM releases it
// (exit 0, status free at once); a second hold with --wait 0 is a conflict.
func TestHold(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd, value, token := c.hold(t, "--fencing", "maint")
	assert.Equal(t, uint64(1), token, "the first fenced lock of fresh nodes")
	assert.Equal(t, identity(t, cmd.Process.Pid), redlock.IdentityOf(value), "the value records the identity")

	r := c.run(t, "status", "maint")
	assert.Zero(t, r.code, "status of a held resource: %s", r.stderr)
	t.Log("\n" + r.stdout)
	assert.Contains(t, r.stdout, "maint: HELD (lock; 3 of 3 nodes answered, quorum 2)")
	assert.Contains(t, r.stdout, identity(t, cmd.Process.Pid))
	assert.Contains(t, r.stdout, "value "+value, "the value is shown whole, not redacted")
	assert.Contains(t, r.stdout, "token 1 (fenced)")
	assert.Contains(t, r.stdout, "fencing counter: 1")

	code, ins := c.statusJSON(t, "maint")
	assert.Zero(t, code)
	require.Len(t, ins, 1)
	assert.Equal(t, "held", ins[0].State)
	assert.Equal(t, "lock", ins[0].Kind)
	require.Len(t, ins[0].Holders, 1)
	hd := ins[0].Holders[0]
	assert.Equal(t, value, hd.Value)
	assert.Equal(t, identity(t, cmd.Process.Pid), hd.Identity)
	assert.Equal(t, uint64(1), hd.Token)
	assert.True(t, hd.OnQuorum)
	assert.InDelta(t, 30000, hd.TTLms, 5000)

	r = c.run(t, "hold", "maint")
	assert.Equal(t, exitConflict, r.code, "a second hold, --wait 0: %s", r.stderr)
	assert.Empty(t, r.stdout)
	r = c.run(t, "hold", "--wait", "0.3", "--conflict-exit-code", "9", "maint")
	assert.Equal(t, 9, r.code, "--wait 0.3 --conflict-exit-code 9: %s", r.stderr)

	assert.Zero(t, terminate(t, cmd), "SIGTERM ends the hold with 0")
	code, ins = c.statusJSON(t, "maint")
	assert.Equal(t, exitFree, code)
	assert.Equal(t, "free", ins[0].State, "released at once")
	assert.Equal(t, uint64(1), ins[0].FenceCounter)

	// SIGINT as well; and a hold of several resources.
	cmd, _, token = c.hold(t, "--fencing", "maint,other")
	assert.Equal(t, uint64(2), token)
	code, ins = c.statusJSON(t, "maint", "other")
	assert.Zero(t, code)
	require.Len(t, ins, 2)
	assert.Equal(t, "held", ins[1].State, "both resources of one hold")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	assert.Zero(t, exitOf(t, cmd))
	code, _ = c.statusJSON(t, "maint", "other")
	assert.Equal(t, exitFree, code)
}

// hold reads its standard input only with --until-stdin-closes: then
// stdin closing ends it (released, exit 0); without it, a closed stdin
// (a background job's /dev/null) changes nothing.
func TestHoldUntilStdinCloses(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, watch := range []bool{false, true} {
		args := []string{"hold"}
		if watch {
			args = append(args, "--until-stdin-closes")
		}
		cmd := c.command(append(args, "stdin")...)
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		out := lines(t, cmd)
		started(t, cmd)
		assert.Regexp(t, holdLine, next(t, out).text)
		require.NoError(t, in.Close())
		if !watch {
			time.Sleep(time.Second)
			code, _ := c.statusJSON(t, "stdin")
			assert.Zero(t, code, "stdin closed without --until-stdin-closes: still held")
			assert.Zero(t, terminate(t, cmd))
			continue
		}
		done := make(chan int)
		go func() { done <- exitOf(t, cmd) }()
		select {
		case code := <-done:
			assert.Zero(t, code, "stdin closed with --until-stdin-closes")
		case <-time.After(10 * time.Second):
			t.Fatal("hold --until-stdin-closes did not end when stdin closed")
		}
		code, _ := c.statusJSON(t, "stdin")
		assert.Equal(t, exitFree, code, "released")
	}
	// A background job's stdin is /dev/null: closed from the start.
	cmd, _, _ := c.hold(t, "devnull")
	time.Sleep(500 * time.Millisecond)
	assert.Nil(t, cmd.ProcessState, "hold ended on /dev/null without --until-stdin-closes")
	assert.Zero(t, terminate(t, cmd))
}

// A hold whose lock is force-released finds out at its next extension,
// and exits 79; unreachable nodes exit 69; bad flags exit 2.
func TestHoldExitCodes(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd, value, _ := c.hold(t, "--ttl", "2s", "lost")
	r := c.run(t, "release", "lost", "--value", value)
	require.Zero(t, r.code, r.stderr)
	assert.Equal(t, exitLost, exitOf(t, cmd), "a force-released hold")

	// A signal while it waits: 128+n, and nothing printed.
	first, _, _ := c.hold(t, "busy")
	waiting := c.command("hold", "--wait", "forever", "busy")
	var out bytes.Buffer
	waiting.Stdout = &out
	started(t, waiting)
	c.waiting(t)
	assert.Equal(t, 128+int(syscall.SIGTERM), terminate(t, waiting), "SIGTERM while waiting")
	assert.Empty(t, out.String())
	assert.Zero(t, terminate(t, first))

	r = c.run(t, "hold", "--nodes", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "x")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "connection refused")

	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"hold"}, "no RESOURCE"},
		{[]string{"hold", "a", "b"}, "join resources with commas"},
		{[]string{"hold", "a,a"}, "duplicates"},
		{[]string{"hold", "--ttl", "0.5", "a"}, "below 1s"},
		{[]string{"hold", "--fair", "--fencing", "a"}, "--fair with"},
		{[]string{"hold", "--permits", "2", "--shared", "a"}, "--permits and --shared"},
		{[]string{"release"}, "no RESOURCE"},
		{[]string{"release", "a", "b"}, "one resource at a time"},
		{[]string{"release", "a", "--value", ""}, "--value is empty"},
		{[]string{"status", "--election", ""}, "empty NAME"},
		{[]string{"status", "redlock:fence:{a}:a"}, "one of redlock's own keys"},
	} {
		r := c.run(t, tc.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.message, "%v", tc.args)
	}
	for _, verb := range []string{"hold", "release"} {
		r := c.run(t, "help", verb)
		assert.Zero(t, r.code)
		assert.Contains(t, r.stdout, "Exit codes", verb)
	}
}

// status shows each kind as Inspect finds it: a semaphore's permits, a
// shared lock's readers and a waiting writer, the fair queue's waiters in
// order, an election's leader and term.
func TestStatusKinds(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p1, _, _ := c.hold(t, "--permits", "3", "jobs")
	p2, _, _ := c.hold(t, "--permits", "3", "jobs")
	r1, _, _ := c.hold(t, "--shared", "cache")
	writer := started(t, c.command("hold", "--wait", "forever", "cache"))
	q, _, _ := c.hold(t, "--fair", "queue")
	w1 := started(t, c.command("hold", "--fair", "--wait", "forever", "queue"))
	require.Eventually(t, func() bool {
		_, ins := c.statusJSON(t, "queue")
		return len(ins[0].Waiters) == 1 && ins[0].Waiters[0].Nodes == 3
	}, 10*time.Second, 20*time.Millisecond, "the first waiter queued")
	w2 := started(t, c.command("hold", "--fair", "--wait", "forever", "queue"))
	require.Eventually(t, func() bool {
		_, ins := c.statusJSON(t, "queue", "cache")
		return len(ins[0].Waiters) == 2 && ins[0].Waiters[1].Nodes == 3 && ins[1].WriterWaiting
	}, 10*time.Second, 20*time.Millisecond, "the second waiter queued, the writer waits")
	leader := started(t, c.command("elect", "--id", "pod-a", "sched", "--", "sleep", "60"))
	require.Eventually(t, func() bool { return c.run(t, "leader", "sched").code == 0 }, 10*time.Second, 20*time.Millisecond)

	r := c.run(t, "status", "jobs", "cache", "queue", "--election", "sched")
	assert.Zero(t, r.code, r.stderr)
	t.Log("\n" + r.stdout)
	assert.Contains(t, r.stdout, "jobs: HELD (semaphore;")
	assert.Contains(t, r.stdout, "permits in use: 2 of 3")
	assert.Regexp(t, `permit \d  `+regexp.QuoteMeta(identity(t, p1.Process.Pid)), r.stdout)
	assert.Regexp(t, `permit \d  `+regexp.QuoteMeta(identity(t, p2.Process.Pid)), r.stdout)
	assert.Contains(t, r.stdout, "cache: HELD (shared lock;")
	assert.Contains(t, r.stdout, "readers: 1; a writer waits for them to leave")
	assert.Contains(t, r.stdout, "reader  "+identity(t, r1.Process.Pid))
	assert.Contains(t, r.stdout, "queue: HELD (lock;")
	assert.Contains(t, r.stdout, "holder  "+identity(t, q.Process.Pid))
	assert.Regexp(t, `waiters \(fair queue, head first\):\n  1\.  `+regexp.QuoteMeta(identity(t, w1.Process.Pid))+`.*\n  2\.  `+regexp.QuoteMeta(identity(t, w2.Process.Pid)), r.stdout)
	assert.Regexp(t, `redlock:election:sched: HELD \(election;[^\n]*\n  leader: pod-a \(term \d+\)`, r.stdout)

	code, ins := c.statusJSON(t, "jobs", "cache", "queue", "--election", "sched")
	assert.Zero(t, code)
	require.Len(t, ins, 4)
	assert.Equal(t, "semaphore", ins[0].Kind)
	assert.Equal(t, 2, ins[0].InUse)
	assert.Equal(t, 3, ins[0].Permits)
	assert.Equal(t, "shared", ins[1].Kind)
	assert.True(t, ins[1].WriterWaiting)
	require.Len(t, ins[2].Waiters, 2)
	assert.Equal(t, identity(t, w1.Process.Pid), ins[2].Waiters[0].Identity)
	assert.Equal(t, "election", ins[3].Kind)
	if assert.NotNil(t, ins[3].Leader) {
		assert.Equal(t, "pod-a", *ins[3].Leader.ID)
		assert.Positive(t, *ins[3].Leader.Term)
	}
	for _, cmd := range []*exec.Cmd{p1, p2, r1, writer, q, w1, w2, leader} {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = exitOf(t, cmd)
	}
}

// status tells free (1), held (0) and unknown (69) apart: a resource is
// unknown when the nodes that did not answer (stopped, or refusing
// connections) could make a quorum hold it; then each is named.
func TestStatusUnknown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd, _, _ := c.hold(t, "held")
	r := c.run(t, "status", "held", "free")
	assert.Equal(t, exitFree, r.code, "one free resource: %s", r.stderr)
	r = c.run(t, "status", "held")
	assert.Zero(t, r.code, r.stderr)

	// Two of three nodes stopped: nobody can say a quorum does not hold
	// either.
	c.Nodes[1].Pause()
	c.Nodes[2].Pause()
	r = c.run(t, "status", "held", "free")
	c.Nodes[1].Resume()
	c.Nodes[2].Resume()
	t.Log("\n" + r.stdout + r.stderr)
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stdout, "held: UNKNOWN (lock; 1 of 3 nodes answered, quorum 2)")
	assert.Contains(t, r.stdout, "free: UNKNOWN (nothing holds it; 1 of 3 nodes answered, quorum 2)")
	assert.Contains(t, r.stdout, "did not answer: no answer within --node-timeout 500ms")
	assert.Contains(t, r.stderr, "is unknown")
	assert.Zero(t, terminate(t, cmd))

	// A node that refuses connections, with a password in its URL: free
	// is still known from the other two, and the password is never shown.
	addrs := strings.Split(c.addrs, ",")
	nodes := addrs[0] + "," + addrs[1] + ",redis://:Secret123@127.0.0.1:1"
	r = c.run(t, "status", "--nodes", nodes, "held")
	assert.Equal(t, exitFree, r.code, r.stderr)
	assert.Contains(t, r.stdout, "node 127.0.0.1:1 did not answer:")
	assert.Contains(t, r.stdout, "connection refused")
	assert.NotContains(t, r.stdout+r.stderr, "Secret123")
	code, ins := func() (int, []inspectionJSON) {
		r := c.run(t, "status", "--json", "--nodes", nodes, "held")
		var ins []inspectionJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ins), r.stdout)
		return r.code, ins
	}()
	assert.Equal(t, exitFree, code)
	require.Len(t, ins[0].Errors, 1)
	assert.Equal(t, "127.0.0.1:1", ins[0].Errors[0].Node)
	c.Nodes[1].Kill()
	r = c.run(t, "status", "--nodes", nodes, "held")
	assert.Equal(t, exitUnavailable, r.code, "1 of 3 answered: %s", r.stdout)
}

// A run killed with SIGKILL leaves its lock for its whole --ttl (2h);
// release takes it back, and the next run gets it at once. --value takes
// one holder only; a node down is exit 69, which says a quorum answered.
func TestRelease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	cmd := started(t, c.command("run", "--ttl", "2h", "nightly", "--", "sh", "-c", "echo $REDLOCK_VALUE > "+dir+"/v; sleep 60"))
	value := waitFile(t, dir+"/v")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = exitOf(t, cmd)
	r := c.run(t, "run", "nightly", "--", "true")
	require.Equal(t, exitConflict, r.code, "the killed run's lock is held: %s", r.stderr)

	r = c.run(t, "release", "nightly")
	t.Log("\n" + r.stdout + r.stderr)
	assert.Zero(t, r.code, r.stderr)
	assert.Regexp(t, `(?s)before:\nnightly: HELD \(lock;.*ttl 1h59m5\d.*released on 3 of 3 nodes, removed 1 holder\(s\):\n  .+  value `+regexp.QuoteMeta(value)+`\nafter:\nnightly: FREE`, r.stdout)
	r = c.run(t, "run", "nightly", "--", "true")
	assert.Zero(t, r.code, "the next run gets the lock at once: %s", r.stderr)
	assert.Less(t, r.took, 2*time.Second)

	// --value: one permit of two.
	p1, v1, _ := c.hold(t, "--permits", "2", "pool")
	p2, v2, _ := c.hold(t, "--permits", "2", "pool")
	r = c.run(t, "release", "pool", "--value", v1, "--value", "0123456789abcdef0123456789abcdef")
	assert.Zero(t, r.code, r.stderr)
	assert.Contains(t, r.stdout, "removed 1 holder(s)")
	assert.Contains(t, r.stdout, "no node that answered holds value 0123456789abcdef0123456789abcdef")
	r = c.run(t, "release", "pool", "--value", v1)
	assert.Equal(t, exitNotHeld, r.code, "a value no node holds any more: %s", r.stderr)
	assert.Contains(t, r.stderr, "nothing was released")
	_, ins := c.statusJSON(t, "pool")
	require.Len(t, ins[0].Holders, 1)
	assert.Equal(t, v2, ins[0].Holders[0].Value)
	assert.Zero(t, terminate(t, p2))
	_ = p1.Process.Kill()
	_ = exitOf(t, p1)

	// A node down: 69, and the line says that a quorum answered.
	c.Nodes[2].Kill()
	r = c.run(t, "release", "pool")
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stderr, "2 of 3 nodes answered, a quorum")
	c.Nodes[1].Kill()
	r = c.run(t, "release", "pool")
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stderr, "1 of 3 nodes answered, fewer than a quorum")
}

// A silent node holds status up for one node timeout and release for two
// (its read, then the release), no longer: the command does not wait for
// the silent node's connection on its way out (was: 3 and 5 node timeouts,
// Close waiting for it after the answer was printed).
func TestSilentNodeBoundsTheExit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var addrs []string
	var hung *redistest.Proxy
	for i, nd := range c.Nodes {
		p := redistest.NewProxy(t, nd.Addr())
		if i == 0 {
			hung = p
		}
		addrs = append(addrs, p.Addr())
	}
	list := strings.Join(addrs, ",")
	hung.Set(redistest.DropReplies)
	r := c.run(t, "status", "--node-timeout", "1s", "--nodes", list, "x")
	assert.Equal(t, 1, r.code, "free: two of three answered and hold nothing")
	assert.Less(t, r.took, 2*time.Second, "status with one hung node and --node-timeout 1s")
	r = c.run(t, "release", "--node-timeout", "1s", "--nodes", list, "x")
	assert.Equal(t, 69, r.code)
	assert.Less(t, r.took, 3*time.Second, "release with one hung node and --node-timeout 1s")
	assert.Contains(t, r.stdout, "after: not read again")
}
