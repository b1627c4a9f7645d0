package proxy

// Transparent mode: a pod's outbound connections are redirected to Ratchet
// by iptables rules (TransparentRules; `ratchet transparent rules`), as
// service meshes do, so that a legacy workload changes nothing but the CA
// it trusts. Each redirected connection is read just far enough to learn
// where it was going (the original destination from conntrack, and the
// server name of its TLS ClientHello or the Host of a plain HTTP request),
// and then:
//
//   - a vendor API host (the forward mode's table, with InterceptHosts) on
//     443 is intercepted with Ratchet's CA and served exactly as forward
//     mode serves it after a CONNECT (serveIntercepted): gated, stamped,
//     sent to the vendor's upstream, reported;
//   - plain HTTP to a vendor host is refused (vendors are HTTPS only);
//   - a host in AllowHosts is spliced byte for byte to its original
//     destination, TLS untouched, when that destination is an address the
//     name resolves to (a ClientHello naming an allowed host cannot carry
//     the connection to another address, a vendor's say, ungated);
//   - anything else is refused: closed, logged and counted.
//
// Loops: the rules never redirect Ratchet's own UID, so its calls to the
// vendors leave the pod; a connection whose original destination is the
// transparent listener itself (made to it directly, never redirected) is
// refused; and a connection from a socket of Ratchet's own UID (rules that
// exclude another UID) is refused rather than sent out through Ratchet
// again, and again.
//
// Shutdown is graceful where it matters: a payment in flight on an
// intercepted connection is answered and reported, idle keep-alives close
// at once, splices (nothing gated) close.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OutcomeSpliced is the Observer outcome of a transparent connection
// spliced to an allowed host; such connections and refused ones that
// name no vendor are counted under the vendor NoVendor.
const (
	OutcomeSpliced = "spliced"
	NoVendor       = "other"
)

// sniffTimeout bounds how long a redirected connection may take to send
// its ClientHello or request header.
const sniffTimeout = 10 * time.Second

// Transparent serves connections redirected to Ratchet's transparent
// listeners. Build it with Proxy.Transparent; it shares the proxy's
// options, engine, CA and observer.
type Transparent struct {
	p *Proxy
	// origDst reads a connection's original destination (originalDst),
	// and owner the UID of a local client socket (socketOwner); tests
	// that cannot redirect give their own.
	origDst func(net.Conn) (*net.TCPAddr, error)
	owner   func(net.Addr) (int, bool)

	mu    sync.Mutex
	lns   map[net.Listener]struct{}
	conns map[net.Conn]bool // true: intercepted, served by one of servers
	// servers serve the intercepted connections; each channel is closed
	// when Shutdown has finished with its server.
	servers  map[*http.Server]chan struct{}
	closed   bool
	shutdown context.Context // Shutdown's, once closed
	wg       sync.WaitGroup
}

// Transparent returns a server for redirected connections handled by p.
func (p *Proxy) Transparent() *Transparent {
	return &Transparent{p: p, origDst: originalDst, owner: socketOwner, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]bool{},
		servers: map[*http.Server]chan struct{}{}}
}

// Serve accepts redirected connections on ln until Shutdown; ln should be
// on loopback, where the rules' REDIRECT sends them (127.0.0.1 for IPv4,
// ::1 for IPv6). It returns net.ErrClosed after Shutdown.
func (t *Transparent) Serve(ln net.Listener) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	t.lns[ln] = struct{}{}
	t.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed {
				return net.ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, say: the pod's traffic waits
			// rather than the sidecar stopping, as net/http's servers do.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.p.log.Warn("transparent mode: accepting a connection", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !t.track(c) {
			c.Close()
			return net.ErrClosed
		}
		go func() {
			defer t.untrack(c)
			t.handle(c)
		}()
	}
}

func (t *Transparent) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = false
	t.wg.Add(1)
	return true
}

func (t *Transparent) untrack(c net.Conn) {
	c.Close()
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.wg.Done()
}

// intercepting notes that c is served by srv, an intercepted connection's
// server, so that Shutdown closes it gracefully (its requests in flight
// are answered and reported, an idle keep-alive closed at once).
func (t *Transparent) intercepting(c net.Conn, srv *http.Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	done := make(chan struct{})
	t.conns[c], t.servers[srv] = true, done
	if t.closed {
		go t.shut(t.shutdown, srv, done)
	}
}

// intercepted waits, once srv has stopped serving, until Shutdown (if it
// began) has let its requests in flight finish.
func (t *Transparent) intercepted(srv *http.Server) {
	t.mu.Lock()
	done, closed := t.servers[srv]
	closed = closed && t.closed
	t.mu.Unlock()
	if closed {
		<-done
	}
	t.mu.Lock()
	delete(t.servers, srv)
	t.mu.Unlock()
}

func (t *Transparent) shut(ctx context.Context, srv *http.Server, done chan struct{}) {
	srv.Shutdown(ctx)
	close(done)
}

// Shutdown stops accepting; closes the intercepted connections once their
// requests in flight are answered (idle ones at once) and every other
// connection (splices, which carry nothing gated, and those not yet
// read); and when ctx ends, closes whatever is left.
func (t *Transparent) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.closed, t.shutdown = true, ctx
	for ln := range t.lns {
		ln.Close()
	}
	for srv, done := range t.servers {
		go t.shut(ctx, srv, done)
	}
	for c, intercepted := range t.conns {
		if !intercepted {
			c.Close()
		}
	}
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	<-done
	return ctx.Err()
}

// handle decides what one redirected connection is, and serves it.
func (t *Transparent) handle(c net.Conn) {
	p := t.p
	ctx := context.Background()
	dst, err := t.origDst(c)
	if err != nil {
		t.refuse(c, NoVendor, "", nil, "not a redirected connection (it has no original destination): "+err.Error())
		return
	}
	if ownListener(dst, c.LocalAddr()) {
		t.refuse(c, NoVendor, "", dst, "its original destination is Ratchet's own transparent listener (a loop, or a direct connection)")
		return
	}
	if uid, ok := t.owner(c.RemoteAddr()); ok && uid == os.Geteuid() {
		t.refuse(c, NoVendor, "", dst, fmt.Sprintf("a loop: this is Ratchet's own connection (UID %d), redirected back to it; "+
			"the rules must exclude the UID Ratchet runs as (ratchet transparent rules --uid %d)", uid, uid))
		return
	}
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	s, pc, err := sniff(c)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		t.refuse(c, NoVendor, "", dst, "it sent neither a TLS ClientHello nor an HTTP request: "+err.Error())
		return
	}
	port := strconv.Itoa(dst.Port)
	name := s.host
	if name == "" {
		name = dst.IP.String()
	}
	if v, ok := p.vendorFor(s.host); ok && s.host != "" {
		switch {
		case !s.tls:
			t.refuse(pc, v.Name(), name, dst, "plain HTTP to a vendor API host: vendors are HTTPS only, so nothing was sent; call https://"+name+
				" (Ratchet intercepts it)")
			return
		case p.opts.CA == nil:
			t.refuse(pc, v.Name(), name, dst, "cannot intercept a vendor API host: the proxy has no CA")
			return
		case port != "443":
			t.refuse(pc, v.Name(), name, dst, "cannot intercept a vendor API host on port "+port+" (only 443)")
			return
		}
		leaf, err := p.opts.CA.Leaf(strings.ToLower(strings.TrimSuffix(name, ".")))
		if err != nil {
			t.refuse(pc, v.Name(), name, dst, err.Error())
			return
		}
		p.log.Debug("transparent connection intercepted", "vendor", v.Name(), "host", name, "dst", dst.String())
		var srv *http.Server
		p.serveIntercepted(pc, v, leaf, func(s *http.Server) { srv = s; t.intercepting(c, s) })
		t.intercepted(srv)
		return
	}
	defPort := "443"
	if !s.tls {
		defPort = "80"
	}
	if why := p.reachable(ctx, s.host, port, defPort, dst); why != "" {
		t.refuse(pc, NoVendor, name, dst, why)
		return
	}
	up, err := p.opts.Dial(ctx, "tcp", dst.String())
	if err != nil {
		t.refuse(pc, NoVendor, name, dst, "cannot reach the original destination: "+err.Error())
		return
	}
	p.opts.Observer.Request(NoVendor, OutcomeSpliced)
	p.log.Debug("transparent connection spliced", "host", name, "dst", dst.String())
	splice(pc, up)
}

// reachable says why a non-vendor connection to dst naming host (the
// ClientHello's server name or the request's Host; "" when it named none)
// may not be spliced, or "" when it may: the host must be in AllowHosts
// and dst one of the addresses it resolves to (for a wildcard entry, the
// public ones checked by allowed). Without a name, only an allow_hosts
// entry naming dst's address allows it.
func (p *Proxy) reachable(ctx context.Context, host, port, defPort string, dst *net.TCPAddr) string {
	name := host
	if name == "" {
		name = dst.IP.String()
	}
	addrs, ok := p.allowed(ctx, name, port, defPort)
	if !ok {
		return "not a vendor API host and not in proxy.allow_hosts"
	}
	if len(addrs) > 0 { // a wildcard entry: the public addresses checked
		for _, a := range addrs {
			if ta, err := net.ResolveTCPAddr("tcp", a); err == nil && ta.IP.Equal(dst.IP) {
				return ""
			}
		}
		return "allowed by name, but " + name + " does not resolve to the original destination"
	}
	if ip := net.ParseIP(name); ip != nil {
		if ip.Equal(dst.IP) {
			return ""
		}
		return "allowed by name, but " + name + " is not the original destination"
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := p.opts.Resolver.LookupIPAddr(rctx, name)
	if err != nil {
		return "allowed by name, but " + name + " does not resolve: " + err.Error()
	}
	for _, a := range ips {
		if a.IP.Equal(dst.IP) {
			return ""
		}
	}
	return "allowed by name, but " + name + " does not resolve to the original destination"
}

// refuse closes a redirected connection Ratchet will not carry, saying why
// in the log, in the metrics and, to a plain HTTP request, in a 403.
func (t *Transparent) refuse(c net.Conn, vendor, host string, dst *net.TCPAddr, why string) {
	t.p.opts.Observer.Request(vendor, "refused")
	args := []any{"reason", why, "src", c.RemoteAddr().String()}
	if host != "" {
		args = append(args, "host", host)
	}
	if dst != nil {
		args = append(args, "dst", dst.String())
	}
	if vendor != NoVendor {
		args = append(args, "vendor", vendor)
	}
	t.p.log.Warn("transparent connection refused", args...)
	if pc, ok := c.(*peekedConn); ok && !pc.tls {
		msg := "ratchet: " + why + "\n"
		fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
	}
	c.Close()
}

// ownListener reports whether dst is the listener that accepted the
// connection: its port, on its address, loopback or another address of
// this host.
func ownListener(dst *net.TCPAddr, local net.Addr) bool {
	la, ok := local.(*net.TCPAddr)
	if !ok || dst.Port != la.Port {
		return false
	}
	if dst.IP.Equal(la.IP) || dst.IP.IsLoopback() || dst.IP.IsUnspecified() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(dst.IP) {
			return true
		}
	}
	return false
}

// sniffed is what the start of a redirected connection says about it.
type sniffed struct {
	tls  bool   // a TLS ClientHello (else a plain HTTP request)
	host string // its server name or Host, without a port; "" when none
}

// peekedConn is a connection whose first bytes were read to learn where it
// goes: they are read again from it, before the rest, so what is spliced
// or intercepted is the stream exactly as the client sent it.
type peekedConn struct {
	net.Conn
	r   io.Reader
	tls bool
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// sniff reads a TLS ClientHello or an HTTP request header from c without
// consuming it.
func sniff(c net.Conn) (sniffed, *peekedConn, error) {
	var seen bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &seen))
	pc := func(isTLS bool) *peekedConn {
		return &peekedConn{Conn: c, r: io.MultiReader(&seen, c), tls: isTLS}
	}
	first, err := br.Peek(1)
	if err != nil {
		return sniffed{}, pc(false), err
	}
	if first[0] == 0x16 { // a TLS handshake record
		name, err := serverName(br)
		if err != nil {
			return sniffed{}, pc(true), err
		}
		return sniffed{tls: true, host: name}, pc(true), nil
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return sniffed{}, pc(false), err
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return sniffed{host: strings.Trim(host, "[]")}, pc(false), nil
}

// errHelloRead stops the handshake serverName starts once the ClientHello
// is read.
var errHelloRead = errors.New("ClientHello read")

// serverName reads a TLS ClientHello from r with crypto/tls's own parser
// and returns its server name ("" when it sent none).
func serverName(r io.Reader) (string, error) {
	var name string
	var read bool
	err := tls.Server(readOnlyConn{r}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, read = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	if !read {
		return "", fmt.Errorf("not a TLS ClientHello: %w", err)
	}
	return name, nil
}

// readOnlyConn lets crypto/tls read a ClientHello and write nothing back.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnlyConn) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return dummyAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr             { return dummyAddr{} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// RulesOptions says which connections TransparentRules redirects.
type RulesOptions struct {
	// ListenPort is the transparent listener's port (listen.transparent),
	// where the redirected connections go. Required.
	ListenPort int
	// Ports are the destination ports redirected (default 443 and 80: 80
	// so that plain HTTP to a vendor is refused with a clear log line
	// instead of leaving the pod).
	Ports []int
	// ExcludeUID is Ratchet's own UID, whose connections (its calls to the
	// vendors and to allowed hosts) are never redirected. Required: there
	// is no default, as a wrong one makes every vendor call a loop.
	ExcludeUID int
}

// RulesChain is the nat chain the transparent rules live in.
const RulesChain = "RATCHET_OUTPUT"

// Command is one iptables invocation of TransparentRules.
type Command struct {
	// Args is the command line, the program first (iptables or ip6tables).
	Args []string
	// MayFail marks a command whose failure is expected when the rules are
	// applied a second time (creating a chain that exists).
	MayFail bool
	// Unless, when set, is a check (iptables -C) whose success makes the
	// command unnecessary: the jump into RulesChain is added once.
	Unless []string
}

// TransparentRules returns the iptables and ip6tables commands that send a
// pod's outbound TCP connections to the given ports to the transparent
// listener, except Ratchet's own (by owner match on its UID) and those to
// loopback. They are idempotent: applied twice, they leave one set.
func TransparentRules(o RulesOptions) ([]Command, error) {
	if o.ListenPort <= 0 || o.ListenPort > 65535 {
		return nil, fmt.Errorf("the transparent listener's port %d is not a port", o.ListenPort)
	}
	if o.ExcludeUID < 0 {
		return nil, fmt.Errorf("the UID to exclude (Ratchet's own) is required")
	}
	ports := o.Ports
	if len(ports) == 0 {
		ports = []int{443, 80}
	}
	var ps []string
	for _, p := range ports {
		if p <= 0 || p > 65535 {
			return nil, fmt.Errorf("%d is not a port", p)
		}
		if p == o.ListenPort {
			return nil, fmt.Errorf("port %d is the transparent listener's own", p)
		}
		ps = append(ps, strconv.Itoa(p))
	}
	var out []Command
	for _, fam := range []struct{ cmd, loopback string }{{"iptables", "127.0.0.0/8"}, {"ip6tables", "::1/128"}} {
		nat := func(args ...string) []string { return append([]string{fam.cmd, "-w", "-t", "nat"}, args...) }
		jump := []string{"OUTPUT", "-p", "tcp", "-j", RulesChain}
		out = append(out,
			Command{Args: nat("-N", RulesChain), MayFail: true},
			Command{Args: nat("-F", RulesChain)},
			Command{Args: nat("-A", RulesChain, "-m", "owner", "--uid-owner", strconv.Itoa(o.ExcludeUID), "-j", "RETURN")},
			Command{Args: nat("-A", RulesChain, "-d", fam.loopback, "-j", "RETURN")},
			Command{Args: nat("-A", RulesChain, "-p", "tcp", "-m", "multiport", "--dports", strings.Join(ps, ","),
				"-j", "REDIRECT", "--to-ports", strconv.Itoa(o.ListenPort))},
			Command{Args: nat(append([]string{"-A"}, jump...)...), Unless: nat(append([]string{"-C"}, jump...)...)},
		)
	}
	return out, nil
}

// RulesScript is the commands as a POSIX shell script, which is what
// `ratchet transparent rules` prints.
func RulesScript(cmds []Command) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Ratchet transparent mode: redirect the pod's outbound connections to Ratchet.\nset -e\n")
	for _, c := range cmds {
		line := strings.Join(c.Args, " ")
		switch {
		case c.MayFail:
			line += " 2>/dev/null || true"
		case c.Unless != nil:
			line = strings.Join(c.Unless, " ") + " 2>/dev/null || " + line
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
