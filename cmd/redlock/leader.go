package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// exitNoLeader is leader's code when a quorum answered and nobody leads:
// grep's "not found" (0 found, 1 not, 2 usage).
const exitNoLeader = 1

// leaderJSON is one line of leader --json: the leader's id and term, both
// null when nobody leads.
type leaderJSON struct {
	ID   *string `json:"id"`
	Term *uint64 `json:"term"`
}

// leaderFlagSet returns leader's flags, writing errors and usage to out.
func leaderFlagSet(out io.Writer) (*flag.FlagSet, *common, *bool, *bool) {
	fs := newFlagSet("leader", usageLeader, out)
	c := &common{}
	c.register(fs)
	asJSON := fs.Bool("json", false, `print {"id":...,"term":...} (one object a line with --watch)`)
	watch := fs.Bool("watch", false, "print the leader, then a line for each new term, until SIGINT or SIGTERM")
	return fs, c, asJSON, watch
}

func leaderVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _, _, _ := leaderFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, c, asJSON, watch := leaderFlagSet(stderr)
	short(fs, stderr)
	// Flags may come after the name too (redlock leader x --json).
	names, code := parsePositional(fs, args)
	if code >= 0 {
		return code
	}
	switch {
	case len(names) == 0:
		return usageError(fs, stderr, "no NAME: name the election, such as scheduler")
	case len(names) > 1:
		return usageError(fs, stderr, "more than one NAME (%q): give one election", names)
	case names[0] == "":
		return usageError(fs, stderr, "the election's NAME is empty")
	}
	if !given(fs, "node-timeout") {
		c.nodeTimeout = defaultNodeTimeout
	}
	if c.nodeTimeout <= 0 {
		return usageError(fs, stderr, "--node-timeout %v is not positive", c.nodeTimeout)
	}
	nodes, err := dial(c.nodes, c.nodeTimeout)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	defer closeNodes(nodes)
	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(c.nodeTimeout))
	if err != nil {
		return usageError(fs, stderr, "%s", plain(err, nodes...))
	}
	defer func() { _ = rl.Close() }()
	p := leaderPrinter{w: stdout, json: *asJSON}
	el := rl.Election(names[0])
	if !*watch {
		l, err := el.Leader(context.Background())
		return p.print(l, err, stderr)
	}

	// --watch: the leader now, then each new term, until a signal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	l, err := el.Leader(ctx)
	if ctx.Err() != nil {
		return 0
	}
	p.print(l, err, stderr)
	last := l.Term
	leaders, err := el.Observe(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "redlock leader: %s\n", plain(err))
		return exitUnavailable
	}
	for l := range leaders {
		if l.Term > last { // Observe sends the current leader first: maybe the one printed
			p.print(l, nil, stderr)
			last = l.Term
		}
	}
	return 0
}

// leaderPrinter prints Leader's answers, as text or JSON.
type leaderPrinter struct {
	w    io.Writer
	json bool
}

// print prints l, or that nobody leads, or on stderr why the nodes could
// not tell; and returns leader's exit code for it.
func (p leaderPrinter) print(l redlock.Leader, err error, stderr io.Writer) int {
	switch {
	case err == nil && p.json:
		b, _ := json.Marshal(leaderJSON{ID: &l.ID, Term: &l.Term})
		fmt.Fprintf(p.w, "%s\n", b)
	case err == nil:
		fmt.Fprintf(p.w, "%s (term %d)\n", l.ID, l.Term)
	case errors.Is(err, redlock.ErrNoLeader) && p.json:
		fmt.Fprintln(p.w, `{"id":null,"term":null}`)
		return exitNoLeader
	case errors.Is(err, redlock.ErrNoLeader):
		fmt.Fprintln(p.w, "no leader")
		return exitNoLeader
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "redlock leader: %s\n", plain(err))
		return exitUsage
	default: // each node's error on a line of its own: one line
		fmt.Fprintf(stderr, "redlock leader: %s\n", strings.ReplaceAll(refusedNotSilent(err, plain(err)), "\n", "; "))
		return exitUnavailable
	}
	return 0
}

// silentNodes is the library's count of the nodes that did not tell, all
// said to have not answered.
var silentNodes = regexp.MustCompile(`(\d+) of (\d+) nodes did not answer`)

// refusedNotSilent rewrites text, Leader's err in plain words, so that
// nodes that answered with a refusal (a wrong password, an ACL) are said to
// have refused, not to have not answered.
func refusedNotSilent(err error, text string) string {
	refused, why := 0, map[string]bool{}
	var reasons []string
	for _, ne := range nodeErrors(err) {
		var re redis.Error
		if !errors.As(ne.Err, &re) {
			continue
		}
		refused++
		r := refusal(re.Error())
		if !why[r] {
			why[r] = true
			reasons = append(reasons, r)
		}
	}
	if refused == 0 {
		return text
	}
	return silentNodes.ReplaceAllStringFunc(text, func(m string) string {
		sub := silentNodes.FindStringSubmatch(m)
		failed, _ := strconv.Atoi(sub[1])
		said := fmt.Sprintf("%d of %s nodes refused (%s)", refused, sub[2], strings.Join(reasons, "; "))
		if silent := failed - refused; silent > 0 {
			said += fmt.Sprintf(" and %d did not answer", silent)
		}
		return said
	})
}

// refusal says in a few words why a node refused, from its error reply.
func refusal(reply string) string {
	switch {
	case strings.HasPrefix(reply, "WRONGPASS"):
		return "authentication failed: the user or password in the node's URL is wrong, or the user is disabled"
	case strings.HasPrefix(reply, "NOAUTH"):
		return "authentication failed: the node requires a password: give it in the node's URL, redis://:PASSWORD@host:6379"
	case strings.HasPrefix(reply, "NOPERM"):
		return "permission denied: the ACL user of the node's URL may not run redlock's scripts"
	}
	return "it answered " + strconv.Quote(reply)
}

// nodeErrors returns the node errors in err's tree.
func nodeErrors(err error) []*redlock.NodeError {
	var found []*redlock.NodeError
	var walk func(error)
	walk = func(err error) {
		if ne, ok := err.(*redlock.NodeError); ok {
			found = append(found, ne)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				walk(next)
			}
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return found
}
