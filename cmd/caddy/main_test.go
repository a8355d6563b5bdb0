package main

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// TestManifestMatchesBuild keeps xcaddy.json (for `make xcaddy`) and the
// blank imports of this build in step, and the Caddy version with go.mod.
func TestManifestMatchesBuild(t *testing.T) {
	raw, err := os.ReadFile("../../xcaddy.json")
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		CaddyVersion string `json:"caddy_version"`
		Plugins      []struct {
			ModulePath string `json:"module_path"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatalf("xcaddy.json: %v", err)
	}
	var want []string
	for _, p := range manifest.Plugins {
		want = append(want, p.ModulePath)
	}

	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if imp.Name != nil && imp.Name.Name == "_" && !strings.HasPrefix(path, "github.com/caddyserver/caddy/") {
			got = append(got, path)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(want, ",") != strings.Join(got, ",") {
		t.Errorf("xcaddy.json plugins %v, cmd/caddy imports %v", want, got)
	}

	modRaw, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", modRaw, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range mod.Require {
		if r.Mod.Path == "github.com/caddyserver/caddy/v2" && r.Mod.Version != manifest.CaddyVersion {
			t.Errorf("xcaddy.json caddy_version %s, go.mod requires %s", manifest.CaddyVersion, r.Mod.Version)
		}
	}
}
