// Package keyimport reads the files a key import brings: JSON Lines of
// keygate's own (ParseJSONL) and a decK dump of Kong's consumers, consumer
// groups and plugins (ParseKong, with a privileges map read by
// ParsePrivilegesMap). Each parser returns what keystore.Keys.Import
// checks and stores in one transaction (the keys of a keystore.ImportSet,
// or a whole set from a dump), with the line each entry came from, or a
// 400 that names every bad line.
package keyimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	yaml4 "go.yaml.in/yaml/v4"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// ParseJSONL reads one key a line: the fields of POST /webapi/keys and,
// optionally, "token". Blank lines are skipped; service, when not empty,
// is the service of lines that name none. It returns the keys of the
// good lines and a 400 naming each bad one (Import reports both at once);
// past MaxImport keys it stops.
func ParseJSONL(data []byte, service string) ([]keystore.ImportKey, error) {
	var out []keystore.ImportKey
	var f problem.Fields
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a byte order mark
	if looksLikeDeck(data) {
		// One problem, not one per line of YAML.
		f.Add("format", "wrong_format", `this looks like a decK dump, not JSON Lines: add --format kong (format "kong") and a privileges map`)
		return nil, f.Err()
	}
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
		if len(out) >= keystore.MaxImport {
			f.Add("lines", "too_many", "an import holds at most "+strconv.Itoa(keystore.MaxImport)+" keys; split the file")
			break
		}
		if len(raw) > maxImportLine {
			f.Add(where, "too_long", "a line is at most 64 KiB")
			continue
		}
		var in struct {
			keystore.KeyInput
			Token *string `json:"token"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) && typ.Field != "" {
				// A known field of the wrong type: named as POST
				// /webapi/keys names it, under the line (the path
				// without the embedded struct's Go name).
				typ.Field = strings.TrimPrefix(typ.Field, "KeyInput.")
				fe := problem.TypeError(typ)
				f.Add(where+"."+fe.Field, fe.Code, fe.Message)
				continue
			}
			f.Add(where, "invalid_json", jsonProblem(raw, err))
			continue
		}
		if dec.More() {
			f.Add(where, "invalid_json", "one JSON object a line")
			continue
		}
		// A field given twice, as the admin API refuses it: decoded, the
		// last would win unseen (a token or consumerId the operator did
		// not mean). Checked once the line decoded, so that every field
		// it names is a known one, which may be said back.
		if err := problem.CheckStructure(raw, &in); err != nil {
			var d *problem.Details
			if errors.As(err, &d) && len(d.Errors) == 1 {
				f.Add(where+"."+d.Errors[0].Field, d.Errors[0].Code, d.Errors[0].Message)
			} else {
				f.Add(where, "invalid_json", "a line nests deeper than "+strconv.Itoa(problem.MaxJSONDepth)+" levels")
			}
			continue
		}
		k := keystore.ImportKey{Line: line, Input: in.KeyInput}
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

// jsonFieldName is a field name an error may repeat: plain, and shorter
// than 16 characters, as every value an import says back (a longer name
// may be a token written where a field name belongs: Kong's keys are 32
// hex digits).
var jsonFieldName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,14}$`)

// jsonProblem says what is wrong with a line without quoting it: a line
// may hold a token, even where a field name belongs.
func jsonProblem(raw []byte, err error) string {
	if len(raw) == 0 || raw[0] != '{' {
		return "each line is one JSON object of key fields"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "a line is a JSON object of key fields"
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

// ParsePrivilegesMap reads a map of ACL group to Grant, as JSON or YAML.
// It leaves the grants to the import to check, so that the map's
// problems come in one reply with the file's.
func ParsePrivilegesMap(data []byte) (map[string]Grant, error) {
	m := map[string]Grant{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&m)
	var te *yaml.TypeError
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return m, nil
	case errors.As(err, &te):
		var lines []string
		for _, e := range te.Errors {
			if at, _, ok := strings.Cut(e, ": "); ok && strings.HasPrefix(at, "line ") {
				lines = append(lines, at)
			}
		}
		msg := "the map is of ACL group to {service, privileges}: a service and a list of privileges, and nothing else"
		if len(lines) > 0 {
			msg = strings.Join(lines, ", ") + ": " + msg
		}
		return nil, errors.New(msg)
	}
	_, msg := yamlSyntax(data, err)
	return nil, errors.New(msg)
}

// checkGrants checks each group of a privileges map: a service and
// privileges of that service, each problem named by its group. It
// returns the bad groups.
func checkGrants(f *problem.Fields, grants map[string]Grant) map[string]bool {
	bad := map[string]bool{}
	groups := make([]string, 0, len(grants))
	for g := range grants {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		at := "privilegesMap." + g
		grant := grants[g]
		s := access.Service(grant.Service)
		if !s.Valid() {
			f.Add(at+".service", "invalid", "group "+shown(g)+": service must be contracts or share")
			bad[g] = true
			s = ""
		}
		var pf problem.Fields
		keystore.CheckPrivileges(&pf, s, grant.Privileges)
		for _, e := range pf.List() {
			f.Add(at+"."+e.Field, e.Code, "group "+shown(g)+": "+e.Message)
			bad[g] = true
		}
	}
	return bad
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
	Name          string         `yaml:"name"`
	Consumer      any            `yaml:"consumer"`
	ConsumerGroup any            `yaml:"consumer_group"`
	Route         any            `yaml:"route"`
	Service       any            `yaml:"service"`
	Enabled       *bool          `yaml:"enabled"`
	Config        map[string]any `yaml:"config"`
}

// enabled reports whether the plugin applies.
func (p *kongPlugin) enabled() bool { return p.Enabled == nil || *p.Enabled }

// scoped reports whether the plugin applies to a route or service only,
// not to a consumer's every request.
func (p *kongPlugin) scoped() bool { return p.Route != nil || p.Service != nil }

// maxKongTTL bounds a credential's ttl: a hundred years.
const maxKongTTL = 100 * 365 * 24 * 3600

// ParseKong reads a decK dump (`deck gateway dump`, YAML). Each consumer
// with key-auth credentials becomes a consumer: its username (else its
// custom_id, else its id) as name, its custom_id as externalId, and the
// rate limits Kong holds it to by consumer (kongPolicies: its own
// plugins, else its consumer group's, which become a plan, else the
// global ones) as its rate limits and quota, which all its keys share as
// Kong's count does. Each credential becomes a key of that consumer with
// the credential's token, owned by the consumer's custom_id (its
// username when it has none), with the service and privileges its ACL
// groups map to in grants (the union of its groups within one service),
// a notValidAfter of now plus the credential's ttl, the allow list, and
// the limits by credential. A consumer group with rate limits becomes a
// plan of the group's name that its consumers take (kongScope). It
// returns the set, with the consumers that gave no key (no credential),
// and a 400 naming every problem of the map and the dump: a consumer
// with one is still read to the end, and its keys returned (NoGrant
// when its groups do not map), so that Import adds the problems of their
// fields and tokens to the same reply.
func ParseKong(data []byte, grants map[string]Grant, service string, now time.Time) (keystore.ImportSet, error) {
	var doc yaml.Node
	var f problem.Fields
	var set keystore.ImportSet
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlSyntax(data, err)
		f.Add(lineAt(line), "invalid_yaml", msg)
		return set, f.Err()
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		f.Add("lines[1]", "invalid_yaml", orJSONLines(data, "not a decK dump: a YAML document with consumers"))
		return set, f.Err()
	}
	root := doc.Content[0]
	consumers := mapValue(root, "consumers")
	if consumers == nil || consumers.Kind != yaml.SequenceNode {
		f.Add("lines[1]", "no_consumers", orJSONLines(data, "the dump has no consumers"))
		return set, f.Err()
	}
	if len(consumers.Content) > keystore.MaxImport {
		f.Add("consumers", "too_many", "an import holds at most "+strconv.Itoa(keystore.MaxImport)+" keys; split the dump")
		return set, f.Err()
	}
	badGroups := checkGrants(&f, grants)
	idx := newKongIndex(consumers)
	top := kongPlugins(&f, root, idx, len(consumers.Content))
	groups, memberOf := kongGroups(&f, root, consumers, idx, top.grouped)
	for _, g := range groups {
		// Kong holds a group's acl plugin to its members only; a key
		// cannot be held to it, so it denies everywhere.
		for _, p := range g.Plugins {
			addDenied(top.denied, p, "the acl plugin of consumer group "+g.Name)
		}
	}
	// A group's plugins are checked once, when a consumer of the import
	// is in it; a group with rate limits becomes a plan when one takes it.
	groupLimits := make([]*kongLimits, len(groups))
	planOf := make([]int, len(groups))
	limitsOf := func(g int) *kongLimits {
		if groupLimits[g] == nil {
			gr := groups[g]
			where, who := lineAt(gr.line), "consumer group "+keystore.ShownName(gr.Name, gr.line)
			own := map[string]bool{}
			for _, p := range gr.Plugins {
				own[p.Name] = true
			}
			lim, allowed := kongPolicies(&f, where, who, gr.Plugins, own)
			if len(lim.perCredential) > 0 || lim.credentialQuota != nil {
				f.Add(where+".plugins", "unmapped", who+": a limit by credential, which a plan of consumers cannot carry: import it by hand, or change the plugin first")
			}
			if len(allowed) > 0 {
				f.Add(where+".plugins", "unmapped", who+": an ip-restriction plugin, which a plan cannot carry: import it by hand, or change the plugin first")
			}
			groupLimits[g] = &lim
		}
		return groupLimits[g]
	}
	for i, node := range consumers.Content {
		where := lineAt(node.Line)
		var c kongConsumer
		if err := node.Decode(&c); err != nil {
			f.Add(where, "invalid_yaml", yamlProblem(err))
			continue
		}
		if creds := mapValue(node, "keyauth_credentials"); creds != nil {
			for j, cn := range creds.Content {
				if j < len(c.Credentials) {
					c.Credentials[j].line = cn.Line
				}
			}
		}
		name := c.Username
		for _, alt := range []string{c.CustomID, c.ID} {
			if name == "" {
				name = alt
			}
		}
		who := keystore.ShownName(name, node.Line)
		if name == "" {
			name = "Kong consumer " + who
		}
		owner := c.CustomID
		if owner == "" {
			owner = c.Username
		}
		if len(c.Credentials) == 0 {
			set.Skipped = append(set.Skipped, keystore.SkippedConsumer{Line: node.Line, Consumer: who, Reason: "no key-auth credential"})
			continue
		}
		svc, privileges, noGrant := kongGrant(&f, where, who, &c, grants, badGroups, service)
		own := append(c.Plugins[:len(c.Plugins):len(c.Plugins)], top.attached[i]...)
		kongDenied(&f, where, who, &c, own, top.denied)

		// Kong's precedence, plugin by plugin: the consumer's own, else
		// its group's, else the global one.
		ownNames := map[string]bool{}
		for _, p := range own {
			if p.enabled() {
				ownNames[p.Name] = true
			}
		}
		var group *kongGroup
		var limited []string
		for _, g := range memberOf[i] {
			limitsOf(g)
			if len(groups[g].limits) > 0 {
				limited = append(limited, keystore.ShownName(groups[g].Name, groups[g].line))
				group = groups[g]
			}
		}
		if len(limited) > 1 {
			f.Add(where+".groups", "two_groups", fmt.Sprintf("consumer %s is in consumer groups with rate limits %s, and a consumer takes one plan: leave it in one, or import it by hand", who, strings.Join(limited, ", ")))
			group = nil
		}
		shadowed := maps.Clone(ownNames)
		if group != nil {
			for _, p := range group.Plugins {
				if p.enabled() {
					shadowed[p.Name] = true
				}
			}
		}
		plugins := own
		for _, p := range top.global {
			if !shadowed[p.Name] {
				plugins = append(plugins, p)
			}
		}
		lim, allowed := kongPolicies(&f, where, "consumer "+who, plugins, ownNames)
		plan, note := kongScope(&f, where, "consumer "+who, group, ownNames)
		ci := keystore.ImportConsumer{Line: node.Line, Note: note, Input: keystore.ConsumerInput{
			Name:        patch.Some(cutRunes(name, keystore.MaxScopeNameLen)),
			Description: patch.Some("imported from Kong consumer " + who),
		}}
		if c.CustomID != "" {
			ci.Input.ExternalID = patch.Some(c.CustomID)
		}
		if len(lim.perConsumer) > 0 {
			ci.Input.RateLimits = patch.Some(lim.perConsumer)
		}
		if lim.consumerQuota != nil {
			ci.Input.Quota = patch.Some(lim.consumerQuota)
		}
		if plan != nil {
			g := slices.Index(groups, plan)
			if planOf[g] == 0 {
				gl := limitsOf(g)
				pi := keystore.ImportPlan{Line: plan.line, Input: keystore.PlanInput{
					Name:        patch.Some(plan.Name),
					Description: patch.Some("imported from Kong consumer group " + plan.Name),
				}}
				if len(gl.perConsumer) > 0 {
					pi.Input.RateLimits = patch.Some(gl.perConsumer)
				}
				if gl.consumerQuota != nil {
					pi.Input.Quota = patch.Some(gl.consumerQuota)
				}
				set.Plans = append(set.Plans, pi)
				planOf[g] = len(set.Plans)
			}
			ci.Plan = planOf[g]
		}
		set.Consumers = append(set.Consumers, ci)
		consumer := len(set.Consumers)
		for j, cred := range c.Credentials {
			keyName := cutRunes(who, keystore.MaxNameLen)
			if len(c.Credentials) > 1 {
				suffix := " #" + strconv.Itoa(j+1)
				keyName = cutRunes(who, keystore.MaxNameLen-len(suffix)) + suffix
			}
			in := keystore.KeyInput{
				Name:        patch.Some(keyName),
				Description: patch.Some("imported from Kong consumer " + who),
				Owner:       patch.Some(owner),
			}
			if !noGrant {
				in.Service, in.Privileges = patch.Some(svc), patch.Some(privileges)
			}
			line := cred.line
			if line == 0 {
				line = node.Line
			}
			switch {
			case cred.TTL < 0 || cred.TTL > maxKongTTL:
				// Reported; the key is still checked for the same reply.
				f.Add(lineAt(line)+".ttl", "out_of_range", "consumer "+who+": a credential's ttl is 0 to 100 years of seconds")
			case cred.TTL > 0:
				in.NotValidAfter = patch.Some(now.Add(time.Duration(cred.TTL) * time.Second).UTC().Format(time.RFC3339))
			}
			if len(allowed) > 0 {
				in.AllowedIPs = patch.Some(allowed)
			}
			// Kong's limit_by credential: each key its own count.
			if len(lim.perCredential) > 0 {
				in.RateLimits = patch.Some(lim.perCredential)
			}
			if lim.credentialQuota != nil {
				in.Quota = patch.Some(lim.credentialQuota)
			}
			if cred.Key == "" {
				f.Add(lineAt(line)+".key", "required", "consumer "+who+" has a key-auth credential without a key")
				continue
			}
			set.Keys = append(set.Keys, keystore.ImportKey{Line: line, Input: in, Consumer: consumer, Token: cred.Key, TokenField: "key", NoGrant: noGrant})
		}
	}
	if len(set.Keys) == 0 && len(set.Skipped) > 0 && len(f.List()) == 0 {
		f.Add("consumers", "no_credentials", fmt.Sprintf("no consumer of the dump has a key-auth credential (%d without)", len(set.Skipped)))
	}
	return set, f.Err()
}

// kongGrant is the service and privileges a consumer's ACL groups map
// to: their union, within one service. noGrant reports that they map to
// none, and why is reported (on the map, for a bad group of it).
func kongGrant(f *problem.Fields, where, who string, c *kongConsumer, grants map[string]Grant, badGroups map[string]bool, service string) (svc string, privileges []string, noGrant bool) {
	privs := map[string]bool{}
	var unmapped []string
	for _, a := range c.ACLs {
		if badGroups[a.Group] {
			noGrant = true
			continue
		}
		g, ok := grants[a.Group]
		if !ok {
			unmapped = append(unmapped, a.Group)
			continue
		}
		if svc != "" && g.Service != svc {
			f.Add(where+".acls", "two_services", fmt.Sprintf("consumer %s is in groups of two services (%s and %s): import it by hand", who, svc, g.Service))
			return "", nil, true
		}
		svc = g.Service
		for _, p := range g.Privileges {
			privs[p] = true
		}
	}
	switch {
	case noGrant:
		return "", nil, true
	case svc == "":
		msg := fmt.Sprintf("consumer %s is in no group of the privileges map", who)
		if len(unmapped) > 0 {
			msg += " (its groups: " + shownList(unmapped) + ")"
		}
		f.Add(where+".acls", "unmapped", msg)
		return "", nil, true
	case service != "" && svc != service:
		f.Add(where+".acls", "other_service", fmt.Sprintf("consumer %s maps to service %s, not %s", who, svc, service))
		return "", nil, true
	}
	privileges = make([]string, 0, len(privs))
	for p := range privs {
		privileges = append(privileges, p)
	}
	sort.Strings(privileges)
	return svc, privileges, false
}

// kongTop is what the plugins outside the consumers say: by consumer,
// the top-level plugins naming it; those naming a consumer group; the
// global ones; and, by ACL group, which enabled acl plugin outside the
// consumers (global, of a service, of a route, and, once ParseKong has
// read the groups, of a consumer group) denies the group.
type kongTop struct {
	attached [][]kongPlugin
	grouped  []groupPlugin
	global   []kongPlugin
	denied   map[string]string
}

// kongPlugins reads the plugins outside the consumers. A top-level one
// naming a consumer goes to it, found as decK finds it (idx); a name
// that fits no consumer, or several, is reported, not guessed. One
// naming a consumer group goes to the group. A top-level one naming
// neither and scoped to no route or service is global.
func kongPlugins(f *problem.Fields, root *yaml.Node, idx kongIndex, consumers int) kongTop {
	top := kongTop{attached: make([][]kongPlugin, consumers), denied: map[string]string{}}
	if plugins := mapValue(root, "plugins"); plugins != nil && plugins.Kind != yaml.SequenceNode {
		f.Add(lineAt(plugins.Line)+".plugins", "invalid_yaml", "the top-level plugins are not a list of plugins")
	} else if plugins != nil {
		for _, pn := range plugins.Content {
			at := lineAt(pn.Line)
			var p kongPlugin
			if err := pn.Decode(&p); err != nil {
				f.Add(at, "invalid_yaml", "a top-level plugin whose fields do not decode (name, consumer, consumer_group, route, service, enabled, config)")
				continue
			}
			ref, named := entityRef(p.Consumer, "id", "username")
			if group, ofGroup := entityRef(p.ConsumerGroup, "id", "name"); ofGroup && !named {
				top.grouped = append(top.grouped, groupPlugin{ref: group, line: pn.Line, plugin: p})
				continue
			}
			if !named {
				where := "a global acl plugin"
				if p.scoped() {
					where = "an acl plugin of a route or service"
				} else {
					top.global = append(top.global, p)
				}
				addDenied(top.denied, p, where)
				continue
			}
			switch match := idx.find(ref); len(match) {
			case 1:
				top.attached[match[0]] = append(top.attached[match[0]], p)
			case 0:
				f.Add(at+".consumer", "unknown_consumer", fmt.Sprintf("plugin %s names consumer %s, which no consumer of the dump has as username, id or custom_id", shown(p.Name), shown(ref)))
			default:
				f.Add(at+".consumer", "ambiguous", fmt.Sprintf("plugin %s names consumer %s, which %d consumers of the dump answer to: name one by its username or id", shown(p.Name), shown(ref), len(match)))
			}
		}
	}
	for _, svc := range seqOf(mapValue(root, "services")) {
		addDeniedIn(top.denied, mapValue(svc, "plugins"), "the acl plugin of service "+scalar(mapValue(svc, "name")))
		for _, r := range seqOf(mapValue(svc, "routes")) {
			addDeniedIn(top.denied, mapValue(r, "plugins"), "the acl plugin of route "+scalar(mapValue(r, "name")))
		}
	}
	for _, r := range seqOf(mapValue(root, "routes")) {
		addDeniedIn(top.denied, mapValue(r, "plugins"), "the acl plugin of route "+scalar(mapValue(r, "name")))
	}
	return top
}

// addDenied notes the groups an enabled acl plugin denies, by where.
func addDenied(denied map[string]string, p kongPlugin, where string) {
	if p.Name != "acl" || !p.enabled() {
		return
	}
	for _, g := range asList(p.Config["deny"]) {
		if _, ok := denied[g]; !ok {
			denied[g] = where
		}
	}
}

// addDeniedIn notes the deny lists of the acl plugins of a list of
// plugins nested in a service or route; the other plugins there are not
// a key's.
func addDeniedIn(denied map[string]string, plugins *yaml.Node, where string) {
	for _, pn := range seqOf(plugins) {
		var p kongPlugin
		if pn.Decode(&p) == nil {
			addDenied(denied, p, where)
		}
	}
}

// kongDenied reports a consumer in a group that an acl plugin denies:
// Kong refuses it there, and a key cannot be refused by group, so that
// importing it would give it what Kong denied.
func kongDenied(f *problem.Fields, where, who string, c *kongConsumer, own []kongPlugin, denied map[string]string) {
	mine := map[string]string{}
	for _, p := range own {
		addDenied(mine, p, "its own acl plugin")
	}
	var groups []string
	for _, a := range c.ACLs {
		by, ok := mine[a.Group]
		if !ok {
			by, ok = denied[a.Group]
		}
		if ok {
			groups = append(groups, shown(a.Group)+" ("+by+")")
		}
	}
	if len(groups) > 0 {
		f.Add(where+".acls", "denied", fmt.Sprintf("consumer %s is in a group an acl plugin denies: %s; a key cannot be refused by group: take the consumer out of the group, or import it by hand", who, strings.Join(groups, ", ")))
	}
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

// entityRef is the entity a top-level plugin's field names (a string,
// or a mapping with one of keys), and whether it names one.
func entityRef(v any, keys ...string) (string, bool) {
	switch c := v.(type) {
	case nil:
		return "", false
	case string:
		return c, true
	case map[string]any:
		for _, k := range keys {
			if s, ok := c[k].(string); ok {
				return s, true
			}
		}
	}
	return "", true
}

// shown is a value as a problem may say it back (keystore.Sayable): one
// of 16 characters or more may be a token put in the wrong field.
func shown(s string) string {
	switch {
	case s == "":
		return "(none)"
	case !keystore.Sayable(s):
		return "(a value of 16 characters or more)"
	}
	return s
}

// shownList is values, each as shown says it, in one list.
func shownList(values []string) string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = shown(v)
	}
	return strings.Join(out, ", ")
}

// scalar is the value of a scalar node, or "".
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// seqOf is the items of a sequence node, or none.
func seqOf(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// yamlSyntax says where data stops being YAML, and why. It asks the v4
// parser, which tells the line and column, where v3 tells no column and,
// for some errors, a line off by one or none; its messages quote no
// value.
func yamlSyntax(data []byte, err error) (line int, msg string) {
	var le *yaml4.LoadError
	if errors.As(yaml4.Load(data, new(yaml4.Node)), &le) && le.Mark.Line > 0 {
		at := "line " + strconv.Itoa(le.Mark.Line)
		if le.Mark.Column > 0 {
			at += ", column " + strconv.Itoa(le.Mark.Column)
		}
		return le.Mark.Line, "YAML syntax error at " + at + ": " + keystore.QuietValues(le.Message)
	}
	return 1, "YAML syntax error: " + keystore.QuietValues(strings.TrimPrefix(err.Error(), "yaml: "))
}

// orJSONLines adds to msg, a decK dump's problem, that data looks like
// JSON Lines when its first line is a JSON object.
func orJSONLines(data []byte, msg string) string {
	if t := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff"))); len(t) > 0 && t[0] == '{' {
		return msg + `: this looks like JSON Lines: leave out --format kong (format "jsonl")`
	}
	return msg
}

// looksLikeDeck reports whether data, sent as JSON Lines, is rather a
// decK dump: its first line that is neither blank nor a comment is no
// JSON object, and a line starts with a key decK writes at the top.
func looksLikeDeck(data []byte) bool {
	first := true
	for line := range bytes.Lines(data) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		if first && t[0] == '{' {
			return false
		}
		first = false
		if bytes.HasPrefix(line, []byte("_format_version:")) || bytes.HasPrefix(line, []byte("consumers:")) {
			return true
		}
	}
	return false
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

// lineAt names line n of a file in a problem, as Keys.Import does.
func lineAt(n int) string { return "lines[" + strconv.Itoa(n) + "]" }
