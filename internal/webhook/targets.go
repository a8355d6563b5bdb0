package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/keygate/keygate/internal/listenaddr"
)

// Targets says which addresses a delivery may connect to. By default only
// public unicast addresses: a webhook is a request the gateway makes on
// its subscriber's word, and without this it would reach the cloud
// metadata service, the private network or the gateway's own admin
// endpoint (a POST to /stop) for whoever may subscribe. The check is
// made on the address connected to, after resolution (a dialer's
// Control), so a name that resolves somewhere else later, or on each
// lookup, gains nothing; a subscription's URL is checked too when it
// names an IP address or localhost.
type Targets struct {
	// Allow lists the networks an operator opened beyond the public
	// unicast addresses (webhook_allow_networks), for receivers on a
	// private network or, for a local receiver, loopback.
	Allow []netip.Prefix
	// Self lists the addresses this gateway serves (its admin endpoint
	// and its HTTP listeners): never a target, whatever Allow says.
	Self []listenaddr.Addr
}

// TargetError is a refused target: the delivery is not attempted and not
// retried.
type TargetError struct {
	Addr   netip.Addr
	Port   uint16
	Reason string
}

// ErrTargetNotAllowed is what every TargetError is (errors.Is).
var ErrTargetNotAllowed = errors.New("target not allowed")

func (e *TargetError) Error() string {
	return fmt.Sprintf("target not allowed: %s is %s", netip.AddrPortFrom(e.Addr, e.Port), e.Reason)
}

func (e *TargetError) Is(target error) bool { return target == ErrTargetNotAllowed }

// Check refuses ip:port unless it is a public unicast address or in an
// allowed network, and always when this gateway serves it.
func (t *Targets) Check(ip netip.Addr, port uint16) error {
	ip = ip.Unmap().WithZone("")
	for _, l := range t.Self {
		if l.Reaches(ip, port) {
			return &TargetError{ip, port, "this gateway's own address (its admin endpoint or a listener, " + l.String() + ")"}
		}
	}
	class := special(ip)
	if class == "" {
		return nil
	}
	for _, p := range t.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	return &TargetError{ip, port, class + "; the webapi option webhook_allow_networks can allow it"}
}

// checkURL refuses a subscription URL whose host is an IP address or
// localhost that Check refuses; a name is checked when it is connected
// to.
func (t *Targets) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := uint16(443)
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return err
		}
		port = uint16(n)
	}
	ips, _ := listenaddr.HostAddrs(u.Hostname())
	for _, ip := range ips {
		if err := t.Check(ip, port); err != nil {
			return err
		}
	}
	return nil
}

// dialControl is a net.Dialer's Control: it checks the address about to
// be connected to.
func (t *Targets) dialControl(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("target not allowed: %q is no IP address and port", address)
	}
	return t.Check(ap.Addr(), ap.Port())
}

// special names the special-purpose range ip is in, "" for a public
// unicast address (IANA's IPv4 and IPv6 special-purpose address
// registries: what is not globally reachable, or embeds an IPv4 address
// that may not be).
func special(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "no address"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address (cloud metadata services live there)"
	case ip.IsPrivate() && ip.Is6():
		return "a unique-local address"
	case ip.IsPrivate():
		return "a private address"
	}
	for _, r := range reserved {
		if r.prefix.Contains(ip) {
			return r.class
		}
	}
	return ""
}

var reserved = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "in 0.0.0.0/8 (this network)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared address (100.64.0.0/10, carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address (192.0.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay address (deprecated)"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (it may lead to any IPv4 address)"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "an IPv4-translated address (it may lead to any IPv4 address)"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol address (2001::/23: Teredo, benchmarking, ORCHID)"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "a segment routing address (5f00::/16)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address (it may lead to any IPv4 address)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address (it may lead to any IPv4 address)"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address (it may lead to any IPv4 address)"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}
