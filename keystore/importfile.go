package keystore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
)

// The files an import reads: JSON Lines of our own (ParseJSONL) and a
// decK dump of Kong's consumers (ParseKong). Each parser returns the keys
// with the line each came from, or a 400 that names every bad line.

// ParseJSONL reads one key a line: the fields of POST /webapi/keys and,
// optionally, "token". Blank lines are skipped; service, when not empty,
// is the service of lines that name none. It returns the keys of the
// good lines and a 400 naming each bad one (Import reports both at once);
// past MaxImport keys it stops.
func ParseJSONL(data []byte, service string) ([]ImportKey, error) {
	var out []ImportKey
	var f problem.Fields
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a byte order mark
	line := 0
	for len(data) > 0 {
		line++
		var raw []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			raw, data = data[:i], data[i+1:]
		} else {
			raw, data = data, nil
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		where := "lines[" + strconv.Itoa(line) + "]"
		if len(out) >= MaxImport {
			f.Add("lines", "too_many", "an import holds at most "+strconv.Itoa(MaxImport)+" keys; split the file")
			break
		}
		if len(raw) > maxImportLine {
			f.Add(where, "too_long", "a line is at most 64 KiB")
			continue
		}
		var in struct {
			KeyInput
			Token *string `json:"token"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			f.Add(where, "invalid_json", jsonProblem(raw, err))
			continue
		}
		if dec.More() {
			f.Add(where, "invalid_json", "one JSON object a line")
			continue
		}
		k := ImportKey{Line: line, Input: in.KeyInput}
		if in.Token != nil {
			if *in.Token == "" {
				f.Add(where+".token", "invalid", "token is empty: leave it out for a new one")
				continue
			}
			k.Token = *in.Token
		}
		if service != "" && !k.Input.Service.Set {
			k.Input.Service = patch.Some(service)
		}
		out = append(out, k)
	}
	return out, f.Err()
}

// maxImportLine bounds a line of JSON Lines: a key's fields fill a few
// hundred bytes, its allow-list a few dozen more.
const maxImportLine = 64 << 10

// jsonFieldName is a field name an error may repeat: short, plain.
var jsonFieldName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)

// jsonProblem says what is wrong with a line without quoting it: a line
// may hold a token, even where a field name belongs.
func jsonProblem(raw []byte, err error) string {
	if len(raw) == 0 || raw[0] != '{' {
		return "each line is one JSON object of key fields"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		if jsonFieldName.MatchString(field) {
			return "field " + field + " has the wrong type"
		}
		return "a field has the wrong type"
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name = strings.Trim(name, `"`); jsonFieldName.MatchString(name) {
			return "unknown field " + name + ": a line holds the fields of POST /webapi/keys and token"
		}
		return "an unknown field: a line holds the fields of POST /webapi/keys and token"
	}
	return "not valid JSON"
}

// Grant is what an ACL group of Kong's becomes: a service and privileges.
type Grant struct {
	Service    string   `json:"service" yaml:"service"`
	Privileges []string `json:"privileges" yaml:"privileges"`
}

// ParsePrivilegesMap reads a map of ACL group to Grant, as JSON or YAML,
// and checks it (CheckGrants).
func ParsePrivilegesMap(data []byte) (map[string]Grant, error) {
	m := map[string]Grant{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, problem.Invalid([]problem.FieldError{{Field: "privilegesMap", Code: "invalid",
			Message: "the privileges map is a JSON or YAML object of ACL group to {service, privileges}, and nothing else"}})
	}
	return m, CheckGrants(m)
}

// CheckGrants checks each group of a privileges map: a service and
// privileges of that service, each problem named by its group.
func CheckGrants(grants map[string]Grant) error {
	var f problem.Fields
	groups := make([]string, 0, len(grants))
	for g := range grants {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		at := "privilegesMap." + g
		grant := grants[g]
		s := Service(grant.Service)
		if !s.Valid() {
			f.Add(at+".service", "invalid", "group "+g+": service must be contracts or share")
			s = ""
		}
		var pf problem.Fields
		checkPrivileges(&pf, s, grant.Privileges)
		if err := pf.Err(); err != nil {
			var d *problem.Details
			errors.As(err, &d)
			for _, e := range d.Errors {
				f.Add(at+"."+e.Field, e.Code, "group "+g+": "+e.Message)
			}
		}
	}
	return f.Err()
}

// kongConsumer is a consumer of a decK dump, as much as an import reads.
type kongConsumer struct {
	Username    string `yaml:"username"`
	CustomID    string `yaml:"custom_id"`
	ID          string `yaml:"id"`
	Credentials []struct {
		Key  string `yaml:"key"`
		TTL  int64  `yaml:"ttl"`
		Tags []any  `yaml:"tags"`
		line int
	} `yaml:"keyauth_credentials"`
	ACLs []struct {
		Group string `yaml:"group"`
	} `yaml:"acls"`
	Plugins []kongPlugin `yaml:"plugins"`
}

type kongPlugin struct {
	Name     string         `yaml:"name"`
	Consumer any            `yaml:"consumer"`
	Route    any            `yaml:"route"`
	Service  any            `yaml:"service"`
	Enabled  *bool          `yaml:"enabled"`
	Config   map[string]any `yaml:"config"`
}

// enabled reports whether the plugin applies.
func (p *kongPlugin) enabled() bool { return p.Enabled == nil || *p.Enabled }

// scoped reports whether the plugin applies to a route or service only,
// not to a consumer's every request.
func (p *kongPlugin) scoped() bool { return p.Route != nil || p.Service != nil }

// maxKongTTL bounds a credential's ttl: a hundred years.
const maxKongTTL = 100 * 365 * 24 * 3600

// kongRateWindows are the rate-limiting plugin's limits that become
// policies of the key, by the name the policy gets; "month" becomes the
// key's quota, and "year" cannot be mapped.
var kongRateWindows = []struct {
	field  string
	window int64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// ParseKong reads a decK dump (`deck gateway dump`, YAML): each
// key-auth credential of a consumer becomes a key with the credential's
// token, owned by the consumer's custom_id (its username when it has
// none), with the service and privileges its ACL groups map to in
// grants (the union of its groups within one service), a notValidAfter
// of now plus the credential's ttl, and the consumer's rate-limiting
// plugin as rate-limit policies (second, minute, hour, day) and a
// monthly quota. What cannot be mapped is reported per consumer: no
// group in the map, groups of two services, a service other than
// service (when set), a year limit.
func ParseKong(data []byte, grants map[string]Grant, service string, now time.Time) ([]ImportKey, error) {
	var doc yaml.Node
	var f problem.Fields
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		f.Add("lines[1]", "invalid_yaml", "not a decK dump: a YAML document with consumers")
		return nil, f.Err()
	}
	root := doc.Content[0]
	consumers := mapValue(root, "consumers")
	if consumers == nil || consumers.Kind != yaml.SequenceNode {
		f.Add("lines[1]", "no_consumers", "the dump has no consumers")
		return nil, f.Err()
	}
	if err := CheckGrants(grants); err != nil {
		return nil, err
	}
	// Plugins at the top level name their consumer (by username or id),
	// or none: a global plugin, which applies to every consumer.
	topPlugins := map[string][]kongPlugin{}
	var global []kongPlugin
	if plugins := mapValue(root, "plugins"); plugins != nil {
		var ps []kongPlugin
		if err := plugins.Decode(&ps); err != nil {
			f.Add("lines["+strconv.Itoa(plugins.Line)+"].plugins", "invalid_yaml", "the top-level plugins are not a list of plugins")
		}
		for _, p := range ps {
			switch name := consumerRef(p.Consumer); {
			case name != "":
				topPlugins[name] = append(topPlugins[name], p)
			case !p.scoped():
				global = append(global, p)
			}
		}
	}
	if len(consumers.Content) > MaxImport {
		f.Add("consumers", "too_many", "an import holds at most "+strconv.Itoa(MaxImport)+" keys; split the dump")
		return nil, f.Err()
	}
	var out []ImportKey
	for _, node := range consumers.Content {
		where := "lines[" + strconv.Itoa(node.Line) + "]"
		var c kongConsumer
		if err := node.Decode(&c); err != nil {
			f.Add(where, "invalid_yaml", yamlProblem(err))
			continue
		}
		if creds := mapValue(node, "keyauth_credentials"); creds != nil {
			for i, cn := range creds.Content {
				if i < len(c.Credentials) {
					c.Credentials[i].line = cn.Line
				}
			}
		}
		who := c.Username
		if who == "" {
			who = c.CustomID
		}
		owner := c.CustomID
		if owner == "" {
			owner = c.Username
		}
		if len(c.Credentials) == 0 {
			continue // a consumer without key-auth has nothing to import
		}
		// The grant: the union of the consumer's groups, within one service.
		var svc string
		privs := map[string]bool{}
		var unmapped []string
		for _, a := range c.ACLs {
			g, ok := grants[a.Group]
			if !ok {
				unmapped = append(unmapped, a.Group)
				continue
			}
			if svc != "" && g.Service != svc {
				f.Add(where+".acls", "two_services", fmt.Sprintf("consumer %s is in groups of two services (%s and %s): import it by hand", who, svc, g.Service))
				svc = "?"
				break
			}
			svc = g.Service
			for _, p := range g.Privileges {
				privs[p] = true
			}
		}
		switch {
		case svc == "?":
			continue
		case svc == "":
			msg := fmt.Sprintf("consumer %s is in no group of the privileges map", who)
			if len(unmapped) > 0 {
				msg += " (its groups: " + strings.Join(unmapped, ", ") + ")"
			}
			f.Add(where+".acls", "unmapped", msg)
			continue
		case service != "" && svc != service:
			f.Add(where+".acls", "other_service", fmt.Sprintf("consumer %s maps to service %s, not %s", who, svc, service))
			continue
		}
		privileges := make([]string, 0, len(privs))
		for p := range privs {
			privileges = append(privileges, p)
		}
		sort.Strings(privileges)
		plugins := c.Plugins
		for _, ref := range []string{c.Username, c.ID, c.CustomID} {
			if ref != "" {
				plugins = append(plugins, topPlugins[ref]...)
				delete(topPlugins, ref)
			}
		}
		limits, quota, allowed, ok := kongPolicies(&f, where, who, plugins, global)
		if !ok {
			continue
		}
		for i, cred := range c.Credentials {
			name := cutRunes(who, maxNameLen)
			if len(c.Credentials) > 1 {
				suffix := " #" + strconv.Itoa(i+1)
				name = cutRunes(who, maxNameLen-len(suffix)) + suffix
			}
			in := KeyInput{
				Service:     patch.Some(svc),
				Name:        patch.Some(name),
				Description: patch.Some("imported from Kong consumer " + who),
				Owner:       patch.Some(owner),
				Privileges:  patch.Some(privileges),
			}
			line := cred.line
			if line == 0 {
				line = node.Line
			}
			switch {
			case cred.TTL < 0 || cred.TTL > maxKongTTL:
				f.Add("lines["+strconv.Itoa(line)+"].ttl", "out_of_range", "consumer "+who+": a credential's ttl is 0 to 100 years of seconds")
				continue
			case cred.TTL > 0:
				in.NotValidAfter = patch.Some(now.Add(time.Duration(cred.TTL) * time.Second).UTC().Format(time.RFC3339))
			}
			if len(allowed) > 0 {
				in.AllowedIPs = patch.Some(allowed)
			}
			if len(limits) > 0 {
				in.RateLimits = patch.Some(limits)
			}
			if quota != nil {
				in.Quota = patch.Some(quota)
			}
			if cred.Key == "" {
				f.Add("lines["+strconv.Itoa(line)+"].key", "required", "consumer "+who+" has a key-auth credential without a key")
				continue
			}
			out = append(out, ImportKey{Line: line, Input: in, Token: cred.Key, TokenField: "key"})
		}
	}
	return out, f.Err()
}

// kongPolicies maps what a consumer's plugins say of its keys: the
// rate-limiting plugin (its own, else a global one) as policies and a
// monthly quota, ip-restriction's allow list as allowedIps. What keys
// cannot carry is reported (ok false): a limit by IP or by route, a
// yearly limit, a deny list, a plugin of the consumer's of another kind.
func kongPolicies(f *problem.Fields, where, who string, own, global []kongPlugin) (limits []json.RawMessage, quota json.RawMessage, allowed []string, ok bool) {
	ok = true
	unmapped := func(msg string) {
		f.Add(where+".plugins", "unmapped", "consumer "+who+": "+msg+": import it by hand, or change the plugin first")
		ok = false
	}
	hasOwn := map[string]bool{}
	for _, p := range own {
		if p.enabled() {
			hasOwn[p.Name] = true
		}
	}
	plugins := own
	for _, p := range global {
		if !hasOwn[p.Name] {
			plugins = append(plugins, p)
		}
	}
	for _, p := range plugins {
		if !p.enabled() {
			continue
		}
		if p.scoped() {
			unmapped(p.Name + " applies to a route or service only, which a key cannot say")
			continue
		}
		switch p.Name {
		case "rate-limiting":
			if by, _ := p.Config["limit_by"].(string); by != "" && by != "consumer" && by != "credential" {
				unmapped("rate-limiting limits by " + by + ", not by consumer")
				continue
			}
			for _, w := range kongRateWindows {
				if n, set := wholeConfig(p.Config[w.field]); set {
					raw, _ := json.Marshal(map[string]any{"name": w.field, "limit": n, "windowSeconds": w.window})
					limits = append(limits, raw)
				}
			}
			if n, set := wholeConfig(p.Config["month"]); set {
				quota, _ = json.Marshal(map[string]any{"limit": n, "period": "month"})
			}
			if _, set := wholeConfig(p.Config["year"]); set {
				unmapped("a yearly rate limit, which keys cannot carry")
			}
		case "ip-restriction":
			if deny, _ := p.Config["deny"].([]any); len(deny) > 0 {
				unmapped("ip-restriction denies addresses, and a key can only allow some")
			}
			for _, a := range asList(p.Config["allow"]) {
				allowed = append(allowed, a)
			}
		case "acl", "key-auth":
		default:
			if hasOwn[p.Name] {
				unmapped("plugin " + p.Name + ", which keygate keys have no equivalent of")
			}
		}
	}
	return limits, quota, allowed, ok
}

// asList reads a plugin's list of strings.
func asList(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// yamlProblem says which line of a consumer does not decode, without
// quoting its value (it may be a key).
func yamlProblem(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if i := strings.Index(msg, ": cannot unmarshal"); i > 0 {
			return msg[:i] + ": a value of the wrong type (acls is a list of {group}, keyauth_credentials a list of {key, ttl}, ttl a number)"
		}
	}
	return "a consumer whose fields do not decode"
}

// wholeConfig reads a positive whole number of a plugin's config.
func wholeConfig(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), n > 0
	case int64:
		return n, n > 0
	case float64:
		return int64(n), n >= 1 && n == float64(int64(n))
	}
	return 0, false
}

// consumerRef is the username a top-level plugin names as its consumer.
func consumerRef(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case map[string]any:
		if s, ok := c["username"].(string); ok {
			return s
		}
		if s, ok := c["id"].(string); ok {
			return s
		}
	}
	return ""
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
