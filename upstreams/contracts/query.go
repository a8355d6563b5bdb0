package contracts

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // IANA zone names work on hosts without a zoneinfo database.

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
)

// Order is a search order of the API.
type Order string

// The seven orders.
const (
	OrderRandom           Order = "random"
	OrderCreationDateAsc  Order = "creation-date-asc"
	OrderCreationDateDesc Order = "creation-date-desc"
	OrderNameAsc          Order = "name-asc"
	OrderNameDesc         Order = "name-desc"
	OrderCreatorIDAsc     Order = "creator-id-asc"
	OrderCreatorIDDesc    Order = "creator-id-desc"
)

var orders = []Order{OrderRandom, OrderCreationDateAsc, OrderCreationDateDesc,
	OrderNameAsc, OrderNameDesc, OrderCreatorIDAsc, OrderCreatorIDDesc}

// Search parameter limits.
const (
	DefaultPageSize = 10
	MaxPageSize     = 100
	maxPage         = 1 << 30
)

// Query is a parsed search. Zero values of the optional filters mean "no
// filter"; ParseQuery fills the API's defaults.
type Query struct {
	TemplateID string
	CreatorID  string
	// Statuses is nil for "any".
	Statuses []Status
	// Substring is the folded substring, empty for none.
	Substring string
	// Placement is empty for "any".
	Placement Placement
	// From and To bound the creation time: From ≤ t < To. Zero for open.
	From, To time.Time
	Order    Order
	Page     int
	PageSize int
}

// searchParams are the API's search parameters; anything else is refused.
var searchParams = []string{"template-id", "statuses", "substring", "creator-id", "placement",
	"date-range", "time-zone", "order", "page", "page-size"}

// parseRawQuery decodes a request's query string (a 400 when it does not
// decode) and reads its search parameters.
func parseRawQuery(raw string) (Query, error) {
	values, err := problem.DecodeQuery(raw)
	if err != nil {
		return Query{}, err
	}
	return ParseQuery(values)
}

// ParseQuery reads the search parameters of values, listing every unknown,
// repeated or bad parameter in one 400 problem.
func ParseQuery(values url.Values) (Query, error) {
	q := Query{Placement: PlacementStacked, Order: OrderRandom, Page: 1, PageSize: DefaultPageSize}
	var f problem.Fields
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names) // the same request gets the same body
	for _, name := range names {
		v := values[name]
		known := false
		for _, p := range searchParams {
			known = known || p == name
		}
		switch {
		case !known:
			f.Add(name, codeUnknownParameter, name+" is not a search parameter")
		case len(v) > 1:
			f.Add(name, codeRepeatedParameter, name+" is given more than once")
		}
	}
	get := func(name string) (string, bool) {
		v, ok := values[name]
		if !ok || len(v) != 1 {
			return "", false
		}
		return v[0], true
	}

	if v, ok := get("template-id"); ok {
		if !text.PrintableASCII(v, maxTextLen) {
			f.Add("template-id", codeInvalid, "template-id must be 1 to 255 printable US-ASCII characters")
		}
		q.TemplateID = v
	}
	if v, ok := get("creator-id"); ok {
		if !text.PrintableASCII(v, maxTextLen) {
			f.Add("creator-id", codeInvalid, "creator-id must be 1 to 255 printable US-ASCII characters")
		}
		q.CreatorID = v
	}
	if v, ok := get("statuses"); ok && v != "any" {
		for _, name := range strings.Split(v, "|") {
			st := Status(name)
			if statusByte(st) == 0xff {
				f.Add("statuses", codeInvalid, `statuses must be "any" or statuses among sent, ongoing, rejected, signed and expired joined with |`)
				q.Statuses = nil
				break
			}
			if !slices.Contains(q.Statuses, st) {
				q.Statuses = append(q.Statuses, st)
			}
		}
	}
	if v, ok := get("substring"); ok {
		if !text.PrintableRunes(v, maxTextLen) {
			f.Add("substring", codeInvalid, "substring must be 1 to 255 printable characters")
		}
		q.Substring = fold(v)
	}
	if v, ok := get("placement"); ok {
		switch v {
		case "any":
			q.Placement = ""
		case string(PlacementStacked), string(PlacementArchived):
			q.Placement = Placement(v)
		default:
			f.Add("placement", codeInvalid, `placement must be "any", "stacked" or "archived"`)
		}
	}
	loc := time.UTC
	if v, ok := get("time-zone"); ok {
		var good bool
		if loc, good = parseZone(v); !good {
			f.Add("time-zone", codeInvalid, `time-zone must be an IANA zone name, "Z", "UTC" or "UTC±hh:mm"`)
			loc = time.UTC
		}
	}
	if v, ok := get("date-range"); ok {
		from, to, good := parseDateRange(v, loc)
		if !good {
			f.Add("date-range", codeInvalid, "date-range must be <date>, <date>~, ~<date> or <date>~<date> with YYYY-MM-DD dates, the first not after the second")
		}
		q.From, q.To = from, to
	}
	if v, ok := get("order"); ok {
		q.Order = ""
		for _, o := range orders {
			if string(o) == v {
				q.Order = o
			}
		}
		if q.Order == "" {
			f.Add("order", codeInvalid, "order must be one of random, creation-date-asc, creation-date-desc, name-asc, name-desc, creator-id-asc, creator-id-desc")
		}
	}
	if v, ok := get("page"); ok {
		n, good := positiveInt(v, maxPage)
		if !good {
			f.Add("page", codeInvalid, "page must be a positive integer")
		}
		q.Page = n
	}
	if v, ok := get("page-size"); ok {
		n, good := positiveInt(v, MaxPageSize)
		if !good {
			f.Add("page-size", codeInvalid, "page-size must be an integer from 1 to 100")
		}
		q.PageSize = n
	}
	if err := f.Err(); err != nil {
		return Query{}, err
	}
	return q, nil
}

// positiveInt parses plain decimal digits into 1..max.
func positiveInt(s string, max int) (int, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, false
	}
	return n, true
}

// parseZone reads "Z", "UTC", "UTC+hh:mm", "UTC-hh:mm" or an IANA name.
func parseZone(s string) (*time.Location, bool) {
	switch {
	case s == "Z" || s == "UTC":
		return time.UTC, true
	case strings.HasPrefix(s, "UTC+") || strings.HasPrefix(s, "UTC-"):
		off := s[3:]
		if len(off) != 6 || off[3] != ':' {
			return nil, false
		}
		h, okH := digits2(off[1:3])
		m, okM := digits2(off[4:6])
		if !okH || !okM || h > 14 || m > 59 || h == 14 && m > 0 {
			return nil, false
		}
		secs := (h*60 + m) * 60
		if off[0] == '-' {
			secs = -secs
		}
		return time.FixedZone(s, secs), true
	case s == "" || s == "Local":
		return nil, false
	}
	loc, err := time.LoadLocation(s)
	return loc, err == nil
}

func digits2(s string) (int, bool) {
	if len(s) != 2 || s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

// parseDateRange reads the four forms into [from, to) instants of
// creation time: from is the start of the first date in loc, to the start
// of the day after the second, so both dates are inclusive.
func parseDateRange(s string, loc *time.Location) (from, to time.Time, ok bool) {
	a, b, isRange := strings.Cut(s, "~")
	if !isRange {
		b = a
	}
	if a == "" && b == "" {
		return from, to, false
	}
	var da, db time.Time
	if a != "" {
		if da, ok = parseDate(a, loc); !ok {
			return from, to, false
		}
		from = da
	}
	if b != "" {
		if db, ok = parseDate(b, loc); !ok {
			return from, to, false
		}
		to = time.Date(db.Year(), db.Month(), db.Day()+1, 0, 0, 0, 0, loc)
	}
	if a != "" && b != "" && db.Before(da) {
		return from, to, false
	}
	return from, to, true
}

// parseDate reads an ISO 8601 calendar date, YYYY-MM-DD, as midnight in loc.
func parseDate(s string, loc *time.Location) (time.Time, bool) {
	if len(s) != 10 {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation(time.DateOnly, s, loc)
	return t, err == nil
}
