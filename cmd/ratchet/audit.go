package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/ledger"
)

const auditUsage = "ratchet audit export [--since T] [--until T] [--admin URL] > audit.jsonl | verify [--heads EARLIER] FILE (T: RFC 3339, or a duration back from now such as 24h; EARLIER: an earlier export, whose heads FILE must continue from)"

// runAudit is "ratchet audit": export the audit log through the admin API,
// or verify an export offline.
func runAudit(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return opUsageErr(auditUsage)
	}
	fs := flag.NewFlagSet("audit "+args[0], flag.ContinueOnError)
	switch args[0] {
	case "export":
		var o opFlags
		o.register(fs)
		since := fs.String("since", "", "only events at or after T (RFC 3339, or a duration back from now: 24h)")
		until := fs.String("until", "", "only events before T (RFC 3339, or a duration back from now)")
		if err := parse(fs, args[1:], stderr); err != nil {
			return err
		}
		now := time.Now()
		s, err := auditTime(*since, now)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--since: %w", err)}
		}
		u, err := auditTime(*until, now)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--until: %w", err)}
		}
		return o.client().AuditExport(ctx, s, u, stdout)
	case "verify":
		headsFile := fs.String("heads", "", "an earlier export (or its trailer line): each of its chains must continue in FILE from its head")
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		var known map[string]ledger.AuditHeadInfo
		if *headsFile != "" {
			if known, err = trailerHeads(*headsFile); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--heads: %w", err)}
			}
		}
		in := stdin
		if id != "-" {
			f, err := os.Open(id)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		sum, brk, err := admin.VerifyExport(in, known)
		if err != nil {
			return err
		}
		if brk != nil {
			return &exitError{code: 1, err: fmt.Errorf("%s does not verify: %w", id, brk)}
		}
		chains := make([]string, 0, len(sum.Chains))
		for c := range sum.Chains {
			chains = append(chains, c)
		}
		slices.Sort(chains)
		parts := make([]string, len(chains))
		for i, c := range chains {
			parts[i] = fmt.Sprintf("%s seq %d-%d", c, sum.Chains[c][0], sum.Chains[c][1])
		}
		fmt.Fprintf(stdout, "ok: %d records in %d chains (%s)\n", sum.Records, len(chains), strings.Join(parts, ", "))
		if known == nil {
			fmt.Fprintln(stdout, "note: without --heads, only the file's own consistency is shown: whoever can edit it can drop records at its ends and write a new trailer. Keep each export's last line and verify the next export with --heads against it.")
		}
		return nil
	}
	return opUsageErr(auditUsage)
}

// auditTime parses an RFC 3339 time, or a duration back from now; "" is
// no bound.
func auditTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-01T00:00:00Z) nor a duration (24h)", v)
	}
	return t, nil
}

// trailerHeads reads the chains' heads from the trailer (last line) of an
// earlier export, or of a file holding only that line.
func trailerHeads(path string) (map[string]ledger.AuditHeadInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var t admin.AuditTrailer
	dec := json.NewDecoder(strings.NewReader(lines[len(lines)-1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil || t.Heads == nil {
		return nil, fmt.Errorf("%s: its last line is not an export's trailer", path)
	}
	return t.Heads, nil
}
