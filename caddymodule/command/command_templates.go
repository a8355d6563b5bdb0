package command

// The `caddy webapi templates` command tree.

import (
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/upstreams/contracts"
)

func templatesCommand() *cobra.Command {
	templates := &cobra.Command{Use: "templates", Short: "Manages contract templates"}

	add := &cobra.Command{
		Use:   "add --id ID --collection C --title T [--body-file F]",
		Short: "Registers a contract template",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f := c.Flags()
			var t contracts.Template
			t.ID, _ = f.GetString("id")
			t.CollectionID, _ = f.GetString("collection")
			t.Title, _ = f.GetString("title")
			if file, _ := f.GetString("body-file"); file != "" {
				b, err := readBodyFile(c, file)
				if err != nil {
					return err
				}
				t.Body = string(b)
			}
			if err := adminCall(c, http.MethodPost, "/webapi/templates", t, &t); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "template %s added\n", t.ID)
			return nil
		},
	}
	add.Flags().String("id", "", "template id: the page or issue id (required)")
	add.Flags().String("collection", "", "collection id: the space or project holding it (required)")
	add.Flags().String("title", "", "title (required)")
	add.Flags().String("body-file", "", "file holding the template body ('-' for standard input)")

	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Lists contract templates",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var ts []contracts.Template
			if err := adminCall(c, http.MethodGet, "/webapi/templates", nil, &ts); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, ts)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCOLLECTION\tTITLE\tBODY")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d bytes\n", t.ID, t.CollectionID, t.Title, len(t.Body))
			}
			return tw.Flush()
		},
	}
	list.Flags().Bool("json", false, "print JSON")

	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Removes a contract template; contracts made from it keep their copy",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := adminCall(c, http.MethodDelete, "/webapi/templates/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "template %s removed\n", args[0])
			return nil
		},
	}

	templates.AddCommand(add, list, remove)
	return templates
}
