package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ratchet-mcp/ratchet/ledger"
)

const (
	haltUsage   = `ratchet halt (--all | [--namespace N] [--effect-type GLOB] [--agent-id A] [--vendor V]) --note TEXT`
	resumeUsage = "ratchet resume HALT_ID"
)

// runHalt is "ratchet halt": the kill switch (see ledger/halt.go).
func runHalt(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("halt", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	var req ledger.HaltRequest
	fs.BoolVar(&req.All, "all", false, "halt everything")
	fs.StringVar(&req.Namespace, "namespace", "", "halt this namespace (with the other flags: only what matches them all)")
	fs.StringVar(&req.EffectType, "effect-type", "", "halt effect types matching this glob, e.g. payment.*")
	fs.StringVar(&req.AgentID, "agent-id", "", "halt this agent")
	fs.StringVar(&req.Vendor, "vendor", "", "halt this vendor (every proxied request to it, and begins naming it)")
	fs.StringVar(&req.Note, "note", "", "why (required): the agents refused are told it")
	if _, err := parseWithID(fs, args, stderr, false); err != nil {
		return err
	}
	if req.Note == "" {
		return usageErr(haltUsage)
	}
	h, err := o.client().Halt(ctx, req)
	if err != nil {
		return err
	}
	return o.print(stdout, h, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "%s\thalted %s by %s; lift it with: ratchet resume %s\n", h.HaltID, h.HaltScope.String(), h.CreatedBy, h.HaltID)
	})
}

// runResume is "ratchet resume": lift a halt.
func runResume(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	id, err := parseWithID(fs, args, stderr, false)
	if err != nil {
		return err
	}
	if id == "" {
		return usageErr(resumeUsage)
	}
	h, err := o.client().Lift(ctx, id)
	if err != nil {
		return err
	}
	return o.print(stdout, h, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "%s\tlifted (%s) by %s\n", h.HaltID, h.HaltScope.String(), h.LiftedBy)
	})
}

// runHalts is "ratchet halts": the active halts.
func runHalts(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("halts", flag.ContinueOnError)
	var o opFlags
	o.register(fs)
	if _, err := parseWithID(fs, args, stderr, false); err != nil {
		return err
	}
	list, err := o.client().Halts(ctx)
	if err != nil {
		return err
	}
	return o.print(stdout, list, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "HALT\tSCOPE\tSINCE\tBY\tNOTE")
		for _, h := range list {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", h.HaltID, h.HaltScope.String(), ts(&h.CreatedAt), dash(h.CreatedBy), h.Note)
		}
	})
}
