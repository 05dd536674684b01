// Feed connections are bounded: in all, and per token (per client address
// without one), so that no client, and no crowd of them, can hold an
// unbounded number of connections, goroutines and read buffers. What one
// feed holds at a time is bounded too (projections.FollowBatch events read
// ahead for /feeds/events, feedBatch states for the others), and a client
// that does not read for FeedStallTimeout is cut; it resumes with
// Last-Event-ID from the last message it received.

package api

import (
	"crypto/sha256"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Defaults of Config.MaxFeeds and Config.MaxFeedsPerToken.
const (
	defaultMaxFeeds         = 1000
	defaultMaxFeedsPerToken = 100
)

const typeTooManyFeeds = "https://turnstile.dev/problems/too-many-feeds"

// feedLimiter counts the open feeds, in all and per holder.
type feedLimiter struct {
	max, perHolder int
	mu             sync.Mutex
	open           int
	by             map[string]int
}

// acquire takes a feed slot for r's holder, or returns the problem to
// answer (429 with Retry-After); release gives the slot back.
func (l *feedLimiter) acquire(r *http.Request) (release func(), p *Problem) {
	key := feedHolder(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max {
		return nil, typed(typeTooManyFeeds, http.StatusTooManyRequests, "the server has %d feeds open, its limit; try again later", l.open)
	}
	if l.by[key] >= l.perHolder {
		return nil, typed(typeTooManyFeeds, http.StatusTooManyRequests, "this token (or, without one, this address) has %d feeds open, the limit per token; close one first", l.by[key])
	}
	if l.by == nil {
		l.by = map[string]int{}
	}
	l.open++
	l.by[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open--
			if l.by[key]--; l.by[key] <= 0 {
				delete(l.by, key)
			}
		})
	}, nil
}

// feedHolder names who holds a feed: a digest of its bearer token, or its
// address without one.
func feedHolder(r *http.Request) string {
	if scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && secret != "" {
		sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
		return "token:" + string(sum[:])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}
