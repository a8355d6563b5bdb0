package host

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// maxCached bounds the items a cache holds: a flood of share pages for
// many issues must not grow the gateway's memory without end.
const maxCached = 10_000

// Cached reuses what h answered for ttl per item (an issue, a project),
// so that a share page opened often asks the tracker once per ttl. A
// ttl of 0 or less returns h itself. Errors are not kept: the next
// request asks again. Calls for the same item at once share one call to
// the tracker.
func Cached(h Host, ttl time.Duration, now func() time.Time) Host {
	if ttl <= 0 {
		return h
	}
	if now == nil {
		now = time.Now
	}
	return &cached{Host: h, ttl: ttl, now: now, items: map[string]*cacheItem{}}
}

type cached struct {
	Host
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	items map[string]*cacheItem
}

// cacheItem is one item read, or being read (done open).
type cacheItem struct {
	done  chan struct{}
	until time.Time
	value any
	err   error
}

func (c *cached) Issue(ctx context.Context, id string) (*Issue, error) {
	v, err := c.get(ctx, "issue "+id, func(ctx context.Context) (any, error) { return c.Host.Issue(ctx, id) })
	if err != nil {
		return nil, err
	}
	return v.(*Issue), nil
}

func (c *cached) Project(ctx context.Context, id string) (*Project, error) {
	v, err := c.get(ctx, "project "+id, func(ctx context.Context) (any, error) { return c.Host.Project(ctx, id) })
	if err != nil {
		return nil, err
	}
	return v.(*Project), nil
}

// Search reuses a page of results for ttl, by project, query, issue and
// page. A write from a page forgets issues, not lists: a list may show a
// change a little late, never an issue outside its query (the page of an
// issue asks with its id).
func (c *cached) Search(ctx context.Context, project string, q *Query, issueID string, offset, limit int) (*IssueList, error) {
	key := fmt.Sprintf("search %s %+v %s %d %d", project, *q, issueID, offset, limit)
	v, err := c.get(ctx, key, func(ctx context.Context) (any, error) { return c.Host.Search(ctx, project, q, issueID, offset, limit) })
	if err != nil {
		return nil, err
	}
	return v.(*IssueList), nil
}

// AddComment writes through and forgets the issue, so that the next
// read shows the comment.
func (c *cached) AddComment(ctx context.Context, issueID, body string) error {
	err := c.Host.AddComment(ctx, issueID, body)
	c.Forget(issueID)
	return err
}

// UpdateField writes through and forgets the issue.
func (c *cached) UpdateField(ctx context.Context, issueID, fieldID, value string) error {
	err := c.Host.UpdateField(ctx, issueID, fieldID, value)
	c.Forget(issueID)
	return err
}

// AddAttachment writes through and forgets the issue.
func (c *cached) AddAttachment(ctx context.Context, issueID, name, contentType string, content io.Reader, size int64) error {
	err := c.Host.AddAttachment(ctx, issueID, name, contentType, content, size)
	c.Forget(issueID)
	return err
}

// Forget drops what the cache holds of issue id, after a write to it.
func (c *cached) Forget(id string) {
	c.mu.Lock()
	delete(c.items, "issue "+id)
	c.mu.Unlock()
}

func (c *cached) get(ctx context.Context, key string, read func(context.Context) (any, error)) (any, error) {
	now := c.now()
	c.mu.Lock()
	if it, ok := c.items[key]; ok {
		select {
		case <-it.done:
			if it.err == nil && now.Before(it.until) {
				c.mu.Unlock()
				return it.value, nil
			}
		default:
			// Being read: wait for that call rather than make another.
			c.mu.Unlock()
			select {
			case <-it.done:
				if it.err == nil {
					return it.value, nil
				}
				return nil, it.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if len(c.items) >= maxCached {
		c.evict(now)
	}
	it := &cacheItem{done: make(chan struct{})}
	c.items[key] = it
	c.mu.Unlock()

	it.value, it.err = read(ctx)
	it.until = c.now().Add(c.ttl)
	c.mu.Lock()
	if it.err != nil && c.items[key] == it {
		delete(c.items, key)
	}
	c.mu.Unlock()
	close(it.done)
	return it.value, it.err
}

// evict drops the expired items, and if none had expired, all of them:
// a full cache of live items is a flood, and asking again is its price.
// The caller holds mu.
func (c *cached) evict(now time.Time) {
	for k, it := range c.items {
		select {
		case <-it.done:
			if !now.Before(it.until) {
				delete(c.items, k)
			}
		default:
		}
	}
	if len(c.items) >= maxCached {
		clear(c.items)
	}
}

// Forgetter is a Host that can drop what it keeps of an issue.
type Forgetter interface{ Forget(id string) }
