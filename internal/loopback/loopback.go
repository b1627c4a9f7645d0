// Package loopback decides whether an address names this machine only.
//
// Two callers need the same answer: serve, which refuses to put an
// unauthenticated listener beyond loopback, and the admin API, which, when
// unauthenticated, answers only requests whose Host header names loopback
// (a DNS-rebinding page reaches 127.0.0.1 under its own name, so the Host
// it sends is that name). The MCP endpoint gets the same Host check from
// the MCP SDK's own DNS-rebinding protection, whose helper is internal to
// the SDK; this is the same rule: "localhost" or a loopback IP.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Is reports whether addr, a host or host:port (a listen address or an
// HTTP Host header; IPv6 in brackets), is "localhost" (any case) or a
// loopback IP (127.0.0.0/8, ::1, or 127.x mapped into IPv6). An empty or
// wildcard host (":8788", "0.0.0.0") is not loopback, and neither is any
// other name, even one that resolves to 127.0.0.1: a name's answer can
// change (which is what DNS rebinding does).
func Is(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}
