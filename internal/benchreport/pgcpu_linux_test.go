package main

import (
	"os"
	"testing"
	"time"
)

func TestBackendCPUReadsAProcessOfThisMachine(t *testing.T) {
	for processCPU() < 5*time.Second/userHZ { // some CPU to be counted, however loaded the machine
	}
	d, ok := backendCPU(uint32(os.Getpid()))
	if !ok || d <= 0 || d > processCPU()+time.Second/userHZ {
		t.Errorf("backendCPU(self) = %v, getrusage says %v", d, processCPU())
	}
}
