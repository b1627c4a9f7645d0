package proxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// rebinder answers a public address the first time it is asked about a
// name and loopback every time after: a DNS-rebinding attacker's server.
type rebinder struct {
	mu    sync.Mutex
	asked map[string]int
}

func (r *rebinder) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asked == nil {
		r.asked = map[string]int{}
	}
	r.asked[host]++
	if r.asked[host] == 1 {
		return []net.IPAddr{{IP: net.ParseIP("203.0.113.10")}}, nil
	}
	return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}}, nil
}

// sink records where requests were sent and sends none anywhere.
type sink struct {
	mu    sync.Mutex
	hosts []string // URL host, then the Host header
}

func (s *sink) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.hosts = append(s.hosts, r.URL.Host, r.Host)
	s.mu.Unlock()
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Header: http.Header{}, Request: r}, nil
}

// TestWildcardHostsAreDialledAtTheCheckedAddress: a host allowed through a
// wildcard is resolved once, checked, and reached at the address checked;
// resolving it again when dialling would let a rebinding DNS server answer
// loopback the second time.
func TestWildcardHostsAreDialledAtTheCheckedAddress(t *testing.T) {
	res := &rebinder{}
	up := &sink{}
	var dialled []string
	var mu sync.Mutex
	p, err := proxy.New(nil, proxy.Options{
		AllowHosts: []string{"*.partner.example", "*.partner.example:80"},
		Resolver:   res,
		Transport:  up,
		Dial: func(_ context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, addr)
			mu.Unlock()
			return nil, errors.New("the test dials nothing")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()

	// Plain HTTP in forward mode.
	proxyURL, _ := url.Parse(srv.URL)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	resp, err := hc.Get("http://api.partner.example/hook")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("resp.StatusCode != 200: plain HTTP: %d, sent to %v", resp.StatusCode, up.hosts)
	}
	if len(up.hosts) != 2 {
		t.Fatalf("len(up.hosts) != 2: plain HTTP: %d, sent to %v", resp.StatusCode, up.hosts)
	}
	if up.hosts[0] != "203.0.113.10:80" {
		t.Fatalf("up.hosts[0] != \"203.0.113.10:80\": plain HTTP: %d, sent to %v", resp.StatusCode, up.hosts)
	}
	if up.hosts[1] != "api.partner.example" {
		t.Fatalf("up.hosts[1] != \"api.partner.example\": plain HTTP: %d, sent to %v", resp.StatusCode, up.hosts)
	}

	// CONNECT.
	req, _ := http.NewRequest(http.MethodConnect, srv.URL, nil)
	req.Host = "pay.partner.example:443"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("resp.StatusCode != http.StatusBadGateway: CONNECT: %d, dialled %v", resp.StatusCode, dialled)
	}
	if len(dialled) != 1 {
		t.Fatalf("len(dialled) != 1: CONNECT: %d, dialled %v", resp.StatusCode, dialled)
	}
	if dialled[0] != "203.0.113.10:443" {
		t.Fatalf("dialled[0] != \"203.0.113.10:443\": CONNECT: %d, dialled %v", resp.StatusCode, dialled)
	}
	for host, n := range res.asked {
		if n != 1 {
			t.Errorf("%s was resolved %d times", host, n)
		}
	}
}
