package admin

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// CodeUnknownParameter: a query parameter the endpoint does not take. An
// unknown filter is refused rather than ignored: ignoring it answers every
// effect to an operator who asked for one.
const CodeUnknownParameter = "unknown_parameter"

// params refuses a request with a query parameter h does not take (400
// unknown_parameter, naming the ones it does).
func params(h handlerFunc, known ...string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, who string) error {
		for name := range r.URL.Query() {
			if !slices.Contains(known, name) {
				takes := "takes no query parameters"
				if len(known) > 0 {
					takes = "takes " + strings.Join(known, ", ")
				}
				return &apiError{http.StatusBadRequest, CodeUnknownParameter,
					fmt.Sprintf("unknown query parameter %q: %s %s", truncate(name, 64), r.URL.Path, takes)}
			}
		}
		return h(w, r, who)
	}
}

// EffectDetail is GET /v1/effects/{id}: the effect and, for an operator
// who must check at the vendor whether an attempt happened, the vendor
// idempotency key of each attempt. The vendor reference of the effect
// (Effect.VendorReference) is the one its last report or resolution gave.
type EffectDetail struct {
	ledger.Effect
	Attempts []ledger.AttemptKey `json:"attempts,omitempty"`
}

func (a *api) getEffect(w http.ResponseWriter, r *http.Request, _ string) error {
	eff, err := a.eng.Get(r.Context(), "", r.PathValue("id"), "")
	if err != nil {
		return err
	}
	keys, err := a.eng.AttemptKeys(r.Context(), eff.EffectID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, EffectDetail{Effect: *eff, Attempts: keys})
}

// byKey answers a list filtered by idempotency_key: the effect of that key
// in the namespace given or, with none, in each of Options.Namespaces (a
// key is unique within a namespace only), as a page the other filters
// still apply to.
func (a *api) byKey(r *http.Request, f ledger.Filter, key string) (*ledger.Page, error) {
	nss := a.opts.Namespaces
	if f.Namespace != "" {
		nss = []string{f.Namespace}
	} else if len(nss) == 0 {
		nss = []string{ledger.DefaultNamespace}
	}
	page := &ledger.Page{Effects: []ledger.Effect{}}
	for _, ns := range nss {
		e, err := a.eng.Get(r.Context(), ns, "", key)
		if errors.Is(err, ledger.ErrEffectNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if (f.RunID == "" || e.RunID == f.RunID) && (f.GroupKey == "" || e.GroupKey == f.GroupKey) &&
			(f.AgentID == "" || e.AgentID == f.AgentID) && (f.State == "" || e.State == f.State) {
			page.Effects = append(page.Effects, *e)
		}
	}
	return page, nil
}

// scopeLookup is the body of POST /v1/budgets/lookup. The value comes in a
// body, not the URL, which access logs and proxies keep.
type scopeLookup struct {
	Namespace string `json:"namespace"`
	Dimension string `json:"dimension"`
	Value     string `json:"value"`
}

// ScopeAnswer is POST /v1/budgets/lookup: the scope a dimension value
// counts under (its keyed hash) and the live ceilings of that scope.
type ScopeAnswer struct {
	Dimension string          `json:"dimension"`
	Scope     string          `json:"scope"`
	Budgets   []ledger.Budget `json:"budgets"`
}

// lookupScope finds the ceilings of one dimension value. The value is
// hashed by the engine and dropped: it is neither logged nor stored.
func (a *api) lookupScope(w http.ResponseWriter, r *http.Request, _ string) error {
	var body scopeLookup
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	scope, err := a.eng.DimensionScope(body.Dimension, body.Value)
	if err != nil {
		return err
	}
	all, err := a.eng.Budgets(r.Context(), body.Namespace)
	if err != nil {
		return err
	}
	ans := ScopeAnswer{Dimension: body.Dimension, Scope: scope, Budgets: []ledger.Budget{}}
	for _, b := range all {
		if b.Per == "dimension:"+body.Dimension && b.Scope == scope {
			ans.Budgets = append(ans.Budgets, b)
		}
	}
	return writeJSON(w, http.StatusOK, ans)
}
