package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Client calls the admin API; the operator CLI is built on it.
type Client struct {
	// URL is the admin listener's base URL, e.g. http://127.0.0.1:8788.
	URL string
	// Token is the admin bearer token; empty sends none.
	Token string
	// HTTP is the client to use; nil means one with a 30 s timeout.
	HTTP *http.Client
}

// Error is an error answered by the admin API.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	u := strings.TrimSuffix(c.URL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if method == http.MethodPost && body == nil {
		body = struct{}{} // the API takes POSTs only as application/json
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("admin URL %q: %w", c.URL, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the admin API at %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("reading the admin API's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		return errorOf(resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// errorOf is the *Error of an answer with status and body b.
func errorOf(status int, b []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
		return &Error{Status: status, Code: "http_" + fmt.Sprint(status), Message: strings.TrimSpace(string(b))}
	}
	return &Error{Status: status, Code: e.Error.Code, Message: e.Error.Message}
}

// Approvals lists approvals in a state ("" for all).
func (c *Client) Approvals(ctx context.Context, state string) ([]ledger.Approval, error) {
	var out struct {
		Approvals []ledger.Approval `json:"approvals"`
	}
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	err := c.do(ctx, http.MethodGet, "/v1/approvals", q, nil, &out)
	return out.Approvals, err
}

// Decide approves (approve true) or rejects an approval.
func (c *Client) Decide(ctx context.Context, id string, approve bool, note string) (*ledger.Approval, error) {
	verb := "reject"
	if approve {
		verb = "approve"
	}
	var out ledger.Approval
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verb, nil, decisionBody{Note: note}, &out)
	return &out, err
}

// EffectFilter is what Effects selects by: the engine's filter, and the
// idempotency key (the effect of that key, in the filter's namespace or
// in each the server searches).
type EffectFilter struct {
	ledger.Filter
	IdempotencyKey string
}

// Effects lists effects.
func (c *Client) Effects(ctx context.Context, f EffectFilter) (*ledger.Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "run_id": f.RunID, "group_key": f.GroupKey,
		"agent_id": f.AgentID, "state": string(f.State), "cursor": f.Cursor, "idempotency_key": f.IdempotencyKey} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", fmt.Sprint(f.Limit))
	}
	var out ledger.Page
	err := c.do(ctx, http.MethodGet, "/v1/effects", q, nil, &out)
	return &out, err
}

// Effect returns one effect and each attempt's vendor key.
func (c *Client) Effect(ctx context.Context, id string) (*EffectDetail, error) {
	var out EffectDetail
	err := c.do(ctx, http.MethodGet, "/v1/effects/"+url.PathEscape(id), nil, nil, &out)
	return &out, err
}

// LookupScope returns the scope a dimension value counts under and its
// live ceilings; the value travels in the body and is hashed by the server.
func (c *Client) LookupScope(ctx context.Context, namespace, dimension, value string) (*ScopeAnswer, error) {
	var out ScopeAnswer
	err := c.do(ctx, http.MethodPost, "/v1/budgets/lookup", nil, scopeLookup{Namespace: namespace, Dimension: dimension, Value: value}, &out)
	return &out, err
}

// Resolve settles an effect whose outcome is unknown.
func (c *Client) Resolve(ctx context.Context, id string, resolution ledger.Outcome, note string) (*ledger.Effect, error) {
	var out ledger.Effect
	err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(id)+"/resolve", nil, resolveBody{Resolution: resolution, Note: note}, &out)
	return &out, err
}

// Budgets lists every live ceiling counter, of one namespace or (empty)
// all.
func (c *Client) Budgets(ctx context.Context, namespace string) ([]ledger.Budget, error) {
	var out struct {
		Budgets []ledger.Budget `json:"budgets"`
	}
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	err := c.do(ctx, http.MethodGet, "/v1/budgets", q, nil, &out)
	return out.Budgets, err
}
