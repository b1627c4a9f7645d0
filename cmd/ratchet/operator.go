package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/config"
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
		def = "http://" + config.DefaultAdminListen
	}
	fs.StringVar(&o.admin, "admin", def, "admin API base URL (default $RATCHET_ADMIN_URL)")
	fs.StringVar(&o.output, "o", "table", "output: table or json")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name()) // as the flag package says it
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nenvironment:\n"+adminEnvVars+"\n")
	}
}

// adminEnvVars is the environment of the commands that talk to the admin
// API, which their usage names.
const adminEnvVars = `  RATCHET_ADMIN_URL    the admin API's base URL (default http://127.0.0.1:8788; --admin overrides it)
  RATCHET_ADMIN_TOKEN  an admin token (auth.admins); a token is never a flag, which ps would show`

const adminEnv = "\n\nenvironment:\n" + adminEnvVars

// opUsageErr is usageErr for the commands that talk to the admin API.
func opUsageErr(usage string) error { return usageErr(usage + adminEnv) }

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
		return opUsageErr(approvalsUsage)
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
			fmt.Fprintln(w, "APPROVAL\tSTATE\tNAMESPACE\tEFFECT TYPE\tAGENT\tCOST (µUSD)\tREQUESTED\tEFFECT\tAPPROVERS")
			for _, a := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.ApprovalID, a.State, a.Namespace, a.EffectType,
					dash(a.AgentID), a.EstimatedCostMicros, ts(&a.RequestedAt), a.EffectID, dash(a.Progress()))
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
			if a.State == ledger.ApprovalPending { // approved by some of the several it needs
				fmt.Fprintf(w, "%s\tpending, %s\n", a.ApprovalID, a.Progress())
				return
			}
			fmt.Fprintf(w, "%s\t%s by %s\n", a.ApprovalID, a.State, a.DecidedBy)
		})
	}
	return opUsageErr(approvalsUsage)
}

const effectsUsage = "ratchet effects list [--state S] [--key K] [--run-id R] [--group-key G] [--agent-id A] [--namespace N] [--limit N] | show ID | resolve ID --resolution succeeded|failed [--note TEXT] [--yes]"

// runEffects is "ratchet effects".
func runEffects(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return opUsageErr(effectsUsage)
	}
	fs := flag.NewFlagSet("effects "+args[0], flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	switch args[0] {
	case "list":
		var f admin.EffectFilter
		state := fs.String("state", "", "only effects in this state")
		fs.StringVar(&f.IdempotencyKey, "key", "", "only the effect of this idempotency key")
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
				{"actual (µUSD)", money(e.ActualCostMicros)}, {"vendor reference (last report)", dash(e.VendorReference)},
				{"lease expires", ts(e.LeaseExpiresAt)}, {"completed", ts(e.CompletedAt)},
				{"resolved by", dash(e.ResolvedBy)}, {"created", ts(&e.CreatedAt)}, {"updated", ts(&e.UpdatedAt)}}
			// What to search the vendor by, to learn whether an attempt
			// whose outcome is unknown happened.
			for _, a := range e.Attempts {
				k := a.VendorIdempotencyKey
				where := "no key location known for " + e.Vendor
				if k.Location != "" {
					where = fmt.Sprintf("%s %s", k.Location, k.Name)
				}
				rows = append(rows, [2]string{fmt.Sprintf("attempt %d vendor key", a.Attempt), k.Value + " (" + where + ")"})
			}
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
			}
		})
	case "resolve":
		resolution := fs.String("resolution", "", "succeeded or failed, as the vendor shows it")
		note := fs.String("note", "", "how it was checked")
		yes := fs.Bool("yes", false, "resolve without asking (scripts); the consequence is yours")
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		if *resolution == "" {
			return opUsageErr(effectsUsage)
		}
		if !*yes {
			if err := confirmResolve(stdin, stderr, id, ledger.Outcome(*resolution)); err != nil {
				return err
			}
		}
		e, err := o.client().Resolve(ctx, id, ledger.Outcome(*resolution), *note)
		if err != nil {
			return err
		}
		return o.print(stdout, e, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\t%s\tresolved by %s\n", e.EffectID, e.State, e.ResolvedBy)
		})
	}
	return opUsageErr(effectsUsage)
}

const budgetsUsage = "ratchet budgets [--namespace N] [--dimension NAME --value VALUE]"

// resolveConsequence is what resolving as o does, in the words the
// operator confirms (the console shows the same).
func resolveConsequence(id string, o ledger.Outcome) string {
	switch o {
	case ledger.OutcomeFailed:
		return "Resolving " + id + " as failed frees its idempotency key: the agent's next begin executes the action again. " +
			"If it did happen at the vendor, that is a second charge or a second email."
	case ledger.OutcomeSucceeded:
		return "Resolving " + id + " as succeeded records the action as done: a retry is answered duplicate and never executes. " +
			"If it did not happen at the vendor, it never will through Ratchet."
	}
	return "" // the server refuses any other resolution with its own message
}

// stdinIsTerminal says whether the CLI may ask a question on stdin (a
// variable, so tests can answer one).
var stdinIsTerminal = func(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) // /dev/null is a character device, not a terminal
}

// confirmResolve asks the operator to confirm a resolution, naming its
// consequence; without a terminal to ask on, it refuses and names --yes.
func confirmResolve(stdin io.Reader, stderr io.Writer, id string, o ledger.Outcome) error {
	what := resolveConsequence(id, o)
	if what == "" {
		return nil
	}
	if !stdinIsTerminal(stdin) {
		return &exitError{code: 2, err: fmt.Errorf("not resolved: %s Check at the vendor, then run again with --yes to confirm "+
			"(stdin is not a terminal, so there is no one to ask)", what)}
	}
	fmt.Fprintf(stderr, "%s\nType yes to resolve %s as %s: ", what, id, o)
	line, _ := bufio.NewReader(io.LimitReader(stdin, 1024)).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return &exitError{code: 1, err: errors.New("not resolved: the answer was not yes")}
	}
	return nil
}

// runBudgets is "ratchet budgets". A dimension's scope is the keyed hash
// of its value, shown as "hash:…"; with --dimension and --value, the
// server hashes the value (it is neither stored nor logged) and only that
// scope's ceilings are listed, under the value.
func runBudgets(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("budgets", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	ns := fs.String("namespace", "", "only this namespace")
	dim := fs.String("dimension", "", "look a scope up by value: the dimension's name (lowercase, as in per: dimension:NAME)")
	value := fs.String("value", "", "the dimension value to look up (with --dimension)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if (*dim == "") != (*value == "") {
		return opUsageErr(budgetsUsage + ": --dimension and --value go together")
	}
	var list []ledger.Budget
	label := func(b ledger.Budget) string { return scopeLabel(b.Per, b.Scope) }
	if *dim != "" {
		ans, err := o.client().LookupScope(ctx, *ns, *dim, *value)
		if err != nil {
			return err
		}
		if o.output == "json" {
			return o.print(stdout, ans, nil)
		}
		list = ans.Budgets
		label = func(ledger.Budget) string { return *dim + "=" + *value }
		if len(list) == 0 {
			fmt.Fprintf(stderr, "no live ceiling counts %s=%s (scope hash:%s)\n", *dim, *value, short(ans.Scope))
		}
	} else {
		var err error
		if list, err = o.client().Budgets(ctx, *ns); err != nil {
			return err
		}
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
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", b.Namespace, b.Name, b.Per, label(b),
					b.Unit, b.Limit, b.Counted, b.Remaining, b.Window)
			}
			if !head && !observed {
				fmt.Fprintln(w, "NAMESPACE\tCEILING\tPER\tSCOPE\tUNIT\tLIMIT\tCOUNTED\tREMAINING\tWINDOW")
			}
		}
		if *dim == "" && slices.ContainsFunc(list, func(b ledger.Budget) bool { return strings.HasPrefix(b.Per, "dimension:") }) {
			fmt.Fprintln(w, "(hash: a dimension value's keyed hash; look one up with --dimension NAME --value VALUE)")
		}
	})
}

// scopeLabel is a budget's scope for tables: a dimension's hash is
// labelled as one and abbreviated.
func scopeLabel(per, scope string) string {
	if scope == "" {
		return "-"
	}
	if strings.HasPrefix(per, "dimension:") {
		h, run, _ := strings.Cut(scope, " ")
		if run != "" {
			run = " " + run
		}
		return "hash:" + short(h) + run
	}
	return scope
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
