package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// opFlags are the flags of the commands that talk to the admin API. The
// token comes from $RATCHET_ADMIN_TOKEN, never a flag.
type opFlags struct {
	admin, output string
}

func (o *opFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("RATCHET_ADMIN_URL")
	if def == "" {
		def = "http://127.0.0.1:8788"
	}
	fs.StringVar(&o.admin, "admin", def, "admin API base URL (default $RATCHET_ADMIN_URL)")
	fs.StringVar(&o.output, "o", "table", "output: table or json")
}

func (o *opFlags) client() *admin.Client {
	return &admin.Client{URL: o.admin, Token: os.Getenv("RATCHET_ADMIN_TOKEN")}
}

// parseWithID parses flags around one positional ID ("approve ID --note x"
// or "approve --note x ID").
func parseWithID(fs *flag.FlagSet, args []string, stderr io.Writer, needID bool) (string, error) {
	id := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return "", &exitError{code: 2}
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return "", &exitError{code: 2, err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if needID && id == "" {
		return "", &exitError{code: 2, err: errors.New("an ID is required")}
	}
	return id, nil
}

// output prints v as JSON, or calls table.
func (o *opFlags) print(stdout io.Writer, v any, table func(w *tabwriter.Writer)) error {
	switch o.output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "table":
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	}
	return &exitError{code: 2, err: fmt.Errorf("-o %q: want table or json", o.output)}
}

func usageErr(usage string) error { return &exitError{code: 2, err: errors.New("usage: " + usage)} }

func ts(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func money(m *int64) string {
	if m == nil {
		return "-"
	}
	return fmt.Sprintf("%d", *m)
}

const approvalsUsage = "ratchet approvals list [--state pending|approved|rejected|expired] | approve ID [--note TEXT] | reject ID [--note TEXT]"

// runApprovals is "ratchet approvals".
func runApprovals(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr(approvalsUsage)
	}
	fs := flag.NewFlagSet("approvals "+args[0], flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	switch args[0] {
	case "list":
		state := fs.String("state", "pending", "pending, approved, rejected, expired or all")
		if _, err := parseWithID(fs, args[1:], stderr, false); err != nil {
			return err
		}
		if *state == "all" {
			*state = ""
		}
		list, err := o.client().Approvals(ctx, *state)
		if err != nil {
			return err
		}
		return o.print(stdout, list, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "APPROVAL\tSTATE\tNAMESPACE\tEFFECT TYPE\tAGENT\tCOST (µUSD)\tREQUESTED\tEFFECT")
			for _, a := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", a.ApprovalID, a.State, a.Namespace, a.EffectType,
					dash(a.AgentID), a.EstimatedCostMicros, ts(&a.RequestedAt), a.EffectID)
			}
		})
	case "approve", "reject":
		note := fs.String("note", "", "note recorded with the decision")
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		a, err := o.client().Decide(ctx, id, args[0] == "approve", *note)
		if err != nil {
			return err
		}
		return o.print(stdout, a, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\t%s by %s\n", a.ApprovalID, a.State, a.DecidedBy)
		})
	}
	return usageErr(approvalsUsage)
}

const effectsUsage = "ratchet effects list [--state S] [--run-id R] [--group-key G] [--agent-id A] [--namespace N] [--limit N] | show ID | resolve ID --resolution succeeded|failed [--note TEXT]"

// runEffects is "ratchet effects".
func runEffects(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr(effectsUsage)
	}
	fs := flag.NewFlagSet("effects "+args[0], flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	switch args[0] {
	case "list":
		var f ledger.Filter
		state := fs.String("state", "", "only effects in this state")
		fs.StringVar(&f.RunID, "run-id", "", "only this run")
		fs.StringVar(&f.GroupKey, "group-key", "", "only this group")
		fs.StringVar(&f.AgentID, "agent-id", "", "only this agent")
		fs.StringVar(&f.Namespace, "namespace", "", "only this namespace")
		fs.IntVar(&f.Limit, "limit", 100, "at most this many")
		if _, err := parseWithID(fs, args[1:], stderr, false); err != nil {
			return err
		}
		f.State = ledger.State(*state)
		page, err := o.client().Effects(ctx, f)
		if err != nil {
			return err
		}
		return o.print(stdout, page, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "EFFECT\tSTATE\tATTEMPT\tNAMESPACE\tEFFECT TYPE\tKEY\tAGENT\tREASON\tUPDATED")
			for _, e := range page.Effects {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.EffectID, e.State, e.Attempt, e.Namespace, e.EffectType,
					e.IdempotencyKey, dash(e.AgentID), dash(e.Reason), ts(&e.UpdatedAt))
			}
			if page.NextCursor != "" {
				fmt.Fprintln(w, "(more: use -o json for the cursor)")
			}
		})
	case "show":
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		e, err := o.client().Effect(ctx, id)
		if err != nil {
			return err
		}
		return o.print(stdout, e, func(w *tabwriter.Writer) {
			rows := [][2]string{{"effect", e.EffectID}, {"state", string(e.State)}, {"reason", dash(e.Reason)},
				{"attempt", fmt.Sprint(e.Attempt)}, {"namespace", e.Namespace}, {"key", e.IdempotencyKey},
				{"type", e.EffectType}, {"vendor", dash(e.Vendor)}, {"operation", dash(e.Operation)}, {"agent", dash(e.AgentID)}, {"run", dash(e.RunID)},
				{"group", dash(e.GroupKey)}, {"estimated (µUSD)", money(e.EstimatedCostMicros)},
				{"actual (µUSD)", money(e.ActualCostMicros)}, {"vendor reference", dash(e.VendorReference)},
				{"lease expires", ts(e.LeaseExpiresAt)}, {"completed", ts(e.CompletedAt)},
				{"resolved by", dash(e.ResolvedBy)}, {"created", ts(&e.CreatedAt)}, {"updated", ts(&e.UpdatedAt)}}
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
			}
		})
	case "resolve":
		resolution := fs.String("resolution", "", "succeeded or failed, as the vendor shows it")
		note := fs.String("note", "", "how it was checked")
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		if *resolution == "" {
			return usageErr(effectsUsage)
		}
		e, err := o.client().Resolve(ctx, id, ledger.Outcome(*resolution), *note)
		if err != nil {
			return err
		}
		return o.print(stdout, e, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\t%s\tresolved by %s\n", e.EffectID, e.State, e.ResolvedBy)
		})
	}
	return usageErr(effectsUsage)
}

// runBudgets is "ratchet budgets".
func runBudgets(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("budgets", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	list, err := o.client().Budgets(ctx)
	if err != nil {
		return err
	}
	return o.print(stdout, list, func(w *tabwriter.Writer) {
		// Ceilings of observed rules (mode: observe) count but never
		// refuse: they are listed apart, under their own heading.
		for _, observed := range []bool{false, true} {
			head := false
			for _, b := range list {
				if b.Observed != observed {
					continue
				}
				if !head {
					if observed {
						fmt.Fprintln(w, "\nOBSERVED (mode: observe): counted, never enforced")
					}
					fmt.Fprintln(w, "NAMESPACE\tCEILING\tPER\tSCOPE\tUNIT\tLIMIT\tCOUNTED\tREMAINING\tWINDOW")
					head = true
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", b.Namespace, b.Name, b.Per, dash(short(b.Scope)),
					b.Unit, b.Limit, b.Counted, b.Remaining, b.Window)
			}
			if !head && !observed {
				fmt.Fprintln(w, "NAMESPACE\tCEILING\tPER\tSCOPE\tUNIT\tLIMIT\tCOUNTED\tREMAINING\tWINDOW")
			}
		}
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short abbreviates keyed hashes of dimension values for tables.
func short(s string) string {
	if len(s) == 64 {
		return s[:12] + "…"
	}
	return s
}
