package share

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/eventstest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// eventShare has a password and a list of selected users: neither the
// password nor its hash may reach an event.
const (
	eventPassword = "open sesame 42"
	eventShare    = `{"type":"ISSUE","issueId":"10001","projectId":"P1","password":"` + eventPassword + `",
		"fieldsConfig":{"fieldConfigs":{"summary":{"fieldPermissions":["VIEW"]}}}}`
)

// eventStep is one request and the events it must commit.
type eventStep struct {
	name string
	// run sends the request(s) and returns the record that the events'
	// data must equal (nil: no check of the data), as the API shows it.
	run func(t *testing.T, e *env, uuid string) map[string]any
	// want: the event types, in order.
	want []string
}

func TestShareEvents(t *testing.T) {
	ip := "203.0.113.9"
	cases := []struct {
		name  string
		steps []eventStep
	}{
		{
			name: "update and delete",
			steps: []eventStep{
				{"update refused: immutable field", func(t *testing.T, e *env, u string) map[string]any {
					wantProblem(t, e.call(alice, "PUT", "/webapi/share/"+u, `{"type":"ISSUE","issueId":"10002","projectId":"P1"}`), 400, "invalid_request", "issueId:immutable")
					return nil
				}, nil},
				{"update refused: unseen", func(t *testing.T, e *env, u string) map[string]any {
					wantProblem(t, e.call(dave, "PUT", "/webapi/share/"+u, `{"type":"ISSUE","issueId":"10001","projectId":"P1"}`), 404, "not_found")
					return nil
				}, nil},
				{"update refused: invalid body", func(t *testing.T, e *env, u string) map[string]any {
					wantProblem(t, e.call(alice, "PUT", "/webapi/share/"+u, `{"type":"ISSUE","issueId":"10001","projectId":"P1","expiration":1}`), 400, "invalid_request")
					return nil
				}, nil},
				{"update by a project admin", func(t *testing.T, e *env, u string) map[string]any {
					// The event's owner stays the creator, alice.
					w := e.call(bob, "PUT", "/webapi/share/"+u, `{"type":"ISSUE","issueId":"10001","projectId":"P1","expirationExpression":{"days":30}}`)
					if w.Code != http.StatusOK {
						t.Fatalf("update: %d %s", w.Code, w.Body)
					}
					return decode[map[string]any](t, w)
				}, []string{events.ShareUpdated}},
				{"delete refused", func(t *testing.T, e *env, u string) map[string]any {
					wantProblem(t, e.call(dave, "DELETE", "/webapi/share/"+u, nil), 404, "not_found")
					wantProblem(t, e.call(alice, "DELETE", "/webapi/share/not-a-uuid", nil), 404, "not_found")
					return nil
				}, nil},
				{"delete", func(t *testing.T, e *env, u string) map[string]any {
					// The data is the share as a get showed it just
					// before, the unflushed opening counted.
					e.page("GET", "/s/"+u, jsonAccept, "", "", ip, e.unlock(t, u))
					before := decode[map[string]any](t, e.call(alice, "GET", "/webapi/share/"+u, nil))
					if before["openedCount"] != 1.0 {
						t.Fatalf("openedCount %v before the delete", before["openedCount"])
					}
					if w := e.call(alice, "DELETE", "/webapi/share/"+u, nil); w.Code != http.StatusNoContent {
						t.Fatalf("delete: %d %s", w.Code, w.Body)
					}
					if err := e.store.Flush(); err != nil {
						t.Fatal(err)
					}
					return before
				}, []string{events.ShareDeleted}},
			},
		},
		{
			name: "views",
			steps: []eventStep{
				{"views wait for the flush", func(t *testing.T, e *env, u string) map[string]any {
					c := e.unlock(t, u)
					e.page("GET", "/s/"+u, jsonAccept, "", "", ip, c)
					e.page("HEAD", "/s/"+u, jsonAccept, "", "", ip, c)
					e.page("GET", "/s/"+u, htmlAccept, "", "", ip, c)
					e.page("POST", "/s/"+u+"/unlock", jsonAccept, formType, url.Values{"password": {"wrong"}}.Encode(), ip)
					return nil
				}, nil},
				{"flush tells each view", func(t *testing.T, e *env, u string) map[string]any {
					if err := e.store.Flush(); err != nil {
						t.Fatal(err)
					}
					return decode[map[string]any](t, e.call(alice, "GET", "/webapi/share/"+u, nil))
				}, []string{events.ShareViewed, events.ShareViewed}},
				{"nothing more to flush", func(t *testing.T, e *env, u string) map[string]any {
					if err := e.store.Flush(); err != nil {
						t.Fatal(err)
					}
					return nil
				}, nil},
				{"a failed flush tells nothing, the next one does", func(t *testing.T, e *env, u string) map[string]any {
					e.page("GET", "/s/"+u, jsonAccept, "", "", ip, e.unlock(t, u))
					e.failWrites(true)
					if err := e.store.Flush(); err == nil {
						t.Fatal("flush with refused writes succeeded")
					}
					if got := e.events.Take(t); len(got) != 0 {
						t.Fatalf("failed flush: events %v", eventstest.Types(got))
					}
					e.failWrites(false)
					if err := e.store.Flush(); err != nil {
						t.Fatal(err)
					}
					return decode[map[string]any](t, e.call(alice, "GET", "/webapi/share/"+u, nil))
				}, []string{events.ShareViewed}},
				{"views of a share deleted before the flush", func(t *testing.T, e *env, u string) map[string]any {
					e.page("GET", "/s/"+u, jsonAccept, "", "", ip, e.unlock(t, u))
					if err := e.store.Delete(t.Context(), alice, u); err != nil {
						t.Fatal(err)
					}
					if err := e.store.Flush(); err != nil {
						t.Fatal(err)
					}
					return nil
				}, []string{events.ShareDeleted}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				e := newEnv(t, db)
				refused := e.call(alice, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"10001","password":""}`)
				wantProblem(t, refused, 400, "invalid_request")
				if got := e.events.Take(t); len(got) != 0 {
					t.Fatalf("refused create: events %v", eventstest.Types(got))
				}
				w := e.call(alice, "POST", "/webapi/share", eventShare)
				if w.Code != http.StatusCreated {
					t.Fatalf("create: %d %s", w.Code, w.Body)
				}
				sh := decode[map[string]any](t, w)
				u := sh["uuid"].(string)
				checkShareEvents(t, e, e.events.Take(t), []string{events.ShareCreated}, sh)
				for _, st := range tc.steps {
					e.clock.Advance(time.Minute)
					t.Run(st.name, func(t *testing.T) {
						// The env's helpers fail the step, not its parent.
						parent := e.t
						e.t = t
						defer func() { e.t = parent }()
						want := st.run(t, e, u)
						checkShareEvents(t, e, e.events.Take(t), st.want, want)
					})
				}
			})
		})
	}
}

// unlock opens the password of the share named u and returns the cookie.
func (e *env) unlock(t *testing.T, u string) *http.Cookie {
	t.Helper()
	w := e.page("POST", "/s/"+u+"/unlock", jsonAccept, formType, url.Values{"password": {eventPassword}}.Encode(), "203.0.113.9")
	if w.Code != http.StatusNoContent {
		t.Fatalf("unlock: %d %s", w.Code, w.Body)
	}
	return unlockCookieOf(t, w)
}

// checkShareEvents compares got with the types want. Every event is
// alice's, of the share, at the clock's time (a view: at the view's),
// and holds no password; when record is set, the last event's data is
// record, and a run of share.viewed counts its openings up to it.
func checkShareEvents(t *testing.T, e *env, got []events.Event, want []string, record map[string]any) {
	t.Helper()
	if types := eventstest.Types(got); strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i, ev := range got {
		if ev.Owner != alice.Owner {
			t.Errorf("%s: owner %q", ev.Type, ev.Owner)
		}
		for _, secret := range []string{eventPassword, "password\"", "passwordHash", "$argon2"} {
			if strings.Contains(string(ev.Data), secret) {
				t.Errorf("%s: data holds %q: %s", ev.Type, secret, ev.Data)
			}
		}
		d := eventstest.Data(t, ev)
		if d["passwordProtected"] != true {
			t.Errorf("%s: passwordProtected %v", ev.Type, d["passwordProtected"])
		}
		if ev.Type != events.ShareViewed && !ev.At.Equal(e.clock.Now()) {
			t.Errorf("%s: at %v, want %v", ev.Type, ev.At, e.clock.Now())
		}
		if record == nil {
			continue
		}
		if ev.Type == events.ShareViewed {
			// The n-th of the run counts the openings before the run
			// and its own.
			n := record["openedCount"].(float64) - float64(len(got)-1-i)
			if d["openedCount"] != n {
				t.Errorf("view %d: openedCount %v, want %v", i, d["openedCount"], n)
			}
			if ev.At.After(e.clock.Now()) || ev.At.Before(e.clock.Now().Add(-2*time.Minute)) {
				t.Errorf("view %d at %v, clock at %v", i, ev.At, e.clock.Now())
			}
		}
		if i == len(got)-1 && !reflect.DeepEqual(d, record) {
			t.Errorf("%s: data\n%s\nwant\n%v", ev.Type, ev.Data, record)
		}
	}
}

// TestShareEventOwnerIsTheCreator: an admin's update or delete of another
// owner's share is told to the creator's subscriptions.
func TestShareEventOwnerIsTheCreator(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		for _, tc := range []struct {
			creator, actor *access.Identity
		}{{carol, root}, {alice, bob}, {root, root}} {
			sh := e.create(tc.creator, issueShare("I-"+tc.creator.Owner, "P1"))
			if _, err := e.store.Update(t.Context(), tc.actor, sh.UUID, issueShare("I-"+tc.creator.Owner, "P1")); err != nil {
				t.Fatal(err)
			}
			if err := e.store.Delete(t.Context(), tc.actor, sh.UUID); err != nil {
				t.Fatal(err)
			}
			got := e.events.Take(t)
			if types := strings.Join(eventstest.Types(got), " "); types != "share.created share.updated share.deleted" {
				t.Fatalf("events %s", types)
			}
			for _, ev := range got {
				var d Share
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatal(err)
				}
				if ev.Owner != tc.creator.Owner || d.UUID != sh.UUID || d.CreatedBy != tc.creator.Owner {
					t.Errorf("%s by %s: owner %s, data %s", ev.Type, tc.actor.Owner, ev.Owner, ev.Data)
				}
			}
		}
	})
}
