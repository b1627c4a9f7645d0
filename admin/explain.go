package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// POST /v1/explain: what a begin, or a request through the proxy, would
// get, and why (ledger's Explain), recording nothing. It reads the ledger
// as GET /v1/budgets does and is allowed as a read.

// Explainer explains a begin (*ledger.Engine).
type Explainer interface {
	Explain(ctx context.Context, req ledger.BeginRequest) (*ledger.Explanation, error)
}

// Gate classifies a request as the proxy's gate would (*proxy.Proxy).
type Gate interface {
	Gate(method, rawURL string, header http.Header, body []byte) (*proxy.Gated, error)
}

// ExplainBody is POST /v1/explain's body: a begin as an MCP agent sends
// it (the ratchet_begin_effect arguments), or a request as it would be sent
// through the proxy. Namespace and AgentID stand for the agent's token,
// which fixes them on the MCP side; a proxied request is in the proxy's
// namespace.
type ExplainBody struct {
	Namespace string          `json:"namespace,omitempty"`
	AgentID   string          `json:"agent_id,omitempty"`
	Begin     json.RawMessage `json:"begin,omitempty"`
	Request   *ExplainRequest `json:"request,omitempty"`
}

// ExplainRequest is an HTTP request as curl would send it through the
// proxy: an absolute URL to a vendor's API host (forward mode) or the
// proxy's reverse-mode URL (/stripe/v1/...).
type ExplainRequest struct {
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"headers,omitempty"`
	Body   string      `json:"body,omitempty"`
}

// ExplainAnswer is POST /v1/explain's answer: for a proxied request, what
// the gate made of it (Gated), or why it would send no begin (NotGated:
// a read, or no vendor's; Refused: the proxy refuses it as ambiguous);
// then the explanation of the begin.
type ExplainAnswer struct {
	Gated    *proxy.Gated `json:"gated,omitempty"`
	NotGated string       `json:"not_gated,omitempty"`
	Refused  string       `json:"refused,omitempty"`
	*ledger.Explanation
}

func (a *api) explain(w http.ResponseWriter, r *http.Request, _ string) error {
	if a.opts.Explainer == nil {
		return &apiError{http.StatusNotFound, "not_found", "this admin API does not explain begins"}
	}
	var body ExplainBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	ans, err := Explain(r.Context(), a.opts.Explainer, a.opts.Gate, body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ans)
}

// Explain answers an ExplainBody with ex and g (g may be nil: no proxy).
// POST /v1/explain serves it; `ratchet policy explain` without a server
// calls it on an empty ledger of its own. A body that is not a begin or a
// request is an error with an invalid_argument code.
func Explain(ctx context.Context, ex Explainer, g Gate, body ExplainBody) (*ExplainAnswer, error) {
	var req ledger.BeginRequest
	ans := &ExplainAnswer{}
	switch {
	case (len(body.Begin) > 0) == (body.Request != nil):
		return nil, &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "give begin (an MCP begin's arguments) or request (a proxied HTTP request), one of them"}
	case body.Request != nil:
		if g == nil {
			return nil, &apiError{http.StatusNotFound, "not_found", "this admin API has no proxy to explain requests with"}
		}
		if body.Namespace != "" || body.AgentID != "" {
			return nil, &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "a proxied request is in the proxy's namespace and identity: leave namespace and agent_id out"}
		}
		q := body.Request
		gated, err := g.Gate(q.Method, q.URL, q.Header, []byte(q.Body))
		switch {
		case errors.Is(err, proxy.ErrNotGated):
			ans.NotGated = err.Error()
			return ans, nil
		case err != nil:
			ans.Refused = err.Error()
			return ans, nil
		}
		req, ans.Gated = gated.Begin, gated
	default:
		dec := json.NewDecoder(bytes.NewReader(body.Begin))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "begin is not a begin's arguments: " + err.Error()}
		}
		req.Namespace, req.AgentID = body.Namespace, body.AgentID
	}
	x, err := ex.Explain(ctx, req)
	if err != nil {
		return nil, err
	}
	ans.Explanation = x
	if ans.Gated != nil {
		ans.Gated.Begin.Payload = nil // the caller's own body, canonicalised: not echoed
	}
	return ans, nil
}

// Explain asks the server what a begin or a proxied request would get.
func (c *Client) Explain(ctx context.Context, body ExplainBody) (*ExplainAnswer, error) {
	var out ExplainAnswer
	err := c.do(ctx, http.MethodPost, "/v1/explain", nil, body, &out)
	return &out, err
}
