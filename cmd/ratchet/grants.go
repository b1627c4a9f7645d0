package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/ledger"
)

const grantsUsage = "ratchet grants list [--namespace N] [--all] | create --effect-type GLOB (--agent-id A | --run-id R) (--max-cost-micros N | --max-effects N) (--ttl 2h | --expires-at RFC3339) [--namespace N] [--note TEXT] | revoke ID"

// runGrants is "ratchet grants": scoped approvals (see ledger/grants.go).
func runGrants(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return opUsageErr(grantsUsage)
	}
	fs := flag.NewFlagSet("grants "+args[0], flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	switch args[0] {
	case "list":
		ns := fs.String("namespace", "", "only this namespace")
		all := fs.Bool("all", false, "also grants that expired, were revoked or are used up")
		if _, err := parseWithID(fs, args[1:], stderr, false); err != nil {
			return err
		}
		list, err := o.client().Grants(ctx, *ns, *all)
		if err != nil {
			return err
		}
		return o.print(stdout, list, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "GRANT\tSTATE\tNAMESPACE\tEFFECT TYPE\tAGENT\tRUN\tUSED (µUSD)\tMAX (µUSD)\tUSED EFFECTS\tMAX EFFECTS\tEXPIRES\tBY")
			for _, g := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", g.GrantID, g.State, g.Namespace, g.EffectType,
					dash(g.AgentID), dash(g.RunID), g.UsedCostMicros, money(g.MaxCostMicros), g.UsedEffects, money(g.MaxEffects),
					ts(&g.ExpiresAt), dash(g.CreatedBy))
			}
		})
	case "create":
		var b admin.GrantBody
		fs.StringVar(&b.Namespace, "namespace", ledger.DefaultNamespace, "the namespace it covers")
		fs.StringVar(&b.EffectType, "effect-type", "", "a glob over effect types, e.g. payment.*")
		fs.StringVar(&b.AgentID, "agent-id", "", "only this agent's begins")
		fs.StringVar(&b.RunID, "run-id", "", "only this run's begins")
		maxCost := fs.Int64("max-cost-micros", 0, "at most this much in all (micro-USD)")
		maxEffects := fs.Int64("max-effects", 0, "at most this many effects")
		fs.StringVar(&b.TTL, "ttl", "", "how long it lasts, e.g. 2h")
		expires := fs.String("expires-at", "", "when it ends (RFC 3339), instead of --ttl")
		fs.StringVar(&b.Note, "note", "", "why, recorded with it")
		if _, err := parseWithID(fs, args[1:], stderr, false); err != nil {
			return err
		}
		if *maxCost > 0 {
			b.MaxCostMicros = maxCost
		}
		if *maxEffects > 0 {
			b.MaxEffects = maxEffects
		}
		if *expires != "" {
			if err := b.ExpiresAt.UnmarshalText([]byte(*expires)); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--expires-at %q: want RFC 3339, e.g. 2026-12-01T18:00:00Z", *expires)}
			}
		}
		g, err := o.client().CreateGrant(ctx, b)
		if err != nil {
			return err
		}
		return o.print(stdout, g, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\t%s until %s\n", g.GrantID, g.State, ts(&g.ExpiresAt))
		})
	case "revoke":
		id, err := parseWithID(fs, args[1:], stderr, true)
		if err != nil {
			return err
		}
		g, err := o.client().RevokeGrant(ctx, id)
		if err != nil {
			return err
		}
		return o.print(stdout, g, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\t%s by %s\n", g.GrantID, g.State, g.RevokedBy)
		})
	}
	return opUsageErr(grantsUsage)
}

// runOutbox is "ratchet outbox": notification events waiting for delivery,
// or (--dead) given up.
func runOutbox(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	dead := fs.Bool("dead", false, "only dead letters (delivery given up)")
	if _, err := parseWithID(fs, args, stderr, false); err != nil {
		return err
	}
	list, err := o.client().Outbox(ctx, *dead)
	if err != nil {
		return err
	}
	return o.print(stdout, list, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "EVENT\tTYPE\tSINK\tATTEMPTS\tDEAD\tNEXT\tLAST ERROR")
		for _, en := range list {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%v\t%s\t%s\n", en.Event.ID, en.Event.Type, en.Sink, en.Attempts, en.Dead,
				ts(&en.NextAt), dash(en.LastError))
		}
	})
}
