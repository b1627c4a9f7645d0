package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// recordingConn keeps what is written to it.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.buf.Write(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *recordingConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

// TestSniffKeepsEveryByte: the ClientHello's name or the request's Host is
// read, and the connection then yields exactly what the client sent.
func TestSniffKeepsEveryByte(t *testing.T) {
	cases := []struct {
		name   string
		client func(c net.Conn)
		tls    bool
		host   string
	}{
		{"TLS with a server name", func(c net.Conn) {
			tls.Client(c, &tls.Config{ServerName: "api.stripe.com"}).Handshake()
		}, true, "api.stripe.com"},
		{"TLS without one", func(c net.Conn) {
			tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		}, true, ""},
		{"plain HTTP", func(c net.Conn) {
			io.WriteString(c, "POST /v1/charges HTTP/1.1\r\nHost: api.stripe.com:80\r\nContent-Length: 3\r\n\r\nabc")
		}, false, "api.stripe.com"},
		{"plain HTTP to an IPv6 address", func(c net.Conn) {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n")
		}, false, "2001:db8::1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			server, client := net.Pipe()
			rec := &recordingConn{Conn: client}
			go c.client(rec)
			server.SetDeadline(time.Now().Add(5 * time.Second))
			s, pc, err := sniff(server)
			if err != nil {
				t.Fatal(err)
			}
			if s.tls != c.tls {
				t.Fatalf("s.tls != c.tls: sniffed %+v, want tls %v host %q", s, c.tls, c.host)
			}
			if s.host != c.host {
				t.Fatalf("s.host != c.host: sniffed %+v, want tls %v host %q", s, c.tls, c.host)
			}
			// What the client sent so far is read again, byte for byte.
			time.Sleep(50 * time.Millisecond)
			sent := rec.written()
			got := make([]byte, len(sent))
			if _, err := io.ReadFull(pc, got); err != nil || !bytes.Equal(got, sent) {
				t.Fatalf("replayed %d bytes (%v), the client sent %d", len(got), err, len(sent))
			}
			server.Close()
		})
	}
	server, client := net.Pipe()
	go io.WriteString(client, "\x00\x01 not a request\r\n\r\n")
	server.SetDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := sniff(server); err == nil {
		t.Fatal("garbage sniffed as a request")
	}
}

func TestTransparentRulesOptions(t *testing.T) {
	for _, o := range []RulesOptions{
		{ListenPort: 0, ExcludeUID: 65532},
		{ListenPort: 15001, ExcludeUID: -1},
		{ListenPort: 15001, ExcludeUID: 65532, Ports: []int{443, 15001}},
		{ListenPort: 15001, ExcludeUID: 65532, Ports: []int{70000}},
	} {
		if _, err := TransparentRules(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	cmds, err := TransparentRules(RulesOptions{ListenPort: 15001, ExcludeUID: 65532})
	if err != nil {
		t.Fatal(err)
	}
	script := RulesScript(cmds)
	// The owner exclusion comes before the redirect, in both families.
	for _, fam := range []string{"iptables", "ip6tables"} {
		owner := strings.Index(script, fam+" -w -t nat -A RATCHET_OUTPUT -m owner --uid-owner 65532 -j RETURN")
		redirect := strings.Index(script, fam+" -w -t nat -A RATCHET_OUTPUT -p tcp -m multiport --dports 443,80 -j REDIRECT --to-ports 15001")
		if owner < 0 {
			t.Errorf("owner < 0: %s: the owner match must precede the redirect:\n%s", fam, script)
		} else if redirect < 0 {
			t.Errorf("redirect < 0: %s: the owner match must precede the redirect:\n%s", fam, script)
		} else if owner > redirect {
			t.Errorf("owner > redirect: %s: the owner match must precede the redirect:\n%s", fam, script)
		}
	}
}

func TestOwnListener(t *testing.T) {
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 15001}
	for _, c := range []struct {
		dst  string
		want bool
	}{
		{"127.0.0.1:15001", true},
		{"[::1]:15001", true},
		{"0.0.0.0:15001", true},
		{"127.0.0.1:443", false},
		{"198.51.100.7:15001", false},
	} {
		dst, _ := net.ResolveTCPAddr("tcp", c.dst)
		if got := ownListener(dst, local); got != c.want {
			t.Errorf("%s: %v, want %v", c.dst, got, c.want)
		}
	}
}

type countingObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *countingObserver) Request(vendor, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[vendor+"/"+outcome]++
}
func (o *countingObserver) Upstream(string, string, time.Duration) {}

func (o *countingObserver) get(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[k]
}

// TestTransparentRefusesADirectConnection: a connection made to the
// listener itself, never redirected, is closed, logged and counted.
func TestTransparentRefusesADirectConnection(t *testing.T) {
	obs := &countingObserver{n: map[string]int{}}
	var logs syncBuf
	p, err := New(nil, Options{Upstreams: map[string]string{"stripe": "https://api.stripe.com"}, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tp, ln := listenTransparent(t, p)
	done := make(chan error)
	go func() { done <- tp.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.stripe.com\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("answered %q", b)
	}
	c.Close()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != net.ErrClosed {
		t.Fatalf("Serve returned %v", err)
	}
	if obs.get(NoVendor+"/refused") != 1 {
		t.Fatalf("obs.get(NoVendor+\"/refused\") != 1: counted %v, logged %s", obs.n, logs.String())
	}
	if !strings.Contains(logs.String(), "transparent connection refused") {
		t.Fatalf("!strings.Contains(logs.String(), \"transparent connection refused\"): counted %v, logged %s", obs.n, logs.String())
	}
}

// listenTransparent returns p's transparent handler and a loopback
// listener for it to serve.
func listenTransparent(t *testing.T, p *Proxy) (*Transparent, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return p.Transparent(), ln
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNonStandardMethodsAreRefusedTransparently: a connection iptables
// redirected (its original destination faked here, as REDIRECT would
// give it) to api.stripe.com is intercepted, and a request inside it
// whose method is not a standard one exactly as written is refused in
// Stripe's shape, never sent or recorded (see TestNonStandardMethodsAreRefused
// for the other modes).
func TestNonStandardMethodsAreRefusedTransparently(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent","status":"succeeded"}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(eng, Options{Upstreams: map[string]string{"stripe": up.URL}, CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	tp, ln := listenTransparent(t, p)
	tp.origDst = func(net.Conn) (*net.TCPAddr, error) {
		return &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 443}, nil
	}
	tp.owner = func(net.Addr) (int, bool) { return 0, false }
	go tp.Serve(ln)
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM())
	hc := &http.Client{Transport: &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) },
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "api.stripe.com"},
	}}
	send := func(method string) (int, string) {
		req, _ := http.NewRequest(method, "https://api.stripe.com/v1/payment_intents", strings.NewReader("amount=100&currency=usd"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_123")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, method := range []string{"post", "Post", "PROPFIND"} {
		status, body := send(method)
		if status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400 (%s)", method, status, body)
		}
		if !strings.Contains(body, `"code":"ratchet_method_not_allowed"`) {
			t.Errorf("%s: not Stripe's error shape with code ratchet_method_not_allowed: %s", method, body)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the vendor saw %d requests with a non-standard method", n)
	}
	if page, err := eng.List(context.Background(), ledger.Filter{}); err != nil || len(page.Effects) != 0 {
		t.Errorf("effects recorded for refused requests: %v %v", page, err)
	}
	if status, body := send(http.MethodPost); status != 200 {
		t.Errorf("POST: status %d, want 200 (%s)", status, body)
	}
}
