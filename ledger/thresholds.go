package ledger

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Budget thresholds. With Options.BudgetThresholds (e.g. 0.5, 0.8, 1.0) a
// begin whose reservation leaves a ceiling counter at or past one of those
// fractions of its limit emits a budget.threshold event, in the same write
// as the reservation, unless that threshold already fired in the counter's
// window. So each fires once per ceiling, scope and window: the counter's
// threshold record (a key of its own, kindThreshold with the counter's
// parts) keeps when each fired, and a threshold fires again only once a
// whole window has passed since (never again for a run window). The record
// is read and written in the writer's transaction, so concurrent spenders
// fire each threshold exactly once; it is read only by begins past a
// threshold that this engine has not yet seen fired (the engine remembers,
// for the rest of the window, what it read), so it costs nothing on the
// hot path.
//
// What is measured is what the begin's answer counts (BudgetUse.Counted):
// exact on one engine; on a shared store, the most the ceiling can have
// counted (the replica's own share exactly, the others' by their grants,
// see "Shares" in budget.go). A fleet's thresholds may so fire early (by
// at most what the other replicas hold but have not spent), never late.

// BudgetThreshold is what a budget.threshold event says about its ceiling.
type BudgetThreshold struct {
	Ceiling string `json:"ceiling"`
	Per     string `json:"per"`
	// Scope is the scope value: empty for global, the agent or run id, or
	// the keyed hash of a dimension value.
	Scope     string  `json:"scope,omitempty"`
	Window    string  `json:"window"`
	Unit      string  `json:"unit"`
	Limit     int64   `json:"limit"`
	Counted   int64   `json:"counted"`
	Threshold float64 `json:"threshold"`
}

// thresholdRec is stored at a counter's threshold key: when each
// threshold (its fraction, formatted) last fired.
type thresholdRec struct {
	Fired map[string]time.Time `json:"fired"`
}

// ValidateThresholds checks budget thresholds: each a fraction above 0 and
// at most 1.
func ValidateThresholds(ts []float64) error {
	for _, f := range ts {
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("budget threshold %v must be above 0 and at most 1", f)
		}
	}
	return nil
}

// normalThresholds sorts and dedupes thresholds.
func normalThresholds(ts []float64) []float64 {
	out := slices.Clone(ts)
	slices.Sort(out)
	return slices.Compact(out)
}

// mark is the amount at which fraction f of limit is reached.
func mark(limit int64, f float64) int64 {
	return int64(math.Ceil(float64(limit) * f))
}

// thresholdKey is the threshold record of the counter at k (a pool's
// key: thresholds are per ceiling and scope, not per share).
func thresholdKey(counter []byte) []byte {
	return append([]byte(kindThreshold), counter[len(kindCounter):]...)
}

// firedMemory is what the writer read of threshold records: for a record
// key and threshold, when it fired. Writer only. It holds only what was
// read from the store, never what an op wrote (which its batch may yet
// discard), and is dropped whole when it grows past firedMemoryMax.
type firedMemory map[string]time.Time

const firedMemoryMax = 1 << 14

// fireThresholds emits budget.threshold for every threshold a begin's
// reservations reached that has not fired in its window.
func (e *Engine) fireThresholds(t *opTxn, in *beginInput, uses []*ceilingUse, now time.Time) error {
	if len(e.thresholds) == 0 || t.dry { // e.fired is the writer's
		return nil
	}
	for _, u := range uses {
		// An observed ceiling refuses nothing: paging someone that it
		// "reached its limit" would read as an enforced one (its would-be
		// refusals are policy.observed records instead).
		if u.c.limit <= 0 || u.amount <= 0 || u.c.observed {
			continue
		}
		pool := u.key
		if u.pool != nil {
			pool = u.poolKey
		}
		k := thresholdKey(pool)
		counted := u.budget(now).Counted
		inWindow := func(at time.Time) bool { return u.c.window == 0 || now.Sub(at) < u.c.window }
		var due []float64
		for _, f := range e.thresholds {
			if counted < mark(u.c.limit, f) {
				break // ascending
			}
			if at, ok := e.fired[string(k)+"\x00"+fmtFraction(f)]; ok && inWindow(at) {
				continue
			}
			due = append(due, f)
		}
		if len(due) == 0 {
			continue
		}
		var rec thresholdRec
		if err := getJSON(t, k, &rec); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if rec.Fired == nil {
			rec.Fired = map[string]time.Time{}
		}
		if e.fired == nil || len(e.fired) > firedMemoryMax {
			e.fired = firedMemory{}
		}
		fired := false
		for _, f := range due {
			name := fmtFraction(f)
			if at, ok := rec.Fired[name]; ok && inWindow(at) {
				e.fired[string(k)+"\x00"+name] = at
				continue
			}
			rec.Fired[name], fired = now, true
			t.emit(Event{Type: EventBudgetThreshold, Namespace: in.req.Namespace, EffectType: in.req.EffectType,
				AgentID: in.req.AgentID, RunID: in.req.RunID,
				Reason: fmt.Sprintf("ceiling %s reached %s%% of its limit", u.c.Name, fmtFraction(f*100)),
				Budget: &BudgetThreshold{Ceiling: u.c.Name, Per: u.c.Per, Scope: u.rec.Scope, Window: u.c.Window, Unit: u.c.unit(),
					Limit: u.c.limit, Counted: counted, Threshold: f}})
		}
		if fired {
			if err := setJSON(t, k, &rec); err != nil {
				return err
			}
		}
		if top := e.thresholds[len(e.thresholds)-1]; fired && u.c.OnThreshold == OnThresholdHalt && rec.Fired[fmtFraction(top)].Equal(now) {
			if err := e.haltOnThreshold(t, in, u, top, now); err != nil {
				return err
			}
		}
	}
	return nil
}

func fmtFraction(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// haltOnThreshold halts what a ceiling with on_threshold: halt covers once
// its highest threshold fired: its rule's effect types in the namespace,
// and for a ceiling per agent only that agent's (a halt cannot match a
// run or a dimension's hashed value, so those halt the rule's types).
func (e *Engine) haltOnThreshold(t *opTxn, in *beginInput, u *ceilingUse, top float64, now time.Time) error {
	s := HaltScope{Namespace: in.req.Namespace, EffectType: u.c.match}
	if u.c.Per == "agent" {
		s.AgentID = in.req.AgentID
	}
	note := fmt.Sprintf("budget ceiling %s reached %s%% of its limit (on_threshold: halt)", u.c.Name, fmtFraction(top*100))
	_, err := e.halt(t, s, note, "budget:"+u.c.Name, now)
	if CodeOf(err) == CodeInvalidArgument { // MaxHalts active: the alert still stands
		e.log.Warn("on_threshold: halt not recorded", "ceiling", u.c.Name, "err", err)
		return nil
	}
	return err
}
