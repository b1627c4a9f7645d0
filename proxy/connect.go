package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// connect handles CONNECT: vendor hosts are intercepted, allow-listed hosts
// tunnelled, everything else refused.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		refuse(w, http.StatusBadRequest, "ratchet: CONNECT needs host:port")
		return
	}
	if v, ok := p.vendorFor(host); ok {
		if p.opts.CA == nil || port != "443" {
			refuse(w, http.StatusForbidden, "ratchet: cannot intercept "+r.Host)
			return
		}
		p.intercept(w, v, host)
		return
	}
	addrs, ok := p.allowed(r.Context(), host, port, "443")
	if !ok {
		refuse(w, http.StatusForbidden, "ratchet: "+r.Host+" is not a vendor host and not in proxy.allow_hosts")
		return
	}
	if len(addrs) == 0 {
		addrs = []string{r.Host}
	}
	p.tunnel(w, r, addrs)
}

// allowed reports whether a non-vendor host may be reached. Exact entries
// ("host" or "host:port") allow what they name, even a private address,
// because an operator wrote it down; a wildcard ("*.example.com") never
// reaches a loopback, private, link-local or unspecified address, so it
// cannot be used to probe the pod's own network. An entry without a port
// allows only the default port (443 for CONNECT, 80 for plain HTTP).
//
// For a wildcard match it returns the addresses it checked (as host:port):
// the caller must reach the host there, not by resolving the name again,
// or a DNS server that answers a public address to the check and loopback
// to the dial would get past it (DNS rebinding). Exact entries return none:
// they are reached by name.
func (p *Proxy) allowed(ctx context.Context, host, port, defPort string) ([]string, bool) {
	if port == "" {
		port = defPort
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, entry := range p.opts.AllowHosts {
		eh, ep, err := net.SplitHostPort(entry)
		if err != nil {
			eh, ep = entry, defPort
		}
		eh = strings.ToLower(eh)
		if ep != port {
			continue
		}
		if eh == host {
			return nil, true
		}
		if suffix, ok := strings.CutPrefix(eh, "*."); ok && strings.HasSuffix(host, "."+suffix) {
			ips, ok := p.public(ctx, host)
			if !ok {
				return nil, false
			}
			addrs := make([]string, len(ips))
			for i, ip := range ips {
				addrs[i] = net.JoinHostPort(ip.String(), port)
			}
			return addrs, true
		}
	}
	return nil, false
}

// public returns the addresses host resolves to, if every one is public.
func (p *Proxy) public(ctx context.Context, host string) ([]net.IP, bool) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, publicIP(ip)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := p.opts.Resolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return nil, false
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		if a.Zone != "" || !publicIP(a.IP) {
			return nil, false
		}
		ips[i] = a.IP
	}
	return ips, true
}

// nonPublic are the ranges a wildcard allow_hosts entry never reaches,
// beyond what net.IP's predicates name (loopback, private and ULA,
// link-local, multicast, unspecified): "this network", the shared address
// space of carrier-grade NAT (also some clouds' metadata services, such as
// 100.100.100.200, and some clusters' pod ranges), IETF protocol
// assignments, benchmarking, reserved and broadcast; for IPv6 the discard
// prefix, local-use NAT64, Teredo and deprecated site-local.
var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "198.18.0.0/15", "240.0.0.0/4",
		"::/96", "100::/64", "64:ff9b:1::/48", "2001::/32", "fec0::/10"} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// Prefixes whose addresses carry an IPv4 address, which is checked in
// turn: NAT64's well-known prefix (the last 32 bits) and 6to4 (bits 16 to
// 48). IPv4-mapped addresses are checked as IPv4.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// publicIP reports whether a wildcard allow_hosts entry may reach ip.
func publicIP(ip net.IP) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return publicIP(net.IP(b[12:16]))
		case sixTo4.Contains(a):
			return publicIP(net.IP(b[2:6]))
		}
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsUnspecified() || a.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// tunnel splices the client to an allowed host, untouched, trying each of
// its addresses in turn.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, addrs []string) {
	var up net.Conn
	err := errors.New("no address")
	for _, a := range addrs {
		if up, err = p.opts.Dial(r.Context(), "tcp", a); err == nil {
			break
		}
	}
	if err != nil {
		refuse(w, http.StatusBadGateway, "ratchet: cannot reach "+r.Host)
		return
	}
	conn, err := hijack(w)
	if err != nil {
		up.Close()
		return
	}
	splice(conn, up)
}

// splice copies bytes both ways between the client and an upstream until
// both directions end, then closes both.
func splice(conn, up net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(up, conn); up.Close() })
	wg.Go(func() { io.Copy(conn, up); conn.Close() })
	wg.Wait()
}

// hijack takes the client connection and confirms the tunnel.
func hijack(w http.ResponseWriter) (net.Conn, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		refuse(w, http.StatusInternalServerError, "ratchet: cannot tunnel on this connection")
		return nil, errors.New("not hijackable")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil || buf.Reader.Buffered() > 0 {
		conn.Close()
		return nil, errors.New("client sent data before the tunnel was confirmed")
	}
	return conn, nil
}

// intercept terminates TLS for a vendor host with a certificate from
// Ratchet's CA and serves the requests inside as vendor requests.
func (p *Proxy) intercept(w http.ResponseWriter, v vendors.Vendor, host string) {
	leaf, err := p.opts.CA.Leaf(host)
	if err != nil {
		refuse(w, http.StatusInternalServerError, "ratchet: "+err.Error())
		return
	}
	conn, err := hijack(w)
	if err != nil {
		return
	}
	p.serveIntercepted(conn, v, leaf, nil)
}

// serveIntercepted terminates TLS on conn with leaf and serves the requests
// inside as vendor v's: forward mode after its CONNECT, transparent mode
// after reading the ClientHello's name (transparent.go). track, if not
// nil, is given the connection's server before it serves, for a graceful
// shutdown.
func (p *Proxy) serveIntercepted(conn net.Conn, v vendors.Vendor, leaf *tls.Certificate, track func(*http.Server)) {
	tconn := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.gateRequest(w, r, v, r.URL.Path)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          p.pass.ErrorLog,
	}
	if track != nil {
		track(srv)
	}
	srv.Serve(newOneConnListener(tconn))
}

// oneConnListener serves exactly one connection, then reports closed once
// that connection is closed.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, onClose: func() { l.Close() }}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "intercepted" }

// notifyConn tells its listener when it is closed.
type notifyConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}
