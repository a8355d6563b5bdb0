package signing

import (
	"crypto/rand"
	"encoding/base64"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// pageData is what the page template shows. View is nil on a page that
// only carries a message (an unknown link).
type pageData struct {
	Status  int
	Title   string
	Message string   // an error for the person reading
	Details []string // the invalid fields of that error
	Notice  string   // what a successful form post did
	Token   string   // the signing token, for the relative form actions
	View    *pageView
	Nonce   string
}

// Offers reports whether the signer may sign with method m.
func (v *pageView) Offers(m string) bool { return slices.Contains(v.Signer.SigningMethods, m) }

// NeedsOTP reports whether deciding takes a one-time password.
func (v *pageView) NeedsOTP() bool { return v.Signer.OTPMethod != "none" }

// human shows an API timestamp as the messages do.
func human(ts string) string {
	t, err := time.Parse(timestampLayout, ts)
	if err != nil {
		return ts
	}
	return humanTime(t)
}

// writePage renders d. The page's only script is inline with a fresh
// nonce; the Content-Security-Policy allows nothing else: no external
// resource, no frame, forms posting only to this origin.
func writePage(w http.ResponseWriter, d *pageData) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		panic("signing: crypto/rand failed: " + err.Error())
	}
	// base64url, which CSP allows: no "+" for html/template to turn
	// into an entity in the attribute.
	d.Nonce = base64.RawURLEncoding.EncodeToString(nonce[:])
	if d.Title == "" && d.View != nil {
		d.Title = d.View.Contract.Name
	}
	h := w.Header()
	problem.SecureHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'unsafe-inline'; img-src data: blob:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(d.Status)
	_ = pageTemplate.Execute(w, d)
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"human": human}).Parse(`<!doctype html>
<html lang="en" class="nojs">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{{.Title}}</title>
<style>
:root{--ink:#172b4d;--muted:#5e6c84;--line:#dfe1e6;--blue:#0052cc;--bg:#f4f5f7}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--ink);margin:0;line-height:1.5}
main{max-width:50rem;margin:2rem auto;padding:0 1rem 3rem}
.card{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(9,30,66,.2);padding:1.5rem 1.75rem;margin:0 0 1.25rem}
h1{font-size:1.45rem;margin:0 0 .25rem}
h2{font-size:1.15rem;margin:0 0 .75rem}
h3{font-size:1rem;margin:0 0 .5rem}
.sub{color:var(--muted);margin:0}
.badge{display:inline-block;font-size:.8rem;font-weight:600;text-transform:uppercase;letter-spacing:.03em;padding:.1rem .5rem;border-radius:3px;vertical-align:middle;background:#dfe1e6}
.badge.signed{background:#e3fcef;color:#006644}.badge.rejected,.badge.expired{background:#ffebe6;color:#bf2600}.badge.ongoing{background:#deebff;color:#0747a6}
.msg{background:#ffebe6;color:#bf2600;padding:.7rem .9rem;border-radius:4px;margin:0 0 1rem}
.msg ul{margin:.3rem 0 0;padding-left:1.2rem}
.notice{background:#e3fcef;color:#006644;padding:.7rem .9rem;border-radius:4px;margin:0 0 1rem}
.doc .body{word-wrap:break-word;border-top:1px solid var(--line);padding-top:.75rem}
.doc .body .text{white-space:pre-wrap;margin:0}
.doc .body pre{overflow-x:auto;background:#f4f5f7;padding:.5rem}
ol.signers{margin:.25rem 0 0;padding-left:1.3rem}
ol.signers li{margin:.15rem 0}
.d-signed{color:#006644;font-weight:600}.d-rejected{color:#bf2600;font-weight:600}.d-none{color:var(--muted)}
.state{font-weight:600}
form{margin:0}
label{display:block;font-size:.9rem;color:var(--muted);margin:.6rem 0 .25rem}
input[type=text],input:not([type]),input[type=file],textarea{font:inherit;width:100%;padding:.45rem .55rem;border:1px solid #c1c7d0;border-radius:4px;background:#fff}
input.otp{width:9rem;letter-spacing:.3em;font-variant-numeric:tabular-nums}
textarea{min-height:5rem}
button{font:inherit;padding:.5rem 1.1rem;border:0;border-radius:4px;background:var(--blue);color:#fff;cursor:pointer;margin-top:.8rem}
button.secondary{background:#ebecf0;color:var(--ink)}
button.danger{background:#de350b}
.tabs{display:flex;gap:.4rem;margin:.25rem 0 .75rem}
.tabs button{margin:0;background:#ebecf0;color:var(--ink)}
.tabs button[aria-selected=true]{background:var(--blue);color:#fff}
.nojs .tabs{display:none}
.js .method:not(.active){display:none}
.nojs .method{border-top:1px solid var(--line);padding-top:.75rem;margin-top:.75rem}
canvas{display:block;width:100%;max-width:600px;aspect-ratio:3/1;border:1px dashed #8993a4;border-radius:4px;background:#fff;touch-action:none;cursor:crosshair}
.preview{font-family:"Brush Script MT","Segoe Script","Lucida Handwriting",cursive;font-size:2rem;min-height:3rem;border-bottom:1px solid var(--ink);margin-top:.5rem;max-width:600px;overflow:hidden;white-space:nowrap}
.hint{color:var(--muted);font-size:.85rem;margin:.3rem 0 0}
</style>
</head>
<body>
<main>
{{with .View}}
<section class="card">
<h1>{{.Contract.Name}} <span class="badge {{.Contract.Status}}" id="status">{{.Contract.Status}}</span></h1>
{{if .DocumentURL}}<p class="sub">For {{.Signer.FullName}} · Signed by everyone · <a href="{{.DocumentURL}}" download>Download the signed document (PDF, sealed)</a> · <a href="{{.CertificateURL}}" download>Download its certificate of completion (PDF, sealed)</a></p>
{{else if eq .DocumentStatus "being_sealed"}}<p class="sub" role="status">For {{.Signer.FullName}} · Signed by everyone · The signed document and its certificate of completion are being sealed: <a href="">reload this page</a> in a few seconds to download them.</p>
{{else}}<p class="sub">For {{.Signer.FullName}} · open for signing until {{human .Contract.ExpirationTimestamp}}</p>{{end}}
</section>
{{end}}
{{with .Notice}}<p class="notice" role="status" id="notice">{{.}}</p>{{end}}
{{if .Message}}<div class="msg" role="alert" id="message">{{.Message}}{{with .Details}}<ul>{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}</div>{{end}}
{{with .View}}
<section class="card doc">
<h2>{{.Contract.Document.Title}}</h2>
{{with .Contract.Document.Source}}<p class="hint">The text of {{.}}.</p>{{end}}
<div class="body">{{.Contract.Document.HTML}}</div>
</section>

<section class="card">
<h2>Signers</h2>
<ol class="signers">
{{range .Signers}}<li>{{.FullName}}{{if .You}} (you){{end}} — {{if eq .Decision "signed"}}<span class="d-signed">signed</span>{{else if eq .Decision "rejected"}}<span class="d-rejected">rejected</span>{{else}}<span class="d-none">not decided yet</span>{{end}}</li>
{{end}}</ol>
{{if .Contract.SequentialSigning}}<p class="hint">Signers decide one after the other, in this order.</p>{{end}}
</section>

<section class="card" id="decide">
{{if .CanDecide}}
{{if .NeedsOTP}}
<h2>1. Get your one-time password</h2>
<p class="sub">We send a 6-digit password by {{if eq .Signer.OTPMethod "sms"}}text message{{else}}e-mail{{end}} to {{.Signer.OTPDestination}}. It is valid for 10 minutes.</p>
<form method="post" action="{{$.Token}}/otp" id="otp-form"><button type="submit" id="otp-request" class="secondary">Send me a password</button></form>
<h2 style="margin-top:1.5rem">2. Sign</h2>
{{else}}<h2>Sign</h2>{{end}}
<div class="tabs" role="tablist">
{{if .Offers "draw"}}<button type="button" role="tab" data-method="draw" id="tab-draw">Draw</button>{{end}}
{{if .Offers "render"}}<button type="button" role="tab" data-method="render" id="tab-render">Type your name</button>{{end}}
{{if .Offers "upload"}}<button type="button" role="tab" data-method="upload" id="tab-upload">Upload an image</button>{{end}}
</div>
{{if .Offers "draw"}}
<form method="post" action="{{$.Token}}/decision" class="method" data-method="draw" id="form-draw">
<input type="hidden" name="decision" value="signed"><input type="hidden" name="method" value="draw">
<input type="hidden" name="signature" id="pad-data">
<label for="pad">Draw your signature with the mouse, a pen or a finger</label>
<canvas id="pad" width="600" height="200"></canvas>
<button type="button" class="secondary" id="pad-clear">Clear</button>
{{template "otp" $}}
<button type="submit" id="sign-draw">Sign the contract</button>
</form>
{{end}}
{{if .Offers "render"}}
<form method="post" action="{{$.Token}}/decision" class="method" data-method="render" id="form-render">
<input type="hidden" name="decision" value="signed"><input type="hidden" name="method" value="render">
<label for="typed-name">Type your name as your signature</label>
<input type="text" name="signature" id="typed-name" value="{{.Signer.FullName}}" maxlength="255" required autocomplete="name">
<div class="preview" id="typed-preview" aria-hidden="true">{{.Signer.FullName}}</div>
{{template "otp" $}}
<button type="submit" id="sign-render">Sign the contract</button>
</form>
{{end}}
{{if .Offers "upload"}}
<form method="post" action="{{$.Token}}/decision" enctype="multipart/form-data" class="method" data-method="upload" id="form-upload">
<input type="hidden" name="decision" value="signed"><input type="hidden" name="method" value="upload">
<label for="upload-file">A PNG or JPEG image of your signature, at most 1 MiB</label>
<input type="file" name="signature" id="upload-file" accept="image/png,image/jpeg" required>
{{template "otp" $}}
<button type="submit" id="sign-upload">Sign the contract</button>
</form>
{{end}}
<details style="margin-top:1.5rem">
<summary>Reject the contract</summary>
<form method="post" action="{{$.Token}}/decision" id="form-reject">
<input type="hidden" name="decision" value="rejected">
<label for="reason">Reason (optional; the people who follow the contract read it)</label>
<textarea name="reason" id="reason" maxlength="2000"></textarea>
{{template "otp" $}}
<button type="submit" class="danger" id="reject">Reject the contract</button>
</form>
</details>
{{else}}
<p class="state" id="state">{{if .Signer.Decision}}You {{.Signer.Decision}} this contract on {{human .Signer.DecisionTimestamp}}.{{else}}{{.Blocked}}{{end}}</p>
{{if eq .Contract.Status "signed"}}<p class="sub">Every signer has signed: the contract is complete.</p>{{end}}
{{end}}
</section>
{{else}}
<section class="card"><h1>{{.Title}}</h1></section>
{{end}}
</main>
<script nonce="{{.Nonce}}">
(function(){
document.documentElement.className = "js";
var otps = document.querySelectorAll("input.otp");
otps.forEach(function(el){ el.addEventListener("input", function(){ otps.forEach(function(o){ if (o !== el) o.value = el.value; }); }); });

var tabs = document.querySelectorAll(".tabs [data-method]");
function show(m){
	document.querySelectorAll("form.method").forEach(function(f){ f.classList.toggle("active", f.dataset.method === m); });
	tabs.forEach(function(t){ t.setAttribute("aria-selected", t.dataset.method === m ? "true" : "false"); });
}
tabs.forEach(function(t){ t.addEventListener("click", function(){ show(t.dataset.method); }); });
if (tabs.length) show(tabs[0].dataset.method);

var typed = document.getElementById("typed-name"), preview = document.getElementById("typed-preview");
if (typed) typed.addEventListener("input", function(){ preview.textContent = typed.value; });

var pad = document.getElementById("pad");
if (!pad) return;
var ctx = pad.getContext("2d"), drawing = false, drawn = false, last = null;
ctx.lineWidth = 3; ctx.lineCap = "round"; ctx.lineJoin = "round"; ctx.strokeStyle = "#0b1f4d";
function at(e){ var r = pad.getBoundingClientRect(); return {x: (e.clientX - r.left) * pad.width / r.width, y: (e.clientY - r.top) * pad.height / r.height}; }
pad.addEventListener("pointerdown", function(e){ drawing = true; last = at(e); if (pad.setPointerCapture) { try { pad.setPointerCapture(e.pointerId); } catch (_) {} } e.preventDefault(); });
pad.addEventListener("pointermove", function(e){
	if (!drawing) return;
	var p = at(e);
	ctx.beginPath(); ctx.moveTo(last.x, last.y); ctx.lineTo(p.x, p.y); ctx.stroke();
	last = p; drawn = true; e.preventDefault();
});
["pointerup", "pointercancel", "pointerleave"].forEach(function(n){ pad.addEventListener(n, function(){ drawing = false; }); });
document.getElementById("pad-clear").addEventListener("click", function(){ ctx.clearRect(0, 0, pad.width, pad.height); drawn = false; });
document.getElementById("form-draw").addEventListener("submit", function(e){
	if (!drawn) { e.preventDefault(); alert("Draw your signature first."); return; }
	document.getElementById("pad-data").value = pad.toDataURL("image/png");
});
})();
</script>
</body>
</html>
{{define "otp"}}{{if .View.NeedsOTP}}<label>One-time password<br>
<input name="otp" class="otp" inputmode="numeric" pattern="[0-9]{6}" maxlength="6" autocomplete="one-time-code" required></label>{{end}}{{end}}`))
