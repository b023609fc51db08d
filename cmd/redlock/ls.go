package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-redlock/redlock"
)

// ls shows every lock held on the nodes: the library's List, one line per
// holder or waiter.

const usageLs = `Usage: redlock ls [flags] [PATTERN]

Lists every lock held on the nodes whose resource matches PATTERN (a glob,
as Redis's SCAN MATCH takes it: * ? [abc] \x; none, or "*": all), whatever
took it: locks (fenced or not, node-redlock's too), semaphore permits, shared
readers, fair-queue waiters and election terms (an election NAME's resource
is redlock:election:NAME). One line per holder or waiter: its resource, its
kind, who holds it (its identity: "host/pid redlock hold"; "(no identity)"
for a value that records none, node-redlock's), its ttl, on how many nodes,
its fencing token (an election: its term), and its state:

  held     on a quorum of the nodes (a waiter: queued on a quorum)
  partial  on fewer, and the nodes that did not answer cannot make a quorum
  unknown  on fewer, but the nodes that did not answer could make a quorum

It reads each node with SCAN, a page at a time, never KEYS, for at most
--timeout and --max-keys keys per node. A node it could not read to the end
(it did not answer, --timeout or --max-keys cut it, a Redis Cluster, which ls
does not scan) is named on stderr, one line each: a lock held only there may
be missing. While fewer than a quorum of nodes are left unread, every lock
held on a quorum is listed. "redlock status RESOURCE" shows one resource in
full; "redlock release" takes one back.

Exit codes (as status's: 0 found, 1 not):
  0    a lock is listed, and the list misses no lock held on a quorum
  1    nothing matching PATTERN is held, and the list misses no lock held on a quorum
  69   the list may miss a lock held on a quorum (a quorum of nodes not read to the end), or a
       lock listed is unknown: what was found is printed
  2    usage error

With --json it prints an array, one object per line of the table:
  {"resource", "kind" ("lock", "semaphore", "shared", "election"),
   "role" ("lock", "permit", "reader", "term", "waiter"), "identity", "value",
   "ttl_ms", "nodes", "quorum", "token", "permit", "state" ("held", "partial", "unknown")}
(a waiter's value is its id; every field is always there). The nodes not
read to the end are on stderr, as without --json.

Flags:
`

// lsFlags are ls's settings.
type lsFlags struct {
	common
	json    bool
	timeout time.Duration
	maxKeys int
}

// lsFlagSet returns ls's flags, writing errors and usage to out.
func lsFlagSet(out io.Writer) (*flag.FlagSet, *lsFlags) {
	fs := newFlagSet("ls", usageLs, out)
	f := &lsFlags{timeout: 5 * time.Second}
	f.common.register(fs)
	fs.BoolVar(&f.json, "json", false, "print JSON: an array, one object per holder or waiter (see above)")
	fs.Var((*seconds)(&f.timeout), "timeout", "read the nodes for at most this `duration`")
	fs.IntVar(&f.maxKeys, "max-keys", 100_000, "scan at most `N` keys matching PATTERN on each node")
	return fs, f
}

func lsVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _ := lsFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, f := lsFlagSet(stderr)
	short(fs, stderr)
	patterns, code := parsePositional(fs, args)
	switch {
	case code >= 0:
		return code
	case len(patterns) > 1:
		return usageError(fs, stderr, "more than one PATTERN (%q): give one glob, such as 'job:*'", patterns)
	case f.timeout <= 0:
		return usageError(fs, stderr, "--timeout %v is not positive", f.timeout)
	case f.maxKeys <= 0:
		return usageError(fs, stderr, "--max-keys %d is not positive", f.maxKeys)
	}
	pattern := ""
	if len(patterns) == 1 {
		pattern = patterns[0]
	}
	rl, nodes, code := operatorClient(fs, &f.common, stderr)
	if code >= 0 {
		return code
	}
	defer closeNodes(nodes)
	// No rl.Close, as status: ls holds nothing, and the process ends here.

	l, err := rl.List(context.Background(), pattern, redlock.WithListTimeout(f.timeout), redlock.WithListMaxKeys(f.maxKeys))
	if err != nil {
		return operatorRefused(fs, stderr, lsWords(err), nodes)
	}
	entries := l.Entries()
	if f.json {
		b, _ := json.MarshalIndent(jsonEntries(entries, l.Quorum), "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		writeEntries(stdout, entries, len(l.Nodes))
	}
	unknown := false
	for _, e := range entries {
		unknown = unknown || e.State == redlock.EntryUnknown
	}
	for _, n := range l.Nodes {
		if n.Err != nil {
			why := plain(lsWords(unwrapNode(n.Err)), nodes...)
			if !strings.Contains(why, "held only") {
				why += ": locks held only there are not listed"
			}
			fmt.Fprintf(stderr, "redlock ls: node %s not read to the end: %s\n", nodeName(n, nodes), why)
		}
	}
	if l.Unread > 0 {
		fmt.Fprintf(stderr, "redlock ls: %d resources found but not read within --timeout %v\n", l.Unread, f.timeout)
	}
	switch {
	case !l.Complete():
		fmt.Fprintf(stderr, "redlock ls: %d of %d nodes were not read to the end (quorum %d): a lock held on a quorum may be missing\n",
			unread(l), len(l.Nodes), l.Quorum)
		return exitUnavailable
	case unknown:
		fmt.Fprintf(stderr, "redlock ls: whether a quorum holds a lock marked unknown cannot be told: too few nodes answered\n")
		return exitUnavailable
	case len(entries) == 0:
		return exitFree
	}
	return 0
}

// unread is how many of l's nodes were not read to the end.
func unread(l *redlock.Listing) int {
	n := 0
	for _, s := range l.Nodes {
		if s.Err != nil {
			n++
		}
	}
	return n
}

// nodeName is n's node as the command names it.
func nodeName(n redlock.NodeScan, nodes []node) string {
	if n.Node < len(nodes) {
		return nodes[n.Node].name
	}
	return n.Addr
}

// unwrapNode returns a *NodeError's cause (the line names the node).
func unwrapNode(err error) error {
	var ne *redlock.NodeError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

// lsWords turns List's option names into ls's flags.
func lsWords(err error) error {
	s := err.Error()
	for _, r := range [][2]string{{"WithListTimeout(", "--timeout ("}, {"WithListMaxKeys(", "--max-keys ("}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	if s == err.Error() {
		return err
	}
	return wordsError{s, err}
}

// wordsError is an error in the command's words, still matching its cause.
type wordsError struct {
	s   string
	err error
}

func (e wordsError) Error() string { return e.s }
func (e wordsError) Unwrap() error { return e.err }

// writeEntries writes the table.
func writeEntries(w io.Writer, entries []redlock.Entry, nodes int) {
	if len(entries) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tKIND\tHOLDER\tTTL\tNODES\tTOKEN\tSTATE")
	for _, e := range entries {
		ttl, token := "-", "-"
		if e.Role != redlock.RoleWaiter {
			ttl = e.TTL.Round(time.Millisecond).String()
		}
		if e.Token > 0 {
			token = strconv.FormatUint(e.Token, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", e.Resource, roleWords(e), identityWords(e.Identity), ttl, e.Nodes, nodes, token, e.State)
	}
	_ = tw.Flush()
}

// roleWords is an entry's kind as ls prints it.
func roleWords(e redlock.Entry) string {
	switch e.Role {
	case redlock.RolePermit:
		return fmt.Sprintf("permit %d", e.Permit)
	case redlock.RoleWaiter:
		return "waiter (fair queue)"
	case redlock.RoleTerm:
		return "election term"
	case redlock.RoleLock:
		if e.Token > 0 {
			return "fenced lock"
		}
	}
	return string(e.Role)
}

// entryJSON is one object of ls --json.
type entryJSON struct {
	Resource string `json:"resource"`
	Kind     string `json:"kind"`
	Role     string `json:"role"`
	Identity string `json:"identity"`
	Value    string `json:"value"`
	TTLms    int64  `json:"ttl_ms"`
	Nodes    int    `json:"nodes"`
	Quorum   int    `json:"quorum"`
	Token    uint64 `json:"token"`
	Permit   int    `json:"permit"`
	State    string `json:"state"`
}

// jsonEntries returns the JSON shape of entries.
func jsonEntries(entries []redlock.Entry, quorum int) []entryJSON {
	out := make([]entryJSON, 0, len(entries))
	for _, e := range entries {
		out = append(out, entryJSON{Resource: e.Resource, Kind: string(e.Kind), Role: string(e.Role), Identity: e.Identity, Value: e.Value,
			TTLms: e.TTL.Milliseconds(), Nodes: e.Nodes, Quorum: quorum, Token: e.Token, Permit: e.Permit, State: string(e.State)})
	}
	return out
}
