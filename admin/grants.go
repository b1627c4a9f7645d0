package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Grants (scoped approvals, see ledger/grants.go) and the notification
// outbox:
//
//	GET  /v1/grants?namespace=&all=true     live grants (all: also expired, revoked, exhausted)
//	POST /v1/grants                         create one (GrantBody); created_by is "admin:<name>"
//	POST /v1/grants/{id}/revoke             end one now
//	GET  /v1/outbox?dead=true               notification events waiting (dead: only those given up)

// GrantBody is the body of POST /v1/grants: ledger.GrantRequest, with the
// end given as expires_at (RFC 3339) or ttl (a duration from now, e.g.
// "2h").
type GrantBody struct {
	Namespace     string    `json:"namespace"`
	EffectType    string    `json:"effect_type"`
	AgentID       string    `json:"agent_id,omitempty"`
	RunID         string    `json:"run_id,omitempty"`
	MaxCostMicros *int64    `json:"max_cost_micros,omitempty"`
	MaxEffects    *int64    `json:"max_effects,omitempty"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	TTL           string    `json:"ttl,omitempty"`
	Note          string    `json:"note,omitempty"`
}

func (a *api) listGrants(w http.ResponseWriter, r *http.Request, _ string) error {
	q := r.URL.Query()
	list, err := a.eng.ListGrants(r.Context(), q.Get("namespace"), q.Get("all") == "true")
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"grants": list})
}

func (a *api) createGrant(w http.ResponseWriter, r *http.Request, who string) error {
	var body GrantBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	exp := body.ExpiresAt
	switch {
	case body.TTL != "" && !exp.IsZero():
		return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "give expires_at or ttl, not both"}
	case body.TTL != "":
		d, err := time.ParseDuration(body.TTL)
		if err != nil || d <= 0 {
			return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "ttl: " + strconv.Quote(body.TTL) + " is not a positive duration (e.g. 2h)"}
		}
		exp = time.Now().Add(d)
	case exp.IsZero():
		return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "expires_at or ttl is required: a grant always ends"}
	}
	g, err := a.eng.CreateGrant(r.Context(), ledger.GrantRequest{Namespace: body.Namespace, EffectType: body.EffectType,
		AgentID: body.AgentID, RunID: body.RunID, MaxCostMicros: body.MaxCostMicros, MaxEffects: body.MaxEffects,
		ExpiresAt: exp, Note: body.Note, CreatedBy: "admin:" + who})
	if err != nil {
		return err
	}
	a.log.Info("operator created a grant", "grant_id", g.GrantID, "namespace", g.Namespace, "effect_type", g.EffectType, "by", who)
	return writeJSON(w, http.StatusCreated, g)
}

func (a *api) revokeGrant(w http.ResponseWriter, r *http.Request, who string) error {
	var body struct{}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	g, err := a.eng.RevokeGrant(r.Context(), r.PathValue("id"), "admin:"+who)
	if err != nil {
		return err
	}
	a.log.Info("operator revoked a grant", "grant_id", g.GrantID, "by", who)
	return writeJSON(w, http.StatusOK, g)
}

func (a *api) outbox(w http.ResponseWriter, r *http.Request, _ string) error {
	list, err := a.eng.Outbox(r.Context(), r.URL.Query().Get("dead") == "true")
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"entries": list})
}

// Grants lists grants (all: also those no longer live).
func (c *Client) Grants(ctx context.Context, namespace string, all bool) ([]ledger.Grant, error) {
	var out struct {
		Grants []ledger.Grant `json:"grants"`
	}
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	if all {
		q.Set("all", "true")
	}
	err := c.do(ctx, http.MethodGet, "/v1/grants", q, nil, &out)
	return out.Grants, err
}

// CreateGrant creates a grant.
func (c *Client) CreateGrant(ctx context.Context, body GrantBody) (*ledger.Grant, error) {
	var out ledger.Grant
	err := c.do(ctx, http.MethodPost, "/v1/grants", nil, body, &out)
	return &out, err
}

// RevokeGrant ends a grant.
func (c *Client) RevokeGrant(ctx context.Context, id string) (*ledger.Grant, error) {
	var out ledger.Grant
	err := c.do(ctx, http.MethodPost, "/v1/grants/"+url.PathEscape(id)+"/revoke", nil, nil, &out)
	return &out, err
}

// Outbox lists the notification outbox (dead: only dead letters).
func (c *Client) Outbox(ctx context.Context, dead bool) ([]ledger.OutboxEntry, error) {
	var out struct {
		Entries []ledger.OutboxEntry `json:"entries"`
	}
	q := url.Values{}
	if dead {
		q.Set("dead", "true")
	}
	err := c.do(ctx, http.MethodGet, "/v1/outbox", q, nil, &out)
	return out.Entries, err
}
