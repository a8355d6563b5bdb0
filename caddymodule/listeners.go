package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/listenaddr"
)

// The addresses a config serves: its admin endpoint and its HTTP
// servers' listeners. A webhook may never reach one of them (a POST to
// the admin endpoint's /stop would stop the gateway), and a gateway
// refuses to start on one that another process serves (Caddy listens with
// SO_REUSEPORT: the kernel would split the connections between the two).

// served is one address a config serves, as its config names it.
type served struct {
	what string // "admin endpoint localhost:2019", "listener :8080"
	addr []listenaddr.Addr
}

// servedAddrs lists the TCP addresses ctx's config serves, host names
// resolved: its admin endpoint's and, with listeners, every HTTP server's
// (known once the http app is provisioned, so not in Provision).
func servedAddrs(ctx caddy.Context, listeners bool) ([]served, error) {
	var out []served
	add := func(what, raw string) error {
		if raw == "" {
			return nil
		}
		na, err := caddy.ParseNetworkAddress(caddy.NewReplacer().ReplaceKnown(raw, ""))
		if err != nil {
			return fmt.Errorf("%s %q: %v", what, raw, err)
		}
		if !strings.HasPrefix(na.Network, "tcp") {
			return nil // unix sockets, file descriptors, and UDP for HTTP/3: no webhook goes there
		}
		first, last := uint16(na.StartPort), uint16(na.EndPort)
		ips, err := resolve(ctx, na.Host)
		if err != nil {
			return fmt.Errorf("%s %q: %v", what, raw, err)
		}
		s := served{what: what + " " + raw}
		for _, ip := range ips {
			s.addr = append(s.addr, listenaddr.Addr{IP: ip, FirstPort: first, LastPort: last})
		}
		out = append(out, s)
		return nil
	}
	if listen, remote, on := adminAddrs(ctx); on {
		if err := add("admin endpoint", listen); err != nil {
			return nil, err
		}
		if err := add("remote admin endpoint", remote); err != nil {
			return nil, err
		}
	}
	if !listeners {
		return out, nil
	}
	if v, err := ctx.AppIfConfigured("http"); err == nil {
		for _, srv := range v.(*caddyhttp.App).Servers {
			for _, l := range srv.Listen {
				if err := add("listener", l); err != nil {
					return nil, err
				}
			}
		}
	} else if !errors.Is(err, caddy.ErrNotConfigured) {
		return nil, err
	}
	return out, nil
}

// resolve is host's addresses: none given is every address (the zero
// Addr), an IP address itself, a name what it resolves to.
func resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if host == "" {
		return []netip.Addr{{}}, nil
	}
	if ips, ok := listenaddr.HostAddrs(host); ok {
		return ips, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	return ips, nil
}

// adminAddrs are the admin endpoint's listen addresses in ctx's config
// (Caddy's defaults when it names none) and whether it has one. Caddy
// keeps its running config to itself; its fields are read by reflection,
// and a Caddy whose Config no longer has them fails this package's tests.
func adminAddrs(ctx caddy.Context) (listen, remote string, on bool) {
	listen = caddy.DefaultAdminListen
	cfg := reflect.ValueOf(ctx).FieldByName("cfg")
	if !cfg.IsValid() || cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return listen, "", true
	}
	admin := cfg.Elem().FieldByName("Admin")
	if !admin.IsValid() || admin.Kind() != reflect.Pointer || admin.IsNil() {
		return listen, "", true
	}
	a := admin.Elem()
	if d := a.FieldByName("Disabled"); d.IsValid() && d.Bool() {
		return "", "", false
	}
	if l := a.FieldByName("Listen"); l.IsValid() && l.String() != "" {
		listen = l.String()
	}
	if r := a.FieldByName("Remote"); r.IsValid() && r.Kind() == reflect.Pointer && !r.IsNil() {
		remote = caddy.DefaultRemoteAdminListen
		if l := r.Elem().FieldByName("Listen"); l.IsValid() && l.String() != "" {
			remote = l.String()
		}
	}
	return listen, remote, true
}

// selfAddrs flattens what servedAddrs found.
func selfAddrs(list []served) []listenaddr.Addr {
	var out []listenaddr.Addr
	for _, s := range list {
		out = append(out, s.addr...)
	}
	return out
}

// refuseSharedPorts fails when another process listens on an address this
// config serves, naming it. Where that cannot be known (not Linux), it
// logs so and lets the start go on.
func refuseSharedPorts(list []served, logger *zap.Logger) error {
	others, err := listenaddr.HeldByOthers()
	if errors.Is(err, errors.ErrUnsupported) {
		logger.Debug("not checked whether another process serves this gateway's addresses: needs Linux's /proc")
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking whether another process serves this gateway's addresses: %w", err)
	}
	for _, s := range list {
		for _, a := range s.addr {
			for _, o := range others {
				if a.Overlaps(o) {
					return fmt.Errorf("another process already serves %s, this config's %s: is another gateway running? "+
						"Stop it or give this one other ports; to share the ports on purpose (a hand-over to a new binary on one database), "+
						"set allow_shared_ports in the webapi block", o, s.what)
				}
			}
		}
	}
	return nil
}
