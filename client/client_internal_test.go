package client

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestPositionCursor(t *testing.T) {
	for _, tc := range []struct {
		name, from string
		items      []struct {
			shard string
			seq   int64
		}
		want Cursor
	}{
		{name: "one database", from: "7", items: []struct {
			shard string
			seq   int64
		}{{"", 8}, {"", 9}}, want: "9"},
		{name: "from the start", from: "", items: []struct {
			shard string
			seq   int64
		}{{"", 1}}, want: "1"},
		{name: "shards", from: "a:3,b:5", items: []struct {
			shard string
			seq   int64
		}{{"b", 6}, {"a", 4}}, want: "a:4,b:6"},
		{name: "a bare number in a sharded feed stays put until the server names the home shard", from: "3", items: []struct {
			shard string
			seq   int64
		}{{"b", 6}}, want: "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := parseCursor(Cursor(tc.from))
			for _, it := range tc.items {
				if !p.advance(it.shard, it.seq) {
					t.Fatalf("(%q, %d) taken for a repeat", it.shard, it.seq)
				}
			}
			if got := p.format(Cursor(tc.from)); got != tc.want {
				t.Fatalf("cursor %q, want %q", got, tc.want)
			}
		})
	}
	p := parseCursor("a:3,b:5")
	if p.advance("a", 3) || p.advance("b", 1) {
		t.Fatal("a (shard, seq) at or below the cursor taken as new")
	}
	p.merge(parseCursor("a:1,b:9"))
	if got := p.format(""); got != "a:3,b:9" {
		t.Fatalf("merge went back: %q", got)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "x": 0, "-1": 0,
		now.Add(5 * time.Second).Format(http.TimeFormat): 5 * time.Second, now.Add(-time.Hour).Format(http.TimeFormat): 0} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", in, got, want)
		}
	}
	p := RetryPolicy{}.withDefaults()
	for n := 1; n < 100; n++ {
		if d := p.backoff(n, 0); d < p.MinBackoff/2 || d > p.MaxBackoff {
			t.Fatalf("backoff %d: %v outside [%v, %v]", n, d, p.MinBackoff/2, p.MaxBackoff)
		}
	}
	if d := p.backoff(1, 2*time.Hour); d != p.MaxRetryAfter {
		t.Fatalf("a Retry-After beyond the cap: %v", d)
	}
}

func TestErrorKinds(t *testing.T) {
	unknown := &Error{Status: 503, Type: problemBase + "outcome-unknown", RequestID: "r"}
	if !errors.Is(unknown, ErrOutcomeUnknown) || errors.Is(unknown, ErrUnavailable) {
		t.Fatal("outcome-unknown is its own kind")
	}
	if r, _, ok := retryReason(unknown); !ok || r != ReasonOutcomeUnknown {
		t.Fatalf("outcome-unknown retried as %q, %v", r, ok)
	}
	for status, kind := range map[int]error{429: ErrRateLimited, 404: ErrNotFound, 403: ErrForbidden, 409: ErrConflict,
		422: ErrInvalid, 400: ErrInvalid, 401: ErrUnauthenticated, 502: ErrUnavailable} {
		e := &Error{Status: status}
		if !errors.Is(e, kind) {
			t.Errorf("%d is not %v", status, kind)
		}
		_, _, retried := retryReason(e)
		if retried != (status == 429 || status >= 500) {
			t.Errorf("%d retried: %v", status, retried)
		}
	}
}
