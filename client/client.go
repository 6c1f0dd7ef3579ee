// Package client calls the txfence API: creates that happen exactly once
// however often they are retried, reads, waiting for an outcome through the
// completion feed, and following that feed from a cursor the caller stores.
//
// It depends on no package of the server; the wire it speaks is the one
// functions/api/openapi.json describes.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TokenSource gives the bearer token to send with each call. It is asked
// before every attempt, so one that caches must refresh before expiry
// (IDTokenSource does).
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// Retry reasons, as RetryEvent.Reason and Stats count them.
const (
	ReasonTransport      = "transport"       // no answer: the connection failed or dropped
	ReasonRateLimited    = "rate_limited"    // 429
	ReasonOutcomeUnknown = "outcome_unknown" // 503 outcome-unknown
	ReasonUnavailable    = "unavailable"     // another 503
	ReasonServerError    = "server_error"    // another 5xx
)

// RetryEvent is one retry the client is about to make.
type RetryEvent struct {
	Method, Path string
	// RequestID is the request id of a create, or the action id of an
	// admin action; empty for other calls.
	RequestID string
	Attempt   int // the attempt that failed, from 1
	Reason    string
	Wait      time.Duration
	Err       error
}

// RetryPolicy bounds retries. A zero field takes its default.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call (default 10); the
	// call's context bounds them too.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts (default 100ms and 5s). A Retry-After longer than
	// MaxBackoff is still honoured, up to MaxRetryAfter.
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps a server's Retry-After (default 1 minute).
	MaxRetryAfter time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 10
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = p.MinBackoff
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = time.Minute
	}
	return p
}

// backoff is the wait before attempt n+1 after attempt n failed: full
// jitter over an exponential bound, or the server's Retry-After.
func (p RetryPolicy) backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, p.MaxRetryAfter)
	}
	bound := p.MaxBackoff
	if n < 30 {
		bound = min(p.MinBackoff<<(n-1), p.MaxBackoff)
	}
	return p.MinBackoff/2 + rand.N(bound-p.MinBackoff/2+1)
}

// Client calls one txfence deployment. Its methods may be called at once
// from several goroutines.
type Client struct {
	// BaseURL is the API's root, without /v1 (http://127.0.0.1:8080/Api).
	BaseURL string
	// HTTP makes the calls; a long poll holds a call up to 30s, so its
	// Timeout, if any, must be longer.
	HTTP *http.Client

	tokens  TokenSource
	retry   RetryPolicy
	onRetry func(RetryEvent)

	mu    sync.Mutex
	stats map[string]int64
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends key (txfk_k_...) as the bearer token.
func WithAPIKey(key string) Option {
	return func(c *Client) { c.tokens = staticToken(key) }
}

// WithTokenSource sends ts's tokens (a Google ID token, say) as bearer
// tokens.
func WithTokenSource(ts TokenSource) Option {
	return func(c *Client) { c.tokens = ts }
}

// WithHTTPClient makes the calls with h.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) { c.HTTP = h }
}

// WithRetryPolicy bounds retries.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p }
}

// WithRetryHook calls f before every retry (from the calling goroutine).
func WithRetryHook(f func(RetryEvent)) Option {
	return func(c *Client) { c.onRetry = f }
}

// New is a client of the API at baseURL. Without a credential it sends
// none (a deployment whose auth is dev).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new client: base URL %q must be an absolute http(s) URL", baseURL)
	}
	c := &Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: http.DefaultClient, stats: map[string]int64{}}
	for _, o := range opts {
		o(c)
	}
	c.retry = c.retry.withDefaults()
	return c, nil
}

// Stats returns how many retries the client has made, by reason.
func (c *Client) Stats() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.stats))
	for k, v := range c.stats {
		out[k] = v
	}
	return out
}

type staticToken string

func (s staticToken) Token(context.Context) (string, error) { return string(s), nil }

// call is one API call: its method, path (with query), body and the
// request id of a create.
type call struct {
	method, path string
	body         []byte
	requestID    string
	// once: a long poll's own retries are the caller's (Follow's loop).
	once bool
}

// do sends cl, retrying what may be retried as it was sent, and decodes a
// 2xx answer into out. It returns the answer's status.
func (c *Client) do(ctx context.Context, cl call, out any) (int, error) {
	for attempt := 1; ; attempt++ {
		status, err := c.attempt(ctx, cl, out)
		if err == nil {
			return status, nil
		}
		reason, retryAfter, ok := retryReason(err)
		if !ok || cl.once || attempt >= c.retry.MaxAttempts || ctx.Err() != nil {
			return status, err
		}
		wait := c.retry.backoff(attempt, retryAfter)
		c.noteRetry(RetryEvent{Method: cl.method, Path: cl.path, RequestID: cl.requestID, Attempt: attempt, Reason: reason, Wait: wait, Err: err})
		if err := sleep(ctx, wait); err != nil {
			return status, err
		}
	}
}

// retryReason says whether err may be retried, why, and after how long the
// server asked.
func retryReason(err error) (reason string, retryAfter time.Duration, ok bool) {
	var e *Error
	if !errors.As(err, &e) {
		var t *transportError
		return ReasonTransport, 0, errors.As(err, &t)
	}
	switch {
	case !e.retryable():
		return "", 0, false
	case e.Status == http.StatusTooManyRequests:
		return ReasonRateLimited, e.RetryAfter, true
	case e.Kind() == "outcome-unknown":
		return ReasonOutcomeUnknown, e.RetryAfter, true
	case e.Status == http.StatusServiceUnavailable:
		return ReasonUnavailable, e.RetryAfter, true
	default:
		return ReasonServerError, e.RetryAfter, true
	}
}

// transportError is a call that got no whole answer.
type transportError struct{ err error }

func (t *transportError) Error() string { return "txfence: transport: " + t.err.Error() }
func (t *transportError) Unwrap() error { return t.err }

func (c *Client) attempt(ctx context.Context, cl call, out any) (int, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.BaseURL+cl.path, body)
	if err != nil {
		return 0, fmt.Errorf("txfence: build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.tokens != nil {
		tok, err := c.tokens.Token(ctx)
		if err != nil {
			return 0, fmt.Errorf("txfence: get token: %w", err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, &transportError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return resp.StatusCode, ctx.Err()
		}
		return resp.StatusCode, &transportError{fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return resp.StatusCode, fmt.Errorf("txfence: decode %d answer: %w", resp.StatusCode, err)
			}
		}
		return resp.StatusCode, nil
	}
	e := &Error{}
	if json.Unmarshal(b, e) != nil || e.Status == 0 {
		// Not a problem document: a proxy's or load balancer's answer.
		e = &Error{}
	}
	e.Status = resp.StatusCode
	e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return resp.StatusCode, e
}

// parseRetryAfter reads a Retry-After of seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
