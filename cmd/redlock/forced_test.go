package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// A force release reaches the redlock that holds the lock at once: the
// holder hears the release announcement of its own value, so run, hold
// and elect end (their command, or themselves) within 2 s of the release,
// not at their next extension (ttl/2 = 15 s away with --ttl 30s).

// forcedTTL is the holders' --ttl: long, so that no extension (at half of
// it) comes within the bound.
const forcedTTL = "30s"

// forcedBound is how soon after the release the holder must have exited.
const forcedBound = 2 * time.Second

// goNames are the library's Go words that a command-line user never set or
// wrote, which a message of the command must not show.
var goNames = regexp.MustCompile(`\b(fn|Using|Lead|Campaign|ForceRelease|Extend|Acquire|ErrExtensionFailed|ErrLockExpired|ctx|context)\b|redlock\.`)

// releasers are the two ways an operator takes a resource back: another
// invocation of the command, and a Go program's Redlock.ForceRelease.
var releasers = []struct {
	name    string
	release func(t *testing.T, c *cluster, resource string, args ...string)
}{
	{"redlock release", func(t *testing.T, c *cluster, _ string, args ...string) {
		r := c.run(t, append([]string{"release"}, args...)...)
		require.Zero(t, r.code, "release %v: %s%s", args, r.stdout, r.stderr)
		require.Contains(t, r.stdout, "removed 1 holder(s)", "release %v", args)
	}},
	{"Redlock.ForceRelease", func(t *testing.T, c *cluster, resource string, _ ...string) {
		rl, err := redlock.New(c.Clients)
		require.NoError(t, err)
		defer func() { _ = rl.Close() }()
		require.NoError(t, rl.ForceRelease(context.Background(), resource), "ForceRelease(%q)", resource)
	}},
}

// exited returns a channel that receives cmd's exit code and when its
// Wait returned; cmd is started when not yet. When the test ends first, cmd
// is killed and waited for.
func exited(t *testing.T, cmd *exec.Cmd) <-chan exit {
	t.Helper()
	if cmd.Process == nil {
		require.NoError(t, cmd.Start())
	}
	ch, waited := make(chan exit, 1), make(chan struct{})
	go func() {
		defer close(waited)
		_ = cmd.Wait()
		ch <- exit{cmd.ProcessState.ExitCode(), time.Now()}
	}()
	t.Cleanup(func() {
		select {
		case <-waited:
		default:
			_ = cmd.Process.Kill()
			<-waited
		}
	})
	return ch
}

// free checks that status finds resource free: the force release's
// tombstone, left for as long as the old holder could have extended, is
// not a holder, and the old holder did not take the lock back.
func (c *cluster) free(t *testing.T, resource string) {
	t.Helper()
	code, ins := c.statusJSON(t, resource)
	assert.Equal(t, exitFree, code, "status %s after the force release: %+v", resource, ins)
}

// exit is how and when a process exited.
type exit struct {
	code int
	at   time.Time
}

// forceReleased force-releases resource with rel (args are redlock
// release's), and returns how the holder exited: it fails the test when
// the holder did not exit within forcedBound of the release's start. It
// logs the time from the release's start and from its return.
func forceReleased(t *testing.T, c *cluster, done <-chan exit, rel func(*testing.T, *cluster, string, ...string), resource string, args ...string) exit {
	t.Helper()
	began := time.Now()
	rel(t, c, resource, args...)
	returned := time.Now()
	var e exit
	select {
	case e = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("still holding 10s after the force release of %s (ttl %s: its next extension would have told it)", resource, forcedTTL)
	}
	took := e.at.Sub(began)
	t.Logf("exited %v after the release began, %v after it returned (ttl %s)", took.Round(time.Millisecond),
		e.at.Sub(returned).Round(time.Millisecond), forcedTTL)
	assert.Less(t, took, forcedBound, "exit after the force release of %s", resource)
	return e
}

// saysLost checks the line the holder printed: the documented words, the
// cause (force-released), no Go names.
func saysLost(t *testing.T, stderr, want string) {
	t.Helper()
	t.Log(strings.TrimSpace(stderr))
	assert.Contains(t, stderr, want)
	assert.Contains(t, stderr, "force-released", "the cause is said")
	assert.NotRegexp(t, goNames, stderr, "a message for a command-line user")
}

// untilTERM is a command that writes its value (REDLOCK_VALUE or
// REDLOCK_TERM, named by env) to dir/v, and exits 0 on SIGTERM after
// writing dir/term.
func untilTERM(dir, env string) []string {
	return []string{"sh", "-c", `trap "echo got TERM > ` + dir + `/term; exit 0" TERM; echo $` + env + ` > ` + dir +
		`/v; while :; do sleep 0.05; done`}
}

// redlock run --ttl 30s: a force release stops the command (SIGTERM) and
// run exits 79 within 2 s, saying that the lock was lost and why.
func TestForceReleaseStopsRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, rel := range releasers {
		t.Run(rel.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := c.command(append([]string{"run", "--ttl", forcedTTL, "forced-run", "--"}, untilTERM(dir, "REDLOCK_VALUE")...)...)
			errb := &lockedBuffer{}
			cmd.Stderr = errb
			done := exited(t, cmd)
			value := waitFile(t, filepath.Join(dir, "v"))
			assert.Equal(t, value, c.held(t, "forced-run"))
			e := forceReleased(t, c, done, rel.release, "forced-run", "forced-run")
			assert.Equal(t, exitLost, e.code, "stderr: %s", errb.String())
			saysLost(t, errb.String(), "the lock on forced-run was lost while the command ran")
			assert.Equal(t, "got TERM", waitFile(t, filepath.Join(dir, "term")), "the command got SIGTERM")
			c.free(t, "forced-run")
		})
	}
}

// redlock hold --ttl 30s: a force release ends the hold within 2 s, exit
// 79, saying that the lock was lost and why.
func TestForceReleaseEndsHold(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, rel := range releasers {
		t.Run(rel.name, func(t *testing.T) {
			cmd, value, _ := c.hold(t, "--ttl", forcedTTL, "forced-hold")
			done := exited(t, cmd)
			e := forceReleased(t, c, done, rel.release, "forced-hold", "forced-hold", "--value", value)
			stderr := cmd.Stderr.(*lockedBuffer).String()
			assert.Equal(t, exitLost, e.code, "stderr: %s", stderr)
			saysLost(t, stderr, "the lock on forced-hold was lost while held")
			c.free(t, "forced-hold")
		})
	}
}

// redlock elect --ttl 30s: a force release of the term stops the command
// (SIGTERM) and elect exits 79 within 2 s, saying that the leadership was
// lost and why.
func TestForceReleaseStopsElect(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, rel := range releasers {
		t.Run(rel.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := c.command(append([]string{"elect", "--ttl", forcedTTL, "--id", "a", "forced", "--"}, untilTERM(dir, "REDLOCK_TERM")...)...)
			errb := &lockedBuffer{}
			cmd.Stderr = errb
			done := exited(t, cmd)
			term := waitFile(t, filepath.Join(dir, "v"))
			c.held(t, electionKey("forced"))
			e := forceReleased(t, c, done, rel.release, electionKey("forced"), "--election", "forced")
			assert.Equal(t, exitLost, e.code, "stderr: %s", errb.String())
			saysLost(t, errb.String(), "leadership of forced (term "+term+") was lost while the command ran")
			assert.Equal(t, "got TERM", waitFile(t, filepath.Join(dir, "term")), "the command got SIGTERM")
			c.free(t, electionKey("forced"))
		})
	}
}
