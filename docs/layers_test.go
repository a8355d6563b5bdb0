package docs

import (
	"bufio"
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's Go module.
const module = "github.com/keygate/keygate"

// layerRule is one edge the Layers section of contributors.md forbids:
// no package that from selects imports a package under one of mayNot.
type layerRule struct {
	why    string
	from   func(pkg string) bool
	mayNot []string
}

// under reports whether pkg is path or below it (paths relative to the
// module; "" is the whole module).
func under(pkg, path string) bool {
	return pkg == path || path == "" || strings.HasPrefix(pkg, path+"/")
}

func anyOf(paths ...string) func(string) bool {
	return func(pkg string) bool {
		for _, p := range paths {
			if under(pkg, p) {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

// assembly are the packages that compose the domain packages: the
// domain below them may not import them.
var assembly = []string{"caddymodule", "cmd", "migrate", "internal/stores"}

var layerRules = []layerRule{
	{
		why:    "only caddymodule and the binaries speak Caddy",
		from:   not(anyOf("caddymodule", "cmd", "internal/testkit", "internal/e2e")),
		mayNot: []string{"github.com/caddyserver/caddy"},
	},
	{
		why:    "the Web APIs know nothing of keys, of Caddy or of what composes them",
		from:   anyOf("upstreams"),
		mayNot: append([]string{"keystore"}, assembly...),
	},
	{
		why:    "keys know nothing of the Web APIs or of what composes them",
		from:   anyOf("keystore"),
		mayNot: append([]string{"upstreams"}, assembly...),
	},
	{
		// (The rule of keys above holds for it too.)
		why:    "traffic knows nothing of keys: keystore imports it, never the reverse",
		from:   anyOf("keystore/traffic"),
		mayNot: []string{"keystore"},
	},
	{
		why: "internal packages sit below keys and the Web APIs",
		from: func(p string) bool {
			return under(p, "internal") && !anyOf("internal/stores", "internal/testkit", "internal/e2e")(p)
		},
		mayNot: append([]string{"keystore", "upstreams"}, assembly...),
	},
	{
		why: "the product never imports a test kit",
		// The bench and the local Redmine are developer tools built on
		// the kits.
		from:   not(anyOf("internal/testkit", "internal/e2e", "cmd/keygate-bench", "cmd/keygate-redmine", "docs")),
		mayNot: []string{"internal/testkit", "internal/e2e"},
	},
	{
		why:    "nothing imports a binary",
		from:   anyOf(""),
		mayNot: []string{"cmd"},
	},
}

// TestLayers: go list shows the layers of contributors.md, with no
// import against them (tests' own imports aside: a test may reach any
// kit it needs).
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	packages := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg, ok := strings.CutPrefix(fields[0], module+"/")
		if !ok {
			continue
		}
		packages++
		for _, imp := range fields[1:] {
			rel := imp
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				rel = r
			} else if !strings.Contains(imp, ".") {
				continue // the standard library
			}
			for _, rule := range layerRules {
				if !rule.from(pkg) {
					continue
				}
				for _, banned := range rule.mayNot {
					if under(rel, banned) {
						t.Errorf("%s imports %s: %s", pkg, imp, rule.why)
					}
				}
			}
		}
	}
	if packages < 20 {
		t.Fatalf("go list named %d packages of the module; expected the whole module", packages)
	}
}

// storeFile is the name of a file that may speak bbolt or pgx: a store's
// own bolt*.go, postgres*.go or copy*.go (or storage_bolt.go ...).
var storeFile = regexp.MustCompile(`(^|_)(bolt|postgres|copy)(_[a-z0-9_]+)?\.go$`)

// TestDatabaseTypesStayInStores: no *bbolt.Tx or pgx type appears above
// the stores. Outside internal/storage, only a store's bbolt, PostgreSQL
// and copy files import bbolt or pgx.
func TestDatabaseTypesStayInStores(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "third_party", "bin", "data", "node_modules", "internal/storage", "internal/testkit":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if (p == "go.etcd.io/bbolt" || strings.HasPrefix(p, "github.com/jackc/pgx")) && !storeFile.MatchString(d.Name()) {
				t.Errorf("%s imports %s: only a store's bolt, postgres and copy files may", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files; expected the repository's", checked)
	}
}
