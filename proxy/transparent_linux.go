package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TransparentSupported says whether this platform can serve transparent
// mode: nil on Linux, where iptables REDIRECT sends a pod's connections
// to the listener and conntrack's SO_ORIGINAL_DST tells where each was
// going.
func TransparentSupported() error { return nil }

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/
// ip6_tables.h), which golang.org/x/sys/unix does not name; it has the
// value of SO_ORIGINAL_DST, at the IPv6 level.
const ip6tSOOriginalDst = 80

// originalDst is where a connection redirected by iptables REDIRECT (or
// DNAT) was going: conntrack's original destination, read with
// SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6).
func originalDst(c net.Conn) (*net.TCPAddr, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a TCP connection")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	la, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := la != nil && la.IP.To4() == nil
	var dst *net.TCPAddr
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			info, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst)
			if err != nil {
				serr = err
				return
			}
			ip := make(net.IP, net.IPv6len)
			copy(ip, info.Addr.Addr[:])
			dst = &net.TCPAddr{IP: ip, Port: networkPort(info.Addr.Port)}
			return
		}
		// A sockaddr_in fits in the 16 bytes of an ipv6_mreq's address:
		// family (2 bytes), port (2, network order), address (4).
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		a := m.Multiaddr
		dst = &net.TCPAddr{IP: net.IPv4(a[4], a[5], a[6], a[7]), Port: int(a[2])<<8 | int(a[3])}
	})
	if err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("reading the original destination: %w", serr)
	}
	return dst, nil
}

// socketOwner returns the UID that owns the local TCP socket whose address
// is addr, the client end of a connection from this network namespace,
// from /proc/net/tcp or tcp6; false when there is none (the client is
// elsewhere) or it cannot be read. Ratchet's own connections are never
// redirected to it by rules that exclude its UID: one that arrives means
// the rules exclude another, and serving it would call the vendor through
// Ratchet again, and again.
func socketOwner(addr net.Addr) (int, bool) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return 0, false
	}
	file, ip := "/proc/net/tcp6", ta.IP.To16()
	if ip4 := ta.IP.To4(); ip4 != nil {
		file, ip = "/proc/net/tcp", ip4
	}
	// The kernel prints an address as 32-bit words in host order, and the
	// port as a number.
	var want strings.Builder
	for i := 0; i < len(ip); i += 4 {
		fmt.Fprintf(&want, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&want, ":%04X", ta.Port)
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 7 && fields[1] == want.String() {
			uid, err := strconv.Atoi(fields[7])
			return uid, err == nil
		}
	}
	return 0, false
}

// networkPort converts a port as the kernel stores it (network order) and
// Go reads it (native order) to a number.
func networkPort(p uint16) int {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return int(binary.BigEndian.Uint16(b[:]))
}
