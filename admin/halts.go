package admin

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Halts (the kill switch, see ledger/halt.go):
//
//	GET  /v1/halts                  the active halts
//	POST /v1/halts                  halt a scope (ledger.HaltRequest: namespace, effect_type, agent_id, vendor, or all; note); created_by is "admin:<name>"
//	POST /v1/halts/{id}/lift        lift one; begins in its scope are decided as before
//
// An agent's token is refused here like everywhere on this API, so an
// agent cannot lift the halt that stops it.

// Halter is what the halt endpoints need from the ledger.
type Halter interface {
	Halt(ctx context.Context, req ledger.HaltRequest) (*ledger.Halt, error)
	Lift(ctx context.Context, haltID, by string) (*ledger.Halt, error)
	ListHalts(ctx context.Context) ([]ledger.Halt, error)
}

func (a *api) listHalts(w http.ResponseWriter, r *http.Request, _ string) error {
	list, err := a.eng.ListHalts(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"halts": list})
}

func (a *api) createHalt(w http.ResponseWriter, r *http.Request, who string) error {
	var body ledger.HaltRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	body.CreatedBy = "admin:" + who
	h, err := a.eng.Halt(r.Context(), body)
	if err != nil {
		return err
	}
	a.log.Warn("operator halted a scope", "halt_id", h.HaltID, "scope", h.HaltScope.String(), "by", who)
	return writeJSON(w, http.StatusCreated, h)
}

func (a *api) liftHalt(w http.ResponseWriter, r *http.Request, who string) error {
	var body struct{}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	h, err := a.eng.Lift(r.Context(), r.PathValue("id"), "admin:"+who)
	if err != nil {
		return err
	}
	a.log.Warn("operator lifted a halt", "halt_id", h.HaltID, "scope", h.HaltScope.String(), "by", who)
	return writeJSON(w, http.StatusOK, h)
}

// Halts lists the active halts.
func (c *Client) Halts(ctx context.Context) ([]ledger.Halt, error) {
	var out struct {
		Halts []ledger.Halt `json:"halts"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/halts", nil, nil, &out)
	return out.Halts, err
}

// Halt halts a scope (CreatedBy is set by the server).
func (c *Client) Halt(ctx context.Context, req ledger.HaltRequest) (*ledger.Halt, error) {
	var out ledger.Halt
	err := c.do(ctx, http.MethodPost, "/v1/halts", nil, req, &out)
	return &out, err
}

// Lift lifts a halt.
func (c *Client) Lift(ctx context.Context, id string) (*ledger.Halt, error) {
	var out ledger.Halt
	err := c.do(ctx, http.MethodPost, "/v1/halts/"+url.PathEscape(id)+"/lift", nil, nil, &out)
	return &out, err
}
