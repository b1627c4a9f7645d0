package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// deviceWritten is the bytes the block device holding dir has written
// (/sys/dev/block/<major>:<minor>/stat, sectors written times 512), -1
// where that cannot be read. It counts every process's writes, so the
// scale section reads it only around a side's own slices, the other side
// paused.
func deviceWritten(dir string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return -1
	}
	major, minor := (st.Dev>>8)&0xfff|(st.Dev>>32)&^0xfff, st.Dev&0xff|(st.Dev>>12)&^0xff
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", major, minor))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return -1
	}
	n, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return -1
	}
	return n * 512
}
