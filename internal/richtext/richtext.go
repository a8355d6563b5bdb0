// Package richtext turns the host platform's markup into what keygate
// shows of it: HTML safe for a public page (share pages, signing pages)
// and the syntax tree the contract PDFs are drawn from. One parser serves
// both, so a contract reads the same in the browser and on paper.
package richtext

import (
	"bytes"
	"crypto/sha256"
	"html/template"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Markdown names CommonMark, the one markup rendered; text in any other
// (Redmine's textile, say) is shown as typed.
const Markdown = "markdown"

// markdown renders the tracker's CommonMark (with GitHub's tables and
// strikethrough, as Redmine's common_mark formatter has them). Raw HTML
// in the source is left out by goldmark's default; what it renders is
// still cleaned by policy.
var markdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough))

// policy is the allow-list of what rendered rich text may hold on a
// public page: text structure, emphasis, lists, code, tables and links
// to http(s) and mailto addresses. No script, style, event handler,
// form, iframe or image survives (an image would load from anywhere;
// a share's own attachments are not served as images).
var policy = func() *bluemonday.Policy {
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

// HTML renders text written in markup (Markdown; anything else is shown
// as plain text) as HTML safe for a public page.
func HTML(markup, text string) template.HTML {
	if markup != Markdown {
		return Plain(text)
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

// Plain is text shown as typed: escaped, its line breaks kept by the
// page's style (class "text").
func Plain(text string) template.HTML {
	return template.HTML("<p class=\"text\">" + template.HTMLEscapeString(text) + "</p>")
}

// renderMarkdown renders CommonMark and cleans it with policy.
func renderMarkdown(text string) template.HTML {
	var b bytes.Buffer
	if err := markdown.Convert([]byte(text), &b); err != nil {
		return Plain(text)
	}
	return template.HTML("<div class=\"rich\">" + string(policy.SanitizeBytes(b.Bytes())) + "</div>")
}

// Parse reads CommonMark source into goldmark's syntax tree, for a
// renderer of its own (the contract PDFs); the nodes' text is read from
// source.
func Parse(source []byte) ast.Node {
	return markdown.Parser().Parse(text.NewReader(source))
}
