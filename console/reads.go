package console

import (
	"errors"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Bounds of the console's own reads, so that one page view costs a
// bounded amount of work on a large ledger.
const (
	searchResults = 100 // effects per search answer
	searchScan    = 20  // pages of the engine's list one search answer walks
	historyEvents = 200 // events shown on an effect's page
	groupsShown   = 50  // unwinding groups on the groups page
)

// searchAnswer is GET /console/api/search.
type searchAnswer struct {
	Effects []ledger.Effect `json:"effects"`
	// NextCursor continues a search that stopped at its bound.
	NextCursor string `json:"next_cursor,omitempty"`
}

// search finds effects by idempotency key (or effect id), run, group,
// agent, state and effect type (a glob such as payment.*), each optional.
// By key it looks the key up in the namespace given, or in each of
// Options.Namespaces; otherwise it walks the engine's list, at most
// searchScan pages of it per answer.
func (c *console) search(w http.ResponseWriter, r *http.Request, _ *session) {
	q := r.URL.Query()
	f := ledger.Filter{Namespace: q.Get("namespace"), RunID: q.Get("run_id"), GroupKey: q.Get("group_key"),
		AgentID: q.Get("agent_id"), State: ledger.State(q.Get("state")), Cursor: q.Get("cursor"), Limit: 500}
	typ := q.Get("effect_type")
	if typ != "" {
		if _, err := path.Match(typ, ""); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", "effect_type is not a valid glob")
			return
		}
	}
	keep := func(e *ledger.Effect) bool {
		ok := (f.RunID == "" || e.RunID == f.RunID) && (f.GroupKey == "" || e.GroupKey == f.GroupKey) &&
			(f.AgentID == "" || e.AgentID == f.AgentID) && (f.State == "" || e.State == f.State)
		if typ != "" {
			m, _ := path.Match(typ, e.EffectType)
			ok = ok && m
		}
		return ok
	}
	ans := searchAnswer{Effects: []ledger.Effect{}}
	if key := q.Get("key"); key != "" {
		found := map[string]bool{}
		add := func(e *ledger.Effect, err error) error {
			if errors.Is(err, ledger.ErrEffectNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if !found[e.EffectID] && keep(e) {
				found[e.EffectID] = true
				ans.Effects = append(ans.Effects, *e)
			}
			return nil
		}
		if strings.HasPrefix(key, "eff_") {
			if err := add(c.eng.Get(r.Context(), f.Namespace, key, "")); err != nil {
				writeLedgerError(w, err)
				return
			}
		}
		nss := c.opts.Namespaces
		if f.Namespace != "" {
			nss = []string{f.Namespace}
		} else if len(nss) == 0 {
			nss = []string{ledger.DefaultNamespace}
		}
		for _, ns := range nss {
			if err := add(c.eng.Get(r.Context(), ns, "", key)); err != nil {
				writeLedgerError(w, err)
				return
			}
		}
		writeJSON(w, http.StatusOK, ans)
		return
	}
	for range searchScan {
		page, err := c.eng.List(r.Context(), f)
		if err != nil {
			writeLedgerError(w, err)
			return
		}
		for i := range page.Effects {
			if keep(&page.Effects[i]) {
				ans.Effects = append(ans.Effects, page.Effects[i])
			}
		}
		f.Cursor = page.NextCursor
		if f.Cursor == "" || len(ans.Effects) >= searchResults {
			break
		}
	}
	if len(ans.Effects) > searchResults {
		ans.Effects = ans.Effects[:searchResults] // the cursor is past them: say so by not offering one
		f.Cursor = ""
	}
	ans.NextCursor = f.Cursor
	writeJSON(w, http.StatusOK, ans)
}

// historyAnswer is GET /console/api/history/{id}: the effect and what the
// audit log recorded about it, oldest first.
type historyAnswer struct {
	Effect *ledger.Effect `json:"effect"`
	Events []ledger.Event `json:"events"`
	Note   string         `json:"note,omitempty"`
}

// errEnough stops an audit scan early.
var errEnough = errors.New("enough")

// history is an effect's attempts and transitions over time, and who
// decided what, from the audit log.
func (c *console) history(w http.ResponseWriter, r *http.Request, _ *session) {
	eff, err := c.eng.Get(r.Context(), "", r.PathValue("id"), "")
	if err != nil {
		writeLedgerError(w, err)
		return
	}
	ans := historyAnswer{Effect: eff, Events: []ledger.Event{}}
	err = c.eng.Audit(r.Context(), eff.CreatedAt.Add(-time.Second), time.Time{}, func(rec ledger.AuditRecord) error {
		if rec.Event.EffectID == eff.EffectID {
			ans.Events = append(ans.Events, rec.Event)
			if len(ans.Events) >= historyEvents {
				return errEnough
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		writeLedgerError(w, err)
		return
	}
	if errors.Is(err, errEnough) {
		ans.Note = "the first " + strconv.Itoa(historyEvents) + " events are shown"
	}
	if len(ans.Events) == 0 {
		ans.Note = "the audit log holds no events for this effect (audit.enabled is off, or they are past audit.retention)"
	}
	sort.SliceStable(ans.Events, func(i, j int) bool { return ans.Events[i].At.Before(ans.Events[j].At) })
	writeJSON(w, http.StatusOK, ans)
}

// group is one group on the groups page: its steps as an unwind sees them.
type group struct {
	Namespace string `json:"namespace"`
	GroupKey  string `json:"group_key"`
	// State is unwinding or unwound, from the group's last unwind in the
	// audit log ("" when shown by key and never unwound).
	State  string    `json:"state,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Compensations are succeeded steps with a declared undo not yet done;
	// Permanent, succeeded steps with none; Unresolved, steps (undos
	// included) whose outcome is not known yet; Compensated, undone steps.
	Compensations []ledger.Effect `json:"compensations"`
	Permanent     []ledger.Effect `json:"permanent"`
	Unresolved    []ledger.Effect `json:"unresolved"`
	Compensated   []ledger.Effect `json:"compensated"`
	// Steps counts every effect in the group.
	Steps int `json:"steps"`
}

type groupsAnswer struct {
	Groups []group `json:"groups"`
	Note   string  `json:"note,omitempty"`
}

// unwinds returns every group that is unwinding or unwound, by namespace
// and group key, as an event: At is when its unwind began, Reason the
// reason first given (the engine keeps both with the group).
func (c *console) unwinds(r *http.Request) (map[[2]string]ledger.Event, error) {
	groups, err := c.eng.Groups(r.Context(), "", ledger.GroupUnwinding, ledger.GroupUnwound)
	if err != nil {
		return nil, err
	}
	last := make(map[[2]string]ledger.Event, len(groups))
	for _, g := range groups {
		last[[2]string{g.Namespace, g.GroupKey}] = ledger.Event{Type: ledger.EventGroupUnwind, Namespace: g.Namespace,
			GroupKey: g.GroupKey, State: ledger.State(g.State), Reason: g.Reason, At: g.Since}
	}
	return last, nil
}

// listGroups lists the groups being unwound (and the unwound ones), or
// one group by namespace and group_key.
func (c *console) listGroups(w http.ResponseWriter, r *http.Request, _ *session) {
	q := r.URL.Query()
	last, err := c.unwinds(r)
	if err != nil {
		writeLedgerError(w, err)
		return
	}
	if gk := q.Get("group_key"); gk != "" {
		ns := q.Get("namespace")
		if ns == "" {
			ns = ledger.DefaultNamespace
		}
		g := group{Namespace: ns, GroupKey: gk}
		if ev, ok := last[[2]string{ns, gk}]; ok {
			g.State, g.Reason, g.Since = string(ev.State), ev.Reason, ev.At
		}
		if err := c.fillGroup(r, &g); err != nil {
			writeLedgerError(w, err)
			return
		}
		if g.Steps == 0 {
			writeError(w, http.StatusNotFound, string(ledger.CodeGroupNotFound), "no effects in that namespace have that group_key")
			return
		}
		writeJSON(w, http.StatusOK, groupsAnswer{Groups: []group{g}})
		return
	}
	evs := make([]ledger.Event, 0, len(last))
	for _, ev := range last {
		evs = append(evs, ev)
	}
	// Unwinding first, then the newest.
	sort.Slice(evs, func(i, j int) bool {
		if (evs[i].State == ledger.GroupUnwinding) != (evs[j].State == ledger.GroupUnwinding) {
			return evs[i].State == ledger.GroupUnwinding
		}
		return evs[i].At.After(evs[j].At)
	})
	ans := groupsAnswer{Groups: []group{}}
	for _, ev := range evs {
		if len(ans.Groups) == groupsShown {
			ans.Note = "the first " + strconv.Itoa(groupsShown) + " groups are shown"
			break
		}
		g := group{Namespace: ev.Namespace, GroupKey: ev.GroupKey, State: string(ev.State), Reason: ev.Reason, Since: ev.At}
		if err := c.fillGroup(r, &g); err != nil {
			writeLedgerError(w, err)
			return
		}
		ans.Groups = append(ans.Groups, g)
	}
	writeJSON(w, http.StatusOK, ans)
}

// fillGroup sorts a group's steps as an unwind would, newest completion
// first. An unwinding group with nothing left to compensate or wait for is
// unwound, as the engine rules when its last compensation succeeds.
func (c *console) fillGroup(r *http.Request, g *group) error {
	g.Compensations, g.Permanent, g.Unresolved, g.Compensated = []ledger.Effect{}, []ledger.Effect{}, []ledger.Effect{}, []ledger.Effect{}
	var steps []ledger.Effect
	f := ledger.Filter{Namespace: g.Namespace, GroupKey: g.GroupKey, Limit: 500}
	for range searchScan {
		page, err := c.eng.List(r.Context(), f)
		if err != nil {
			return err
		}
		steps = append(steps, page.Effects...)
		if f.Cursor = page.NextCursor; f.Cursor == "" {
			break
		}
	}
	done := func(e *ledger.Effect) time.Time {
		if e.CompletedAt != nil {
			return *e.CompletedAt
		}
		return e.UpdatedAt
	}
	sort.SliceStable(steps, func(i, j int) bool { return done(&steps[i]).After(done(&steps[j])) })
	g.Steps = len(steps)
	for _, e := range steps {
		switch {
		case e.State == ledger.StatePending || e.State == ledger.StateIndeterminate:
			g.Unresolved = append(g.Unresolved, e)
		case e.CompensatesEffectID != "":
		case e.State == ledger.StateCompensated:
			g.Compensated = append(g.Compensated, e)
		case e.State == ledger.StateSucceeded && e.Compensation != nil:
			e.Compensation.Payload = nil // payloads are never shown
			g.Compensations = append(g.Compensations, e)
		case e.State == ledger.StateSucceeded:
			g.Permanent = append(g.Permanent, e)
		}
	}
	if g.State == ledger.GroupUnwinding && len(g.Compensations) == 0 && len(g.Unresolved) == 0 {
		g.State = ledger.GroupUnwound
	}
	return nil
}
