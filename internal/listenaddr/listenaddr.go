// Package listenaddr is the addresses a server listens on, as the webhook
// sender and the start of a gateway see them: which connections reach a
// listener (a webhook must never reach the gateway itself), and which
// listening sockets of this machine belong to other processes (a second
// gateway must not share the ports of a first).
package listenaddr

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Addr is a listener: an IP address, or every address of this machine
// when IP is unspecified or invalid, and a port range.
type Addr struct {
	IP                  netip.Addr
	FirstPort, LastPort uint16
}

// Wildcard tells whether a listens on every address.
func (a Addr) Wildcard() bool { return !a.IP.IsValid() || a.IP.IsUnspecified() }

func (a Addr) String() string {
	host := "*"
	if !a.Wildcard() {
		host = a.IP.String()
	}
	if a.LastPort > a.FirstPort {
		return fmt.Sprintf("%s:%d-%d", host, a.FirstPort, a.LastPort)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(a.FirstPort)))
}

func (a Addr) hasPort(port uint16) bool {
	return port >= a.FirstPort && port <= max(a.LastPort, a.FirstPort)
}

// Reaches tells whether a connection to ip:port reaches a. A listener on
// every address is reached through any address of this machine, one on a
// loopback address through any other (a listener on "localhost" answers
// at 127.0.0.1 and ::1 alike, and Linux routes all of 127/8 to the host),
// and any listener through the unspecified address (a connection to
// 0.0.0.0 goes to this machine).
func (a Addr) Reaches(ip netip.Addr, port uint16) bool {
	if !a.hasPort(port) {
		return false
	}
	ip = ip.Unmap().WithZone("")
	la := a.IP.Unmap().WithZone("")
	switch {
	case ip.IsUnspecified():
		return true
	case a.Wildcard():
		return isLocal(ip)
	case la.IsLoopback():
		return ip.IsLoopback()
	default:
		return ip == la
	}
}

// Overlaps tells whether a socket listening on other takes connections
// that a is meant to take: the same port, and the same address or a
// listener on every address on either side.
func (a Addr) Overlaps(other netip.AddrPort) bool {
	if !a.hasPort(other.Port()) {
		return false
	}
	oip := other.Addr().Unmap().WithZone("")
	return a.Wildcard() || oip.IsUnspecified() || oip == a.IP.Unmap().WithZone("")
}

// HostAddrs are the addresses host names without a lookup: an IP address
// itself, and localhost (or the absolute "localhost.") 127.0.0.1 and ::1;
// false for any other name. The webhook targets and the gateway's own
// addresses read hosts alike with it.
func HostAddrs(host string) ([]netip.Addr, bool) {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, true
	}
	return nil, false
}

// isLocal tells whether ip is an address of this machine: loopback,
// unspecified or one of its interfaces'. The interfaces are read at most
// once a second.
func isLocal(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	for _, a := range interfaces.get() {
		if a == ip {
			return true
		}
	}
	return false
}

var interfaces interfaceAddrs

// interfaceAddrs caches this machine's interface addresses for a second:
// interfaces come and go, yet a delivery should not list them each time.
type interfaceAddrs struct {
	mu    sync.Mutex
	at    time.Time
	addrs []netip.Addr
}

func (c *interfaceAddrs) get() []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < time.Second {
		return c.addrs
	}
	var addrs []netip.Addr // a new slice: callers may still read the old one
	if list, err := net.InterfaceAddrs(); err == nil {
		for _, a := range list {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				addrs = append(addrs, p.Addr().Unmap().WithZone(""))
			}
		}
	}
	c.addrs, c.at = addrs, time.Now()
	return addrs
}

// InterfaceAddrs lists this machine's interface addresses (for tests and
// messages).
func InterfaceAddrs() []netip.Addr { return interfaces.get() }
