package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// groupRec is the stored state of a group.
type groupRec struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Since is when its unwind began (zero in records written before it
	// was kept, and while active).
	Since     time.Time `json:"since,omitzero"`
	UnwoundAt time.Time `json:"unwound_at,omitzero"`
	// Owner is the agent that began the group's first step ("" when that
	// begin named none). Nil in records written before it was kept: then
	// the group's steps say whose it is (groupOwner).
	Owner *string `json:"owner,omitempty"`
}

// Group is a group's state, for operators.
type Group struct {
	Namespace string    `json:"namespace"`
	GroupKey  string    `json:"group_key"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	UnwoundAt time.Time `json:"unwound_at,omitzero"`
}

// Groups lists the groups of a namespace ("" for every namespace) whose
// state is one of states (none: every group), in key order.
func (e *Engine) Groups(ctx context.Context, namespace string, states ...string) ([]Group, error) {
	pfx := prefix(kindGroup)
	if namespace != "" {
		pfx = prefix(kindGroup, namespace)
	}
	out := []Group{}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(pfx, nil, func(k, v []byte) (bool, error) {
			var g groupRec
			if err := decodeJSON(v, &g); err != nil {
				return false, err
			}
			if len(states) > 0 && !slices.Contains(states, g.State) {
				return true, nil
			}
			parts := bytes.SplitN(k[2:], []byte{0}, 2)
			if len(parts) != 2 {
				return false, fmt.Errorf("group key %q: not in the layout", k)
			}
			out = append(out, Group{Namespace: string(parts[0]), GroupKey: string(parts[1]), State: g.State,
				Reason: g.Reason, Since: g.Since, UnwoundAt: g.UnwoundAt})
			return true, nil
		})
	})
	return out, err
}

// joinGroup records a new effect as a step of its group, creating the group
// with the effect's agent as its owner.
func (e *Engine) joinGroup(t *opTxn, rec *effectRec) error {
	gk := key(kindGroup, rec.Namespace, rec.GroupKey)
	if _, err := t.Get(gk); errors.Is(err, ErrNotFound) {
		if err := setJSON(t, gk, &groupRec{State: GroupActive, Owner: &rec.AgentID}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return t.Set(key(kindGroupMember, rec.Namespace, rec.GroupKey, rec.EffectID), nil)
}

// checkJoin refuses a step of a group that belongs to another agent, when
// the begin's agent is its caller's principal (not a label it claimed): a
// group is one agent's workflow. Another agent's step in it would make the
// owner's unwind unauthorized (checkGroupOwner) and would hand out an undo
// the owner may not perform, so one agent could block another's rollback.
// The rule holds for new attempts of a step too. Group keys, like
// idempotency keys, are shared by a namespace's agents and first come, first
// served: a refused step did nothing and is told to use its own group_key.
func (e *Engine) checkJoin(t *opTxn, req *BeginRequest, group string, g *groupRec) error {
	if req.AgentClaimed {
		return nil
	}
	owner, known, err := e.groupOwner(t, req.Namespace, group, g)
	if err != nil {
		return err
	}
	if known && owner == req.AgentID {
		return nil
	}
	return &Error{Code: CodeUnauthorized, Field: "group_key", Message: fmt.Sprintf(
		"group %q belongs to another agent (the one that began its first step); your credentials may add steps only to your own groups. Nothing was done: begin this step with a group_key of your own", truncate(group, 64))}
}

// groupOwner returns the agent a group belongs to. A group recorded before
// owners were kept is its steps' agent when every ordinary step is one
// agent's (the record is then completed, so this is asked once); when its
// steps are several agents', it has no owner (known false) and no
// credential-fixed agent may add to it, as none could unwind it.
func (e *Engine) groupOwner(t *opTxn, ns, group string, g *groupRec) (owner string, known bool, err error) {
	if g.Owner != nil {
		return *g.Owner, true, nil
	}
	agents := map[string]bool{}
	err = t.Scan(prefix(kindGroupMember, ns, group), nil, func(k, _ []byte) (bool, error) {
		rec, err := e.effectByID(t, ns, lastPart(k))
		if err != nil {
			return false, err
		}
		if rec.CompensatesEffectID == "" {
			agents[rec.AgentID], owner = true, rec.AgentID
		}
		return len(agents) < 2, nil
	})
	if err != nil || len(agents) != 1 {
		return "", false, err
	}
	g.Owner = &owner
	return owner, true, setJSON(t, key(kindGroup, ns, group), g)
}

// ownsGroup reports whether agent owns the group of step rec.
func (e *Engine) ownsGroup(t *opTxn, rec *effectRec, agent string) (bool, error) {
	if rec.GroupKey == "" {
		return false, nil
	}
	var g groupRec
	if err := getJSON(t, key(kindGroup, rec.Namespace, rec.GroupKey), &g); err != nil {
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	owner, known, err := e.groupOwner(t, rec.Namespace, rec.GroupKey, &g)
	return known && owner == agent, err
}

// undoKey is the idempotency key a step's compensation is begun with:
// deterministic (every unwind hands out the same one) and derived with the
// server secret from the step's namespace and effect id, so that no one
// can begin an ordinary action under it first and make the undo an
// idempotency_key_conflict. Ledgers written before handed out
// legacyUndoKey; a compensation begun under that key keeps it.
func (e *Engine) undoKey(t *opTxn, target *effectRec) (string, error) {
	if e.legacyUndoKeys {
		return legacyUndoKey(target.IdempotencyKey), nil
	}
	old := legacyUndoKey(target.IdempotencyKey)
	rec, err := e.effectByKey(t, target.Namespace, old)
	switch {
	case err == nil && rec.CompensatesEffectID == target.EffectID:
		return old, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return "", err
	}
	sum := e.macs.keyedSum("undo-key", target.Namespace, target.EffectID)
	return "undo:" + hex.EncodeToString(sum[:16]), nil
}

// legacyUndoKey is the undo key of ledgers written before undoKey: "undo:"
// and the step's key, or a hash of it when that would be too long. Anyone
// could guess it.
func legacyUndoKey(k string) string {
	u := "undo:" + k
	if len(u) > MaxKeyLen {
		sum := sha256.Sum256([]byte(k))
		u = "undo:sha256:" + hex.EncodeToString(sum[:])
	}
	return u
}

// Unwind marks a group unwinding (new steps in it are denied) and returns
// what is left to undo, newest completion first: the compensations to
// perform, the steps that cannot be undone, and the steps whose outcome is
// not known yet. Calling it again returns what is still left; once every
// declared compensation has succeeded the group is unwound.
func (e *Engine) Unwind(ctx context.Context, req UnwindRequest) (*UnwindResult, error) {
	var err *Error
	if req.Namespace, err = checkNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if err = checkText("group_key", req.GroupKey, MaxIDLen, true); err != nil {
		return nil, err
	}
	if err = checkNote("reason", req.Reason); err != nil {
		return nil, err
	}
	res, serr := submit(ctx, e, func(t *opTxn, now time.Time) (*UnwindResult, error) {
		t.principal = req.Principal
		if req.AgentID != "" {
			if err := e.checkGroupOwner(t, req.Namespace, req.GroupKey, req.AgentID); err != nil {
				return nil, err
			}
		}
		gk := key(kindGroup, req.Namespace, req.GroupKey)
		var g groupRec
		if err := getJSON(t, gk, &g); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, &Error{Code: CodeGroupNotFound, Field: "group_key", Message: fmt.Sprintf("no effects were begun with group_key %q in this namespace", truncate(req.GroupKey, 64))}
			}
			return nil, err
		}
		if g.State == GroupActive {
			g.State, g.Reason, g.Since = GroupUnwinding, req.Reason, now
			if err := setJSON(t, gk, &g); err != nil {
				return nil, err
			}
		}
		res, err := e.unwindPlan(t, req.Namespace, req.GroupKey, &g, now)
		if err != nil {
			return nil, err
		}
		if g.State == GroupUnwinding && len(res.Compensations) == 0 && len(res.Unresolved) == 0 {
			g.State, g.UnwoundAt = GroupUnwound, now
			if err := setJSON(t, gk, &g); err != nil {
				return nil, err
			}
		}
		res.State = g.State
		res.Message = unwindMessage(res)
		t.emit(Event{Type: EventGroupUnwind, Namespace: req.Namespace, GroupKey: req.GroupKey, State: State(g.State),
			Reason: req.Reason, AgentID: req.AgentID, Actor: actor("agent", req.AgentID)})
		return res, nil
	})
	if serr != nil {
		return nil, serr
	}
	e.log.Info("unwind", "namespace", req.Namespace, "state", res.State,
		"compensations", len(res.Compensations), "permanent", len(res.Permanent), "unresolved", len(res.Unresolved))
	return res, nil
}

// checkGroupOwner refuses an unwind by a caller whose credentials fix an
// agent when the group is not that agent's (groupOwner): rolling a group
// back denies its next steps and hands out their compensations, so an
// agent may roll back only its own work. The owner decides, not the steps'
// labels: a step that a caller fixing no agent (a namespace token) added
// under another label does not make the owner's own unwind unauthorized.
func (e *Engine) checkGroupOwner(t *opTxn, ns, group, agent string) error {
	var g groupRec
	if err := getJSON(t, key(kindGroup, ns, group), &g); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil // Unwind answers group_not_found
		}
		return err
	}
	owner, known, err := e.groupOwner(t, ns, group, &g)
	if err != nil {
		return err
	}
	if known && owner == agent {
		return nil
	}
	return &Error{Code: CodeUnauthorized, Field: "group_key", Message: fmt.Sprintf(
		"group %q belongs to another agent (the one that began its first step); your credentials may unwind only your own groups", truncate(group, 64))}
}

func unwindMessage(r *UnwindResult) string {
	switch {
	case len(r.Unresolved) > 0:
		return "Some steps have no known outcome yet: wait for them or resolve them, perform the listed compensations (begin each with its compensates_effect_id and idempotency_key), and unwind the group again."
	case len(r.Compensations) > 0:
		return "Perform each compensation in the order listed: begin it with its compensates_effect_id and idempotency_key, perform it, report it. Then unwind the group again."
	case len(r.Permanent) > 0:
		return "Everything that can be undone has been undone. The permanent steps cannot be undone: tell the user about them."
	}
	return "The group is fully unwound."
}

// unwindPlan lists what is left in a group.
func (e *Engine) unwindPlan(t *opTxn, ns, group string, g *groupRec, now time.Time) (*UnwindResult, error) {
	res := &UnwindResult{GroupKey: group, Reason: g.Reason, Compensations: []CompensationStep{},
		Permanent: []UnwindStep{}, Unresolved: []UnwindStep{}}
	var steps []*effectRec
	err := t.Scan(prefix(kindGroupMember, ns, group), nil, func(k, _ []byte) (bool, error) {
		rec, err := e.effectByID(t, ns, lastPart(k))
		if err != nil {
			return false, err
		}
		steps = append(steps, rec)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(steps, func(i, j int) bool { return completed(steps[i]).After(completed(steps[j])) })
	for _, rec := range steps {
		v := rec.view(now)
		step := UnwindStep{EffectID: v.EffectID, IdempotencyKey: v.IdempotencyKey, EffectType: v.EffectType, State: v.State, CompletedAt: completed(rec)}
		switch {
		case rec.CompensatesEffectID != "":
			if v.State == StatePending || v.State == StateIndeterminate {
				res.Unresolved = append(res.Unresolved, step)
			}
		case v.State == StateSucceeded && rec.Compensation != nil:
			k, err := e.undoKey(t, rec)
			if err != nil {
				return nil, err
			}
			res.Compensations = append(res.Compensations, CompensationStep{
				CompensatesEffectID: rec.EffectID, IdempotencyKey: k,
				Compensation: *rec.Compensation,
			})
		case v.State == StateSucceeded:
			res.Permanent = append(res.Permanent, step)
		case v.State == StatePending || v.State == StateIndeterminate:
			res.Unresolved = append(res.Unresolved, step)
		}
	}
	return res, nil
}

func completed(rec *effectRec) time.Time {
	if rec.CompletedAt != nil {
		return *rec.CompletedAt
	}
	return rec.UpdatedAt
}

// markCompensated records that a compensation succeeded: the effect it
// undoes becomes compensated.
func (e *Engine) markCompensated(t *opTxn, comp *effectRec, now time.Time) error {
	target, err := e.effectByID(t, comp.Namespace, comp.CompensatesEffectID)
	if errors.Is(err, ErrNotFound) {
		return nil // purged by retention meanwhile
	}
	if err != nil {
		return err
	}
	if target.State != StateSucceeded {
		return nil
	}
	target.State, target.CompensatedBy = StateCompensated, comp.EffectID
	if err := e.putEffect(t, target, now); err != nil {
		return err
	}
	if target.GroupKey != "" && target.GroupKey != comp.GroupKey {
		return e.checkUnwound(t, target.Namespace, target.GroupKey, now)
	}
	return nil
}

// checkUnwound marks an unwinding group unwound once nothing is left.
func (e *Engine) checkUnwound(t *opTxn, ns, group string, now time.Time) error {
	gk := key(kindGroup, ns, group)
	var g groupRec
	if err := getJSON(t, gk, &g); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	if g.State != GroupUnwinding {
		return nil
	}
	plan, err := e.unwindPlan(t, ns, group, &g, now)
	if err != nil {
		return err
	}
	if len(plan.Compensations) > 0 || len(plan.Unresolved) > 0 {
		return nil
	}
	g.State, g.UnwoundAt = GroupUnwound, now
	return setJSON(t, gk, &g)
}
