// Package proxy gives legacy callers, which never call the MCP tools, the
// same protection on their outbound path. It is an HTTP handler with two
// ways in, a listener for a third, and one engine:
//
//   - Reverse mode: /stripe/v1/... is forwarded to the configured Stripe
//     upstream (likewise /square/, /adyen/, /paypal/, /checkout/): callers
//     change only their base URL.
//   - Forward mode: as HTTP(S)_PROXY. A CONNECT to a vendor API host is
//     intercepted with a leaf certificate from Ratchet's CA and handled as in
//     reverse mode (sent to that vendor's configured upstream); other hosts
//     are tunnelled only when listed in allow_hosts, and refused otherwise.
//     It is never an open proxy.
//   - Transparent mode (transparent.go): iptables rules redirect a pod's
//     outbound connections to Proxy.Transparent; vendor hosts are
//     intercepted as in forward mode, allow_hosts spliced to where they
//     were going, the rest refused. The app changes nothing but its CA.
//
// A request that vendors classifies as a side effect is gated: key, cost
// and counterparty from the vendor's format; begin; on execute the vendor
// key is stamped, the request forwarded, the answer classified and
// reported, with the response (status, content type, body) as the stored
// result. Other decisions answer without contacting the vendor, in the
// vendor's own error shape at a status its SDK reads. Reads pass through
// untouched.
//
// Keys: whose call is it? In order:
//   - The Ratchet-Idempotency-Key header, scoped as the caller's key is
//     (but never per endpoint): another merchant, or anyone who learns
//     the key and content, never reads the call's answer.
//   - The caller's own idempotency key in the vendor's place (Stripe's and
//     Adyen's Idempotency-Key, Square's idempotency_key, PayPal-Request-Id,
//     Cko-Idempotency-Key), scoped by the account a header names
//     (Stripe-Account, Stripe-Context, PayPal-Auth-Assertion), the merchant
//     the body names (Adyen merchantAccount, Square location_id,
//     Checkout.com processing_channel_id), a static credential (Stripe and
//     Checkout.com secret keys, Adyen API keys, HTTP Basic) whether or not
//     a merchant is named, and the endpoint where the vendor's keys are
//     per endpoint. An OAuth bearer token never scopes it: a retry with a
//     refreshed token, or from a restarted client, is the same call. Where
//     the token alone says whose call it is (PayPal without an assertion,
//     Checkout.com without a channel, Square without a location), it owns
//     the call's answer (vendors.Effect.Owner): a blocked or in-flight
//     call stays so for any token, but a stored answer is replayed only to
//     the token that made it; another token's identical call is its own
//     (keyed with its owner). The same key with other content is
//     idempotency_key_conflict, as the vendor would answer; a new key is a
//     new call. A key an SDK minted for the one call (stripe-go's,
//     stripe-node's stripe-node-retry-) is not the application's statement
//     that two calls are one, and is keyed by content (a stripe-go key in
//     the window of the time it was minted, which it carries).
//   - Else a key derived from the content: vendor, method, path, the
//     canonical body (JSON canonicalised, form fields sorted), the account
//     header and the stable credential, so two merchants' identical
//     requests never dedupe. It names the proxy.dedupe_window it falls in,
//     and the proxy looks one window back (lookBack), so identical requests
//     dedupe for one window after the first wherever the window's multiples
//     fall.
//
// What is classified is what is sent: the path is cleaned of empty, "."
// and ".." segments first and forwarded cleaned (a ';' or '\' is
// refused), and a request the vendor could read otherwise than Ratchet (a
// repeated account header, credential or key, a repeated form field, a
// duplicate JSON key, a body that does not parse) is refused with 400 in
// the vendor's shape (vendors.Effect.Refuse), never sent or recorded. So
// is a method that is not RFC 9110's (or PATCH) exactly as written
// ("post", "PROPFIND"; gate.go, standardMethod): vendors' rules name
// upper-case methods, and a server that reads "post" as POST would act on
// a request Ratchet never gated.
//
// The caller's vendor key is never forwarded: Ratchet's replaces it, a new
// one per attempt.
//
// Identity: the proxy is unauthenticated (legacy callers present nothing
// but the vendor's credential), so nothing a request says is whose call it
// is. Every gated request is begun as Options.AgentID (proxy.agent_id,
// which the operator configured) with no run: grants cover it only when
// granted to that agent (a run-scoped grant never does), per-agent
// ceilings count every proxied call as that one agent, per-run ceilings as
// one run, and a lapsed lease is that agent's unreported expiry. The
// Ratchet-Agent-Id and Ratchet-Run-Id headers are labels: logged with the
// decision as label_agent_id and label_run_id, never given to the engine,
// never stored as the effect's agent or run (which the console, the admin
// API and the audit log show as identities), and never sent upstream.
// Before, they were the begin's agent and run: any local process could
// name an agent to use its grant, rotate them to dodge per-agent and
// per-run ceilings, and push a token-fixed MCP agent over max_unreported.
// Ratchet-Group-Key still joins a group (package ledger's rules for
// groups apply).
//
// Decisions recorded here, where the spec is silent:
//   - The payload hashed into the fingerprint is the same canonical content,
//     so a Ratchet-Idempotency-Key reused for different content is refused
//     (400, idempotency_key_conflict). Content over the ledger's payload
//     limit has its body replaced by a SHA-256 of it; smaller content is
//     passed whole, as before, so fingerprints do not change for it.
//   - The vendor's answer is kept for replay when it fits the ledger's
//     result limit once encoded (the body in base64, about 48 KiB at most);
//     a larger one is kept as its status, size and the vendor's object id,
//     and a duplicate gets 409 naming that id. The report is never refused
//     for size.
//   - A report the ledger fails to record does not change the caller's
//     answer; the lease then expires and the effect becomes indeterminate.
//     Every report names the attempt its execute was for.
//   - A host allowed through a wildcard in allow_hosts is resolved once,
//     checked, and dialled at the checked address (no second lookup a
//     rebinding DNS server could answer differently).
package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// Engine is what the proxy needs from the ledger.
type Engine interface {
	Begin(context.Context, ledger.BeginRequest) (*ledger.BeginResult, error)
	Report(context.Context, ledger.ReportRequest) (*ledger.Effect, error)
	MaxLeaseSeconds(effectType, vendor, operation string) int
}

// Request and response headers of the proxy's own protocol.
const (
	HeaderIdempotencyKey = "Ratchet-Idempotency-Key"
	HeaderRunID          = "Ratchet-Run-Id"
	HeaderAgentID        = "Ratchet-Agent-Id"
	HeaderGroupKey       = "Ratchet-Group-Key"
	HeaderDecision       = "Ratchet-Decision"
	HeaderEffectID       = "Ratchet-Effect-Id"
	HeaderReplayed       = "Ratchet-Replayed"
	HeaderReason         = "Ratchet-Reason"
	// HeaderDeduped, on a duplicate answered for a request that carried
	// no idempotency key, says that identical content within the dedupe
	// window made it one: "content; window=10m0s".
	HeaderDeduped = "Ratchet-Deduped"
	// HeaderVendorKey carries, with execute, the idempotency key Ratchet
	// sent to the vendor, for the caller's logs.
	HeaderVendorKey = "Ratchet-Vendor-Key"
)

// Options configures New. Upstreams is required; zero values elsewhere take
// the documented defaults.
type Options struct {
	// Upstreams maps vendor names to base URLs (tests point them at mocks).
	Upstreams map[string]string
	// Vendors are the vendors Upstreams may name: the built-in ones and
	// those the config declares (nil: the built-in ones).
	Vendors *vendors.Registry
	// Namespace is the tenant of every request (default "default").
	Namespace string
	// AgentID is the agent every gated request is begun as (proxy.agent_id):
	// whose grants cover it, whose per-agent ceilings count it, whose
	// unreported expiries it adds to. Empty is no agent, the empty scope.
	// Never a header: see "Identity" in the package doc.
	AgentID string
	// DedupeWindow is how long identical requests without an idempotency
	// key are one call (default DefaultDedupeWindow).
	DedupeWindow time.Duration
	// DedupeWindows overrides DedupeWindow per vendor name.
	DedupeWindows map[string]time.Duration
	// UpstreamTimeout bounds a vendor call (default 60s).
	UpstreamTimeout time.Duration
	// InterceptHosts are more API hosts, per vendor, that the forward proxy
	// intercepts and sends to that vendor's upstream, beyond the vendor's
	// well-known hosts: Adyen's live hosts carry a per-merchant prefix
	// ({prefix}-checkout-live.adyenpayments.com). Each vendor named needs an
	// upstream.
	InterceptHosts map[string][]string
	// AllowHosts are non-vendor hosts the forward proxy may tunnel to:
	// "host", "host:port" or "*.domain" (no port means 443).
	AllowHosts []string
	// MaxBodyBytes bounds request bodies (default 1 MiB); larger get 413.
	MaxBodyBytes int64
	// CurrencyMicros converts amounts to micro-USD per major unit.
	CurrencyMicros map[string]int64
	// CA intercepts CONNECTs to vendor hosts; nil refuses them.
	CA *CA
	// Transport reaches upstreams and allowed hosts (default
	// NewTransport()).
	Transport http.RoundTripper
	// Resolver checks wildcard allow_hosts matches (default net.DefaultResolver).
	Resolver Resolver
	// Dial opens tunnels to allowed hosts (default a net.Dialer with a 10 s
	// timeout). A host allowed by a wildcard is dialled at the address
	// Resolver gave and the proxy checked, never by name again.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Clock is the time source for dedupe buckets (default time.Now).
	Clock func() time.Time
	// Logger gets one line per gated request; never bodies or credentials.
	Logger *slog.Logger
	// Observer is told of requests and upstream calls (metrics); nil means
	// nobody.
	Observer Observer
}

// NewTransport returns the proxy's default Transport (outbound.NewTransport).
func NewTransport() *http.Transport { return outbound.NewTransport() }

// Observer is told what the proxy did.
type Observer interface {
	// Request counts a request by vendor and what happened to it: "pass"
	// for reads, a decision for effects, or "refused" for errors; in
	// transparent mode also a connection, "spliced" or "refused", under
	// NoVendor when it named none.
	Request(vendor, outcome string)
	// Upstream times a call to a vendor by its result.
	Upstream(vendor, result string, elapsed time.Duration)
}

// OperationObserver is an Observer also told each gated call's vendor
// operation and decision (metrics: ratchet_proxy_operations_total).
type OperationObserver interface {
	Operation(operation, decision string)
}

type nopObserver struct{}

func (nopObserver) Request(string, string)                 {}
func (nopObserver) Upstream(string, string, time.Duration) {}

// Resolver looks up a host's addresses.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Proxy is the outbound proxy handler.
type Proxy struct {
	eng       Engine
	opts      Options
	upstreams map[string]*url.URL
	vendors   map[string]vendors.Vendor
	extra     map[string]vendors.Vendor // InterceptHosts, by host
	pass      *httputil.ReverseProxy
	log       *slog.Logger
}

// The defaults of Options: the one home of these values (the config file's
// proxy block starts from them).
const (
	// DefaultDedupeWindow: a content-derived key stands for one call
	// retried, never for two purchases. Identical requests without a key
	// are one call for this long: longer than a client's retries of one
	// call take (the upstream timeout, 60 s, a few times over, with SDK
	// backoff of seconds; a worker restarted and replaying its job within
	// minutes), and short of the next genuine identical purchase, which
	// on a day of traffic (the same customer buying the same thing twice,
	// a subscription renewal, a nightly batch) comes hours later. It was
	// 24 h, which merged such purchases. stripe-go's calls are keyed in
	// the window of the time their SDK key was minted, so their retries
	// are one call however late they come. A caller that knows better
	// sends an idempotency key, or sets proxy.dedupe_window (or
	// proxy.dedupe_windows per vendor).
	DefaultDedupeWindow    = 10 * time.Minute
	DefaultUpstreamTimeout = 60 * time.Second
	DefaultMaxBodyBytes    = 1 << 20
)

// New builds a proxy.
func New(eng Engine, opts Options) (*Proxy, error) {
	if opts.Namespace == "" {
		opts.Namespace = ledger.DefaultNamespace
	}
	if opts.DedupeWindow <= 0 {
		opts.DedupeWindow = DefaultDedupeWindow
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport()
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	if opts.Vendors == nil {
		opts.Vendors = all.Registry()
	}
	p := &Proxy{eng: eng, opts: opts, upstreams: map[string]*url.URL{}, vendors: map[string]vendors.Vendor{}, log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	for name, raw := range opts.Upstreams {
		v, ok := opts.Vendors.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("proxy upstream %q: no rules for that vendor", name)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("proxy upstream %s: %q is not an http(s) URL", name, raw)
		}
		p.upstreams[v.Name()], p.vendors[v.Name()] = u, v
	}
	p.extra = map[string]vendors.Vendor{}
	for name, hosts := range opts.InterceptHosts {
		v, ok := p.vendors[strings.ToLower(name)]
		if !ok {
			return nil, fmt.Errorf("proxy intercept_hosts %q: that vendor has no upstream", name)
		}
		for _, h := range hosts {
			h = strings.ToLower(h)
			if !vendors.IsHostName(h) {
				return nil, fmt.Errorf("proxy intercept_hosts %s: %q is not a host name (no scheme, port or wildcard)", name, h)
			}
			if other, ok := p.vendorFor(h); ok && other != v {
				return nil, fmt.Errorf("proxy intercept_hosts %s: %q is already %s's", name, h, other.Name())
			}
			p.extra[h] = v
		}
	}
	p.pass = &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.Out.URL = pr.In.URL; pr.Out.Host = pr.In.Host },
		Transport:  opts.Transport,
		ErrorLog:   slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
		BufferPool: copyBuffers,
	}
	return p, nil
}

// vendorFor returns the vendor whose traffic to host the forward proxy
// intercepts: one of its well-known hosts or InterceptHosts, for a vendor
// with an upstream.
func (p *Proxy) vendorFor(host string) (vendors.Vendor, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if v, ok := p.extra[host]; ok {
		return v, true
	}
	if v, ok := p.opts.Vendors.ForHost(host); ok && p.upstreams[v.Name()] != nil {
		return v, true
	}
	return nil, false
}

// ServeHTTP dispatches reverse, forward and CONNECT requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs(): // forward mode, plain HTTP
		host := r.URL.Hostname()
		if v, ok := p.vendorFor(host); ok {
			p.gateRequest(w, r, v, r.URL.Path)
			return
		}
		addrs, ok := p.allowed(r.Context(), host, r.URL.Port(), "80")
		if !ok {
			refuse(w, http.StatusForbidden, "ratchet: "+host+" is not a vendor host and not in proxy.allow_hosts")
			return
		}
		if len(addrs) > 0 { // the address checked, not the name again
			r = r.Clone(r.Context())
			r.URL.Host = addrs[0]
		}
		p.pass.ServeHTTP(w, r)
	default: // reverse mode: /<vendor>/...
		name, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		v := p.vendors[name]
		if v == nil {
			refuse(w, http.StatusNotFound, "ratchet: no vendor at /"+name+"/ (configured: "+p.names()+")")
			return
		}
		p.gateRequest(w, r, v, "/"+rest)
	}
}

func (p *Proxy) names() string {
	var n []string
	for name := range p.vendors {
		n = append(n, name)
	}
	return strings.Join(n, ", ")
}

// refuse answers a request the proxy will not handle at all.
func refuse(w http.ResponseWriter, status int, msg string) {
	http.Error(w, msg, status)
}

// hashed is a SHA-256 of s in hex; used only for high-entropy inputs
// (credentials) that go into derived keys.
func hashed(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// copyBuffers are the buffers the reverse proxies copy answers through:
// without a pool, httputil.ReverseProxy allocates (and zeroes) 32 KiB for
// every request, the largest allocation on a proxied call.
var copyBuffers httputil.BufferPool = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// isTimeout reports whether err is a deadline or timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
