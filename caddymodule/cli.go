package caddymodule

// `caddy webapi`, the command line, is package command: it calls the
// admin API a running gateway serves and imports nothing of this package.
// Importing it here registers it wherever this plugin is built in
// (cmd/caddy, an xcaddy build).
import _ "github.com/keygate/keygate/caddymodule/command"
