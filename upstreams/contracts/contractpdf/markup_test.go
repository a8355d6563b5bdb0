package contractpdf

import (
	"slices"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/testkit/pdftest"
)

// TestMarkdownBody: a text copied from the tracker in Markdown is drawn
// as the tracker shows it, not as its source: headings large and bold,
// bold and italic runs in their faces, list items with their bullets or
// numbers, and no markup characters left on the page.
func TestMarkdownBody(t *testing.T) {
	in := sampleInput(t)
	in.Markup = "markdown"
	in.TemplateSource = "wiki page NDA of project acme, version 3"
	in.Body = "# Terms\n\nThe **Supplier** keeps *all* information ***strictly*** confidential.\n\n" +
		"## Duties\n\n- keep records\n- report breaches\n  1. within a day\n  2. in writing\n\n" +
		"3. third\n4. fourth\n\n> Quoted clause.\n\n---\n\nSee [the policy](https://example.com/policy).\n\n" +
		"<script>alert(1)</script>\n\n| Party | Role |\n|---|---|\n| Acme | Supplier |\n"
	out, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	doc := pdftest.Read(t, out)
	// A run is the text of one line in one face: the word's run holds
	// it as a word of its own.
	face := func(text string) pdftest.Run {
		for _, r := range doc.Runs {
			if slices.Contains(strings.Fields(r.Text), text) {
				return r
			}
		}
		t.Errorf("no run %q in:\n%s", text, doc.Text)
		return pdftest.Run{}
	}
	for _, tt := range []struct {
		text, style string
		size        float64
	}{
		{"Terms", "B", 16},
		{"Duties", "B", 14},
		{"Supplier", "B", bodySize},
		{"all", "I", bodySize},
		{"strictly", "BI", bodySize},
		{"records", "", bodySize},
		{"•", "", bodySize},
		{"1.", "", bodySize},
		{"3.", "", bodySize},
		{"4.", "", bodySize},
		{"Party", "B", bodySize},
	} {
		// fpdf names a face of a family it embeds utf8{family}{style}.
		if r, font := face(tt.text), "utf8"+family+tt.style; r.Font != font || r.Size != tt.size {
			t.Errorf("%q set in %s %.1f pt, want %s %.1f pt", tt.text, r.Font, r.Size, font, tt.size)
		}
	}
	// Read as a person copying it out, the text is the rendered one.
	text := pdftest.Text(t, out)
	for _, want := range []string{"Text of wiki page NDA of project acme, version 3", "within a day", "Quoted clause.",
		"the policy (https://example.com/policy)", "Acme | Supplier"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	for _, not := range []string{"**", "# Terms", "## ", "> Quoted", "<script", "alert(1)", "[the policy]"} {
		if strings.Contains(text, not) {
			t.Errorf("text holds the markup %q:\n%s", not, text)
		}
	}

	// The same text without markup is drawn as typed.
	in.Markup = ""
	plain, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	if text := pdftest.Text(t, plain); !strings.Contains(text, "# Terms") || !strings.Contains(text, "**Supplier**") {
		t.Errorf("plain text was rendered as Markdown:\n%s", text)
	}
}

// TestMarkdownHostileNesting: nesting a page deep does not push the text
// off the page or take long: indentation stops at maxIndentLevels.
func TestMarkdownHostileNesting(t *testing.T) {
	in := sampleInput(t)
	in.Markup = "markdown"
	in.Body = strings.Repeat("> ", 5000) + "deep quote\n\n" + strings.Repeat("  ", 0)
	for i := range 50 {
		in.Body += strings.Repeat("  ", i) + "- level\n"
	}
	out, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	if text := pdftest.Text(t, out); !strings.Contains(text, "deep quote") || strings.Count(text, "level") < 50 {
		t.Errorf("deeply nested text is lost:\n%s", text)
	}
}

// TestCertificateNamesSource: the certificate names the tracker's page
// and version the contract's text was copied from.
func TestCertificateNamesSource(t *testing.T) {
	in := sampleInput(t)
	in.TemplateSource = "issue 42 of project acme, updated 2026-11-20T09:00:00Z"
	out, err := Certificate(in, strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	if text := pdftest.Text(t, out); !strings.Contains(text, "Copied from") || !strings.Contains(text, "issue 42 of project acme, updated 2026-11-20T09:00:00Z") {
		t.Errorf("certificate does not name the source:\n%s", text)
	}
	in.TemplateSource = ""
	out, err = Certificate(in, strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	if text := pdftest.Text(t, out); strings.Contains(text, "Copied from") {
		t.Errorf("a registry template's certificate names a source:\n%s", text)
	}
}

// TestMarkdownLongText: the longest text a contract holds (1 MiB), as one
// paragraph, one word or a run of emphasis, is drawn whole, as plain text
// is. (Each fpdf Write once got a whole paragraph and measured it again
// for every line: a 100 KB paragraph took 26 s, and 1 MiB never ended,
// in the transaction of the last signature.)
func TestMarkdownLongText(t *testing.T) {
	in := sampleInput(t)
	in.Markup = "markdown"
	for name, body := range map[string]string{
		"one paragraph": strings.Repeat("word ", (1<<20)/5-4) + "END",
		"one word":      strings.Repeat("x", 1<<20-3) + "END",
		"emphasis":      strings.Repeat("*a **b** c* ", (1<<20)/12-1) + "END",
	} {
		t.Run(name, func(t *testing.T) {
			in.Body = body
			out, err := Finalized(in)
			if err != nil {
				t.Fatal(err)
			}
			if text := pdftest.Read(t, out).Text; !strings.Contains(text, "END") {
				t.Error("the text's end is not in the PDF")
			}
		})
	}
}
