// Package clientip carries the client address that the gateway decided on
// (Caddy's client_ip, which honours trusted_proxies) to handlers that know
// nothing of Caddy. Handlers never read X-Forwarded-For themselves.
package clientip

import (
	"context"
	"net"
	"net/http"
	"net/netip"
)

type ctxKey struct{}

// With returns a context that carries addr as the client address,
// unmapped and without zone as Parse returns it: per-client limits must
// not see ::ffff:192.0.2.1 and 192.0.2.1 as two clients.
func With(ctx context.Context, addr netip.Addr) context.Context {
	return context.WithValue(ctx, ctxKey{}, addr.Unmap().WithZone(""))
}

// From returns the client address of r: the one set by With, else the
// socket peer of r.RemoteAddr (for handlers served without Caddy in tests).
func From(r *http.Request) netip.Addr {
	if addr, ok := r.Context().Value(ctxKey{}).(netip.Addr); ok {
		return addr
	}
	return Parse(r.RemoteAddr)
}

// Parse reads "ip", "ip:port" or "[ip]:port", unmapping IPv4-in-IPv6.
// It returns the zero Addr when s holds no address.
func Parse(s string) netip.Addr {
	addr, err := netip.ParseAddr(s) // Caddy's client_ip: no port, no allocation
	if err != nil {
		host, _, serr := net.SplitHostPort(s)
		if serr != nil {
			return netip.Addr{}
		}
		if addr, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}
		}
	}
	return addr.Unmap().WithZone("")
}
