package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("webapi", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("webapi_auth", parseAuth)
	// The key check runs where other authentication runs; the API handlers
	// answer where a terminal handler would.
	httpcaddyfile.RegisterDirectiveOrder("webapi_auth", httpcaddyfile.After, "basic_auth")
	for _, d := range terminalDirectives {
		httpcaddyfile.RegisterHandlerDirective(d.name, d.parse)
		httpcaddyfile.RegisterDirectiveOrder(d.name, httpcaddyfile.Before, "reverse_proxy")
	}
	// The OpenAPI document answers where a terminal handler would, like
	// the APIs it describes.
	httpcaddyfile.RegisterHandlerDirective("webapi_openapi", parseOpenAPI)
	httpcaddyfile.RegisterDirectiveOrder("webapi_openapi", httpcaddyfile.Before, "reverse_proxy")
	// So do the API reference and the health endpoints.
	httpcaddyfile.RegisterHandlerDirective("webapi_docs", parseDocs)
	httpcaddyfile.RegisterDirectiveOrder("webapi_docs", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterHandlerDirective("webapi_health", parseHealth)
	httpcaddyfile.RegisterDirectiveOrder("webapi_health", httpcaddyfile.Before, "reverse_proxy")
	// The Web API Keys page answers where a terminal handler would: after
	// basic_auth and forward_auth, which name its user.
	httpcaddyfile.RegisterHandlerDirective("webapi_admin", parseAdminPage)
	httpcaddyfile.RegisterDirectiveOrder("webapi_admin", httpcaddyfile.Before, "reverse_proxy")
}

// terminalDirectives are the API handlers, each taking no arguments.
var terminalDirectives = []struct {
	name  string
	parse httpcaddyfile.UnmarshalHandlerFunc
}{
	{"webapi_contracts", noArgs(func() caddyhttp.MiddlewareHandler { return new(Contracts) })},
	{"webapi_signing", noArgs(func() caddyhttp.MiddlewareHandler { return new(Signing) })},
	{"webapi_share", noArgs(func() caddyhttp.MiddlewareHandler { return new(Share) })},
	{"webapi_share_viewer", noArgs(func() caddyhttp.MiddlewareHandler { return new(ShareViewer) })},
	{"webapi_documents", noArgs(func() caddyhttp.MiddlewareHandler { return new(Documents) })},
	{"webapi_verify", noArgs(func() caddyhttp.MiddlewareHandler { return new(Verify) })},
}

// parseGlobalOption sets up the webapi app:
//
//	webapi {
//		data_dir ./data
//		master_key_file ./data/master.key
//		public_base_url http://localhost:8080
//		usage_flush_interval 1s
//		contract_validity 168h
//		webhook_allow_networks 10.20.0.0/16 127.0.0.0/8 ::1/128
//		allow_shared_ports
//		storage postgres {
//			dsn {env.KEYGATE_DATABASE_URL}
//			max_conns 20
//		}
//		host redmine {
//			url http://redmine.internal:3000
//			api_key_file /etc/keygate/redmine.key
//			cache 30s
//			timeout 5s
//		}
//		smtp mail.example.com:587 {
//			username bot
//			password_file /run/secrets/smtp
//			from "Contracts <contracts@example.com>"
//			tls starttls
//		}
//		sms https://sms.example.com/send {
//			token_file /run/secrets/sms
//			from +15550100
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "webapi", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile reads the webapi global option block.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "data_dir":
			if err := oneArg(d, &a.DataDir); err != nil {
				return err
			}
		case "master_key_file":
			if err := oneArg(d, &a.MasterKeyFile); err != nil {
				return err
			}
		case "public_base_url":
			if err := oneArg(d, &a.PublicBaseURL); err != nil {
				return err
			}
		case "usage_flush_interval", "contract_validity", "send_timeout", "webhook_timeout", "key_expiry_warning", "rate_limit_sync":
			name := d.Val()
			var s string
			if err := oneArg(d, &s); err != nil {
				return err
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			switch name {
			case "usage_flush_interval":
				a.UsageFlushInterval = caddy.Duration(dur)
			case "contract_validity":
				a.ContractValidity = caddy.Duration(dur)
			case "webhook_timeout":
				a.WebhookTimeout = caddy.Duration(dur)
			case "key_expiry_warning":
				a.KeyExpiryWarning = caddy.Duration(dur)
			case "rate_limit_sync":
				a.RateLimitSync = caddy.Duration(dur)
			default:
				a.SendTimeout = caddy.Duration(dur)
			}
		case "webhook_allow_networks":
			// No network at all is public addresses only, as without the
			// line: the default Caddyfile's variable may be set empty.
			args := d.RemainingArgs()
			if _, err := parseNetworks(args); err != nil {
				return d.Err(err.Error())
			}
			a.WebhookAllowNetworks = append(a.WebhookAllowNetworks, args...)
		case "allow_shared_ports":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.AllowSharedPorts = true
		case "storage", "host":
			what := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			name := d.Val()
			ns := map[string]string{"storage": "webapi.storage.", "host": "webapi.hosts."}[what]
			unm, err := caddyfile.UnmarshalModule(d, ns+name)
			if err != nil {
				return err
			}
			raw := caddyconfig.JSONModuleObject(unm, "module", name, nil)
			if what == "host" {
				if a.HostRaw != nil {
					return d.Err("at most one host")
				}
				a.HostRaw = raw
			} else {
				a.StorageRaw = raw
			}
		case "smtp":
			a.SMTP = new(SMTPConfig)
			if err := oneArg(d, &a.SMTP.Address); err != nil {
				return err
			}
			for d.NextBlock(1) {
				var err error
				switch d.Val() {
				case "username":
					err = oneArg(d, &a.SMTP.Username)
				case "password_file":
					err = oneArg(d, &a.SMTP.PasswordFile)
				case "from":
					err = oneArg(d, &a.SMTP.From)
				case "tls":
					err = oneArg(d, &a.SMTP.TLS)
				default:
					return d.Errf("unknown smtp option %q", d.Val())
				}
				if err != nil {
					return err
				}
			}
		case "sms":
			a.SMS = new(SMSConfig)
			if err := oneArg(d, &a.SMS.URL); err != nil {
				return err
			}
			for d.NextBlock(1) {
				var err error
				switch d.Val() {
				case "token_file":
					err = oneArg(d, &a.SMS.TokenFile)
				case "from":
					err = oneArg(d, &a.SMS.From)
				default:
					return d.Errf("unknown sms option %q", d.Val())
				}
				if err != nil {
					return err
				}
			}
		case "document_seal":
			a.DocumentSeal = new(DocumentSealConfig)
			if d.NextArg() {
				return d.ArgErr()
			}
			for d.NextBlock(1) {
				var err error
				switch d.Val() {
				case "pkcs12_file":
					err = oneArg(d, &a.DocumentSeal.PKCS12File)
				case "password_file":
					err = oneArg(d, &a.DocumentSeal.PasswordFile)
				case "timestamp_url":
					err = oneArg(d, &a.DocumentSeal.TimestampURL)
				case "timestamp_roots_file":
					err = oneArg(d, &a.DocumentSeal.TimestampRootsFile)
				default:
					return d.Errf("unknown document_seal option %q", d.Val())
				}
				if err != nil {
					return err
				}
			}
		default:
			return d.Errf("unknown webapi option %q", d.Val())
		}
	}
	return nil
}

func oneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// parseAuth reads `webapi_auth contracts` or `webapi_auth share`.
func parseAuth(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	a := new(Auth)
	return a, a.UnmarshalCaddyfile(h.Dispenser)
}

// UnmarshalCaddyfile reads the service name.
func (h *Auth) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if err := oneArg(d, &h.Service); err != nil {
		return err
	}
	if d.NextBlock(0) {
		return d.Errf("webapi_auth takes no block")
	}
	return nil
}

// parseOpenAPI reads `webapi_openapi [<server_url>]`.
func parseOpenAPI(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	o := new(OpenAPI)
	return o, o.UnmarshalCaddyfile(h.Dispenser)
}

// parseDocs sets up webapi_docs (Docs.UnmarshalCaddyfile).
func parseDocs(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	d := new(Docs)
	return d, d.UnmarshalCaddyfile(h.Dispenser)
}

// parseHealth sets up webapi_health (Health.UnmarshalCaddyfile).
func parseHealth(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hl := new(Health)
	return hl, hl.UnmarshalCaddyfile(h.Dispenser)
}

// parseAdminPage sets up webapi_admin (AdminPage.UnmarshalCaddyfile).
func parseAdminPage(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	p := new(AdminPage)
	return p, p.UnmarshalCaddyfile(h.Dispenser)
}

// UnmarshalCaddyfile reads
//
//	webapi_admin {
//		user_header Remote-User
//	}
func (p *AdminPage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "user_header":
			if !d.NextArg() {
				return d.ArgErr()
			}
			p.UserHeader = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("webapi_admin: unknown option %q", d.Val())
		}
	}
	return nil
}

// noArgs parses a directive that takes neither arguments nor a block.
func noArgs(mk func() caddyhttp.MiddlewareHandler) httpcaddyfile.UnmarshalHandlerFunc {
	return func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		h.Next()
		if h.NextArg() || h.NextBlock(0) {
			return nil, h.Errf("%s takes no arguments", h.Val())
		}
		return mk(), nil
	}
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Auth)(nil)
	_ caddyfile.Unmarshaler = (*AdminPage)(nil)
)
