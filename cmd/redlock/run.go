package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/script"
)

// waitFlag is --wait: a duration, or "forever".
type waitFlag struct {
	d       time.Duration
	forever bool
}

func (w *waitFlag) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "forever", "inf", "-1":
		w.forever, w.d = true, 0
		return nil
	}
	var sd seconds
	if err := sd.Set(s); err != nil {
		return fmt.Errorf("not a duration (seconds such as 0 or 5, or 30s, 5m) nor \"forever\"")
	}
	d := time.Duration(sd)
	if d < 0 {
		return fmt.Errorf("negative: give 0 to try once, a duration, or \"forever\"")
	}
	w.forever, w.d = false, d
	return nil
}

// holdFlags are the settings of the verbs that run a command under a lock
// or a term (run, elect).
type holdFlags struct {
	common
	ttl       time.Duration
	wait      waitFlag
	conflict  int
	killGrace time.Duration
	report    bool
}

// holdText is what the help of holdFlags says that differs between verbs.
type holdText struct {
	noun    string // what the command runs under: "lock", "term"
	verbose string // --verbose's help
	wait    string // --wait's help
}

// register adds the flags to fs, with ttl and wait as their defaults.
func (h *holdFlags) register(fs *flag.FlagSet, ttl time.Duration, wait waitFlag, text holdText) {
	h.common.register(fs)
	fs.BoolVar(&h.verbose, "verbose", false, text.verbose)
	h.ttl, h.wait = ttl, wait
	fs.Var((*seconds)(&h.ttl), "ttl", fmt.Sprintf("the %s's ttl, a `duration` (seconds, or 30s, 5m); it is extended while the command runs", text.noun))
	fs.Var(&h.wait, "wait", text.wait)
	fs.IntVar(&h.conflict, "conflict-exit-code", exitConflict, fmt.Sprintf("the exit code when the wait for the %s ended without it", text.noun))
	fs.Var((*seconds)(&h.killGrace), "kill-grace", fmt.Sprintf("time between SIGTERM and SIGKILL to the command when the %s is lost, a `duration` (default ttl/4, at most ttl/2)", text.noun))
	fs.BoolVar(&h.report, "report", false, "print one last line on stderr saying whose exit code it is: \"redlock VERB: exit N (KIND)\" (see Exit codes)")
}

// The kinds of exit that --report names: whose exit code it is.
const (
	kindCommand     = "command"     // the command's own
	kindConflict    = "conflict"    // held by another (led by another) when the wait ended
	kindUnavailable = "unavailable" // no quorum, for other reasons than contention
	kindLost        = "lost"        // lost while the command ran
	kindSignal      = "signal"      // a signal ended the wait, before the command started
	kindStopped     = "stopped"     // elect --forever: a signal stopped it (exit 0)
	kindCannotRun   = "cannot-run"  // the command could not be started
	kindNotFound    = "not-found"   // the command was not found
	kindUsage       = "usage"       // a usage error
)

// reported prints, with --report, the line that says whose exit code code
// is, and returns code. It is the last line redlock prints.
func (h *holdFlags) reported(verb string, stderr io.Writer, code int, kind string) int {
	if h.report {
		fmt.Fprintf(stderr, "redlock %s: exit %d (%s)\n", verb, code, kind)
	}
	return code
}

// startKind is the kind of exit of a command that did not start.
func startKind(code int) string {
	if code == exitNotFound {
		return kindNotFound
	}
	return kindCannotRun
}

// check refuses what cannot work, and fills in the defaults that depend
// on the ttl (the node timeout when not given, the kill grace). It returns
// -1 when the flags are fine, else the exit code.
func (h *holdFlags) check(fs *flag.FlagSet, stderr io.Writer) int {
	if !given(fs, "node-timeout") && h.ttl > 0 {
		// Not the user's choice: never refuse it, derive it from the ttl.
		h.nodeTimeout = min(defaultNodeTimeout, h.ttl/4)
	}
	switch {
	case h.ttl < time.Second:
		return usageError(fs, stderr, "--ttl %v is below 1s: the lock must outlive a few extension attempts", h.ttl)
	case h.ttl%time.Millisecond != 0:
		return usageError(fs, stderr, "--ttl %v is not a whole number of milliseconds", h.ttl)
	case h.nodeTimeout <= 0 || h.nodeTimeout > h.ttl/4:
		return usageError(fs, stderr, "--node-timeout %v must be positive and at most ttl/4 (%v): lower it, raise --ttl, or leave it out", h.nodeTimeout, h.ttl/4)
	case h.killGrace < 0 || h.killGrace > h.ttl/2:
		return usageError(fs, stderr, "--kill-grace %v must be between 0 and ttl/2 (%v)", h.killGrace, h.ttl/2)
	case h.conflict < 0 || h.conflict > 255:
		return usageError(fs, stderr, "--conflict-exit-code %d is not an exit code (0-255)", h.conflict)
	}
	if h.killGrace == 0 {
		h.killGrace = h.ttl / 4
	}
	return -1
}

// runFlags are run's settings.
type runFlags struct {
	holdFlags
	fencing bool
	permits int
	shared  bool
}

// runFlagSet returns run's flags, writing errors and usage to out.
func runFlagSet(out io.Writer) (*flag.FlagSet, *runFlags) {
	fs := newFlagSet("run", usageRun, out)
	f := &runFlags{}
	f.register(fs, 30*time.Second, waitFlag{}, holdText{
		noun:    "lock",
		verbose: "log acquire, extend, release and lost-lock lines to stderr",
		wait:    "how long to wait for the lock, a `duration` (seconds, or 30s, 5m): 0 tries once, \"forever\" waits until it is free (default 0: see Waiting)",
	})
	fs.BoolVar(&f.fencing, "fencing", false, "acquire with a fencing token, given to the command as REDLOCK_TOKEN")
	fs.IntVar(&f.permits, "permits", 1, "take one of `N` permits of each resource (a semaphore: at most N commands at once); 1 is the exclusive lock")
	fs.BoolVar(&f.shared, "shared", false, "take a shared (read) lock: shared runs go side by side, an exclusive run waits for them all")
	return fs, f
}

// wantsHelp reports whether args ask for help (-h, -help, --help) before
// the command.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

func runVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _ := runFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, fp := runFlagSet(stderr)
	short(fs, stderr)
	resources, command, code := parseRun(fs, args)
	if code >= 0 {
		return code
	}
	f := *fp
	if code := f.check(fs, stderr); code >= 0 {
		return f.reported("run", stderr, code, kindUsage)
	}
	switch {
	case f.permits < 1 || f.permits > 1024:
		return f.reported("run", stderr, usageError(fs, stderr, "--permits %d is outside 1 to 1024", f.permits), kindUsage)
	case f.permits > 1 && f.shared:
		return f.reported("run", stderr, usageError(fs, stderr, "--permits and --shared together: a run takes a permit or a shared lock, not both"), kindUsage)
	case f.fencing && (f.permits > 1 || f.shared):
		return f.reported("run", stderr, usageError(fs, stderr, "--fencing with --permits or --shared: a fencing token orders holders that exclude each other; fence the exclusive run that writes"), kindUsage)
	}
	nodes, err := dial(f.nodes, f.nodeTimeout)
	if err != nil {
		return f.reported("run", stderr, usageError(fs, stderr, "%v", err), kindUsage)
	}
	defer closeNodes(nodes)
	r := &runner{runFlags: f, resources: resources, command: command, stderr: stderr, log: logger(f.verbose, stderr), kind: kindCommand}
	code = r.run(nodes)
	return f.reported("run", stderr, code, r.kind)
}

// parseRun parses run's arguments: flags, then RESOURCE[,RESOURCE...], then
// "--" and the command (flags may come after the resources too). It returns
// code >= 0 when the invocation ends here.
func parseRun(fs *flag.FlagSet, args []string) (resources, command []string, code int) {
	positional, command, code := parseCommand(fs, args)
	if code >= 0 {
		return nil, nil, code
	}
	stderr := fs.Output()
	switch {
	case len(positional) == 0:
		return nil, nil, usageError(fs, stderr, "no RESOURCE: name what to lock, such as nightly-report or {orders}:1,{orders}:2")
	case len(positional) > 1:
		return nil, nil, usageError(fs, stderr, "more than one RESOURCE argument (%q): join resources with commas, and put the command after --", positional)
	}
	if code := checkCommand(fs, command); code >= 0 {
		return nil, nil, code
	}
	for i, res := range strings.Split(positional[0], ",") {
		if res == "" {
			return nil, nil, usageError(fs, stderr, "RESOURCE %q has an empty name at position %d", positional[0], i+1)
		}
		if j := slices.Index(resources, res); j >= 0 {
			return nil, nil, usageError(fs, stderr, "RESOURCE %q: %q at position %d duplicates position %d", positional[0], res, i+1, j+1)
		}
		resources = append(resources, res)
	}
	return resources, command, -1
}

// parseCommand parses the arguments of a verb that runs a command: flags,
// then the verb's positional arguments, then "--" and the command (flags
// may come after the positional arguments too; without "--", the command
// starts after the first of them). It returns code >= 0 when the
// invocation ends here.
func parseCommand(fs *flag.FlagSet, args []string) (positional, command []string, code int) {
	flagArgs, cmdArgs, dashes := args, []string(nil), false
	for i, a := range args {
		if a == "--" {
			flagArgs, cmdArgs, dashes = args[:i], args[i+1:], true
			break
		}
	}
	rest := flagArgs
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, 0 // the usage went to stderr
			}
			return nil, nil, exitUsage // the flag package printed the error and the usage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		rest = rest[1:]
		if !dashes {
			cmdArgs, rest = rest, nil
			break
		}
	}
	return positional, cmdArgs, -1
}

// checkCommand refuses a missing command, or one with an empty name.
func checkCommand(fs *flag.FlagSet, command []string) int {
	switch {
	case len(command) == 0:
		return usageError(fs, fs.Output(), "no COMMAND: give it after --, such as -- /usr/local/bin/nightly-report --full")
	case strings.TrimSpace(command[0]) == "":
		return usageError(fs, fs.Output(), "the COMMAND's name is empty: give a program after --, such as -- /usr/local/bin/nightly-report")
	}
	return -1
}

func logger(verbose bool, stderr io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// runner is one run: acquire, start, keep, wait, release.
type runner struct {
	runFlags
	resources []string
	command   []string
	stderr    io.Writer
	log       *slog.Logger
	kind      string // whose exit code run returns, for --report
}

func (r *runner) run(nodes []node) int {
	// A signal before the command starts ends the wait for the lock; one
	// while it runs is passed to it; one after it (while the lock is
	// released, and Close waits for what is in flight) is ignored.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(r.nodeTimeout), redlock.WithFencing(r.fencing),
		redlock.WithPermits(r.permits), redlock.WithShared(r.shared), redlock.WithErrorHandler(nodeTrouble(r.log)),
		redlock.WithIdentity(commandIdentity(filepath.Base(r.command[0]))))
	if err != nil {
		fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err, nodes...))
		r.kind = kindUsage
		return exitUsage
	}
	defer func() { // waits for releases still on their way
		if err := rl.Close(); err != nil {
			r.log.Warn("a release may not have reached every node", "err", plain(err))
		}
	}()

	lock, code := r.acquire(rl, sigs)
	if lock == nil {
		return code
	}
	r.log.Info("acquired", "resources", r.resources, "value", lock.Value(), "token", lock.Token(),
		"valid", time.Until(lock.Expiration()).Round(time.Millisecond))

	env := []string{"REDLOCK_RESOURCES=" + strings.Join(r.resources, ","), "REDLOCK_VALUE=" + lock.Value()}
	if r.fencing {
		env = append(env, "REDLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10))
	}
	k := &keeper{runner: r, lock: lock}
	c := &child{verb: "run", command: r.command, env: env, killGrace: r.killGrace, stderr: r.stderr, log: r.log}
	e := c.run(sigs, k.run)
	switch {
	case !e.started:
		r.release(lock, false)
		r.kind = startKind(e.code)
		return e.code
	case e.lost:
		r.release(k.lock, true)
		r.kind = kindLost
		return exitLost
	}
	r.release(k.lock, false)
	return e.code
}

// nodeTrouble returns the error handler that says, once per node, that a
// node failed (not contention, not a call cut short): by default redlock
// prints nothing, but a node that does not answer is something going wrong.
func nodeTrouble(log *slog.Logger) func(error) {
	var mu sync.Mutex
	said := map[int]bool{}
	return func(err error) {
		var ne *redlock.NodeError
		var rle *redlock.ResourceLockedError
		if !errors.As(err, &ne) || errors.As(err, &rle) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
			mixedKinds(err) != "" { // contention with a run of another kind: said once, as a conflict
			return
		}
		mu.Lock()
		first := !said[ne.Node]
		said[ne.Node] = true
		mu.Unlock()
		if first {
			log.Warn("a node failed", "node", ne.Addr, "op", ne.Op, "err", plain(ne.Err))
		}
	}
}

// waitEnded returns what a wait that ended with err says: when the wait
// ran out as a try began (the try cut short before it was made), the try
// before it, which found a run of another kind (other), says what held the
// resource, not "no quorum".
func waitEnded(err, other error) error {
	if other != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return other
	}
	return err
}

// acquire takes the lock, waiting as --wait says; a signal ends the wait.
// It returns the lock, or nil and the exit code.
func (r *runner) acquire(rl *redlock.Redlock, sigs <-chan os.Signal) (*redlock.Lock, int) {
	w := newWaiter(r.wait)
	defer w.stop()
	opts := []redlock.Option{redlock.WithRetryCount(-1), redlock.WithObserver(&redlock.Observer{Attempt: w.attempt})}
	if !r.wait.forever && r.wait.d == 0 {
		opts = []redlock.Option{redlock.WithRetryCount(0)}
	}
	var lock *redlock.Lock
	var err error
	sig := untilSignal(w.ctx, sigs, nil, func(ctx context.Context) {
		var other error // the last try that found a run of another kind
		for {
			lock, err = rl.Acquire(ctx, r.resources, r.ttl, opts...)
			// A run of another kind (another --permits, --shared against
			// --permits) holds it: the library ends the call at once, as
			// retrying cannot change the kind; its holder may go, so the
			// wait goes on as for any holder.
			if err != nil && mixedKinds(err) != "" {
				other = err
			}
			if err == nil || mixedKinds(err) == "" || !w.waitOn(ctx, r.wait) {
				err = waitEnded(err, other)
				return
			}
		}
	})
	if err == nil && sig != nil {
		// The signal came as the lock was granted: the command is not
		// started.
		r.log.Info("signal as the lock was acquired", "signal", sig)
		r.release(lock, false)
		r.kind = kindSignal
		return nil, 128 + int(sig.(syscall.Signal))
	}
	if err == nil {
		return lock, 0
	}
	switch {
	case sig != nil:
		r.log.Info("signal while waiting for the lock", "signal", sig)
		r.kind = kindSignal
		return nil, 128 + int(sig.(syscall.Signal))
	case mixedKinds(err) != "":
		// Not a usage error: this run is right, and another kind holds the
		// resource; one line says which (the conflict is otherwise quiet,
		// but a run that can never share the resource with its holder
		// is worth a line).
		fmt.Fprintf(r.stderr, "redlock run: %s\n", r.mixedLine(mixedKinds(err)))
		r.kind = kindConflict
		return nil, r.conflict
	case errors.Is(err, redlock.ErrResourceLocked):
		r.log.Info("held by another lock", "resources", r.resources, "err", plain(err))
		r.kind = kindConflict
		return nil, r.conflict
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err))
		r.kind = kindUsage
		return nil, exitUsage
	}
	if w.ended() {
		fmt.Fprintf(r.stderr, "redlock run: no quorum when --wait %v ended: %s\n", &r.wait, strings.Replace(plain(err), context.Canceled.Error()+" after", "the wait ended after", 1))
	} else {
		fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err))
	}
	r.kind = kindUnavailable
	return nil, exitUnavailable
}

// mixedLine says that what holds the resource is of another kind than
// what this run asked for: held is the node's words, "RESOURCE is a
// semaphore of 2 permits, not 3".
func (r *runner) mixedLine(held string) string {
	res, what := held, held
	if i := strings.LastIndex(held, " is a "); i >= 0 {
		res, what = held[:i], held[i+len(" is "):]
	}
	holders := "another kind"
	switch kind, _, _ := strings.Cut(what, ", not "); {
	case strings.HasPrefix(kind, "a semaphore of "):
		holders = "--permits " + strings.TrimSuffix(strings.TrimPrefix(kind, "a semaphore of "), " permits")
	case kind == "a shared lock":
		holders = "--shared"
	}
	asked := "an exclusive lock"
	switch {
	case r.permits > 1:
		asked = fmt.Sprintf("--permits %d", r.permits)
	case r.shared:
		asked = "--shared"
	}
	return fmt.Sprintf("%q is %s: it is held by runs with %s, and this run asked for %s; every run of a resource must take the same kind "+
		"(the same --permits, or --shared and exclusive runs), so the command did not run", res, what, holders, asked)
}

// mixedKinds returns the node's words when err says that a resource is held
// by a lock of another kind than the one asked for ("RESOURCE is a
// semaphore of 2 permits, not 3"), or "".
func mixedKinds(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	i := strings.Index(s, strings.TrimPrefix(script.MixedKinds, "ERR "))
	if i < 0 {
		return ""
	}
	s = s[i+len(strings.TrimPrefix(script.MixedKinds, "ERR ")):]
	// The reply ends where the library's text goes on: a quote, or ";".
	if j := strings.IndexAny(s, "\";"); j >= 0 {
		s = s[:j]
	}
	return s
}

// waiter ends a wait for a lock or a term when --wait has passed, but never
// before an attempt has been made whole: a wait shorter than an attempt
// (--wait 0.001) still learns whether another holds it, and a wait that
// ends while another holds it is a conflict, not a deadline (the library
// says what its last whole attempt found only when there was one).
type waiter struct {
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
	mu     sync.Mutex
	made   bool // an attempt was made whole (and lost)
	over   bool // --wait has passed
}

// newWaiter returns the waiter of w; its ctx ends the wait.
func newWaiter(w waitFlag) *waiter {
	wt := &waiter{}
	wt.ctx, wt.cancel = context.WithCancel(context.Background())
	if !w.forever {
		wt.timer = time.AfterFunc(w.d, wt.passed)
	}
	return wt
}

// passed is called when --wait has passed.
func (w *waiter) passed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.over = true
	if w.made {
		w.cancel()
	}
}

// attempt is the observer of the acquire's (or the campaign's) attempts: a
// lost one, made whole, lets the wait end.
func (w *waiter) attempt(a redlock.AttemptInfo) {
	if a.Op != redlock.OpAcquire || a.Won {
		return // a won attempt is never cut short: the grant goes on
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.made = true
	if w.over {
		w.cancel()
	}
}

// waitOn pauses before another try after an attempt that was lost (outside
// the library's own retries), and reports whether to try again: false once
// the wait is over or ctx ended.
func (w *waiter) waitOn(ctx context.Context, wf waitFlag) bool {
	w.attempt(redlock.AttemptInfo{Op: redlock.OpAcquire})
	if !wf.forever && wf.d == 0 {
		return false
	}
	return sleep(ctx, 200*time.Millisecond+time.Duration(rand.Int64N(int64(100*time.Millisecond))))
}

// ended reports whether --wait ended the wait (not a signal, not a result).
func (w *waiter) ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over && w.made
}

// stop ends the waiter's timer and context.
func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cancel()
}

// release releases the lock (only this lock's value is deleted, so a new
// holder's keys are never touched), and logs what went wrong.
func (r *runner) release(lock *redlock.Lock, lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), max(2*time.Second, 4*r.nodeTimeout))
	defer cancel()
	expires := lock.Expiration()
	// A few retries, whatever --wait was (the lock keeps its acquire's
	// options, a single attempt with --wait 0).
	_, err := lock.Release(ctx, redlock.WithRetryCount(3))
	switch {
	case err == nil:
		r.log.Info("released", "resources", r.resources)
	case lost && errors.Is(err, redlock.ErrLockExpired):
	default:
		r.log.Warn("release failed on a quorum; the deletes are sent again until redlock exits, and the lock expires by then at the latest",
			"expires", expires.Format(time.RFC3339Nano), "err", plain(err))
	}
}

// keeper extends the lock while the command runs.
type keeper struct {
	*runner
	lock *redlock.Lock // the newest handle; read by run's caller after run returned
}

// run extends the lock when half the ttl is left (earlier with a long
// --kill-grace), retrying while there is time, until ctx ends. When the
// lock is lost, or extensions kept failing until kill-grace + ttl/10
// before the expiration, it calls lost: the command gets SIGTERM, and
// SIGKILL kill-grace later, so that the SIGKILL lands before the lock's
// validity ends.
func (k *keeper) run(ctx context.Context, lost func(why string)) {
	margin := k.ttl / 10
	lead := max(k.ttl/2, k.killGrace+2*margin) // extend when this much is left
	for {
		if !k.untilDue(ctx, time.Until(k.lock.Expiration())-lead) {
			return
		}
		// Extensions may be tried until the command must be told.
		signalAt := k.lock.Expiration().Add(-k.killGrace - margin)
		for {
			ectx, cancel := context.WithDeadline(ctx, signalAt)
			nl, err := k.lock.Extend(ectx, k.ttl)
			cancel()
			if err == nil {
				k.lock = nl
				k.log.Info("extended", "resources", k.resources, "valid", time.Until(nl.Expiration()).Round(time.Millisecond))
				break
			}
			if ctx.Err() != nil {
				return // the command has exited
			}
			if errors.Is(err, redlock.ErrLockExpired) || !time.Now().Before(signalAt) {
				why := "it was force-released, another holder has it, or it expired"
				if !errors.Is(err, redlock.ErrLockExpired) {
					// Extensions kept failing until the command had to
					// be told: say so, not only the last attempt's
					// deadline.
					why = "a quorum of nodes did not extend it before its validity ran short (the nodes stopped answering in time)"
				}
				lost(fmt.Sprintf("the lock on %s was lost while the command ran: %s (last extension: %s)", strings.Join(k.resources, ","), why, plain(err)))
				return
			}
			k.log.Info("extension failed; trying again", "err", plain(err))
			if !sleep(ctx, min(200*time.Millisecond, time.Until(signalAt))) {
				return
			}
		}
	}
}

// forcedPoll is how often the keeper looks whether its lock heard a force
// release while it waits for the next extension.
const forcedPoll = 50 * time.Millisecond

// untilDue waits for d, or less when the lock stops being Valid first: a
// force release of its value was heard (redlock release, or a program's
// ForceRelease), and the Extend that follows fails at once without asking
// the nodes, so the command is told now, not at the next extension. (An
// acquired Lock has no channel for it: Valid says it, and it reads no
// node.) It returns false when ctx ends first.
func (k *keeper) untilDue(ctx context.Context, d time.Duration) bool {
	due := time.Now().Add(d)
	for k.lock.Valid() && time.Now().Before(due) {
		if !sleep(ctx, min(time.Until(due), forcedPoll)) {
			return false
		}
	}
	return ctx.Err() == nil
}

// sleep waits for d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
