// Package docs holds the guides (operators, clients, administrators,
// contributors); its test checks every relative link of every Markdown
// file of the repository: the file exists, and the heading an anchor
// names is in it.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// link is a Markdown link or image: [text](target) or ![alt](target).
	link = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	// fence opens or closes a code block.
	fence = regexp.MustCompile("^\\s*```")
	// inlineCode is a code span, where brackets are not links.
	inlineCode = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation
// but hyphens and underscores dropped, spaces as hyphens.
func slug(h string) string {
	h = inlineCode.ReplaceAllStringFunc(h, func(c string) string { return strings.Trim(c, "`") })
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the anchors of a Markdown file's headings, a repeated
// heading numbered as GitHub numbers it.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// markdownFiles are the repository's Markdown files, outside
// node_modules and hidden directories.
func markdownFiles(t *testing.T, root string) []string {
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") || d.Name() == "data" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("only %d Markdown files under %s", len(files), root)
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		inCode := false
		for n, line := range strings.Split(string(raw), "\n") {
			if fence.MatchString(line) {
				inCode = !inCode
				continue
			}
			if inCode {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				where := rel + ":" + strconv.Itoa(n+1) + ": " + target
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: no such file", where)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: an anchor into a file that is not Markdown", where)
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				if !a[frag] {
					t.Errorf("%s: no heading with anchor #%s", where, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked", checked)
	}
}

// TestSlug holds the anchor rule to GitHub's on the headings these
// guides have.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Choices where the API documents are silent": "choices-where-the-api-documents-are-silent",
		"Moving from bbolt to PostgreSQL":            "moving-from-bbolt-to-postgresql",
		"The `caddy webapi` command":                 "the-caddy-webapi-command",
		"Keys and errors":                            "keys-and-errors",
		"Rate limits, quotas: what's new?":           "rate-limits-quotas-whats-new",
		"[Linked](x.md) heading":                     "linked-heading",
		"Zoë's page":                                 "zoës-page",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
