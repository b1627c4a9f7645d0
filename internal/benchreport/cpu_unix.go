//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(fmt.Errorf("getrusage: %w", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pauseProcess stops a process (SIGSTOP) until resume.
func pauseProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resume continues a process pauseProcess stopped.
func resume(p *os.Process) { p.Signal(syscall.SIGCONT) }
