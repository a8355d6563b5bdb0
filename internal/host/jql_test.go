package host

import (
	"errors"
	"reflect"
	"testing"
)

// TestParseJQL: the subset parses into clauses; anything else is an
// error naming where and what was expected, never a clause dropped.
func TestParseJQL(t *testing.T) {
	for _, tt := range []struct {
		q    string
		want *Query
		err  string // the JQLError, when it fails
	}{
		{q: `status = Open`, want: &Query{Clauses: []Clause{{"status", "=", []string{"Open"}}}}},
		{q: `project = acme AND status in ("In Progress", Open) and assignee IS EMPTY ORDER BY created DESC`,
			want: &Query{Clauses: []Clause{{"project", "=", []string{"acme"}}, {"status", "in", []string{"In Progress", "Open"}},
				{"assignee", "is empty", nil}}, OrderBy: "created", Desc: true}},
		{q: `text ~ "printer jams" AND created >= -7d AND duedate <= startOfMonth() order by priority asc`,
			want: &Query{Clauses: []Clause{{"text", "~", []string{"printer jams"}}, {"created", ">=", []string{"-7d"}},
				{"duedate", "<=", []string{"startOfMonth()"}}}, OrderBy: "priority"}},
		{q: `statusCategory = Done AND reporter is not empty AND updated >= 2026-11-01`,
			want: &Query{Clauses: []Clause{{"statuscategory", "=", []string{"Done"}}, {"reporter", "is not empty", nil},
				{"updated", ">=", []string{"2026-11-01"}}}}},
		{q: ``, err: `at 0: expected a clause such as status = Open, found the end of the query`},
		{q: `status = Open OR status = Closed`, err: `at 14: expected AND, ORDER BY or the end of the query, found "OR"`},
		{q: `labels = x`, err: `at 0: expected a field (assignee, created, duedate, fixversion, issuetype, priority, project, reporter, status, statuscategory, text, updated), found "labels"`},
		{q: `status ~ Open`, err: `at 7: expected status with =, !=, in, found "~"`},
		{q: `status = `, err: `at 8: expected a value, found the end of the query`},
		{q: `status in (Open, `, err: `at 16: expected a value, found the end of the query`},
		{q: `created >= yesterday`, err: `at 11: expected a date (2026-11-27, -7d, startOfMonth()), found "yesterday"`},
		{q: `statusCategory = "To Do"`, err: `at 17: expected statusCategory = Done, found "To Do"`},
		{q: `text ~ "unclosed`, err: `at 7: expected a closed string, found "\"unclosed"`},
		{q: `status = Open ORDER BY subject`, err: `at 23: expected a field to order by (created, updated, duedate, priority, status, issuetype, assignee, reporter), found "subject"`},
		{q: `status = Open ORDER BY created DESC extra`, err: `at 36: expected the end of the query, found "extra"`},
	} {
		t.Run(tt.q, func(t *testing.T) {
			got, err := ParseJQL(tt.q)
			if tt.err != "" {
				var je *JQLError
				if !errors.As(err, &je) || err.Error() != tt.err {
					t.Fatalf("ParseJQL = %+v, %v; want the error %s", got, err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseJQL = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// FuzzParseJQL: any text parses or is a JQLError within the query, and
// never panics.
func FuzzParseJQL(f *testing.F) {
	for _, q := range []string{`status = Open`, `project = acme AND status in ("In Progress", Open) ORDER BY created DESC`,
		`text ~ "a \" b"`, `created >= -7d`, `status in (`, `"`, `duedate <= startOfMonth() order by`, `((((`, `= = =`} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		_, err := ParseJQL(q)
		var je *JQLError
		if err != nil && (!errors.As(err, &je) || je.Pos < 0 || je.Pos > len(q)) {
			t.Fatalf("ParseJQL(%q) = %v", q, err)
		}
	})
}
