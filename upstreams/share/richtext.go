package share

import (
	"bytes"
	"crypto/sha256"
	"html/template"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

// markdown renders the tracker's CommonMark (with GitHub's tables and
// strikethrough, as Redmine's common_mark formatter has them). Raw HTML
// in the source is left out by goldmark's default; what it renders is
// still cleaned by richPolicy.
var markdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough))

// richPolicy is the allow-list of what rendered rich text may hold on a
// public page: text structure, emphasis, lists, code, tables and links
// to http(s) and mailto addresses. No script, style, event handler,
// form, iframe or image survives (an image would load from anywhere;
// the share's own attachments are not served as images).
var richPolicy = func() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	// What a script or style held is not text to show.
	p.SkipElementsContent("script", "style")
	p.AllowElements("p", "br", "hr", "strong", "em", "b", "i", "del", "s", "code", "pre", "blockquote",
		"ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td")
	p.AllowAttrs("href").OnElements("a")
	p.AllowURLSchemes("http", "https", "mailto")
	p.RequireParseableURLs(true)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return p
}()

// maxRendered bounds the rich texts kept rendered: a page opened often
// renders its description once, not at every request; maxRenderedText
// the size of one kept (64 MiB in all at most).
const (
	maxRendered     = 1000
	maxRenderedText = 64 << 10
)

// rendered keeps rich texts rendered, by the SHA-256 of their markdown.
var rendered struct {
	sync.Mutex
	m map[[32]byte]template.HTML
}

// richText renders text written in markup ("markdown"; anything else is
// shown as plain text) as HTML safe for a public page.
func richText(markup, text string) template.HTML {
	if markup != "markdown" {
		return template.HTML("<p class=\"text\">" + template.HTMLEscapeString(text) + "</p>")
	}
	if len(text) > maxRenderedText {
		return renderMarkdown(text) // rare and large: not kept
	}
	key := sha256.Sum256([]byte(text))
	rendered.Lock()
	html, ok := rendered.m[key]
	rendered.Unlock()
	if ok {
		return html
	}
	html = renderMarkdown(text)
	rendered.Lock()
	if rendered.m == nil || len(rendered.m) >= maxRendered {
		rendered.m = make(map[[32]byte]template.HTML, maxRendered)
	}
	rendered.m[key] = html
	rendered.Unlock()
	return html
}

// renderMarkdown renders CommonMark and cleans it with richPolicy.
func renderMarkdown(text string) template.HTML {
	var b bytes.Buffer
	if err := markdown.Convert([]byte(text), &b); err != nil {
		return template.HTML("<p class=\"text\">" + template.HTMLEscapeString(text) + "</p>")
	}
	return template.HTML("<div class=\"rich\">" + string(richPolicy.SanitizeBytes(b.Bytes())) + "</div>")
}
