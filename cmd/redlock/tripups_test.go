package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/script"
)

// The operator trip-ups of issue 33, each on the built command (against
// real nodes where a node is involved).

// leaks returns the forms of password that no output may hold: the
// password as given and percent-decoded, and the pieces that a URL parser
// cuts it into (at "/", "?", "#", "@", host:port's ":", go-redis's "&" and
// "=", the node list's ","), each as is and as %q or slog quote it; those
// of at least 3 bytes (a shorter one shows up by chance).
func leaks(password string) []string {
	var forms []string
	for _, p := range []string{password, unescapeTest(password)} {
		pieces := append([]string{p}, strings.FieldsFunc(p, func(r rune) bool {
			return strings.ContainsRune(":/?#@,&= \t", r)
		})...)
		for _, piece := range pieces {
			q := strconv.Quote(piece)
			for _, f := range []string{piece, q[1 : len(q)-1]} {
				// "xxxxx" is the mask itself.
				if len(f) >= 3 && !strings.Contains("xxxxx", f) {
					forms = append(forms, f)
				}
			}
		}
	}
	return forms
}

// unescapeTest decodes the valid percent-escapes of s (as url.PathUnescape,
// which gives up on the first invalid one, does not).
func unescapeTest(s string) string {
	re := regexp.MustCompile(`%[0-9A-Fa-f]{2}`)
	return re.ReplaceAllStringFunc(s, func(e string) string {
		v, _ := strconv.ParseUint(e[1:], 16, 8)
		return string([]byte{byte(v)})
	})
}

// printable keeps the printable ASCII characters of s: a password as a
// person types it, or writes it with percent-escapes.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
}

// redactionCases runs every verb that takes nodes with password in node
// URLs that do not parse, and in URLs that parse but whose node is not
// there, given by --nodes and by REDLOCK_NODES, and checks that no form of
// the password is in what redlock printed.
func redactionCases(t *testing.T, password string) {
	urls := []string{
		"redis://:" + password + "@127.0.0.1:99999",                           // not a port
		"redis://:" + password + "@127.0.0.1:1",                               // refused
		"redis://user:" + password + "@127.0.0.1:2/0,127.0.0.1:3",             // refused, with a user, and a second node
		"rediss://" + password + "@127.0.0.1:4?dial_timeout=100ms",            // a lone user is a password, TLS
		"redis://:" + password + "@127.0.0.1:5?password=" + password + "&x=1", // and in the query
	}
	verbs := [][]string{
		{"run", "--node-timeout", "100ms", "pw", "--", "true"},
		{"status", "--node-timeout", "100ms", "pw"},
		{"elect", "--wait", "0", "--node-timeout", "100ms", "pw", "--", "true"},
		{"leader", "--node-timeout", "100ms", "pw"},
	}
	forms := leaks(password)
	var wg sync.WaitGroup
	limit := make(chan struct{}, 4)
	for _, u := range urls {
		for _, v := range verbs {
			for _, byEnv := range []bool{false, true} {
				wg.Add(1)
				limit <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-limit }()
					args := append([]string{v[0]}, v[1:]...)
					if !byEnv {
						args = append([]string{v[0], "--nodes", u}, v[1:]...)
					}
					cmd := (*cluster)(nil).command(args...)
					if byEnv {
						cmd.Env = append(cmd.Env, "REDLOCK_NODES="+u)
					}
					out, _ := cmd.CombinedOutput()
					code := cmd.ProcessState.ExitCode()
					assert.NotZero(t, code, "%v with %q (env %v): %s", args, u, byEnv, out)
					assert.NotEmpty(t, out, "%v with %q: it says what is wrong", args, u)
					for _, f := range forms {
						if !assert.NotContains(t, string(out), f, "%v with nodes %q (REDLOCK_NODES: %v): the password's %q is printed", v, u, byEnv, f) {
							t.Logf("exit %d:\n%s", code, out)
						}
					}
				}()
			}
		}
	}
	wg.Wait()
}

// No form of a node URL's password is printed, whatever its characters:
// the seeds run under plain go test; go test -fuzz FuzzRedaction looks for
// more.
func FuzzRedaction(f *testing.F) {
	for _, pw := range []string{
		"dGhpc2lzc2VjcmV0==",         // base64: the pattern stopped at "="
		"abc=xxxxx",                  // the pattern masked "xxxxx@" and left "abc="
		"p%41ss(word",                // an escape, and "(" where the pattern stopped
		"p%zzss%4",                   // escapes that are not escapes: url quoted "%zz"
		"%E2%82%ACuro%2Fslash",       // escaped UTF-8 and "/"
		"sp ace'quote\"dq",           // quotes and a space
		"a/b?cdef#ghi@jkl",           // url.Parse's cuts: a port, a path, a fragment
		"usr:pa:ss;w,ord",            // colons, and a comma that splits the node list
		"back\\slash`tick<>&amp=val", // what %q and JSON escape
		strings.Repeat("Zq9", 30),
	} {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		pw = printable(pw)
		if len(pw) < 3 || len(pw) > 200 {
			t.Skip("too short to tell from chance, or too long")
		}
		redactionCases(t, pw)
	})
}

// The command does not get REDLOCK_NODES, which holds the nodes' passwords.
func TestCommandDoesNotGetTheNodes(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, args := range [][]string{
		{"run", "envjob", "--", "env"},
		{"elect", "--wait", "0", "envjob", "--", "env"},
	} {
		r := c.run(t, args...)
		require.Zero(t, r.code, "%v: %s", args, r.stderr)
		assert.NotContains(t, r.stdout, "REDLOCK_NODES", "%v: the command's environment", args)
		assert.NotContains(t, r.stdout, c.addrs, "%v: the command's environment", args)
		assert.Contains(t, r.stdout, "REDLOCK_", "%v: its own variables are there", args)
		assert.Contains(t, r.stdout, "PATH=", "%v: the rest of the environment is there", args)
	}
}

// lastLine returns the last line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// --report tells the command's exit code from redlock's own that has the
// same number; --conflict-exit-code 0 (cmd/redlock/README.md's systemd unit) makes a
// skipped run a success and leaves 75 to the command.
func TestReportSaysWhoseExitCode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	r := c.run(t, "run", "--report", "codes", "--", "sh", "-c", "exit 75")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Equal(t, "redlock run: exit 75 (command)", lastLine(r.stderr))
	r = c.run(t, "run", "--report", "codes", "--", "true")
	assert.Equal(t, "redlock run: exit 0 (command)", lastLine(r.stderr))

	holder := started(t, c.command("run", "codes", "--", "sleep", "3"))
	c.held(t, "codes")
	r = c.run(t, "run", "--report", "codes", "--", "true")
	assert.Equal(t, exitConflict, r.code, r.stderr)
	assert.Equal(t, "redlock run: exit 75 (conflict)", strings.TrimSpace(r.stderr), "the one line")
	r = c.run(t, "elect", "--report", "--wait", "0", "codes-e", "--", "sh", "-c", "exit 69")
	assert.Equal(t, "redlock elect: exit 69 (command)", lastLine(r.stderr))

	// cmd/redlock/README.md's systemd unit: its ExecStart, with the nodes
	// from the test's environment and the command replaced.
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var unit []string
	in := false
	for sc := bufio.NewScanner(strings.NewReader(string(b))); sc.Scan(); {
		switch l := sc.Text(); {
		case l == "```ini":
			in, unit = true, nil
		case l == "```" && in:
			in = false
		case in:
			unit = append(unit, l)
		}
	}
	require.NotEmpty(t, unit, "cmd/redlock/README.md's systemd unit")
	var execStart []string
	for _, l := range unit {
		assert.NotContains(t, l, "SuccessExitStatus=75", "a command that exits 75 would pass for a skipped run")
		if rest, ok := strings.CutPrefix(l, "ExecStart=/usr/local/bin/redlock "); ok {
			execStart = strings.Fields(rest)
		}
	}
	require.NotEmpty(t, execStart, "the unit's ExecStart: %q", unit)
	i := slices.Index(execStart, "--")
	require.Positive(t, i, "%v", execStart)
	execStart[i-1] = "codes" // the resource
	unitRun := func(command ...string) result {
		return c.run(t, append(append([]string{}, execStart[:i+1]...), command...)...)
	}
	r = unitRun("true")
	assert.Zero(t, r.code, "the unit, skipped while another replica runs it: %s", r.stderr)
	assert.Equal(t, "redlock run: exit 0 (conflict)", lastLine(r.stderr))
	require.NoError(t, holder.Wait())
	r = unitRun("sh", "-c", "exit 75")
	assert.Equal(t, 75, r.code, "the unit, its command failing with 75: a failure")
	assert.Equal(t, "redlock run: exit 75 (command)", lastLine(r.stderr))
}

// Messages say the command's flags and the nodes as given, not the
// library's Go names: --node-timeout, --permits, the node URLs (redacted)
// instead of clients[i]; and nodes that refused a password refused, they
// did not "not answer".
func TestMessagesInCommandLineTerms(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := strings.Split(c.addrs, ",")

	// A node twice in the list: named as given, its password masked.
	r := c.run(t, "run", "--nodes", "redis://:Sekr1tPw@"+addrs[0]+","+addrs[0]+","+addrs[1], "dup", "--", "true")
	assert.Equal(t, exitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, `node "redis://xxxxx@`+addrs[0]+`" and node "`+addrs[0]+`" talk to the same server`)
	assert.NotContains(t, r.stderr, "clients[")
	assert.NotContains(t, r.stderr, "Sekr1tPw")
	for _, verb := range [][]string{{"elect", "dup", "--", "true"}, {"leader", "dup"}} {
		r := c.run(t, append([]string{verb[0], "--nodes", addrs[0] + "," + addrs[0] + "," + addrs[1]}, verb[1:]...)...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", verb, r.stderr)
		assert.Contains(t, r.stderr, `node "`+addrs[0]+`" and node "`+addrs[0]+`"`, "%v", verb)
		assert.NotContains(t, r.stderr, "clients[", "%v", verb)
	}

	// --node-timeout, where the library says WithNodeTimeout: nodes that
	// answer too late (paused for writes: a connection's set-up goes
	// through, a script waits).
	pause := func(ms string) {
		for _, p := range c.Peek {
			args := []any{"CLIENT", "PAUSE", ms, "WRITE"}
			if ms == "0" {
				args = []any{"CLIENT", "UNPAUSE"} // a shorter pause does not end a longer one
			}
			require.NoError(t, p.Do(context.Background(), args...).Err())
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"run", "--node-timeout", "400ms", "slow", "--", "true"}, "no answer within 400ms (--node-timeout)"},
		{[]string{"elect", "--wait", "0", "--node-timeout", "400ms", "slow", "--", "true"}, "no answer within 400ms (--node-timeout)"},
		{[]string{"leader", "--node-timeout", "400ms", "slow"}, "did not answer within --node-timeout 400ms"},
	} {
		pause("3000")
		r := c.run(t, tc.args...)
		pause("0")
		assert.Equal(t, exitUnavailable, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.says, "%v", tc.args)
		assert.NotContains(t, r.stderr, "WithNodeTimeout", "%v", tc.args)
		t.Logf("%v: %s", tc.args, r.stderr)
	}
	r = c.run(t, "leader", "--node-timeout", "1ns", "x")
	assert.Equal(t, exitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "(--node-timeout)")

	// --permits, where the library says WithPermits.
	holder := started(t, c.command("run", "--permits", "2", "sem", "--", "sleep", "2"))
	require.Eventually(t, func() bool {
		n := 0
		for _, p := range c.Peek {
			if p.Get(context.Background(), "sem").Val() == "redlock:permits:2" {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, 5*time.Millisecond, "a permit held on a quorum")
	r = c.run(t, "run", "--shared", "sem", "--", "true")
	assert.Contains(t, r.stderr, "--permits 2")
	assert.NotContains(t, r.stderr, "With")
	require.NoError(t, holder.Wait())

	// A wrong password: the nodes refused it, they answered.
	for i := range c.Nodes {
		require.NoError(t, c.Peek[i].ConfigSet(context.Background(), "requirepass", "Right-Pw-1").Err())
	}
	var wrong []string
	for _, a := range addrs {
		wrong = append(wrong, "redis://:Wr0ng-Pw-2@"+a)
	}
	r = c.run(t, "leader", "--nodes", strings.Join(wrong, ","), "auth")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "3 of 3 nodes refused (authentication failed")
	assert.NotContains(t, r.stderr, "did not answer")
	r = c.run(t, "run", "--nodes", strings.Join(wrong, ","), "auth", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "authentication failed: the user or password in the node's URL is wrong")
	assert.NotContains(t, r.stderr, "client's")
	for _, out := range []string{r.stderr, r.stdout} {
		assert.NotContains(t, out, "Wr0ng-Pw-2")
	}
}

// A run of another kind than the holders' (another --permits, --shared
// against --permits) is a conflict: exit 75 and one line that names the
// resource, what holds it and what was asked; with --wait, it waits.
func TestAnotherKindIsAConflict(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	holder := started(t, c.command("run", "--permits", "2", "kinds", "--", "sleep", "3"))
	require.Eventually(t, func() bool {
		n := 0
		for _, p := range c.Peek {
			if p.Get(context.Background(), "kinds").Val() == "redlock:permits:2" {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, 5*time.Millisecond, "a permit held on a quorum")
	for _, tc := range []struct {
		args  []string
		asked string
	}{
		{[]string{"--permits", "3"}, "this run asked for --permits 3"},
		{[]string{"--shared"}, "this run asked for --shared"},
	} {
		r := c.run(t, append(append([]string{"run"}, tc.args...), "kinds", "--", "true")...)
		assert.Equal(t, exitConflict, r.code, "%v: %s", tc.args, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		assert.Len(t, lines, 1, "%v: one line: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, `"kinds"`, "%v: the resource", tc.args)
		assert.Contains(t, r.stderr, "held by runs with --permits 2", "%v: what holds it", tc.args)
		assert.Contains(t, r.stderr, tc.asked, "%v", tc.args)
		assert.NotContains(t, r.stderr, "WARN")
	}
	r := c.run(t, "run", "--permits", "3", "--wait", "1", "--conflict-exit-code", "9", "kinds", "--", "true")
	assert.Equal(t, 9, r.code, r.stderr)
	assert.GreaterOrEqual(t, r.took, time.Second, "it waited")
	require.NoError(t, holder.Wait())
	r = c.run(t, "run", "--permits", "3", "kinds", "--", "true")
	assert.Zero(t, r.code, "the holders gone, another kind may take it: %s", r.stderr)
}

// version and help version.
func TestVersionVerb(t *testing.T) {
	t.Parallel()
	r := (*cluster)(nil).run(t, "help", "version")
	assert.Zero(t, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Usage: redlock version")
	for _, args := range [][]string{{"version", "--bogus"}, {"version", "x"}, {"--version", "-v"}} {
		r := (*cluster)(nil).run(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "takes no arguments", "%v", args)
		assert.Empty(t, r.stdout, "%v", args)
	}
	r = (*cluster)(nil).run(t, "version", "-h")
	assert.Zero(t, r.code)
	assert.Contains(t, r.stdout, "Usage: redlock version")
}

// exitTable returns the exit codes that verb's help documents: the first
// column of its "Exit codes:" table.
func exitTable(t *testing.T, verb string) []string {
	t.Helper()
	r := (*cluster)(nil).run(t, "help", verb)
	require.Zero(t, r.code, r.stderr)
	_, table, ok := strings.Cut(r.stdout, "Exit codes")
	require.True(t, ok, "redlock help %s has an exit table", verb)
	table, _, _ = strings.Cut(table, "\n\n")
	row := regexp.MustCompile(`^  (\S.*?)\s{2,}`)
	var codes []string
	for _, l := range strings.Split(table, "\n")[1:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue // a row's second line
		}
		codes = append(codes, strings.Split(m[1], ", ")...)
	}
	require.NotEmpty(t, codes, "redlock help %s: %s", verb, table)
	return codes
}

// Each exit code in the help of run, elect and leader is produced by some
// case, and each case's code is in the help: the tables are complete.
func TestEveryDocumentedExitCode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	require.NoError(t, os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o600))
	unreachable := "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
	sigterm := 128 + int(syscall.SIGTERM)

	// holding starts a holder of run's resource (or elect's election) for
	// the case, and stops it after.
	holding := func(t *testing.T, args ...string) func() {
		h := started(t, c.command(args...))
		if args[0] == "run" {
			c.held(t, "codes")
		} else {
			// The term's key, then its leader record, which the term's
			// first extension writes a round trip later (a leader read
			// between the two finds no leader: CI's run on 6177b18).
			c.held(t, electionKey("codes"))
			c.held(t, script.Key(script.LeaderPrefix, electionKey("codes")))
		}
		return func() {
			_ = h.Process.Signal(syscall.SIGTERM)
			_ = h.Wait()
		}
	}
	// signalled runs args, sends SIGTERM once it waits, and returns its code.
	signalled := func(t *testing.T, args ...string) int {
		defer holding(t, args[0], "codes", "--", "sleep", "30")()
		c.noWaiters(t)
		cmd := started(t, c.command(args...))
		c.waiting(t) // for the holder's release: its signals are redlock's by then
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		return exitOf(t, cmd)
	}
	// lost runs args (a ttl of 2s), takes the lock or term over on every
	// node as another holder would after an expiry, and returns its code.
	lost := func(t *testing.T, key string, args ...string) int {
		cmd := started(t, c.command(args...))
		c.held(t, key)
		// The command runs once the lock (the term) is granted: a key
		// seen held may be an attempt's first round, whose write-back
		// then fails on the new holder's keys and the wait goes on (it
		// once ran the command a minute later and exited 0).
		require.Eventually(t, func() bool { return hasChild(cmd.Process.Pid, "sleep") }, 10*time.Second, 5*time.Millisecond,
			"%v started its command", args)
		for i := range c.Nodes {
			c.Set(t, i, key, "the-new-holder", time.Minute)
		}
		code := exitOf(t, cmd)
		for i := range c.Nodes {
			_, _ = c.Peek[i].Del(context.Background(), key).Result()
		}
		return code
	}
	type exitCase struct {
		name string
		want int
		got  func(t *testing.T) int
	}
	code := func(args ...string) func(t *testing.T) int {
		return func(t *testing.T) int { return c.run(t, args...).code }
	}
	cases := map[string]map[string][]exitCase{
		"run": {
			"the command's own": {{"exit 7", 7, code("run", "codes", "--", "sh", "-c", "exit 7")}},
			"75": {
				{"held, --wait 0", 75, func(t *testing.T) int {
					defer holding(t, "run", "codes", "--", "sleep", "30")()
					return c.run(t, "run", "codes", "--", "true").code
				}},
				{"held, --wait 0.001 (ends while held: a conflict, not a timeout)", 75, func(t *testing.T) int {
					defer holding(t, "run", "codes", "--", "sleep", "30")()
					return c.run(t, "run", "--wait", "0.001", "codes", "--", "true").code
				}},
			},
			"69":    {{"unreachable nodes", 69, code("run", "--nodes", unreachable, "codes", "--", "true")}},
			"79":    {{"lock taken over", 79, func(t *testing.T) int { return lost(t, "codes", "run", "--ttl", "2s", "codes", "--", "sleep", "30") }}},
			"128+n": {{"SIGTERM while waiting", sigterm, func(t *testing.T) int { return signalled(t, "run", "--wait", "forever", "codes", "--", "true") }}},
			"2":     {{"usage", 2, code("run", "codes")}},
			"126":   {{"not executable", 126, code("run", "codes", "--", noexec)}},
			"127":   {{"not found", 127, code("run", "codes", "--", "/no/such/command")}},
		},
		"elect": {
			"the command's own": {{"exit 7", 7, code("elect", "codes", "--", "sh", "-c", "exit 7")}},
			"0": {{"--forever, SIGTERM", 0, func(t *testing.T) int {
				cmd := started(t, c.command("elect", "--forever", "codes", "--", "sleep", "30"))
				c.held(t, electionKey("codes"))
				require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
				return exitOf(t, cmd)
			}}},
			"75": {{"led by another, --wait 0.001", 75, func(t *testing.T) int {
				defer holding(t, "elect", "codes", "--", "sleep", "30")()
				return c.run(t, "elect", "--wait", "0.001", "codes", "--", "true").code
			}}},
			"69": {{"unreachable nodes", 69, code("elect", "--wait", "0", "--nodes", unreachable, "codes", "--", "true")}},
			"79": {{"term taken over", 79, func(t *testing.T) int {
				return lost(t, electionKey("codes"), "elect", "--ttl", "2s", "codes", "--", "sleep", "30")
			}}},
			"128+n": {{"SIGTERM while campaigning", sigterm, func(t *testing.T) int { return signalled(t, "elect", "codes", "--", "true") }}},
			"2":     {{"usage", 2, code("elect", "codes")}},
			"126":   {{"not executable", 126, code("elect", "codes", "--", noexec)}},
			"127":   {{"not found", 127, code("elect", "codes", "--", "/no/such/command")}},
		},
		"leader": {
			"0": {{"someone leads", 0, func(t *testing.T) int {
				defer holding(t, "elect", "codes", "--", "sleep", "30")()
				return c.run(t, "leader", "codes").code
			}}},
			"1":  {{"nobody leads", 1, code("leader", "nobody")}},
			"69": {{"unreachable nodes", 69, code("leader", "--nodes", unreachable, "codes")}},
			"2":  {{"usage", 2, code("leader")}},
		},
	}
	for _, verb := range []string{"run", "elect", "leader"} {
		documented := exitTable(t, verb)
		for _, doc := range documented {
			_, ok := cases[verb][doc]
			assert.True(t, ok, "redlock help %s documents exit %q, which no case produces", verb, doc)
		}
		for doc, cs := range cases[verb] {
			assert.Contains(t, documented, doc, "redlock %s exits %s, which its help does not document", verb, doc)
			for _, tc := range cs {
				t.Run(fmt.Sprintf("%s %s %s", verb, doc, tc.name), func(t *testing.T) {
					assert.Equal(t, tc.want, tc.got(t))
				})
			}
		}
	}
}

// redact masks the credentials of the node lists given, whatever their
// characters, as given, decoded, quoted and cut; and leaves a lock's value
// ("random@host/pid") and redlock's own hints alone.
func TestRedactKnownCredentials(t *testing.T) {
	t.Parallel()
	learnSecrets("redis://:Env%2FPw=x@h:1", []string{"run", "--nodes=redis://u:Fl@g'Pw@h:2,k:Bare-Pw-1@h:3", "--nodes", "rediss://Lone-Pw-2@h:4", "x", "--", "curl", "https://Cmd-Pw-3@h/"})
	for _, tc := range []struct{ in, out string }{
		{`node "redis://:Env%2FPw=x@h:1": bad`, `node "redis://xxxxx@h:1": bad`},
		{"decoded: Env/Pw=x, quoted: \"Fl@g'Pw\"", "decoded: xxxxx, quoted: \"xxxxx\""},
		{`slog: err="parse \"redis://u:Fl@g'Pw@h:2\""`, `slog: err="parse \"redis://xxxxx@h:2\""`},
		{"a host cut from it: g'Pw@h:2, lookup Fl", "a host cut from it: xxxxx@h:2, lookup Fl"},
		{"k:Bare-Pw-1@h:3 and Lone-Pw-2 and Cmd-Pw-3", "xxxxx@h:3 and xxxxx and xxxxx"},
		{"value 0123456789abcdef0123456789abcdef@vm/42", "value 0123456789abcdef0123456789abcdef@vm/42"},
		{"give it in the node's URL: redis://:PASSWORD@host:6379 (redis://USER:PASSWORD@host:6379)", "give it in the node's URL: redis://:PASSWORD@host:6379 (redis://USER:PASSWORD@host:6379)"},
	} {
		assert.Equal(t, tc.out, redact(tc.in), "redact(%q)", tc.in)
	}
}

// hasChild reports whether process pid has a child whose name is comm
// (Linux's /proc; false elsewhere).
func hasChild(pid int, comm string) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) > 1 && s[open+1:close] == comm && fields[1] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}
