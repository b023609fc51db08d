//go:build !linux

package main

import "syscall"

// deathSignal does nothing where the kernel has no parent-death signal: the
// watcher alone stops the command when redlock dies.
func deathSignal(*syscall.SysProcAttr) {}
