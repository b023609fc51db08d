package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-redlock/redlock"
)

// forwarded are the signals that redlock passes to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

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

// runFlags are run's settings.
type runFlags struct {
	common
	ttl       time.Duration
	wait      waitFlag
	conflict  int
	fencing   bool
	killGrace time.Duration
}

// runFlagSet returns run's flags, writing errors and usage to out.
func runFlagSet(out io.Writer) (*flag.FlagSet, *runFlags) {
	fs := newFlagSet("run", usageRun, out)
	f := &runFlags{}
	f.register(fs)
	fs.BoolVar(&f.verbose, "verbose", false, "log acquire, extend, release and lost-lock lines to stderr")
	f.ttl = 30 * time.Second
	fs.Var((*seconds)(&f.ttl), "ttl", "the lock's ttl, a `duration` (seconds, or 30s, 5m); the lock is extended while the command runs (default 30s)")
	fs.Var(&f.wait, "wait", "how long to wait for the lock, a `duration` (seconds, or 30s, 5m): 0 tries once, \"forever\" waits until it is free (default 0: see Waiting)")
	fs.IntVar(&f.conflict, "conflict-exit-code", exitConflict, "the exit code when the lock is held by another and the wait ended")
	fs.BoolVar(&f.fencing, "fencing", false, "acquire with a fencing token, given to the command as REDLOCK_TOKEN")
	fs.Var((*seconds)(&f.killGrace), "kill-grace", "time between SIGTERM and SIGKILL to the command when the lock is lost, a `duration` (default ttl/4, at most ttl/2)")
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
	if !given(fs, "node-timeout") && f.ttl > 0 {
		// Not the user's choice: never refuse it, derive it from the ttl.
		f.nodeTimeout = min(defaultNodeTimeout, f.ttl/4)
	}
	switch {
	case f.ttl < time.Second:
		return usageError(fs, stderr, "--ttl %v is below 1s: the lock must outlive a few extension attempts", f.ttl)
	case f.ttl%time.Millisecond != 0:
		return usageError(fs, stderr, "--ttl %v is not a whole number of milliseconds", f.ttl)
	case f.nodeTimeout <= 0 || f.nodeTimeout > f.ttl/4:
		return usageError(fs, stderr, "--node-timeout %v must be positive and at most ttl/4 (%v): lower it, raise --ttl, or leave it out", f.nodeTimeout, f.ttl/4)
	case f.killGrace < 0 || f.killGrace > f.ttl/2:
		return usageError(fs, stderr, "--kill-grace %v must be between 0 and ttl/2 (%v)", f.killGrace, f.ttl/2)
	case f.conflict < 0 || f.conflict > 255:
		return usageError(fs, stderr, "--conflict-exit-code %d is not an exit code (0-255)", f.conflict)
	}
	if f.killGrace == 0 {
		f.killGrace = f.ttl / 4
	}
	nodes, err := dial(f.nodes, f.nodeTimeout)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	defer closeNodes(nodes)
	r := &runner{runFlags: f, resources: resources, command: command, stderr: stderr, log: logger(f.verbose, stderr)}
	return r.run(nodes)
}

// parseRun parses run's arguments: flags, then RESOURCE[,RESOURCE...], then
// "--" and the command (flags may come after the resources too). It returns
// code >= 0 when the invocation ends here.
func parseRun(fs *flag.FlagSet, args []string) (resources, command []string, code int) {
	flagArgs, cmdArgs, dashes := args, []string(nil), false
	for i, a := range args {
		if a == "--" {
			flagArgs, cmdArgs, dashes = args[:i], args[i+1:], true
			break
		}
	}
	var positional []string
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
			// Without "--", the command starts after the resources.
			cmdArgs, rest = rest, nil
			break
		}
	}
	stderr := fs.Output()
	switch {
	case len(positional) == 0:
		return nil, nil, usageError(fs, stderr, "no RESOURCE: name what to lock, such as nightly-report or {orders}:1,{orders}:2")
	case len(positional) > 1:
		return nil, nil, usageError(fs, stderr, "more than one RESOURCE argument (%q): join resources with commas, and put the command after --", positional)
	case len(cmdArgs) == 0:
		return nil, nil, usageError(fs, stderr, "no COMMAND: give it after --, such as -- /usr/local/bin/nightly-report --full")
	case strings.TrimSpace(cmdArgs[0]) == "":
		return nil, nil, usageError(fs, stderr, "the COMMAND's name is empty: give a program after --, such as -- /usr/local/bin/nightly-report")
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
	return resources, cmdArgs, -1
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
}

func (r *runner) run(nodes []node) int {
	// A signal before the command starts ends the wait for the lock; one
	// while it runs is passed to it; one after it (while the lock is
	// released, and Close waits for what is in flight) is ignored.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(r.nodeTimeout), redlock.WithFencing(r.fencing),
		redlock.WithErrorHandler(r.nodeTrouble()))
	if err != nil {
		fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err))
		return exitUsage
	}
	defer func() { // waits for releases still on their way
		if err := rl.Close(); err != nil {
			r.log.Warn("a release may not have reached every node", "err", err)
		}
	}()

	lock, code := r.acquire(rl, sigs)
	if lock == nil {
		return code
	}
	r.log.Info("acquired", "resources", r.resources, "value", lock.Value(), "token", lock.Token(),
		"valid", time.Until(lock.Expiration()).Round(time.Millisecond))

	cmd := exec.Command(r.command[0], r.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, signalled as one
	deathSignal(cmd.SysProcAttr)                          // dies with redlock (see watch.go)
	tty := terminal()
	if tty >= 0 {
		// At a terminal, the command's group takes the foreground: it can
		// read the terminal, and gets Ctrl-C itself.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	cmd.Env = append(os.Environ(), "REDLOCK_RESOURCES="+strings.Join(r.resources, ","), "REDLOCK_VALUE="+lock.Value())
	if r.fencing {
		cmd.Env = append(cmd.Env, "REDLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10))
	}
	// The parent-death signal comes when the thread that started the
	// command exits: this goroutine keeps its thread until the command
	// has exited, so that only redlock's death sends it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := startWatcher(r.stderr)
	defer w.done()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(r.stderr, "redlock run: cannot run %q: %v\n", r.command[0], err)
		r.release(lock, false)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	group := cmd.Process.Pid
	w.watch(group)

	// Keep the lock while the command runs; pass signals on to it.
	ctx, stop := context.WithCancel(context.Background())
	k := &keeper{runner: r, lock: lock, group: group, lost: make(chan struct{}), killed: make(chan struct{}), done: make(chan struct{})}
	go k.run(ctx)
	exited := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				r.log.Info("passing a signal to the command", "signal", s)
				_ = syscall.Kill(-group, s.(syscall.Signal))
			case <-exited:
				return
			}
		}
	}()
	waitErr := cmd.Wait()
	if tty >= 0 {
		takeTerminal(tty)
	}
	code = exitCode(cmd, waitErr)
	select {
	case <-k.lost:
		// What is left of the group (children that ignore SIGTERM) is
		// killed at the end of the grace, before redlock exits.
		if groupAlive(group) {
			<-k.killed
		}
	default:
		// The command has exited; what it left running in its group
		// (a child in the background) is still under the lock: it is
		// stopped (SIGTERM, then SIGKILL after the grace) before the
		// lock is released, while the lock is still extended.
		if groupAlive(group) {
			r.log.Warn("the command exited and left processes in its group: stopping them before the release", "grace", r.killGrace)
			stopGroup(group, r.killGrace)
		}
	}
	w.done() // nothing of the group runs any more
	close(exited)
	stop()
	<-k.done
	select {
	case <-k.lost:
		r.release(k.lock, true)
		return exitLost
	default:
	}
	r.release(k.lock, false)
	return code
}

// nodeTrouble returns the error handler that says, once per node, that a
// node failed (not contention, not a call cut short): by default redlock
// prints nothing, but a node that does not answer is something going wrong.
func (r *runner) nodeTrouble() func(error) {
	var mu sync.Mutex
	said := map[int]bool{}
	return func(err error) {
		var ne *redlock.NodeError
		var rle *redlock.ResourceLockedError
		if !errors.As(err, &ne) || errors.As(err, &rle) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		mu.Lock()
		first := !said[ne.Node]
		said[ne.Node] = true
		mu.Unlock()
		if first {
			r.log.Warn("a node failed", "node", ne.Addr, "op", ne.Op, "err", ne.Err)
		}
	}
}

// acquire takes the lock, waiting as --wait says; a signal ends the wait.
// It returns the lock, or nil and the exit code.
func (r *runner) acquire(rl *redlock.Redlock, sigs <-chan os.Signal) (*redlock.Lock, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := []redlock.Option{redlock.WithRetryCount(-1)}
	switch {
	case r.wait.forever:
	case r.wait.d == 0:
		opts = []redlock.Option{redlock.WithRetryCount(0)}
	default:
		ctx, cancel = context.WithTimeout(ctx, r.wait.d)
		defer cancel()
	}
	got := make(chan os.Signal, 1)
	stopped, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			got <- s
			cancel()
		case <-stopped:
		}
	}()
	lock, err := rl.Acquire(ctx, r.resources, r.ttl, opts...)
	close(stopped)
	<-watched
	var sig os.Signal
	select {
	case sig = <-got:
	default:
	}
	if err == nil && sig != nil {
		// The signal came as the lock was granted: the command is not
		// started.
		r.log.Info("signal as the lock was acquired", "signal", sig)
		r.release(lock, false)
		return nil, 128 + int(sig.(syscall.Signal))
	}
	if err == nil {
		return lock, 0
	}
	switch {
	case sig != nil:
		r.log.Info("signal while waiting for the lock", "signal", sig)
		return nil, 128 + int(sig.(syscall.Signal))
	case errors.Is(err, redlock.ErrResourceLocked):
		r.log.Info("held by another lock", "resources", r.resources, "err", err)
		return nil, r.conflict
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err))
		return nil, exitUsage
	}
	fmt.Fprintf(r.stderr, "redlock run: %s\n", plain(err))
	return nil, exitUnavailable
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

// exitCode is the command's exit code, 128+n when signal n killed it.
func exitCode(cmd *exec.Cmd, err error) int {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && cmd.ProcessState == nil {
		return exitCannotRun
	}
	return cmd.ProcessState.ExitCode()
}

// keeper extends the lock while the command runs, and stops the command
// when the lock is lost.
type keeper struct {
	*runner
	lock   *redlock.Lock // the newest handle; read by run's caller after done
	group  int           // the command's process group
	lost   chan struct{} // closed when the lock was lost
	killed chan struct{} // closed when the grace after a loss is over and SIGKILL was sent
	done   chan struct{} // closed when run returns
}

// run extends the lock when half the ttl is left (earlier with a long
// --kill-grace), retrying while there is time. When the lock is lost, or
// extensions kept failing until kill-grace + ttl/10 before the expiration,
// the command gets SIGTERM, and SIGKILL kill-grace later.
func (k *keeper) run(ctx context.Context) {
	defer close(k.done)
	margin := k.ttl / 10
	lead := max(k.ttl/2, k.killGrace+2*margin) // extend when this much is left
	for {
		if !sleep(ctx, time.Until(k.lock.Expiration())-lead) {
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
				k.stop(err)
				return
			}
			k.log.Info("extension failed; trying again", "err", plain(err))
			if !sleep(ctx, min(200*time.Millisecond, time.Until(signalAt))) {
				return
			}
		}
	}
}

// stop tells the command that the lock is lost: SIGTERM now, SIGKILL after
// the grace period unless it has exited.
func (k *keeper) stop(err error) {
	close(k.lost)
	why := "another holder has it, or it expired"
	if !errors.Is(err, redlock.ErrLockExpired) {
		// Extensions kept failing until the command had to be told: say
		// so, not only the last attempt's deadline.
		why = "a quorum of nodes did not extend it before its validity ran short (the nodes stopped answering in time)"
	}
	fmt.Fprintf(k.stderr, "redlock run: the lock on %s was lost while the command ran: %s; sending it SIGTERM, and SIGKILL in %v; last extension: %s\n",
		strings.Join(k.resources, ","), why, k.killGrace, plain(err))
	_ = syscall.Kill(-k.group, syscall.SIGTERM)
	go func() {
		defer close(k.killed)
		time.Sleep(k.killGrace)
		// The group may be gone: then the error is ignored. (Linux keeps
		// a process group's id from being reused while any member lives.)
		_ = syscall.Kill(-k.group, syscall.SIGKILL)
	}()
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
