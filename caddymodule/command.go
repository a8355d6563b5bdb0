package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "webapi",
		Usage: "keys|consumers|plans|templates|webhooks|migrate|openapi|seal|host <command> [flags]",
		Short: "Manages keygate API keys, consumers, plans, contract templates and webhooks; moves data to PostgreSQL; prints the OpenAPI documents",
		Long: `
Manages keygate API keys, consumers, plans, contract templates and
webhook subscriptions through the admin endpoint of a running gateway
(--address, default localhost:2019, as caddy reload). "migrate" copies a
stopped gateway's bbolt data into PostgreSQL. "openapi" prints the
OpenAPI 3.1 document of the Web APIs (--admin: of the administration
API), without a running gateway.

"keys create" and "keys reveal" print the token alone on standard output,
so TOKEN=$(caddy webapi keys create ...) works; so do "webhooks add" and
"webhooks rotate-secret" with the secret, and "consumers create" and
"plans create" with the new id; --json prints the whole object. Errors
go to standard error with a non-zero exit status.`,
		CobraFunc: setupWebapiCommand,
	})
}

// setupWebapiCommand adds the subcommands and the --address flag.
func setupWebapiCommand(cmd *cobra.Command) {
	cmd.PersistentFlags().String("address", "", "The address of the admin endpoint (default localhost:2019)")
	cmd.AddCommand(keysCommand(), consumersCommand(), plansCommand(), templatesCommand(), webhooksCommand(), migrateCommand(), openapiCommand(), sealCommand(), hostCommand())
}

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

// limitFlags are --rate-limit and --quota, of keys, consumers and plans.
func limitFlags(c *cobra.Command) {
	f := c.Flags()
	f.StringArray("rate-limit", nil, "a rate-limit policy NAME=LIMIT/WINDOW, e.g. burst=20/1s, minute=600/1m or day=10000/1d; repeat for up to 4 ('none' removes them all)")
	f.String("quota", "", "LIMIT/PERIOD with PERIOD hour, day or month, e.g. 100000/month ('none' removes it)")
}

// rateLimitFlags reads --rate-limit values: NAME=LIMIT/WINDOW, WINDOW a
// duration of whole seconds (1s, 1m, 1h, 1d), or the one value none.
func rateLimitFlags(values []string) ([]map[string]any, error) {
	out := []map[string]any{}
	if len(values) == 1 && values[0] == "none" {
		return out, nil
	}
	for _, v := range values {
		name, rest, ok := strings.Cut(v, "=")
		limit, window, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("--rate-limit %q: want NAME=LIMIT/WINDOW, e.g. burst=20/1s", v)
		}
		n, err := strconv.ParseInt(limit, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--rate-limit %q: the limit %q is not a whole number", v, limit)
		}
		w, err := caddy.ParseDuration(window)
		if err != nil || w%time.Second != 0 {
			return nil, fmt.Errorf("--rate-limit %q: the window %q is not a duration of whole seconds (1s, 1m, 1h, 1d)", v, window)
		}
		out = append(out, map[string]any{"name": name, "limit": n, "windowSeconds": int64(w / time.Second)})
	}
	return out, nil
}

// quotaFlag reads --quota: LIMIT/PERIOD, or none (null).
func quotaFlag(v string) (any, error) {
	if v == "none" {
		return nil, nil
	}
	limit, period, ok := strings.Cut(v, "/")
	n, err := strconv.ParseInt(limit, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("--quota %q: want LIMIT/PERIOD, e.g. 100000/month", v)
	}
	return map[string]any{"limit": n, "period": period}, nil
}

// flagBody builds a JSON body from the flags the user set, so that an
// update sends only what changes.
type flagBody struct {
	c    *cobra.Command
	body map[string]any
}

func newFlagBody(c *cobra.Command) flagBody { return flagBody{c: c, body: map[string]any{}} }

// str sets field to the flag's value as given.
func (b flagBody) str(flag, field string) {
	if b.c.Flags().Changed(flag) {
		b.body[field], _ = b.c.Flags().GetString(flag)
	}
}

// list sets field to the flag's comma-separated values ('none': []).
func (b flagBody) list(flag, field string) {
	if b.c.Flags().Changed(flag) {
		v, _ := b.c.Flags().GetString(flag)
		b.body[field] = splitList(v)
	}
}

// nullable sets field to the flag's value, null for 'none' or "".
func (b flagBody) nullable(flag, field string) {
	if b.c.Flags().Changed(flag) {
		v, _ := b.c.Flags().GetString(flag)
		if v == "none" || v == "" {
			b.body[field] = nil
		} else {
			b.body[field] = v
		}
	}
}

// limits sets rateLimits and quota from --rate-limit and --quota.
func (b flagBody) limits() error {
	f := b.c.Flags()
	if f.Changed("rate-limit") {
		v, _ := f.GetStringArray("rate-limit")
		policies, err := rateLimitFlags(v)
		if err != nil {
			return err
		}
		b.body["rateLimits"] = policies
	}
	if f.Changed("quota") {
		v, _ := f.GetString("quota")
		q, err := quotaFlag(v)
		if err != nil {
			return err
		}
		b.body["quota"] = q
	}
	return nil
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

func splitList(s string) []string {
	out := []string{}
	if s == "none" {
		return out
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
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
				grants, err := keystore.ParsePrivilegesMap(raw)
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
		fmt.Fprintf(out, "  line %d: plan %s (%s), taken by %d %s\n", p.Line, p.Name, state, p.Consumers, plural(p.Consumers, "consumer", "consumers"))
	}
	for _, ic := range report.Consumers {
		if ic.Note != "" {
			fmt.Fprintf(out, "  line %d: consumer %s: %s\n", ic.Line, ic.Name, ic.Note)
		}
	}
}

// readInput reads the file at path, or stdin for -.
func readInput(c *cobra.Command, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(c.InOrStdin(), maxImportBody+1))
	}
	return os.ReadFile(path)
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
		Use:   "list [--service S] [--consumer ID] [--json]",
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

// usageCommand is `keys usage ID` and `consumers usage ID`: GET
// /webapi/{collection}/{id}/usage, the requests (what: "a key's
// requests") over time as a table or JSON.
func usageCommand(collection, what string) *cobra.Command {
	usage := &cobra.Command{
		Use:   "usage ID [--resolution hour|day] [--from T] [--to T] [--json]",
		Short: "Prints " + what + " over time: let through, and refused by reason",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			q := url.Values{}
			for _, name := range []string{"resolution", "from", "to"} {
				v, _ := c.Flags().GetString(name)
				if name != "resolution" {
					var err error
					if v, err = usageBound(name, v); err != nil {
						return err
					}
				}
				if v != "" {
					q.Set(name, v)
				}
			}
			uri := "/webapi/" + collection + "/" + url.PathEscape(args[0]) + "/usage"
			if len(q) > 0 {
				uri += "?" + q.Encode()
			}
			var series keystore.UsageSeries
			if err := adminCall(c, http.MethodGet, uri, nil, &series); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, series)
			}
			return printUsage(c, series)
		},
	}
	usage.Flags().String("resolution", "", "hour (the default: the last 48 hours) or day (the last 30 days)")
	usage.Flags().String("from", "", "start: a date (2026-11-27: from 00:00 UTC) or an RFC 3339 time, within the last 90 days")
	usage.Flags().String("to", "", "end: a date (2026-11-27: that whole day included, to 00:00 UTC the day after) or an RFC 3339 time (default now)")
	usage.Flags().Bool("json", false, "print JSON")
	return usage
}

// usageBound is the admin API's form of --from or --to (flag): an RFC 3339
// time as given, or a date alone as 00:00 UTC of that day, for --to of the
// day after, so that a date reads as the whole day in both bounds.
func usageBound(flag, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if day, err := time.Parse(time.DateOnly, v); err == nil {
		if flag == "to" {
			day = day.AddDate(0, 0, 1)
		}
		return day.Format(time.RFC3339), nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		return "", fmt.Errorf("--%s %q: want a date (2026-11-27) or an RFC 3339 time (2026-11-27T12:00:00Z)", flag, v)
	}
	return v, nil
}

// printUsage prints a usage series as a table: one line per hour or day
// with requests, let through, and refused by reason.
func printUsage(c *cobra.Command, s keystore.UsageSeries) error {
	tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START	OK	REFUSED	BY REASON")
	var ok, refused uint64
	for _, b := range s.Buckets {
		n := uint64(0)
		reasons := make([]string, 0, len(b.Refused))
		for _, r := range slices.Sorted(maps.Keys(b.Refused)) {
			n += b.Refused[r]
			reasons = append(reasons, fmt.Sprintf("%s=%d", r, b.Refused[r]))
		}
		ok, refused = ok+b.OK, refused+n
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", b.Start.Format(time.RFC3339), b.OK, n, orDash(strings.Join(reasons, " ")))
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\n", ok, refused)
	return tw.Flush()
}

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

func readBodyFile(c *cobra.Command, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(c.InOrStdin())
	}
	return os.ReadFile(name)
}

func asJSON(c *cobra.Command) bool {
	v, _ := c.Flags().GetBool("json")
	return v
}

// sealCommand is `caddy webapi seal show`: the certificate that seals
// completed contracts' documents.
func sealCommand() *cobra.Command {
	seal := &cobra.Command{Use: "seal", Short: "Shows the document seal certificate"}
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "Prints the seal certificate's SHA-256 fingerprint, subject and validity",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var info sealInfo
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

// hostCommand is `caddy webapi host check`: the issue tracker called
// with the configured account.
func hostCommand() *cobra.Command {
	h := &cobra.Command{Use: "host", Short: "Checks the issue tracker the APIs stand on"}
	check := &cobra.Command{
		Use:   "check [--json]",
		Short: "Calls the issue tracker with keygate's account and prints who it is and which projects it sees, or why not",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var info hostCheck
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

func printJSON(c *cobra.Command, v any) error {
	enc := json.NewEncoder(c.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// showCommand is `show ID [--json]`: GET path(id), printed by print.
func showCommand[T any](short string, path func(id string) string, print func(c *cobra.Command, v T) error) *cobra.Command {
	show := &cobra.Command{
		Use:   "show ID [--json]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var v T
			if err := adminCall(c, http.MethodGet, path(args[0]), nil, &v); err != nil {
				return err
			}
			return print(c, v)
		},
	}
	show.Flags().Bool("json", false, "print JSON")
	return show
}

// deleteCommand is `VERB ID` (delete or remove): DELETE path(id), then
// "NOUN ID VERBd" on standard error.
func deleteCommand(verb, noun, short string, path func(id string) string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := adminCall(c, http.MethodDelete, path(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "%s %s %sd\n", noun, args[0], verb)
			return nil
		},
	}
}

// printKeyOr prints k as JSON with --json, else line (the token) when
// set, else k as readable lines.
func printKeyOr(c *cobra.Command, k keystore.Key, line string) error {
	return printObjectOr(c, k, line, func() [][2]string {
		return [][2]string{
			{"id", k.ID}, {"service", string(k.Service)}, {"name", k.Name}, {"owner", k.Owner},
			{"description", k.Description}, {"privileges", joinPrivs(k.Privileges)},
			{"not valid before", timeOrDash(k.NotValidBefore)}, {"not valid after", timeOrDash(k.NotValidAfter)},
			{"allowed ips", orDash(strings.Join(k.AllowedIPs, ","))}, {"admin projects", orDash(strings.Join(k.AdminProjects, ","))},
			{"token prefix", k.TokenPrefix}, {"created", k.CreationTime.Format(time.RFC3339)},
			{"modified", k.LastModificationTime.Format(time.RFC3339)}, {"last used", timeOrDash(k.LastUsageTime)},
			{"uses", fmt.Sprint(k.UsageCount)}, {"enabled", fmt.Sprint(k.Enabled)},
			{"previous token until", timeOrDash(k.PreviousTokenExpiry)},
			{"rate limits", rateLimitsText(k.RateLimits)}, {"quota", quotaText(k.Quota, k.QuotaUsed, k.QuotaResetsAt)},
			{"consumer", scopeRef(c, "consumers", k.ConsumerID)}, {"plan", scopeRef(c, "plans", k.PlanID)},
		}
	})
}

// printObjectOr prints v as JSON with --json, else line when set (a
// token, secret or id alone, for scripts), else rows as "name: value"
// lines.
func printObjectOr(c *cobra.Command, v any, line string, rows func() [][2]string) error {
	if asJSON(c) {
		return printJSON(c, v)
	}
	if line != "" {
		fmt.Fprintln(c.OutOrStdout(), line)
		return nil
	}
	tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
	for _, r := range rows() {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// scopeRef is a key's or consumer's consumer or plan (collection
// "consumers" or "plans"): its id with its name, the id alone when the
// gateway has none by it, "-" for nil.
func scopeRef(c *cobra.Command, collection string, id *string) string {
	if id == nil {
		return "-"
	}
	var named struct {
		Name string `json:"name"`
	}
	if adminCall(c, http.MethodGet, "/webapi/"+collection+"/"+url.PathEscape(*id), nil, &named) != nil || named.Name == "" {
		return *id
	}
	return fmt.Sprintf("%s (%s)", *id, named.Name)
}

// rateLimitsText is a key's policies as --rate-limit takes them.
func rateLimitsText(list []keystore.RateLimit) string {
	out := make([]string, len(list))
	for i, p := range list {
		w := fmt.Sprintf("%ds", p.WindowSeconds)
		switch {
		case p.WindowSeconds%86400 == 0:
			w = fmt.Sprintf("%dd", p.WindowSeconds/86400)
		case p.WindowSeconds%3600 == 0:
			w = fmt.Sprintf("%dh", p.WindowSeconds/3600)
		case p.WindowSeconds%60 == 0:
			w = fmt.Sprintf("%dm", p.WindowSeconds/60)
		}
		out[i] = fmt.Sprintf("%s=%d/%s", p.Name, p.Limit, w)
	}
	return orDash(strings.Join(out, " "))
}

// quotaText is a quota as --quota takes it, with what is used of it and
// when it resets where the gateway says (a key's and a consumer's: of
// the quota of its own, or else of its plan's).
func quotaText(q *keystore.Quota, used *int64, resets *time.Time) string {
	s := "-"
	if q != nil {
		s = fmt.Sprintf("%d/%s", q.Limit, q.Period)
	}
	if used != nil && resets != nil {
		if q == nil {
			s = "the plan's"
		}
		s += fmt.Sprintf(", %d used, resets %s", *used, resets.Format(time.RFC3339))
	}
	return s
}

func joinPrivs(ps []keystore.Privilege) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// adminCall sends a JSON request to the admin endpoint and decodes the
// reply into out; a problem reply becomes an error listing its fields.
func adminCall(c *cobra.Command, method, uri string, body, out any) error {
	addr, _ := c.Flags().GetString("address")
	if addr == "" {
		addr = caddy.DefaultAdminListen
	}
	parsed, err := caddy.ParseNetworkAddress(addr)
	if err != nil {
		return fmt.Errorf("invalid admin address %s: %v", addr, err)
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	origin := "http://" + parsed.JoinHostPort(0)
	if parsed.IsUnixNetwork() {
		origin = "http://127.0.0.1"
	}
	req, err := http.NewRequest(method, origin+uri, rd)
	if err != nil {
		return err
	}
	if !parsed.IsUnixNetwork() {
		req.Header.Set("Origin", origin)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, parsed.Network, parsed.JoinHostPort(0))
		}},
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the admin endpoint at %s: %v (is the gateway running?)", addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		return replyError(resp.StatusCode, raw)
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// replyError renders a problem body as one readable error.
func replyError(status int, raw []byte) error {
	var p problem.Details
	if json.Unmarshal(raw, &p) != nil || p.Code == "" {
		return fmt.Errorf("HTTP %d: %s", status, strings.TrimSpace(string(raw)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s)", p.Detail, p.Code)
	for _, e := range p.Errors {
		fmt.Fprintf(&b, "\n  %s: %s", e.Field, e.Message)
	}
	return errors.New(b.String())
}

// webhookBody builds a subscription's JSON body from the flags the user
// set, so that an update sends only what changes.
func webhookBody(c *cobra.Command) (map[string]any, error) {
	b := newFlagBody(c)
	b.str("url", "url")
	b.str("description", "description")
	b.list("events", "events")
	b.list("owners", "owners")
	if f := c.Flags(); f.Lookup("enabled") != nil && f.Changed("enabled") {
		v, _ := f.GetString("enabled")
		switch v {
		case "true":
			b.body["enabled"] = true
		case "false":
			b.body["enabled"] = false
		default:
			return nil, fmt.Errorf("--enabled must be true or false, not %q", v)
		}
	}
	return b.body, nil
}

// webhookFlags are the flags of webhooks add and webhooks update.
func webhookFlags(c *cobra.Command, update bool) {
	f := c.Flags()
	f.String("url", "", "the endpoint: https, or http to localhost, 127.0.0.0/8 or ::1")
	f.String("events", "", "comma-separated event types: "+strings.Join(events.Types, ","))
	f.String("owners", "", "comma-separated key owners whose contracts and shares are delivered ('none' or empty: every owner)")
	f.String("description", "", "description, at most 4000 characters")
	if update {
		f.String("enabled", "", "true or false: a disabled subscription is delivered nothing")
	}
	f.Bool("json", false, "print the whole subscription as JSON")
}

func webhooksCommand() *cobra.Command {
	wh := &cobra.Command{Use: "webhooks", Short: "Manages webhook subscriptions (Standard Webhooks)"}
	path := func(id string, rest ...string) string {
		return "/webapi/webhooks/" + url.PathEscape(id) + strings.Join(rest, "")
	}

	add := &cobra.Command{
		Use:   "add --url U --events E[,E...] [--owners O,O] [--description D]",
		Short: "Subscribes an endpoint and prints its secret",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			body, err := webhookBody(c)
			if err != nil {
				return err
			}
			var s webhook.Subscription
			if err := adminCall(c, http.MethodPost, "/webapi/webhooks", body, &s); err != nil {
				return err
			}
			return printWebhookOr(c, s, s.Secret)
		},
	}
	webhookFlags(add, false)

	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Lists webhook subscriptions, without secrets",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var ss []webhook.Subscription
			if err := adminCall(c, http.MethodGet, "/webapi/webhooks", nil, &ss); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, ss)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tENABLED\tURL\tEVENTS\tOWNERS")
			for _, s := range ss {
				fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\n", s.ID, s.Enabled, s.URL, strings.Join(s.Events, ","), orDash(strings.Join(s.Owners, ",")))
			}
			return tw.Flush()
		},
	}
	list.Flags().Bool("json", false, "print JSON")

	show := showCommand("Shows one webhook subscription, without secret", func(id string) string { return path(id) },
		func(c *cobra.Command, s webhook.Subscription) error { return printWebhookOr(c, s, "") })

	update := &cobra.Command{
		Use:   "update ID [--url U] [--events E,E] [--owners O,O] [--description D] [--enabled true|false]",
		Short: "Changes a webhook subscription",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			body, err := webhookBody(c)
			if err != nil {
				return err
			}
			var s webhook.Subscription
			if err := adminCall(c, http.MethodPatch, path(args[0]), body, &s); err != nil {
				return err
			}
			return printWebhookOr(c, s, "")
		},
	}
	webhookFlags(update, true)

	rotate := &cobra.Command{
		Use:   "rotate-secret ID [--json]",
		Short: "Gives a subscription a new secret and prints it; the old one signs too for 24 h",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var s webhook.Subscription
			if err := adminCall(c, http.MethodPost, path(args[0], "/rotate-secret"), nil, &s); err != nil {
				return err
			}
			return printWebhookOr(c, s, s.Secret)
		},
	}
	rotate.Flags().Bool("json", false, "print the whole subscription as JSON")

	test := &cobra.Command{
		Use:   "test ID",
		Short: "Queues a webhook.test event for one subscription and prints its message id",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var out struct {
				MessageID string `json:"messageId"`
			}
			if err := adminCall(c, http.MethodPost, path(args[0], "/test"), nil, &out); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), out.MessageID)
			return nil
		},
	}

	deliveries := &cobra.Command{
		Use:   "deliveries ID [--limit N] [--offset N] [--json]",
		Short: "Lists a subscription's delivery attempts, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			q := url.Values{}
			for _, name := range []string{"limit", "offset"} {
				if c.Flags().Changed(name) {
					v, _ := c.Flags().GetInt(name)
					q.Set(name, fmt.Sprint(v))
				}
			}
			uri := path(args[0], "/deliveries")
			if len(q) > 0 {
				uri += "?" + q.Encode()
			}
			var as []webhook.Attempt
			if err := adminCall(c, http.MethodGet, uri, nil, &as); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, as)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tMESSAGE\tEVENT\tATTEMPT\tSTATUS\tMS\tERROR")
			for _, a := range as {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", a.Timestamp.Format(time.RFC3339), a.MessageID, a.Event, a.Attempt,
					a.Status, a.DurationMs, orDash(a.Error))
			}
			return tw.Flush()
		},
	}
	deliveries.Flags().Int("limit", 0, "at most this many attempts (1 to 1000; default 100)")
	deliveries.Flags().Int("offset", 0, "skip this many of the newest attempts")
	deliveries.Flags().Bool("json", false, "print JSON")

	remove := deleteCommand("remove", "webhook", "Deletes a webhook subscription with its pending deliveries and log", func(id string) string { return path(id) })

	wh.AddCommand(add, list, show, update, rotate, test, deliveries, remove)
	return wh
}

// printWebhookOr prints s as JSON with --json, else line (the secret) when
// set, else s as readable lines.
func printWebhookOr(c *cobra.Command, s webhook.Subscription, line string) error {
	return printObjectOr(c, s, line, func() [][2]string {
		return [][2]string{
			{"id", s.ID}, {"url", s.URL}, {"events", strings.Join(s.Events, ",")}, {"owners", orDash(strings.Join(s.Owners, ","))},
			{"description", orDash(s.Description)}, {"enabled", fmt.Sprint(s.Enabled)},
			{"created", s.CreationTime.Format(time.RFC3339)}, {"modified", s.LastModificationTime.Format(time.RFC3339)},
			{"previous secret signs until", timeOrDash(s.PreviousSecretExpiry)},
		}
	})
}

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
