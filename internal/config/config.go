// Package config loads Ratchet's YAML configuration file.
//
// Loading goes defaults → file → (the caller's env and flags) → Validate.
// The file is strict: an unknown key is an error, because a misspelt
// "ceilngs" that silently removed a spend limit is the worst failure a
// side-effect gate can have. Every error names the file line and the field
// path, e.g. "ratchet.yaml:14: policies[0].ceilings[1].window: "2x" is not a
// duration". Field names are part of Ratchet's interface (SPEC section 4):
// fields are added, never renamed.
package config

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// Config is the whole file.
type Config struct {
	DataDir  string        `yaml:"data_dir"`
	Listen   Listen        `yaml:"listen"`
	Secrets  Secrets       `yaml:"secrets"`
	Auth     Auth          `yaml:"auth"`
	Defaults Defaults      `yaml:"defaults"`
	Proxy    Proxy         `yaml:"proxy"`
	Ledger   Ledger        `yaml:"ledger"`
	Audit    Audit         `yaml:"audit"`
	Policies []ledger.Rule `yaml:"policies"`
	// Mode observe makes every policy rule without a mode of its own an
	// observed rule (see ledger/observe.go); default enforce.
	Mode string `yaml:"mode"`
	// Tracing configures OpenTelemetry traces (internal/tracing).
	Tracing Tracing `yaml:"tracing"`
	// Notify gets events to people (notify.go).
	Notify Notify `yaml:"notify"`
	// Webhooks receive vendors' signed events, and Recovery sends lost
	// proxied requests again with their keys (webhooks.go).
	Webhooks Webhooks `yaml:"webhooks"`
	Recovery Recovery `yaml:"recovery"`
	// Console configures the operator console.
	Console Console `yaml:"console"`
	// MCP configures the MCP endpoint's sessions.
	MCP MCP `yaml:"mcp"`
	// Vendors declares vendors the code does not know (docs/proxy.md,
	// "Declared vendors"; vendors/declared.go).
	Vendors []vendors.Definition `yaml:"vendors"`

	// registry is the built-in vendors and the declared ones, set by
	// problems when every definition compiles.
	registry *vendors.Registry

	// root is the parsed file, for the lines of warnings; nil when the
	// config was built in code.
	root *yaml.Node
}

// Audit configures the audit log: every decision and operator action in a
// hash chain in the ledger, written with the change it records.
type Audit struct {
	// Enabled is true unless the file says false.
	Enabled *bool `yaml:"enabled"`
	// Retention is how long records are kept (default 2160h, 90 days;
	// never shorter than defaults.retention).
	Retention Duration `yaml:"retention"`
}

// On reports whether the audit log is kept.
func (a Audit) On() bool { return a.Enabled == nil || *a.Enabled }

// Tracing configures OpenTelemetry traces, exported over OTLP/HTTP. The
// standard OTEL_* variables apply too (see internal/tracing).
type Tracing struct {
	// Enabled turns traces on or off; unset, they are on when
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// is set.
	Enabled *bool `yaml:"enabled"`
	// Endpoint is the OTLP/HTTP endpoint URL (e.g.
	// http://otel-collector:4318); empty: the OTEL_* variables'.
	Endpoint string `yaml:"endpoint"`
	// IncludeIdempotencyKeys puts a begin's idempotency key on its span
	// (off: a key may name a customer or an order).
	IncludeIdempotencyKeys bool `yaml:"include_idempotency_keys"`
}

// MCP configures the MCP endpoint's sessions.
type MCP struct {
	// SessionIdle closes a session that has had no request for this long
	// (an agent that vanished without closing it); its client's next
	// request is answered 404, on which the SDKs open a new session.
	// Default mcp.DefaultSessionIdle, 30m.
	SessionIdle Duration `yaml:"session_idle"`
}

// DefaultIdleTimeout is how long the MCP, admin and proxy listeners keep a
// keep-alive connection with no request on it: longer than an agent's or
// an SDK's pause between calls (their pools reconnect after it), short
// enough that connections of agents that vanished do not pile up.
const DefaultIdleTimeout = 2 * time.Minute

// Listen holds the listener addresses.
type Listen struct {
	MCP   string `yaml:"mcp"`
	Admin string `yaml:"admin"`
	Proxy string `yaml:"proxy"`
	// IdleTimeout closes a keep-alive connection of the MCP, admin or
	// proxy listener with no request on it for this long (default
	// DefaultIdleTimeout).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// Transparent, when set, is the loopback address where connections
	// redirected by `ratchet transparent rules` arrive (transparent mode;
	// off by default). On 127.0.0.1 Ratchet also listens on [::1] at the
	// same port, where the ip6tables rules send IPv6 connections.
	Transparent string `yaml:"transparent"`
	// AdminHosts are the names, besides localhost, loopback addresses and
	// the host of Admin, under which the operator console answers when
	// auth.admins are configured (e.g. an ingress's name); another Host
	// is refused (DNS rebinding). An entry with a port matches that port
	// only.
	AdminHosts []string `yaml:"admin_hosts"`
}

// Console configures the operator console on the admin listener.
type Console struct {
	// SecureCookie marks the session cookie Secure even over plain HTTP:
	// set it when a proxy in front terminates TLS (X-Forwarded-Proto is
	// not believed).
	SecureCookie bool `yaml:"secure_cookie"`
}

// Secrets names the files that hold keys; keys never appear in the config.
type Secrets struct {
	// HMACKeyFile is generated (0600) on first start if absent; default
	// <data_dir>/hmac.key.
	HMACKeyFile string `yaml:"hmac_key_file"`
	// EncryptionKeyFile, when set, turns on encryption at rest; it holds
	// 16, 24 or 32 bytes as hex.
	EncryptionKeyFile string `yaml:"encryption_key_file"`
}

// Auth lists who may call Ratchet, by the SHA-256 of their bearer tokens.
type Auth struct {
	Agents []Agent `yaml:"agents"`
	Admins []Admin `yaml:"admins"`
	// OAuth, when set, accepts access tokens of trusted issuers too
	// (oauth.go).
	OAuth *OAuth `yaml:"oauth"`
}

// Agent maps an agent token to its identity.
type Agent struct {
	TokenSHA256 string `yaml:"token_sha256"`
	Namespace   string `yaml:"namespace"`
	AgentID     string `yaml:"agent_id"`
}

// Admin is an operator token.
type Admin struct {
	TokenSHA256 string `yaml:"token_sha256"`
	Name        string `yaml:"name"`
}

// Defaults are engine-wide defaults.
type Defaults struct {
	LeaseSeconds    int      `yaml:"lease_seconds"`
	MaxLeaseSeconds int      `yaml:"max_lease_seconds"`
	Retention       Duration `yaml:"retention"`
	ApprovalTTL     Duration `yaml:"approval_ttl"`
	// ApprovalRetryAfter is the retry_after_seconds of an
	// approval_required answer (default 30s).
	ApprovalRetryAfter Duration `yaml:"approval_retry_after"`
}

// Proxy configures the outbound proxy.
type Proxy struct {
	// Namespace is the tenant of every request through the proxy
	// (default "default").
	Namespace string `yaml:"namespace"`
	// AgentID is the agent every proxied call is begun as: grants for it
	// cover proxied calls, its per-agent ceilings count them, a lapsed
	// lease is its unreported expiry. Empty: no agent (the scope shared by
	// every call without one). The proxy is unauthenticated, so the
	// Ratchet-Agent-Id and Ratchet-Run-Id headers are only labels; it may
	// not be an agent that a token of auth.agents fixes in the same
	// namespace (any local process would then act as that agent).
	AgentID string `yaml:"agent_id"`
	// UpstreamTimeout bounds a vendor call (default 60s); a call that runs
	// out is reported unknown.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// CAExportPath, when set, is where serve writes the proxy CA's
	// certificate (PEM) on start, for other containers to trust.
	CAExportPath string            `yaml:"ca_export_path"`
	Upstreams    map[string]string `yaml:"upstreams"`
	// DedupeWindow is how long identical requests that carry no
	// idempotency key are one call (default 10m; see
	// proxy.DefaultDedupeWindow for why).
	DedupeWindow Duration `yaml:"dedupe_window"`
	// DedupeWindows sets DedupeWindow per vendor (stripe: 1h).
	DedupeWindows map[string]Duration `yaml:"dedupe_windows"`
	// InterceptHosts are more hosts per vendor for the forward proxy to
	// intercept (Adyen live: {prefix}-checkout-live.adyenpayments.com).
	InterceptHosts map[string][]string `yaml:"intercept_hosts"`
	AllowHosts     []string            `yaml:"allow_hosts"`
	MaxBodyBytes   int64               `yaml:"max_body_bytes"`
	CurrencyMicros map[string]int64    `yaml:"currency_micros"`
}

// Ledger selects the storage backend.
type Ledger struct {
	// Backend is badger (default) or postgres.
	Backend string `yaml:"backend"`
	DSNEnv  string `yaml:"dsn_env"`
	DSNFile string `yaml:"dsn_file"`
	// Schema holds Ratchet's PostgreSQL tables (default "ratchet").
	Schema string `yaml:"schema"`
	// MinFreeBytes is the free disk space below which the Badger ledger
	// refuses writes (answering unavailable) instead of risking a crash;
	// default 64 MiB, negative turns the check off.
	MinFreeBytes int64 `yaml:"min_free_bytes"`
}

// Default returns the configuration used when there is no file.
func Default() *Config {
	c := &Config{}
	c.fill()
	return c
}

// The listen addresses when the config names none: loopback, so nothing is
// reachable from another machine until the operator says so.
const (
	DefaultMCPListen   = "127.0.0.1:8787"
	DefaultAdminListen = "127.0.0.1:8788"
	DefaultProxyListen = "127.0.0.1:8789"
)

// fill sets every field the file left empty to its default.
func (c *Config) fill() {
	set := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	set(&c.DataDir, "./data")
	set(&c.Listen.MCP, DefaultMCPListen)
	set(&c.Listen.Admin, DefaultAdminListen)
	set(&c.Listen.Proxy, DefaultProxyListen)
	c.Listen.IdleTimeout.orDefault(DefaultIdleTimeout)
	c.MCP.SessionIdle.orDefault(mcp.DefaultSessionIdle)
	c.Defaults.Retention.orDefault(ledger.DefaultRetention)
	c.Defaults.ApprovalTTL.orDefault(ledger.DefaultApprovalTTL)
	c.Defaults.ApprovalRetryAfter.orDefault(ledger.DefaultApprovalRetryAfter)
	c.Audit.Retention.orDefault(ledger.DefaultAuditRetention)
	c.Proxy.DedupeWindow.orDefault(proxy.DefaultDedupeWindow)
	set(&c.Proxy.Namespace, ledger.DefaultNamespace)
	c.Proxy.UpstreamTimeout.orDefault(proxy.DefaultUpstreamTimeout)
	set(&c.Ledger.Backend, "badger")
	if c.Mode == ledger.ModeObserve {
		for i := range c.Policies {
			if c.Policies[i].Mode == "" {
				c.Policies[i].Mode = ledger.ModeObserve
			}
		}
	}
	c.Auth.OAuth.fill()
	c.Notify.fill()
	c.Webhooks.fill()
	c.Recovery.fill()
	if c.Defaults.LeaseSeconds == 0 {
		c.Defaults.LeaseSeconds = ledger.DefaultLeaseSeconds
	}
	if c.Defaults.MaxLeaseSeconds == 0 {
		c.Defaults.MaxLeaseSeconds = ledger.DefaultMaxLeaseSeconds
	}
	if c.Proxy.MaxBodyBytes == 0 {
		c.Proxy.MaxBodyBytes = proxy.DefaultMaxBodyBytes
	}
	if c.Proxy.Upstreams == nil {
		c.Proxy.Upstreams = map[string]string{}
	}
	for _, v := range all.List() { // each vendor's default (vendors.Upstreamer)
		if u, ok := v.(vendors.Upstreamer); ok && c.Proxy.Upstreams[v.Name()] == "" {
			c.Proxy.Upstreams[v.Name()] = u.Upstream()
		}
	}
	for _, d := range c.Vendors {
		if d.Name != "" && d.Upstream != "" && c.Proxy.Upstreams[d.Name] == "" {
			c.Proxy.Upstreams[d.Name] = d.Upstream
		}
	}
	if c.Proxy.CurrencyMicros == nil {
		c.Proxy.CurrencyMicros = map[string]int64{"usd": 1_000_000}
	}
}

// HMACKeyPath is secrets.hmac_key_file, or hmac.key in the data dir (which
// a flag may have changed after loading).
func (c *Config) HMACKeyPath() string {
	if c.Secrets.HMACKeyFile != "" {
		return c.Secrets.HMACKeyFile
	}
	return filepath.Join(c.DataDir, "hmac.key")
}

// LedgerDefaults converts the defaults block for the engine. Call after a
// successful Validate.
func (c *Config) LedgerDefaults() ledger.Defaults {
	return ledger.Defaults{LeaseSeconds: c.Defaults.LeaseSeconds, MaxLeaseSeconds: c.Defaults.MaxLeaseSeconds,
		Retention: c.Defaults.Retention.Value(), ApprovalTTL: c.Defaults.ApprovalTTL.Value(),
		ApprovalRetryAfter: c.Defaults.ApprovalRetryAfter.Value()}
}

// Duration is a duration in the file ("24h", "90m"): the text as written,
// for messages, and its value. A value that is not a positive duration is
// kept as text and reported by Validate with its line, like every other
// problem, rather than stopping the decoding.
type Duration struct {
	text string
	d    time.Duration // zero unless text is a positive duration
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	d.text = n.Value
	if n.Kind != yaml.ScalarNode {
		d.text = "(" + n.ShortTag() + ")"
	}
	d.d = 0
	if v, err := time.ParseDuration(d.text); err == nil && v > 0 {
		d.d = v
	}
	return nil
}

// Value is the duration; zero until the file's text was valid.
func (d Duration) Value() time.Duration { return d.d }

// String is the duration as written.
func (d Duration) String() string { return d.text }

// DurationOf is a Duration of v, for configs built in code.
func DurationOf(v time.Duration) Duration { return Duration{text: v.String(), d: v} }

func (d *Duration) orDefault(v time.Duration) {
	if d.text == "" {
		*d = DurationOf(v)
	}
}

// Problem is one thing wrong in a config file.
type Problem struct {
	Line    int
	Path    string
	Message string
}

// Error lists every problem found in a config file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s:%d: ", e.File, p.Line)
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// maxFileBytes bounds a config file.
const maxFileBytes = 1 << 20

var yamlLineRe = regexp.MustCompile(`^\s*(?:yaml: )?line (\d+): (.*)$`)
var unknownFieldRe = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// Parse decodes and validates a config; name is used in error messages.
func Parse(r io.Reader, name string) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading config %s: %w", name, err)
	}
	if len(data) > maxFileBytes {
		return nil, &Error{File: name, Problems: []Problem{{Line: 1, Message: "file is larger than 1 MiB"}}}
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var typeProbs []Problem
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*yaml.TypeError](err); !ok {
			return nil, yamlError(name, err, data) // a syntax error: nothing decoded
		}
		// yaml.v3 decodes every field it can around type errors and unknown
		// fields, so the rest of the file is validated too and every
		// problem is reported at once.
		typeProbs = yamlError(name, err, data).(*Error).Problems
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // it decoded above, so it parses
	cfg.fill()
	if probs := cfg.problems(); len(probs)+len(typeProbs) > 0 {
		for i := range probs {
			probs[i].Line = lineOf(&root, probs[i].Path)
		}
		return nil, &Error{File: name, Problems: mergeProblems(typeProbs, probs)}
	}
	cfg.root = &root
	return &cfg, nil
}

// Warnings lists what is valid but probably not what the operator meant,
// with the lines of a parsed file (line 0 for a config built in code).
// "ratchet config validate" prints them and serve logs them.
//
// Agents without admins is a warning, not an error: the admin API and the
// console are then closed (see package admin), which is safe, and a
// deployment that uses no approvals and resolves nothing by hand keeps
// working.
func (c *Config) Warnings() []Problem {
	var warns []Problem
	if c.HasAgents() && !c.HasAdmins() {
		msg := "agents are configured and auth.admins are not, so the admin API and the console answer no one: every /v1 call, " +
			"read or change, answers 403 admin_auth_required (an agent shares the sidecar's loopback and must neither approve its own " +
			"actions nor read other namespaces by leaving its token off); add auth.admins with tokens of their own to read and decide"
		for i, r := range c.Policies {
			if r.ApprovalThresholdMicros != nil {
				msg += fmt.Sprintf("; until then nobody can approve what policies[%d] (%s) sends for approval", i, r.Match)
				break
			}
		}
		warns = append(warns, Problem{Path: "auth.agents", Message: msg})
	}
	warns = append(warns, c.policyGaps()...)
	warns = append(warns, c.proxyRunWarnings()...)
	if c.root != nil {
		for i := range warns {
			warns[i].Line = lineOf(c.root, warns[i].Path)
		}
	}
	return warns
}

// policyGaps warns of rules that the proxy's money-moving calls escape:
// with policies and vendor upstreams, none matching any of those calls
// (the rules were written for MCP agents' types, and stripe-go's charge
// meets no limit); and a rule that matches them only by their operation,
// the name the proxy gave them before the effect-type taxonomy, which
// still applies (old names are aliases, see ledger.Rule) but should name
// the new type.
func (c *Config) policyGaps() []Problem {
	if len(c.Policies) == 0 || len(c.Proxy.Upstreams) == 0 {
		return nil
	}
	ops := vendors.Operations()
	var warns []Problem
	covered := false
	for i, r := range c.Policies {
		byOperation := map[string]bool{} // the types it reaches only by operation
		for _, op := range sortedKeys(ops) {
			vendor, _, _ := strings.Cut(op, ".")
			if _, on := c.Proxy.Upstreams[vendor]; !on || !r.Matches(ops[op], vendor, op) {
				continue
			}
			covered = true
			if direct := (ledger.Rule{Match: r.Match}).Matches(ops[op], "", ""); !direct {
				byOperation[ops[op]] = true
			}
		}
		// A declared vendor's money-moving routes (payment.* types) are
		// proxied money too: its upstream is always set.
		for _, d := range c.Vendors {
			for _, rt := range d.Routes {
				op := rt.Operation
				if op != "" && !strings.HasPrefix(op, d.Name+".") {
					op = d.Name + "." + op
				}
				if strings.HasPrefix(rt.EffectType, "payment.") && r.Matches(rt.EffectType, d.Name, op) {
					covered = true
				}
			}
		}
		if len(byOperation) > 0 {
			warns = append(warns, Problem{Path: fmt.Sprintf("policies[%d].match", i), Message: fmt.Sprintf(
				"%q matches proxied money-moving calls only by their vendor operation, the effect type the proxy gave them before "+
					"vendor-neutral types; it still applies, but their effect types are now %s: match those (e.g. \"payment.*\", "+
					"with vendor: or operation: to narrow), as MCP agents' begins do (docs/proxy.md: the effect-type table)",
				r.Match, strings.Join(sortedKeys(byOperation), ", "))})
		}
	}
	if !covered {
		warns = append(warns, Problem{Path: "policies", Message: "no rule matches any money-moving call the proxy gates " +
			"(it names them payment.charge, payment.refund, payment.payout, … with the vendor and its operation beside them): " +
			"a stripe-go or Square SDK call through the proxy meets no threshold or ceiling; add a rule such as match: \"payment.*\" " +
			"(docs/proxy.md: the effect-type table)"})
	}
	return warns
}

// proxyRunWarnings: proxied calls have no run (the proxy's Ratchet-Run-Id
// header is a label, never an identity), so a ceiling per run, or over a
// run's lifetime, counts every proxied call as one run, the lifetime one
// for good. That is the safe reading, and it is what such a ceiling now
// does to a vendor's calls: said once per ceiling whose rule can match a
// proxied vendor's effect types ("*", the vendor's name and a dot, or a
// type of the taxonomy its money-moving calls get).
func (c *Config) proxyRunWarnings() []Problem {
	var warns []Problem
	ops := vendors.Operations()
	for i, r := range c.Policies {
		vendor := ""
		for _, v := range sortedKeys(c.Proxy.Upstreams) {
			if r.Match == "*" || strings.HasPrefix(r.Match, v+".") {
				vendor = v
				break
			}
			for _, op := range sortedKeys(ops) {
				if strings.HasPrefix(op, v+".") && r.Matches(ops[op], v, op) {
					vendor = v
					break
				}
			}
			if vendor != "" {
				break
			}
		}
		if vendor == "" {
			continue
		}
		for j, ce := range r.Ceilings {
			if ce.Per != "run" && ce.Window != "run" {
				continue
			}
			warns = append(warns, Problem{Path: fmt.Sprintf("policies[%d].ceilings[%d]", i, j), Message: fmt.Sprintf(
				"%q counts per run, and calls through the proxy to %s have no run: the Ratchet-Run-Id header is a label, never an identity, "+
					"so every proxied call counts as one run%s; use per: agent with proxy.agent_id, or per: global, for proxied calls",
				ce.Name, vendor, map[bool]string{true: " and, over a run's lifetime, never starts again", false: ""}[ce.Window == "run"])})
		}
	}
	return warns
}

// HasAgents reports whether agents need a credential: auth.agents or
// auth.oauth.
func (c *Config) HasAgents() bool { return len(c.Auth.Agents) > 0 || c.Auth.OAuth.On() }

// HasAdmins reports whether an admin credential opens the admin API:
// auth.admins, or an auth.oauth issuer whose tokens may carry the admin
// scope.
func (c *Config) HasAdmins() bool { return len(c.Auth.Admins) > 0 || c.Auth.OAuth.AdminsOn() }

// Open says, one line per listener, what answers without a credential and
// to whom: "ratchet config validate" prints it, so an operator reads what
// a local process (or anything that reaches a listener) may do without a
// token. Package admin's doc holds the rules it describes.
func (c *Config) Open() []string {
	var out []string
	switch {
	case c.Auth.OAuth.On():
		out = append(out, fmt.Sprintf("MCP (%s): an access token of auth.oauth.issuers with scope %s (or a token of auth.agents) is required; each fixes its namespace and agent_id", c.Listen.MCP, c.Auth.OAuth.AgentScope))
	case len(c.Auth.Agents) == 0:
		out = append(out, fmt.Sprintf("MCP (%s): no auth.agents, so unauthenticated: any caller is in namespace default and names its own agent_id", c.Listen.MCP))
	default:
		out = append(out, fmt.Sprintf("MCP (%s): a token of auth.agents is required; each fixes its namespace (and agent_id, where set)", c.Listen.MCP))
	}
	switch {
	case c.Auth.OAuth.AdminsOn():
		out = append(out, fmt.Sprintf("admin API (%s): every read and change needs an admin token (auth.admins, or an access token with scope %s); the console signs in with auth.admins tokens only", c.Listen.Admin, c.Auth.OAuth.AdminScope))
	case len(c.Auth.Admins) > 0:
		out = append(out, fmt.Sprintf("admin API and console (%s): every read and change needs an admin token (auth.admins)", c.Listen.Admin))
	case c.HasAgents():
		out = append(out, fmt.Sprintf("admin API and console (%s): closed: agents are configured and admins are not, so every /v1 call answers 403 admin_auth_required", c.Listen.Admin))
	default:
		out = append(out, fmt.Sprintf("admin API and console (%s): no tokens at all, so open to every process on this machine (loopback only): it reads every namespace and approves", c.Listen.Admin))
	}
	out = append(out, fmt.Sprintf("%s/healthz, /readyz and /metrics: no token in any mode (counts by effect type, vendor and outcome, spend per namespace and ceiling; no effect ids, keys or agents)", c.Listen.Admin))
	agent := "no agent (the scope every call without one shares)"
	if c.Proxy.AgentID != "" {
		agent = "agent " + strconv.Quote(c.Proxy.AgentID)
	}
	out = append(out, fmt.Sprintf("proxy (%s): asks no credential: every process that reaches it is begun in namespace %s as %s, in no run; "+
		"Ratchet-Agent-Id and Ratchet-Run-Id are labels only", c.Listen.Proxy, c.Proxy.Namespace, agent))
	if c.Listen.Transparent != "" {
		out = append(out, fmt.Sprintf("transparent proxy (%s): the same as the proxy, for the connections the rules redirect", c.Listen.Transparent))
	}
	return out
}

// mergeProblems lists the type errors and the validation problems by line.
// A field that failed to decode is left zero, so a validation problem on
// the line of a type error is that error again, in other words, and is
// left out.
func mergeProblems(typeProbs, probs []Problem) []Problem {
	if len(typeProbs) == 0 {
		return probs // in the order validation finds them
	}
	bad := map[int]bool{}
	for _, p := range typeProbs {
		bad[p.Line] = true
	}
	out := slices.Clone(typeProbs)
	for _, p := range probs {
		if !bad[p.Line] {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Problem) int { return a.Line - b.Line })
	return out
}

// yamlParserProblems are the messages of yaml.v3's parser (as opposed to
// its scanner), whose line it gives 0-based: one line early.
var yamlParserProblems = []string{"did not find expected ", "found duplicate %", "found incompatible YAML document", "found undefined tag handle"}

// yamlError turns yaml.v3's messages into Problems with lines. data is the
// file, whose line count bounds a line (a problem at the end of the file).
func yamlError(name string, err error, data []byte) error {
	var probs []Problem
	lines := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines = te.Errors
	}
	for _, l := range lines {
		m := yamlLineRe.FindStringSubmatch(l)
		if m == nil {
			probs = append(probs, Problem{Line: 1, Message: strings.TrimPrefix(l, "yaml: ")})
			continue
		}
		n, _ := strconv.Atoi(m[1])
		msg := m[2]
		if _, isType := errors.AsType[*yaml.TypeError](err); !isType && slices.ContainsFunc(yamlParserProblems, func(p string) bool { return strings.HasPrefix(msg, p) }) {
			n = min(n+1, max(1, bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n"))+1))
		}
		if u := unknownFieldRe.FindStringSubmatch(msg); u != nil {
			msg = fmt.Sprintf("unknown field %q (check the spelling; unknown fields are refused so that no limit is silently ignored)", u[1])
		}
		probs = append(probs, Problem{Line: n, Message: msg})
	}
	return &Error{File: name, Problems: probs}
}

// Validate checks a config built in code (Parse validates already).
func (c *Config) Validate() error {
	if probs := c.problems(); len(probs) > 0 {
		return &Error{File: "config", Problems: probs}
	}
	return nil
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// replaceHash tells an operator how to fill a token_sha256.
const replaceHash = "replace it with the SHA-256 of a long random token of your own: ratchet token hash < token-file"

// wellKnownTokens maps the SHA-256 of words that examples, tutorials and
// tests use as tokens to a description of the word. A config whose token
// hashes one of them (copied from an example, say) would let anyone in.
var wellKnownTokens = func() map[string]string {
	m := map[string]string{}
	for _, w := range []string{"", "test", "test2", "password", "changeme", "admin", "secret", "token", "ratchet"} {
		sum := sha256.Sum256([]byte(w))
		desc := strconv.Quote(w)
		if w == "" {
			desc = "an empty token"
		} else {
			desc = "the well-known word " + desc
		}
		m[hex.EncodeToString(sum[:])] = desc
	}
	return m
}()

func (c *Config) problems() []Problem {
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	for _, fe := range ledger.ValidatePolicies(c.Policies) {
		add(fe.Path, "%s", fe.Message)
	}
	if c.Mode != "" && c.Mode != ledger.ModeEnforce && c.Mode != ledger.ModeObserve {
		add("mode", "%q must be enforce or observe", c.Mode)
	}
	if e := c.Tracing.Endpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("tracing.endpoint", "%q is not an http(s) URL (the OTLP/HTTP endpoint, e.g. http://otel-collector:4318)", e)
		}
	}
	checkDur := func(path string, d Duration) {
		if d.Value() <= 0 {
			add(path, "%q is not a positive duration (e.g. 24h, 90m)", d.String())
		}
	}
	checkDur("defaults.retention", c.Defaults.Retention)
	checkDur("listen.idle_timeout", c.Listen.IdleTimeout)
	checkDur("mcp.session_idle", c.MCP.SessionIdle)
	checkDur("defaults.approval_ttl", c.Defaults.ApprovalTTL)
	checkDur("defaults.approval_retry_after", c.Defaults.ApprovalRetryAfter)
	checkDur("audit.retention", c.Audit.Retention)
	if c.Audit.Retention.Value() > 0 && c.Audit.Retention.Value() < c.Defaults.Retention.Value() {
		add("audit.retention", "%s is shorter than defaults.retention (%s): the audit log must outlive the effects it records", c.Audit.Retention, c.Defaults.Retention)
	}
	reg := c.vendorProblems(add)
	checkDur("proxy.dedupe_window", c.Proxy.DedupeWindow)
	for _, v := range sortedKeys(c.Proxy.DedupeWindows) {
		if _, known := reg.Lookup(v); !known || v != strings.ToLower(v) {
			add("proxy.dedupe_windows."+v, "%q is not a vendor the proxy knows (%s)", v, vendorNames(reg))
		}
		checkDur("proxy.dedupe_windows."+v, c.Proxy.DedupeWindows[v])
	}
	checkDur("proxy.upstream_timeout", c.Proxy.UpstreamTimeout)
	for _, v := range sortedKeys(c.Proxy.Upstreams) {
		if _, known := reg.Lookup(v); !known && reg != nil {
			add("proxy.upstreams."+v, "%q is not a vendor the proxy knows (%s); declare it under vendors:", v, vendorNames(reg))
		}
		if u, err := url.Parse(c.Proxy.Upstreams[v]); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("proxy.upstreams."+v, "%q is not an http(s) URL", c.Proxy.Upstreams[v])
		}
	}
	for _, v := range sortedKeys(c.Proxy.InterceptHosts) {
		if _, ok := c.Proxy.Upstreams[v]; !ok {
			add("proxy.intercept_hosts."+v, "has no proxy.upstreams.%s to send the intercepted traffic to", v)
		}
		for i, h := range c.Proxy.InterceptHosts[v] {
			if !vendors.IsHostName(h) {
				add(fmt.Sprintf("proxy.intercept_hosts.%s[%d]", v, i), "%q is not a lowercase host name (no scheme, port or wildcard)", h)
			} else if o, ok := reg.ForHost(h); ok && o.Name() != v {
				add(fmt.Sprintf("proxy.intercept_hosts.%s[%d]", v, i), "%q is %s's host already", h, o.Name())
			}
		}
	}
	for i, h := range c.Listen.AdminHosts {
		if h == "" || strings.ContainsAny(h, "/*@ \t") {
			add(fmt.Sprintf("listen.admin_hosts[%d]", i), "%q is not a host name or host:port (no scheme, path or wildcard)", h)
		}
	}
	if t := c.Listen.Transparent; t != "" {
		_, port, err := net.SplitHostPort(t)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 || !loopback.Is(t) {
			add("listen.transparent", "%q must be a loopback address with a port, e.g. 127.0.0.1:15001 (the rules redirect to loopback)", t)
		}
	}
	if c.Defaults.LeaseSeconds < 0 {
		add("defaults.lease_seconds", "must be > 0")
	}
	if c.Defaults.MaxLeaseSeconds < 0 {
		add("defaults.max_lease_seconds", "must be > 0")
	}
	if c.Defaults.LeaseSeconds > c.Defaults.MaxLeaseSeconds {
		add("defaults.lease_seconds", "%d is above max_lease_seconds (%d)", c.Defaults.LeaseSeconds, c.Defaults.MaxLeaseSeconds)
	}
	if c.Proxy.MaxBodyBytes < 0 {
		add("proxy.max_body_bytes", "must be > 0")
	}
	for _, cur := range sortedKeys(c.Proxy.CurrencyMicros) {
		if v := c.Proxy.CurrencyMicros[cur]; v <= 0 {
			add("proxy.currency_micros."+cur, "must be > 0 micro-USD per major unit, got %d", v)
		}
	}
	holders := map[string]string{} // token hash → the first entry with it
	checkToken := func(p, hash, who, whoField, whoMsg string) {
		switch word, weak := wellKnownTokens[hash]; {
		case !hexSHA256.MatchString(hash):
			add(p+".token_sha256", "must be 64 lowercase hex digits, the SHA-256 of the token (never the token itself): "+replaceHash)
		case weak:
			add(p+".token_sha256", "is the SHA-256 of %s, which anyone can guess: "+replaceHash, word)
		case holders[hash] != "":
			add(p+".token_sha256", "is the same token as %s: each agent and each admin needs a token of its own (an agent's token must never open the admin API)", holders[hash])
		default:
			holders[hash] = p
		}
		if who == "" {
			add(p+"."+whoField, "%s", whoMsg)
		}
	}
	for i, a := range c.Auth.Agents {
		p := fmt.Sprintf("auth.agents[%d]", i)
		checkToken(p, a.TokenSHA256, a.Namespace, "namespace", "is required")
		if msg := namespaceProblem(a.Namespace); msg != "" {
			add(p+".namespace", "%s", msg)
		}
	}
	if msg := namespaceProblem(c.Proxy.Namespace); msg != "" {
		add("proxy.namespace", "%s", msg)
	}
	c.proxyAgentProblems(add)
	// One person, one name, spelled one way: the engine counts approvals
	// by ledger.DeciderKey, so two names that read the same would be one
	// approver recorded under two names. The same name twice is one
	// person's two tokens (one rotated in beside the other).
	adminNames := map[string]int{} // DeciderKey → the first entry with it
	for i, a := range c.Auth.Admins {
		p := fmt.Sprintf("auth.admins[%d]", i)
		checkToken(p, a.TokenSHA256, a.Name, "name", "is required (it is recorded on every approval)")
		if a.Name == "" {
			continue
		}
		if !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unicode.IsControl) {
			add(p+".name", "must be valid UTF-8 without control characters (it is recorded on every approval)")
			continue
		}
		// An OAuth admin is recorded as "<issuer name>:<claim>"; a
		// static admin named so would be the same person on an approval
		// (where people are counted) and in the audit log.
		if c.Auth.OAuth != nil {
			for _, is := range c.Auth.OAuth.Issuers {
				if is.Name != "" && strings.HasPrefix(ledger.DeciderKey(a.Name), ledger.DeciderKey(is.Name+":")) {
					add(p+".name", "%q is named as issuer %s's admins are (%s:<%s>): name a static admin without the prefix %q",
						a.Name, is.Name, is.Name, cmp.Or(is.AdminNameClaim, "sub"), is.Name+":")
				}
			}
		}
		k := ledger.DeciderKey(a.Name)
		if j, ok := adminNames[k]; ok && c.Auth.Admins[j].Name != a.Name {
			add(p+".name", "%q reads as auth.admins[%d]'s %q (case, width, spaces or invisible characters aside), and approvals count per person: "+
				"give each person one name, spelled one way (the same name twice is fine: a token rotated in beside the old one)", a.Name, j, c.Auth.Admins[j].Name)
		} else if !ok {
			adminNames[k] = i
		}
	}
	probs = append(probs, c.Auth.OAuth.problems()...)
	probs = append(probs, c.Notify.problems()...)
	probs = append(probs, c.Webhooks.problems()...)
	probs = append(probs, c.Recovery.problems()...)
	switch c.Ledger.Backend {
	case "badger":
	case "postgres":
		if (c.Ledger.DSNEnv == "") == (c.Ledger.DSNFile == "") {
			add("ledger", "postgres needs exactly one of dsn_env and dsn_file")
		}
	default:
		add("ledger.backend", "%q must be badger or postgres", c.Ledger.Backend)
	}
	return probs
}

// vendorProblems compiles the declared vendors (vendors.Compile) and,
// when all compile, sets and returns the registry of the built-in and
// declared vendors; otherwise it returns nil, which is the built-in ones.
func (c *Config) vendorProblems(add func(path, format string, args ...any)) *vendors.Registry {
	c.registry = nil
	list := all.List()
	names, hosts := map[string]int{}, map[string]string{}
	bad := false
	for i, d := range c.Vendors {
		p := fmt.Sprintf("vendors[%d]", i)
		v, errs := vendors.Compile(d, all.Registry())
		for _, fe := range errs {
			add(p+"."+fe.Path, "%s", fe.Message)
		}
		if j, dup := names[d.Name]; dup && d.Name != "" {
			add(p+".name", "%q is vendors[%d]'s name already", d.Name, j)
			bad = true
		}
		names[d.Name] = i
		for k, h := range d.Hosts {
			if o, dup := hosts[h]; dup && o != d.Name {
				add(fmt.Sprintf("%s.hosts[%d]", p, k), "%q is %s's host already", h, o)
				bad = true
			}
			hosts[h] = d.Name
		}
		if errs != nil {
			bad = true
			continue
		}
		list = append(list, v)
	}
	if bad {
		return nil
	}
	reg, err := vendors.NewRegistry(list...)
	if err != nil { // the checks above leave nothing for it to find
		add("vendors", "%s", err)
		return nil
	}
	c.registry = reg
	return reg
}

// Registry is the built-in vendors and the ones the file declares; call
// after a successful Parse or Validate.
func (c *Config) Registry() *vendors.Registry { return c.registry }

// vendorNames lists the vendors a registry knows, for messages.
func vendorNames(reg *vendors.Registry) string {
	var n []string
	for _, v := range reg.All() {
		n = append(n, v.Name())
	}
	return strings.Join(n, ", ")
}

// proxyAgentProblems checks proxy.agent_id: an id the engine accepts, and
// not an agent whose token fixes it in the proxy's namespace. The proxy
// asks no credential, so a proxy acting as such an agent would let any
// local process use that agent's grants and add to its unreported
// expiries, which its token exists to keep its own.
func (c *Config) proxyAgentProblems(add func(path, format string, args ...any)) {
	id := c.Proxy.AgentID
	switch {
	case id == "":
		return
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		add("proxy.agent_id", "must be valid UTF-8 without control characters")
	case utf8.RuneCountInString(id) > ledger.MaxIDLen:
		add("proxy.agent_id", "is %d characters; the limit is %d", utf8.RuneCountInString(id), ledger.MaxIDLen)
	}
	ns := c.Proxy.Namespace
	if ns == "" {
		ns = ledger.DefaultNamespace
	}
	for i, a := range c.Auth.Agents {
		if a.AgentID == id && a.Namespace == ns {
			add("proxy.agent_id", "%q is the agent auth.agents[%d]'s token fixes in namespace %q: the proxy asks for no credential, "+
				"so any local process would use that agent's grants and count against its limits; give the proxy an agent id of its own", id, i, ns)
			return
		}
	}
}

// namespaceProblem says what is wrong with a namespace in the engine's own
// words, or "" when the engine accepts it. An agent or proxy namespace the
// engine refuses would load fine and then have every call refused.
func namespaceProblem(ns string) string {
	var le *ledger.Error
	if err := ledger.CheckNamespace(ns); errors.As(err, &le) {
		return strings.TrimPrefix(le.Message, "namespace: ")
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var pathPartRe = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// lineOf finds the line of a field path like "policies[1].ceilings[0].window"
// in a YAML document: the deepest node of the path that exists.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := max(n.Line, 1)
	for _, m := range pathPartRe.FindAllStringSubmatch(path, -1) {
		var next *yaml.Node
		switch {
		case m[2] != "" && n.Kind == yaml.SequenceNode:
			i, _ := strconv.Atoi(m[2])
			if i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		case m[1] != "" && n.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == m[1] {
					line, next = n.Content[j].Line, n.Content[j+1]
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// DedupeWindowsValue is DedupeWindows as durations.
func (p *Proxy) DedupeWindowsValue() map[string]time.Duration {
	out := make(map[string]time.Duration, len(p.DedupeWindows))
	for v, d := range p.DedupeWindows {
		out[v] = d.Value()
	}
	return out
}
