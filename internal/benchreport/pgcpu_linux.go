package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go builds for.
const userHZ = 100

// backendCPU is the CPU time (user and system) process pid has used, read
// from /proc: false when it cannot be read (the server on another machine,
// or the process gone).
func backendCPU(pid uint32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (utime and stime are the 14th and
	// 15th fields of the line, the 12th and 13th after it).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+k) * time.Second / userHZ, true
}
