//go:build !linux

package main

import "time"

// backendCPU would read a server process's CPU time; only Linux's /proc is
// read, so elsewhere the figure is not reported.
func backendCPU(uint32) (time.Duration, bool) { return 0, false }
