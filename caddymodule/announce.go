package caddymodule

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// The one human line an operator looks for at start: where the APIs, the
// Web API Keys page and the admin endpoint are, logged once the APIs'
// listener accepts connections.
//
//	keygate ready: APIs on http://localhost:8080 (listening on :8080), keys page on http://127.0.0.1:8081/admin/, admin on localhost:2019, storage bolt data/webapi.db

// announceWait bounds how long the line waits for the listener.
const announceWait = 10 * time.Second

// announce logs the ready line of a's config from a goroutine of its own,
// when the APIs' listener answers (or at once when this config serves no
// API), unless the config stops first.
func (a *App) announce(stop <-chan struct{}) {
	apis, keysPage := a.sites()
	var parts []string
	if len(apis) > 0 {
		parts = append(parts, "APIs on "+a.PublicBaseURL+" (listening on "+strings.Join(apis, ", ")+")")
	} else {
		parts = append(parts, "no API site in this config")
	}
	for _, l := range keysPage {
		parts = append(parts, "keys page on "+listenURL(l)+"/admin/")
	}
	if listen, _, on := adminAddrs(a.ctx); on {
		parts = append(parts, "admin on "+listen)
	} else {
		parts = append(parts, "admin endpoint off")
	}
	parts = append(parts, "storage "+a.state.stores.DB.Backend()+" "+a.state.stores.Where)
	line := "keygate ready: " + strings.Join(parts, ", ")
	go func() {
		if len(apis) > 0 {
			deadline := time.Now().Add(announceWait)
			for !accepts(apis[0]) {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					a.logger.Warn("the APIs' listener does not accept connections yet", zap.String("listen", apis[0]))
					return
				}
			}
		}
		a.logger.Info(line)
	}()
}

// sites are the listen addresses of the HTTP servers that serve an API
// handler, and of those that serve the Web API Keys page.
func (a *App) sites() (apis, keysPage []string) {
	v, err := a.ctx.AppIfConfigured("http")
	if err != nil {
		if !errors.Is(err, caddy.ErrNotConfigured) {
			a.logger.Debug("reading the http app", zap.Error(err))
		}
		return nil, nil
	}
	for _, srv := range v.(*caddyhttp.App).Servers {
		api, page := serves(srv.Routes, 0)
		if api {
			apis = append(apis, srv.Listen...)
		}
		if page {
			keysPage = append(keysPage, srv.Listen...)
		}
	}
	return apis, keysPage
}

// serves reports whether routes (subroutes included) hold an API handler
// and the keys page.
func serves(routes caddyhttp.RouteList, depth int) (api, page bool) {
	if depth > 10 {
		return false, false
	}
	for _, r := range routes {
		for _, h := range r.Handlers {
			switch h := h.(type) {
			case *Contracts, *Share:
				api = true
			case *AdminPage:
				page = true
			case *caddyhttp.Subroute:
				sa, sp := serves(h.Routes, depth+1)
				api, page = api || sa, page || sp
			}
		}
	}
	return api, page
}

// listenURL makes a listen address a URL a person can open: a host left
// out is localhost.
func listenURL(listen string) string {
	na, err := caddy.ParseNetworkAddress(listen)
	if err != nil {
		return listen
	}
	if na.Host == "" {
		na.Host = "localhost"
	}
	return (&url.URL{Scheme: "http", Host: na.JoinHostPort(0)}).String()
}

// accepts reports whether something accepts connections at listen.
func accepts(listen string) bool {
	na, err := caddy.ParseNetworkAddress(listen)
	if err != nil {
		return false
	}
	if na.Host == "" {
		na.Host = "127.0.0.1"
	}
	c, err := net.DialTimeout("tcp", na.JoinHostPort(0), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
