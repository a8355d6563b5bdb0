package keystore

import (
	"context"

	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore/traffic"
)

// Notification payloads of plan and consumer changes on the keys channel,
// beside key ids: every instance reads the plan or consumer back and
// compiles its holders anew.
const (
	planTopic     = "plan:"
	consumerTopic = "consumer:"
)

// loadScopes reads every plan and consumer of the backend into memory,
// before the keys that name them.
func (k *Keys) loadScopes() error {
	plans := make(map[string]*Plan)
	var consumers []*Consumer
	err := k.backend.LoadScopes(context.Background(), func(p *Plan) error {
		plans[p.ID] = p
		return nil
	}, func(c *Consumer) error {
		consumers = append(consumers, c)
		return nil
	})
	if err != nil {
		return err
	}
	k.scopeMu.Lock()
	defer k.scopeMu.Unlock()
	k.plans = plans
	seen := make(map[string]bool, len(consumers))
	if k.consumers == nil {
		k.consumers = make(map[string]*consumerEntry)
	}
	for _, c := range consumers {
		seen[c.ID] = true
		k.setConsumer(c)
	}
	for id := range k.consumers {
		if !seen[id] {
			delete(k.consumers, id)
		}
	}
	return nil
}

// SyncScopes reads plans and consumers back from a shared backend and
// holds the keys of each to them: what a view of plans and consumers
// needs, without reading every key again, which on a database of many
// keys made each such view wait for all of them. Keys themselves (a
// consumer's keyCount) are as this instance knows them: changed
// elsewhere, within a second.
func (k *Keys) SyncScopes() error {
	if _, ok := k.backend.(Watcher); !ok {
		return nil
	}
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if err := k.loadScopes(); err != nil {
		return err
	}
	k.recompile(scoped)
	return nil
}

// SyncPlan reads plan id back from a shared backend before it is shown,
// and holds its keys and consumers to it; every plan and consumer when
// id is empty (SyncScopes). SyncConsumer does the same for consumer id.
func (k *Keys) SyncPlan(id string) error { return k.syncScope(planTopic, id) }

func (k *Keys) SyncConsumer(id string) error { return k.syncScope(consumerTopic, id) }

func (k *Keys) syncScope(topic, id string) error {
	if id == "" {
		return k.SyncScopes()
	}
	return k.Sync(topic + id)
}

// setConsumer makes c the consumer in memory, its meter kept when it
// was there before. The caller holds scopeMu.
func (k *Keys) setConsumer(c *Consumer) {
	var plan *Plan
	if c.PlanID != nil {
		plan = k.plans[*c.PlanID]
	}
	ce := k.consumers[c.ID]
	if ce == nil {
		ce = &consumerEntry{}
		ce.holder, ce.keys = ce, k
		k.consumers[c.ID] = ce
	}
	ce.set(newConsumerSnap(*c, plan))
}

// recompile compiles anew every key that match selects, after a plan or
// consumer it names changed. The caller holds writeMu.
func (k *Keys) recompile(match func(*Key) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.byID {
		old := e.snap.Load()
		if !match(&old.key) {
			continue
		}
		rec := &Record{Key: old.key, TokenHash: old.hash[:], SealedToken: old.sealed, ExpiryWarnedFor: old.warnedFor}
		if old.hasPrev {
			rec.PreviousTokenHash = old.prevHash[:]
			t := old.prevUntil
			rec.PreviousTokenExpiry = &t
		}
		next := k.compile(rec)
		e.setSnap(next)
		k.rehash(e, old, next)
	}
}

// heldByPlan selects the keys that plan id holds: those that take it,
// and those of the consumers that take it.
func (k *Keys) heldByPlan(id string) func(*Key) bool {
	return func(key *Key) bool {
		return key.PlanID != nil && *key.PlanID == id || key.ConsumerID != nil && k.consumerHasPlan(*key.ConsumerID, id)
	}
}

// scoped selects the keys of a plan or a consumer, which a reload of
// plans and consumers may hold to other limits.
func scoped(key *Key) bool { return key.PlanID != nil || key.ConsumerID != nil }

// holdsConsumer selects the keys of a consumer.

func holdsConsumer(id string) func(*Key) bool {
	return func(key *Key) bool { return key.ConsumerID != nil && *key.ConsumerID == id }
}

// refreshScope reads the plan or consumer of a notification payload back
// after another instance changed it, and compiles its holders anew.
func (k *Keys) refreshScope(payload string) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if id, ok := strings.CutPrefix(payload, planTopic); ok {
		p, err := k.backend.Plan(context.Background(), id)
		if err != nil {
			return err
		}
		k.scopeMu.Lock()
		if p == nil {
			delete(k.plans, id)
		} else {
			k.plans[id] = p
		}
		k.recompileConsumersOf(id)
		k.scopeMu.Unlock()
		k.recompile(k.heldByPlan(id))
		return nil
	}
	id, _ := strings.CutPrefix(payload, consumerTopic)
	c, err := k.backend.Consumer(context.Background(), id)
	if err != nil {
		return err
	}
	k.scopeMu.Lock()
	if c == nil {
		delete(k.consumers, id)
	} else {
		k.setConsumer(c)
	}
	k.scopeMu.Unlock()
	k.recompile(holdsConsumer(id))
	return nil
}

// recompileConsumersOf takes plan id's change into its consumers. The
// caller holds scopeMu.
func (k *Keys) recompileConsumersOf(id string) {
	for _, ce := range k.consumers {
		if c := ce.snap.Load().consumer; c.PlanID != nil && *c.PlanID == id {
			k.setConsumer(&c)
		}
	}
}

// consumerHasPlan reports whether consumer cid takes plan pid.
func (k *Keys) consumerHasPlan(cid, pid string) bool {
	k.scopeMu.RLock()
	defer k.scopeMu.RUnlock()
	ce := k.consumers[cid]
	if ce == nil {
		return false
	}
	p := ce.snap.Load().consumer.PlanID
	return p != nil && *p == pid
}

// plan returns plan id, nil if none.
func (k *Keys) plan(id string) *Plan {
	k.scopeMu.RLock()
	defer k.scopeMu.RUnlock()
	return k.plans[id]
}

// consumer returns consumer id, nil if none.
func (k *Keys) consumer(id string) *consumerEntry {
	k.scopeMu.RLock()
	defer k.scopeMu.RUnlock()
	return k.consumers[id]
}

// CreatePlan validates in and stores a new plan.
func (k *Keys) CreatePlan(in *PlanInput) (Plan, error) {
	p, err := applyPlan(Plan{}, in)
	if err != nil {
		return Plan{}, err
	}
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	now := k.now().UTC().Truncate(time.Millisecond)
	p.ID = uuid.NewString()
	p.CreationTime, p.LastModificationTime = now, now
	if err := k.backend.PutPlan(context.Background(), &p, time.Time{}, nil); err != nil {
		return Plan{}, err
	}
	k.scopeMu.Lock()
	k.plans[p.ID] = &p
	k.scopeMu.Unlock()
	return planView(&p), nil
}

// UpdatePlan applies in to plan id, as stored; every key and consumer
// that takes it is held to the change at once (on other instances, once
// the backend's notification reaches them).
func (k *Keys) UpdatePlan(id string, in *PlanInput) (Plan, error) {
	return rewrite(func() error { return k.refreshScope(planTopic + id) }, ErrPlanNotFound, func() (Plan, error) { return k.updatePlan(id, in) })
}

func (k *Keys) updatePlan(id string, in *PlanInput) (Plan, error) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	old := k.plan(id)
	if old == nil {
		return Plan{}, ErrPlanNotFound
	}
	p, err := applyPlan(*old, in)
	if err != nil {
		return Plan{}, err
	}
	p.LastModificationTime = nextModification(k.now(), old.LastModificationTime)
	if err := k.backend.PutPlan(context.Background(), &p, old.LastModificationTime, planHoldersClash(&p, in)); err != nil {
		return Plan{}, err
	}
	k.scopeMu.Lock()
	k.plans[id] = &p
	k.recompileConsumersOf(id)
	k.scopeMu.Unlock()
	k.recompile(k.heldByPlan(id))
	return planView(&p), nil
}

// planHoldersClash refuses a plan change that would give a holder, as the
// write's transaction reads the holders, two policies of one name, or two
// quotas, naming the plan's field.
func planHoldersClash(p *Plan, in *PlanInput) HoldersCheck {
	return func(holders []Holder) error {
		var f problem.Fields
		for _, h := range holders {
			// The holder by name and id: the name for people, the id
			// to find it by, as names need not be unique.
			holder := fmt.Sprintf("%s %q (%s)", h.Kind, h.Name, h.ID)
			for i, l := range p.RateLimits {
				if in.RateLimits.Set && slices.ContainsFunc(h.RateLimits, func(o traffic.RateLimit) bool { return o.Name == l.Name }) {
					f.Add(fmt.Sprintf("rateLimits[%d].name", i), "clashes", fmt.Sprintf("%s has a policy named %q of its own", holder, l.Name))
				}
			}
			if in.Quota.Set && p.Quota != nil && h.Quota != nil {
				f.Add("quota", "clashes", holder+" has a quota of its own")
			}
		}
		if len(f.List()) == 0 {
			return nil
		}
		d := problem.New(http.StatusConflict, problem.CodeConflict, "the change would give a holder of the plan two policies of one name, or two quotas")
		d.Errors = f.List()
		return d
	}
}

// DeletePlan removes plan id, unless keys or consumers take it (409).
func (k *Keys) DeletePlan(id string) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if k.plan(id) == nil {
		return ErrPlanNotFound
	}
	if err := k.backend.DeletePlan(context.Background(), id); err != nil {
		return err
	}
	k.scopeMu.Lock()
	delete(k.plans, id)
	k.scopeMu.Unlock()
	return nil
}

// GetPlan returns plan id.
func (k *Keys) GetPlan(id string) (Plan, error) {
	p := k.plan(id)
	if p == nil {
		return Plan{}, ErrPlanNotFound
	}
	return planView(p), nil
}

// ListPlans returns every plan, oldest first.
func (k *Keys) ListPlans() []Plan {
	k.scopeMu.RLock()
	out := make([]Plan, 0, len(k.plans))
	for _, p := range k.plans {
		out = append(out, planView(p))
	}
	k.scopeMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationTime.Equal(out[j].CreationTime) {
			return out[i].CreationTime.Before(out[j].CreationTime)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// planView is a copy of p that shares nothing with memory.
func planView(p *Plan) Plan {
	out := *p
	out.RateLimits = slices.Clone(p.RateLimits)
	if out.RateLimits == nil {
		out.RateLimits = []traffic.RateLimit{}
	}
	if p.Quota != nil {
		q := *p.Quota
		out.Quota = &q
	}
	return out
}

// CreateConsumer validates in and stores a new consumer.
func (k *Keys) CreateConsumer(in *ConsumerInput) (Consumer, error) {
	c, err := applyConsumer(Consumer{}, in)
	if err != nil {
		return Consumer{}, err
	}
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if err := k.checkConsumer(&c); err != nil {
		return Consumer{}, err
	}
	now := k.now().UTC().Truncate(time.Millisecond)
	c.ID = uuid.NewString()
	c.CreationTime, c.LastModificationTime = now, now
	if err := k.backend.PutConsumer(context.Background(), &c, time.Time{}, holderClash(c.RateLimits, c.Quota, in.RateLimits.Set, in.Quota.Set)); err != nil {
		return Consumer{}, err
	}
	k.scopeMu.Lock()
	k.setConsumer(&c)
	k.scopeMu.Unlock()
	return k.consumerView(k.consumer(c.ID), -1), nil
}

// UpdateConsumer applies in to consumer id, as stored; all its keys are
// held to the change at once.
func (k *Keys) UpdateConsumer(id string, in *ConsumerInput) (Consumer, error) {
	return rewrite(func() error { return k.refreshScope(consumerTopic + id) }, ErrConsumerNotFound, func() (Consumer, error) { return k.updateConsumer(id, in) })
}

func (k *Keys) updateConsumer(id string, in *ConsumerInput) (Consumer, error) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	ce := k.consumer(id)
	if ce == nil {
		return Consumer{}, ErrConsumerNotFound
	}
	base := ce.snap.Load().consumer.LastModificationTime
	c, err := applyConsumer(ce.snap.Load().consumer, in)
	if err != nil {
		return Consumer{}, err
	}
	if err := k.checkConsumer(&c); err != nil {
		return Consumer{}, err
	}
	c.LastModificationTime = nextModification(k.now(), base)
	if err := k.backend.PutConsumer(context.Background(), &c, base, holderClash(c.RateLimits, c.Quota, in.RateLimits.Set, in.Quota.Set)); err != nil {
		return Consumer{}, err
	}
	k.scopeMu.Lock()
	k.setConsumer(&c)
	k.scopeMu.Unlock()
	k.recompile(holdsConsumer(id))
	return k.consumerView(ce, -1), nil
}

// checkConsumer checks that c's plan exists. That it names none of c's
// policies the write checks, in its transaction (holderClash).
func (k *Keys) checkConsumer(c *Consumer) error {
	if c.PlanID != nil && k.plan(*c.PlanID) == nil {
		return unknownRef("planId", "plan")
	}
	return nil
}

// DeleteConsumer removes consumer id, unless it holds keys (409).
func (k *Keys) DeleteConsumer(id string) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if k.consumer(id) == nil {
		return ErrConsumerNotFound
	}
	if err := k.backend.DeleteConsumer(context.Background(), id); err != nil {
		return err
	}
	k.scopeMu.Lock()
	delete(k.consumers, id)
	k.scopeMu.Unlock()
	return nil
}

// GetConsumer returns consumer id with its quota use and key count.
func (k *Keys) GetConsumer(id string) (Consumer, error) {
	ce := k.consumer(id)
	if ce == nil {
		return Consumer{}, ErrConsumerNotFound
	}
	return k.consumerView(ce, -1), nil
}

// ListConsumers returns every consumer, oldest first.
func (k *Keys) ListConsumers() []Consumer {
	k.scopeMu.RLock()
	list := make([]*consumerEntry, 0, len(k.consumers))
	for _, ce := range k.consumers {
		list = append(list, ce)
	}
	k.scopeMu.RUnlock()
	// Each consumer's keys counted in one pass over the keys, not one a
	// consumer.
	counts := map[string]int{}
	k.mu.RLock()
	for _, e := range k.byID {
		if c := e.snap.Load().key.ConsumerID; c != nil {
			counts[*c]++
		}
	}
	k.mu.RUnlock()
	out := make([]Consumer, 0, len(list))
	for _, ce := range list {
		out = append(out, k.consumerView(ce, counts[ce.snap.Load().consumer.ID]))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationTime.Equal(out[j].CreationTime) {
			return out[i].CreationTime.Before(out[j].CreationTime)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// consumerView is ce's consumer as administrators see it; keyCount -1
// has its keys counted.
func (k *Keys) consumerView(ce *consumerEntry, keyCount int) Consumer {
	c := ce.snap.Load().consumer
	c.RateLimits = slices.Clone(c.RateLimits)
	if c.RateLimits == nil {
		c.RateLimits = []traffic.RateLimit{}
	}
	if c.Quota != nil {
		q := *c.Quota
		c.Quota = &q
	}
	c.QuotaUsed, c.QuotaResetsAt = ce.quotaView(k.now())
	c.KeyCount = keyCount
	if keyCount < 0 {
		c.KeyCount = 0
		k.mu.RLock()
		for _, e := range k.byID {
			if holdsConsumer(c.ID)(&e.snap.Load().key) {
				c.KeyCount++
			}
		}
		k.mu.RUnlock()
	}
	return c
}

// ConsumerUsageOver returns consumer id's requests over time, all its
// keys' together, as UsageOver does for a key.
func (k *Keys) ConsumerUsageOver(id string, from, to time.Time, byDay bool) (UsageSeries, error) {
	ce := k.consumer(id)
	if ce == nil {
		return UsageSeries{}, ErrConsumerNotFound
	}
	s, err := k.usageOver(&ce.meter, from, to, byDay)
	s.ConsumerID = id
	return s, err
}

// checkKeyScopes checks that the consumerId and planId of key each name
// one. That the plan names none of the key's own policies the write
// checks, in its transaction (holderClash).
func (k *Keys) checkKeyScopes(key *Key) error {
	var f problem.Fields
	if key.ConsumerID != nil && k.consumer(*key.ConsumerID) == nil {
		f.Add("consumerId", "unknown", "no consumer has this id")
	}
	if key.PlanID != nil && k.plan(*key.PlanID) == nil {
		f.Add("planId", "unknown", "no plan has this id")
	}
	return f.Err()
}
