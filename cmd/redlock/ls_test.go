package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of ls, on the built binary against real nodes.

// lsJSON runs ls --json ARGS, and returns its exit code and entries.
func (c *cluster) lsJSON(t *testing.T, args ...string) (result, []entryJSON) {
	t.Helper()
	r := c.run(t, append([]string{"ls", "--json"}, args...)...)
	var es []entryJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &es), "ls --json %v: %s (stderr: %s)", args, r.stdout, r.stderr)
	return r, es
}

// ls lists every kind, with identities, tokens and states; a node-redlock
// lock with no identity; a pattern; and exits 1 when nothing matches.
func TestLsEveryKind(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	plain, _, _ := c.hold(t, "plain")
	fenced, _, token := c.hold(t, "--fencing", "fenced")
	p1, _, _ := c.hold(t, "--permits", "3", "jobs")
	r1, _, _ := c.hold(t, "--shared", "cache")
	q, _, _ := c.hold(t, "--fair", "queue")
	w1 := started(t, c.command("hold", "--fair", "--wait", "forever", "queue"))
	leader := started(t, c.command("elect", "--id", "pod-a", "sched", "--", "sleep", "60"))
	for i := range c.Nodes {
		c.Set(t, i, "node-lock", "0123456789abcdef0123456789abcdef", time.Minute) // node-redlock's
	}
	var es []entryJSON
	require.Eventually(t, func() bool {
		_, es = c.lsJSON(t)
		for _, e := range es {
			if e.Nodes != 3 {
				return false
			}
		}
		return len(es) == 8
	}, 10*time.Second, 20*time.Millisecond, "every holder and the waiter on every node")

	r := c.run(t, "ls")
	t.Log("\n" + r.stdout + r.stderr)
	assert.Zero(t, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Regexp(t, `(?m)^RESOURCE +KIND +HOLDER +TTL +NODES +TOKEN +STATE$`, r.stdout)
	row := func(resource, kind, holder, token string) {
		t.Helper()
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(resource)+` +`+regexp.QuoteMeta(kind)+` +`+regexp.QuoteMeta(holder)+` +\S+ +3/3 +`+token+` +held$`, r.stdout)
	}
	row("plain", "lock", identity(t, plain.Process.Pid), "-")
	row("fenced", "fenced lock", identity(t, fenced.Process.Pid), fmt.Sprint(token))
	assert.Regexp(t, `(?m)^jobs +permit \d +`+regexp.QuoteMeta(identity(t, p1.Process.Pid)), r.stdout)
	row("cache", "reader", identity(t, r1.Process.Pid), "-")
	row("queue", "lock", identity(t, q.Process.Pid), "-")
	assert.Regexp(t, `(?m)^queue +waiter \(fair queue\) +`+regexp.QuoteMeta(identity(t, w1.Process.Pid))+` +- +3/3 +- +held$`, r.stdout)
	assert.Regexp(t, `(?m)^redlock:election:sched +election term +\S.* +3/3 +\d+ +held$`, r.stdout)
	row("node-lock", "lock", "(no identity)", "-")

	byResource := map[string]entryJSON{}
	for _, e := range es {
		byResource[e.Resource+" "+e.Role] = e
	}
	assert.Equal(t, token, byResource["fenced lock"].Token)
	assert.Equal(t, "semaphore", byResource["jobs permit"].Kind)
	assert.Positive(t, byResource["jobs permit"].Permit)
	assert.Equal(t, "shared", byResource["cache reader"].Kind)
	assert.Equal(t, identity(t, w1.Process.Pid), byResource["queue waiter"].Identity)
	assert.Equal(t, "election", byResource["redlock:election:sched term"].Kind)
	assert.Equal(t, "", byResource["node-lock lock"].Identity)
	assert.Equal(t, "held", byResource["node-lock lock"].State)
	assert.Equal(t, 2, byResource["plain lock"].Quorum)

	// A pattern; nothing matching is exit 1 with an empty table.
	r, es = c.lsJSON(t, "c*")
	assert.Zero(t, r.code)
	require.Len(t, es, 1)
	assert.Equal(t, "cache", es[0].Resource)
	r = c.run(t, "ls", "nothing:*")
	assert.Equal(t, exitFree, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	r, es = c.lsJSON(t, "nothing:*")
	assert.Equal(t, exitFree, r.code)
	assert.Empty(t, es)
	assert.Equal(t, "[]\n", r.stdout)

	for _, cmd := range []*exec.Cmd{plain, fenced, p1, r1, q, w1, leader} {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = exitOf(t, cmd)
	}
}

// A node that does not answer is named on stderr, within the bound: one
// of three still lists every lock held on a quorum (exit 0); two of three
// make the list incomplete and the lock unknown (69).
func TestLsSilentNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd, _, _ := c.hold(t, "held")
	c.held(t, "held")
	require.Eventually(t, func() bool { return c.Get(t, 2, "held") != "" }, 5*time.Second, 5*time.Millisecond)
	c.Nodes[2].Pause()
	defer c.Nodes[2].Resume()
	r := c.run(t, "ls", "--timeout", "2s")
	t.Log("\n" + r.stdout + r.stderr)
	assert.Zero(t, r.code, r.stderr)
	assert.Regexp(t, `(?m)^held +lock +.* +2/3 +- +held$`, r.stdout)
	assert.Regexp(t, `redlock ls: node \S+ not read to the end: .*no answer within --node-timeout 500ms`, r.stderr)
	assert.Less(t, r.took, 2*time.Second+time.Second, "within --timeout")

	c.Nodes[1].Pause()
	defer c.Nodes[1].Resume()
	r = c.run(t, "ls", "--timeout", "2s")
	t.Log("\n" + r.stdout + r.stderr)
	assert.Equal(t, exitUnavailable, r.code)
	assert.Regexp(t, `(?m)^held +lock +.* +1/3 +- +unknown$`, r.stdout)
	assert.Contains(t, r.stderr, "2 of 3 nodes were not read to the end (quorum 2): a lock held on a quorum may be missing")
	c.Nodes[1].Resume()
	c.Nodes[2].Resume()
	assert.Zero(t, terminate(t, cmd))

	// --max-keys cuts every node: exit 69, in the command's words.
	for i := range 3 {
		c.hold(t, "k"+string(rune('a'+i)))
	}
	r = c.run(t, "ls", "--max-keys", "1")
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stderr, "cut at --max-keys (1) after")
	assert.NotContains(t, r.stderr, "With")
}

// Bad invocations are usage errors (2) that say what to change.
func TestLsBadInvocations(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "job["}, `pattern "job[" has a [ with no ]`},
		{[]string{"ls", "redlock:permit:*"}, "matches only redlock's own keys"},
		{[]string{"ls", "a*", "b*"}, "more than one PATTERN"},
		{[]string{"ls", "--timeout", "0"}, "--timeout 0s is not positive"},
		{[]string{"ls", "--max-keys", "0"}, "--max-keys 0 is not positive"},
	} {
		r := c.run(t, tc.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
		assert.NotContains(t, r.stderr, "invalid argument: List", "%v", tc.args)
	}
	r := c.run(t, "help", "ls")
	assert.Zero(t, r.code)
	assert.Contains(t, r.stdout, "Usage: redlock ls [flags] [PATTERN]")
}
