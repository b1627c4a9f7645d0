//go:build !linux

package proxy

import (
	"fmt"
	"net"
	"runtime"
)

// TransparentSupported says whether this platform can serve transparent
// mode. Only Linux can: the mode relies on iptables REDIRECT and on
// conntrack's SO_ORIGINAL_DST to learn where a redirected connection was
// going, and on /proc to find a socket's owner (the loop check). Elsewhere
// (a developer's laptop) the proxy listener's forward mode (HTTPS_PROXY)
// and reverse mode do the same gating.
func TransparentSupported() error {
	return fmt.Errorf("transparent mode needs Linux (iptables REDIRECT and SO_ORIGINAL_DST), not %s: "+
		"unset listen.transparent and send the calls to listen.proxy, as HTTPS_PROXY (forward mode) or as the vendor's base URL (reverse mode)", runtime.GOOS)
}

// originalDst cannot be read off Linux; Serve is never reached there, as
// `ratchet serve` refuses listen.transparent first.
func originalDst(net.Conn) (*net.TCPAddr, error) { return nil, TransparentSupported() }

// socketOwner cannot be found off Linux.
func socketOwner(net.Addr) (int, bool) { return 0, false }
