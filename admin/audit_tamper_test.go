package admin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// tamperExport is a fresh export split into its record lines and trailer.
func tamperExport(t *testing.T) ([]ledger.AuditRecord, admin.AuditTrailer, []string) {
	t.Helper()
	c, _ := auditSetup(t)
	var buf bytes.Buffer
	if err := c.AuditExport(context.Background(), time.Time{}, time.Time{}, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	var recs []ledger.AuditRecord
	for _, l := range lines[:len(lines)-1] {
		var r ledger.AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	var tr admin.AuditTrailer
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &tr); err != nil {
		t.Fatal(err)
	}
	return recs, tr, lines
}

// tamperHash is the documented rule: sha256(prev "\n" json(record with hash "")).
func tamperHash(r ledger.AuditRecord) string {
	r.Hash = ""
	b, _ := json.Marshal(&r)
	h := sha256.New()
	h.Write([]byte(r.Prev))
	h.Write([]byte{'\n'})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// tamperWrite renders records and a trailer recomputed from them, as a
// forger with only the file would.
func tamperWrite(recs []ledger.AuditRecord) string {
	tr := admin.AuditTrailer{Heads: map[string]ledger.AuditHeadInfo{}, First: map[string]uint64{}, ExportedAt: time.Now().UTC()}
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(&r)
		b.Write(j)
		b.WriteByte('\n')
		if _, ok := tr.First[r.Chain]; !ok {
			tr.First[r.Chain] = r.Seq
		}
		tr.Heads[r.Chain] = ledger.AuditHeadInfo{Seq: r.Seq, Hash: r.Hash}
		tr.Records++
	}
	j, _ := json.Marshal(&tr)
	b.Write(j)
	b.WriteByte('\n')
	return b.String()
}

func mustNotVerify(t *testing.T, what, export string, known map[string]ledger.AuditHeadInfo) {
	t.Helper()
	sum, brk, err := admin.VerifyExport(strings.NewReader(export), known)
	if err != nil {
		t.Fatal(err)
	}
	if brk == nil {
		t.Errorf("%s: verify passes (%d records, chains %v)", what, sum.Records, sum.Chains)
	}
}

// The first records of the history (the approval and the resolve are in the
// middle/end; here the first 5 begins/reports) go silently.
func TestRecordsDroppedBeforeAKnownHeadAreFound(t *testing.T) {
	recs, _, _ := tamperExport(t)
	// An earlier export ended at the third record: its head is the anchor.
	earlier := map[string]ledger.AuditHeadInfo{recs[2].Chain: {Seq: recs[2].Seq, Hash: recs[2].Hash}}
	mustNotVerify(t, "first 5 records dropped, trailer.first rewritten", tamperWrite(recs[5:]), earlier)
	if _, brk, _ := admin.VerifyExport(strings.NewReader(tamperWrite(recs[3:])), earlier); brk != nil {
		t.Fatalf("an export that starts right after the earlier head: %v", brk)
	}
}

// The last records (the operator's resolve) go silently.
func TestRecordsDroppedAfterAKnownHeadAreFound(t *testing.T) {
	recs, _, _ := tamperExport(t)
	var cut []ledger.AuditRecord
	for _, r := range recs {
		if r.Event.Type == ledger.EventEffectResolved {
			break
		}
		cut = append(cut, r)
	}
	mustNotVerify(t, "records from the resolve on dropped, trailer.heads rewritten", tamperWrite(cut), headsOf(recs))
}

// An export that is only a trailer: the whole history is gone.
func TestAnEmptiedExportIsFoundAgainstAKnownHead(t *testing.T) {
	recs, _, _ := tamperExport(t)
	mustNotVerify(t, "trailer only", tamperWrite(nil), headsOf(recs))
}

// Altering a record in the middle and re-chaining every later one (the
// hash has no key, the heads are in the same file).
func TestARechainedExportIsFoundAgainstAKnownHead(t *testing.T) {
	recs, _, _ := tamperExport(t)
	known := headsOf(recs)
	prev := ""
	for i := range recs {
		if recs[i].Event.Type == ledger.EventApprovalDecided {
			recs[i].Event.Actor = "admin:mallory"
		}
		recs[i].Prev = prev
		recs[i].Hash = tamperHash(recs[i])
		prev = recs[i].Hash
	}
	mustNotVerify(t, "approval's actor changed to mallory, chain recomputed", tamperWrite(recs), known)
}

// A whole chain (one replica's) goes with its trailer entries.
func TestADroppedChainIsFoundAgainstItsKnownHead(t *testing.T) {
	recs, _, _ := tamperExport(t)
	// A second chain, as a PostgreSQL replica would write.
	var two []ledger.AuditRecord
	prev := ""
	for i, r := range recs {
		r.Chain, r.Seq, r.Prev = "replica-b", uint64(i+1), prev
		r.Hash = tamperHash(r)
		prev = r.Hash
		two = append(two, r)
	}
	both := append(append([]ledger.AuditRecord{}, recs...), two...)
	if _, brk, _ := admin.VerifyExport(strings.NewReader(tamperWrite(both)), headsOf(both)); brk != nil {
		t.Fatalf("the two-chain export does not verify: %v", brk)
	}
	mustNotVerify(t, "chain replica-b dropped", tamperWrite(recs), headsOf(both))
}

// A line holding two spellings of a key: encoding/json (verify) matches
// keys case-insensitively and takes the last, so the hash checks against
// "bot", while a reader matching keys exactly (jq .event.agent_id, Python)
// sees "mallory".
func TestALineAnotherReaderReadsDifferentlyIsRefused(t *testing.T) {
	_, _, lines := tamperExport(t)
	i := -1
	for k, l := range lines {
		if strings.Contains(l, `"type":"approval.decided"`) {
			i = k
		}
	}
	if i < 0 {
		t.Fatal("no approval.decided line")
	}
	forged := strings.Replace(lines[i], `"actor":"admin:alice"`, `"actor":"admin:mallory","ACTOR":"admin:alice"`, 1)
	if forged == lines[i] {
		t.Fatalf("no actor in %s", lines[i])
	}
	var exact map[string]map[string]any
	json.Unmarshal([]byte(forged), &exact)
	t.Logf("an exact-key reader sees event.actor = %v", exact["event"]["actor"])
	lines[i] = forged
	mustNotVerify(t, "line "+itoa(i+1)+" carries actor mallory (exact key) and ALICE (case variant)", strings.Join(lines, "\n")+"\n", nil)
}

// Same with a duplicated key: the first value is what a first-wins reader
// shows.
func TestADuplicatedKeyIsRefused(t *testing.T) {
	_, _, lines := tamperExport(t)
	for k, l := range lines {
		if strings.Contains(l, `"type":"approval.decided"`) {
			lines[k] = strings.Replace(l, `"actor":"admin:alice"`, `"actor":"admin:mallory","actor":"admin:alice"`, 1)
		}
	}
	mustNotVerify(t, "duplicated actor key", strings.Join(lines, "\n")+"\n", nil)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// headsOf is each chain's last record in recs: the heads an operator kept
// from an export.
func headsOf(recs []ledger.AuditRecord) map[string]ledger.AuditHeadInfo {
	h := map[string]ledger.AuditHeadInfo{}
	for _, r := range recs {
		h[r.Chain] = ledger.AuditHeadInfo{Seq: r.Seq, Hash: r.Hash}
	}
	return h
}
