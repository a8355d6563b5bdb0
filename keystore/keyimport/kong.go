package keyimport

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/traffic"
)

// What a decK dump's consumer groups and rate-limiting plugins become.
// Kong applies one instance of a plugin to a request: the consumer's
// own, else its consumer group's, else the global one. A consumer's
// limits go on the keystore Consumer (all its keys together, as Kong
// counts by consumer) or, limited by credential, on each of its keys; a
// consumer group's go on a Plan the consumer takes (each consumer apart,
// as Kong counts a group's plugin by consumer).

// kongIndex finds a consumer of the dump as decK does: by username or
// id, else by a custom_id that one consumer alone has.
type kongIndex struct {
	byName, byCustomID map[string][]int
}

func newKongIndex(consumers *yaml.Node) kongIndex {
	x := kongIndex{byName: map[string][]int{}, byCustomID: map[string][]int{}}
	for i, node := range consumers.Content {
		username, id := scalar(mapValue(node, "username")), scalar(mapValue(node, "id"))
		if username != "" {
			x.byName[username] = append(x.byName[username], i)
		}
		if id != "" && id != username {
			x.byName[id] = append(x.byName[id], i)
		}
		if cid := scalar(mapValue(node, "custom_id")); cid != "" {
			x.byCustomID[cid] = append(x.byCustomID[cid], i)
		}
	}
	return x
}

// find returns the consumers ref names: one, or none or several for a
// problem.
func (x kongIndex) find(ref string) []int {
	if m := x.byName[ref]; len(m) > 0 {
		return m
	}
	return x.byCustomID[ref]
}

// kongGroup is a consumer group of a decK dump, as an import reads it:
// its plugins, nested and top-level, and where it is.
type kongGroup struct {
	Name    string       `yaml:"name"`
	ID      string       `yaml:"id"`
	Plugins []kongPlugin `yaml:"plugins"`
	line    int
	// limits are the enabled rate-limiting plugins' names.
	limits []string
}

// kongLimitPlugins are the plugins a consumer's or a group's rate
// limits come from.
var kongLimitPlugins = []string{"rate-limiting", "rate-limiting-advanced"}

// kongGroups reads the consumer groups of a dump: those of
// consumer_groups, with the top-level plugins naming them (byGroup, by
// name or id), and any that a consumer or plugin names without the dump
// listing it. memberOf holds, by consumer, the groups it is in (indexes
// in groups, in the dump's order), as the group's consumers list or the
// consumer's groups say.
func kongGroups(f *problem.Fields, root, consumers *yaml.Node, idx kongIndex, byGroup []groupPlugin) (groups []*kongGroup, memberOf [][]int) {
	byRef := map[string]int{}
	add := func(g *kongGroup) int {
		groups = append(groups, g)
		i := len(groups) - 1
		for _, ref := range []string{g.Name, g.ID} {
			if _, ok := byRef[ref]; ref != "" && !ok {
				byRef[ref] = i
			}
		}
		return i
	}
	// named finds the group ref names, listed in the dump or not.
	named := func(ref string, line int) int {
		if i, ok := byRef[ref]; ok {
			return i
		}
		return add(&kongGroup{Name: ref, line: line})
	}
	memberOf = make([][]int, len(consumers.Content))
	join := func(consumer, group int) {
		for _, g := range memberOf[consumer] {
			if g == group {
				return
			}
		}
		memberOf[consumer] = append(memberOf[consumer], group)
	}
	listed := mapValue(root, "consumer_groups")
	if listed != nil && listed.Kind != yaml.SequenceNode {
		f.Add(lineAt(listed.Line)+".consumer_groups", "invalid_yaml", "consumer_groups is not a list of consumer groups")
	}
	type members struct {
		group int
		list  []*yaml.Node
	}
	var lists []members
	for _, gn := range seqOf(listed) {
		g := &kongGroup{line: gn.Line}
		if err := gn.Decode(g); err != nil {
			f.Add(lineAt(gn.Line), "invalid_yaml", "a consumer group whose fields do not decode (name, id, consumers, plugins)")
			continue
		}
		if g.Name == "" {
			g.Name = g.ID
		}
		if g.Name == "" {
			f.Add(lineAt(gn.Line)+".name", "required", "a consumer group without a name or id")
			continue
		}
		if i, dup := byRef[g.Name]; dup {
			f.Add(lineAt(gn.Line)+".name", "duplicate", fmt.Sprintf("consumer group %s is listed twice (line %d)", keystore.ShownName(g.Name, gn.Line), groups[i].line))
			continue
		}
		lists = append(lists, members{add(g), seqOf(mapValue(gn, "consumers"))})
	}
	for _, gp := range byGroup {
		g := groups[named(gp.ref, gp.line)]
		g.Plugins = append(g.Plugins, gp.plugin)
	}
	for _, m := range lists {
		for _, cn := range m.list {
			ref := scalar(mapValue(cn, "username"))
			for _, alt := range []string{scalar(mapValue(cn, "id")), scalar(mapValue(cn, "custom_id")), scalar(cn)} {
				if ref == "" {
					ref = alt
				}
			}
			switch match := idx.find(ref); len(match) {
			case 0:
				// Not in the dump: nothing of it is imported.
			case 1:
				join(match[0], m.group)
			default:
				f.Add(lineAt(cn.Line)+".consumers", "ambiguous", fmt.Sprintf("consumer group %s lists consumer %s, which %d consumers of the dump answer to: name one by its username or id", keystore.ShownName(groups[m.group].Name, groups[m.group].line), shown(ref), len(match)))
			}
		}
	}
	for i, node := range consumers.Content {
		for _, gn := range seqOf(mapValue(node, "groups")) {
			ref := scalar(mapValue(gn, "name"))
			if ref == "" {
				ref = scalar(mapValue(gn, "id"))
			}
			if ref == "" {
				ref = scalar(gn)
			}
			if ref != "" {
				join(i, named(ref, gn.Line))
			}
		}
	}
	for _, g := range groups {
		for _, name := range kongLimitPlugins {
			for _, p := range g.Plugins {
				if p.Name == name && p.enabled() {
					g.limits = append(g.limits, name)
					break
				}
			}
		}
	}
	return groups, memberOf
}

// groupPlugin is a top-level plugin naming a consumer group (ref, its
// name or id) at line.
type groupPlugin struct {
	ref    string
	line   int
	plugin kongPlugin
}

// kongLimits is what rate-limiting plugins limit: each consumer's
// requests, all its credentials' together (perConsumer), and each
// credential's apart (perCredential, Kong's limit_by credential).
type kongLimits struct {
	perConsumer, perCredential     []json.RawMessage
	consumerQuota, credentialQuota json.RawMessage
}

// kongRateWindows are the rate-limiting plugin's limits that become
// policies, by the name the policy gets; "month" becomes a quota, and
// "year" cannot be mapped.
var kongRateWindows = []struct {
	field  string
	window int64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// kongPolicies maps what plugins (those that apply to a consumer, or a
// consumer group's) say: the rate-limiting plugin's second, minute,
// hour and day as policies of those names and its month as a monthly
// quota; rate-limiting-advanced's windows as policies named rla-Ns;
// ip-restriction's allow list as allowedIps. who names the holder in
// problems ("consumer billing"). What cannot be carried is reported: a
// limit by IP or by route, a yearly limit or a window beyond a day, a
// deny list of addresses, a plugin of another kind among own (the
// holder's own plugins, not the global ones).
func kongPolicies(f *problem.Fields, where, who string, plugins []kongPlugin, own map[string]bool) (lim kongLimits, allowed []string) {
	unmapped := func(msg string) {
		f.Add(where+".plugins", "unmapped", who+": "+msg+": import it by hand, or change the plugin first")
	}
	for _, p := range plugins {
		if !p.enabled() {
			continue
		}
		if p.scoped() {
			unmapped(shown(p.Name) + " applies to a route or service only, which a key cannot say")
			continue
		}
		switch p.Name {
		case "rate-limiting":
			// Every problem of the plugin at once; its limits are mapped
			// only when they are a consumer's or a credential's.
			by, _ := p.Config["limit_by"].(string)
			ok := by == "" || by == "consumer" || by == "credential"
			if !ok {
				unmapped("rate-limiting limits by " + by + ", not by consumer or credential")
			}
			if p.Config["year"] != nil {
				unmapped("a yearly rate limit, which keygate cannot carry")
			}
			// A limit that is set but not a positive whole number (5.5,
			// "10", 0) is a problem, never dropped: dropped, it would leave
			// the client with no limit at all.
			number := func(field string) (int64, bool) {
				v := p.Config[field]
				if v == nil {
					return 0, false
				}
				n, whole := wholeConfig(v)
				if !whole {
					unmapped(fmt.Sprintf("rate-limiting's %s is %s, not a positive whole number", field, shown(fmt.Sprint(v))))
					ok = false
				}
				return n, whole
			}
			var limits []json.RawMessage
			for _, w := range kongRateWindows {
				if n, set := number(w.field); set {
					limits = append(limits, policyJSON(w.field, n, w.window))
				}
			}
			var quota json.RawMessage
			if n, set := number("month"); set {
				quota, _ = json.Marshal(map[string]any{"limit": n, "period": "month"})
			}
			if !ok {
				continue
			}
			lim.add(by == "credential", limits, quota)
		case "rate-limiting-advanced":
			limits, perCredential, ok := rateLimitingAdvanced(p.Config, unmapped)
			if ok {
				lim.add(perCredential, limits, nil)
			}
		case "ip-restriction":
			if deny, _ := p.Config["deny"].([]any); len(deny) > 0 {
				unmapped("ip-restriction denies addresses, and a key can only allow some")
			}
			allowed = append(allowed, asList(p.Config["allow"])...)
		case "acl", "key-auth":
			// acl deny lists: kongDenied; acl groups: the privileges map.
		default:
			if own[p.Name] {
				unmapped("plugin " + shown(p.Name) + ", which keygate has no equivalent of")
			}
		}
	}
	return lim, allowed
}

// add puts limits and quota on the consumer, or on each credential.
func (l *kongLimits) add(perCredential bool, limits []json.RawMessage, quota json.RawMessage) {
	if perCredential {
		l.perCredential = append(l.perCredential, limits...)
		if quota != nil {
			l.credentialQuota = quota
		}
		return
	}
	l.perConsumer = append(l.perConsumer, limits...)
	if quota != nil {
		l.consumerQuota = quota
	}
}

// policyJSON is a rate-limit policy as a create takes it.
func policyJSON(name string, limit, window int64) json.RawMessage {
	raw, _ := json.Marshal(map[string]any{"name": name, "limit": limit, "windowSeconds": window})
	return raw
}

// rateLimitingAdvanced maps the limits of a rate-limiting-advanced
// plugin (limit[i] requests in window_size[i] seconds) to policies
// named rla-Ns: apart from rate-limiting's second..day, so that a
// consumer's own and its plan's never share a name. Kong's sliding and
// fixed windows both become keygate's sliding one, which lets no more
// through in any window. The identifier must be the consumer (the
// default) or the credential.
func rateLimitingAdvanced(config map[string]any, unmapped func(string)) (limits []json.RawMessage, perCredential, ok bool) {
	ok = true
	id, _ := config["identifier"].(string)
	switch id {
	case "", "consumer":
	case "credential":
		perCredential = true
	default:
		unmapped("rate-limiting-advanced limits by " + id + ", not by consumer or credential")
		ok = false
	}
	if compound, _ := config["compound_identifier"].([]any); len(compound) > 0 {
		unmapped("rate-limiting-advanced limits by a compound identifier, not by consumer or credential")
		ok = false
	}
	counts, _ := config["limit"].([]any)
	windows, _ := config["window_size"].([]any)
	if len(counts) != len(windows) || len(counts) == 0 {
		unmapped("rate-limiting-advanced needs as many limit as window_size values, one at least")
		return nil, false, false
	}
	for i := range counts {
		n, okN := wholeConfig(counts[i])
		w, okW := wholeConfig(windows[i])
		switch {
		case !okN || !okW:
			unmapped("a rate-limiting-advanced limit or window_size that is not a positive whole number")
			ok = false
		case w > traffic.MaxRateWindow:
			unmapped("a rate-limiting-advanced window of " + strconv.FormatInt(w, 10) + " seconds, longer than the day a keygate policy can count")
			ok = false
		default:
			limits = append(limits, policyJSON("rla-"+strconv.FormatInt(w, 10)+"s", n, w))
		}
	}
	return limits, perCredential, ok
}

// kongScope decides, for a consumer in consumer group g (nil: none)
// whose own enabled plugins are own, which plan it takes as Kong's
// precedence says: a group's rate-limiting plugin applies unless the
// consumer has one of the same kind. A consumer whose own plugins
// override every limit of the group takes no plan, as on Kong (note
// says so); one that overrides some of them only is a problem, for a
// plan counts all its policies.
func kongScope(f *problem.Fields, where, who string, g *kongGroup, own map[string]bool) (plan *kongGroup, note string) {
	if g == nil || len(g.limits) == 0 {
		return nil, ""
	}
	var overridden, kept []string
	for _, name := range g.limits {
		if own[name] {
			overridden = append(overridden, name)
		} else {
			kept = append(kept, name)
		}
	}
	switch {
	case len(overridden) == 0:
		return g, ""
	case len(kept) == 0:
		return nil, fmt.Sprintf("its own %s overrides consumer group %s's, as on Kong: it takes no plan", strings.Join(overridden, " and "), keystore.ShownName(g.Name, g.line))
	}
	f.Add(where+".plugins", "unmapped", fmt.Sprintf("%s: its own %s overrides consumer group %s's but not its %s, and a plan is taken whole: import it by hand, or change the plugins first",
		who, strings.Join(overridden, " and "), keystore.ShownName(g.Name, g.line), strings.Join(kept, " and ")))
	return nil, ""
}
