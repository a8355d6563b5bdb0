package command

// The `caddy webapi keys` command tree: create, import, list, show,
// update, reveal, roll, enable, disable, delete and usage of API keys,
// through the admin API.

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/keyimport"
)

// keyFlags are the flags of keys create and keys update.
func keyFlags(c *cobra.Command, create bool) {
	f := c.Flags()
	if create {
		f.String("service", "", "contracts or share (required)")
		f.String("owner", "", "host platform user id of the key's owner (required)")
	}
	f.String("name", "", "name, 1 to 40 characters")
	f.String("privileges", "", "comma-separated: contracts get,search,create,archive,delete; share get,list,create,delete")
	f.String("description", "", "description, at most 4000 characters")
	f.String("not-valid-before", "", "RFC 3339 time the key starts to work ('none' clears)")
	f.String("not-valid-after", "", "RFC 3339 time the key stops working ('none' clears)")
	f.String("allowed-ips", "", "comma-separated addresses and CIDR ranges ('none': any address)")
	f.String("admin-projects", "", "share keys: comma-separated project ids with admin rights, * for all")
	f.String("consumer", "", "id of the consumer that holds the key, whose limits bind all its keys together ('none' clears)")
	f.String("plan", "", "id of a plan whose rate limits and quota the key counts besides its own ('none' clears)")
	limitFlags(c)
	f.Bool("json", false, "print the whole key as JSON")
}

// keyBody is a key's JSON body from the flags the user set.
func keyBody(c *cobra.Command) (map[string]any, error) {
	b := newFlagBody(c)
	b.str("service", "service")
	b.str("owner", "owner")
	b.str("name", "name")
	b.str("description", "description")
	b.list("privileges", "privileges")
	b.list("allowed-ips", "allowedIps")
	b.list("admin-projects", "adminProjects")
	b.nullable("not-valid-before", "notValidBefore")
	b.nullable("not-valid-after", "notValidAfter")
	b.nullable("consumer", "consumerId")
	b.nullable("plan", "planId")
	return b.body, b.limits()
}

// importCommand is `keys import FILE`: POST /webapi/keys/import with the
// file's text (- for stdin).
func importCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE [--format jsonl|kong] [--service S] [--privileges-map F] [--dry-run] [--json]",
		Short: "Imports keys with the tokens they have (JSON Lines, or a Kong decK dump with its consumers and consumer groups), all or none",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			data, err := readInput(c, args[0])
			if err != nil {
				return err
			}
			format, _ := c.Flags().GetString("format")
			service, _ := c.Flags().GetString("service")
			dry, _ := c.Flags().GetBool("dry-run")
			body := map[string]any{"format": format, "data": string(data), "service": service, "dryRun": dry}
			if f, _ := c.Flags().GetString("privileges-map"); f != "" {
				raw, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				// Read here, checked by the gateway with the file, so that
				// a bad group comes in the one reply with the rest.
				grants, err := keyimport.ParsePrivilegesMap(raw)
				if err != nil {
					return fmt.Errorf("--privileges-map %s: %v", f, err)
				}
				body["privilegesMap"] = grants
			}
			var report keystore.ImportReport
			if err := adminCall(c, http.MethodPost, "/webapi/keys/import", body, &report); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, report)
			}
			verb := "imported"
			if report.DryRun {
				verb = "would import (dry run, nothing stored)"
			}
			fmt.Fprintf(c.OutOrStdout(), "%s %d %s: %d keep the token they came with, %d get a new one\n",
				verb, report.Imported, plural(report.Imported, "key", "keys"), report.Kept, report.Imported-report.Kept)
			printImportScopes(c, &report)
			if !report.DryRun {
				for _, k := range report.Keys {
					if k.NewToken {
						fmt.Fprintf(c.OutOrStdout(), "  line %d: new token, shown by keys reveal %s\n", k.Line, k.ID)
					}
				}
			}
			for _, s := range report.Skipped {
				fmt.Fprintf(c.OutOrStdout(), "  line %d: consumer %s has %s: not imported\n", s.Line, s.Consumer, s.Reason)
			}
			return nil
		},
	}
	cmd.Flags().String("format", "jsonl", "jsonl (a key's fields and token a line) or kong (a decK dump)")
	cmd.Flags().String("service", "", "jsonl: the service of lines that name none; kong: the one service the groups may map to")
	cmd.Flags().String("privileges-map", "", "kong: a JSON or YAML file mapping ACL groups to {service, privileges}")
	cmd.Flags().Bool("dry-run", false, "check everything, store nothing")
	cmd.Flags().Bool("json", false, "print the report as JSON")
	return cmd
}

// printImportScopes prints the consumers and plans of a decK import: how
// many are new, each plan, and what the import made of a consumer that
// the dump did not say outright (--json has each consumer).
func printImportScopes(c *cobra.Command, report *keystore.ImportReport) {
	out := c.OutOrStdout()
	if n := len(report.Consumers); n > 0 {
		existing := 0
		for _, ic := range report.Consumers {
			if ic.Existing {
				existing++
			}
		}
		fmt.Fprintf(out, "  %d %s: %d new, %d existing\n", n, plural(n, "consumer", "consumers"), n-existing, existing)
	}
	for _, p := range report.Plans {
		state := "new"
		if p.Existing {
			state = "existing"
		}
		fmt.Fprintf(out, "  line %d: plan %s (%s), taken by %d %s\n", p.Line, keystore.ShownName(p.Name, p.Line), state, p.Consumers, plural(p.Consumers, "consumer", "consumers"))
	}
	for _, ic := range report.Consumers {
		if ic.Note != "" {
			fmt.Fprintf(out, "  line %d: consumer %s: %s\n", ic.Line, keystore.ShownName(ic.Name, ic.Line), ic.Note)
		}
	}
}

// keyPath is key id's path on the admin endpoint.
func keyPath(id string) string { return "/webapi/keys/" + url.PathEscape(id) }

func keysCommand() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "Manages API keys"}

	create := &cobra.Command{
		Use:   "create --service S --name N --owner O --privileges P[,P...] [flags]",
		Short: "Creates a key and prints its token",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			body, err := keyBody(c)
			if err != nil {
				return err
			}
			var k keystore.Key
			if err := adminCall(c, http.MethodPost, "/webapi/keys", body, &k); err != nil {
				return err
			}
			return printKeyOr(c, k, k.Token)
		},
	}
	keyFlags(create, true)

	list := &cobra.Command{
		Use:   "list [--service S] [--consumer ID] [--plan ID] [--json]",
		Short: "Lists keys, without tokens",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			q := url.Values{}
			if svc, _ := c.Flags().GetString("service"); svc != "" {
				q.Set("service", svc)
			}
			if consumer, _ := c.Flags().GetString("consumer"); consumer != "" {
				q.Set("consumerId", consumer)
			}
			if plan, _ := c.Flags().GetString("plan"); plan != "" {
				q.Set("planId", plan)
			}
			uri := "/webapi/keys"
			if len(q) > 0 {
				uri += "?" + q.Encode()
			}
			var ks []keystore.Key
			if err := adminCall(c, http.MethodGet, uri, nil, &ks); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, ks)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSERVICE\tNAME\tOWNER\tPRIVILEGES\tENABLED\tUSES\tLAST USED")
			for _, k := range ks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%d\t%s\n", k.ID, k.Service, k.Name, k.Owner, joinPrivs(k.Privileges), k.Enabled, k.UsageCount, timeOrDash(k.LastUsageTime))
			}
			return tw.Flush()
		},
	}
	list.Flags().String("service", "", "only keys of this service")
	list.Flags().String("consumer", "", "only keys of this consumer")
	list.Flags().String("plan", "", "only keys that take this plan themselves (not through their consumer)")
	list.Flags().Bool("json", false, "print JSON")

	show := showCommand("Shows one key, without token", keyPath, func(c *cobra.Command, k keystore.Key) error { return printKeyOr(c, k, "") })

	update := &cobra.Command{
		Use:   "update ID [flags]",
		Short: "Changes a key's editable fields",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			body, err := keyBody(c)
			if err != nil {
				return err
			}
			var k keystore.Key
			if err := adminCall(c, http.MethodPatch, keyPath(args[0]), body, &k); err != nil {
				return err
			}
			return printKeyOr(c, k, "")
		},
	}
	keyFlags(update, false)

	reveal := &cobra.Command{
		Use:   "reveal ID",
		Short: "Prints a key's token",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var out struct {
				Token string `json:"token"`
			}
			if err := adminCall(c, http.MethodPost, keyPath(args[0])+"/reveal", nil, &out); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), out.Token)
			return nil
		},
	}

	del := deleteCommand("delete", "key", "Deletes a key; it stops working at once", keyPath)

	// disable and enable switch a key off and on: PATCH enabled.
	switchKey := func(use, short string, enabled bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				var k keystore.Key
				if err := adminCall(c, http.MethodPatch, keyPath(args[0]), map[string]any{"enabled": enabled}, &k); err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "key %s %sd\n", args[0], use)
				return nil
			},
		}
	}
	roll := &cobra.Command{
		Use:   "roll ID [--grace 24h] [--json]",
		Short: "Gives a key a new token and prints it; the previous one works for the grace period",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			v, _ := c.Flags().GetString("grace")
			grace, err := caddy.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("--grace %q: want a duration such as 24h, 90m or 7d", v)
			}
			if grace%time.Second != 0 {
				return fmt.Errorf("--grace %s: whole seconds only", v)
			}
			if grace < 0 || grace > keystore.MaxRollGrace {
				return fmt.Errorf("--grace %s: from 0 to 30d", v)
			}
			var k keystore.Key
			body := map[string]any{"graceSeconds": int64(grace / time.Second)}
			if err := adminCall(c, http.MethodPost, keyPath(args[0])+"/roll", body, &k); err != nil {
				return err
			}
			return printKeyOr(c, k, k.Token)
		},
	}
	roll.Flags().String("grace", "24h", "how long the previous token goes on working (0 to 30d)")
	roll.Flags().Bool("json", false, "print the whole key as JSON")

	disable := switchKey("disable", "Switches a key off: refused 401 key_disabled at once, everything else kept", false)
	enable := switchKey("enable", "Switches a disabled key on again", true)

	keys.AddCommand(create, list, show, update, reveal, roll, del, disable, enable, usageCommand("keys", "a key's requests"), importCommand())
	return keys
}

// printKeyOr prints k as JSON with --json, else line (the token) when
// set, else k as readable lines.
func printKeyOr(c *cobra.Command, k keystore.Key, line string) error {
	return printObjectOr(c, k, line, func() [][2]string {
		plan, p := planRef(c, k.PlanID)
		return [][2]string{
			{"id", k.ID}, {"service", string(k.Service)}, {"name", k.Name}, {"owner", k.Owner},
			{"description", orDash(k.Description)}, {"privileges", joinPrivs(k.Privileges)},
			{"not valid before", timeOrDash(k.NotValidBefore)}, {"not valid after", timeOrDash(k.NotValidAfter)},
			{"allowed ips", orDash(strings.Join(k.AllowedIPs, ","))}, {"admin projects", orDash(strings.Join(k.AdminProjects, ","))},
			{"token prefix", k.TokenPrefix}, {"created", k.CreationTime.Format(time.RFC3339)},
			{"modified", k.LastModificationTime.Format(time.RFC3339)}, {"last used", timeOrDash(k.LastUsageTime)},
			{"uses", fmt.Sprint(k.UsageCount)}, {"enabled", fmt.Sprint(k.Enabled)},
			{"previous token until", timeOrDash(k.PreviousTokenExpiry)},
			{"rate limits", rateLimitsText(k.RateLimits)}, {"quota", quotaText(k.Quota, p, k.QuotaUsed, k.QuotaResetsAt)},
			{"consumer", consumerRef(c, k.ConsumerID)}, {"plan", plan},
		}
	})
}

func joinPrivs(ps []access.Privilege) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}
