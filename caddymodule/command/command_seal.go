package command

// `caddy webapi seal show`.

import (
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/docseal"
)

// sealCommand is `caddy webapi seal show`: the certificate that seals
// completed contracts' documents.
func sealCommand() *cobra.Command {
	seal := &cobra.Command{Use: "seal", Short: "Shows the document seal certificate"}
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "Prints the seal certificate's SHA-256 fingerprint, subject and validity",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var info docseal.CertificateInfo
			if err := adminCall(c, http.MethodGet, "/webapi/seal", nil, &info); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, info)
			}
			origin := "the operator's (document_seal pkcs12_file)"
			if info.SelfMade {
				origin = "made by the gateway, kept in its database"
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, r := range [][2]string{
				{"sha256", info.SHA256}, {"anchor sha256", info.AnchorSHA256}, {"subject", info.Subject}, {"issuer", info.Issuer},
				{"valid from", info.NotBefore.Format(time.RFC3339)}, {"valid until", info.NotAfter.Format(time.RFC3339)},
				{"certificate", origin}, {"timestamps", fmt.Sprint(info.Timestamped)}, {"PAdES level", string(info.Level)},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
			}
			return tw.Flush()
		},
	}
	show.Flags().Bool("json", false, "print JSON")
	seal.AddCommand(show)
	return seal
}
