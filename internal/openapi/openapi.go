// Package openapi holds keygate's two OpenAPI 3.1 documents: WebAPI, the
// Contract Signing and External Share APIs with the public pages' JSON
// forms and the webhook deliveries, and Admin, the administration API on
// Caddy's admin endpoint. The YAML sources are checked in beside this
// file and embedded; clients get them as JSON, in the sources' order.
// The integration tests validate every reply against them
// (internal/openapitest), so they describe what the code does.
package openapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"go.yaml.in/yaml/v3"
)

var (
	//go:embed webapi.yaml
	webapiYAML []byte
	//go:embed admin.yaml
	adminYAML []byte
)

// WebAPIYAML returns the Web API document's YAML source.
func WebAPIYAML() []byte { return bytes.Clone(webapiYAML) }

// AdminYAML returns the admin API document's YAML source.
func AdminYAML() []byte { return bytes.Clone(adminYAML) }

// The JSON forms are made once: the sources never change at run time.
var (
	webapiJSON = sync.OnceValues(func() ([]byte, error) { return ToJSON(webapiYAML, "") })
	adminJSON  = sync.OnceValues(func() ([]byte, error) { return ToJSON(adminYAML, "") })
)

// WebAPI returns the Web API document as compact JSON, its servers as in
// the source (the relative "/": the gateway that serves it).
func WebAPI() []byte { return bytes.Clone(must(webapiJSON())) }

// Admin returns the admin API document as compact JSON.
func Admin() []byte { return bytes.Clone(must(adminJSON())) }

// WebAPIFor returns the Web API document as compact JSON with serverURL
// (a gateway's public_base_url) as its only server; "" keeps the source's.
func WebAPIFor(serverURL string) ([]byte, error) { return ToJSON(webapiYAML, serverURL) }

// AdminFor returns the admin API document with serverURL (an admin
// endpoint such as http://localhost:2019) as its only server.
func AdminFor(serverURL string) ([]byte, error) { return ToJSON(adminYAML, serverURL) }

// must panics on an error of the embedded sources, which a test of this
// package catches before any build ships.
func must(b []byte, err error) []byte {
	if err != nil {
		panic("openapi: embedded document: " + err.Error())
	}
	return b
}

// ToJSON converts an OpenAPI document in YAML to compact JSON, keeping the
// order of every mapping (encoding/json would sort a map's keys, and the
// order of paths and properties is part of what a reader sees). With a
// serverURL, the document's servers become that one URL.
func ToJSON(src []byte, serverURL string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the document is not a YAML mapping")
	}
	root := doc.Content[0]
	if serverURL != "" {
		setServer(root, serverURL)
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, root, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// setServer makes url the only server of the document root.
func setServer(root *yaml.Node, url string) {
	servers := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{{
		Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "url"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: url},
		},
	}}}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "servers" {
			root.Content[i+1] = servers
			return
		}
	}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "servers"}, servers)
}

// maxDepth bounds the recursion; the documents nest about a dozen levels.
const maxDepth = 64

func writeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > maxDepth {
		return errors.New("the document nests too deeply")
	}
	switch n.Kind {
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias, depth+1)
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: only plain keys are allowed (no merge keys)", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: key %q repeated", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k.Value)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalar(buf, n)
	default:
		return fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	return nil
}

func writeScalar(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!str", "!!timestamp", "!!binary":
		writeString(buf, n.Value)
	case "!!null":
		buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return err
		}
		buf.WriteString(strconv.FormatBool(b))
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		buf.WriteString(strconv.FormatInt(i, 10))
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	default:
		return fmt.Errorf("line %d: unexpected scalar tag %s", n.Line, n.ShortTag())
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always encodes
	buf.Write(b)
}
