package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/proxy"
)

const policyUsage = `ratchet policy explain [--config FILE | --admin URL] [-o table|json]
        (--begin FILE [--namespace NS] [--agent-id ID]            an MCP begin's arguments, as an agent sends them ("-": stdin)
        | [-X METHOD] URL [-H 'Name: value']... [-d BODY | --data-file FILE])   a request through the proxy, as curl sends it`

// headerFlags collect -H 'Name: value' as curl takes them.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	name, val, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("%q is not 'Name: value'", s)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(val))
	return nil
}

// runPolicy is "ratchet policy". explain tells what a begin or a proxied
// request would get, recording nothing: with --admin, from the running
// server (its config, and the counts in its ledger); else from the
// config's rules on an empty ledger of its own, deleted afterwards, so
// every count is zero. Either way the answer comes from the engine's own
// decision (ledger's Explain) and the proxy's own classification.
func runPolicy(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "explain" {
		return usageErr(policyUsage)
	}
	fs := flag.NewFlagSet("policy explain", flag.ContinueOnError)
	var cf commonFlags
	fs.StringVar(&cf.config, "config", "", "config file (default $RATCHET_CONFIG; none: built-in defaults)")
	adminURL := fs.String("admin", "", "a running server's admin API (token from $RATCHET_ADMIN_TOKEN): explain there, with its ledger's counts")
	output := fs.String("o", "table", "output: table or json")
	beginFile := fs.String("begin", "", "a file holding an MCP begin's arguments as JSON (\"-\": stdin)")
	namespace := fs.String("namespace", "", "the namespace of the agent's token (MCP begins)")
	agentID := fs.String("agent-id", "", "the agent_id of the agent's token (MCP begins)")
	method := fs.String("X", "", "the request's method (default POST with a body, else GET)")
	data := fs.String("d", "", "the request's body")
	dataFile := fs.String("data-file", "", "a file holding the request's body")
	header := headerFlags{}
	fs.Var(header, "H", "a request header, 'Name: value' (repeatable)")
	fs.SetOutput(stderr)
	// Flags may come after the URL, as with curl.
	var urls []string
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return &exitError{code: 0}
			}
			return &exitError{code: 2}
		}
		if fs.NArg() == 0 {
			break
		}
		urls, rest = append(urls, fs.Arg(0)), fs.Args()[1:]
	}
	var body admin.ExplainBody
	switch {
	case *beginFile != "" && len(urls) > 0, *beginFile == "" && len(urls) != 1:
		return usageErr(policyUsage)
	case *beginFile != "":
		var b []byte
		var err error
		if *beginFile == "-" {
			b, err = io.ReadAll(io.LimitReader(stdin, ledger.MaxPayloadBytes*2))
		} else {
			b, err = os.ReadFile(*beginFile)
		}
		if err != nil {
			return fmt.Errorf("reading the begin: %w", err)
		}
		if !json.Valid(b) {
			return &exitError{code: 2, err: errors.New("--begin: not JSON (an MCP begin's arguments, e.g. {\"idempotency_key\": \"order-1\", \"effect_type\": \"payment.charge\", ...})")}
		}
		body = admin.ExplainBody{Namespace: *namespace, AgentID: *agentID, Begin: b}
	default:
		if *namespace != "" || *agentID != "" {
			return &exitError{code: 2, err: errors.New("--namespace and --agent-id are for MCP begins; a proxied request is the proxy's")}
		}
		payload := *data
		if *dataFile != "" {
			b, err := os.ReadFile(*dataFile)
			if err != nil {
				return fmt.Errorf("reading the body: %w", err)
			}
			payload = string(b)
		}
		m := strings.ToUpper(*method)
		if m == "" {
			m = http.MethodGet
			if payload != "" {
				m = http.MethodPost
			}
		}
		body = admin.ExplainBody{Request: &admin.ExplainRequest{Method: m, URL: urls[0], Header: http.Header(header), Body: payload}}
	}
	var ans *admin.ExplainAnswer
	var err error
	live := *adminURL != ""
	if live {
		if cf.config != "" {
			return &exitError{code: 2, err: errors.New("give --config or --admin: a running server explains with its own config")}
		}
		ans, err = (&admin.Client{URL: *adminURL, Token: os.Getenv("RATCHET_ADMIN_TOKEN")}).Explain(ctx, body)
	} else {
		ans, err = explainOffline(ctx, &cf, body)
	}
	if err != nil {
		return err
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ans)
	}
	if *output != "table" {
		return &exitError{code: 2, err: fmt.Errorf("-o %q: want table or json", *output)}
	}
	printExplanation(stdout, ans, live)
	return nil
}

// explainOffline explains with the config's rules and proxy on an empty
// ledger in a temporary directory, removed afterwards.
func explainOffline(ctx context.Context, cf *commonFlags, body admin.ExplainBody) (*admin.ExplainAnswer, error) {
	cfg, err := cf.load()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ratchet-explain-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := badgerstore.Open(filepath.Join(dir, "ledger"), &badgerstore.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	eng, err := ledger.New(ledger.Options{Store: store, Secret: []byte(rand.Text() + rand.Text()), Policies: cfg.Policies,
		Defaults: cfg.LedgerDefaults(), Logger: quiet, Vendors: cfg.Registry()})
	if err != nil {
		store.Close()
		return nil, err
	}
	defer eng.Close(context.Background())
	p, err := proxy.New(eng, proxyOptions(cfg))
	if err != nil {
		return nil, err
	}
	return admin.Explain(ctx, eng, p, body)
}

// printExplanation prints an answer for people.
func printExplanation(w io.Writer, ans *admin.ExplainAnswer, live bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch {
	case ans.NotGated != "":
		fmt.Fprintf(tw, "proxy\tnot gated: %s\n", ans.NotGated)
		return
	case ans.Refused != "":
		fmt.Fprintf(tw, "proxy\trefused: %s\n", ans.Refused)
		return
	}
	if g := ans.Gated; g != nil {
		key := g.KeySource
		if g.DedupeWindow != "" {
			key += " (identical requests within " + g.DedupeWindow + " are one call)"
		}
		fmt.Fprintf(tw, "proxy\t%s %s; key from %s\n", g.Vendor, g.Operation, key)
	}
	ex := ans.Explanation
	fmt.Fprintf(tw, "effect type\t%s\tvendor %s\toperation %s\n", ex.EffectType, dash(ex.Vendor), dash(ex.Operation))
	if len(ex.Rules) == 0 {
		fmt.Fprintf(tw, "rules\tnone match: no limit applies\n")
	}
	for i, r := range ex.Rules {
		label := ""
		if i == 0 {
			label = "rules"
		}
		narrow := ""
		if r.Vendor != "" {
			narrow += " vendor " + r.Vendor
		}
		if r.Operation != "" {
			narrow += " operation " + r.Operation
		}
		deny := ""
		if r.Deny {
			deny = " deny"
		}
		fmt.Fprintf(tw, "%s\tpolicies[%d] %s%s (%s)%s\n", label, r.Index, r.Match, narrow, r.Mode, deny)
	}
	fmt.Fprintf(tw, "threshold\t%s\n", micros(ex.ThresholdMicros))
	if ex.ApproversRequired > 1 {
		fmt.Fprintf(tw, "approvers\t%d distinct people must approve at this cost\n", ex.ApproversRequired)
	}
	fmt.Fprintf(tw, "requires\t%s\n", dash(strings.Join(ex.RequireDimensions, ", ")))
	counts := "counted now"
	if !live {
		counts = "counted (an empty ledger: give --admin for a running server's counts)"
	}
	for i, c := range ex.Ceilings {
		label := ""
		if i == 0 {
			label = "ceilings"
		}
		note := ""
		if c.Observed {
			note = " observed"
		}
		if c.NotApplied != "" {
			note += " NOT APPLIED: " + c.NotApplied
		}
		fmt.Fprintf(tw, "%s\t%s per %s, %s window: %d of %d %s %s, %d remaining%s\n", label, c.Name, c.Per, c.Window, c.Counted, c.Limit, c.Unit, counts, c.Remaining, note)
	}
	switch d := ex.Decision; {
	case ex.Error != nil:
		fmt.Fprintf(tw, "decision\trefused: %s: %s\n", ex.Error.Code, ex.Error.Message)
	case d != nil:
		reason := ""
		if d.Reason != "" {
			reason = " (" + d.Reason + ")"
		}
		fmt.Fprintf(tw, "decision\t%s%s: %s\n", d.Decision, reason, d.Message)
		if d.DimensionWarning != nil {
			fmt.Fprintf(tw, "warning\t%s\n", d.DimensionWarning.Message)
		}
		if d.BudgetWarning != nil {
			fmt.Fprintf(tw, "warning\t%s\n", d.BudgetWarning.Message)
		}
	}
	if o := ex.Observed; o != nil {
		fmt.Fprintf(tw, "observed\tan observed rule would answer %s (%s %s)\n", o.Would, dash(o.Reason), o.Rule)
	}
}

func micros(m *int64) string {
	if m == nil {
		return "-"
	}
	return fmt.Sprintf("%d micro-USD", *m)
}
