package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// transparentInProcess is a transparent listener whose connections all
// "were going" to dst, without iptables: for what does not need a
// redirect (TestTransparentNetns has the real one).
func transparentInProcess(t *testing.T, opts Options, dst *net.TCPAddr) (*Transparent, string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	var err error
	if opts.CA, err = LoadOrCreateCA(dir); err != nil {
		t.Fatal(err)
	}
	p, err := New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	tp := p.Transparent()
	tp.origDst = func(net.Conn) (*net.TCPAddr, error) { return dst, nil }
	tp.owner = func(net.Addr) (int, bool) { return 0, false } // the app is this process: not a loop here
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tp.Serve(ln)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(opts.CA.PEM())
	return tp, ln.Addr().String(), roots
}

// appClient is an app whose connections to any host:443 reach addr, as
// the rules would send them, trusting roots.
func appClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

// TestTransparentShutdownIsGraceful: a payment in flight on an
// intercepted connection is answered (and reported) before Shutdown
// returns; an idle keep-alive does not hold it up for its whole grace.
func TestTransparentShutdownIsGraceful(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			<-release // the second payment is in flight during Shutdown
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent"}`)
	}))
	defer upstream.Close()
	tp, addr, roots := transparentInProcess(t, Options{Upstreams: map[string]string{"stripe": upstream.URL},
		Transport: upstream.Client().Transport}, &net.TCPAddr{IP: net.ParseIP("203.0.113.5"), Port: 443})
	pay := func(hc *http.Client, n string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", "https://api.stripe.com/v1/payment_intents", strings.NewReader("amount="+n+"&currency=usd"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_1")
		return hc.Do(req)
	}
	idle := appClient(addr, roots)
	resp, err := pay(idle, "100")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get(HeaderDecision) != "execute" {
		t.Fatalf("not intercepted: %v", resp.Header)
	}
	// idle keeps its connection open; another app's payment is in flight.
	answered := make(chan string, 1)
	go func() {
		resp, err := pay(appClient(addr, roots), "200")
		if err != nil {
			answered <- err.Error()
			return
		}
		resp.Body.Close()
		answered <- resp.Header.Get(HeaderDecision) + " " + resp.Status
	}()
	for calls.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- tp.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a payment in flight", err)
	default:
	}
	close(release)
	if got := <-answered; got != "execute 200 OK" {
		t.Fatalf("the payment in flight during Shutdown got %q", got)
	}
	if err := <-shut; err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Shutdown: %v after %v, held up by the idle keep-alive", err, time.Since(start))
	}
}

// TestTransparentSplicesOnlyToWhereTheNameResolves: an allowed host is
// spliced to its original destination when the name resolves there, and
// refused when the ClientHello names it on the way to another address.
func TestTransparentSplicesOnlyToWhereTheNameResolves(t *testing.T) {
	allowed := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "allowed") }))
	defer allowed.Close()
	at := allowed.Listener.Addr().(*net.TCPAddr)
	roots := x509.NewCertPool()
	roots.AddCert(allowed.Certificate())
	for _, c := range []struct {
		name     string
		resolves string
		ok       bool
	}{
		{"resolves to the destination", "127.0.0.1", true},
		{"resolves elsewhere", "192.0.2.9", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, addr, _ := transparentInProcess(t, Options{Upstreams: map[string]string{"stripe": "https://api.stripe.com"},
				AllowHosts: []string{"example.com:" + portOf(at)}, Resolver: fixedResolver{"example.com": c.resolves}}, at)
			hc := appClient(addr, roots)
			resp, err := hc.Get("https://example.com:" + portOf(at) + "/") // httptest's certificate names example.com
			if !c.ok {
				if err == nil {
					resp.Body.Close()
					t.Fatal("spliced to an address the name does not resolve to")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "allowed" {
				t.Fatalf("string(b) != \"allowed\": got %q from a server whose certificate is not the host's own", b)
			}
			if !resp.TLS.PeerCertificates[0].Equal(allowed.Certificate()) {
				t.Fatalf("!resp.TLS.PeerCertificates[0].Equal(allowed.Certificate()): got %q from a server whose certificate is not the host's own", b)
			}
		})
	}
}

func portOf(a *net.TCPAddr) string { return strings.TrimPrefix(a.String(), "127.0.0.1:") }

type fixedResolver map[string]string

func (r fixedResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if ip, ok := r[host]; ok {
		return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
