package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redlock/redlock"
)

// elect campaigns in an election and runs a command while leading: run's
// child (child.go) under a term instead of a lock. The term is extended by
// the library (Campaign's extender); redlock follows its validity through
// an Observer, so that a term whose extensions keep failing stops the
// command early enough for the SIGKILL to land before the validity ends,
// as run's keeper does for a lock.

// restartPause is the least time between two starts of the command with
// --forever: a command that fails at once is not restarted in a tight
// loop, and a candidate that waits gets the election after a resignation.
const restartPause = time.Second

// electFlags are elect's settings.
type electFlags struct {
	holdFlags
	id      string
	forever bool
}

// electFlagSet returns elect's flags, writing errors and usage to out.
func electFlagSet(out io.Writer) (*flag.FlagSet, *electFlags) {
	fs := newFlagSet("elect", usageElect, out)
	f := &electFlags{}
	f.register(fs, 15*time.Second, waitFlag{forever: true}, holdText{
		noun:    "term",
		verbose: "log campaign, term, extension, resignation and lost-term lines to stderr",
		wait:    "how long to campaign, a `duration` (seconds, or 30s, 5m): 0 tries once, \"forever\" campaigns until it leads (see Waiting)",
	})
	fs.StringVar(&f.id, "id", "", "the candidate's `id`, as redlock leader shows it: 1 to 1024 bytes (default: the hostname)")
	fs.BoolVar(&f.forever, "forever", false, "campaign again when the command exits or the term is lost, until SIGINT, SIGTERM or SIGQUIT")
	return fs, f
}

func electVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _ := electFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, fp := electFlagSet(stderr)
	short(fs, stderr)
	positional, command, code := parseCommand(fs, args)
	if code >= 0 {
		return code
	}
	switch {
	case len(positional) == 0:
		return usageError(fs, stderr, "no NAME: name the election, such as scheduler or outbox-relay")
	case len(positional) > 1:
		return usageError(fs, stderr, "more than one NAME argument (%q): give one election, and put the command after --", positional)
	case positional[0] == "":
		return usageError(fs, stderr, "the election's NAME is empty: name it, such as scheduler")
	}
	if code := checkCommand(fs, command); code >= 0 {
		return code
	}
	f := *fp
	if code := f.check(fs, stderr); code >= 0 {
		return f.reported("elect", stderr, code, kindUsage)
	}
	switch {
	case given(fs, "id") && f.id == "":
		return f.reported("elect", stderr, usageError(fs, stderr, "--id is empty: give the candidate's name (a hostname, a pod name), or leave --id out for the hostname"), kindUsage)
	case len(f.id) > 1024:
		return f.reported("elect", stderr, usageError(fs, stderr, "--id is %d bytes long: give at most 1024", len(f.id)), kindUsage)
	case f.id == "":
		h, err := os.Hostname()
		if err != nil || h == "" {
			return f.reported("elect", stderr, usageError(fs, stderr, "no --id, and the hostname is unknown (%v): give --id", err), kindUsage)
		}
		f.id = h
	}
	nodes, err := dial(f.nodes, f.nodeTimeout)
	if err != nil {
		return f.reported("elect", stderr, usageError(fs, stderr, "%v", err), kindUsage)
	}
	defer closeNodes(nodes)
	e := &elector{electFlags: f, name: positional[0], command: command, stderr: stderr, log: logger(f.verbose, stderr), kind: kindCommand}
	code = e.elect(nodes)
	return f.reported("elect", stderr, code, e.kind)
}

// elector is one elect: campaign, run the command while leading, resign;
// again with --forever.
type elector struct {
	electFlags
	name    string
	command []string
	stderr  io.Writer
	log     *slog.Logger
	kind    string // whose exit code elect returns, for --report
}

// stops reports whether s stops redlock elect --forever: SIGHUP does not
// (it is passed to a running command, else ignored).
func stops(s os.Signal) bool { return s != syscall.SIGHUP }

func (e *elector) elect(nodes []node) int {
	// A signal before the command starts ends the campaign; one while it
	// runs is passed to it; one after it (while the term is resigned) ends
	// --forever's next campaign, or is ignored.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(e.nodeTimeout), redlock.WithErrorHandler(nodeTrouble(e.log)),
		redlock.WithIdentity(commandIdentity(filepath.Base(e.command[0]))))
	if err != nil {
		fmt.Fprintf(e.stderr, "redlock elect: %s\n", plain(err, nodes...))
		e.kind = kindUsage
		return exitUsage
	}
	defer func() { // waits for resignations still on their way
		if err := rl.Close(); err != nil {
			e.log.Warn("a resignation may not have reached every node", "err", plain(err))
		}
	}()
	el := rl.Election(e.name)
	var started time.Time // the command's last start
	for {
		if e.forever && !started.IsZero() {
			pause := time.Until(started.Add(restartPause))
			if sig := untilSignal(context.Background(), sigs, e.ignored, func(ctx context.Context) { sleep(ctx, pause) }); sig != nil {
				e.log.Info("stopped by a signal", "signal", sig)
				e.kind = kindStopped
				return 0
			}
		}
		tk, code := e.campaign(el, sigs)
		if tk == nil {
			return code
		}
		n := tk.term.Number()
		e.log.Info("leading", "election", e.name, "id", e.id, "term", n, "valid", time.Until(tk.until()).Round(time.Millisecond))
		env := []string{"REDLOCK_ELECTION=" + e.name, "REDLOCK_ID=" + e.id, "REDLOCK_TERM=" + strconv.FormatUint(n, 10)}
		c := &child{verb: "elect", command: e.command, env: env, killGrace: e.killGrace, stderr: e.stderr, log: e.log}
		started = time.Now()
		end := c.run(sigs, tk.keep)
		e.resign(tk.term)
		switch {
		case !end.started:
			e.kind = startKind(end.code)
			return end.code
		case !e.forever && end.lost:
			e.kind = kindLost
			return exitLost
		case !e.forever:
			return end.code
		}
		for _, s := range end.signals {
			if stops(s) {
				e.log.Info("stopped by a signal", "signal", s, "command's exit code", end.code)
				e.kind = kindStopped
				return 0
			}
		}
		e.log.Info("campaigning again", "command's exit code", end.code, "lost", end.lost)
	}
}

// ignored reports whether s is ignored while no command runs: SIGHUP, with
// --forever.
func (e *elector) ignored(s os.Signal) bool {
	if e.forever && !stops(s) {
		e.log.Info("ignoring a signal between terms", "signal", s)
		return true
	}
	return false
}

// campaign campaigns until it leads, waiting as --wait says; a signal ends
// the wait. It returns the term's keeper, or nil and the exit code.
func (e *elector) campaign(el *redlock.Election, sigs <-chan os.Signal) (*termKeeper, int) {
	tk := &termKeeper{elector: e, extended: make(chan struct{}, 1)}
	// A campaign tries until its ctx ends: the waiter ends it when --wait
	// has passed (--wait 0: at once), after a whole attempt at least.
	tk.w = newWaiter(e.wait)
	defer tk.w.stop()
	// Extensions start when half the ttl is left (earlier with a long
	// --kill-grace), as run's keeper's do: with ttl/10 to spare before the
	// command must be told (see keep).
	lead := max(e.ttl/2, e.killGrace+2*(e.ttl/10))
	opts := []redlock.Option{redlock.WithAutomaticExtensionThreshold(lead), redlock.WithObserver(&redlock.Observer{Attempt: tk.attempt})}
	e.log.Info("campaigning", "election", e.name, "id", e.id)
	var term *redlock.Term
	var err error
	sig := untilSignal(tk.w.ctx, sigs, e.ignored, func(ctx context.Context) { term, err = el.Campaign(ctx, e.id, e.ttl, opts...) })
	code := 0
	if sig != nil {
		code = 128 + int(sig.(syscall.Signal))
		e.kind = kindSignal
		if e.forever {
			code, e.kind = 0, kindStopped
		}
	}
	if err == nil && sig != nil {
		// The signal came as the term began: the command is not started.
		e.log.Info("signal as the term began", "signal", sig)
		e.resign(term)
		return nil, code
	}
	if err == nil {
		tk.term = term
		return tk, 0
	}
	switch {
	case sig != nil:
		e.log.Info("signal while campaigning", "signal", sig)
		return nil, code
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(e.stderr, "redlock elect: %s\n", plain(err))
		e.kind = kindUsage
		return nil, exitUsage
	case errors.Is(err, redlock.ErrResourceLocked) || tk.contended():
		e.log.Info("another candidate leads", "election", e.name, "err", plain(err))
		e.kind = kindConflict
		return nil, e.conflict
	case tk.last != nil && tk.w.ended():
		// --wait ended the campaign: its last whole attempt's votes say
		// why, not the cancelled context.
		fmt.Fprintf(e.stderr, "redlock elect: no quorum when --wait %v ended: %s\n", &e.wait, votes(tk.last))
		e.kind = kindUnavailable
		return nil, exitUnavailable
	}
	fmt.Fprintf(e.stderr, "redlock elect: %s\n", plain(err))
	e.kind = kindUnavailable
	return nil, exitUnavailable
}

// resign ends the term (its lock is deleted only where it holds this
// term's value, so a successor's is never touched), and logs what went
// wrong.
func (e *elector) resign(term *redlock.Term) {
	ctx, cancel := context.WithTimeout(context.Background(), max(2*time.Second, 4*e.nodeTimeout))
	defer cancel()
	if err := term.Resign(ctx); err != nil {
		e.log.Warn("the resignation failed on a quorum; the deletes are sent again until redlock exits, and the term expires within its ttl at the latest",
			"election", e.name, "term", term.Number(), "err", plain(err))
		return
	}
	e.log.Info("resigned", "election", e.name, "term", term.Number())
}

// termKeeper follows one term while the command runs.
type termKeeper struct {
	*elector
	term *redlock.Term // set once the campaign won
	// validTo is the term's validity (Unix ns), from the observer: the
	// winning attempt's start + its validity, then each extension's.
	validTo  atomic.Int64
	extended chan struct{} // poked by each extension
	// w ends the campaign when --wait has passed; last is the votes of
	// the campaign's last attempt made before that (written by the
	// campaign's goroutine, which reads it after Campaign returned).
	w    *waiter
	last *redlock.ExecutionStats
}

// until is the term's validity as the observer last saw it.
func (k *termKeeper) until() time.Time { return time.Unix(0, k.validTo.Load()) }

// attempt is the observer of the campaign's and the term's attempts: it
// records the validity each won attempt gives, and the votes of each lost
// one, and tells the waiter (which may end the campaign).
func (k *termKeeper) attempt(a redlock.AttemptInfo) {
	switch {
	case a.Won && (a.Op == redlock.OpAcquire || a.Op == redlock.OpExtend):
		to := a.Stats.Start.Add(a.Validity).UnixNano()
		for { // the latest wins, whatever order the hooks ran in
			old := k.validTo.Load()
			if to <= old || k.validTo.CompareAndSwap(old, to) {
				break
			}
		}
		if a.Op == redlock.OpExtend {
			k.log.Info("extended", "election", k.name, "valid", time.Until(k.until()).Round(time.Millisecond))
			select {
			case k.extended <- struct{}{}:
			default:
			}
		}
	case a.Op == redlock.OpAcquire && k.w.ctx.Err() == nil:
		// An attempt that ends after the waiter ended the campaign was
		// cut short: its votes say nothing.
		st := a.Stats
		k.last = &st
		k.w.attempt(a)
	}
}

// contended reports whether the campaign's last whole attempt found the
// election led by another: held on more nodes than a quorum leaves out.
func (k *termKeeper) contended() bool {
	if k.last == nil {
		return false
	}
	held := 0
	for _, v := range k.last.VotesAgainst {
		if errors.Is(v, redlock.ErrResourceLocked) {
			held++
		}
	}
	return held > k.last.MembershipSize-k.last.QuorumSize
}

// votes says an attempt's votes against, on one line.
func votes(st *redlock.ExecutionStats) string {
	says := make([]string, 0, len(st.VotesAgainst))
	for _, v := range st.VotesAgainst {
		says = append(says, plain(v))
	}
	return fmt.Sprintf("%d of %d nodes voted for, %d needed; %s", len(st.VotesFor), st.MembershipSize, st.QuorumSize, strings.Join(says, "; "))
}

// extension returns the extension's error that ended a term: the cause
// of its context without the ErrExtensionFailed beside it.
func extension(cause error) error {
	if m, ok := cause.(interface{ Unwrap() []error }); ok {
		for _, err := range m.Unwrap() {
			if err != redlock.ErrExtensionFailed {
				return err
			}
		}
	}
	return cause
}

// keep watches the term until ctx ends, and calls lost when it is lost:
// its context ended (an extension found it gone, or its validity ran out),
// or extensions kept failing until kill-grace + ttl/10 before its validity
// ends, so that the SIGKILL lands before it does.
func (k *termKeeper) keep(ctx context.Context, lost func(why string)) {
	margin := k.ttl / 10
	what := fmt.Sprintf("leadership of %s (term %d) was lost while the command ran", k.name, k.term.Number())
	for {
		signalAt := k.until().Add(-k.killGrace - margin)
		t := time.NewTimer(time.Until(signalAt))
		if k.validTo.Load() == 0 {
			// No validity seen (the observer is told of every attempt, so
			// this should not be): the term's context alone says.
			t.Stop()
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-k.extended:
			t.Stop()
		case <-k.term.Context().Done():
			t.Stop()
			lost(fmt.Sprintf("%s: it was force-released, another candidate took it, or it expired (last extension: %s)", what, plain(extension(context.Cause(k.term.Context())))))
			return
		case <-t.C:
			if time.Now().Before(k.until().Add(-k.killGrace - margin)) {
				continue // extended meanwhile
			}
			lost(what + ": a quorum of nodes did not extend it before its validity ran short (the nodes stopped answering in time)")
			return
		}
	}
}
