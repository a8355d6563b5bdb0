package command

// `caddy webapi host check`.

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/host"
)

// hostCommand is `caddy webapi host check`: the issue tracker called
// with the configured account.
func hostCommand() *cobra.Command {
	h := &cobra.Command{Use: "host", Short: "Checks the issue tracker the APIs stand on"}
	check := &cobra.Command{
		Use:   "check [--json]",
		Short: "Calls the issue tracker with keygate's account and prints who it is and which projects it sees, or why not",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var info host.Check
			if err := adminCall(c, http.MethodGet, "/webapi/host", nil, &info); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, info)
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "%s: signed in as %s (%s)\n", info.Platform, info.Account.Login, info.Account.Name)
			if info.Account.Admin {
				fmt.Fprintln(out, "warning: the account is an administrator of the tracker; keygate needs a user of its own with a role in the shared projects")
			}
			fmt.Fprintf(out, "projects it can see: %d\n", len(info.Account.Projects))
			for _, p := range info.Account.Projects {
				fmt.Fprintf(out, "  %s\t%s\t%s\n", p.ID, p.Number, p.Name)
			}
			return nil
		},
	}
	check.Flags().Bool("json", false, "print JSON")
	h.AddCommand(check)
	return h
}
