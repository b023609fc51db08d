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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/go-redlock/redlock"
)

// hold holds a lock without a command, for an operator or a script: it
// prints one line once it holds it, keeps it extended (the library's
// Using), and releases it when told to stop.

const usageHold = `Usage: redlock hold [flags] RESOURCE[,RESOURCE...]

Acquires a lock on the resources (all or none) on a majority of the nodes,
as run does (the same --ttl, --wait, --permits, --shared, --fencing; and
--fair), but runs no command: once it holds the lock it prints exactly one
line on stdout,

  held value=VALUE token=N

(VALUE is the lock's value, which "redlock release RESOURCE --value VALUE"
takes; N its fencing token with --fencing, 0 without), keeps the lock
extended, and holds it until SIGINT or SIGTERM: then it releases it and
exits 0. With --until-stdin-closes it also ends when its standard input
closes (the script that started it exits, or closes the pipe); by default
it does not read stdin, since a background job of a script gets /dev/null.

The lock records who holds it: "HOST/PID redlock hold", which "redlock
status RESOURCE" shows.

  redlock hold --ttl 1m maintenance > held.txt &
  ... wait for held.txt to have its line ...
  kill %1    # releases it

Waiting: as run, by default (--wait 0) a lock held by another is a conflict
(75) at once; --wait 5m or forever waits for it.

Exit codes:
  0       SIGINT or SIGTERM (or stdin closing, with --until-stdin-closes) ended the hold, and the lock was released
  75      the lock is held by another when --wait ended, or by a lock of another kind; or stdin
          closed (--until-stdin-closes) before it was held (--conflict-exit-code)
  69      the nodes are unreachable or refuse the lock; or the release at the end did not reach
          a quorum (the lock then expires within --ttl)
  79      the lock was lost while held (another took it after it expired, it was force-released,
          or the nodes stopped answering)
  128+n   signal n ended the wait, before the lock was held
  2       usage error

With --report, redlock's last line on stderr says whose code it is: "redlock
hold: exit N (KIND)", KIND being released, conflict, unavailable, lost,
signal or usage.

Flags:
`

// kindReleased is hold's --report kind of a hold that ended as told.
const kindReleased = "released"

// holdVerbFlags are hold's settings: run's, without the command's.
type holdVerbFlags struct {
	runFlags
	fair       bool
	untilStdin bool
}

// holdFlagSet returns hold's flags, writing errors and usage to out.
func holdFlagSet(out io.Writer) (*flag.FlagSet, *holdVerbFlags) {
	fs := newFlagSet("hold", usageHold, out)
	f := &holdVerbFlags{}
	f.common.register(fs)
	f.ttl = 30 * time.Second
	fs.BoolVar(&f.verbose, "verbose", false, "log acquire, extend, release and node failures to stderr")
	fs.Var((*seconds)(&f.ttl), "ttl", "the lock's ttl, a `duration` (seconds, or 30s, 5m); it is extended while held")
	fs.Var(&f.wait, "wait", "how long to wait for the lock, a `duration` (seconds, or 30s, 5m): 0 tries once, \"forever\" waits until it is free (default 0)")
	fs.IntVar(&f.conflict, "conflict-exit-code", exitConflict, "the exit code when the wait for the lock ended without it")
	fs.BoolVar(&f.report, "report", false, "print one last line on stderr saying whose exit code it is: \"redlock hold: exit N (KIND)\"")
	fs.BoolVar(&f.fencing, "fencing", false, "acquire with a fencing token, printed as token=N")
	fs.IntVar(&f.permits, "permits", 1, "take one of `N` permits of each resource (a semaphore); 1 is the exclusive lock")
	fs.BoolVar(&f.shared, "shared", false, "take a shared (read) lock")
	fs.BoolVar(&f.fair, "fair", false, "wait in the resource's fair queue: the lock goes to the waiters in the order they came")
	fs.BoolVar(&f.untilStdin, "until-stdin-closes", false, "also end the hold (release, exit 0) when standard input closes")
	return fs, f
}

func holdVerb(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fs, _ := holdFlagSet(stdout)
		fs.Usage()
		return 0
	}
	fs, fp := holdFlagSet(stderr)
	short(fs, stderr)
	positional, code := parsePositional(fs, args)
	if code >= 0 {
		return code
	}
	f := *fp
	resources, code := splitResources(fs, positional)
	if code >= 0 {
		return f.reported("hold", stderr, code, kindUsage)
	}
	if code := f.check(fs, stderr); code >= 0 {
		return f.reported("hold", stderr, code, kindUsage)
	}
	switch {
	case f.permits < 1 || f.permits > 1024:
		code = usageError(fs, stderr, "--permits %d is outside 1 to 1024", f.permits)
	case f.permits > 1 && f.shared:
		code = usageError(fs, stderr, "--permits and --shared together: a hold takes a permit or a shared lock, not both")
	case f.fencing && (f.permits > 1 || f.shared):
		code = usageError(fs, stderr, "--fencing with --permits or --shared: a fencing token orders holders that exclude each other")
	case f.fair && (f.fencing || f.permits > 1 || f.shared):
		code = usageError(fs, stderr, "--fair with --fencing, --permits or --shared: the fair queue is for the plain exclusive lock")
	}
	if code >= 0 {
		return f.reported("hold", stderr, code, kindUsage)
	}
	nodes, err := dial(f.nodes, f.nodeTimeout)
	if err != nil {
		return f.reported("hold", stderr, usageError(fs, stderr, "%v", err), kindUsage)
	}
	defer closeNodes(nodes)
	h := &holding{holdVerbFlags: f, resources: resources, stdout: stdout, stderr: stderr,
		log: logger(f.verbose, stderr), identity: commandIdentity("redlock hold")}
	code, kind := h.hold(nodes)
	return f.reported("hold", stderr, code, kind)
}

// splitResources reads RESOURCE[,RESOURCE...], the one positional
// argument; code >= 0 when the invocation ends here.
func splitResources(fs *flag.FlagSet, positional []string) (resources []string, code int) {
	stderr := fs.Output()
	switch {
	case len(positional) == 0:
		return nil, usageError(fs, stderr, "no RESOURCE: name what to lock, such as maintenance or {orders}:1,{orders}:2")
	case len(positional) > 1:
		return nil, usageError(fs, stderr, "more than one RESOURCE argument (%q): join resources with commas", positional)
	}
	for i, res := range strings.Split(positional[0], ",") {
		if res == "" {
			return nil, usageError(fs, stderr, "RESOURCE %q has an empty name at position %d", positional[0], i+1)
		}
		if j := slices.Index(resources, res); j >= 0 {
			return nil, usageError(fs, stderr, "RESOURCE %q: %q at position %d duplicates position %d", positional[0], res, i+1, j+1)
		}
		resources = append(resources, res)
	}
	return resources, -1
}

// commandIdentity is the identity the command's locks record: the host
// name, the process id and what holds it, "host/4242 redlock hold", the
// host name cut so that the whole fits redlock.MaxIdentity, what cut to
// maxWhat bytes and kept to printable characters (a command's name may
// hold anything).
func commandIdentity(what string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	printable := func(s string) string {
		return strings.Map(func(r rune) rune {
			if !unicode.IsPrint(r) {
				return -1
			}
			return r
		}, s)
	}
	host, what = printable(host), printable(what)
	if len(what) > maxWhat {
		what = strings.ToValidUTF8(what[:maxWhat], "")
	}
	tail := "/" + strconv.Itoa(os.Getpid()) + " " + what
	if room := redlock.MaxIdentity - len(tail); len(host) > room {
		host = strings.ToValidUTF8(host[:max(room, 0)], "")
	}
	return host + tail
}

// maxWhat bounds the command's name in an identity.
const maxWhat = 24

// stopped is why a hold was told to end: a signal, or stdin closing.
type stopped struct{ sig os.Signal }

func (s stopped) Error() string {
	if s.sig == nil {
		return "standard input closed"
	}
	return "signal " + s.sig.String()
}

// errWaitOver ends the wait for the lock when --wait has passed.
var errWaitOver = errors.New("--wait passed")

// holding is one hold: acquire, print, keep, release.
type holding struct {
	holdVerbFlags
	resources []string
	stdout    io.Writer
	stderr    io.Writer
	log       *slog.Logger
	identity  string

	// The wait: written by the acquire's observer, --wait's timer and fn.
	mu   sync.Mutex
	made bool                    // an acquire attempt was lost (made whole)
	over bool                    // --wait has passed
	held bool                    // fn ran: the lock is held
	stop context.CancelCauseFunc // ends the hold's context; set before anything may call it
}

// hold holds the lock until told to stop, and returns the exit code and
// its --report kind.
func (h *holding) hold(nodes []node) (int, string) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	h.stop = stop
	done := make(chan struct{})
	var watched sync.WaitGroup
	watched.Add(1)
	go func() {
		defer watched.Done()
		select {
		case s := <-sigs:
			h.log.Info("signal", "signal", s)
			stop(stopped{sig: s})
		case <-done:
		}
	}()
	defer watched.Wait()
	defer close(done)
	if h.untilStdin {
		// Blocked in a read of stdin until it closes: it cannot be called
		// off, and ends with the process.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop(stopped{})
		}()
	}

	rl, err := redlock.New(clients(nodes), redlock.WithNodeTimeout(h.nodeTimeout), redlock.WithFencing(h.fencing),
		redlock.WithPermits(h.permits), redlock.WithShared(h.shared), redlock.WithFairQueue(h.fair),
		redlock.WithIdentity(h.identity), redlock.WithErrorHandler(nodeTrouble(h.log)),
		// Extended when half the ttl is left, as run does.
		redlock.WithAutomaticExtensionThreshold(h.ttl/2))
	if err != nil {
		fmt.Fprintf(h.stderr, "redlock hold: %s\n", plain(err, nodes...))
		return exitUsage, kindUsage
	}
	defer func() {
		if err := rl.Close(); err != nil {
			h.log.Warn("a release may not have reached every node", "err", plain(err))
		}
	}()

	observer := &redlock.Observer{Attempt: h.attempt, Done: func(c redlock.CallInfo) {
		if c.Op == redlock.OpExtend && c.Err == nil {
			h.log.Info("extended", "resources", h.resources)
		}
	}}
	opts := []redlock.Option{redlock.WithRetryCount(-1), redlock.WithObserver(observer)}
	if !h.wait.forever && h.wait.d == 0 {
		opts = []redlock.Option{redlock.WithRetryCount(0), redlock.WithObserver(observer)}
	} else if !h.wait.forever {
		t := time.AfterFunc(h.wait.d, h.passed)
		defer t.Stop()
	}
	fn := func(fctx context.Context) error {
		h.mu.Lock()
		if ctx.Err() != nil {
			// Told to stop (or --wait passed) as the lock was granted:
			// it is released, and never said to be held.
			h.mu.Unlock()
			return nil
		}
		h.held = true
		h.mu.Unlock()
		token, _ := redlock.TokenFrom(fctx)
		value, _ := redlock.ValueFrom(fctx)
		h.log.Info("acquired", "resources", h.resources, "token", token)
		fmt.Fprintf(h.stdout, "held value=%s token=%d\n", value, token)
		<-fctx.Done()
		if cause := context.Cause(fctx); errors.Is(cause, redlock.ErrExtensionFailed) {
			return cause
		}
		return nil
	}
	var other error // the last try that found a lock of another kind
	for {
		err = rl.Using(ctx, h.resources, h.ttl, fn, opts...)
		// A lock of another kind holds it: the library ends the call at
		// once, as retrying cannot change the kind; its holder may go, so
		// the wait goes on as for any holder.
		if err != nil && mixedKinds(err) != "" {
			other = err
		}
		if err == nil || h.isHeld() || mixedKinds(err) == "" || !h.waitOn(ctx) {
			break
		}
	}
	return h.end(ctx, waitEnded(err, other))
}

// attempt is the acquire's observer: a lost attempt, made whole, lets
// --wait end the wait.
func (h *holding) attempt(a redlock.AttemptInfo) {
	if a.Op != redlock.OpAcquire || a.Won {
		return // a won attempt is never cut short: the grant goes on
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.made = true
	if h.over && !h.held {
		h.stop(errWaitOver)
	}
}

// passed is called when --wait has passed.
func (h *holding) passed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.over = true
	if h.made && !h.held {
		h.stop(errWaitOver)
	}
}

// isHeld reports whether the lock was held.
func (h *holding) isHeld() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// waitOn pauses before another try after an attempt that found a lock of
// another kind, and reports whether to try again.
func (h *holding) waitOn(ctx context.Context) bool {
	h.attempt(redlock.AttemptInfo{Op: redlock.OpAcquire})
	if !h.wait.forever && h.wait.d == 0 {
		return false
	}
	return sleep(ctx, 200*time.Millisecond+time.Duration(rand.Int64N(int64(100*time.Millisecond))))
}

// end turns what Using returned into the exit code and its kind.
func (h *holding) end(ctx context.Context, err error) (int, string) {
	cause := context.Cause(ctx)
	var st stopped
	if h.isHeld() {
		switch {
		case errors.Is(err, redlock.ErrExtensionFailed):
			// The extension's own error: the library's wrapper names fn.
			fmt.Fprintf(h.stderr, "redlock hold: the lock on %s was lost while held: %s\n", strings.Join(h.resources, ","), plain(extension(err)))
			return exitLost, kindLost
		case errors.Is(err, redlock.ErrLockExpired):
			fmt.Fprintf(h.stderr, "redlock hold: the lock on %s was lost while held (force-released, or taken after it expired): %s\n",
				strings.Join(h.resources, ","), plain(err))
			return exitLost, kindLost
		case err != nil:
			fmt.Fprintf(h.stderr, "redlock hold: the release of %s did not reach a quorum; the lock expires within --ttl %v: %s\n",
				strings.Join(h.resources, ","), h.ttl, plain(err))
			return exitUnavailable, kindUnavailable
		}
		h.log.Info("released", "resources", h.resources, "why", cause)
		return 0, kindReleased
	}
	switch {
	case errors.As(cause, &st) && st.sig != nil:
		return 128 + int(st.sig.(syscall.Signal)), kindSignal
	case errors.As(cause, &st):
		fmt.Fprintf(h.stderr, "redlock hold: standard input closed before the lock on %s was held\n", strings.Join(h.resources, ","))
		return h.conflict, kindConflict
	case err == nil:
		// fn saw the stop as the lock was granted (--wait passed).
		return h.conflict, kindConflict
	case mixedKinds(err) != "":
		fmt.Fprintf(h.stderr, "redlock hold: %s holds it: every holder of a resource must take the same kind (the same --permits, or --shared and exclusive holders)\n", mixedKinds(err))
		return h.conflict, kindConflict
	case errors.Is(err, redlock.ErrResourceLocked):
		h.log.Info("held by another lock", "resources", h.resources, "err", plain(err))
		return h.conflict, kindConflict
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(h.stderr, "redlock hold: %s\n", plain(err))
		return exitUsage, kindUsage
	case errors.Is(cause, errWaitOver):
		fmt.Fprintf(h.stderr, "redlock hold: no quorum when --wait %v ended: %s\n", &h.wait, plain(err))
		return exitUnavailable, kindUnavailable
	}
	fmt.Fprintf(h.stderr, "redlock hold: %s\n", plain(err))
	return exitUnavailable, kindUnavailable
}
