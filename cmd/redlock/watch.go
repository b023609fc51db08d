package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// A command must never outlive its lock, even when redlock is killed with
// SIGKILL (by hand, by the OOM killer, by a runtime that kills only the main
// process): nothing of redlock then runs to stop the command, and the lock
// expires while the command still works. Two things stop it:
//
//   - The command's own process gets SIGKILL from the kernel as soon as
//     redlock dies (Linux's parent-death signal; see deathSignal).
//   - A watcher, a second redlock process in a process group of its own that
//     ignores the usual signals, holds the read end of a pipe whose write end
//     only redlock has. When redlock dies, the kernel closes that end, and the
//     watcher kills the command's whole process group (what the command
//     started in the background too), then exits. When redlock ends as it
//     should, it tells the watcher so first, and the watcher kills nothing.
//
// The watcher can only kill a group it knows: the command is started as a
// gate (gateVerb, redlock again) that waits until redlock has told the
// watcher the group, and only then becomes the command (execve). Started
// directly, the command could start children in the moment between its
// start and the watcher's hearing of it; redlock killed in that moment left
// them running.
//
// What remains: a process that left the command's group (setsid), and, on
// systems other than Linux, the moment between redlock's death and the
// watcher's kill.

// watchVerb is the watcher: it reads the command's process group from
// stdin, then waits for stdin to end.
func watchVerb() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	b, _ := io.ReadAll(os.Stdin) // until redlock says done, or dies
	fields := strings.Fields(string(b))
	if len(fields) == 0 || fields[len(fields)-1] == "done" {
		return 0
	}
	if pgid, err := strconv.Atoi(fields[0]); err == nil && pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return 0
}

// watcher is redlock's side of the watcher process.
type watcher struct {
	pipe *os.File
	proc *exec.Cmd
}

// startWatcher starts the watcher, or returns nil (and says why) when it
// cannot: then only the parent-death signal stops the command.
func startWatcher(verb string, stderr io.Writer) *watcher {
	self, err := os.Executable()
	if err == nil {
		var r, w *os.File
		if r, w, err = os.Pipe(); err == nil {
			proc := exec.Command(self, watchVerbName)
			proc.Stdin = r
			proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // out of reach of signals to redlock's group
			err = proc.Start()
			_ = r.Close() // the watcher has it
			if err == nil {
				return &watcher{pipe: w, proc: proc}
			}
			_ = w.Close()
		}
	}
	fmt.Fprintf(stderr, "redlock %s: cannot start the watcher that stops the command if redlock is killed: %v\n", verb, err)
	return nil
}

// watch tells the watcher the command's process group.
func (w *watcher) watch(pgid int) {
	if w != nil {
		_, _ = fmt.Fprintf(w.pipe, "%d\n", pgid)
	}
}

// done tells the watcher that nothing of the command runs any more, and
// waits for it to exit. It may be called more than once.
func (w *watcher) done() {
	if w == nil || w.pipe == nil {
		return
	}
	_, _ = io.WriteString(w.pipe, "done\n")
	_ = w.pipe.Close()
	w.pipe = nil
	_ = w.proc.Wait()
}

// watchVerbName is the watcher's verb: not for people, and not in the help.
const watchVerbName = "__watch-group"

// gateVerbName is the gate's verb: not for people, and not in the help.
const gateVerbName = "__exec-gate"

// The gate's pipes: it reads "go" on gateGo, and says on gateStatus why
// the command could not be run (gateStatus is closed on exec: nothing to
// read means the command runs).
const (
	gateGo     = 3
	gateStatus = 4
)

// gateVerb is the gate: "__exec-gate PATH ARG0 ARG..." waits for redlock's
// go, then becomes PATH with the arguments ARG0 ARG..., in the same
// process (its group, its parent-death signal, its terminal). Without the
// go (redlock died first) it exits: nothing of the command ran.
func gateVerb(args []string) int {
	goPipe, status := os.NewFile(gateGo, "go"), os.NewFile(gateStatus, "status")
	b, _ := io.ReadAll(goPipe)
	_ = goPipe.Close()
	if string(b) != "go\n" || len(args) < 2 {
		return exitCannotRun
	}
	syscall.CloseOnExec(gateStatus)
	err := syscall.Exec(args[0], args[1:], os.Environ())
	code := cannotStart(err)
	fmt.Fprintf(status, "%d %v", code, err)
	return code
}

// cannotStart is the exit code for a command that could not be started
// with err: 127 when it was not found, else 126.
func cannotStart(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// gated starts cmd behind a gate, tells w its process group, and opens the
// gate. It returns cmd started as the command, or the error that kept the
// command from running and the exit code for it (cmd has then exited).
// Without a watcher, or when redlock cannot find its own executable, cmd
// is started directly: then no moment needs closing.
func gated(cmd *exec.Cmd, w *watcher) (int, error) {
	self, err := os.Executable()
	if w == nil || err != nil {
		if err := cmd.Start(); err != nil {
			return cannotStart(err), err
		}
		w.watch(cmd.Process.Pid)
		return 0, nil
	}
	if cmd.Err != nil { // not found in $PATH
		return cannotStart(cmd.Err), cmd.Err
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return exitCannotRun, err
	}
	defer goW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		_ = goR.Close()
		return exitCannotRun, err
	}
	defer stR.Close()
	path, args := cmd.Path, cmd.Args
	cmd.Path, cmd.Args = self, append([]string{self, gateVerbName, path}, args...)
	cmd.ExtraFiles = []*os.File{goR, stW} // fds 3 and 4 (gateGo, gateStatus)
	err = cmd.Start()
	_, _ = goR.Close(), stW.Close() // the gate has them
	if err != nil {
		return exitCannotRun, err
	}
	w.watch(cmd.Process.Pid)
	_, _ = io.WriteString(goW, "go\n")
	_ = goW.Close()
	b, _ := io.ReadAll(stR) // until the exec closes it
	if len(b) == 0 {
		return 0, nil
	}
	_ = cmd.Wait()
	code, why, _ := strings.Cut(string(b), " ")
	n, _ := strconv.Atoi(code)
	return n, errors.New(why)
}
