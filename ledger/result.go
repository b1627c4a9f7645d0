package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// A report comes after the action happened, so it is never refused for its
// size: a refusal would leave the effect pending until its lease ran out,
// and an action that succeeded would then block its retries as
// indeterminate. What does not fit is kept in part, as the proxy keeps a
// vendor answer too large to store, and the answer says what was kept.

// summaryFieldsBytes bounds the top-level fields a result summary keeps,
// and maxSummaryString each string among them, in characters.
const (
	summaryFieldsBytes = 4 << 10
	maxSummaryString   = 256
)

// firstFields are the fields a summary keeps before any other: the ones a
// caller replays (which object was created, how it ended).
var firstFields = []string{"id", "object", "status", "state", "type"}

// keepResult bounds a reported result: canonical JSON up to MaxResultBytes
// is kept whole; a larger one is kept as
//
//	{"result_omitted": {"bytes": N, "sha256": "<hex>", "limit": MaxResultBytes}, <fields>}
//
// where N and the SHA-256 are of its canonical JSON and <fields> are its
// top-level members (when it is an object) whose values are numbers,
// booleans or strings of at most 256 characters, id, object, status, state
// and type first, within 4 KiB. note says what was kept ("" when all of
// it). Only a result that is not JSON is refused.
func keepResult(field string, raw []byte) (kept []byte, note string, _ *Error) {
	if len(raw) == 0 {
		return nil, "", nil
	}
	c, err := canonicalJSON(raw)
	if err != nil {
		return nil, "", invalidArg(field, "must be one JSON value: %v", err)
	}
	if len(c) <= MaxResultBytes {
		return c, "", nil
	}
	sum := sha256.Sum256(c)
	summary := map[string]any{"result_omitted": map[string]any{"bytes": len(c), "sha256": hex.EncodeToString(sum[:]), "limit": MaxResultBytes}}
	var members map[string]json.RawMessage
	var names []string
	if json.Unmarshal(c, &members) == nil {
		for name := range members {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int {
			ia, ib := slices.Index(firstFields, a), slices.Index(firstFields, b)
			switch {
			case ia >= 0 && ib >= 0:
				return ia - ib
			case ia >= 0:
				return -1
			case ib >= 0:
				return 1
			}
			return strings.Compare(a, b)
		})
	}
	var keptNames []string
	budget := summaryFieldsBytes
	for _, name := range names {
		v := members[name]
		if name == "result_omitted" || !scalar(v) || len(name)+len(v) > budget {
			continue
		}
		budget -= len(name) + len(v)
		summary[name] = v
		keptNames = append(keptNames, name)
	}
	kept, _ = json.Marshal(summary)
	if kept, err = canonicalJSON(kept); err != nil {
		return nil, "", invalidArg(field, "could not be summarised: %v", err) // cannot happen: it was JSON
	}
	note = fmt.Sprintf("%s was %d bytes, over the %d-byte limit: Ratchet kept its size and SHA-256", field, len(c), MaxResultBytes)
	if len(keptNames) > 0 {
		note += " and its top-level fields " + strings.Join(keptNames, ", ")
	}
	return kept, note + " (result_omitted in the stored result); later duplicates are answered with that.", nil
}

// scalar reports whether a JSON value is a number, a boolean or a short
// string.
func scalar(v json.RawMessage) bool {
	switch {
	case len(v) == 0:
		return false
	case v[0] == '"':
		var s string
		return json.Unmarshal(v, &s) == nil && utf8.RuneCountInString(s) <= maxSummaryString
	case v[0] == 't' || v[0] == 'f':
		return true
	}
	return v[0] == '-' || v[0] >= '0' && v[0] <= '9'
}

// keepNote bounds free text reported after the fact (a report's error):
// text over MaxTextLen characters is cut there, and note says so. Other
// problems (control characters) are still refused by checkNote.
func keepNote(field, s string) (string, string, *Error) {
	n := utf8.RuneCountInString(s)
	if n <= MaxTextLen {
		return s, "", checkNote(field, s)
	}
	cut := []rune(s)[:MaxTextLen-1]
	s = string(cut) + "…"
	return s, fmt.Sprintf("%s was %d characters: Ratchet kept the first %d.", field, n, MaxTextLen-1), checkNote(field, s)
}
