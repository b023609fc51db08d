package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-redlock/redlock"
)

// release takes a resource back from its holders: the library's
// ForceRelease, between two Inspects that show what it removed.

const usageRelease = `Usage: redlock release [flags] RESOURCE [--value VALUE]...

Takes RESOURCE back from its holders, whatever took it and whatever its kind:
from every holder (every permit of a semaphore, every reader of a shared
lock), or with --value only from the holders of those values, as "redlock
status" shows them and "redlock hold" prints them (--value may be repeated).
It is for an operator: a job killed with a long --ttl, a lock whose holder is
gone. An election NAME's resource is redlock:election:NAME (or --election NAME).

It shows the resource before, what it removed, and the resource after.
Waiters are woken as by a release, and the fencing counter is kept (the next
token is above the old holder's). The old holder hears the release at once
(one whose ACL user may not subscribe finds out at its next extension, which
fails): a "redlock run" or "redlock elect" holding it stops its command and
exits 79, a "redlock hold" exits 79.

Exit codes:
  0    every node answered: no removed holder holds it anywhere
  1    every node answered, and none held any of the --value values: nothing was released
  69   fewer than all the nodes answered: one line says whether a quorum did (then no removed holder
       holds it on a quorum, and it is free unless a new holder took it) or not (try again)
  2    usage error

Flags:
`

// exitNotHeld is release's code when every node answered and none held
// any of the values given: nothing to release (grep's "not found", as
// status's free).
const exitNotHeld = 1

// releaseFlagSet returns release's flags, writing errors and usage to out.
func releaseFlagSet(out io.Writer) (*flag.FlagSet, *common, *stringsFlag, *stringsFlag) {
	fs := newFlagSet("release", usageRelease, out)
	c := &common{}
	c.register(fs)
	values := &stringsFlag{}
	elections := &stringsFlag{}
	fs.Var(values, "value", "release only the holder of `VALUE` (as status shows it); may be repeated (default: every holder)")
	fs.Var(elections, "election", "release the term of the election `NAME` (its resource redlock:election:NAME)")
	return fs, c, values, elections
}

func releaseVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _, _, _ := releaseFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, c, values, elections := releaseFlagSet(stderr)
	short(fs, stderr)
	resources, code := parsePositional(fs, args)
	if code >= 0 {
		return code
	}
	resources, code = withElections(fs, resources, *elections)
	switch {
	case code >= 0:
		return code
	case len(resources) == 0:
		return usageError(fs, stderr, "no RESOURCE: name the resource to release (or --election NAME)")
	case len(resources) > 1:
		return usageError(fs, stderr, "more than one RESOURCE (%q): release one resource at a time", resources)
	}
	for _, v := range *values {
		if v == "" {
			return usageError(fs, stderr, "--value is empty: give a holder's value as status shows it, or no --value to release every holder")
		}
	}
	rl, nodes, code := operatorClient(fs, c, stderr)
	if code >= 0 {
		return code
	}
	defer closeNodes(nodes)
	// No rl.Close: it would wait a second or more for a silent node's
	// connection, after the answer was printed (ForceRelease has given up
	// on that node and said so); the process ends here.
	res := resources[0]
	ctx := context.Background()

	before, err := rl.Inspect(ctx, res)
	if err != nil {
		return operatorRefused(fs, stderr, err, nodes)
	}
	var removed []redlock.Holder
	for _, h := range before.Holders {
		if len(*values) == 0 || slices.Contains(*values, h.Value) {
			removed = append(removed, h)
		}
	}
	var missing []string
	for _, v := range *values {
		if !slices.ContainsFunc(before.Holders, func(h redlock.Holder) bool { return h.Value == v }) {
			missing = append(missing, v)
		}
	}
	relErr := rl.ForceRelease(ctx, res, *values...)
	if errors.Is(relErr, redlock.ErrInvalidArgument) {
		return usageError(fs, stderr, "%s", plain(relErr, nodes...))
	}
	// Read again only when every node answered: a silent node would hold
	// the exit up for one more node timeout, and say nothing new.
	var after *redlock.Inspection
	if len(nodeErrors(relErr)) == 0 {
		in, _ := rl.Inspect(ctx, res)
		after = &in
	}

	var b strings.Builder
	b.WriteString("before:\n")
	writeInspection(&b, before, nodes)
	answered := len(nodes) - len(nodeErrors(relErr))
	switch {
	case len(removed) == 0 && len(*values) == 0:
		fmt.Fprintf(&b, "released on %d of %d nodes: no node that answered held it\n", answered, len(nodes))
	default:
		fmt.Fprintf(&b, "released on %d of %d nodes, removed %d holder(s):\n", answered, len(nodes), len(removed))
		for _, h := range removed {
			fmt.Fprintf(&b, "  %s  value %s\n", identityWords(h.Identity), h.Value)
		}
	}
	for _, v := range missing {
		fmt.Fprintf(&b, "  no node that answered holds value %s\n", v)
	}
	if after != nil {
		b.WriteString("after:\n")
		writeInspection(&b, *after, nodes)
	} else {
		b.WriteString("after: not read again (a node did not answer the release)\n")
	}
	fmt.Fprint(stdout, b.String())

	if errors.Is(relErr, redlock.ErrNotHeld) {
		fmt.Fprintf(stderr, "redlock release: %s\n", plain(relErr, nodes...))
		return exitNotHeld
	}
	if relErr != nil {
		quorum := "fewer than a quorum: the holders may still hold it; try again"
		if answered >= rl.Quorum() {
			quorum = "a quorum: no removed holder holds it on a quorum"
		}
		fmt.Fprintf(stderr, "redlock release: %d of %d nodes answered, %s\n", answered, len(nodes), quorum)
		for _, ne := range nodeErrors(relErr) {
			name := ne.Addr
			if ne.Node < len(nodes) {
				name = nodes[ne.Node].name
			}
			fmt.Fprintf(stderr, "redlock release: node %s did not answer: %s\n", name, plain(ne.Err, nodes...))
		}
		return exitUnavailable
	}
	return 0
}
