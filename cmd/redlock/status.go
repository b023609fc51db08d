package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// nodeState is what one node says about one resource.
type nodeState struct {
	Node string `json:"node"`
	// State is "held", "free", or "unknown" (no answer, or the key holds
	// something that is not a lock: Error says which).
	State   string `json:"state"`
	Held    *bool  `json:"held"` // null when unknown
	Value   string `json:"value,omitempty"`
	TTLms   int64  `json:"ttl_ms,omitempty"` // what is left of the key's ttl
	Counter uint64 `json:"fence_counter"`    // the fencing counter, 0 when none
	Error   string `json:"error,omitempty"`  // why the node could not be asked
	ttl     time.Duration
	spoke   bool // the node answered (even if not about this key)
}

// resourceState is one resource on every node, and the verdict.
type resourceState struct {
	Resource string      `json:"resource"`
	Nodes    []nodeState `json:"nodes"`
	Quorum   int         `json:"quorum"`
	// Verdict is "held" (a quorum holds one value), "not_held" (no value
	// can be on a quorum, whatever the nodes that did not answer hold),
	// "free" (every node answered, none holds it), or "unknown" (the nodes
	// that did not answer could make a quorum hold it).
	Verdict  string `json:"verdict"`
	Held     bool   `json:"held"`            // a quorum surely holds it by one value
	Value    string `json:"value,omitempty"` // that value
	HeldOn   int    `json:"held_on"`         // how many nodes hold that value (or the most common one)
	Answered int    `json:"answered"`        // how many nodes answered (with a lock or nothing)
	FenceKey string `json:"fence_key"`
	Counter  uint64 `json:"fence_counter"` // the highest counter: the last token granted (or skipped)
}

// statusFlagSet returns status's flags, writing errors and usage to out.
func statusFlagSet(out io.Writer) (*flag.FlagSet, *common, *bool) {
	fs := newFlagSet("status", usageStatus, out)
	c := &common{}
	c.register(fs)
	asJSON := fs.Bool("json", false, "print JSON, one object per resource in an array")
	return fs, c, asJSON
}

func statusVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _, _ := statusFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, c, asJSON := statusFlagSet(stderr)
	short(fs, stderr)
	// Flags may come after the resources too (redlock status x --json).
	resources, code := parsePositional(fs, args)
	if code >= 0 {
		return code
	}
	if len(resources) == 0 {
		return usageError(fs, stderr, "no RESOURCE: name the resources to show")
	}
	for _, r := range resources {
		if r == "" {
			return usageError(fs, stderr, "an empty RESOURCE name")
		}
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

	states := make([]resourceState, len(resources))
	for i, res := range resources {
		states[i] = resourceState{Resource: res, Quorum: len(nodes)/2 + 1, FenceKey: redlock.FenceKey(res)}
	}
	// Ask every node at once, each for every resource in one pipeline.
	type answer struct {
		node int
		per  []nodeState
	}
	answers := make(chan answer, len(nodes))
	for i, n := range nodes {
		go func() { answers <- answer{i, ask(n, resources, c.nodeTimeout)} }()
	}
	per := make([][]nodeState, len(nodes))
	for range nodes {
		a := <-answers
		per[a.node] = a.per
	}
	answered := 0
	for i := range nodes {
		if per[i][0].spoke {
			answered++
		}
	}
	for ri := range states {
		s := &states[ri]
		count := map[string]int{}
		for ni := range nodes {
			ns := per[ni][ri]
			s.Nodes = append(s.Nodes, ns)
			s.Counter = max(s.Counter, ns.Counter)
			if ns.State == "unknown" {
				continue
			}
			s.Answered++
			if ns.State == "held" {
				count[ns.Value]++
			}
		}
		for v, n := range count {
			if n > s.HeldOn {
				s.Value, s.HeldOn = v, n
			}
		}
		s.Verdict = verdict(s.HeldOn, len(nodes)-s.Answered, len(nodes), s.Quorum)
		s.Held = s.Verdict == "held"
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(states)
	} else {
		printStatus(stdout, states)
	}
	code = 0
	if answered < len(nodes)/2+1 {
		fmt.Fprintf(stderr, "redlock status: only %d of %d nodes answered, fewer than a quorum (%d): what is shown may not be the whole truth\n",
			answered, len(nodes), len(nodes)/2+1)
		code = exitUnavailable
	}
	for _, s := range states {
		if s.Verdict == "unknown" && code == 0 {
			fmt.Fprintf(stderr, "redlock status: whether a quorum holds %s is unknown: %d of %d nodes could not say\n", s.Resource, len(nodes)-s.Answered, len(nodes))
			code = exitUnavailable
		}
	}
	return code
}

// verdict says whether a quorum holds a resource, from the most nodes that
// hold one value (most), and how many nodes could not say (unknown): they
// may hold anything, so a verdict that depends on them is "unknown".
func verdict(most, unknown, n, quorum int) string {
	switch {
	case most >= quorum:
		return "held"
	case most+unknown >= quorum:
		return "unknown"
	case most == 0 && unknown == 0:
		return "free"
	}
	return "not_held"
}

// ask reads each resource's value, ttl and fencing counter on one node.
func ask(n node, resources []string, timeout time.Duration) []nodeState {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type cmds struct {
		get     *redis.StringCmd
		pttl    *redis.DurationCmd
		counter *redis.StringCmd
	}
	// answered reports whether an error reply came from the commands (a
	// WRONGTYPE is one command's answer), not from setting up the
	// connection (a wrong password: then no command ran).
	answered := func(cs []cmds) bool {
		for _, c := range cs {
			if c.get.Err() != nil || c.pttl.Err() != nil || c.counter.Err() != nil {
				return true
			}
		}
		return false
	}
	cs := make([]cmds, len(resources))
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range resources {
			cs[i] = cmds{p.Get(ctx, r), p.PTTL(ctx, r), p.Get(ctx, redlock.FenceKey(r))}
		}
		return nil
	})
	if err != nil && (errors.Is(err, redis.Nil) || isReply(err) && answered(cs)) {
		err = nil // the commands' own answers (nil, WRONGTYPE), read below
	}
	out := make([]nodeState, len(resources))
	for i := range resources {
		s := nodeState{Node: n.name, State: "unknown"}
		if err != nil {
			s.Error = err.Error()
			out[i] = s
			continue
		}
		s.spoke = true
		v, err := cs[i].get.Result()
		switch {
		case err == nil:
			s.State, s.Value = "held", v
			if d, err := cs[i].pttl.Result(); err == nil && d > 0 {
				s.ttl, s.TTLms = d, d.Milliseconds()
			}
		case errors.Is(err, redis.Nil):
			s.State = "free"
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			s.Error = "the key holds another type, not a lock (WRONGTYPE)"
		default:
			s.Error = err.Error()
		}
		if s.State != "unknown" {
			held := s.State == "held"
			s.Held = &held
		}
		if v, err := cs[i].counter.Result(); err == nil {
			s.Counter, _ = strconv.ParseUint(v, 10, 64)
		}
		out[i] = s
	}
	return out
}

// printStatus writes the states as text, one block per resource.
func printStatus(w io.Writer, states []resourceState) {
	for i, s := range states {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", s.Resource)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, n := range s.Nodes {
			switch {
			case n.State == "unknown":
				fmt.Fprintf(tw, "  %s\tunknown\t\t\t(%s)\n", n.Node, n.Error)
			case n.State == "held":
				fmt.Fprintf(tw, "  %s\theld by %s\tttl %v\tfence counter %d\t\n", n.Node, n.Value, n.ttl.Round(time.Millisecond), n.Counter)
			default:
				fmt.Fprintf(tw, "  %s\tnot held\t\tfence counter %d\t\n", n.Node, n.Counter)
			}
		}
		_ = tw.Flush()
		unknown := len(s.Nodes) - s.Answered
		switch s.Verdict {
		case "held":
			fmt.Fprintf(w, "  HELD: %d of %d nodes hold value %s (quorum %d)", s.HeldOn, len(s.Nodes), s.Value, s.Quorum)
		case "unknown":
			fmt.Fprintf(w, "  UNKNOWN: %d of %d nodes could not say, and a quorum may hold it (%d hold one value; quorum %d)", unknown, len(s.Nodes), s.HeldOn, s.Quorum)
		case "not_held":
			if s.HeldOn == 0 {
				fmt.Fprintf(w, "  NOT HELD by a quorum: no node that answered holds it (%d of %d could not say; quorum %d)", unknown, len(s.Nodes), s.Quorum)
				break
			}
			fmt.Fprintf(w, "  NOT HELD by a quorum: at most %d of %d nodes hold one value (quorum %d; %d could not say)", s.HeldOn, len(s.Nodes), s.Quorum, unknown)
		default:
			fmt.Fprintf(w, "  FREE: no node holds it (%d of %d answered)", s.Answered, len(s.Nodes))
		}
		if s.Counter > 0 {
			fmt.Fprintf(w, "; fence counter %d (%s)", s.Counter, s.FenceKey)
		}
		fmt.Fprintln(w)
	}
}

// isReply reports whether err is an error reply of the node (it answered),
// not a network error or a timeout.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded)
}

// parsePositional parses fs's flags anywhere among args, and returns the
// other arguments (all of them after a "--"); code >= 0 when the
// invocation ends here (help, or a bad flag, which fs has printed).
func parsePositional(fs *flag.FlagSet, args []string) (positional []string, code int) {
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0
			}
			return nil, exitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			return positional, -1
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), -1
		}
		positional, rest = append(positional, rest[0]), rest[1:]
	}
}
