package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/script"
)

// The tests of elect and leader, on the built binary against real nodes.

// electionKey is the lock key of the election called name.
func electionKey(name string) string { return "redlock:election:" + name }

// waitFile waits until the file at path has a line, and returns its first
// line.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var line string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("\n")) {
			return false
		}
		line = string(b[:bytes.IndexByte(b, '\n')])
		return true
	}, 20*time.Second, 5*time.Millisecond, "%s written", path)
	return line
}

// waiting waits until a campaign waits for a release on a quorum of the
// nodes: subscribed to the release announcements beside the holder (which
// listens for a force release of its term).
func (c *cluster) waiting(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		on := 0
		for _, p := range c.Peek {
			// The holder's process listens too (for a force release of
			// its lock): a waiter is the second subscriber.
			m, err := p.PubSubNumSub(context.Background(), redlock.ReleasedChannel).Result()
			if err == nil && m[redlock.ReleasedChannel] >= 2 {
				on++
			}
		}
		return on >= len(c.Nodes)/2+1
	}, 20*time.Second, 5*time.Millisecond, "a campaign waits on a quorum of nodes")
}

// noWaiters waits until no campaign waits on any node (those of processes
// that have exited are gone): one subscriber at most, the holder's.
func (c *cluster) noWaiters(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, p := range c.Peek {
			if m, err := p.PubSubNumSub(context.Background(), redlock.ReleasedChannel).Result(); err != nil || m[redlock.ReleasedChannel] > 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "no campaign waits")
}

// exitOf waits for cmd, and returns its exit code.
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("waiting for %v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode()
}

// started starts cmd, and kills it if the test ends first.
func started(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// interval is one start of an elect's command, as it recorded it.
type interval struct {
	term, start, end int64 // end 0: it did not get to the end
	id, election     string
}

// Two candidates, each re-campaigning with --forever, run their commands
// one at a time: no two recorded intervals overlap, and the terms grow in
// the order the commands started.
func TestElectOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	// Each file appears whole (written, then renamed), so that a command
	// stopped by the final SIGTERM leaves none half written.
	script := `f=` + dir + `/$REDLOCK_TERM; echo "$REDLOCK_ID $REDLOCK_ELECTION $(date +%s%N)" > $f.tmp; mv $f.tmp $f.start; ` +
		`sleep 0.2; date +%s%N > $f.tmp; mv $f.tmp $f.end`
	var cands []*exec.Cmd
	for _, id := range []string{"a", "b"} {
		cands = append(cands, started(t, c.command("elect", "--forever", "--id", id, "one", "--", "sh", "-c", script)))
	}
	const want = 8
	require.Eventually(t, func() bool {
		ends, _ := filepath.Glob(filepath.Join(dir, "*.end"))
		return len(ends) >= want
	}, 60*time.Second, 10*time.Millisecond, "%d commands ran to their end", want)
	for _, cmd := range cands {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, cmd := range cands {
		assert.Zero(t, exitOf(t, cmd), "--forever stopped by SIGTERM exits 0")
	}

	starts, err := filepath.Glob(filepath.Join(dir, "*.start"))
	require.NoError(t, err)
	var runs []interval
	ids := map[string]int{}
	for _, s := range starts {
		var iv interval
		iv.term, err = strconv.ParseInt(strings.TrimSuffix(filepath.Base(s), ".start"), 10, 64)
		require.NoError(t, err)
		f := strings.Fields(waitFile(t, s))
		require.Len(t, f, 3, s)
		iv.id, iv.election = f[0], f[1]
		iv.start, err = strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		if b, err := os.ReadFile(strings.TrimSuffix(s, ".start") + ".end"); err == nil {
			iv.end, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			require.NoError(t, err)
		}
		ids[iv.id]++
		runs = append(runs, iv)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	for i, r := range runs {
		assert.Equal(t, "one", r.election, "REDLOCK_ELECTION")
		if r.end == 0 {
			// Stopped by the SIGTERM: only the last one can be.
			assert.Equal(t, len(runs)-1, i, "run %d of %d did not end, yet another started after it: %+v", i, len(runs), runs)
			continue
		}
		if i > 0 {
			prev := runs[i-1]
			assert.Greater(t, r.term, prev.term, "REDLOCK_TERM grows with each start: %+v", runs)
			assert.Greater(t, r.start, prev.end, "run %d (%s, term %d) started before run %d (%s, term %d) ended", i, r.id, r.term, i-1, prev.id, prev.term)
		}
	}
	assert.Len(t, ids, 2, "both candidates led: %v", ids)
	t.Logf("%d terms, by candidate: %v", len(runs), ids)
}

// SIGTERM to the leader's redlock reaches its command; when the command
// has exited, redlock resigns and exits with its code, and the waiting
// candidate leads at once: well before the term's ttl.
func TestElectHandsOverOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	const ttl = 10 * time.Second
	a := started(t, c.command("elect", "--ttl", ttl.String(), "--id", "a", "hand", "--", "sh", "-c",
		`trap "echo got TERM > `+dir+`/a.term; exit 0" TERM; echo $REDLOCK_TERM > `+dir+`/a; while :; do sleep 0.05; done`))
	aTerm, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "a")))
	b := started(t, c.command("elect", "--ttl", ttl.String(), "--id", "b", "hand", "--", "sh", "-c",
		`date +%s%N > `+dir+`/b.start; echo $REDLOCK_TERM > `+dir+`/b`))
	c.waiting(t)
	signalled := time.Now()
	require.NoError(t, a.Process.Signal(syscall.SIGTERM))
	assert.Zero(t, exitOf(t, a), "the command's own exit code")
	assert.Equal(t, "got TERM", waitFile(t, filepath.Join(dir, "a.term")))
	assert.Zero(t, exitOf(t, b))
	bTerm, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "b")))
	assert.Greater(t, bTerm, aTerm)
	took := time.Duration(readNanos(t, filepath.Join(dir, "b.start")) - signalled.UnixNano())
	assert.Less(t, took, ttl/2, "the successor led after a resignation, not an expiry")
	t.Logf("the successor's command started %v after SIGTERM to the leader's redlock (ttl %v)", took.Round(time.Millisecond), ttl)
	c.empty(t, electionKey("hand"))
}

// A term lost while the command runs (its key deleted on every node behind
// redlock's back): the command gets SIGTERM, SIGKILL when it ignores it,
// and redlock exits 79.
func TestElectLostLeadershipStopsTheCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	cmd := c.command("elect", "--ttl", "2s", "--kill-grace", "500ms", "--id", "a", "lost", "--", "sh", "-c",
		`trap "" TERM; echo $$ > `+dir+`/group; sleep 60`)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	started(t, cmd)
	group, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "group")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(-group, syscall.SIGKILL) }) // when the test fails
	c.held(t, electionKey("lost"))
	deleted := time.Now()
	// Taken by another on every node (a key merely deleted is written back
	// by the next extension).
	for _, p := range c.Peek {
		require.NoError(t, p.Set(context.Background(), electionKey("lost"), "another", 10*time.Second).Err())
	}
	assert.Equal(t, exitLost, exitOf(t, cmd), "stderr: %s", errb.String())
	assert.Contains(t, errb.String(), "leadership of lost (term 1) was lost while the command ran")
	assert.False(t, groupAlive(group), "the command's group was killed before redlock exited")
	t.Logf("exited %v after the key was taken (ttl 2s: extension at 1s, grace 500ms): %s",
		time.Since(deleted).Round(time.Millisecond), strings.TrimSpace(errb.String()))
}

// A term whose nodes stop answering: the command gets SIGTERM early enough
// for the SIGKILL after the grace to land before the term's validity ends,
// and redlock exits 79 and says why.
func TestElectLostToSilentNodes(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	const ttl, grace = 2 * time.Second, 300 * time.Millisecond
	cmd := c.command("elect", "--ttl", ttl.String(), "--kill-grace", grace.String(), "silent", "--", "sh", "-c",
		`date +%s%N > `+dir+`/start; trap "date +%s%N > `+dir+`/term; exit 0" TERM; while :; do sleep 0.05; done`)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	started(t, cmd)
	waitFile(t, filepath.Join(dir, "start"))
	c.held(t, electionKey("silent"))
	c.Nodes[1].Pause()
	c.Nodes[2].Pause()
	t.Cleanup(c.Nodes[1].Resume)
	t.Cleanup(c.Nodes[2].Resume)
	assert.Equal(t, exitLost, exitOf(t, cmd), errb.String())
	assert.Contains(t, errb.String(), "did not extend it before its validity ran short")
	// The term began before the command started: its validity ends
	// before start + ttl.
	start, term := readNanos(t, filepath.Join(dir, "start")), readNanos(t, filepath.Join(dir, "term"))
	assert.Less(t, term+int64(grace), start+int64(ttl), "SIGTERM at +%v: the SIGKILL would come after the validity", time.Duration(term-start))
	t.Logf("SIGTERM %v after the command started (ttl %v, grace %v): %s", time.Duration(term-start).Round(time.Millisecond), ttl, grace, strings.TrimSpace(errb.String()))
}

// --forever campaigns again when the command exits, and when the term is
// lost; the terms grow; SIGTERM stops it with 0.
func TestElectForeverCampaignsAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	t.Run("the command exits", func(t *testing.T) {
		dir := t.TempDir()
		cmd := started(t, c.command("elect", "--forever", "--id", "a", "again", "--", "sh", "-c", `echo $REDLOCK_TERM >> `+dir+`/terms`))
		var terms []int
		require.Eventually(t, func() bool { terms = readTerms(t, filepath.Join(dir, "terms")); return len(terms) >= 3 },
			20*time.Second, 10*time.Millisecond, "the command ran three times")
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		assert.Zero(t, exitOf(t, cmd))
		terms = readTerms(t, filepath.Join(dir, "terms"))
		for i := 1; i < len(terms); i++ {
			assert.Greater(t, terms[i], terms[i-1], "terms grow: %v", terms)
		}
		c.empty(t, electionKey("again"))
	})
	t.Run("the term is lost", func(t *testing.T) {
		dir := t.TempDir()
		cmd := c.command("elect", "--forever", "--ttl", "2s", "--kill-grace", "300ms", "--id", "a", "again-lost", "--", "sh", "-c",
			`echo $REDLOCK_TERM >> `+dir+`/terms; exec sleep 60`)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		started(t, cmd)
		waitFile(t, filepath.Join(dir, "terms"))
		c.held(t, electionKey("again-lost"))
		for _, p := range c.Peek { // taken by another for 2s
			require.NoError(t, p.Set(context.Background(), electionKey("again-lost"), "another", 2*time.Second).Err())
		}
		var terms []int
		require.Eventually(t, func() bool { terms = readTerms(t, filepath.Join(dir, "terms")); return len(terms) >= 2 },
			20*time.Second, 10*time.Millisecond, "the command ran again after the loss")
		assert.Greater(t, terms[1], terms[0])
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		assert.Zero(t, exitOf(t, cmd), "stderr: %s", errb.String())
		assert.Contains(t, errb.String(), "was lost while the command ran")
		c.empty(t, electionKey("again-lost"))
	})
}

func readTerms(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var terms []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err)
		terms = append(terms, n)
	}
	return terms
}

// elect's exit codes besides a term's end: the command's own, 127, the
// conflict code when the wait ends without leading, 128+n for a signal
// while campaigning (0 with --forever, which SIGHUP does not stop).
func TestElectExitCodes(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	r := c.run(t, "elect", "--id", "me", "codes", "--", "sh", "-c", `echo "$REDLOCK_ELECTION|$REDLOCK_ID|$REDLOCK_TERM"; exit 7`)
	assert.Equal(t, 7, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, "codes|me|1", strings.TrimSpace(r.stdout))
	r = c.run(t, "elect", "codes", "--", "sh", "-c", `echo "$REDLOCK_ID"`)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, strings.TrimSpace(r.stdout), "the id is the hostname by default")
	r = c.run(t, "elect", "codes", "--", "/no/such/command")
	assert.Equal(t, exitNotFound, r.code, r.stderr)
	c.empty(t, electionKey("codes"))

	holder := started(t, c.command("elect", "--id", "holder", "codes", "--", "sh", "-c", `echo x > `+dir+`/held; exec sleep 60`))
	waitFile(t, filepath.Join(dir, "held"))
	r = c.run(t, "elect", "--wait", "0", "codes", "--", "true")
	assert.Equal(t, exitConflict, r.code, r.stderr)
	r = c.run(t, "elect", "--wait", "300ms", "--conflict-exit-code", "9", "codes", "--", "true")
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Less(t, r.took, 2*time.Second)

	for _, tc := range []struct {
		args []string
		sigs []syscall.Signal
		want int
	}{
		{[]string{"elect", "codes", "--", "true"}, []syscall.Signal{syscall.SIGTERM}, 128 + int(syscall.SIGTERM)},
		{[]string{"elect", "--forever", "codes", "--", "true"}, []syscall.Signal{syscall.SIGHUP, syscall.SIGINT}, 0},
	} {
		c.noWaiters(t) // the earlier campaigns' subscriptions are gone
		cmd := started(t, c.command(tc.args...))
		c.waiting(t)
		for _, s := range tc.sigs {
			require.NoError(t, cmd.Process.Signal(s))
		}
		assert.Equal(t, tc.want, exitOf(t, cmd), "%v, signals %v while campaigning", tc.args, tc.sigs)
	}
	require.NoError(t, holder.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+int(syscall.SIGTERM), exitOf(t, holder))
}

// SIGHUP does not stop --forever: the candidate that got one goes on
// campaigning, and leads once the leader resigns.
func TestElectForeverOutlivesSIGHUP(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	holder := started(t, c.command("elect", "--id", "holder", "hup", "--", "sh", "-c", `echo x > `+dir+`/held; exec sleep 60`))
	waitFile(t, filepath.Join(dir, "held"))
	cand := started(t, c.command("elect", "--forever", "--id", "cand", "hup", "--", "sh", "-c", `echo $REDLOCK_ID > `+dir+`/cand; exec sleep 60`))
	c.waiting(t)
	require.NoError(t, cand.Process.Signal(syscall.SIGHUP))
	require.NoError(t, holder.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+int(syscall.SIGTERM), exitOf(t, holder))
	assert.Equal(t, "cand", waitFile(t, filepath.Join(dir, "cand")), "the candidate led after its SIGHUP")
	require.NoError(t, cand.Process.Signal(syscall.SIGTERM))
	assert.Zero(t, exitOf(t, cand))
}

// redlock elect killed with SIGKILL takes its command's group along, as
// run does.
func TestKilledElectTakesTheCommandAlong(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	cmd := started(t, c.command("elect", "--ttl", "2s", "kill", "--", "sh", "-c", `echo $$ > `+dir+`/group; sleep 30 & while :; do sleep 0.2; done`))
	group, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "group")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(-group, syscall.SIGKILL) }) // when the test fails
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()
	for groupAlive(group) && time.Since(killed) < 2*time.Second {
		time.Sleep(time.Millisecond)
	}
	assert.False(t, groupAlive(group), "the command's group outlived redlock elect by 2s")
	t.Logf("the command's group was gone %v after redlock elect's SIGKILL", time.Since(killed).Round(100*time.Microsecond))
}

// line is one line of a process's output, and when it was read.
type line struct {
	text string
	at   time.Time
}

// lines reads a process's stdout line by line.
func lines(t *testing.T, cmd *exec.Cmd) <-chan line {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	ch := make(chan line, 16)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(out)
		for s.Scan() {
			ch <- line{s.Text(), time.Now()}
		}
	}()
	return ch
}

// next returns the next line from ch, failing the test after 10s.
func next(t *testing.T, ch <-chan line) line {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "the output ended")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line within 10s")
	}
	return line{}
}

// leader prints who leads and the term, or says nobody does (exit 1), as
// text or JSON; --watch prints a line for each new term; when the nodes
// cannot tell, it exits 69.
func TestLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	r := c.run(t, "leader", "who")
	assert.Equal(t, exitNoLeader, r.code, r.stderr)
	assert.Equal(t, "no leader\n", r.stdout)
	r = c.run(t, "leader", "who", "--json")
	assert.Equal(t, exitNoLeader, r.code, r.stderr)
	assert.JSONEq(t, `{"id":null,"term":null}`, r.stdout)

	a := started(t, c.command("elect", "--id", "pod-a", "who", "--", "sh", "-c", `echo $REDLOCK_TERM > `+dir+`/a; exec sleep 60`))
	aTerm := waitFile(t, filepath.Join(dir, "a"))
	c.held(t, script.Key(script.LeaderPrefix, electionKey("who"))) // the record the term's first extension writes
	r = c.run(t, "leader", "who")
	assert.Zero(t, r.code, r.stderr)
	assert.Equal(t, "pod-a (term "+aTerm+")\n", r.stdout)
	r = c.run(t, "leader", "--json", "who")
	assert.Zero(t, r.code, r.stderr)
	var got leaderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.NotNil(t, got.ID)
	require.NotNil(t, got.Term)
	assert.Equal(t, "pod-a", *got.ID)
	assert.Equal(t, aTerm, strconv.FormatUint(*got.Term, 10))

	watch := c.command("leader", "--watch", "who")
	text := lines(t, watch)
	watchJSON := c.command("leader", "--watch", "--json", "who")
	objects := lines(t, watchJSON)
	started(t, watch)
	started(t, watchJSON)
	assert.Equal(t, "pod-a (term "+aTerm+")", next(t, text).text)
	assert.JSONEq(t, `{"id":"pod-a","term":`+aTerm+`}`, next(t, objects).text)

	b := started(t, c.command("elect", "--id", "pod-b", "who", "--", "sh", "-c", `echo $REDLOCK_TERM > `+dir+`/b; exec sleep 60`))
	c.waiting(t)
	signalled := time.Now()
	require.NoError(t, a.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+int(syscall.SIGTERM), exitOf(t, a))
	bTerm := waitFile(t, filepath.Join(dir, "b"))
	l := next(t, text)
	assert.Equal(t, "pod-b (term "+bTerm+")", l.text, "a line for the new term")
	t.Logf("--watch printed the new term %v after SIGTERM to the old leader's redlock", l.at.Sub(signalled).Round(time.Millisecond))
	assert.JSONEq(t, `{"id":"pod-b","term":`+bTerm+`}`, next(t, objects).text)
	for _, w := range []*exec.Cmd{watch, watchJSON} {
		require.NoError(t, w.Process.Signal(syscall.SIGINT))
		assert.Zero(t, exitOf(t, w), "--watch stopped by SIGINT")
	}
	require.NoError(t, b.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+int(syscall.SIGTERM), exitOf(t, b))
	c.empty(t, electionKey("who"))

	// Two of three nodes down: nobody can tell.
	c.Nodes[1].Kill()
	c.Nodes[2].Kill()
	r = c.run(t, "leader", "who")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "cannot be ruled out")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
}
