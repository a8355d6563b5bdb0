package pgdb

import (
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// A DSN holds a password, so it is never shown as written. Redact is the
// one rendering of a DSN for logs, errors, pool keys and the migrate
// command's messages; Scrub cuts its secrets out of any other text.

// unparsable is what Redact shows of a DSN it cannot take apart.
const unparsable = "postgres (a dsn that does not parse)"

// Redact renders dsn as its server and database only: the URL form as
// "postgres://host:port,host2/dbname", the key/value form as
// "host=... port=... dbname=...". It never shows the user, the password,
// any other parameter (a query may carry password=) or any text before
// the last '@' of a URL, so that a password with an unencoded '@', '/'
// or '?' cannot leak through a misreading. A DSN it cannot take apart is
// shown as "postgres (a dsn that does not parse)".
func Redact(dsn string) string {
	dsn = strings.TrimSpace(dsn)
	if rest, ok := cutScheme(dsn); ok {
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			rest = rest[i+1:]
		}
		hosts, path := rest, ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			hosts = rest[:i]
			if rest[i] == '/' {
				path = rest[i+1:]
				if j := strings.IndexAny(path, "?#"); j >= 0 {
					path = path[:j]
				}
			}
		}
		if !printable(hosts) || !printable(path) {
			return unparsable
		}
		out := "postgres://" + hosts
		if path != "" {
			out += "/" + path
		}
		// Parameters that name the server or database override the
		// URL's: show them, so that the server named is the one used.
		if _, query, ok := strings.Cut(rest, "?"); ok {
			query, _, _ = strings.Cut(query, "#")
			if q, err := url.ParseQuery(query); err == nil {
				for _, k := range []string{"host", "hostaddr", "port", "dbname"} {
					if v := q.Get(k); v != "" {
						if !printable(v) {
							return unparsable
						}
						out += " " + k + "=" + v
					}
				}
			}
		}
		return out
	}
	params, err := keyValues(dsn)
	if err != nil || len(params) == 0 {
		return unparsable
	}
	var parts []string
	for _, k := range []string{"host", "hostaddr", "port", "dbname"} {
		if v, ok := params[k]; ok {
			if !printable(strings.ReplaceAll(v, " ", "")) {
				return unparsable
			}
			if v == "" || strings.ContainsAny(v, " '\\") {
				v = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
			}
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "postgres (the default server and database)"
	}
	return strings.Join(parts, " ")
}

// CheckDSN parses dsn as pgx does and refuses what pgx would misread: in
// the URL form, an '@' that is not the one between the user information
// and the host (a password with an unencoded '@', '/', '?' or '#' puts
// part of itself into the host, the port or the database). Its errors
// never hold any part of dsn.
func CheckDSN(dsn string) (*pgconn.Config, error) {
	if rest, ok := cutScheme(strings.TrimSpace(dsn)); ok {
		at := strings.Count(rest, "@")
		end := strings.IndexAny(rest, "/?#")
		if at > 1 || at == 1 && end >= 0 && strings.IndexByte(rest, '@') > end {
			return nil, errors.New("the dsn holds an '@' that pgx would misread: percent-encode '@' as %40, '/' as %2F, '?' as %3F and '#' as %23 in the user name, the password and the parameters")
		}
	}
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("the dsn does not parse as a libpq URL or key/value string")
	}
	return pc, nil
}

// Scrub is msg with every secret of dsn cut out: the DSN itself, the
// password as written, as decoded and in the pieces an unencoded '@'
// makes of it, and a URL's user information; and the user name where the
// server names it (`for user "keygate"`), which is part of the user
// information too.
func Scrub(msg, dsn string) string {
	for _, s := range secretsOf(dsn) {
		cut := "xxxxx"
		if strings.HasSuffix(s, "@") { // a URL's user information, its '@' kept
			cut += "@"
		}
		msg = strings.ReplaceAll(msg, s, cut)
	}
	if pc, err := pgconn.ParseConfig(strings.TrimSpace(dsn)); err == nil && pc.User != "" {
		msg = strings.ReplaceAll(msg, `"`+pc.User+`"`, `"xxxxx"`)
		msg = strings.ReplaceAll(msg, "user="+pc.User, "user=xxxxx")
	}
	return msg
}

// secretsOf lists the texts of dsn that must not be shown, longest first
// (so that a part is not cut before the whole).
func secretsOf(dsn string) []string {
	dsn = strings.TrimSpace(dsn)
	list := []string{dsn}
	if pc, err := pgconn.ParseConfig(dsn); err == nil {
		list = append(list, pc.Password)
	}
	if rest, ok := cutScheme(dsn); ok {
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			userinfo := rest[:i]
			// A user name alone is cut where it stands as one, before
			// its '@' (and quoted, below): a name that is a word
			// ("postgres") would take that word out of every message.
			list = append(list, userinfo+"@")
			if _, pw, ok := strings.Cut(userinfo, ":"); ok {
				list = append(list, userinfo)
				list = append(list, pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					list = append(list, dec)
				}
				// pgx cuts a password with an unencoded '@' at its first
				// '@' and takes the rest for the host.
				for _, piece := range strings.Split(pw, "@") {
					if len(piece) >= 3 {
						list = append(list, piece)
					}
				}
			}
		}
	} else if params, err := keyValues(dsn); err == nil {
		list = append(list, params["password"])
	}
	list = slices.DeleteFunc(list, func(s string) bool { return s == "" })
	slices.SortFunc(list, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(list)
}

// cutScheme returns what follows "postgres://" or "postgresql://" (any
// case) and whether dsn is in the URL form.
func cutScheme(dsn string) (string, bool) {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if len(dsn) >= len(scheme) && strings.EqualFold(dsn[:len(scheme)], scheme) {
			return dsn[len(scheme):], true
		}
	}
	return "", false
}

// keyValues splits libpq's key/value form: key = value pairs separated by
// spaces, a value single-quoted to hold spaces, with \' and \\ escapes.
func keyValues(s string) (map[string]string, error) {
	errMalformed := errors.New("malformed key/value dsn")
	out := map[string]string{}
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v') {
			i++
		}
	}
	for {
		skip()
		if i == len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[start:i]
		skip()
		if key == "" || i == len(s) || s[i] != '=' {
			return nil, errMalformed
		}
		i++
		skip()
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i == len(s) {
					return nil, errMalformed
				}
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					v.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '\'' {
					break
				}
				v.WriteByte(c)
			}
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		out[key] = v.String()
	}
}

// printable is s of printable US-ASCII only.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
