package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
)

const auditUsage = "ratchet audit export [--since T] [--until T] [--admin URL] > audit.jsonl | verify FILE (T: RFC 3339, or a duration back from now such as 24h)"

// runAudit is "ratchet audit": export the audit log through the admin API,
// or verify an export offline.
func runAudit(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr(auditUsage)
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
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
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
		sum, brk, err := admin.VerifyExport(in)
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
		return nil
	}
	return usageErr(auditUsage)
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
