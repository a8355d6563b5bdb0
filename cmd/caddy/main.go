// Command caddy is keygate's custom Caddy build: the standard modules and
// ours. Its plugins are listed in xcaddy.json too; a test keeps the two in
// step.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/keygate/keygate/caddymodule"
)

func main() {
	caddycmd.Main()
}
