package badger

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
)

// Tests of Ratchet's patch keepUntouched (levels.go): an L0->Lbase
// compaction leaves in place the base tables none of its keys fall in.

// compactL0ToL1 runs one L0->L1 compaction as a compactor would, with L1 as
// the base level.
func compactL0ToL1(t *testing.T, db *DB) {
	t.Helper()
	tg := db.lc.levelTargets()
	tg.baseLevel = 1
	if err := db.lc.doCompact(0, compactionPriority{level: 0, t: tg}); err != nil {
		t.Fatalf("L0->L1 compaction: %v", err)
	}
	if n := db.lc.levels[0].numTables(); n != 0 {
		t.Fatalf("after the L0->L1 compaction level 0 has %d tables, want 0", n)
	}
}

// tableIDs lists level l's table IDs in the level's order.
func tableIDs(db *DB, l int) []uint64 {
	lh := db.lc.levels[l]
	lh.RLock()
	defer lh.RUnlock()
	var ids []uint64
	for _, t := range lh.tables {
		ids = append(ids, t.ID())
	}
	return ids
}

// checkLevelsDisjoint fails unless every level from 1 on is sorted and no two
// of its tables share a user key.
func checkLevelsDisjoint(t *testing.T, db *DB) {
	t.Helper()
	for l := 1; l < len(db.lc.levels); l++ {
		lh := db.lc.levels[l]
		lh.RLock()
		for i := 1; i < len(lh.tables); i++ {
			prev, cur := lh.tables[i-1], lh.tables[i]
			if bytes.Compare(y.ParseKey(prev.Biggest()), y.ParseKey(cur.Smallest())) >= 0 {
				t.Errorf("level %d: table %d [%q, %q] then table %d [%q, %q]: overlapping or out of order",
					l, prev.ID(), y.ParseKey(prev.Smallest()), y.ParseKey(prev.Biggest()),
					cur.ID(), y.ParseKey(cur.Smallest()), y.ParseKey(cur.Biggest()))
			}
		}
		lh.RUnlock()
	}
}

// checkFilesAreTheLevels fails unless the directory's tables are exactly
// the manifest's, and the manifest's are exactly the levels' (each at its
// level).
func checkFilesAreTheLevels(t *testing.T, db *DB) {
	t.Helper()
	inLevels := map[uint64]int{}
	for l, lh := range db.lc.levels {
		lh.RLock()
		for _, tb := range lh.tables {
			inLevels[tb.ID()] = l
		}
		lh.RUnlock()
	}
	db.manifest.appendLock.Lock()
	mf := db.manifest.manifest.clone(db.opt)
	db.manifest.appendLock.Unlock()
	inManifest := map[uint64]int{}
	for id, tm := range mf.Tables {
		inManifest[id] = int(tm.Level)
	}
	if !maps.Equal(inLevels, inManifest) {
		t.Errorf("levels' tables (id: level) %v, manifest's %v", inLevels, inManifest)
	}
	files, err := filepath.Glob(filepath.Join(db.opt.Dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[uint64]int{}
	for _, f := range files {
		id, ok := table.ParseFileID(f)
		if !ok {
			t.Fatalf("table file %s: no ID", f)
		}
		onDisk[id] = inManifest[id]
		if _, ok := inManifest[id]; !ok {
			t.Errorf("table file %s is in no level of the manifest", f)
		}
	}
	for id := range inManifest {
		if _, ok := onDisk[id]; !ok {
			t.Errorf("the manifest's table %d has no file", id)
		}
	}
}

// A DB whose keys are written in time order under several prefixes, with
// some old keys updated and some deleted in each batch, each batch flushed
// and compacted from L0 into L1 (its keys span all of L1): most of L1's
// tables, the ones its keys do not fall in, survive its compaction (the
// same table IDs), L1 stays sorted and disjoint,
// the manifest and the table files match the levels, and every key reads its
// latest value, a deleted one none, before and after the DB is reopened.
func TestAnL0CompactionKeepsTheBaseTablesItsKeysMiss(t *testing.T) {
	dir := t.TempDir()
	opt := DefaultOptions(dir).
		WithMemTableSize(8 << 20).
		WithBaseTableSize(64 << 10).
		WithBlockSize(4 << 10).
		WithCompression(options.None).
		WithNumCompactors(0).
		WithNumLevelZeroTables(100).
		WithNumLevelZeroTablesStall(200).
		WithMemTableLog(false).
		WithLogger(nil)
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()

	prefixes := []string{"a", "e", "h", "n", "z"}
	const perBatch = 600 // keys per prefix per batch: about 70 KiB, a table and a bit
	want := map[string]string{}
	deleted := map[string]bool{}
	seq := 0
	val := func(k string, batch int) string {
		return fmt.Sprintf("%s@%d:%s", k, batch, strings.Repeat("v", 100))
	}
	var survivedAny bool
	for batch := 0; batch < 8; batch++ {
		err := db.Update(func(txn *Txn) error {
			for i := 0; i < perBatch; i++ {
				for _, p := range prefixes {
					k := fmt.Sprintf("%s/%08d", p, seq+i)
					want[k] = val(k, batch)
					if err := txn.Set([]byte(k), []byte(want[k])); err != nil {
						return err
					}
				}
			}
			// A key before every other, so that the batch's range spans all of L1.
			first := fmt.Sprintf("0/%08d", batch)
			want[first] = val(first, batch)
			if err := txn.Set([]byte(first), []byte(want[first])); err != nil {
				return err
			}
			if batch == 0 {
				return nil
			}
			// An update and a delete of two keys of the first batch, each batch
			// other ones: the tables that hold them must be rewritten.
			upd := fmt.Sprintf("e/%08d", batch*37)
			want[upd] = val(upd, batch)
			if err := txn.Set([]byte(upd), []byte(want[upd])); err != nil {
				return err
			}
			del := fmt.Sprintf("n/%08d", batch*53)
			delete(want, del)
			deleted[del] = true
			return txn.Delete([]byte(del))
		})
		if err != nil {
			t.Fatal(err)
		}
		seq += perBatch
		if err := db.FlushMemTables(); err != nil {
			t.Fatal(err)
		}
		before := tableIDs(db, 1)
		compactL0ToL1(t, db)
		after := tableIDs(db, 1)
		var survived []uint64
		for _, id := range before {
			if slices.Contains(after, id) {
				survived = append(survived, id)
			}
		}
		// Its keys fall in a few of L1's tables and past the end of each
		// prefix's: most of the tables before it must survive.
		if batch >= 2 && 2*len(survived) < len(before) {
			t.Errorf("batch %d: %d of L1's %d tables survived the L0->L1 compaction, want at least half (before %v, after %v)",
				batch, len(survived), len(before), before, after)
		}
		t.Logf("batch %d: %d of L1's %d tables survived its compaction; L1 has %d", batch, len(survived), len(before), len(after))
		survivedAny = survivedAny || len(survived) > 0
		checkLevelsDisjoint(t, db)
		checkFilesAreTheLevels(t, db)
	}
	if !survivedAny {
		t.Error("no compaction kept an L1 table")
	}
	checkReads := func(db *DB, when string) {
		t.Helper()
		err := db.View(func(txn *Txn) error {
			for k, v := range want {
				item, err := txn.Get([]byte(k))
				if err != nil {
					return fmt.Errorf("%s: get %q: %w", when, k, err)
				}
				got, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if string(got) != v {
					t.Errorf("%s: %q reads %q, want %q", when, k, got, v)
				}
			}
			for k := range deleted {
				if _, err := txn.Get([]byte(k)); !errors.Is(err, ErrKeyNotFound) {
					t.Errorf("%s: deleted %q: get returns %v, want ErrKeyNotFound", when, k, err)
				}
			}
			// Iteration sees each key once, in order, and no other.
			it := txn.NewIterator(DefaultIteratorOptions)
			defer it.Close()
			n := 0
			var last []byte
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().KeyCopy(nil)
				if last != nil && bytes.Compare(last, k) >= 0 {
					t.Errorf("%s: iteration gives %q after %q", when, k, last)
				}
				if _, ok := want[string(k)]; !ok {
					t.Errorf("%s: iteration gives %q, which is not written or is deleted", when, k)
				}
				last = k
				n++
			}
			if n != len(want) {
				t.Errorf("%s: iteration gives %d keys, want %d", when, n, len(want))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checkReads(db, "before reopening")

	levels := [][]uint64{}
	for l := range db.lc.levels {
		levels = append(levels, tableIDs(db, l))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	for l := range db.lc.levels {
		if got := tableIDs(db, l); !slices.Equal(got, levels[l]) {
			t.Errorf("after reopening level %d has tables %v, before %v", l, got, levels[l])
		}
	}
	checkLevelsDisjoint(t, db)
	checkReads(db, "after reopening")
}

// kv is a key, its version and value for buildTableAt; a nil value is a
// deletion.
type kv struct {
	key     string
	version uint64
	value   []byte
}

// buildTableAt writes a table of the entries (sorted here by key, newest
// version first) into the DB's manifest and level l, as a flush or a
// compaction would.
func buildTableAt(t *testing.T, db *DB, l int, entries []kv) *table.Table {
	t.Helper()
	sort.Slice(entries, func(i, j int) bool {
		return y.CompareKeys(y.KeyWithTs([]byte(entries[i].key), entries[i].version),
			y.KeyWithTs([]byte(entries[j].key), entries[j].version)) < 0
	})
	b := table.NewTableBuilder(buildTableOptions(db))
	defer b.Close()
	for _, e := range entries {
		vs := y.ValueStruct{Value: e.value}
		if e.value == nil {
			vs.Meta = bitDelete
		}
		b.Add(y.KeyWithTs([]byte(e.key), e.version), vs, 0)
	}
	tb, err := table.CreateTable(table.NewFilename(db.lc.reserveFileID(), db.opt.Dir), b)
	if err != nil {
		t.Fatal(err)
	}
	err = db.manifest.addChanges([]*pb.ManifestChange{
		newCreateChange(tb.ID(), l, tb.KeyID(), tb.CompressionType()),
	}, db.opt)
	if err != nil {
		t.Fatal(err)
	}
	lh := db.lc.levels[l]
	if l == 0 {
		lh.Lock()
		lh.addLevel0TableLocked(tb)
		lh.Unlock()
	} else {
		lh.addTable(tb)
		lh.sortTables()
	}
	_ = tb.DecrRef() // the level holds it
	return tb
}

// run makes entries of version v for prefix+"%02d" from i to j (included),
// each value vsize bytes.
func run(prefix string, i, j int, v uint64, vsize int) []kv {
	var out []kv
	for n := i; n <= j; n++ {
		k := fmt.Sprintf("%s%02d", prefix, n)
		out = append(out, kv{k, v, []byte(fmt.Sprintf("%s@%d:%s", k, v, strings.Repeat("x", vsize)))})
	}
	return out
}

// The exact tables an L0->L1 compaction rewrites for a built layout: the
// ones an L0 key falls in (inside, at the first user key, at the last), a
// small one next to L0 keys, and one that shares its last user key with a
// rewritten table; the others keep their IDs. Every key then reads its
// latest version, the deleted one none, and L1 stays sorted and disjoint.
func TestAnL0CompactionRewritesExactlyTheBaseTablesItsKeysFallIn(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).
		WithBaseTableSize(16 << 10).
		WithBlockSize(1 << 10).
		WithCompression(options.None).
		WithNumCompactors(0).
		WithMemTableLog(false).
		WithLogger(nil)
	db, err := OpenManaged(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()

	// L1, at version 1 (h09 also at 2): ten keys of 1 KiB values a table
	// (about 10 KiB, not small: half the table size is 8 KiB), f's table two.
	const vs = 1 << 10
	l1 := map[string][]kv{
		"a":  run("a", 0, 9, 1, vs),                                        // a05 deleted in L0: rewritten
		"b":  run("b", 0, 9, 1, vs),                                        // b09 (its last key) in L0: rewritten
		"c":  run("c", 0, 9, 1, vs),                                        // c00 (its first key) in L0: rewritten
		"d":  run("d", 0, 9, 1, vs),                                        // d10 in L0, after it: kept
		"e":  run("e", 0, 9, 1, vs),                                        // kept
		"f":  run("f", 0, 1, 1, vs),                                        // small, f05 in L0 after it: rewritten
		"g":  run("g", 0, 9, 1, vs),                                        // kept
		"h1": append(run("h", 0, 8, 1, vs), kv{"h09", 2, []byte("h09@2")}), // shares h09 with h2: rewritten
		"h2": run("h", 9, 19, 1, vs),                                       // h15 in L0: rewritten
		"i":  run("i", 0, 9, 1, vs),                                        // kept
	}
	ids := map[string]uint64{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h1", "h2", "i"} {
		ids[name] = buildTableAt(t, db, 1, l1[name]).ID()
	}
	// L0, at versions 3 (older table) and 4: overlapping ranges, so the
	// compaction takes both. b10 (between b's table and c's) comes right
	// before c00 in its table.
	buildTableAt(t, db, 0, []kv{
		{"0", 3, []byte("0@3")}, {"a05", 3, nil}, {"b10", 3, []byte("b10@3")}, {"c00", 3, []byte("c00@3")},
		{"h15", 3, []byte("h15@3")},
	})
	buildTableAt(t, db, 0, []kv{
		{"b09", 4, []byte("b09@4")}, {"d10", 4, []byte("d10@4")}, {"f05", 4, []byte("f05@4")}, {"z", 4, []byte("z@4")},
	})

	compactL0ToL1(t, db)

	after := tableIDs(db, 1)
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h1", "h2", "i"} {
		wantKept := name == "d" || name == "e" || name == "g" || name == "i"
		if got := slices.Contains(after, ids[name]); got != wantKept {
			t.Errorf("L1 table %s (%d): kept %v, want %v (L1 after: %v)", name, ids[name], got, wantKept, after)
		}
	}
	checkLevelsDisjoint(t, db)
	checkFilesAreTheLevels(t, db)

	want := map[string]string{"0": "0@3", "b10": "b10@3", "c00": "c00@3", "h15": "h15@3", "b09": "b09@4",
		"d10": "d10@4", "f05": "f05@4", "z": "z@4", "h09": "h09@2"}
	for _, entries := range l1 {
		for _, e := range entries {
			if _, ok := want[e.key]; !ok && e.key != "a05" {
				want[e.key] = string(e.value)
			}
		}
	}
	txn := db.NewTransactionAt(math.MaxUint64, false)
	defer txn.Discard()
	for k, v := range want {
		item, err := txn.Get([]byte(k))
		if err != nil {
			t.Errorf("get %q: %v", k, err)
			continue
		}
		got, err := item.ValueCopy(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != v {
			t.Errorf("%q reads %.12q, want %.12q", k, got, v)
		}
	}
	if _, err := txn.Get([]byte("a05")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("a05, deleted in L0: get returns %v, want ErrKeyNotFound", err)
	}
}
