package share

import (
	"context"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/problem"
)

// The unlock limit holds whatever form the client's address takes, however
// the uuid is spelled and however many tries arrive at once.
func TestHostileUnlockLimitBypass(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		tests := []struct {
			name string
			// first spends the burst; then is refused.
			first, then string
		}{
			{"IPv4, then its IPv4-mapped IPv6 form", "203.0.113.7", "::ffff:203.0.113.7"},
			{"IPv4-mapped IPv6, then plain IPv4", "::ffff:198.51.100.9", "198.51.100.9"},
			{"another member of the same /64", "2001:db8:5:6::1", "2001:db8:5:6:ffff:ffff:ffff:fffe"},
			{"the same /64 written differently", "2001:db8:7:8::1", "2001:0db8:0007:0008:0000:0000:0000:0002"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, db)
				in := issueShare("I1", "")
				in.Password = Password("right")
				sh := e.create(alice, in)
				unlock := "/s/" + sh.UUID + "/unlock"
				for i := range unlockBurst {
					if w := e.page("POST", unlock, jsonAccept, formType, "password=wrong", tc.first); w.Code != 401 {
						t.Fatalf("attempt %d: %d", i, w.Code)
					}
				}
				wantProblem(t, e.page("POST", unlock, jsonAccept, formType, "password=wrong", tc.then), 429, "rate_limited")
			})
		}

		t.Run("uuid in capitals", func(t *testing.T) {
			e := newEnv(t, db)
			in := issueShare("I1", "")
			in.Password = Password("right")
			sh := e.create(alice, in)
			upper := "/s/" + strings.ToUpper(sh.UUID) + "/unlock"
			// Not the share at all, so no separate budget of tries: 404.
			wantProblem(t, e.page("POST", upper, jsonAccept, formType, "password=right", "203.0.113.7"), 404, "not_found")
			if w := e.page("GET", "/s/"+strings.ToUpper(sh.UUID), jsonAccept, "", "", "203.0.113.7"); w.Code != 404 {
				t.Fatalf("GET in capitals: %d", w.Code)
			}
		})

		t.Run("parallel tries", func(t *testing.T) {
			e := newEnv(t, db)
			in := issueShare("I1", "")
			in.Password = Password("right")
			sh := e.create(alice, in)
			unlock := "/s/" + sh.UUID + "/unlock"
			const n = 40
			codes := make([]int, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					w := e.page("POST", unlock, jsonAccept, formType, "password=wrong", "203.0.113.50")
					codes[i] = w.Code
				}()
			}
			close(start)
			wg.Wait()
			tried := 0
			for _, c := range codes {
				switch c {
				case 401:
					tried++
				case 429:
				default:
					t.Fatalf("status %d", c)
				}
			}
			if tried != unlockBurst {
				t.Fatalf("%d of %d parallel wrong passwords were tried, want %d", tried, n, unlockBurst)
			}
		})
	})
}

// Stored and reflected text on the share page comes out escaped: in
// element content, in attribute values and in the title; nothing a share's
// creator or a visitor writes becomes markup or a script.
func TestHostileSharePageEscapes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		const (
			script = `<script>alert(1)</script>`
			img    = `"><img src=x onerror=alert(1)>`
			jsURL  = `javascript:alert(1)`
		)
		e := newEnv(t, db)
		create := func(in *CreateRequest) *Share {
			t.Helper()
			sh, err := e.store.Create(context.Background(), alice, in)
			if err != nil {
				t.Fatalf("create: %+v", err.(*problem.Details).Errors)
			}
			return sh
		}
		issue := create(&CreateRequest{Type: TypeIssue, IssueID: str(img + jsURL), ProjectID: str(script),
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{img: {FieldPermissions: []string{PermView}}}}})
		jql := create(&CreateRequest{Type: TypeJQL, ProjectID: str(img), JQL: str(`project = X AND summary ~ "` + script + img + `"`)})
		gated := create(&CreateRequest{Type: TypeIssue, IssueID: str("I1"),
			SelectedUsersConfig: &SelectedUsersConfig{Allowed: true, List: []SelectedUser{{Email: "ann@example.com"}}}})

		pages := []struct {
			name, method, path, contentType, body string
		}{
			{"issue with hostile ids", "GET", "/s/" + issue.UUID, "", ""},
			{"jql share", "GET", "/s/" + jql.UUID, "", ""},
			// The e-mail a visitor typed is shown again in the form.
			{"reflected e-mail", "POST", "/s/" + gated.UUID + "/unlock", formType, "email=" + strings.ReplaceAll(img+script, "&", "%26")},
		}
		for _, p := range pages {
			t.Run(p.name, func(t *testing.T) {
				w := e.page(p.method, p.path, htmlAccept, p.contentType, p.body, "203.0.113.9")
				body := w.Body.String()
				if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
					t.Fatalf("%d %s", w.Code, w.Header())
				}
				// The share page has no script of its own, and no image.
				for _, bad := range []string{"<script", "<img", `="javascript:`} {
					if strings.Contains(body, bad) {
						t.Errorf("page holds %q unescaped:\n%s", bad, body)
					}
				}
				if !strings.Contains(body, "&lt;") {
					t.Errorf("hostile text not shown escaped:\n%s", body)
				}
			})
		}
	})
}
