package ledger

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"
)

// Halts: the kill switch. An operator halts a scope (a namespace, an
// effect-type glob, an agent, a vendor, any of them together, or
// everything), and until the halt is lifted every begin in scope that
// would start an attempt is denied with reason halted and the operator's
// note: a new key, a new attempt after a failure, an approved request, a
// waiting request a grant would cover, and a compensation (an undo is a
// side effect too, and an operator stopping everything means everything;
// they lift or narrow the halt to let undos through). Answers that start
// nothing keep working: a duplicate replays its result, in_flight and
// blocked say what is under way, so nothing in flight is lost. Reports,
// resolves, vendors' settlements and reads are untouched. A pending
// approval in scope cannot be approved (CodeHalted) but may be rejected;
// a recovery claim in scope is refused (CodeHalted), so automatic
// same-key resends pause until the halt is lifted.
//
// The rules a change must keep:
//   - Every active halt is one record (haltsKey), read by every begin in
//     the same store transaction as its decision (it is among the keys a
//     begin names for the prefetch, so a shared store reads it in the
//     batch's first round trip, under a shared key lock). A halt is
//     written under that key's exclusive lock, so on a fleet a begin that
//     starts after Halt returned, on any replica, sees it: there is no
//     cache that could let one through. An exclusive store's engine caches
//     the value it wrote, which is exact there.
//   - A halt and its lifting are events (halt.started, halt.lifted) in the
//     audit chain and the outbox, written with the change.

// Halt event types (notifications too).
const (
	EventHaltStarted = "halt.started"
	EventHaltLifted  = "halt.lifted"
)

// MaxHalts bounds the active halts: they are read by every begin.
const MaxHalts = 64

// haltsKey holds the active halts (JSON, oldest first).
var haltsKey = key(kindMeta, "halts")

// HaltScope is what a halt stops: the begins matching every field set.
// All fields empty is everything (HaltRequest.All must say so).
type HaltScope struct {
	Namespace string `json:"namespace,omitempty"`
	// EffectType is a glob over effect types ("payment.*").
	EffectType string `json:"effect_type,omitempty"`
	AgentID    string `json:"agent_id,omitempty"`
	// Vendor matches the begin's vendor (a proxied request's always; an
	// MCP begin's only when it names one).
	Vendor string `json:"vendor,omitempty"`
}

func (s HaltScope) everything() bool { return s == HaltScope{} }

// covers reports whether the scope holds a begin of effectType (a
// proxied call's operation) by agent at vendor in ns. The glob matches the
// operation too, as a rule's match and a grant do: an operator halting
// "stripe.*", the proxy's old names their rules may still be written in,
// stops the proxied Stripe calls now typed payment.charge.
func (s HaltScope) covers(ns, effectType, operation, agent, vendor string) bool {
	if s.Namespace != "" && s.Namespace != ns || s.AgentID != "" && s.AgentID != agent || s.Vendor != "" && s.Vendor != vendor {
		return false
	}
	if s.EffectType == "" {
		return true
	}
	if ok, _ := path.Match(s.EffectType, effectType); ok {
		return true
	}
	ok, _ := path.Match(s.EffectType, operation)
	return ok && operation != ""
}

// String is the scope as people read it ("namespace=shop effect_type=payment.*").
func (s HaltScope) String() string {
	if s.everything() {
		return "everything"
	}
	out := ""
	for _, p := range []struct{ k, v string }{{"namespace", s.Namespace}, {"effect_type", s.EffectType}, {"agent_id", s.AgentID}, {"vendor", s.Vendor}} {
		if p.v != "" {
			if out != "" {
				out += " "
			}
			out += p.k + "=" + p.v
		}
	}
	return out
}

// HaltRequest asks for a halt.
type HaltRequest struct {
	HaltScope
	// All must be set, and the scope empty, to halt everything: an empty
	// scope by mistake must not stop a whole fleet.
	All bool `json:"all,omitempty"`
	// Note says why; required. The agent is told it.
	Note string `json:"note"`
	// CreatedBy names the operator ("admin:<name>", "budget:<ceiling>").
	CreatedBy string `json:"-"`
}

// Halt is an active halt (or, as Lift returns it, a lifted one).
type Halt struct {
	HaltID string `json:"halt_id"`
	HaltScope
	Note      string     `json:"note"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	LiftedAt  *time.Time `json:"lifted_at,omitempty"`
	LiftedBy  string     `json:"lifted_by,omitempty"`
}

// Halt stops the begins of a scope until the halt is lifted. A scope that
// is already halted is not halted twice: its halt is returned as it is.
func (e *Engine) Halt(ctx context.Context, req HaltRequest) (*Halt, error) {
	s, verr := checkHaltScope(req)
	if verr != nil {
		return nil, verr
	}
	if req.Note == "" {
		return nil, invalidArg("note", "is required: say why, for the agents refused and the people told")
	}
	if err := checkNote("note", req.Note); err != nil {
		return nil, err
	}
	h, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Halt, error) {
		return e.halt(t, s, req.Note, req.CreatedBy, now)
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("halt", "halt_id", h.HaltID, "scope", h.HaltScope.String(), "by", h.CreatedBy)
	return h, nil
}

// halt records a halt of s inside the writer (also budget thresholds'
// on_threshold: halt).
func (e *Engine) halt(t *opTxn, s HaltScope, note, by string, now time.Time) (*Halt, error) {
	hs, err := readHalts(t)
	if err != nil {
		return nil, err
	}
	for i := range hs {
		if hs[i].HaltScope == s {
			return &hs[i], nil
		}
	}
	if len(hs) >= MaxHalts {
		return nil, newErr(CodeInvalidArgument, "%d halts are active, the most there may be; halt a wider scope and lift narrower ones", MaxHalts)
	}
	h := Halt{HaltID: e.ids.next("hlt_", now), HaltScope: s, Note: note, CreatedAt: now, CreatedBy: by}
	if err := setJSON(t, haltsKey, append(hs, h)); err != nil {
		return nil, err
	}
	t.emit(haltEvent(EventHaltStarted, &h, by))
	return &h, nil
}

func haltEvent(typ string, h *Halt, by string) Event {
	return Event{Type: typ, Namespace: h.Namespace, EffectType: h.EffectType, AgentID: h.AgentID, Vendor: h.Vendor,
		HaltID: h.HaltID, Actor: by, Note: h.Note}
}

func checkHaltScope(req HaltRequest) (HaltScope, *Error) {
	s := req.HaltScope
	if s.everything() != req.All {
		if req.All {
			return s, invalidArg("all", "halts everything, so it takes no namespace, effect_type, agent_id or vendor")
		}
		return s, invalidArg("all", "a halt needs a scope: namespace, effect_type, agent_id, vendor, or all to halt everything")
	}
	if s.Namespace != "" {
		if _, err := checkNamespace(s.Namespace); err != nil {
			return s, err
		}
	}
	if s.EffectType != "" {
		if err := checkGlob(s.EffectType); err != nil {
			return s, err
		}
	}
	if err := checkText("agent_id", s.AgentID, MaxIDLen, false); err != nil {
		return s, err
	}
	v, err := checkVendor("vendor", s.Vendor)
	if err != nil {
		return s, err
	}
	s.Vendor = v
	return s, nil
}

// Lift ends a halt; begins in its scope are decided as before from the
// next one on (unless another halt holds them).
func (e *Engine) Lift(ctx context.Context, haltID, by string) (*Halt, error) {
	if err := checkText("halt_id", haltID, MaxIDLen, true); err != nil {
		return nil, err
	}
	h, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Halt, error) {
		hs, err := readHalts(t)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(hs, func(h Halt) bool { return h.HaltID == haltID })
		if i < 0 {
			return nil, &Error{Code: CodeHaltNotFound, Field: "halt_id", Message: fmt.Sprintf("no active halt %q (ratchet halts lists them)", truncate(haltID, 64))}
		}
		h := hs[i]
		rest := slices.Delete(hs, i, i+1)
		if len(rest) == 0 {
			err = t.Delete(haltsKey)
		} else {
			err = setJSON(t, haltsKey, rest)
		}
		if err != nil {
			return nil, err
		}
		h.LiftedAt, h.LiftedBy = &now, by
		t.emit(haltEvent(EventHaltLifted, &h, by))
		return &h, nil
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("halt lifted", "halt_id", h.HaltID, "scope", h.HaltScope.String(), "by", by)
	return h, nil
}

// ListHalts returns the active halts, oldest first.
func (e *Engine) ListHalts(ctx context.Context) ([]Halt, error) {
	var hs []Halt
	err := e.view(ctx, func(r Reader) error {
		var err error
		hs, err = readHalts(r)
		return err
	})
	if hs == nil {
		hs = []Halt{}
	}
	return hs, err
}

func readHalts(r Reader) ([]Halt, error) {
	var hs []Halt
	if err := getJSON(r, haltsKey, &hs); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return hs, nil
}

// haltFor returns the oldest active halt whose scope holds a begin (nil
// when none does), read in the op's transaction.
func haltFor(t Reader, ns, effectType, operation, agent, vendor string) (*Halt, error) {
	hs, err := readHalts(t)
	if err != nil {
		return nil, err
	}
	for i := range hs {
		if hs[i].covers(ns, effectType, operation, agent, vendor) {
			return &hs[i], nil
		}
	}
	return nil, nil
}

// halted is the answer to a begin a halt refuses.
func halted(rec *effectRec, h *Halt) *BeginResult {
	res := denied(rec, ReasonHalted, fmt.Sprintf("An operator halted these actions (%s): %q. Do not perform it or try another way; stop and tell the user.", h.HaltScope.String(), h.Note))
	res.HaltID = h.HaltID
	return res
}

// haltedErr refuses what a halt holds besides begins (approving, a
// recovery resend).
func haltedErr(h *Halt, what string) *Error {
	return &Error{Code: CodeHalted, Message: fmt.Sprintf("%s: halt %s (%s) holds it: %q; lift the halt first (ratchet resume %s)", what, h.HaltID, h.HaltScope.String(), h.Note, h.HaltID)}
}
