package richtext

import (
	"strings"
	"testing"
)

// TestHTML: Markdown is rendered and cleaned of everything that could
// run, load or post; any other markup is shown as typed.
func TestHTML(t *testing.T) {
	const hostile = "**bold** and _it_\n\n- one\n- two\n\n<script>alert(1)</script>\n\n" +
		"[click](javascript:alert(1)) [ok](https://example.com/x) ![img](http://evil.example/x.png)\n\n" +
		"<img src=x onerror=alert(1)><iframe src=\"https://evil.example\"></iframe><form action=/x></form>\n\n" +
		"<a href=\"https://example.com\" onclick=\"alert(1)\" style=\"color:red\">raw</a>"
	for _, tt := range []struct {
		name, markup string
		want, not    []string
	}{
		{name: "markdown", markup: "markdown",
			want: []string{"<strong>bold</strong>", "<em>it</em>", "<li>one</li>", `<a href="https://example.com/x" rel="nofollow noreferrer noopener" target="_blank">ok</a>`},
			not:  []string{"<script", "javascript:", "<img", "onerror", "<iframe", "<form", "onclick", "style=", "evil.example"}},
		{name: "textile shown as typed", markup: "textile",
			want: []string{"**bold**", "&lt;script&gt;alert(1)&lt;/script&gt;"},
			not:  []string{"<script", "<strong>", "<img"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := string(HTML(tt.markup, hostile))
			for _, s := range tt.want {
				if !strings.Contains(got, s) {
					t.Errorf("lacks %q:\n%s", s, got)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(got, s) {
					t.Errorf("holds %q:\n%s", s, got)
				}
			}
		})
	}
}
