package main

import (
	"os"
	"testing"
	"time"
)

func TestBackendCPUReadsAProcessOfThisMachine(t *testing.T) {
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) { // use some CPU to be counted
	}
	d, ok := backendCPU(uint32(os.Getpid()))
	if !ok || d <= 0 || d > processCPU()+time.Second/userHZ {
		t.Errorf("backendCPU(self) = %v, getrusage says %v", d, processCPU())
	}
}
