package ledger

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"
)

// Grants: scoped approvals. An operator approves one request, or grants a
// scope: up to MaxCostMicros in total and/or MaxEffects effects, of an
// effect-type glob, for an agent or a run, until a time. A begin that an
// approval threshold would send to a human executes instead when a live
// grant covers it (its namespace, type, agent and run match, and it fits
// what the grant has left), and is counted against the grant in the same
// write as the decision: grants are checked and counted inside the single
// writer, like ceilings, so concurrent begins never take more than a grant
// holds (on a shared store the writer's scan locks the ledger, so replicas
// take turns). A grant only stands in for the human: deny rules, required
// dimensions and ceilings apply as before, and ceilings are checked first.
// A grant counts the cost a begin declares when it executes; a later
// report does not change what it counted (an operator granted that much
// to be decided without asking, not spent), and a new attempt after a
// definite failure is counted again, as an approval is for one execute.
// A begin whose effect is
// waiting for an approval when a grant covers it executes too, and its
// request is recorded as approved by "grant:<id>". The answer names the
// grant (BeginResult.GrantID).

// Audit event types of grants (not notifications).
const (
	EventGrantCreated = "grant.created"
	EventGrantRevoked = "grant.revoked"
	EventGrantUsed    = "grant.used"
)

// Grant states, as views report them.
const (
	GrantActive    = "active"
	GrantExhausted = "exhausted"
	GrantExpired   = "expired"
	GrantRevoked   = "revoked"
)

// MaxGrantTTL bounds how far ahead a grant may run.
const MaxGrantTTL = 90 * 24 * time.Hour

// GrantRequest asks for a grant.
type GrantRequest struct {
	// Namespace is the grant's tenant; required.
	Namespace string `json:"namespace"`
	// EffectType is a glob over effect types ("payment.*"); required.
	EffectType string `json:"effect_type"`
	// AgentID and RunID: the grant covers only this agent's, or this
	// run's, begins; at least one is required.
	AgentID string `json:"agent_id,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	// MaxCostMicros and MaxEffects bound what the grant covers in all; at
	// least one is required.
	MaxCostMicros *int64 `json:"max_cost_micros,omitempty"`
	MaxEffects    *int64 `json:"max_effects,omitempty"`
	// ExpiresAt ends the grant; required, within MaxGrantTTL.
	ExpiresAt time.Time `json:"expires_at"`
	Note      string    `json:"note,omitempty"`
	// CreatedBy names the operator ("admin:<name>").
	CreatedBy string `json:"-"`
}

// Grant is a scoped approval and what it has covered.
type Grant struct {
	GrantID        string     `json:"grant_id"`
	Namespace      string     `json:"namespace"`
	EffectType     string     `json:"effect_type"`
	AgentID        string     `json:"agent_id,omitempty"`
	RunID          string     `json:"run_id,omitempty"`
	MaxCostMicros  *int64     `json:"max_cost_micros,omitempty"`
	MaxEffects     *int64     `json:"max_effects,omitempty"`
	UsedCostMicros int64      `json:"used_cost_micros"`
	UsedEffects    int64      `json:"used_effects"`
	CreatedAt      time.Time  `json:"created_at"`
	CreatedBy      string     `json:"created_by,omitempty"`
	ExpiresAt      time.Time  `json:"expires_at"`
	Note           string     `json:"note,omitempty"`
	RevokedAt      *time.Time `json:"revoked_at,omitempty"`
	RevokedBy      string     `json:"revoked_by,omitempty"`
	// State is computed when read: active, exhausted, expired or revoked.
	State string `json:"state"`
}

func (g *Grant) view(now time.Time) Grant {
	v := *g
	switch {
	case g.RevokedAt != nil:
		v.State = GrantRevoked
	case !now.Before(g.ExpiresAt):
		v.State = GrantExpired
	case g.MaxEffects != nil && g.UsedEffects >= *g.MaxEffects,
		g.MaxCostMicros != nil && g.UsedCostMicros >= *g.MaxCostMicros:
		v.State = GrantExhausted
	default:
		v.State = GrantActive
	}
	return v
}

// covers reports whether g covers a begin of effectType by agent in run
// costing cost.
func (g *Grant) covers(ns, effectType, agent, run string, cost int64, now time.Time) bool {
	if g.RevokedAt != nil || !now.Before(g.ExpiresAt) || g.Namespace != ns {
		return false
	}
	if g.AgentID != "" && g.AgentID != agent || g.RunID != "" && g.RunID != run {
		return false
	}
	if ok, _ := path.Match(g.EffectType, effectType); !ok {
		return false
	}
	if g.MaxEffects != nil && g.UsedEffects+1 > *g.MaxEffects {
		return false
	}
	return g.MaxCostMicros == nil || satAdd(g.UsedCostMicros, cost) <= *g.MaxCostMicros
}

// CreateGrant records a grant.
func (e *Engine) CreateGrant(ctx context.Context, req GrantRequest) (*Grant, error) {
	ns, verr := checkNamespace(req.Namespace)
	if verr != nil {
		return nil, verr
	}
	if err := checkGlob(req.EffectType); err != nil {
		return nil, err
	}
	for _, c := range []struct{ f, v string }{{"agent_id", req.AgentID}, {"run_id", req.RunID}} {
		if err := checkText(c.f, c.v, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	if req.AgentID == "" && req.RunID == "" {
		return nil, invalidArg("agent_id", "a grant is for an agent or a run: set agent_id, run_id or both")
	}
	if req.MaxCostMicros == nil && req.MaxEffects == nil {
		return nil, invalidArg("max_cost_micros", "a grant needs a bound: max_cost_micros, max_effects or both")
	}
	if m := req.MaxCostMicros; m != nil && (*m <= 0 || *m > MaxCostMicros) {
		return nil, invalidArg("max_cost_micros", "must be between 1 and %d", MaxCostMicros)
	}
	if m := req.MaxEffects; m != nil && (*m <= 0 || *m > 1_000_000) {
		return nil, invalidArg("max_effects", "must be between 1 and 1000000")
	}
	if err := checkNote("note", req.Note); err != nil {
		return nil, err
	}
	g, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Grant, error) {
		switch {
		case !req.ExpiresAt.After(now):
			return nil, invalidArg("expires_at", "must be in the future")
		case req.ExpiresAt.Sub(now) > MaxGrantTTL:
			return nil, invalidArg("expires_at", "is more than %d days ahead; grant less, and again later", int(MaxGrantTTL.Hours()/24))
		}
		g := &Grant{GrantID: e.ids.next("grt_", now), Namespace: ns, EffectType: req.EffectType, AgentID: req.AgentID,
			RunID: req.RunID, MaxCostMicros: req.MaxCostMicros, MaxEffects: req.MaxEffects, CreatedAt: now,
			CreatedBy: req.CreatedBy, ExpiresAt: req.ExpiresAt.UTC(), Note: req.Note}
		if err := setJSON(t, key(kindGrant, g.GrantID), g); err != nil {
			return nil, err
		}
		t.emit(Event{Type: EventGrantCreated, Namespace: ns, EffectType: g.EffectType, AgentID: g.AgentID, RunID: g.RunID,
			GrantID: g.GrantID, Actor: g.CreatedBy, CostMicros: g.MaxCostMicros})
		out := g.view(now)
		return &out, nil
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("grant created", "grant_id", g.GrantID, "namespace", g.Namespace, "effect_type", g.EffectType, "by", g.CreatedBy)
	return g, nil
}

func checkGlob(g string) *Error {
	if g == "" {
		return invalidArg("effect_type", "is required: a glob over effect types, e.g. \"payment.*\"")
	}
	if _, err := path.Match(g, ""); err != nil || len(g) > MaxEffectTypeLen || !globRe.MatchString(g) {
		return invalidArg("effect_type", "%q is not a glob over lowercase effect types", truncate(g, 64))
	}
	return nil
}

// RevokeGrant ends a grant now; what it covered stays covered.
func (e *Engine) RevokeGrant(ctx context.Context, grantID, by string) (*Grant, error) {
	if err := checkText("grant_id", grantID, MaxIDLen, true); err != nil {
		return nil, err
	}
	g, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Grant, error) {
		var g Grant
		if err := getJSON(t, key(kindGrant, grantID), &g); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, &Error{Code: CodeGrantNotFound, Field: "grant_id", Message: fmt.Sprintf("no grant %q", truncate(grantID, 64))}
			}
			return nil, err
		}
		if g.RevokedAt == nil {
			g.RevokedAt, g.RevokedBy = &now, by
			if err := setJSON(t, key(kindGrant, grantID), &g); err != nil {
				return nil, err
			}
			t.emit(Event{Type: EventGrantRevoked, Namespace: g.Namespace, EffectType: g.EffectType, GrantID: g.GrantID, Actor: by})
		}
		out := g.view(now)
		return &out, nil
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("grant revoked", "grant_id", g.GrantID, "by", by)
	return g, nil
}

// ListGrants returns the grants of a namespace (empty: every namespace),
// oldest first; only live ones unless all.
func (e *Engine) ListGrants(ctx context.Context, namespace string, all bool) ([]Grant, error) {
	now := e.clock.Now()
	out := []Grant{}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindGrant), nil, func(_, v []byte) (bool, error) {
			var g Grant
			if err := decodeJSON(v, &g); err != nil {
				return false, err
			}
			if namespace != "" && g.Namespace != namespace {
				return true, nil
			}
			if w := g.view(now); all || w.State == GrantActive {
				out = append(out, w)
			}
			return true, nil
		})
	})
	return out, err
}

// grantFor returns the oldest live grant that covers a begin (nil when
// none does), read afresh inside the writer.
func (e *Engine) grantFor(t *opTxn, ns, effectType, agent, run string, cost int64, now time.Time) (*Grant, error) {
	var ids []string
	err := t.Scan(prefix(kindGrant), nil, func(k, v []byte) (bool, error) {
		var g Grant
		if err := decodeJSON(v, &g); err != nil {
			return false, err
		}
		if g.covers(ns, effectType, agent, run, cost, now) {
			ids = append(ids, lastPart(k))
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		// The scan does not see this op's own writes; the key read does.
		var g Grant
		if err := getJSON(t, key(kindGrant, id), &g); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return nil, err
		}
		if g.covers(ns, effectType, agent, run, cost, now) {
			return &g, nil
		}
	}
	return nil, nil
}

// useGrant counts a begin against g, and, when the begin's effect was
// waiting for an approval, records that request as approved by the grant.
func (e *Engine) useGrant(t *opTxn, g *Grant, in *beginInput, rec *effectRec, now time.Time) error {
	cost := int64(0)
	if c := in.req.EstimatedCostMicros; c != nil {
		cost = *c
	}
	g.UsedEffects++
	g.UsedCostMicros = satAdd(g.UsedCostMicros, cost)
	if err := setJSON(t, key(kindGrant, g.GrantID), g); err != nil {
		return err
	}
	if rec != nil && rec.Approval != nil && rec.Approval.State == ApprovalPending {
		a := rec.Approval
		a.State, a.DecidedBy, a.DecidedAt, a.UsedAt = ApprovalApproved, "grant:"+g.GrantID, &now, &now
		ev := effectEvent(EventApprovalDecided, rec)
		ev.State, ev.AgentID, ev.ApprovalID, ev.Actor, ev.CostMicros, ev.GrantID = StateApproved, a.AgentID, a.ApprovalID, a.DecidedBy, &a.EstimatedCostMicros, g.GrantID
		t.emit(ev)
	}
	t.emit(Event{Type: EventGrantUsed, Namespace: in.req.Namespace, EffectType: in.req.EffectType, AgentID: in.req.AgentID,
		RunID: in.req.RunID, GrantID: g.GrantID, CostMicros: in.req.EstimatedCostMicros})
	return nil
}

// waitingGrant reports whether a live grant covers the pending approval
// request of rec, so that its begin is decided anew (and executes).
func (e *Engine) waitingGrant(t *opTxn, rec *effectRec, now time.Time) (bool, error) {
	a := rec.Approval
	if a.ApproversRequired > 1 { // a quorum is several people's, never a grant's (begin.go)
		return false, nil
	}
	g, err := e.grantForEffect(t, rec.Namespace, rec.EffectType, rec.Operation, a.AgentID, a.RunID, a.EstimatedCostMicros, now)
	return g != nil, err
}

// purgeGrants deletes grants that ended (expired or revoked) longer than
// the effects' retention ago.
func (e *Engine) purgeGrants(ctx context.Context) error {
	cutoff := e.clock.Now().Add(-e.defaults.Retention)
	var old [][]byte
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindGrant), nil, func(k, v []byte) (bool, error) {
			var g Grant
			if err := decodeJSON(v, &g); err != nil {
				return false, err
			}
			end := g.ExpiresAt
			if g.RevokedAt != nil && g.RevokedAt.Before(end) {
				end = *g.RevokedAt
			}
			if end.Before(cutoff) {
				old = append(old, k)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	return e.deleteKeys(ctx, old)
}
