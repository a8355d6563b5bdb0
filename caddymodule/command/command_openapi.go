package command

// `caddy webapi openapi`.

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/openapi"
)

// openapiCommand prints an OpenAPI document: the Web APIs', or with
// --admin the administration API's, as indented JSON or, with --yaml, as
// its YAML source. It needs no running gateway.
func openapiCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "openapi [--admin] [--yaml] [--server URL]",
		Short: "Prints the OpenAPI 3.1 document of the Web APIs (--admin: of the administration API)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			admin, _ := c.Flags().GetBool("admin")
			asYAML, _ := c.Flags().GetBool("yaml")
			server, _ := c.Flags().GetString("server")
			if admin && server == "" && !asYAML {
				if addr, _ := c.Flags().GetString("address"); addr != "" {
					server = "http://" + addr
				}
			}
			out := c.OutOrStdout()
			if asYAML {
				if server != "" {
					return errors.New("--server works on the JSON form only; edit servers in the YAML by hand")
				}
				src := openapi.WebAPIYAML()
				if admin {
					src = openapi.AdminYAML()
				}
				_, err := out.Write(src)
				return err
			}
			render := openapi.WebAPIFor
			if admin {
				render = openapi.AdminFor
			}
			doc, err := render(server)
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := json.Indent(&buf, doc, "", "  "); err != nil {
				return err
			}
			buf.WriteByte('\n')
			_, err = buf.WriteTo(out)
			return err
		},
	}
	c.Flags().Bool("admin", false, "the administration API's document instead")
	c.Flags().Bool("yaml", false, "print the YAML source instead of JSON")
	c.Flags().String("server", "", "the server URL to name (default: the Web APIs' \"/\", the admin API's --address or http://localhost:2019)")
	return c
}
