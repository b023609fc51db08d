package main

import (
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
func startWatcher(stderr io.Writer) *watcher {
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
	fmt.Fprintf(stderr, "redlock run: cannot start the watcher that stops the command if redlock is killed: %v\n", err)
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
