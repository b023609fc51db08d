package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/script"
)

// status shows what the library's Inspect finds of each resource: the
// command knows no key of its own, so that every kind the library has
// (lock, fenced lock, fair queue, semaphore, shared lock, election) is
// shown as the library reads it.

// electionPrefix is the resource an election's term is held on: the
// election NAME's is electionPrefix + NAME (as the library's Election
// names it).
const electionPrefix = script.ElectionPrefix

// The exit codes of status, grep's and leader's (0 found, 1 not).
const (
	exitFree = 1 // a resource is free: a quorum answered, and no holder can be on a quorum
)

const usageStatus = `Usage: redlock status [flags] RESOURCE...

Shows what the nodes hold of each resource, whatever took it (run, hold,
elect, a program using the library): its kind (lock, semaphore, shared lock,
election), its state, each holder with its identity (who took it: "host/pid
redlock hold"), its value, its ttl, on how many nodes, and its fencing token;
a semaphore's permits in use, a shared lock's readers and whether a writer
waits, the fair queue's waiters in order, an election's leader and term, the
fencing counter, and each node that did not answer, with its error.

An election NAME's resource is redlock:election:NAME; --election NAME names it.

The state of a resource is
  HELD     a quorum of the nodes holds it (one value; a semaphore or shared lock: a permit or reader)
  FREE     no holder can be on a quorum, whatever the nodes that did not answer hold
  UNKNOWN  the nodes that did not answer could make a quorum hold it: never read it as free

Exit codes (as leader's, grep's: 0 found, 1 not):
  0    every resource is HELD
  1    a resource is FREE, and none is UNKNOWN
  69   a resource is UNKNOWN: too few nodes answered to tell
  2    usage error

With --json it prints an array, one object per resource:
  {"resource", "kind" ("none", "lock", "semaphore", "shared", "election"),
   "state" ("held", "free", "unknown"), "nodes", "answered", "quorum",
   "holders": [{"value", "identity", "ttl_ms", "nodes", "on_quorum", "token", "permit"}],
   "in_use", "permits", "writer_waiting", "waiters": [{"id", "identity", "nodes"}],
   "fence_counter", "leader": {"id", "term"} or null, "errors": [{"node", "error"}]}
(durations in milliseconds; every field is always there).

Flags:
`

// stringsFlag is a flag that may be given several times.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// statusFlags are status's settings.
type statusFlags struct {
	common
	json      bool
	elections stringsFlag
}

// statusFlagSet returns status's flags, writing errors and usage to out.
func statusFlagSet(out io.Writer) (*flag.FlagSet, *statusFlags) {
	fs := newFlagSet("status", usageStatus, out)
	f := &statusFlags{}
	f.common.register(fs)
	fs.BoolVar(&f.json, "json", false, "print JSON: an array, one object per resource (see above)")
	fs.Var(&f.elections, "election", "show the election `NAME` (its resource redlock:election:NAME); may be repeated")
	return fs, f
}

func statusVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _ := statusFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, f := statusFlagSet(stderr)
	short(fs, stderr)
	// Flags may come after the resources too (redlock status x --json).
	resources, code := parsePositional(fs, args)
	if code >= 0 {
		return code
	}
	resources, code = withElections(fs, resources, f.elections)
	if code >= 0 {
		return code
	}
	if len(resources) == 0 {
		return usageError(fs, stderr, "no RESOURCE: name the resources to show (or --election NAME)")
	}
	rl, nodes, code := operatorClient(fs, &f.common, stderr)
	if code >= 0 {
		return code
	}
	defer closeNodes(nodes)
	// No rl.Close: it would wait a second or more for a silent node's
	// connection, after the answer was printed; status holds nothing, and
	// the process ends here.

	ins, err := inspectAll(rl, resources)
	if err != nil {
		return operatorRefused(fs, stderr, err, nodes)
	}
	if f.json {
		b, _ := json.MarshalIndent(jsonInspections(ins, nodes), "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		var b strings.Builder
		for i, in := range ins {
			if i > 0 {
				b.WriteString("\n")
			}
			writeInspection(&b, in, nodes)
		}
		fmt.Fprint(stdout, b.String())
	}
	code = 0
	for _, in := range ins {
		switch in.State {
		case redlock.Unknown:
			fmt.Fprintf(stderr, "redlock status: whether a quorum holds %q is unknown: %d of %d nodes answered, and the others could make a quorum (%d) hold it\n",
				in.Resource, in.Answered, in.Nodes, in.Quorum)
			return exitUnavailable
		case redlock.Free:
			code = exitFree
		}
	}
	return code
}

// withElections adds the resources of the elections named to resources,
// and refuses an empty name; code >= 0 when the invocation ends here.
func withElections(fs *flag.FlagSet, resources []string, elections []string) ([]string, int) {
	for _, e := range elections {
		if e == "" {
			return nil, usageError(fs, fs.Output(), "--election has an empty NAME")
		}
		resources = append(resources, electionPrefix+e)
	}
	for _, r := range resources {
		if r == "" {
			return nil, usageError(fs, fs.Output(), "an empty RESOURCE name")
		}
	}
	return resources, -1
}

// operatorClient checks the node flags of status and release, and returns
// a Redlock on the nodes; code >= 0 when the invocation ends here.
func operatorClient(fs *flag.FlagSet, c *common, stderr io.Writer) (*redlock.Redlock, []node, int) {
	if !given(fs, "node-timeout") {
		c.nodeTimeout = defaultNodeTimeout
	}
	if c.nodeTimeout <= 0 {
		return nil, nil, usageError(fs, stderr, "--node-timeout %v is not positive", c.nodeTimeout)
	}
	nodes, err := dial(c.nodes, c.nodeTimeout)
	if err != nil {
		return nil, nil, usageError(fs, stderr, "%v", err)
	}
	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(c.nodeTimeout))
	if err != nil {
		closeNodes(nodes)
		return nil, nil, usageError(fs, stderr, "%s", plain(err, nodes...))
	}
	return rl, nodes, -1
}

// operatorRefused says why Inspect or ForceRelease refused to run (a
// resource that is one of redlock's own keys), and returns the exit code.
func operatorRefused(fs *flag.FlagSet, stderr io.Writer, err error, nodes []node) int {
	if errors.Is(err, redlock.ErrInvalidArgument) {
		return usageError(fs, stderr, "%s", plain(err, nodes...))
	}
	fmt.Fprintf(stderr, "redlock %s: %s\n", fs.Name(), plain(err, nodes...))
	return exitUnavailable
}

// inspectAll inspects the resources, all at once: each waits for the
// nodes no longer than the node timeout, so that the whole takes one.
func inspectAll(rl *redlock.Redlock, resources []string) ([]redlock.Inspection, error) {
	ins := make([]redlock.Inspection, len(resources))
	errs := make([]error, len(resources))
	var wg sync.WaitGroup
	for i, r := range resources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ins[i], errs[i] = rl.Inspect(context.Background(), r)
		}()
	}
	wg.Wait()
	return ins, errors.Join(errs...)
}

// stateWord is a state as status prints it.
func stateWord(s redlock.State) string { return strings.ToUpper(s.String()) }

// kindWords is a kind as status prints it.
func kindWords(k redlock.Kind) string {
	switch k {
	case redlock.KindNone:
		return "nothing holds it"
	case redlock.KindShared:
		return "shared lock"
	}
	return string(k)
}

// writeInspection writes in as text: a line with the resource, its state
// and kind, then what holds it and the nodes that did not answer.
func writeInspection(w *strings.Builder, in redlock.Inspection, nodes []node) {
	fmt.Fprintf(w, "%s: %s (%s; %d of %d nodes answered, quorum %d)\n",
		in.Resource, stateWord(in.State), kindWords(in.Kind), in.Answered, in.Nodes, in.Quorum)
	switch in.Kind {
	case redlock.KindSemaphore:
		fmt.Fprintf(w, "  permits in use: %d of %d\n", in.InUse, in.Permits)
	case redlock.KindShared:
		waits := "no writer waits"
		if in.WriterWaiting {
			waits = "a writer waits for them to leave"
		}
		fmt.Fprintf(w, "  readers: %d; %s\n", in.InUse, waits)
	case redlock.KindElection:
		if in.Term > 0 {
			fmt.Fprintf(w, "  leader: %s (term %d)\n", in.Leader, in.Term)
		} else {
			fmt.Fprintf(w, "  leader: none on a quorum\n")
		}
	}
	holders := in.Holders
	if in.Kind == redlock.KindSemaphore {
		holders = slices.Clone(holders)
		slices.SortStableFunc(holders, func(a, b redlock.Holder) int { return a.Permit - b.Permit })
	}
	tokens := slices.ContainsFunc(holders, func(h redlock.Holder) bool { return h.Token > 0 })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, h := range holders {
		role := "holder"
		switch in.Kind {
		case redlock.KindSemaphore:
			role = fmt.Sprintf("permit %d", h.Permit)
		case redlock.KindShared:
			role = "reader"
		}
		quorum := ""
		if !h.OnQuorum {
			quorum = " (not a quorum)"
		}
		token := ""
		switch {
		case h.Token > 0 && in.Kind == redlock.KindElection:
			token = fmt.Sprintf("term %d\t", h.Token)
		case h.Token > 0:
			token = fmt.Sprintf("token %d (fenced)\t", h.Token)
		case tokens:
			token = "no token\t"
		}
		fmt.Fprintf(tw, "  %s\t%s\tttl %v\ton %d of %d nodes%s\t%svalue %s\n",
			role, identityWords(h.Identity), h.TTL.Round(time.Millisecond), h.Nodes, in.Nodes, quorum, token, h.Value)
	}
	_ = tw.Flush()
	if len(in.Waiters) > 0 {
		fmt.Fprintf(w, "  waiters (fair queue, head first):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for i, q := range in.Waiters {
			fmt.Fprintf(tw, "  %d.\t%s\ton %d of %d nodes\tid %s\n", i+1, identityWords(q.Identity), q.Nodes, in.Nodes, q.ID)
		}
		_ = tw.Flush()
	}
	if in.Counter > 0 {
		what := "fencing counter"
		if in.Kind == redlock.KindElection {
			what = "last term"
		}
		fmt.Fprintf(w, "  %s: %d\n", what, in.Counter)
	}
	for _, e := range nodeFailures(in, nodes) {
		fmt.Fprintf(w, "  node %s did not answer: %s\n", e.Node, e.Error)
	}
}

// identityWords is an identity as status prints it.
func identityWords(id string) string {
	if id == "" {
		return "(no identity)"
	}
	return id
}

// nodeFailure is one node that did not answer an inspection.
type nodeFailure struct {
	Node  string `json:"node"`  // its address
	Error string `json:"error"` // why, in command-line words
}

// nodeFailures returns in's node errors, each named by its node.
func nodeFailures(in redlock.Inspection, nodes []node) []nodeFailure {
	out := []nodeFailure{}
	for _, err := range in.Errors {
		f := nodeFailure{Node: "?", Error: plain(err, nodes...)}
		var ne *redlock.NodeError
		if errors.As(err, &ne) {
			f.Node, f.Error = ne.Addr, plain(ne.Err, nodes...)
			if ne.Node < len(nodes) {
				f.Node = nodes[ne.Node].name
			}
		}
		out = append(out, f)
	}
	return out
}

// The JSON of status: one inspectionJSON per resource.
type (
	inspectionJSON struct {
		Resource      string        `json:"resource"`
		Kind          string        `json:"kind"`
		State         string        `json:"state"`
		Nodes         int           `json:"nodes"`
		Answered      int           `json:"answered"`
		Quorum        int           `json:"quorum"`
		Holders       []holderJSON  `json:"holders"`
		InUse         int           `json:"in_use"`
		Permits       int           `json:"permits"`
		WriterWaiting bool          `json:"writer_waiting"`
		Waiters       []waiterJSON  `json:"waiters"`
		FenceCounter  uint64        `json:"fence_counter"`
		Leader        *leaderJSON   `json:"leader"`
		Errors        []nodeFailure `json:"errors"`
	}
	holderJSON struct {
		Value    string `json:"value"`
		Identity string `json:"identity"`
		TTLms    int64  `json:"ttl_ms"`
		Nodes    int    `json:"nodes"`
		OnQuorum bool   `json:"on_quorum"`
		Token    uint64 `json:"token"`
		Permit   int    `json:"permit"`
	}
	waiterJSON struct {
		ID       string `json:"id"`
		Identity string `json:"identity"`
		Nodes    int    `json:"nodes"`
	}
)

// jsonInspections returns the JSON shape of ins.
func jsonInspections(ins []redlock.Inspection, nodes []node) []inspectionJSON {
	out := make([]inspectionJSON, 0, len(ins))
	for _, in := range ins {
		j := inspectionJSON{
			Resource: in.Resource, Kind: string(in.Kind), State: in.State.String(),
			Nodes: in.Nodes, Answered: in.Answered, Quorum: in.Quorum,
			Holders: []holderJSON{}, InUse: in.InUse, Permits: in.Permits, WriterWaiting: in.WriterWaiting,
			Waiters: []waiterJSON{}, FenceCounter: in.Counter, Errors: nodeFailures(in, nodes),
		}
		if in.Kind == redlock.KindNone {
			j.Kind = "none"
		}
		for _, h := range in.Holders {
			j.Holders = append(j.Holders, holderJSON{Value: h.Value, Identity: h.Identity, TTLms: h.TTL.Milliseconds(),
				Nodes: h.Nodes, OnQuorum: h.OnQuorum, Token: h.Token, Permit: h.Permit})
		}
		for _, q := range in.Waiters {
			j.Waiters = append(j.Waiters, waiterJSON{ID: q.ID, Identity: q.Identity, Nodes: q.Nodes})
		}
		if in.Term > 0 {
			j.Leader = &leaderJSON{ID: &in.Leader, Term: &in.Term}
		}
		out = append(out, j)
	}
	return out
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
