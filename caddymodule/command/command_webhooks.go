package command

// The `caddy webapi webhooks` command tree.

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/webhook"
)

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
