package host

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Query is a parsed JQL query of the subset keygate takes on every
// tracker: clauses joined by AND, and an optional ORDER BY.
type Query struct {
	// SavedQuery names a query saved on the tracker (a board's, on
	// Redmine), run as the tracker has it; Clauses are then empty.
	SavedQuery string
	Clauses    []Clause
	// OrderBy is the field to sort by ("" for the tracker's order), Desc
	// its direction.
	OrderBy string
	Desc    bool
}

// Clause is one condition: Field Op Values. Op is one of =, !=, in, >=,
// <=, ~, is empty, is not empty.
type Clause struct {
	Field  string
	Op     string
	Values []string
}

// JQLError is a query that does not parse: where (the byte offset of the
// token, from 0) and what was expected there.
type JQLError struct {
	Pos      int
	Expected string
	Found    string
}

func (e *JQLError) Error() string {
	if e.Found == "" {
		return fmt.Sprintf("at %d: expected %s, found the end of the query", e.Pos, e.Expected)
	}
	return fmt.Sprintf("at %d: expected %s, found %q", e.Pos, e.Expected, e.Found)
}

// jqlFields are the fields of the subset with the operators each takes.
var jqlFields = map[string][]string{
	"project":        {"="},
	"status":         {"=", "!=", "in"},
	"statuscategory": {"="},
	"issuetype":      {"=", "!=", "in"},
	"priority":       {"=", "!=", "in"},
	"assignee":       {"=", "is empty", "is not empty"},
	"reporter":       {"=", "is empty", "is not empty"},
	"fixversion":     {"=", "!=", "in"},
	"text":           {"~"},
	"created":        {">=", "<="},
	"updated":        {">=", "<="},
	"duedate":        {">=", "<=", "is empty", "is not empty"},
}

// orderFields are the fields a query may be ordered by.
var orderFields = []string{"created", "updated", "duedate", "priority", "status", "issuetype", "assignee", "reporter"}

// ParseJQL parses q, the subset of JQL keygate takes (field names and
// keywords in any case): project, status (=, !=, in), statusCategory =
// Done, issuetype, priority, fixVersion (=, !=, in), assignee and
// reporter (=, is [not] EMPTY), text ~ "..." (subject and description),
// created, updated and duedate (>=, <=, a date YYYY-MM-DD, a relative
// one such as -7d, or startOfMonth(), startOfWeek(), startOfDay(), now()),
// joined by AND, and ORDER BY one field ASC or DESC. Anything else is a
// JQLError naming where and what was expected: a clause is never
// dropped silently.
func ParseJQL(q string) (*Query, error) {
	p := &jqlParser{toks: lexJQL(q)}
	if len(p.toks) > 0 && p.toks[len(p.toks)-1].kind == tokBad {
		t := p.toks[len(p.toks)-1]
		return nil, &JQLError{Pos: t.pos, Expected: "a closed string", Found: t.text}
	}
	if len(p.toks) == 0 {
		return nil, &JQLError{Pos: 0, Expected: "a clause such as status = Open"}
	}
	out := &Query{}
	for {
		if p.keyword("order") {
			break
		}
		c, err := p.clause()
		if err != nil {
			return nil, err
		}
		out.Clauses = append(out.Clauses, c)
		if p.done() || p.peekKeyword("order") {
			break
		}
		if !p.keyword("and") {
			return nil, p.expected("AND, ORDER BY or the end of the query")
		}
	}
	if len(out.Clauses) == 0 {
		return nil, &JQLError{Pos: 0, Expected: "a clause such as status = Open"}
	}
	if p.keyword("order") {
		if !p.keyword("by") {
			return nil, p.expected("BY")
		}
		f, ok := p.word()
		if !ok || !containsFold(orderFields, f) {
			return nil, p.back().expected("a field to order by (" + strings.Join(orderFields, ", ") + ")")
		}
		out.OrderBy = strings.ToLower(f)
		switch {
		case p.keyword("desc"):
			out.Desc = true
		case p.keyword("asc"):
		}
	}
	if !p.done() {
		return nil, p.expected("the end of the query")
	}
	return out, nil
}

// clause reads field op value(s).
func (p *jqlParser) clause() (Clause, error) {
	f, ok := p.word()
	if !ok {
		return Clause{}, p.back().expected("a field (" + strings.Join(sortedKeys(jqlFields), ", ") + ")")
	}
	field := strings.ToLower(f)
	ops, known := jqlFields[field]
	if !known {
		return Clause{}, p.back().expected("a field (" + strings.Join(sortedKeys(jqlFields), ", ") + ")")
	}
	c := Clause{Field: field}
	opAt := p.i
	switch {
	case p.keyword("is"):
		c.Op = "is empty"
		if p.keyword("not") {
			c.Op = "is not empty"
		}
		if !p.keyword("empty") && !p.keyword("null") {
			return Clause{}, p.expected("EMPTY")
		}
	case p.keyword("in"):
		c.Op = "in"
		if !p.symbol("(") {
			return Clause{}, p.expected("(")
		}
		for {
			v, ok := p.value()
			if !ok {
				return Clause{}, p.expected("a value")
			}
			c.Values = append(c.Values, v)
			if p.symbol(")") {
				break
			}
			if !p.symbol(",") {
				return Clause{}, p.expected(", or )")
			}
		}
	default:
		op, ok := p.operator()
		if !ok {
			return Clause{}, p.expected("an operator (" + strings.Join(ops, ", ") + ")")
		}
		c.Op = op
		v, ok := p.value()
		if !ok {
			return Clause{}, p.expected("a value")
		}
		c.Values = []string{v}
	}
	if !containsFold(ops, c.Op) {
		return Clause{}, &JQLError{Pos: p.toks[opAt].pos, Expected: field + " with " + strings.Join(ops, ", "), Found: c.Op}
	}
	if field == "statuscategory" && !strings.EqualFold(c.Values[0], "done") {
		return Clause{}, &JQLError{Pos: p.toks[p.i-1].pos, Expected: "statusCategory = Done", Found: c.Values[0]}
	}
	if field == "created" || field == "updated" || (field == "duedate" && len(c.Values) == 1) {
		if !validJQLDate(c.Values[0]) {
			return Clause{}, &JQLError{Pos: p.toks[p.i-1].pos, Expected: "a date (2026-11-27, -7d, startOfMonth())", Found: c.Values[0]}
		}
	}
	return c, nil
}

// validJQLDate reports whether v is a date the subset takes.
func validJQLDate(v string) bool {
	switch strings.ToLower(v) {
	case "now()", "startofday()", "startofweek()", "startofmonth()":
		return true
	}
	if len(v) == 10 && v[4] == '-' && v[7] == '-' {
		_, err := strconv.Atoi(v[:4] + v[5:7] + v[8:])
		return err == nil
	}
	if len(v) >= 3 && (v[0] == '-' || v[0] == '+') {
		n, unit := v[1:len(v)-1], v[len(v)-1]
		_, err := strconv.Atoi(n)
		return err == nil && strings.IndexByte("dwmh", unit) >= 0
	}
	return false
}

type tokKind int

const (
	tokWord tokKind = iota
	tokString
	tokSymbol
	tokBad
)

type jqlTok struct {
	kind tokKind
	text string
	pos  int
}

// lexJQL splits q into words, quoted strings and symbols; an unclosed
// string ends the list as tokBad.
func lexJQL(q string) []jqlTok {
	var out []jqlTok
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for j < len(q) && q[j] != c {
				if q[j] == '\\' && j+1 < len(q) {
					j++
				}
				b.WriteByte(q[j])
				j++
			}
			if j >= len(q) {
				return append(out, jqlTok{tokBad, q[i:], i})
			}
			out = append(out, jqlTok{tokString, b.String(), i})
			i = j + 1
		case strings.HasPrefix(q[i:], "!=") || strings.HasPrefix(q[i:], ">=") || strings.HasPrefix(q[i:], "<="):
			out = append(out, jqlTok{tokSymbol, q[i : i+2], i})
			i += 2
		case strings.IndexByte("=~(),<>!", c) >= 0:
			out = append(out, jqlTok{tokSymbol, q[i : i+1], i})
			i++
		default:
			j := i
			for j < len(q) && !strings.ContainsRune(" \t\n\r\"'=~,!<>()", rune(q[j])) {
				j++
			}
			if strings.HasPrefix(q[j:], "()") {
				j += 2 // a function, startOfMonth(), as one word
			}
			out = append(out, jqlTok{tokWord, q[i:j], i})
			i = j
		}
	}
	return out
}

type jqlParser struct {
	toks []jqlTok
	i    int
}

func (p *jqlParser) done() bool { return p.i >= len(p.toks) }

func (p *jqlParser) back() *jqlParser {
	if p.i > 0 {
		p.i--
	}
	return p
}

func (p *jqlParser) expected(what string) *JQLError {
	if p.done() {
		end := 0
		if n := len(p.toks); n > 0 {
			end = p.toks[n-1].pos + len(p.toks[n-1].text)
		}
		return &JQLError{Pos: end, Expected: what}
	}
	t := p.toks[p.i]
	return &JQLError{Pos: t.pos, Expected: what, Found: t.text}
}

func (p *jqlParser) peekKeyword(k string) bool {
	return !p.done() && p.toks[p.i].kind == tokWord && strings.EqualFold(p.toks[p.i].text, k)
}

func (p *jqlParser) keyword(k string) bool {
	if p.peekKeyword(k) {
		p.i++
		return true
	}
	return false
}

func (p *jqlParser) symbol(s string) bool {
	if !p.done() && p.toks[p.i].kind == tokSymbol && p.toks[p.i].text == s {
		p.i++
		return true
	}
	return false
}

func (p *jqlParser) word() (string, bool) {
	if p.done() || p.toks[p.i].kind != tokWord {
		p.i++
		return "", false
	}
	p.i++
	return p.toks[p.i-1].text, true
}

func (p *jqlParser) value() (string, bool) {
	if p.done() || (p.toks[p.i].kind != tokWord && p.toks[p.i].kind != tokString) {
		return "", false
	}
	t := p.toks[p.i]
	if t.kind == tokWord && isJQLKeyword(t.text) {
		return "", false
	}
	p.i++
	return t.text, true
}

func (p *jqlParser) operator() (string, bool) {
	for _, op := range []string{"=", "!=", ">=", "<=", "~"} {
		if p.symbol(op) {
			return op, true
		}
	}
	return "", false
}

func isJQLKeyword(w string) bool {
	for _, k := range []string{"and", "or", "not", "order", "by", "in", "is", "empty"} {
		if strings.EqualFold(w, k) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(v string) bool { return strings.EqualFold(v, s) })
}

func sortedKeys(m map[string][]string) []string { return slices.Sorted(maps.Keys(m)) }
