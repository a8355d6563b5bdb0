package keystore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
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
// is the service of lines that name none.
func ParseJSONL(data []byte, service string) ([]ImportKey, error) {
	var out []ImportKey
	var f problem.Fields
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		where := "lines[" + strconv.Itoa(line) + "]"
		var in struct {
			KeyInput
			Token *string `json:"token"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			f.Add(where, "invalid_json", "not a JSON object of key fields: "+jsonProblem(err))
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
	if err := sc.Err(); err != nil {
		f.Add("lines["+strconv.Itoa(line+1)+"]", "too_long", "a line is at most 1 MiB")
	}
	return out, f.Err()
}

// jsonProblem says what is wrong with a line without quoting it: a line
// may hold a token.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	switch {
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	case asType(err, &te):
		return "field " + te.Field + " must be " + te.Type.String()
	}
	return "malformed"
}

func asType(err error, target **json.UnmarshalTypeError) bool {
	te, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*target = te
	}
	return ok
}

// Grant is what an ACL group of Kong's becomes: a service and privileges.
type Grant struct {
	Service    string   `json:"service" yaml:"service"`
	Privileges []string `json:"privileges" yaml:"privileges"`
}

// ParsePrivilegesMap reads a map of ACL group to Grant, as JSON or YAML.
func ParsePrivilegesMap(data []byte) (map[string]Grant, error) {
	m := map[string]Grant{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, problem.Invalid([]problem.FieldError{{Field: "privilegesMap", Code: "invalid",
			Message: "the privileges map is a JSON or YAML object of ACL group to {service, privileges}"}})
	}
	return m, nil
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
	Enabled  *bool          `yaml:"enabled"`
	Config   map[string]any `yaml:"config"`
}

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
	// Rate-limiting plugins at the top level name their consumer.
	topPlugins := map[string][]kongPlugin{}
	if plugins := mapValue(root, "plugins"); plugins != nil {
		var ps []kongPlugin
		if err := plugins.Decode(&ps); err == nil {
			for _, p := range ps {
				if name := consumerRef(p.Consumer); name != "" {
					topPlugins[name] = append(topPlugins[name], p)
				}
			}
		}
	}
	var out []ImportKey
	for _, node := range consumers.Content {
		where := "lines[" + strconv.Itoa(node.Line) + "]"
		var c kongConsumer
		if err := node.Decode(&c); err != nil {
			f.Add(where, "invalid_yaml", "a consumer that does not decode")
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
		limits, quota, ok := kongLimits(&f, where, who, append(c.Plugins, topPlugins[c.Username]...))
		if !ok {
			continue
		}
		for i, cred := range c.Credentials {
			name := who
			if len(c.Credentials) > 1 {
				name += " #" + strconv.Itoa(i+1)
			}
			in := KeyInput{
				Service:     patch.Some(svc),
				Name:        patch.Some(cutRunes(name, maxNameLen)),
				Description: patch.Some("imported from Kong consumer " + who),
				Owner:       patch.Some(owner),
				Privileges:  patch.Some(privileges),
			}
			if cred.TTL > 0 {
				in.NotValidAfter = patch.Some(now.Add(time.Duration(cred.TTL) * time.Second).UTC().Format(time.RFC3339))
			}
			if len(limits) > 0 {
				in.RateLimits = patch.Some(limits)
			}
			if quota != nil {
				in.Quota = patch.Some(quota)
			}
			line := cred.line
			if line == 0 {
				line = node.Line
			}
			if cred.Key == "" {
				f.Add("lines["+strconv.Itoa(line)+"].key", "required", "consumer "+who+" has a key-auth credential without a key")
				continue
			}
			out = append(out, ImportKey{Line: line, Input: in, Token: cred.Key})
		}
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// kongLimits maps the enabled rate-limiting plugins of a consumer.
func kongLimits(f *problem.Fields, where, who string, plugins []kongPlugin) (limits []json.RawMessage, quota json.RawMessage, ok bool) {
	ok = true
	for _, p := range plugins {
		if p.Name != "rate-limiting" || (p.Enabled != nil && !*p.Enabled) {
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
			f.Add(where+".plugins", "unmapped", fmt.Sprintf("consumer %s has a yearly rate limit, which keys cannot carry: remove it or import the consumer by hand", who))
			ok = false
		}
	}
	return limits, quota, ok
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
