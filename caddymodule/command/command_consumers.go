package command

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/keystore"
)

// The `caddy webapi consumers` and `caddy webapi plans` command trees:
// the admin API's /webapi/consumers and /webapi/plans (docs/administrators.md,
// Consumers and plans), with the flags and output of the keys commands.

// scopeKind is what tells consumers and plans apart in scopeCommand.
type scopeKind[T any] struct {
	collection string // the admin API's path segment: consumers or plans
	noun       string // consumer or plan
	// createUse and updateUse are the create and update commands' Use
	// lines after the verb.
	createUse, updateUse string
	// flags adds the create and update flags beyond --name,
	// --description, --rate-limit, --quota and --json, and body what
	// they set to the request body; nil for none.
	flags func(c *cobra.Command)
	body  func(b flagBody)
	id    func(v T) string
	// header and rows make the list's table, rows a tab-separated line
	// per item.
	header string
	rows   func(c *cobra.Command, items []T) []string
	// fields are one item's "name: value" lines.
	fields func(c *cobra.Command, v T) [][2]string
}

// scopeCommand is one tree: create (printing the new id alone), list,
// show, update and delete.
func scopeCommand[T any](k scopeKind[T], short string) *cobra.Command {
	root := &cobra.Command{Use: k.collection, Short: short}
	base := "/webapi/" + k.collection
	path := func(id string) string { return base + "/" + url.PathEscape(id) }
	printItem := func(c *cobra.Command, v T, line string) error {
		return printObjectOr(c, v, line, func() [][2]string { return k.fields(c, v) })
	}
	// write is create (id empty) or update: the body of the flags set,
	// the reply printed.
	write := func(c *cobra.Command, id string) error {
		b := newFlagBody(c)
		b.str("name", "name")
		b.str("description", "description")
		if k.body != nil {
			k.body(b)
		}
		if err := b.limits(); err != nil {
			return err
		}
		var v T
		if id == "" {
			if err := adminCall(c, http.MethodPost, base, b.body, &v); err != nil {
				return err
			}
			return printItem(c, v, k.id(v))
		}
		if err := adminCall(c, http.MethodPatch, path(id), b.body, &v); err != nil {
			return err
		}
		return printItem(c, v, "")
	}
	flags := func(c *cobra.Command) *cobra.Command {
		c.Flags().String("name", "", "name, 1 to 100 characters")
		c.Flags().String("description", "", "description, at most 4000 characters")
		if k.flags != nil {
			k.flags(c)
		}
		limitFlags(c)
		c.Flags().Bool("json", false, "print the whole "+k.noun+" as JSON")
		return c
	}

	create := flags(&cobra.Command{
		Use:   "create " + k.createUse,
		Short: "Creates a " + k.noun + " and prints its id",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return write(c, "") },
	})
	update := flags(&cobra.Command{
		Use:   "update ID " + k.updateUse,
		Short: "Changes a " + k.noun + "; every key it binds is held to the change at once",
		Args:  cobra.ExactArgs(1),
		RunE:  func(c *cobra.Command, args []string) error { return write(c, args[0]) },
	})

	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Lists " + k.collection,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var items []T
			if err := adminCall(c, http.MethodGet, base, nil, &items); err != nil {
				return err
			}
			if asJSON(c) {
				return printJSON(c, items)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, k.header)
			for _, r := range k.rows(c, items) {
				fmt.Fprintln(tw, r)
			}
			return tw.Flush()
		},
	}
	list.Flags().Bool("json", false, "print JSON")

	show := showCommand("Shows one "+k.noun, path, func(c *cobra.Command, v T) error { return printItem(c, v, "") })
	del := deleteCommand("delete", k.noun, "Deletes a "+k.noun, path)

	root.AddCommand(create, list, show, update, del)
	return root
}

func consumersCommand() *cobra.Command {
	const use = "[--name N] [--external-id E|none] [--description D] [--plan ID|none] [--rate-limit NAME=LIMIT/WINDOW]... [--quota LIMIT/PERIOD|none] [--json]"
	cmd := scopeCommand(scopeKind[keystore.Consumer]{
		collection: "consumers",
		noun:       "consumer",
		createUse:  "--name N " + strings.TrimPrefix(use, "[--name N] "),
		updateUse:  use,
		flags: func(c *cobra.Command) {
			c.Flags().String("external-id", "", "the client's id elsewhere (a Kong consumer's custom_id), unique among consumers ('none' clears)")
			c.Flags().String("plan", "", "id of a plan whose rate limits and quota bind the consumer's keys together besides its own ('none' clears)")
		},
		body: func(b flagBody) {
			b.nullable("external-id", "externalId")
			b.nullable("plan", "planId")
		},
		id:     func(v keystore.Consumer) string { return v.ID },
		header: "ID\tNAME\tEXTERNAL ID\tPLAN\tKEYS\tRATE LIMITS\tQUOTA",
		rows: func(c *cobra.Command, cs []keystore.Consumer) []string {
			plans := plansByID(c)
			out := make([]string, len(cs))
			for i, v := range cs {
				var p *keystore.Plan
				plan := "-"
				if v.PlanID != nil {
					if p = plans[*v.PlanID]; p != nil {
						plan = p.Name
					} else {
						plan = *v.PlanID
					}
				}
				out[i] = fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s", v.ID, v.Name, strOrDash(v.ExternalID), plan, v.KeyCount,
					rateLimitsText(v.RateLimits), quotaText(v.Quota, p, v.QuotaUsed, v.QuotaResetsAt))
			}
			return out
		},
		fields: func(c *cobra.Command, v keystore.Consumer) [][2]string {
			plan, p := planRef(c, v.PlanID)
			return [][2]string{
				{"id", v.ID}, {"name", v.Name}, {"external id", strOrDash(v.ExternalID)}, {"description", orDash(v.Description)},
				{"plan", plan}, {"rate limits", rateLimitsText(v.RateLimits)},
				{"quota", quotaText(v.Quota, p, v.QuotaUsed, v.QuotaResetsAt)}, {"keys", fmt.Sprint(v.KeyCount)},
				{"created", v.CreationTime.Format(time.RFC3339)}, {"modified", v.LastModificationTime.Format(time.RFC3339)},
			}
		},
	}, "Manages consumers: named clients whose rate limits and quota bind all their keys together")
	cmd.AddCommand(usageCommand("consumers", "the requests of all a consumer's keys together"))
	return cmd
}

func plansCommand() *cobra.Command {
	const use = "[--description D] [--rate-limit NAME=LIMIT/WINDOW]... [--quota LIMIT/PERIOD|none] [--json]"
	return scopeCommand(scopeKind[keystore.Plan]{
		collection: "plans",
		noun:       "plan",
		createUse:  "--name N " + use,
		updateUse:  "[--name N] " + use,
		id:         func(v keystore.Plan) string { return v.ID },
		header:     "ID\tNAME\tRATE LIMITS\tQUOTA",
		rows: func(_ *cobra.Command, ps []keystore.Plan) []string {
			out := make([]string, len(ps))
			for i, v := range ps {
				out[i] = fmt.Sprintf("%s\t%s\t%s\t%s", v.ID, v.Name, rateLimitsText(v.RateLimits), quotaText(v.Quota, nil, nil, nil))
			}
			return out
		},
		fields: func(_ *cobra.Command, v keystore.Plan) [][2]string {
			return [][2]string{
				{"id", v.ID}, {"name", v.Name}, {"description", orDash(v.Description)},
				{"rate limits", rateLimitsText(v.RateLimits)}, {"quota", quotaText(v.Quota, nil, nil, nil)},
				{"created", v.CreationTime.Format(time.RFC3339)}, {"modified", v.LastModificationTime.Format(time.RFC3339)},
			}
		},
	}, "Manages plans: named rate limits and quotas that keys and consumers take by id")
}

// plansByID maps every plan's id to the plan, for the consumers' table
// (its name, and its quota for a consumer that has none of its own);
// empty when the plans cannot be read (the table shows ids then).
func plansByID(c *cobra.Command) map[string]*keystore.Plan {
	var ps []keystore.Plan
	if adminCall(c, http.MethodGet, "/webapi/plans", nil, &ps) != nil {
		return nil
	}
	out := make(map[string]*keystore.Plan, len(ps))
	for i := range ps {
		out[ps[i].ID] = &ps[i]
	}
	return out
}

func strOrDash(s *string) string {
	if s == nil {
		return "-"
	}
	return orDash(*s)
}
