package notify

import (
	"path"
	"slices"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Route sends the events it matches to its sinks. Empty lists match
// everything: a route with no events matches every notification type, one
// with no namespaces every namespace. EffectTypes are globs ("payment.*");
// an event about no effect type (a budget threshold of a global ceiling
// has one: the begin that crossed it) matches only a route without them.
// A route of approval.decided also has approval.partially_approved: each
// person's approval is a decision, and a route written before quorums
// must not miss the ones short of it.
type Route struct {
	Sinks       []string
	Events      []string
	Namespaces  []string
	EffectTypes []string
}

// Router is the engine's Options.Route for routes: the union of the sinks
// of every route that matches an event, each once, in the order first
// named.
func Router(routes []Route) func(ledger.Event) []string {
	if len(routes) == 0 {
		return nil
	}
	rs := slices.Clone(routes)
	return func(ev ledger.Event) []string {
		var out []string
		for _, r := range rs {
			if !r.matches(ev) {
				continue
			}
			for _, s := range r.Sinks {
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
		return out
	}
}

func (r Route) matches(ev ledger.Event) bool {
	if len(r.Events) > 0 && !slices.Contains(r.Events, ev.Type) && !(ev.Type == ledger.EventApprovalPartiallyApproved && slices.Contains(r.Events, ledger.EventApprovalDecided)) {
		return false
	}
	if len(r.Namespaces) > 0 && !slices.ContainsFunc(r.Namespaces, func(g string) bool { return glob(g, ev.Namespace) }) {
		return false
	}
	if len(r.EffectTypes) > 0 && (ev.EffectType == "" || !slices.ContainsFunc(r.EffectTypes, func(g string) bool { return glob(g, ev.EffectType) })) {
		return false
	}
	return true
}

func glob(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}
