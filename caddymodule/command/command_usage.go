package command

// `usage ID` of keys and consumers: their requests over time, as the
// admin API returns them.

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/keystore"
)

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
				if v == "" && c.Flags().Changed(name) {
					// A variable that expanded to nothing, most likely: not
					// the default the flag's absence asks for.
					return fmt.Errorf("--%s is empty: give a value, or leave the flag out for its default", name)
				}
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
