package webhook

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/listenaddr"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
)

// Input is the body of a subscription's create (url and events required)
// or update (any of the fields; absent ones keep their value).
type Input struct {
	URL         patch.Field[string]   `json:"url"`
	Events      patch.Field[[]string] `json:"events"`
	Owners      patch.Field[[]string] `json:"owners"`
	Description patch.Field[string]   `json:"description"`
	Enabled     patch.Field[bool]     `json:"enabled"`
}

const (
	maxURLLen   = 2048
	maxOwnerLen = 255
	maxOwners   = 1000
)

// applyCreate checks in as a create and returns the new subscription's
// fields, listing every violation in the returned problem; a URL must be
// a target t allows.
func applyCreate(in *Input, t *Targets) (Subscription, error) {
	var f problem.Fields
	s := Subscription{Owners: []string{}, Enabled: true}
	if !in.URL.Set || in.URL.Null {
		f.Add("url", "required", "url is required")
	}
	if !in.Events.Set || in.Events.Null {
		f.Add("events", "required", "events must name at least one event")
	}
	applyEditable(&f, &s, in, t)
	return s, f.Err()
}

// applyUpdate checks in as an update of s and returns the changed
// subscription; a new URL must be a target t allows.
func applyUpdate(s Subscription, in *Input, t *Targets) (Subscription, error) {
	var f problem.Fields
	if in.URL.Set && in.URL.Null {
		f.Add("url", "required", "url cannot be removed")
	}
	if in.Events.Set && in.Events.Null {
		f.Add("events", "required", "events must name at least one event")
	}
	if in.Enabled.Set && in.Enabled.Null {
		f.Add("enabled", "invalid", "enabled must be true or false")
	}
	s.Events = append([]string(nil), s.Events...)
	s.Owners = append([]string{}, s.Owners...)
	applyEditable(&f, &s, in, t)
	return s, f.Err()
}

// applyEditable checks and applies the fields create and update share.
func applyEditable(f *problem.Fields, s *Subscription, in *Input, t *Targets) {
	if in.URL.Set && !in.URL.Null {
		if err := CheckURL(in.URL.Value); err != nil {
			f.Add("url", "invalid", err.Error())
		} else if err := t.checkURL(in.URL.Value); err != nil {
			f.Add("url", "not_allowed", err.Error())
		} else {
			s.URL = in.URL.Value
		}
	}
	if in.Events.Set && !in.Events.Null {
		s.Events = checkEvents(f, in.Events.Value)
	}
	if in.Owners.Set {
		s.Owners = checkOwners(f, in.Owners.Value) // null: every owner
	}
	if in.Description.Set {
		if d := in.Description.Value; text.CheckDescription(f, d) { // null: none
			s.Description = d
		}
	}
	if in.Enabled.Set && !in.Enabled.Null {
		s.Enabled = in.Enabled.Value
	}
}

func checkEvents(f *problem.Fields, list []string) []string {
	if len(list) == 0 {
		f.Add("events", "required", "events must name at least one event")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		field := fmt.Sprintf("events[%d]", i)
		switch {
		case !knownType(e):
			f.Add(field, "invalid", "events must be among "+strings.Join(events.Types, ", "))
		case contains(out, e):
			f.Add(field, "duplicate", e+" is named twice")
		default:
			out = append(out, e)
		}
	}
	return out
}

func checkOwners(f *problem.Fields, list []string) []string {
	if len(list) > maxOwners {
		f.Add("owners", "invalid", fmt.Sprintf("owners must name at most %d owners", maxOwners))
		return []string{}
	}
	out := make([]string, 0, len(list))
	for i, o := range list {
		field := fmt.Sprintf("owners[%d]", i)
		switch {
		case !text.PrintableASCII(o, maxOwnerLen):
			f.Add(field, "invalid", "an owner must be 1 to 255 printable US-ASCII characters")
		case contains(out, o):
			f.Add(field, "duplicate", "this owner is named twice")
		default:
			out = append(out, o)
		}
	}
	return out
}

// CheckURL checks an endpoint's URL: absolute, at most 2048 printable
// US-ASCII characters, https or else http to a loopback host (localhost,
// 127.0.0.0/8, ::1), without user information or fragment. Its error
// says what is wrong, for a field error.
func CheckURL(raw string) error {
	if !text.PrintableASCII(raw, maxURLLen) || strings.Contains(raw, " ") {
		return fmt.Errorf("url must be 1 to %d printable US-ASCII characters without spaces", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("url must be an absolute http or https URL")
	}
	if u.User != nil {
		return fmt.Errorf("url must not hold user information: authenticate deliveries by their signature")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("url must not have a fragment")
	}
	if ip, ok := legacyIPv4(strings.TrimSuffix(u.Hostname(), ".")); ok {
		return fmt.Errorf("url's host %s is the IPv4 address %s in another notation: write it as %s", u.Hostname(), ip, ip)
	}
	if u.Port() != "" {
		if p, err := netip.ParseAddrPort("0.0.0.0:" + u.Port()); err != nil || p.Port() == 0 {
			return fmt.Errorf("url has an invalid port")
		}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !LoopbackHost(u.Hostname()) {
			return fmt.Errorf("url must be https, or http to a loopback host (localhost, 127.0.0.0/8, ::1)")
		}
	default:
		return fmt.Errorf("url must be https, or http to a loopback host (localhost, 127.0.0.0/8, ::1)")
	}
	return nil
}

// legacyIPv4 reads host as inet_aton(3) does, one to four numbers, each
// decimal, octal (0 first) or hexadecimal (0x first), the last filling
// the remaining bytes, and reports the address unless host is in the
// dotted decimal form that netip reads. Some resolvers take 2130706433 or
// 0x7f.1 for 127.0.0.1, others for a name to look up: such a host means
// whatever the resolver makes of it, so it is refused.
func legacyIPv4(host string) (netip.Addr, bool) {
	if _, err := netip.ParseAddr(host); err == nil || host == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var nums []uint64
	for _, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		if digits == "" && base != 16 {
			return netip.Addr{}, false
		}
		if digits == "" {
			digits = "0"
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		nums = append(nums, n)
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		v |= n << (24 - 8*i)
	}
	last := nums[len(nums)-1]
	if last >= 1<<(32-8*(len(nums)-1)) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// LoopbackHost reports whether host names the local machine: localhost
// (or the absolute "localhost."), an address of 127.0.0.0/8, or ::1.
func LoopbackHost(host string) bool {
	ips, ok := listenaddr.HostAddrs(host)
	for _, ip := range ips {
		ok = ok && loopbackAddr(ip)
	}
	return ok
}

func loopbackAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.Is4() && ip.As4()[0] == 127 || ip == netip.IPv6Loopback()
}

// loopbackDial is the check at dial time of a plain-http delivery (after
// Targets.Check): the name may resolve to anything, but only a loopback
// address is connected to.
func loopbackDial(_, address string) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !loopbackAddr(ip) {
		return fmt.Errorf("http deliveries go to loopback addresses only, not %s", host)
	}
	return nil
}
