package keystore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

func mustPlan(t testing.TB, k *Keys, body string) Plan {
	t.Helper()
	p, err := k.CreatePlan(planInput(t, body))
	if err != nil {
		t.Fatalf("CreatePlan(%s): %v", body, err)
	}
	return p
}

func mustConsumer(t testing.TB, k *Keys, body string) Consumer {
	t.Helper()
	c, err := k.CreateConsumer(consumerInput(t, body))
	if err != nil {
		t.Fatalf("CreateConsumer(%s): %v", body, err)
	}
	return c
}

// problemOf returns err's status and "field:code" of each field error.
func problemOf(t testing.TB, err error) (int, []string) {
	t.Helper()
	d := problemtest.Of(t, err)
	return d.Status, problemtest.FieldCodes(t, d)
}

// TestScopesStored: plans and consumers are created, changed, listed,
// read back after a reopen and deleted; what may not be is refused with
// a problem naming the field, and changes nothing.
func TestScopesStored(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		free := mustPlan(t, e.keys, `{"name":"free","rateLimits":[{"name":"minute","limit":60,"windowSeconds":60}],"quota":{"limit":1000,"period":"day"}}`)
		pro := mustPlan(t, e.keys, `{"name":"pro","description":"paying","rateLimits":[{"name":"minute","limit":600,"windowSeconds":60}]}`)
		acme := mustConsumer(t, e.keys, `{"name":"ACME Corp","externalId":"kong-acme","planId":"`+pro.ID+`","rateLimits":[{"name":"second","limit":5,"windowSeconds":1}]}`)
		if acme.ExternalID == nil || *acme.ExternalID != "kong-acme" || acme.PlanID == nil || *acme.PlanID != pro.ID || acme.KeyCount != 0 {
			t.Fatalf("consumer %+v", acme)
		}
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"k","owner":"o","privileges":["get"],"consumerId":"`+acme.ID+`","planId":"`+free.ID+`"}`)
		if k.ConsumerID == nil || *k.ConsumerID != acme.ID || k.PlanID == nil || *k.PlanID != free.ID {
			t.Fatalf("key %+v", k)
		}
		// The plan's quota is the key's: shown in its view.
		if k.Quota != nil || k.QuotaUsed == nil || *k.QuotaUsed != 0 || k.QuotaResetsAt == nil {
			t.Errorf("key quota %v used %v resets %v", k.Quota, k.QuotaUsed, k.QuotaResetsAt)
		}

		bad := []struct {
			name   string
			do     func() error
			status int
			fields []string
		}{
			{"unknown consumerId", func() error {
				_, err := e.keys.Create(input(t, `{"service":"contracts","name":"x","owner":"o","privileges":["get"],"consumerId":"0b6f3a4e-2f60-4c55-9a55-4f4f3d3f8a11"}`))
				return err
			}, 400, []string{"consumerId:unknown"}},
			{"unknown planId on a key", func() error {
				_, err := e.keys.Update(k.ID, input(t, `{"planId":"not-an-id"}`))
				return err
			}, 400, []string{"planId:unknown"}},
			{"unknown planId on a consumer", func() error {
				_, err := e.keys.UpdateConsumer(acme.ID, consumerInput(t, `{"planId":"0b6f3a4e-2f60-4c55-9a55-4f4f3d3f8a11"}`))
				return err
			}, 400, []string{"planId:unknown"}},
			{"a key's policy named by its plan", func() error {
				_, err := e.keys.Update(k.ID, input(t, `{"rateLimits":[{"name":"minute","limit":5,"windowSeconds":60}]}`))
				return err
			}, 400, []string{"rateLimits[0].name:clashes"}},
			{"a key's quota beside its plan's", func() error {
				_, err := e.keys.Update(k.ID, input(t, `{"quota":{"limit":5,"period":"hour"}}`))
				return err
			}, 400, []string{"quota:clashes"}},
			{"a plan whose policy a consumer names", func() error {
				_, err := e.keys.UpdatePlan(pro.ID, planInput(t, `{"rateLimits":[{"name":"second","limit":9,"windowSeconds":1}]}`))
				return err
			}, 409, []string{"rateLimits[0].name:clashes"}},
			{"a consumer's policy named by its plan", func() error {
				_, err := e.keys.UpdateConsumer(acme.ID, consumerInput(t, `{"rateLimits":[{"name":"minute","limit":9,"windowSeconds":60}]}`))
				return err
			}, 400, []string{"rateLimits[0].name:clashes"}},
			{"a consumer deleted while it has keys", func() error { return e.keys.DeleteConsumer(acme.ID) }, 409, []string{"id:conflict"}},
			{"a plan deleted while in use", func() error { return e.keys.DeletePlan(free.ID) }, 409, []string{"id:conflict"}},
			{"a plan taken by a consumer deleted", func() error { return e.keys.DeletePlan(pro.ID) }, 409, []string{"id:conflict"}},
			{"a second externalId", func() error {
				_, err := e.keys.CreateConsumer(consumerInput(t, `{"name":"other","externalId":"kong-acme"}`))
				return err
			}, 409, []string{"externalId:conflict"}},
			{"a second plan name", func() error {
				_, err := e.keys.CreatePlan(planInput(t, `{"name":"free"}`))
				return err
			}, 409, []string{"name:conflict"}},
			{"a consumer without a name", func() error {
				_, err := e.keys.CreateConsumer(consumerInput(t, `{"externalId":"x\u0001"}`))
				return err
			}, 400, []string{"name:required", "externalId:invalid"}},
			{"names and externalId with spaces around them", func() error {
				_, err := e.keys.CreateConsumer(consumerInput(t, `{"name":" lead","externalId":"acme "}`))
				return err
			}, 400, []string{"name:invalid", "externalId:invalid"}},
			{"a consumer's description with an escape sequence", func() error {
				_, err := e.keys.CreateConsumer(consumerInput(t, `{"name":"esc","description":"before\u001b[31mRED\u001b]0;title\u0007"}`))
				return err
			}, 400, []string{"description:invalid"}},
			{"a plan's description changed to a right-to-left override", func() error {
				_, err := e.keys.UpdatePlan(pro.ID, planInput(t, `{"description":"invoice\u202eexe.pdf"}`))
				return err
			}, 400, []string{"description:invalid"}},
			{"a plan with a bad policy", func() error {
				_, err := e.keys.CreatePlan(planInput(t, `{"name":"p","rateLimits":[{"name":"Bad Name","limit":0,"windowSeconds":1}],"quota":{"limit":1,"period":"week"}}`))
				return err
			}, 400, []string{"rateLimits[0].name:invalid", "rateLimits[0].limit:out_of_range", "quota.period:invalid"}},
		}
		for _, tt := range bad {
			status, fields := problemOf(t, tt.do())
			if status != tt.status || !slices.Equal(fields, tt.fields) {
				t.Errorf("%s: %d %v, want %d %v", tt.name, status, fields, tt.status, tt.fields)
			}
		}

		// A plan change's clash names the holder by name and id.
		_, err := e.keys.UpdatePlan(pro.ID, planInput(t, `{"rateLimits":[{"name":"second","limit":9,"windowSeconds":1}]}`))
		if d := problemtest.Of(t, err); len(d.Errors) != 1 || d.Errors[0].Message != `consumer "ACME Corp" (`+acme.ID+`) has a policy named "second" of its own` {
			t.Errorf("the clash says %+v", d.Errors)
		}

		// Nothing of it was stored: a reopen reads what was made above.
		re := e.reopen(t)
		plans := map[string]Plan{}
		for _, p := range re.ListPlans() {
			plans[p.Name] = p
		}
		if len(plans) != 2 || plans["pro"].Description != "paying" || plans["free"].Quota == nil || plans["free"].Quota.Limit != 1000 {
			t.Errorf("plans after reopen: %+v", plans)
		}
		c, err := re.GetConsumer(acme.ID)
		if err != nil || c.Name != "ACME Corp" || c.KeyCount != 1 || len(c.RateLimits) != 1 || c.RateLimits[0].Limit != 5 {
			t.Errorf("consumer after reopen: %+v %v", c, err)
		}
		if g, _ := re.Get(k.ID); g.ConsumerID == nil || *g.ConsumerID != acme.ID || g.PlanID == nil || *g.PlanID != free.ID ||
			len(g.RateLimits) != 0 {
			t.Errorf("key after reopen: %+v", g)
		}

		// Taken apart in order: the key leaves its consumer and plan, then
		// the consumer and plans go.
		if _, err := e.keys.Update(k.ID, input(t, `{"consumerId":null,"planId":null}`)); err != nil {
			t.Fatal(err)
		}
		if err := e.keys.DeleteConsumer(acme.ID); err != nil {
			t.Fatal(err)
		}
		for _, p := range []Plan{free, pro} {
			if err := e.keys.DeletePlan(p.ID); err != nil {
				t.Fatalf("delete plan %s: %v", p.Name, err)
			}
		}
		if _, err := e.keys.GetConsumer(acme.ID); err != ErrConsumerNotFound {
			t.Errorf("deleted consumer: %v", err)
		}
		// The externalId and the plan names are free again.
		mustConsumer(t, e.keys, `{"name":"again","externalId":"kong-acme"}`)
		mustPlan(t, e.keys, `{"name":"free"}`)
		re = e.reopen(t)
		if len(re.ListPlans()) != 1 || len(re.ListConsumers()) != 1 {
			t.Errorf("after deletes: %d plans, %d consumers", len(re.ListPlans()), len(re.ListConsumers()))
		}
	})
}

// TestClashAcrossInstances: the clash rule holds between instances that
// share the database, whatever each has heard of the other's writes: an
// instance that has not yet read a plan's change (or a holder's) is
// refused by the write's own transaction, and nothing is stored.
func TestClashAcrossInstances(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		p := mustPlan(t, e.keys, `{"name":"x0"}`)
		c := mustConsumer(t, e.keys, `{"name":"xc0","planId":"`+p.ID+`"}`)
		k := mustCreate(t, e.keys, `{`+validContracts+`,"rateLimits":[{"name":"m","limit":7,"windowSeconds":60}]}`)
		p2 := mustPlan(t, e.keys, `{"name":"x2"}`)
		c2 := mustConsumer(t, e.keys, `{"name":"xc2","planId":"`+p2.ID+`"}`)
		// The other instance reads all of it once, and then no more.
		other := e.reopen(t)

		if _, err := e.keys.UpdatePlan(p.ID, planInput(t, `{"rateLimits":[{"name":"m","limit":5,"windowSeconds":60}]}`)); err != nil {
			t.Fatal(err)
		}
		// Its view of the plan is without "m".
		_, err := other.UpdateConsumer(c.ID, consumerInput(t, `{"rateLimits":[{"name":"m","limit":7,"windowSeconds":60}]}`))
		if status, fields := problemOf(t, err); status != 400 || !slices.Equal(fields, []string{"rateLimits[0].name:clashes"}) {
			t.Errorf("a consumer's policy the plan names meanwhile: %d %v", status, fields)
		}
		_, err = other.Update(k.ID, input(t, `{"planId":"`+p.ID+`"}`))
		if status, fields := problemOf(t, err); status != 400 || !slices.Equal(fields, []string{"planId:clashes"}) {
			t.Errorf("a key taking the plan that names its policy meanwhile: %d %v", status, fields)
		}

		// An import of a key that takes the plan, with a policy of its
		// own that the plan names meanwhile (an import reads the plans
		// again first; its write checks them once more).
		line := ImportKey{Line: 1, Input: *input(t, `{`+validContracts+`,"planId":"`+p.ID+`","rateLimits":[{"name":"m","limit":7,"windowSeconds":60}]}`)}
		_, err = other.Import(ImportSet{Keys: []ImportKey{line}}, false, nil)
		if status, fields := problemOf(t, err); status != 400 || !slices.Equal(fields, []string{"lines[1].rateLimits[0].name:clashes"}) {
			t.Errorf("an imported key taking the plan that names its policy meanwhile: %d %v", status, fields)
		}

		// The other way round: a holder's quota, then its plan's.
		if _, err := other.UpdateConsumer(c2.ID, consumerInput(t, `{"quota":{"limit":20,"period":"day"}}`)); err != nil {
			t.Fatal(err)
		}
		_, err = e.keys.UpdatePlan(p2.ID, planInput(t, `{"quota":{"limit":10,"period":"day"}}`))
		if status, fields := problemOf(t, err); status != 409 || !slices.Equal(fields, []string{"quota:clashes"}) {
			t.Errorf("a plan's quota beside a holder's, written meanwhile: %d %v", status, fields)
		}

		// At once: of a plan's change and a holder's that together would
		// clash, one is refused, every time.
		for round := range 20 {
			pr := mustPlan(t, e.keys, fmt.Sprintf(`{"name":"race%d"}`, round))
			cr := mustConsumer(t, e.keys, `{"name":"racer","planId":"`+pr.ID+`"}`)
			if err := other.Resync(); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() {
				_, err := e.keys.UpdatePlan(pr.ID, planInput(t, `{"rateLimits":[{"name":"m","limit":5,"windowSeconds":60}]}`))
				errs <- err
			}()
			go func() {
				_, err := other.UpdateConsumer(cr.ID, consumerInput(t, `{"rateLimits":[{"name":"m","limit":7,"windowSeconds":60}]}`))
				errs <- err
			}()
			if e1, e2 := <-errs, <-errs; e1 == nil && e2 == nil {
				t.Fatalf("round %d: the plan and its consumer both took a policy m", round)
			}
		}

		re := e.reopen(t)
		if n := len(re.List("")); n != 1 {
			t.Errorf("%d keys stored, want the one made before", n)
		}
		if got, _ := re.GetConsumer(c.ID); len(got.RateLimits) != 0 {
			t.Errorf("the refused consumer change was stored: %+v", got.RateLimits)
		}
		if got, _ := re.Get(k.ID); got.PlanID != nil {
			t.Errorf("the refused plan was stored on the key: %v", *got.PlanID)
		}
		if got, _ := re.GetPlan(p2.ID); got.Quota != nil {
			t.Errorf("the refused quota was stored on the plan: %+v", got.Quota)
		}
	})
}

// TestBackendChecksPlans: each backend calls a write's plan check with
// the plan as its transaction reads it, and a check's error stores
// nothing: a key's, a consumer's, an import's, and a plan's own check of
// its holders.
func TestBackendChecksPlans(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		p := mustPlan(t, e.keys, `{"name":"checked","rateLimits":[{"name":"m","limit":5,"windowSeconds":60}]}`)
		holder := mustConsumer(t, e.keys, `{"name":"holder","planId":"`+p.ID+`"}`)
		refused := errors.New("refused by the check")
		var saw []string
		check := func(got *Plan) error {
			saw = append(saw, got.Name)
			return refused
		}
		ctx := context.Background()

		k := mustCreate(t, e.keys, `{`+validContracts+`}`)
		stored, _, err := e.backend.Key(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		stored.PlanID = &p.ID
		if err := e.backend.Put(ctx, stored, stored.LastModificationTime, nil, check); err != refused {
			t.Errorf("Put: %v", err)
		}
		c := Consumer{ID: uuid.NewString(), Name: "new", PlanID: &p.ID}
		if err := e.backend.PutConsumer(ctx, &c, time.Time{}, check); err != refused {
			t.Errorf("PutConsumer: %v", err)
		}
		fresh := *stored
		fresh.ID, fresh.TokenHash = uuid.NewString(), bytes.Repeat([]byte{7}, 32)
		if err := e.backend.PutMany(ctx, &Batch{Keys: []*Record{&fresh}, Clash: map[string]PlanCheck{fresh.ID: check}}); err != refused {
			t.Errorf("PutMany: %v", err)
		}
		// A check may run more than once (bbolt's Batch runs a failed
		// write again alone); each saw the stored plan.
		if len(saw) < 3 || slices.ContainsFunc(saw, func(n string) bool { return n != "checked" }) {
			t.Errorf("the checks saw the plans %v", saw)
		}
		var holders []Holder
		changed := p
		changed.Description = "changed"
		if err := e.backend.PutPlan(ctx, &changed, p.LastModificationTime, func(hs []Holder) error { holders = hs; return refused }); err != refused {
			t.Errorf("PutPlan: %v", err)
		}
		if len(holders) != 1 || holders[0].Kind != "consumer" || holders[0].ID != holder.ID || holders[0].Name != "holder" {
			t.Errorf("the plan's check saw the holders %+v", holders)
		}

		re := e.reopen(t)
		if got, _ := re.Get(k.ID); got.PlanID != nil {
			t.Errorf("a refused Put stored the key's plan")
		}
		if len(re.ListConsumers()) != 1 || len(re.List("")) != 1 {
			t.Errorf("refused writes stored %d consumers and %d keys", len(re.ListConsumers()), len(re.List("")))
		}
		if got, _ := re.GetPlan(p.ID); got.Description != "" {
			t.Errorf("a refused PutPlan stored %q", got.Description)
		}
	})
}

// TestConsumerLimitsShared: a consumer's rate limit and quota bind all
// its keys together, a plan's bind each key apart, and a request passes
// only when every scope lets it; refusals name the policies, with a
// consumer's as consumer:NAME, and the headers list every policy.
func TestConsumerLimitsShared(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		plan := mustPlan(t, e.keys, `{"name":"basic","rateLimits":[{"name":"burst","limit":4,"windowSeconds":1}]}`)
		c := mustConsumer(t, e.keys, `{"name":"acme","rateLimits":[{"name":"second","limit":5,"windowSeconds":1}],"quota":{"limit":12,"period":"hour"}}`)
		body := `{"service":"contracts","name":"k","owner":"alice","privileges":["get"],"consumerId":"` + c.ID + `","planId":"` + plan.ID + `"}`
		a, b := mustCreate(t, e.keys, body), mustCreate(t, e.keys, body)

		now := e.clock.Now()
		d := checkAt(e.keys, a.Token, now)
		if !d.Authorized() {
			t.Fatalf("first request refused: %s", d.Reason)
		}
		policy, current := d.RateLimitHeaders(now)
		if want := `"burst";q=4;w=1, "consumer:second";q=5;w=1, "consumer:quota";q=12;w=3600`; policy != want {
			t.Errorf("RateLimit-Policy %q, want %q", policy, want)
		}
		// 3 of 4 left of the plan's burst is closer to exhaustion than 4
		// of the consumer's 5.
		if !strings.HasPrefix(current, `"burst";r=3;`) {
			t.Errorf("RateLimit %q, want the plan's burst closest", current)
		}
		if d := checkAt(e.keys, b.Token, now); d.Authorized() {
			if _, current := d.RateLimitHeaders(now); !strings.HasPrefix(current, `"consumer:second";r=3;`) {
				t.Errorf("RateLimit %q, want the consumer's second closest after two requests", current)
			}
		}

		// Alternating the two keys within one second: the consumer's 5,
		// not 5 a key.
		through := 2
		var refused Decision
		for i := range 8 {
			tok := []string{a.Token, b.Token}[i%2]
			if d := checkAt(e.keys, tok, now); d.Authorized() {
				through++
			} else {
				refused = d
			}
		}
		if through != 5 {
			t.Errorf("%d let through in one second over two keys, want the consumer's 5", through)
		}
		if refused.Status != http.StatusTooManyRequests || refused.Reason != problem.CodeRateLimited ||
			!slices.Equal(refused.Violated, []string{"consumer:second"}) || refused.RetryAfter < 1 {
			t.Errorf("refusal %d %s %v retry %d", refused.Status, refused.Reason, refused.Violated, refused.RetryAfter)
		}

		// The plan's policy counts per key: 4 a second for one key alone,
		// even though the consumer would let 5 through.
		later := now.Add(5 * time.Second)
		through = 0
		for range 6 {
			if d := checkAt(e.keys, a.Token, later); d.Authorized() {
				through++
			} else if !slices.Equal(d.Violated, []string{"burst"}) {
				t.Errorf("refused by %v, want the plan's burst", d.Violated)
			}
		}
		if through != 4 {
			t.Errorf("%d let through for one key of the plan, want 4", through)
		}

		// The consumer's quota of 12 over both keys: 5 + 4 spent, 3 left.
		spent := 9
		for i := 0; i < 20; i++ {
			at := now.Add(time.Duration(10+i) * time.Second)
			d := checkAt(e.keys, []string{a.Token, b.Token}[i%2], at)
			switch {
			case d.Authorized():
				spent++
			case d.Reason == problem.CodeQuotaExceeded:
				if !slices.Equal(d.Violated, []string{"consumer:quota"}) || d.RetryAfter < 1 {
					t.Errorf("quota refusal %v retry %d", d.Violated, d.RetryAfter)
				}
			default:
				t.Errorf("refused %s %v", d.Reason, d.Violated)
			}
		}
		if spent != 12 {
			t.Errorf("%d spent of the consumer's quota of 12", spent)
		}
		if err := e.keys.ReadQuotas(c.ID); err != nil {
			t.Fatal(err)
		}
		if g, _ := e.keys.GetConsumer(c.ID); g.QuotaUsed == nil || *g.QuotaUsed != 12 || g.KeyCount != 2 {
			t.Errorf("consumer view: used %v keys %d", g.QuotaUsed, g.KeyCount)
		}
		n := 0
		for _, ev := range sink.got {
			if ev.Type == events.ConsumerQuotaExhausted {
				n++
				var data map[string]any
				if err := json.Unmarshal(ev.Data, &data); err != nil || data["id"] != c.ID || data["name"] != "acme" {
					t.Errorf("event %s", ev.Data)
				}
			}
			if ev.Type == events.KeyQuotaExhausted {
				t.Errorf("key.quota_exhausted for a consumer's quota: %s", ev.Data)
			}
		}
		if n != 1 {
			t.Errorf("%d consumer.quota_exhausted events, want 1", n)
		}
	})
}

// TestPlanChangeReachesHolders: a change of a plan holds every key and
// consumer that takes it at once, on this instance and, after the
// backend's notification (Refresh), on another.
func TestPlanChangeReachesHolders(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		plan := mustPlan(t, e.keys, `{"name":"tier","rateLimits":[{"name":"second","limit":2,"windowSeconds":1}]}`)
		c := mustConsumer(t, e.keys, `{"name":"acme","planId":"`+plan.ID+`"}`)
		direct := mustCreate(t, e.keys, `{"service":"contracts","name":"d","owner":"o","privileges":["get"],"planId":"`+plan.ID+`"}`)
		member := mustCreate(t, e.keys, `{"service":"contracts","name":"m","owner":"o","privileges":["get"],"consumerId":"`+c.ID+`"}`)
		other := e.reopen(t)

		count := func(keys *Keys, token string, at time.Time) int {
			n := 0
			for range 10 {
				if d := checkAt(keys, token, at); d.Authorized() {
					n++
				}
			}
			return n
		}
		now := e.clock.Now()
		if n := count(e.keys, direct.Token, now); n != 2 {
			t.Errorf("key of the plan: %d, want 2", n)
		}
		if n := count(e.keys, member.Token, now); n != 2 {
			t.Errorf("key of a consumer of the plan: %d, want 2", n)
		}
		if _, err := e.keys.UpdatePlan(plan.ID, planInput(t, `{"rateLimits":[{"name":"second","limit":6,"windowSeconds":1}]}`)); err != nil {
			t.Fatal(err)
		}
		later := now.Add(10 * time.Second)
		if n := count(e.keys, direct.Token, later); n != 6 {
			t.Errorf("after the change, key of the plan: %d, want 6", n)
		}
		if n := count(e.keys, member.Token, later); n != 6 {
			t.Errorf("after the change, consumer of the plan: %d, want 6", n)
		}
		d := checkAt(e.keys, member.Token, later)
		if p, _ := d.RateLimitHeaders(later); p != `"consumer:second";q=6;w=1` {
			t.Errorf("RateLimit-Policy after the change: %q", p)
		}
		// The other instance, told by the notification.
		if err := other.Refresh(planTopic + plan.ID); err != nil {
			t.Fatal(err)
		}
		if n := count(other, direct.Token, later.Add(10*time.Second)); n != 6 {
			t.Errorf("other instance, key of the plan: %d, want 6", n)
		}
		if n := count(other, member.Token, later.Add(10*time.Second)); n != 6 {
			t.Errorf("other instance, consumer of the plan: %d, want 6", n)
		}
		// A consumer change reaches the other instance the same way.
		if _, err := e.keys.UpdateConsumer(c.ID, consumerInput(t, `{"planId":null,"quota":{"limit":1,"period":"day"}}`)); err != nil {
			t.Fatal(err)
		}
		if err := other.Refresh(consumerTopic + c.ID); err != nil {
			t.Fatal(err)
		}
		at := later.Add(time.Minute)
		if n := count(other, member.Token, at) + count(e.keys, member.Token, at); n != 1 {
			t.Errorf("consumer quota of 1 over two instances: %d through", n)
		}
	})
}

// TestConsumerUsage: a consumer's requests over time are all its keys'
// together, by outcome, read back after a flush.
func TestConsumerUsage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		c := mustConsumer(t, e.keys, `{"name":"acme","rateLimits":[{"name":"second","limit":3,"windowSeconds":1}]}`)
		body := `{"service":"contracts","name":"k","owner":"o","privileges":["get"],"consumerId":"` + c.ID + `"}`
		a, b := mustCreate(t, e.keys, body), mustCreate(t, e.keys, body)
		lone := mustCreate(t, e.keys, `{"service":"contracts","name":"lone","owner":"o","privileges":["get"]}`)
		now := e.clock.Now()
		for i := range 5 {
			tok := []string{a.Token, b.Token}[i%2]
			d := checkAt(e.keys, tok, now)
			if d.Authorized() {
				e.keys.Use(d.Entry, now)
			} else {
				e.keys.Refused(d.Entry, d.Reason, now)
			}
		}
		d := checkAt(e.keys, lone.Token, now)
		e.keys.Use(d.Entry, now)
		if _, err := e.keys.FlushUsage(); err != nil {
			t.Fatal(err)
		}
		s, err := e.reopen(t).ConsumerUsageOver(c.ID, now.Add(-time.Hour), now.Add(time.Hour), false)
		if err != nil {
			t.Fatal(err)
		}
		var ok, limited uint64
		for _, bk := range s.Buckets {
			ok += bk.OK
			limited += bk.Refused[problem.CodeRateLimited]
		}
		if s.ConsumerID != c.ID || ok != 3 || limited != 2 {
			t.Errorf("consumer usage %s: ok %d rate_limited %d, want 3 and 2", s.ConsumerID, ok, limited)
		}
		if _, err := e.keys.ConsumerUsageOver("nope", now, now.Add(time.Hour), false); err != ErrConsumerNotFound {
			t.Errorf("unknown consumer: %v", err)
		}
	})
}
