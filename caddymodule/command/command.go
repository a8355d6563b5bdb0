// Package command is the `caddy webapi` command line: its registration
// with Caddy and what every command tree shares (the admin API call,
// flags of limits, printing). Each tree is a file of its own,
// command_*.go.
//
// The commands speak to a running gateway through its admin API over
// HTTP, and decode its replies into the domain packages' types; none of
// them reaches into the gateway's code, so the package imports nothing
// of caddymodule. caddymodule imports it, so that building the plugin
// into Caddy (cmd/caddy, xcaddy) registers the command.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/traffic"
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
	refuseUnknown(cmd)
}

// refuseUnknown makes each command that only groups others (webapi, keys,
// consumers, ...) refuse an unknown subcommand with an error and a
// non-zero exit, where cobra would print the help and exit 0: a script's
// typo must not pass for success. Without arguments it prints the help.
func refuseUnknown(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.NoArgs
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	for _, sub := range c.Commands() {
		refuseUnknown(sub)
	}
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
		if v == "none" {
			return nil, errors.New("--rate-limit none removes every policy: give it alone, not beside policies")
		}
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

// readInput reads the file at path, or stdin for -.
func readInput(c *cobra.Command, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(c.InOrStdin(), keystore.MaxImportBody+1))
	}
	return os.ReadFile(path)
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
		// A description stored before control characters were refused
		// is shown, not let loose on the terminal. Its further lines
		// stand in the value's column, under its first: at the margin
		// they would read as rows of their own ("quota: unlimited").
		for i, line := range strings.Split(text.EscapeProse(r[1]), "\n") {
			name := ""
			if i == 0 {
				name = r[0] + ":"
			}
			line = strings.ReplaceAll(strings.TrimSuffix(line, "\r"), "\t", " ") // a tab would start a column
			fmt.Fprintf(tw, "%s\t%s\n", name, line)
		}
	}
	return tw.Flush()
}

// consumerRef is a key's consumer: its id with its name, the id alone
// when the gateway has none by it, "-" for nil.
func consumerRef(c *cobra.Command, id *string) string {
	if id == nil {
		return "-"
	}
	var named struct {
		Name string `json:"name"`
	}
	if adminCall(c, http.MethodGet, "/webapi/consumers/"+url.PathEscape(*id), nil, &named) != nil || named.Name == "" {
		return *id
	}
	return fmt.Sprintf("%s (%s)", *id, named.Name)
}

// rateLimitsText is a key's policies as --rate-limit takes them.
func rateLimitsText(list []traffic.RateLimit) string {
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
// their own quota, or of their plan's when they have none of their own;
// plan nil when unknown or none).
func quotaText(q *traffic.Quota, plan *keystore.Plan, used *int64, resets *time.Time) string {
	s := "-"
	switch {
	case q != nil:
		s = fmt.Sprintf("%d/%s", q.Limit, q.Period)
	case plan != nil && plan.Quota != nil:
		s = fmt.Sprintf("the plan's %d/%s", plan.Quota.Limit, plan.Quota.Period)
	}
	if used != nil && resets != nil {
		s += fmt.Sprintf(", %d used, resets %s", *used, resets.Format(time.RFC3339))
	}
	return s
}

// planRef is a key's or consumer's plan: its id with its name and
// limits, the id alone when the gateway has none by it, "-" for nil; and
// the plan, nil when unknown.
func planRef(c *cobra.Command, id *string) (string, *keystore.Plan) {
	if id == nil {
		return "-", nil
	}
	var p keystore.Plan
	if adminCall(c, http.MethodGet, "/webapi/plans/"+url.PathEscape(*id), nil, &p) != nil || p.Name == "" {
		return *id, nil
	}
	return fmt.Sprintf("%s (%s: %s, quota %s)", *id, p.Name, rateLimitsText(p.RateLimits), quotaText(p.Quota, nil, nil, nil)), &p
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

// plural picks the word for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
