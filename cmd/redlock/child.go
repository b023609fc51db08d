package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The command's life, the same for run (under a lock) and elect (under a
// term): started in a process group of its own that dies with redlock
// (deathSignal, the watcher of watch.go), at a terminal in its foreground,
// with redlock's signals passed on to the group, and stopped (SIGTERM,
// SIGKILL after the grace) as soon as what it runs under is lost. What the
// command leaves running in its group when it exits is stopped while the
// lock or term is still kept, so that nothing of it runs unprotected.

// forwarded are the signals that redlock passes to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// child is one start of the command.
type child struct {
	verb      string   // "run" or "elect", for messages
	command   []string // the program and its arguments
	env       []string // added to redlock's environment
	killGrace time.Duration
	stderr    io.Writer
	log       *slog.Logger
}

// keepFunc keeps what the command runs under (a lock, a term) until ctx
// ends. It calls lost, at most once, when that is lost: the command must
// stop. why says what was lost and why, for a person.
type keepFunc func(ctx context.Context, lost func(why string))

// ended is how one start of the command ended.
type ended struct {
	code    int         // the command's exit code, 128+n when signal n killed it; 126 or 127 when it did not start
	started bool        // the command was started
	lost    bool        // what it ran under was lost, and the command was told to stop
	signals []os.Signal // the signals passed on to it, in order
}

// run starts the command, keeps what it runs under with keep while it
// runs, passes the signals that come on sigs to its process group, and
// returns once the command and everything left in its group have exited,
// and keep has returned. Nothing it started outlives it.
func (c *child) run(sigs <-chan os.Signal, keep keepFunc) ended {
	cmd := exec.Command(c.command[0], c.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, signalled as one
	deathSignal(cmd.SysProcAttr)                          // dies with redlock (see watch.go)
	tty := terminal()
	if tty >= 0 {
		// At a terminal, the command's group takes the foreground: it can
		// read the terminal, and gets Ctrl-C itself.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	cmd.Env = append(withoutNodes(os.Environ()), c.env...)
	// The parent-death signal comes when the thread that started the
	// command exits: this goroutine keeps its thread until the command
	// has exited, so that only redlock's death sends it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := startWatcher(c.verb, c.stderr)
	defer w.done()
	if code, err := gated(cmd, w); err != nil {
		if tty >= 0 && cmd.Process != nil {
			takeTerminal(tty) // the gate took the foreground before its exec failed
		}
		fmt.Fprintf(c.stderr, "redlock %s: cannot run %q: %v\n", c.verb, c.command[0], err)
		return ended{code: code}
	}
	group := cmd.Process.Pid // told to the watcher before the command ran

	// Keep the lock or term while the command runs; pass signals on to it.
	l := &loss{group: group, grace: c.killGrace, lost: make(chan struct{}), killed: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		keep(ctx, func(why string) {
			l.tell(func() {
				fmt.Fprintf(c.stderr, "redlock %s: %s; sending the command SIGTERM, and SIGKILL in %v\n", c.verb, why, c.killGrace)
			})
		})
	}()
	exited, passed := make(chan struct{}), make(chan struct{})
	var signals []os.Signal // written by the goroutine below until passed is closed
	go func() {
		defer close(passed)
		for {
			select {
			case s := <-sigs:
				c.log.Info("passing a signal to the command", "signal", s)
				signals = append(signals, s)
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
	code := exitCode(cmd, waitErr)
	select {
	case <-l.lost:
		// What is left of the group (children that ignore SIGTERM) is
		// killed at the end of the grace, before redlock goes on.
		if groupAlive(group) {
			<-l.killed
		}
	default:
		// The command has exited; what it left running in its group
		// (a child in the background) is still protected: it is stopped
		// (SIGTERM, then SIGKILL after the grace) while the lock or term
		// is still kept.
		if groupAlive(group) {
			c.log.Warn("the command exited and left processes in its group: stopping them before letting go", "grace", c.killGrace)
			stopGroup(group, c.killGrace)
		}
	}
	w.done() // nothing of the group runs any more
	close(exited)
	<-passed
	stop()
	<-kept // from here on, nothing calls lost
	return ended{code: code, started: true, lost: l.end(), signals: signals}
}

// loss is what a child does when what its command runs under is lost:
// SIGTERM to the group at once, SIGKILL after the grace unless the child
// ended first.
type loss struct {
	group  int
	grace  time.Duration
	once   sync.Once
	lost   chan struct{} // closed once told
	killed chan struct{} // closed once the SIGKILL was sent
	timer  *time.Timer   // the SIGKILL's; set before lost is closed
}

// tell stops the group (once), after say.
func (l *loss) tell(say func()) {
	l.once.Do(func() {
		say()
		_ = syscall.Kill(-l.group, syscall.SIGTERM)
		l.timer = time.AfterFunc(l.grace, func() {
			defer close(l.killed)
			// The group may be gone: then the error is ignored. (Linux
			// keeps a process group's id from being reused while any
			// member lives.)
			_ = syscall.Kill(-l.group, syscall.SIGKILL)
		})
		close(l.lost)
	})
}

// end reports whether the group was told to stop, once nothing can tell it
// any more; a SIGKILL still to come is called off (the group is gone: its
// id may be reused by then), or waited for when it is being sent.
func (l *loss) end() bool {
	select {
	case <-l.lost:
	default:
		return false
	}
	if !l.timer.Stop() {
		<-l.killed
	}
	return true
}

// untilSignal calls call with a context derived from ctx that ends when a
// signal comes on sigs, and returns that signal (nil when none came). A
// signal for which ignore reports true is dropped (ignore may be nil).
func untilSignal(ctx context.Context, sigs <-chan os.Signal, ignore func(os.Signal) bool, call func(ctx context.Context)) os.Signal {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sig os.Signal // written by the goroutine below until watched is closed
	stopped, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case s := <-sigs:
				if ignore != nil && ignore(s) {
					continue
				}
				sig = s
				cancel()
				return
			case <-stopped:
				return
			}
		}
	}()
	call(ctx)
	close(stopped)
	<-watched
	return sig
}

// nodeVars are the variables of redlock's environment that hold node URLs,
// passwords included: the command does not get them (the nodes' passwords
// are redlock's; a command that needs Redis is given its own URL).
var nodeVars = []string{"REDLOCK_NODES"}

// withoutNodes returns env without nodeVars.
func withoutNodes(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(nodeVars, name) {
			kept = append(kept, kv)
		}
	}
	return kept
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
