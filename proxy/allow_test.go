package proxy

import (
	"context"
	"errors"
	"net"
	"testing"
)

type fakeResolver map[string]string

func (f fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	ip, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
}

func TestAllowed(t *testing.T) {
	p := &Proxy{opts: Options{
		AllowHosts: []string{"*.partner.example", "db.internal.example:5432", "10.0.0.7", "Hooks.Example.com"},
		Resolver: fakeResolver{
			"api.partner.example":  "203.0.113.10",
			"evil.partner.example": "127.0.0.1",
			"lan.partner.example":  "192.168.1.20",
			"link.partner.example": "169.254.169.254",
		},
	}}
	cases := []struct {
		host, port string
		want       bool
	}{
		{"api.partner.example", "443", true},
		{"evil.partner.example", "443", false}, // wildcard to loopback
		{"lan.partner.example", "443", false},  // wildcard to a private address
		{"link.partner.example", "443", false}, // wildcard to link-local (cloud metadata)
		{"gone.partner.example", "443", false}, // unresolvable
		{"127.0.0.1", "443", false},            // not listed
		{"partner.example", "443", false},      // the wildcard needs a subdomain
		{"api.partner.example", "8443", false}, // no port in the entry: 443 only
		{"db.internal.example", "5432", true},  // exact entries may be private
		{"db.internal.example", "443", false},
		{"10.0.0.7", "443", true},
		{"hooks.example.com", "443", true},  // case-insensitive
		{"hooks.example.com.", "443", true}, // trailing dot
	}
	for _, c := range cases {
		if _, got := p.allowed(context.Background(), c.host, c.port, "443"); got != c.want {
			t.Errorf("allowed(%s:%s) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}
