package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The audit export (GET /v1/audit?since=T&until=T) is JSON Lines: one
// ledger.AuditRecord per line, chain by chain, each chain in order, then
// one AuditTrailer line. The trailer says where each chain's export ends,
// so a verifier sees a file whose last lines were cut (and a stream that
// broke off, which has no trailer at all). The answer is streamed: an
// export is as long as the audit retention, and is never held in memory.
//
// since and until are RFC 3339 times (an event at since is included, one
// at until is not); either may be left out.

// AuditTrailer is an audit export's last line.
type AuditTrailer struct {
	// Heads is, for each chain in the export, its last exported record.
	Heads map[string]ledger.AuditHeadInfo `json:"heads"`
	// First is, for each chain, the sequence number of its first exported
	// record: seq 1 unless the export starts at since or the audit
	// retention removed older records.
	First map[string]uint64 `json:"first"`
	// Records is how many records precede the trailer.
	Records int `json:"records"`
	// ExportedAt, Since and Until say what was asked for.
	ExportedAt time.Time `json:"exported_at"`
	Since      time.Time `json:"since,omitzero"`
	Until      time.Time `json:"until,omitzero"`
}

// auditFlushEvery is how many records are written between flushes.
const auditFlushEvery = 256

// maxExportLine bounds one line of an audit export read back (Export's
// copy, VerifyExport): a record with its largest fields fits many times.
const maxExportLine = 16 << 20

func (a *api) auditExport(w http.ResponseWriter, r *http.Request, who string) error {
	since, until, err := auditRange(r.URL.Query())
	if err != nil {
		return err
	}
	tr := AuditTrailer{Heads: map[string]ledger.AuditHeadInfo{}, First: map[string]uint64{}, Since: since, Until: until}
	bw := bufio.NewWriterSize(w, 64<<10)
	flusher, _ := w.(http.Flusher)
	started := false
	err = a.eng.Audit(r.Context(), since, until, func(rec ledger.AuditRecord) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		b, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		bw.Write(b)
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		if _, ok := tr.First[rec.Chain]; !ok {
			tr.First[rec.Chain] = rec.Seq
		}
		tr.Heads[rec.Chain] = ledger.AuditHeadInfo{Seq: rec.Seq, Hash: rec.Hash}
		tr.Records++
		if tr.Records%auditFlushEvery == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		return nil
	})
	if err != nil {
		if !started {
			return err
		}
		// The status is sent: the missing trailer tells the client.
		bw.Flush()
		a.log.Warn("audit export broke off", "err", err, "records", tr.Records, "by", who)
		return nil
	}
	if !started {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
	tr.ExportedAt = time.Now().UTC()
	b, err := json.Marshal(&tr)
	if err != nil {
		return err
	}
	bw.Write(b)
	bw.WriteByte('\n')
	a.log.Info("operator exported the audit log", "records", tr.Records, "by", who)
	return bw.Flush()
}

func auditRange(q url.Values) (since, until time.Time, err error) {
	for name, t := range map[string]*time.Time{"since": &since, "until": &until} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		if *t, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return since, until, &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument),
				fmt.Sprintf("%s %q is not an RFC 3339 time (e.g. 2026-12-01T00:00:00Z)", name, truncate(v, 64))}
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "since must be before until"}
	}
	return since, until, nil
}

// ErrAuditExportCut is returned by AuditExport when the answer ends
// before its trailer: the export is incomplete.
var ErrAuditExportCut = errors.New("the audit export ended before its trailer: it is incomplete (see the server's log)")

// AuditExport streams the audit log between since and until (zero: no
// bound) to w as JSON Lines, trailer included. It returns
// ErrAuditExportCut when the stream ends without its trailer. Unlike the
// other calls it has no timeout of its own: ctx bounds it.
func (c *Client) AuditExport(ctx context.Context, since, until time.Time, w io.Writer) error {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339Nano))
	}
	u := strings.TrimSuffix(c.URL, "/") + "/v1/audit"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("admin URL %q: %w", c.URL, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the admin API at %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return errorOf(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxExportLine)
	trailer := false
	for sc.Scan() {
		line := sc.Bytes()
		trailer = bytes.HasPrefix(line, []byte(`{"heads":`))
		if _, err := w.Write(line); err != nil {
			return err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the audit export: %w", err)
	}
	if !trailer {
		return ErrAuditExportCut
	}
	return nil
}

// ExportBreak says where an audit export stops verifying.
type ExportBreak struct {
	// Line is the 1-based line of the file at fault.
	Line    int
	Chain   string
	Seq     uint64
	Message string
}

func (b *ExportBreak) Error() string {
	if b.Chain == "" {
		return fmt.Sprintf("line %d: %s", b.Line, b.Message)
	}
	return fmt.Sprintf("line %d (chain %s, seq %d): %s", b.Line, b.Chain, b.Seq, b.Message)
}

// ExportSummary describes an export that verified.
type ExportSummary struct {
	Records int
	// Chains maps each chain to its first and last sequence numbers.
	Chains map[string][2]uint64
}

// VerifyExport checks an audit export as AuditExport writes it, offline:
// every record's hash and its link to the one before it in its chain
// (ledger.VerifyAudit), and against the trailer, that no chain lost records
// at its start or its end and that nothing follows the trailer. It returns
// the first break, naming its line, or an error reading r.
//
// Every line must be exactly the form the export writes (json.Marshal of
// the record or the trailer): a line with a duplicated key, a key in
// another case, or any other spelling a reader other than Go's might take
// differently is refused, so what verifies is what every reader sees.
//
// The file alone shows only that it is consistent: whoever can edit it can
// drop records at its ends and write a new trailer. known, when given, are
// the chains' heads from an earlier export (or from the ledger, kept
// elsewhere): each such chain must then continue from its head, holding
// the head's record with its hash or starting right after it with Prev
// equal to it, and reaching at least its seq.
func VerifyExport(r io.Reader, known map[string]ledger.AuditHeadInfo) (*ExportSummary, *ExportBreak, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxExportLine)
	var (
		recs    []ledger.AuditRecord
		lines   []int // the file line of each record
		trailer *AuditTrailer
		tline   int
		n       int
	)
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if trailer != nil {
			return nil, &ExportBreak{Line: n, Message: "a line follows the trailer (line " + fmt.Sprint(tline) + "): a record was added after the export's end"}, nil
		}
		if len(line) == 0 {
			return nil, &ExportBreak{Line: n, Message: "an empty line: a record was removed or a line inserted"}, nil
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, &ExportBreak{Line: n, Message: "not a JSON object: the line was altered or inserted"}, nil
		}
		if _, ok := probe["heads"]; ok {
			var t AuditTrailer
			if err := strictJSON(line, &t); err != nil {
				return nil, &ExportBreak{Line: n, Message: "the trailer is not valid: " + err.Error()}, nil
			}
			if canon, err := json.Marshal(&t); err != nil || !bytes.Equal(canon, line) {
				return nil, &ExportBreak{Line: n, Message: "the trailer is not written as the export writes it: it was edited"}, nil
			}
			trailer, tline = &t, n
			continue
		}
		var rec ledger.AuditRecord
		if err := strictJSON(line, &rec); err != nil || rec.Chain == "" || rec.Seq == 0 {
			return nil, &ExportBreak{Line: n, Message: "not an audit record: the line was altered or inserted"}, nil
		}
		if canon, err := json.Marshal(&rec); err != nil || !bytes.Equal(canon, line) {
			return nil, &ExportBreak{Line: n, Chain: rec.Chain, Seq: rec.Seq, Message: "the line is not written as the export writes it (a key repeated, in another case, or spelled otherwise): it was edited"}, nil
		}
		recs, lines = append(recs, rec), append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading the export: %w", err)
	}
	if trailer == nil {
		return nil, &ExportBreak{Line: n + 1, Message: "the export has no trailer (its last line, with the chains' heads): its end was cut off"}, nil
	}
	if brk := ledger.VerifyAudit(recs, trailer.Heads); brk != nil {
		line := tline // a chain's end is missing: the trailer says where it was
		if brk.Line > 0 {
			line = lines[brk.Line-1]
		}
		return nil, &ExportBreak{Line: line, Chain: brk.Chain, Seq: brk.Seq, Message: brk.Message}, nil
	}
	sum := &ExportSummary{Records: len(recs), Chains: map[string][2]uint64{}}
	for i, rec := range recs {
		c, ok := sum.Chains[rec.Chain]
		if !ok {
			if want, listed := trailer.First[rec.Chain]; !listed || want != rec.Seq {
				msg := fmt.Sprintf("the chain's first exported record was seq %d: the records before this one were removed", want)
				if !listed {
					msg = "the trailer names no such chain: the record was inserted"
				}
				return nil, &ExportBreak{Line: lines[i], Chain: rec.Chain, Seq: rec.Seq, Message: msg}, nil
			}
			c[0] = rec.Seq
		}
		c[1] = rec.Seq
		sum.Chains[rec.Chain] = c
	}
	for chain, h := range trailer.Heads {
		c, ok := sum.Chains[chain]
		switch {
		case !ok:
			return nil, &ExportBreak{Line: tline, Chain: chain, Seq: h.Seq, Message: "the trailer names this chain but the export holds none of its records: they were removed"}, nil
		case c[1] != h.Seq:
			return nil, &ExportBreak{Line: tline, Chain: chain, Seq: c[1], Message: fmt.Sprintf("the chain ends at seq %d but the trailer's head is seq %d: records were added after its end", c[1], h.Seq)}, nil
		}
	}
	if trailer.Records != len(recs) {
		return nil, &ExportBreak{Line: tline, Message: fmt.Sprintf("the trailer counts %d records, the export holds %d", trailer.Records, len(recs))}, nil
	}
	if brk := continuesFrom(recs, lines, tline, known); brk != nil {
		return nil, brk, nil
	}
	return sum, nil, nil
}

// continuesFrom checks that each chain of known continues in recs from its
// known head (see VerifyExport).
func continuesFrom(recs []ledger.AuditRecord, lines []int, tline int, known map[string]ledger.AuditHeadInfo) *ExportBreak {
	for _, chain := range slices.Sorted(maps.Keys(known)) {
		h := known[chain]
		var first, last int = -1, -1
		for i := range recs {
			if recs[i].Chain == chain {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		brk := func(line int, seq uint64, msg string, args ...any) *ExportBreak {
			return &ExportBreak{Line: line, Chain: chain, Seq: seq, Message: fmt.Sprintf(msg, args...)}
		}
		switch {
		case first < 0:
			return brk(tline, h.Seq, "the export holds none of a chain whose head was seq %d: its records were removed", h.Seq)
		case recs[last].Seq < h.Seq:
			return brk(lines[last], recs[last].Seq, "the chain ends at seq %d, before its known head (seq %d): records were removed", recs[last].Seq, h.Seq)
		case recs[first].Seq > h.Seq+1:
			return brk(lines[first], recs[first].Seq, "the chain starts at seq %d, after its known head (seq %d): the records between were removed (or the audit retention purged them: export more often)", recs[first].Seq, h.Seq)
		case recs[first].Seq == h.Seq+1 && recs[first].Prev != h.Hash:
			return brk(lines[first], recs[first].Seq, "does not chain to the known head (seq %d): the chain was rewritten", h.Seq)
		case recs[first].Seq <= h.Seq:
			for i := first; i <= last; i++ { // chains may interleave
				if recs[i].Chain == chain && recs[i].Seq == h.Seq && recs[i].Hash != h.Hash {
					return brk(lines[i], h.Seq, "is not the known head's record (its hash differs): the chain was rewritten")
				}
			}
		}
	}
	return nil
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
