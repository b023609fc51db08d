package main

import (
	"bytes"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// groupAlive reports whether any process of process group pgid is still
// running (zombies, which a slow init may leave for a while, do not count).
func groupAlive(pgid int) bool {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return syscall.Kill(-pgid, 0) == nil // no /proc: ask the kernel
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(b[i+1:])
		if len(fields) < 3 || string(fields[0]) == "Z" {
			continue
		}
		if pg, err := strconv.Atoi(string(fields[2])); err == nil && pg == pgid {
			return true
		}
	}
	return false
}

// stopGroup ends what is left of process group pgid: SIGTERM, and SIGKILL
// after grace if anything still runs. It returns once nothing runs, or the
// SIGKILL was sent.
func stopGroup(pgid int, grace time.Duration) {
	if !groupAlive(pgid) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !groupAlive(pgid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// terminal returns the file descriptor of redlock's controlling terminal
// when its stdin is that terminal and redlock's process group is in its
// foreground, or -1. The command is then put in the foreground instead, so
// that it can read the terminal (a background group that reads is stopped
// with SIGTTIN) and gets the terminal's signals (Ctrl-C) itself.
func terminal() int {
	fd := int(os.Stdin.Fd())
	var fg int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&fg))); e != 0 {
		return -1
	}
	if int(fg) != syscall.Getpgrp() {
		return -1
	}
	return fd
}

// takeTerminal puts redlock's own process group back in the foreground of
// the terminal fd, once the command has exited.
func takeTerminal(fd int) {
	// A background group that sets the foreground gets SIGTTOU unless it
	// ignores it.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pg := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pg)))
}
