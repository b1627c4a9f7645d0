package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// noopServer is the protocol floor: the same SDK, transport options and
// tool registration (Server.AddTool, as Ratchet's tools use) as Ratchet,
// with one tool that does nothing but answer.
func noopServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "noop", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "noop", Description: "does nothing", InputSchema: &jsonschema.Schema{Type: "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{StructuredContent: json.RawMessage(`{"ok":true}`),
				Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
		})
	return s
}

// mcpPairs runs sessions that each make "pairs" of tool calls for d.
func mcpPairs(url string, sessions int, d time.Duration, pair func(ctx context.Context, cs *sdk.ClientSession, k int64) error) (result, error) {
	return mcpLoad(url, sessions, d, 0, pair)
}

// mcpPairsN runs sessions that make n pairs of tool calls in all.
func mcpPairsN(url string, sessions int, n int64, pair func(ctx context.Context, cs *sdk.ClientSession, k int64) error) (result, error) {
	return mcpLoad(url, sessions, time.Hour, n, pair)
}

// mcpLoad runs sessions that make pairs of tool calls for d or, when
// limit > 0, until limit pairs are done.
func mcpLoad(url string, sessions int, d time.Duration, limit int64, pair func(ctx context.Context, cs *sdk.ClientSession, k int64) error) (result, error) {
	ctx := context.Background()
	pool := make(chan *sdk.ClientSession, sessions)
	for range sessions {
		c, err := mcp.Connect(ctx, url, "", "bench")
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		pool <- c
	}
	// Each caller takes a session and keeps it, so every session is used by
	// exactly one caller at a time.
	return load(sessions, d, limit, func(k int64) error {
		c := <-pool
		defer func() { pool <- c }()
		return pair(ctx, c, k)
	})
}

// benchMCP measures the floor and Ratchet alternately, twice each, and
// keeps each one's best run, so drift on a shared 2-core machine (disk
// flushes left over from earlier sections, GC) favours neither.
func benchMCP(dir string, d time.Duration) (floor, ratchet result, err error) {
	noop := httptest.NewServer(mcp.Handler(noopServer(), nil))
	defer noop.Close()
	eng, _, err := openEngine(dir, true)
	if err != nil {
		return
	}
	defer eng.Close(context.Background())
	srv := httptest.NewServer(mcp.Handler(mcp.New(eng, nil), nil))
	defer srv.Close()
	for range 2 {
		f, err := mcpPairs(noop.URL, 16, d, noopPair)
		if err != nil {
			return floor, ratchet, err
		}
		r, err := mcpPairs(srv.URL, 16, d, ratchetMCPPair)
		if err != nil {
			return floor, ratchet, err
		}
		if f.perSec > floor.perSec {
			floor = f
		}
		if r.perSec > ratchet.perSec {
			ratchet = r
		}
	}
	return floor, ratchet, nil
}

// noopPair is two calls of the no-op tool: the protocol floor's pair.
func noopPair(ctx context.Context, cs *sdk.ClientSession, k int64) error {
	for range 2 {
		if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "noop", Arguments: map[string]any{"key": fmt.Sprint(k)}}); err != nil {
			return err
		}
	}
	return nil
}

// ratchetMCPPair is one begin+report through Ratchet's MCP tools.
func ratchetMCPPair(ctx context.Context, cs *sdk.ClientSession, k int64) error {
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": fmt.Sprint("mcp:", k), "effect_type": "bench.charge", "estimated_cost_micros": 1000,
		"dimensions": map[string]any{"counterparty": fmt.Sprint("acct_", k%50)}}})
	if err != nil || res.IsError {
		return fmt.Errorf("begin: %v %v", err, res)
	}
	id := res.StructuredContent.(map[string]any)["effect_id"]
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{"effect_id": id, "outcome": "succeeded"}})
	if err != nil || res.IsError {
		return fmt.Errorf("report: %v %v", err, res)
	}
	return nil
}

// httpLoad runs clients that send requests made by mk for d.
func httpLoad(clients int, d time.Duration, mk func(k int64) *http.Request) (result, error) {
	return httpLoadN(clients, d, 0, mk)
}

// httpLoadN runs clients that send requests made by mk for d or, when
// limit > 0, until limit requests are answered.
func httpLoadN(clients int, d time.Duration, limit int64, mk func(k int64) *http.Request) (result, error) {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return load(clients, d, limit, func(k int64) error {
		resp, err := hc.Do(mk(k))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d (%s)", resp.StatusCode, resp.Header.Get("Ratchet-Decision"))
		}
		return nil
	})
}

// proxies are a trivial upstream, a bare ReverseProxy and Ratchet's
// reverse proxy in front of it.
type proxies struct {
	upstream, bare, ratchet *httptest.Server
	eng                     interface{ Close(context.Context) error }
}

func (p *proxies) close() {
	p.ratchet.Close()
	p.bare.Close()
	p.upstream.Close()
	p.eng.Close(context.Background())
}

// startProxies starts the upstream and both proxies, Ratchet's on an
// engine in dir.
func startProxies(dir string) (*proxies, error) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_123","object":"payment_intent","amount":1000,"currency":"usd","status":"succeeded"}`)
	}))
	u, _ := url.Parse(upstream.URL)
	// The bare proxy gets the transport Ratchet's proxy has by default
	// (net/http's keeps 2 idle connections per host, and most requests
	// would open a connection), so that only the gate differs.
	bare := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: proxy.NewTransport()})
	eng, _, err := openEngine(dir, true)
	if err != nil {
		bare.Close()
		upstream.Close()
		return nil, err
	}
	p, err := proxy.New(eng, proxy.Options{Upstreams: map[string]string{"stripe": upstream.URL},
		CurrencyMicros: map[string]int64{"usd": 1_000_000}})
	if err != nil {
		eng.Close(context.Background())
		bare.Close()
		upstream.Close()
		return nil, err
	}
	return &proxies{upstream: upstream, bare: bare, ratchet: httptest.NewServer(p), eng: eng}, nil
}

// get is a pass-through GET to base.
func get(base string) func(int64) *http.Request {
	return func(int64) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, base+"/v1/charges/ch_1", nil)
		return r
	}
}

// post is an effect POST to base with a unique Ratchet-Idempotency-Key.
func post(base string) func(int64) *http.Request {
	return func(k int64) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, base+"/v1/payment_intents", strings.NewReader(fmt.Sprintf("amount=1000&currency=usd&customer=cus_%d", k%50)))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Ratchet-Idempotency-Key", fmt.Sprint("proxy:", k))
		return r
	}
}

// benchProxy measures a bare ReverseProxy and Ratchet's proxy against the
// same trivial upstream: GETs (pass-through) and effect POSTs.
func benchProxy(dir string, d time.Duration) (map[string]result, error) {
	px, err := startProxies(dir)
	if err != nil {
		return nil, err
	}
	defer px.close()
	bare, rp := px.bare, px.ratchet
	// Bare and Ratchet alternate, twice; each keeps its best run, so drift
	// on a shared machine favours neither.
	out := map[string]result{}
	for range 2 {
		for _, c := range []struct {
			name string
			mk   func(int64) *http.Request
		}{
			{"bare GET", get(bare.URL)}, {"ratchet GET", get(rp.URL + "/stripe")},
			{"bare POST", post(bare.URL)}, {"ratchet POST", post(rp.URL + "/stripe")},
		} {
			r, err := httpLoad(16, d, c.mk)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			if r.perSec > out[c.name].perSec {
				out[c.name] = r
			}
		}
	}
	return out, nil
}
