package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The RSS row splits a process's file-backed pages by what is mapped: the
// ledger's tables, Badger's logs (the memtable's and the value log), the
// program itself, and anything else; anonymous pages are left out.
func TestResidentMappingsAreSplitByWhatIsMapped(t *testing.T) {
	smaps := `00400000-010c3000 r-xp 00000000 fe:00 9978805                            /data/ratchet
Size:              13068 kB
Rss:               10240 kB
Anonymous:             0 kB
01f9d000-02047000 rw-p 01b9d000 fe:00 9978805                            /data/ratchet
Rss:                1024 kB
Anonymous:           512 kB
c000000000-c004000000 rw-p 00000000 00:00 0 
Rss:               65536 kB
Anonymous:         65536 kB
7fb5b042e000-7fb5b0619000 rw-s 00000000 fe:00 9986172                    /data/ledger/000493.sst
Rss:                 100 kB
7fb5b0619000-7fb5b080c000 rw-s 00000000 fe:00 9986244                    /data/ledger/001169.sst
Rss:                  60 kB
7fb5b1000000-7fb5b3000000 rw-s 00000000 fe:00 9986245                    /data/ledger/00042.mem
Rss:                4096 kB
7fb5b3000000-7fb5b3100000 rw-s 00000000 fe:00 9986246                    /data/ledger/000001.vlog
Rss:                   4 kB
7fb5b4000000-7fb5b4200000 r--p 00000000 fe:00 1234                       /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1024 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                 132 kB
Anonymous:           132 kB
`
	got := fileResident([]byte(smaps), "/data/ratchet")
	want := fileMiB{tables: 160.0 / 1024, logs: 4100.0 / 1024, binary: 10.5, other: 1}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(fileMiB{})); diff != "" {
		t.Fatalf("file-backed resident pages by mapping (-want +got):\n%s", diff)
	}
}
