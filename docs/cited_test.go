package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cited is a document named in a comment or a guide: name.md, with or
// without a path.
var cited = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)

// citedExamples are names that stand for no file: the examples of this
// package's own tests.
var citedExamples = map[string]bool{"x.md": true, "name.md": true}

// TestCitedDocumentsExist: no code comment, migration, OpenAPI document,
// page or guide cites a document the repository does not hold, so that
// every reference a newcomer follows leads somewhere. A bare name must be
// a Markdown file of the repository; a path, one relative to the citing
// file or to the repository's root.
func TestCitedDocumentsExist(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{} // base names of the repository's Markdown files
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "data":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.Contains(path, string(filepath.Separator)+"third_party"+string(filepath.Separator)) {
			// Copies of other projects: their notes may be cited, their
			// own text is theirs.
			if filepath.Ext(path) == ".md" {
				held[d.Name()] = true
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md":
			held[d.Name()] = true
			files = append(files, path)
		case ".go", ".sql", ".yaml", ".yml", ".js", ".html", ".css", ".sh", ".caddyfile", ".json":
			files = append(files, path)
		default:
			if d.Name() == "Makefile" || d.Name() == "Caddyfile" {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, name := range cited.FindAllString(string(b), -1) {
			name = strings.TrimPrefix(name, "./")
			if citedExamples[name] || strings.Contains(name, "://") {
				continue
			}
			checked++
			if !strings.Contains(name, "/") {
				if !held[name] {
					t.Errorf("%s cites %s, which the repository does not hold", rel, name)
				}
				continue
			}
			if !exists(filepath.Join(filepath.Dir(path), name)) && !exists(filepath.Join(root, name)) {
				t.Errorf("%s cites %s, which the repository does not hold", rel, name)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d citations checked: the walk missed the repository", checked)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
