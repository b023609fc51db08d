package main

import "syscall"

// deathSignal makes the kernel send SIGKILL to the command when the thread
// that started it exits: redlock's death (the thread is locked while the
// command runs; see run).
func deathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
