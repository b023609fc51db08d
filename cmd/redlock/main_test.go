package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
)

// The tests build the command and run it as real processes against real
// redis-server nodes.

var binary string // the built command

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redlock-cmd")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "redlock")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is three independent nodes and the --nodes value for them.
type cluster struct {
	*redistest.Fixture
	addrs string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	redistest.Require(t)
	f := redistest.New(t, redistest.Setup{Nodes: 3})
	var addrs []string
	for _, nd := range f.Nodes {
		addrs = append(addrs, nd.Addr())
	}
	return &cluster{Fixture: f, addrs: strings.Join(addrs, ",")}
}

// result is one finished run of the command.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// command returns the command with args, REDLOCK_NODES set to c's nodes
// (unset when c is nil).
func (c *cluster) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REDLOCK_") {
			env = append(env, e)
		}
	}
	if c != nil {
		env = append(env, "REDLOCK_NODES="+c.addrs)
	}
	cmd.Env = env
	return cmd
}

// run runs the command to its end.
func (c *cluster) run(t *testing.T, args ...string) result {
	t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %v: %v", args, err)
	}
	return r
}

// empty checks that no node holds key.
func (c *cluster) empty(t *testing.T, key string) {
	t.Helper()
	for i := range c.Nodes {
		assert.Eventually(t, func() bool {
			n, err := c.Peek[i].Exists(context.Background(), key).Result()
			return err == nil && n == 0
		}, 2*time.Second, 5*time.Millisecond, "%s still on node %d", key, i)
	}
}

// held waits until a quorum (2 of 3) holds key with one value, and returns
// it. (Not every node: an acquire decided at a quorum is never sent to a
// node whose call had not gone out by then, so the third may never hold it.)
func (c *cluster) held(t *testing.T, key string) string {
	t.Helper()
	var v string
	require.Eventually(t, func() bool {
		count := map[string]int{}
		for i := range c.Nodes {
			if g := c.Get(t, i, key); g != "" {
				count[g]++
				if count[g] >= 2 {
					v = g
					return true
				}
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "%s held on a quorum", key)
	return v
}

// The command's exit code passes through, 128+n for a signal n, and the lock
// is gone from every node afterwards.
func TestExitCodePassesThrough(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, tc := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 1", 1}, {"exit 7", 7}, {"exit 75", 75}, {"kill -TERM $$", 128 + 15}, {"kill -KILL $$", 128 + 9}} {
		r := c.run(t, "run", "job", "--", "sh", "-c", tc.script)
		assert.Equal(t, tc.want, r.code, "sh -c %q: stderr %q", tc.script, r.stderr)
		assert.Empty(t, r.stderr, "nothing of its own on stderr")
		c.empty(t, "job")
	}
	r := c.run(t, "run", "job", "--", "/no/such/command")
	assert.Equal(t, exitNotFound, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cannot run")
	c.empty(t, "job")

	// The environment the command gets.
	r = c.run(t, "run", "--fencing", "a,b", "--", "sh", "-c", `echo "$REDLOCK_RESOURCES|$REDLOCK_VALUE|$REDLOCK_TOKEN"`)
	require.Zero(t, r.code, r.stderr)
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	require.Len(t, parts, 3)
	assert.Equal(t, "a,b", parts[0])
	assert.Regexp(t, `^[0-9a-f]{32}(@\S+)?$`, parts[1], "the value: 32 hex digits, then the identity (WithIdentity) when there is one")
	assert.Equal(t, "1", parts[2])
}

// Six runs at once with --wait 0 run the command at most once, and the
// others exit with the conflict code. Not exactly once: try-once
// contenders can split the nodes among them so that none has a quorum
// (the lock promises at most one holder, not that a try-once call wins).
// That a run gets the lock at all is measured with waiting runs: six
// with --wait all run, one after the other, never two at once.
func TestConcurrentRunsRunOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	marker := filepath.Join(t.TempDir(), "ran")
	var wg sync.WaitGroup
	results := make([]result, 6)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run(t, "run", "--wait", "0", "nightly", "--", "sh", "-c", "echo ran >> "+marker+"; sleep 1")
		}()
	}
	wg.Wait()
	codes := map[int]int{}
	for _, r := range results {
		codes[r.code]++
		assert.Contains(t, []int{0, exitConflict}, r.code, "a run with --wait 0: %s", r.stderr)
		assert.Empty(t, r.stderr)
	}
	assert.LessOrEqual(t, codes[0], 1, "runs that got the lock, of 6 at once with --wait 0: %v", codes)
	b, err := os.ReadFile(marker)
	if codes[0] == 0 {
		assert.ErrorIs(t, err, os.ErrNotExist, "no run got the lock, yet the command ran: %q", b)
	} else {
		require.NoError(t, err)
		assert.Equal(t, "ran\n", string(b), "the command ran once")
	}
	c.empty(t, "nightly")

	log := filepath.Join(t.TempDir(), "log")
	results = runAll(t, c, 6, "run", "--wait", "60", "nightly", "--", "sh", "-c", inOut(log))
	for i, r := range results {
		assert.Zero(t, r.code, "waiting run %d: %s", i, r.stderr)
	}
	peak, runs := peakInside(t, log)
	assert.Equal(t, 6, runs, "commands run by 6 waiting runs")
	assert.Equal(t, 1, peak, "commands running at once under one lock")
	c.empty(t, "nightly")

	// --conflict-exit-code changes the code.
	holder := c.command("run", "nightly", "--", "sleep", "2")
	require.NoError(t, holder.Start())
	c.held(t, "nightly")
	r := c.run(t, "run", "--conflict-exit-code", "9", "nightly", "--", "true")
	assert.Equal(t, 9, r.code)
	require.NoError(t, holder.Wait())
}

// --wait waits for the holder's release, and the command then runs.
func TestWaitWaitsForTheRelease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	holder := c.command("run", "report", "--", "sh", "-c", "sleep 1; date +%s%N > "+filepath.Join(dir, "first-done"))
	require.NoError(t, holder.Start())
	c.held(t, "report")
	r := c.run(t, "run", "--wait", "10s", "report", "--", "sh", "-c", "date +%s%N > "+filepath.Join(dir, "second-start"))
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, holder.Wait())
	first, second := readNanos(t, filepath.Join(dir, "first-done")), readNanos(t, filepath.Join(dir, "second-start"))
	assert.Greater(t, second, first, "the second command started after the first ended")
	t.Logf("the waiter started %v after the holder's command ended", time.Duration(second-first))

	// A wait that ends while the lock is held: the conflict code.
	holder = c.command("run", "report", "--", "sleep", "3")
	require.NoError(t, holder.Start())
	c.held(t, "report")
	r = c.run(t, "run", "--wait", "500ms", "report", "--", "true")
	assert.Equal(t, exitConflict, r.code)
	assert.Less(t, r.took, 2500*time.Millisecond, "the wait ended at 500ms")
	require.NoError(t, holder.Wait())
}

func readNanos(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return n
}

// A lock taken over by another holder while the command runs: the command
// gets SIGTERM, then SIGKILL when it ignores it, and redlock exits with the
// lost-lock code without touching the new holder's keys.
func TestLostLockStopsTheCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		script string
	}{
		{"ignores SIGTERM", `trap "" TERM; echo $$ > ` + dir + `/group; sleep 60`},
		{"stops on SIGTERM", `trap "echo got TERM > ` + dir + `/stops; exit 0" TERM; echo started > /dev/null; while true; do sleep 0.05; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := c.command("run", "--ttl", "2s", "--kill-grace", "500ms", "batch", "--", "sh", "-c", tc.script)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start := time.Now()
			require.NoError(t, cmd.Start())
			mine := c.held(t, "batch")
			// Another holder takes it over (as after an expiry).
			for i := range c.Nodes {
				c.Set(t, i, "batch", "the-new-holder", time.Minute)
			}
			err := cmd.Wait()
			took := time.Since(start)
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitLost, ee.ExitCode(), "stderr: %s", errb.String())
			assert.Contains(t, errb.String(), "was lost while the command ran")
			t.Logf("exited %v after start (ttl 2s: extension at 1s, grace 500ms): %s", took.Round(time.Millisecond), strings.TrimSpace(errb.String()))
			assert.Less(t, took, 5*time.Second, "the command was stopped")
			for i := range c.Nodes {
				assert.Equal(t, "the-new-holder", c.Get(t, i, "batch"), "node %d: the new holder's key is untouched", i)
			}
			assert.NotEqual(t, mine, "the-new-holder")
			for i := range c.Nodes {
				_, _ = c.Peek[i].Del(context.Background(), "batch").Result()
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(dir, "stops"))
	require.NoError(t, err, "the command that stops on SIGTERM got it")
	assert.Equal(t, "got TERM\n", string(b))
	// The one that ignored it was killed, its sleep included: nothing is
	// left of its process group.
	b, err = os.ReadFile(filepath.Join(dir, "group"))
	require.NoError(t, err)
	group, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return errors.Is(syscall.Kill(-group, 0), syscall.ESRCH) }, time.Second, 5*time.Millisecond,
		"process group %d is gone (SIGKILL was sent before redlock exited)", group)
}

// SIGTERM (and SIGINT, SIGHUP, SIGQUIT) sent to redlock reach the command;
// redlock waits for it, exits with its code, and releases the lock.
func TestSignalsReachTheCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		name := sig.String()
		marker := filepath.Join(dir, strconv.Itoa(int(sig)))
		script := fmt.Sprintf(`trap "echo got > %s; exit 3" %d; while true; do sleep 0.05; done`, marker, sig)
		cmd := c.command("run", "svc", "--", "sh", "-c", script)
		require.NoError(t, cmd.Start())
		c.held(t, "svc")
		time.Sleep(100 * time.Millisecond) // the trap is set
		require.NoError(t, cmd.Process.Signal(sig))
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, name)
		assert.Equal(t, 3, ee.ExitCode(), "%s: the command's own exit code", name)
		b, err := os.ReadFile(marker)
		require.NoError(t, err, "%s reached the command", name)
		assert.Equal(t, "got\n", string(b))
		c.empty(t, "svc")
	}
}

// --fencing tokens count up across runs.
func TestFencingTokensCountUpAcrossRuns(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for want := 1; want <= 4; want++ {
		r := c.run(t, "run", "--fencing", "ledger", "--", "sh", "-c", `echo $REDLOCK_TOKEN`)
		require.Zero(t, r.code, r.stderr)
		assert.Equal(t, strconv.Itoa(want), strings.TrimSpace(r.stdout))
	}
	r := c.run(t, "run", "ledger", "--", "sh", "-c", `echo "[$REDLOCK_TOKEN]"`)
	assert.Equal(t, "[]", strings.TrimSpace(r.stdout), "no token without --fencing")
}

// Bad invocations fail fast, with a message on stderr and the documented
// code.
func TestBadInvocations(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, tc := range []struct {
		name    string
		nodes   bool
		args    []string
		code    int
		message string
	}{
		{"no verb", true, nil, exitUsage, "Usage:"},
		{"unknown verb", true, []string{"lock", "x"}, exitUsage, `unknown verb "lock"`},
		{"no nodes", false, []string{"run", "x", "--", "true"}, exitUsage, "no nodes: give --nodes"},
		{"node without a port", false, []string{"run", "--nodes", "localhost", "x", "--", "true"}, exitUsage, `node "localhost": no port: give host:port, such as localhost:6379`},
		{"bad URL", false, []string{"run", "--nodes", "redis://:x@h:notaport", "x", "--", "true"}, exitUsage, "redis://"},
		{"no command", true, []string{"run", "x"}, exitUsage, "no COMMAND"},
		{"no command after --", true, []string{"run", "x", "--"}, exitUsage, "no COMMAND"},
		{"no resource", true, []string{"run", "--", "true"}, exitUsage, "no RESOURCE"},
		{"two resource arguments", true, []string{"run", "a", "b", "--", "true"}, exitUsage, "join resources with commas"},
		{"empty resource", true, []string{"run", "a,,b", "--", "true"}, exitUsage, "empty name"},
		{"duplicate resource", true, []string{"run", "a,a", "--", "true"}, exitUsage, "duplicates"},
		{"bad duration", true, []string{"run", "--ttl", "ten", "x", "--", "true"}, exitUsage, `invalid value "ten" for flag -ttl`},
		{"bad wait", true, []string{"run", "--wait", "soon", "x", "--", "true"}, exitUsage, `"forever"`},
		{"ttl too short", true, []string{"run", "--ttl", "10ms", "x", "--", "true"}, exitUsage, "below 1s"},
		{"kill grace too long", true, []string{"run", "--ttl", "10s", "--kill-grace", "6s", "x", "--", "true"}, exitUsage, "--kill-grace"},
		{"bad conflict code", true, []string{"run", "--conflict-exit-code", "300", "x", "--", "true"}, exitUsage, "0-255"},
		{"status without resource", true, []string{"status"}, exitUsage, "no RESOURCE"},
		{"help of an unknown verb", true, []string{"help", "lock"}, exitUsage, "unknown verb"},
		{"node timeout given above ttl/4", true, []string{"run", "--ttl", "1s", "--node-timeout", "500ms", "x", "--", "true"}, exitUsage, "at most ttl/4 (250ms): lower it, raise --ttl, or leave it out"},
		{"unknown flag", true, []string{"run", "--bogus", "x", "--", "true"}, exitUsage, "flag provided but not defined: -bogus"},
		{"status node timeout not positive", true, []string{"status", "--node-timeout", "0s", "x"}, exitUsage, "--node-timeout 0s is not positive"},
		{"URL missing its colon", false, []string{"run", "--nodes", "redis//h:6379", "x", "--", "true"}, exitUsage, "is not a host name or address"},
		{"port out of range", false, []string{"run", "--nodes", "127.0.0.1:99999", "x", "--", "true"}, exitUsage, `port "99999" is not a port`},
		{"empty command name", true, []string{"run", "x", "--", ""}, exitUsage, "the COMMAND's name is empty"},
		{"status has no -verbose", true, []string{"status", "-verbose", "x"}, exitUsage, "flag provided but not defined: -verbose"},
		{"bad seconds", true, []string{"run", "--wait", "5x", "x", "--", "true"}, exitUsage, "not a duration"},
		{"elect without NAME", true, []string{"elect"}, exitUsage, "no NAME"},
		{"elect without NAME, with a command", true, []string{"elect", "--", "true"}, exitUsage, "no NAME"},
		{"elect with an empty NAME", true, []string{"elect", "", "--", "true"}, exitUsage, "NAME is empty"},
		{"elect with two NAMEs", true, []string{"elect", "a", "b", "--", "true"}, exitUsage, "more than one NAME"},
		{"elect with an empty id", true, []string{"elect", "--id", "", "x", "--", "true"}, exitUsage, "--id is empty"},
		{"elect with a long id", true, []string{"elect", "--id", strings.Repeat("i", 1025), "x", "--", "true"}, exitUsage, "at most 1024"},
		{"elect without command", true, []string{"elect", "x"}, exitUsage, "no COMMAND"},
		{"elect without command after --", true, []string{"elect", "--id", "a", "x", "--"}, exitUsage, "no COMMAND"},
		{"elect with an empty command name", true, []string{"elect", "x", "--", ""}, exitUsage, "the COMMAND's name is empty"},
		{"elect ttl too short", true, []string{"elect", "--ttl", "0.5", "x", "--", "true"}, exitUsage, "below 1s"},
		{"elect bad wait", true, []string{"elect", "--wait", "soon", "x", "--", "true"}, exitUsage, `"forever"`},
		{"elect kill grace too long", true, []string{"elect", "--ttl", "4s", "--kill-grace", "3s", "x", "--", "true"}, exitUsage, "--kill-grace"},
		{"elect without nodes", false, []string{"elect", "x", "--", "true"}, exitUsage, "no nodes: give --nodes"},
		{"leader without NAME", true, []string{"leader"}, exitUsage, "no NAME"},
		{"leader with two NAMEs", true, []string{"leader", "a", "b"}, exitUsage, "more than one NAME"},
		{"leader with an empty NAME", true, []string{"leader", ""}, exitUsage, "NAME is empty"},
		{"leader has no --verbose", true, []string{"leader", "--verbose", "x"}, exitUsage, "flag provided but not defined: -verbose"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			if tc.nodes {
				r = c.run(t, tc.args...)
			} else {
				r = (*cluster)(nil).run(t, tc.args...)
			}
			assert.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			assert.Contains(t, r.stderr, tc.message)
			assert.Less(t, r.took, 3*time.Second)
			if tc.args != nil {
				// What is wrong, and where the usage is: not the usage.
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				assert.LessOrEqual(t, len(lines), 2, "stderr of %v: %s", tc.args, r.stderr)
				assert.Contains(t, lines[len(lines)-1], "Run 'redlock help", "stderr of %v", tc.args)
			}
		})
	}

	// Unreachable nodes: the unavailable code, within a couple of seconds.
	r := c.run(t, "run", "--nodes", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "x", "--", "true")
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stderr, "connection refused")
	assert.Contains(t, r.stderr, "node=127.0.0.1:", "a node is named by its address")
	assert.Less(t, r.took, 5*time.Second)
	t.Logf("unreachable nodes: exit %d after %v: %s", r.code, r.took.Round(time.Millisecond), strings.TrimSpace(r.stderr))

	// Help goes to stdout and exits 0.
	for _, args := range [][]string{{"help"}, {"help", "run"}, {"help", "status"}, {"-h"}} {
		r := c.run(t, args...)
		assert.Zero(t, r.code, "%v", args)
		assert.Contains(t, r.stdout, "Usage", "%v", args)
	}
	for _, args := range [][]string{{"help", "run"}, {"run", "-h"}, {"run", "x", "--help", "--", "true"}} {
		r = c.run(t, args...)
		assert.Zero(t, r.code, "%v", args)
		assert.Contains(t, r.stdout, "79", "%v: the exit codes", args)
		assert.Contains(t, r.stdout, "-kill-grace duration", "%v: the flags", args)
	}
	r = c.run(t, "help", "status")
	assert.Contains(t, r.stdout, "-json")
	for _, args := range [][]string{{"help", "elect"}, {"elect", "-h"}, {"elect", "x", "--help", "--", "true"}} {
		r = c.run(t, args...)
		assert.Zero(t, r.code, "%v", args)
		assert.Contains(t, r.stdout, "79", "%v: the exit codes", args)
		assert.Contains(t, r.stdout, "-forever", "%v: the flags", args)
		assert.Contains(t, r.stdout, "(default: the hostname)", "%v: the id's default", args)
	}
	for _, args := range [][]string{{"help", "leader"}, {"leader", "-h"}} {
		r = c.run(t, args...)
		assert.Zero(t, r.code, "%v", args)
		assert.Contains(t, r.stdout, "no leader", "%v: the exit codes", args)
		assert.Contains(t, r.stdout, "-watch", "%v: the flags", args)
	}
	r = c.run(t, "help")
	assert.Contains(t, r.stdout, "redlock elect [flags] NAME -- COMMAND")
	assert.Contains(t, r.stdout, "redlock leader [flags] NAME")
}

// A user who sets only --ttl is never refused for a --node-timeout they did
// not give: below 2s the node timeout is ttl/4.
func TestShortTTLNeedsNoNodeTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	r := c.run(t, "run", "--ttl", "1s", "short", "--", "sh", "-c", "echo ran")
	assert.Zero(t, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
	c.empty(t, "short")
}

// A command that exits and leaves a child running in its group: the child
// is stopped before the lock is released, so nothing runs unlocked.
func TestLeftoverProcessesAreStoppedBeforeTheRelease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	r := c.run(t, "run", "--ttl", "4s", "--kill-grace", "300ms", "bg", "--", "sh", "-c",
		`sh -c 'trap "" TERM; echo $$ > `+dir+`/ignores; exec sleep 60' & sleep 60 & echo $$ > `+dir+`/group; sleep 0.2; exit 4`)
	assert.Equal(t, 4, r.code, "the command's own code: %s", r.stderr)
	assert.Contains(t, r.stderr, "left processes in its group")
	b, err := os.ReadFile(filepath.Join(dir, "group"))
	require.NoError(t, err)
	group, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	assert.False(t, groupAlive(group), "nothing of the group runs when redlock has exited")
	c.empty(t, "bg")
	t.Logf("exited %v after start (the leftovers: one stopped by SIGTERM, one by SIGKILL after 300ms)", r.took.Round(time.Millisecond))
}

// At a terminal, the command is in the foreground: it reads what is typed.
func TestCommandReadsTheTerminal(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	master, slave := openPTY(t)
	cmd := c.command("run", "tty", "--", "sh", "-c", `read x; echo "got $x"`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	_ = slave.Close()
	c.held(t, "tty")
	time.Sleep(200 * time.Millisecond) // the command is reading
	_, err := master.Write([]byte("hello\n"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the command did not finish: it could not read the terminal (stopped by SIGTTIN?)")
	}
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), "got hello")
	}, 2*time.Second, 10*time.Millisecond, "the command read the line and answered")
	c.empty(t, "tty")
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return m, s
}

// No message, log line or JSON field shows a password from a node URL: a
// bad URL, a trailing comma, a node that refuses, a wrong password.
func TestPasswordsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const pw = "TopSecretPw"
	live := strings.Split(c.addrs, ",")
	for _, tc := range []struct {
		name  string
		nodes string
		args  []string
	}{
		{"bad database", "redis://:" + pw + "@127.0.0.1:17004/abc", []string{"status", "p"}},
		{"trailing comma", "redis://:" + pw + "@" + live[0] + ",", []string{"status", "p"}},
		{"lone user is a password", "redis://" + pw + "@127.0.0.1:1/x", []string{"run", "p", "--", "true"}},
		{"refused", "redis://u:" + pw + "@127.0.0.1:1,redis://u:" + pw + "@127.0.0.1:2,redis://u:" + pw + "@127.0.0.1:3", []string{"run", "--verbose", "p", "--", "true"}},
		{"password in the query", "redis://:x@h:1?username=u&password=" + pw, []string{"status", "p"}},
		{"scheme forgotten", "u:" + pw + "@127.0.0.1:27001", []string{"run", "p", "--", "true"}},
		{"one slash", "redis:/u:" + pw + "@127.0.0.1:27001", []string{"status", "p"}},
		{"wrong password, json", "redis://:" + pw + "@" + live[0], []string{"status", "--json", "p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "wrong password") {
				require.NoError(t, c.Peek[0].ConfigSet(context.Background(), "requirepass", "another").Err())
			}
			r := c.run(t, append([]string{tc.args[0], "--nodes", tc.nodes}, tc.args[1:]...)...)
			assert.NotZero(t, r.code)
			assert.NotContains(t, r.stdout+r.stderr, pw)
			assert.NotEmpty(t, r.stdout+r.stderr, "it says what is wrong")
			t.Logf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		})
	}
}

// redlock killed with SIGKILL (by hand, the OOM killer, a runtime that kills
// only the main process): the command and what it started in its group die
// with it, before the lock's ttl ends, and a second run is not beside it.
// (The command used to run on with no lock, and a second run started.)
func TestKilledRedlockTakesTheCommandAlong(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	const ttl = 2 * time.Second
	cmd := c.command("run", "--ttl", ttl.String(), "kjob", "--", "sh", "-c",
		`echo $$ > `+dir+`/group; sleep 30 & while :; do sleep 0.2; done`)
	require.NoError(t, cmd.Start())
	var group int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "group"))
		group, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && group > 0
	}, 10*time.Second, 5*time.Millisecond, "the command started")
	t.Cleanup(func() { _ = syscall.Kill(-group, syscall.SIGKILL) }) // when the test fails
	c.held(t, "kjob")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()
	for groupAlive(group) && time.Since(killed) < ttl {
		time.Sleep(time.Millisecond)
	}
	gone := time.Since(killed)
	assert.False(t, groupAlive(group), "the command's group runs %v after redlock was killed", gone)
	assert.Less(t, gone, ttl, "the command's group outlived the lock")
	t.Logf("the command's group was gone %v after redlock's SIGKILL (lock ttl %v)", gone.Round(100*time.Microsecond), ttl)
}

// One server in the node list twice votes once: 127.0.0.1:P and
// localhost:P are one server, and with the only other server stopped the
// command does not run. Several databases of one server are refused at
// once. (Issue 23: it ran the command on one live server.)
func TestOneServerTwiceInTheNodeList(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := strings.Split(c.addrs, ",")
	port := strings.TrimPrefix(addrs[0], "127.0.0.1:")
	c.Nodes[1].Kill()
	r := c.run(t, "run", "--nodes", addrs[0]+",localhost:"+port+","+addrs[1], "one", "--", "echo", "ran")
	assert.Equal(t, exitUnavailable, r.code, "stderr: %s", r.stderr)
	assert.NotContains(t, r.stdout, "ran")
	assert.Contains(t, r.stderr, "the same server as node")
	t.Log(r.stderr)

	r = c.run(t, "run", "--nodes", "redis://"+addrs[0]+"/0,redis://"+addrs[0]+"/1,redis://"+addrs[0]+"/2", "one", "--", "echo", "ran")
	assert.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "talk to the same server")
	assert.Less(t, r.took, 2*time.Second)
}

// A node that is known dead (its connections are refused) costs a run
// nothing: no release is held for it, and Close has nothing to wait for.
// (It added a second to every run: Close waited for the dead node.)
func TestDeadNodeCostsNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.Nodes[2].Kill()
	for range 3 {
		r := c.run(t, "run", "dead", "--", "true")
		assert.Zero(t, r.code, "stderr: %s", r.stderr)
		assert.Contains(t, r.stderr, "connection refused", "the dead node is said")
		assert.NotContains(t, r.stderr, "may not have reached", "Close waited for the dead node")
		t.Logf("took %v: %s", r.took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	}
	for i := range 2 {
		assert.Empty(t, c.Get(t, i, "dead"), "node %d", i)
	}
}

// The conventions of a command-line tool: a version; durations in plain
// seconds; flags after the resources of status; errors said once, with a
// hint in command-line terms.
func TestCommandLineConventions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := c.run(t, args...)
		assert.Zero(t, r.code, "%v", args)
		assert.Regexp(t, `^redlock \S+ \(go1\.`, r.stdout, "%v", args)
	}

	r := c.run(t, "run", "--wait", "5", "--ttl", "30", "--kill-grace", "0.5", "secs", "--", "true")
	assert.Zero(t, r.code, "durations in seconds: %s", r.stderr)

	r = c.run(t, "status", "secs", "--json")
	assert.Equal(t, exitFree, r.code, r.stderr)
	var states []inspectionJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &states), "--json after the resource: %s", r.stdout)
	require.Len(t, states, 1)
	assert.Equal(t, "secs", states[0].Resource)

	// A node that wants a password: the hint is a URL, and "redlock:" is
	// said once.
	require.NoError(t, c.Peek[0].ConfigSet(context.Background(), "requirepass", "pw").Err())
	require.NoError(t, c.Peek[1].ConfigSet(context.Background(), "requirepass", "pw").Err())
	r = c.run(t, "run", "pw", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "redis://:PASSWORD@host:6379")
	assert.NotContains(t, r.stderr, "client's options")
	assert.NotContains(t, r.stderr, "redlock run: redlock:")
	t.Log(r.stderr)
}

// A lock lost because the nodes stopped answering says so: the command
// gets SIGTERM before the validity ends, and the message names the cause,
// not only the last attempt's deadline.
func TestLostLockToSilentNodesSaysSo(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd := c.command("run", "--ttl", "2s", "--kill-grace", "300ms", "silent", "--", "sleep", "30")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	c.held(t, "silent")
	c.Nodes[1].Pause()
	c.Nodes[2].Pause()
	t.Cleanup(c.Nodes[1].Resume)
	t.Cleanup(c.Nodes[2].Resume)
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitLost, ee.ExitCode(), errb.String())
	assert.Contains(t, errb.String(), "did not extend it before its validity ran short")
	t.Log(errb.String())
}

// --permits N runs at most N commands of a resource at once; --shared runs
// go side by side and keep an exclusive run out; kinds do not mix.
func TestPermitsAndShared(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	// Six runs at once with --wait 0: at most two get a permit, not exactly
	// two. Try-once contenders can split the nodes among them so that fewer
	// get through (a semaphore promises at most N holders).
	results := runAll(t, c, 6, "run", "--permits", "2", "--wait", "0", "render", "--", "sh", "-c", "echo ran >> "+dir+"/ran; sleep 1")
	codes := map[int]int{}
	for _, r := range results {
		codes[r.code]++
		assert.Contains(t, []int{0, exitConflict}, r.code, "a run with --wait 0: %s", r.stderr)
	}
	assert.LessOrEqual(t, codes[0], 2, "runs that got a permit, of 6 at once with --wait 0: %v", codes)
	if b, err := os.ReadFile(dir + "/ran"); codes[0] > 0 || err == nil {
		require.NoError(t, err)
		assert.Equal(t, codes[0], strings.Count(string(b), "\n"), "commands run, by the runs that got a permit")
	}
	c.empty(t, "render")

	// Two at once, with waiting runs: neither command ends before the other
	// has started, so both hold a permit together; a third run beside them
	// is refused, whatever the timing (at most two).
	var wg sync.WaitGroup
	two := make([]result, 2)
	for i := range two {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me, other := fmt.Sprintf("%s/in%d", dir, i), fmt.Sprintf("%s/in%d", dir, 1-i)
			two[i] = c.run(t, "run", "--permits", "2", "--wait", "60", "render", "--", "sh", "-c",
				"echo in > "+me+"; while [ ! -e "+other+" ] || [ ! -e "+dir+"/stop ]; do sleep 0.02; done")
		}()
	}
	waitFile(t, dir+"/in0")
	waitFile(t, dir+"/in1")
	r := c.run(t, "run", "--permits", "2", "--wait", "0", "render", "--", "true")
	assert.Equal(t, exitConflict, r.code, "a third run beside two permits held: %s", r.stderr)
	require.NoError(t, os.WriteFile(dir+"/stop", nil, 0o600))
	wg.Wait()
	for i, r := range two {
		assert.Zero(t, r.code, "waiting run %d: %s", i, r.stderr)
	}
	c.empty(t, "render")

	// Six waiting runs: all run, never more than two at once.
	results = runAll(t, c, 6, "run", "--permits", "2", "--wait", "60", "render", "--", "sh", "-c", inOut(dir+"/log"))
	for i, r := range results {
		assert.Zero(t, r.code, "waiting run %d: %s", i, r.stderr)
	}
	peak, runs := peakInside(t, dir+"/log")
	assert.Equal(t, 6, runs, "commands run by 6 waiting runs")
	assert.LessOrEqual(t, peak, 2, "commands running at once on 2 permits")
	c.empty(t, "render")

	holder := c.command("run", "--permits", "2", "render", "--", "sleep", "2")
	require.NoError(t, holder.Start())
	require.Eventually(t, func() bool {
		n := 0
		for _, p := range c.Peek {
			if p.Get(context.Background(), "render").Val() == "redlock:permits:2" {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, 5*time.Millisecond, "a permit held on a quorum")
	r = c.run(t, "run", "--permits", "3", "render", "--", "true")
	assert.Equal(t, exitConflict, r.code, "another --permits: a conflict (issue 33): %s", r.stderr)
	assert.Contains(t, r.stderr, "semaphore of 2 permits, not 3")
	require.NoError(t, holder.Wait())

	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run(t, "run", "--shared", "--wait", "0", "config", "--", "sleep", "1")
		}()
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, p := range c.Peek {
			if p.ZCard(context.Background(), "redlock:readers:{config}:config").Val() == 3 {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, 5*time.Millisecond, "three shared runs at once on a quorum")
	r = c.run(t, "run", "--wait", "0", "config", "--", "true")
	assert.Equal(t, exitConflict, r.code, "an exclusive run beside shared ones")
	wg.Wait()
	for i := range 3 {
		assert.Zero(t, results[i].code, "shared run %d: %s", i, results[i].stderr)
	}

	for _, args := range [][]string{{"--permits", "0"}, {"--permits", "2", "--shared"}, {"--fencing", "--shared"}, {"--fencing", "--permits", "3"}} {
		r := c.run(t, append(append([]string{"run"}, args...), "x", "--", "true")...)
		assert.Equal(t, exitUsage, r.code, "%v", args)
	}
}

// runAll starts n runs of the command with args at once and returns their
// results when all have ended.
func runAll(t *testing.T, c *cluster, n int, args ...string) []result {
	t.Helper()
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run(t, args...)
		}()
	}
	wg.Wait()
	return results
}

// inOut is a shell command that appends "in" to log, sleeps 200ms and
// appends "out": run under a lock, the log shows how many ran at once.
func inOut(log string) string {
	return "echo in >> " + log + "; sleep 0.2; echo out >> " + log
}

// peakInside reads a log written by inOut commands and returns the most
// that were inside at once and how many ran. A command's "out" is written
// before it exits, so before its lock is released and another's "in".
func peakInside(t *testing.T, log string) (peak, runs int) {
	t.Helper()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	inside := 0
	for _, l := range strings.Fields(string(b)) {
		switch l {
		case "in":
			inside++
			runs++
			peak = max(peak, inside)
		case "out":
			inside--
		default:
			t.Fatalf("%s: unexpected line %q", log, l)
		}
	}
	assert.Zero(t, inside, "commands that never wrote out: %s", b)
	return peak, runs
}
