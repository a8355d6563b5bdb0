package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// axeDir holds axe/package-lock.json, which pins axe-core, and what npm
// installs from it, beside this source file so that any package's test
// finds it.
var axeDir = func() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "axe")
}()

// axeSource returns axe-core's script, failing t unless the version
// installed is the lock file's.
func axeSource(t testing.TB) (src []byte, version string) {
	t.Helper()
	const install = "run `make test-deps` (scripts/test-deps.sh), which installs it with npm ci"
	var lock struct {
		Packages map[string]struct{ Version string }
	}
	var installed struct{ Version string }
	b, err := os.ReadFile(filepath.Join(axeDir, "package-lock.json"))
	if err == nil {
		err = json.Unmarshal(b, &lock)
	}
	if err != nil {
		t.Fatalf("axe-core's lock file: %v", err)
	}
	want := lock.Packages["node_modules/axe-core"].Version
	if b, err = os.ReadFile(filepath.Join(axeDir, "node_modules", "axe-core", "package.json")); err == nil {
		err = json.Unmarshal(b, &installed)
	}
	if err == nil {
		src, err = os.ReadFile(filepath.Join(axeDir, "node_modules", "axe-core", "axe.min.js"))
	}
	if err != nil {
		t.Fatalf("axe-core is not installed (%v): %s", err, install)
	}
	if installed.Version != want {
		t.Fatalf("axe-core %s is installed, the lock file wants %s: %s", installed.Version, want, install)
	}
	return src, want
}

// axeViolation is what Axe reports of one of axe-core's violations.
type axeViolation struct {
	ID      string
	Impact  string
	Help    string
	HelpURL string
	Nodes   []struct{ Target, HTML, Summary string }
}

// runAxe runs axe-core on the whole document and keeps of its violations
// only what the report needs; the promise is awaited by Runtime.evaluate.
const runAxe = `axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations.map(v => ({
	id: v.id, impact: v.impact || "", help: v.help, helpURL: v.helpUrl,
	nodes: v.nodes.map(n => ({
		target: n.target.map(s => Array.isArray(s) ? s.join(" >>> ") : s).join(", "),
		html: n.html, summary: n.failureSummary || "",
	})),
})))`

// Axe runs axe-core (axe/package-lock.json's version) on the page that
// the tab of ctx shows now, and fails t (Errorf) for each serious or
// critical violation, naming the rule, its help and the elements; minor
// and moderate ones are only logged. what names the page and its state
// in the report. axe-core is evaluated through the DevTools protocol,
// which the page's Content-Security-Policy does not restrict, so pages
// are checked under their own strict policy.
func Axe(t testing.TB, ctx context.Context, what string) {
	t.Helper()
	src, version := axeSource(t)
	// A page that ran the check before keeps axe: evaluating it twice
	// would only redefine it.
	loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof axe === "object" && typeof axe.run === "function"`))
	if err == nil && !loaded {
		_, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](string(src)))
	}
	if err != nil {
		t.Fatalf("axe-core on %s: load: %v", what, err)
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](runAxe, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("axe-core on %s: run: %v", what, err)
	}
	var minor []string
	for _, v := range violations {
		if v.Impact != "serious" && v.Impact != "critical" {
			minor = append(minor, v.ID+" ("+v.Impact+")")
			continue
		}
		t.Errorf("axe-core on %s: %s violation %s: %s (%s)%s", what, v.Impact, v.ID, v.Help, v.HelpURL, nodes(v))
	}
	slices.Sort(minor)
	list := ""
	if len(minor) > 0 {
		list = ": " + strings.Join(minor, ", ")
	}
	t.Logf("axe-core %s on %s: %d serious or critical, %d minor or moderate violations%s", version, what, len(violations)-len(minor), len(minor), list)
}

// nodes lists a violation's first elements, their markup clipped.
func nodes(v axeViolation) string {
	const most = 5
	var b strings.Builder
	for i, n := range v.Nodes {
		if i == most {
			fmt.Fprintf(&b, "\n\t… and %d more", len(v.Nodes)-most)
			break
		}
		fmt.Fprintf(&b, "\n\t%s: %s", n.Target, clip(n.HTML, 200))
		if n.Summary != "" {
			fmt.Fprintf(&b, "\n\t\t%s", strings.ReplaceAll(clip(n.Summary, 300), "\n", "\n\t\t"))
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
