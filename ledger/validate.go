package ledger

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Input bounds. Every field an agent or operator sends is bounded so that
// hostile input costs little and is refused with a clear invalid_argument.
const (
	MaxKeyLen        = 255
	MaxIDLen         = 255 // run_id, agent_id, group_key, vendor_reference
	MaxPayloadBytes  = 64 << 10
	MaxResultBytes   = 64 << 10
	MaxDimensions    = 16
	MaxDimValueLen   = 256
	MaxTextLen       = 1024 // error, note, reason, description
	MaxCostMicros    = int64(1e15)
	MaxEffectTypeLen = 128
	maxNamespaceLen  = 63
	MaxVendorNameLen = 32
	DefaultNamespace = "default"
	maxListPage      = 500
	defaultListPage  = 50
)

// The names a begin carries are checked by hand-written matchers rather
// than these expressions on the hot path (regexp's matching was a fiftieth
// of an engine pair's instructions); the expressions stay the spec, and
// TestNameMatchersAreTheExpressions and FuzzNameMatchersAreTheExpressions
// hold the matchers to them.
var (
	effectTypeRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*){1,5}$`)
	namespaceRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	vendorRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
)

// checkText refuses invalid UTF-8, control characters, invisible
// characters, text not in Unicode NFC and over-long text. Invisible ones
// (format characters such as zero-width spaces and joiners, bidirectional
// marks, overrides and isolates, the byte order mark and the soft hyphen;
// variation selectors and the other default-ignorable code points, such as
// the combining grapheme joiner and the Hangul fillers; the blank braille
// pattern) and decomposed forms make two identifiers that look the same
// differ, or one look like another in an operator's listing. They are
// refused rather than stripped or normalised: that would merge keys an
// agent meant as different.
func checkText(field, s string, max int, required bool) *Error {
	if s == "" {
		if required {
			return invalidArg(field, "is required")
		}
		return nil
	}
	if printableASCII(s) { // checkRunes refuses these only for their length
		if len(s) > max {
			return invalidArg(field, "is %d characters; the limit is %d", len(s), max)
		}
		return nil
	}
	return checkRunes(field, s, max)
}

// checkRunes is checkText's check of a non-empty s, rune by rune.
func checkRunes(field, s string, max int) *Error {
	if !utf8.ValidString(s) {
		return invalidArg(field, "must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > max {
		return invalidArg(field, "is %d characters; the limit is %d", n, max)
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return invalidArg(field, "must not contain control characters")
	}
	if strings.IndexFunc(s, isInvisible) >= 0 {
		return invalidArg(field, "must not contain invisible characters (zero-width, bidirectional controls, variation selectors, fillers)")
	}
	if !norm.NFC.IsNormalString(s) {
		return invalidArg(field, "must be in Unicode normalization form C (composed characters, as most keyboards type them)")
	}
	return nil
}

// printableASCII reports whether s is only the characters from space to
// '~': valid UTF-8, one character a byte, none of them a control or
// invisible character, and always in NFC. Most keys and ids are; checkText
// skips its rune-by-rune table lookups for them (a twentieth of an engine
// pair's instructions went to those).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// invisibleRanges are the invisible characters checkText refuses.
var invisibleRanges = []*unicode.RangeTable{unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point}

func isInvisible(r rune) bool { return r == '\u2800' || unicode.IsOneOf(invisibleRanges, r) }

// checkNote is checkText for free text, where newlines and tabs are fine.
func checkNote(field, s string) *Error {
	if !utf8.ValidString(s) {
		return invalidArg(field, "must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxTextLen {
		return invalidArg(field, "is %d characters; the limit is %d", n, MaxTextLen)
	}
	if strings.IndexFunc(s, noteControl) >= 0 {
		return invalidArg(field, "must not contain control characters other than newline and tab")
	}
	return nil
}

// noteControl reports whether checkNote refuses r.
func noteControl(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }

// CheckID says what is wrong with an id that names a principal (an
// agent_id, an admin's name) read from outside the config, such as a
// token's claim: "" when it is one the engine accepts (required, at most
// MaxIDLen characters of valid NFC UTF-8 without control or invisible
// characters), else what it must be ("must not contain control
// characters").
func CheckID(s string) string {
	if err := checkText("id", s, MaxIDLen, true); err != nil {
		return strings.TrimPrefix(err.Message, "id: ")
	}
	return ""
}

// CheckNamespace returns an invalid_argument *Error when ns is not a
// namespace the engine accepts (empty means the default namespace), so that
// configuration naming one is refused when it is loaded, not on every call.
func CheckNamespace(ns string) error {
	if _, err := checkNamespace(ns); err != nil {
		return err
	}
	return nil
}

func checkNamespace(ns string) (string, *Error) {
	if ns == "" {
		return DefaultNamespace, nil
	}
	if len(ns) > maxNamespaceLen || !isLowerName(ns) {
		return "", invalidArg("namespace", "%q must be 1-63 lowercase letters, digits, '.', '_' or '-'", ns)
	}
	return ns, nil
}

func checkEffectType(field, t string) *Error {
	if t == "" {
		return invalidArg(field, "is required, e.g. \"payment.charge\"")
	}
	if len(t) > MaxEffectTypeLen || !isEffectType(t) {
		return invalidArg(field, "%q must be 2-6 lowercase dot-separated parts, e.g. \"email.send\" or \"github.pr.create\"", truncate(t, 64))
	}
	return nil
}

func checkVendor(field, v string) (string, *Error) {
	v = strings.ToLower(v)
	if v == "" {
		return "", nil
	}
	if len(v) > MaxVendorNameLen || !isLowerName(v) {
		return "", invalidArg(field, "%q must be a short lowercase vendor name such as \"stripe\"", truncate(v, 40))
	}
	return v, nil
}

func checkCost(field string, c *int64) *Error {
	if c == nil {
		return nil
	}
	if *c < 0 {
		return invalidArg(field, "must be >= 0 micro-USD, got %d", *c)
	}
	if *c > MaxCostMicros {
		return invalidArg(field, "%d exceeds the largest accepted cost (%d micro-USD)", *c, MaxCostMicros)
	}
	return nil
}

// checkJSON bounds and canonicalises a JSON document; empty stays empty.
func checkJSON(field string, raw []byte, max int) ([]byte, *Error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if len(raw) > max {
		return nil, invalidArg(field, "is %d bytes; the limit is %d", len(raw), max)
	}
	c, err := canonicalJSON(raw)
	if err != nil {
		return nil, invalidArg(field, "must be one JSON value: %v", err)
	}
	return c, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// beginInput is a validated begin with everything derived that does not
// need the ledger: canonical payload, fingerprint, dimension hashes.
type beginInput struct {
	req         BeginRequest
	fingerprint string
	dims        map[string]string // name → keyed hash
	lease       int               // 0: default, capped later by policy
	pol         effectivePolicy
	replica     string // the engine's replica id on a shared store (see Shares)
	// payload is the canonical payload of a compensation, compared with
	// the one declared; nil for other begins. It is never stored.
	payload []byte
	// observed is what observed rules would have answered (observe.go),
	// set by the writer as it decides; nil when they add nothing.
	observed *observation
}

func (e *Engine) validateBegin(req BeginRequest) (*beginInput, error) {
	var err *Error
	if req.Namespace, err = checkNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if err = checkText("idempotency_key", req.IdempotencyKey, MaxKeyLen, true); err != nil {
		return nil, err
	}
	if err = checkEffectType("effect_type", req.EffectType); err != nil {
		return nil, err
	}
	for _, k := range req.SameAs {
		if err = checkText("idempotency_key", k, MaxKeyLen, true); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ name, val string }{
		{"run_id", req.RunID}, {"agent_id", req.AgentID}, {"group_key", req.GroupKey},
		{"compensates_effect_id", req.CompensatesEffectID},
	} {
		if err = checkText(f.name, f.val, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	if req.Vendor, err = checkVendor("vendor", req.Vendor); err != nil {
		return nil, err
	}
	if req.Operation != "" {
		if err = checkEffectType("operation", req.Operation); err != nil {
			return nil, err
		}
	}
	if err = checkCost("estimated_cost_micros", req.EstimatedCostMicros); err != nil {
		return nil, err
	}
	payload, err := checkJSON("payload", req.Payload, MaxPayloadBytes)
	if err != nil {
		return nil, err
	}
	if len(req.Dimensions) > MaxDimensions {
		return nil, invalidArg("dimensions", "has %d entries; the limit is %d", len(req.Dimensions), MaxDimensions)
	}
	in := &beginInput{dims: make(map[string]string, len(req.Dimensions)), replica: e.replica}
	for name, val := range req.Dimensions {
		if !isDimName(name) {
			return nil, invalidArg("dimensions", "name %q must be lowercase letters, digits and _ (at most 63)", truncate(name, 64))
		}
		if err = checkText("dimensions."+name, val, MaxDimValueLen, true); err != nil {
			return nil, err
		}
		in.dims[name] = e.macs.keyedHash("dimension", name, val)
	}
	if c := req.Compensation; c != nil {
		if err = checkEffectType("compensation.effect_type", c.EffectType); err != nil {
			return nil, err
		}
		if c.Vendor, err = checkVendor("compensation.vendor", c.Vendor); err != nil {
			return nil, err
		}
		if err = checkCost("compensation.estimated_cost_micros", c.EstimatedCostMicros); err != nil {
			return nil, err
		}
		if c.Payload, err = checkJSON("compensation.payload", c.Payload, MaxPayloadBytes); err != nil {
			return nil, err
		}
		if err = checkNote("compensation.description", c.Description); err != nil {
			return nil, err
		}
	}
	if err = checkNote("description", req.Description); err != nil {
		return nil, err
	}
	if req.Description != "" && req.CompensatesEffectID == "" {
		return nil, invalidArg("description", "is only for a compensation begun as ratchet_unwind_group returned it; an ordinary action's undo is described in compensation.description")
	}
	if req.LeaseSeconds < 0 {
		return nil, invalidArg("lease_seconds", "must be > 0, got %d", req.LeaseSeconds)
	}
	in.pol = e.policy.forEffect(req.EffectType, req.Vendor, req.Operation)
	maxLease := e.maxLease(&in.pol)
	in.lease = req.LeaseSeconds
	if in.lease == 0 {
		in.lease = min(e.defaults.LeaseSeconds, maxLease)
	}
	if in.lease > maxLease {
		return nil, invalidArg("lease_seconds", "%d exceeds the maximum of %d for %s; ask for a shorter lease and report before it ends", in.lease, maxLease, req.EffectType)
	}
	// A proxied call's operation is the name its effect type had before
	// the taxonomy, and determines its type: fingerprinting it keeps an
	// effect begun before an upgrade the same action after it.
	what := req.EffectType
	if req.Operation != "" {
		what = req.Operation
	}
	in.fingerprint = e.macs.fingerprint(what, req.Vendor, payload)
	if req.CompensatesEffectID != "" {
		in.payload = payload
	}
	req.Payload = nil // never kept past this point
	in.req = req
	return in, nil
}

func (e *Engine) maxLease(pol *effectivePolicy) int {
	return minPositive(e.defaults.MaxLeaseSeconds, pol.maxLease)
}

// MaxLeaseSeconds is the longest lease a begin of effectType by vendor with
// operation may ask for (defaults.max_lease_seconds, lowered by the
// policy). The proxy caps its own lease with it.
func (e *Engine) MaxLeaseSeconds(effectType, vendor, operation string) int {
	pol := e.policy.forEffect(effectType, vendor, operation)
	return e.maxLease(&pol)
}

func lowerOrDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// isLowerName is namespaceRe and vendorRe: ^[a-z0-9][a-z0-9_.-]*$.
func isLowerName(s string) bool {
	if s == "" || !lowerOrDigit(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !lowerOrDigit(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// isEffectType is effectTypeRe: two to six parts joined by dots, each
// ^[a-z0-9][a-z0-9_-]*$.
func isEffectType(s string) bool {
	parts, start := 0, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if start {
				return false
			}
			parts, start = parts+1, true
		case start:
			if !lowerOrDigit(c) {
				return false
			}
			start = false
		case !lowerOrDigit(c) && c != '_' && c != '-':
			return false
		}
	}
	return !start && parts >= 1 && parts <= 5
}

// isDimName is dimNameRe: ^[a-z][a-z0-9_]{0,62}$.
func isDimName(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !lowerOrDigit(c) && c != '_' {
			return false
		}
	}
	return true
}
