package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/windows"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var created, exited, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(windows.CurrentProcess(), &created, &exited, &kernel, &user); err != nil {
		fail(fmt.Errorf("GetProcessTimes: %w", err))
	}
	// A FILETIME counts 100-nanosecond intervals.
	ticks := func(f windows.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ticks(kernel) + ticks(user)) * 100)
}

// pauseProcess would stop a process; the scale section's slices need it,
// and Windows has no SIGSTOP.
func pauseProcess(*os.Process) error {
	return errors.New("pausing a process is not supported on Windows")
}

// resume continues a process pauseProcess stopped.
func resume(*os.Process) {}
