package main

import (
	"fmt"
	"os"
	"time"
)

// backendCPU is the CPU time (user and system) process pid has used, read
// from /proc: false when it cannot be read (the server on another machine,
// or the process gone).
func backendCPU(pid uint32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return statCPU(b)
}
