package ledger

import (
	"context"
	"encoding/base64"
	"errors"
)

// Get returns an effect by id, or by idempotency key within a namespace.
// An empty namespace looks up an id in every namespace (operators only).
func (e *Engine) Get(ctx context.Context, namespace, effectID, idempotencyKey string) (*Effect, error) {
	if namespace != "" {
		var err *Error
		if namespace, err = checkNamespace(namespace); err != nil {
			return nil, err
		}
	}
	if effectID == "" && idempotencyKey == "" {
		return nil, invalidArg("effect_id", "effect_id or idempotency_key is required")
	}
	if effectID == "" && namespace == "" {
		return nil, invalidArg("effect_id", "looking up by idempotency_key needs a namespace")
	}
	for _, f := range []struct{ name, val string }{{"effect_id", effectID}, {"idempotency_key", idempotencyKey}} {
		if err := checkText(f.name, f.val, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	now := e.clock.Now()
	var out Effect
	err := e.view(ctx, func(r Reader) error {
		var rec *effectRec
		var err error
		if effectID != "" {
			rec, err = e.effectByID(r, namespace, effectID)
		} else {
			rec, err = e.effectByKey(r, namespace, idempotencyKey)
		}
		if err != nil {
			return notFound(err, effectID+idempotencyKey)
		}
		out = rec.view(now)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns effects matching f, oldest first, one page at a time.
func (e *Engine) List(ctx context.Context, f Filter) (*Page, error) {
	if f.Namespace != "" {
		var err *Error
		if f.Namespace, err = checkNamespace(f.Namespace); err != nil {
			return nil, err
		}
	}
	for _, fl := range []struct{ name, val string }{{"run_id", f.RunID}, {"group_key", f.GroupKey}, {"agent_id", f.AgentID}} {
		if err := checkText(fl.name, fl.val, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	switch f.State {
	case "", StatePending, StateSucceeded, StateFailed, StateIndeterminate, StateAwaitingApproval,
		StateApproved, StateRejected, StateCompensated:
	default:
		return nil, invalidArg("state", "%q is not an effect state", truncate(string(f.State), 32))
	}
	if f.Limit < 0 || f.Limit > maxListPage {
		return nil, invalidArg("limit", "must be between 1 and %d", maxListPage)
	}
	if f.Limit == 0 {
		f.Limit = defaultListPage
	}
	// The scan follows the narrowest index the filter allows; the rest of
	// the filter is applied to each record.
	var pfx []byte
	switch {
	case f.Namespace != "" && f.GroupKey != "":
		pfx = prefix(kindGroupMember, f.Namespace, f.GroupKey)
	case f.Namespace != "" && f.RunID != "":
		pfx = prefix(kindRun, f.Namespace, f.RunID)
	case f.Namespace != "":
		pfx = prefix(kindNamespace, f.Namespace)
	default:
		pfx = prefix(kindEffect)
	}
	var start []byte
	if f.Cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		if err != nil || len(c) == 0 {
			return nil, invalidArg("cursor", "is not a cursor this list returned")
		}
		start = append(append(append([]byte{}, pfx...), c...), 0) // just after the last id
	}
	now := e.clock.Now()
	page := &Page{Effects: []Effect{}}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(pfx, start, func(k, _ []byte) (bool, error) {
			id := lastPart(k)
			if len(page.Effects) == f.Limit {
				page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(page.Effects[f.Limit-1].EffectID))
				return false, nil
			}
			rec, err := e.effectByID(r, f.Namespace, id)
			if errors.Is(err, ErrNotFound) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			v := rec.view(now)
			if (f.RunID == "" || v.RunID == f.RunID) && (f.GroupKey == "" || v.GroupKey == f.GroupKey) &&
				(f.AgentID == "" || v.AgentID == f.AgentID) && (f.State == "" || v.State == f.State) {
				page.Effects = append(page.Effects, v)
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// Budgets returns every live ceiling counter with its scope, limit, counted
// and remaining (a counter kept only for its past spend, see "Clock jumps",
// is not live). An empty namespace returns every namespace.
func (e *Engine) Budgets(ctx context.Context, namespace string) ([]Budget, error) {
	now := e.clock.Now()
	out := []Budget{}
	pfx := prefix(kindCounter)
	if namespace != "" {
		pfx = prefix(kindCounter, namespace)
	}
	at := map[string]int{} // a pool's key → its place in out
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(pfx, nil, func(k, val []byte) (bool, error) {
			var c counterRec
			if err := decodeCounter(val, &c); err != nil {
				return false, err
			}
			cc, ok := e.policy.ceiling(c.Ceiling)
			if !ok || e.counterIdle(&c, now) {
				return true, nil // the ceiling was removed from the policy, or counts nothing now
			}
			counted := c.counted(cc, now)
			pool := string(c.poolKey(k)) // a share adds to its pool's row (see Shares)
			if i, ok := at[pool]; ok {
				b := &out[i].BudgetUse
				b.Counted = satAdd(b.Counted, counted)
				b.Remaining = max(0, b.Limit-b.Counted)
				return true, nil
			}
			scope := c.Scope
			if c.RunID != "" {
				scope += " run=" + c.RunID
			}
			at[pool] = len(out)
			out = append(out, Budget{Namespace: c.Namespace, Scope: scope, BudgetUse: BudgetUse{
				Name: cc.Name, Per: cc.Per, Unit: cc.unit(), Limit: cc.limit, Counted: counted,
				Remaining: max(0, cc.limit-counted), Window: cc.Window,
			}, Observed: cc.observed})
			return true, nil
		})
	})
	return out, err
}
