package proxy

import (
	"context"
	"errors"
	"net"
	"strconv"
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

// TestWildcardRefusesNonPublicRanges: a wildcard allow_hosts entry never
// reaches an address outside the public internet: besides loopback,
// private, link-local and multicast, the shared address space
// 100.64.0.0/10 (carrier-grade NAT; Alibaba Cloud's metadata service is
// 100.100.100.200; some clusters' pod ranges), 0.0.0.0/8, 198.18.0.0/15,
// reserved 240.0.0.0/4, IPv6 unique-local, and the IPv4 address inside a
// NAT64 (64:ff9b::/96), 6to4 or IPv4-mapped address. Each of these was
// reached before, but the last three.
func TestWildcardRefusesNonPublicRanges(t *testing.T) {
	res := fakeResolver{}
	cases := map[string]bool{
		"100.100.100.200": false, "100.64.0.10": false, "64:ff9b::a9fe:a9fe": false, "198.18.0.1": false, "0.0.0.1": false,
		"240.0.0.1": false, "255.255.255.255": false, "192.0.0.170": false, "fd00::1": false, "fe80::1": false, "::1": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "64:ff9b::7f00:1": false, "64:ff9b:1::a00:1": false,
		"2002:a9fe:a9fe::1": false, "2001:0:4136:e378::1": false, "ff02::1": false, "::": false, "100::1": false,
		"203.0.113.10": true, "8.8.8.8": true, "100.128.0.1": true, "2606:4700:4700::1111": true, "64:ff9b::808:808": true,
		"2002:808:808::1": true, "::ffff:8.8.8.8": true,
	}
	i := 0
	names := map[string]string{}
	for ip := range cases {
		name := "h" + strconv.Itoa(i) + ".partner.example"
		res[name], names[ip] = ip, name
		i++
	}
	p := &Proxy{opts: Options{AllowHosts: []string{"*.partner.example"}, Resolver: res}}
	for ip, want := range cases {
		if _, got := p.allowed(context.Background(), names[ip], "443", "443"); got != want {
			t.Errorf("a name resolving to %s: allowed %v, want %v", ip, got, want)
		}
	}
}
