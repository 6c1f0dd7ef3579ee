package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// endpoint is a test webhook behind a real HTTP server, and a Client that
// asks it.
type endpoint struct {
	client *Client
	url    string
	hits   atomic.Int32
}

// setup serves h at hookPath and returns a Client for it with the given
// timeout.
func setup(t *testing.T, timeout time.Duration, h http.Handler) *endpoint {
	t.Helper()
	e := &endpoint{}
	mux := http.NewServeMux()
	mux.Handle(hookPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.url = srv.URL + hookPath + "?" + hookQuery
	c, err := New(e.url, []byte(testSecret), timeout)
	require.NoError(t, err)
	e.client = c
	return e
}

// scripted answers every request with body, in which {delivery} and {tx}
// stand for the request's deliveryId and txId, signed with secret at the
// given offset from now (no signature when secret is nil).
func scripted(status int, body string, secret []byte, offset time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		body := strings.NewReplacer("{delivery}", req.DeliveryID, "{tx}", req.TxID).Replace(body)
		if secret != nil {
			ts, sig := Sign(secret, []byte(body), time.Now().Add(offset))
			w.Header().Set(HeaderTimestamp, ts)
			w.Header().Set(HeaderSignature, sig)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// requireNoDecision checks that Resolve failed with want, decided nothing,
// and did not print the secret or the URL's path or query.
func requireNoDecision(t *testing.T, res txm.Resolution, err error, want error) {
	t.Helper()
	require.Error(t, err)
	if want != nil {
		require.ErrorIs(t, err, want)
	}
	assert.Equal(t, txm.Resolution{}, res, "an error decides nothing")
	assertNoSecrets(t, err.Error())
}

func assertNoSecrets(t *testing.T, text string) {
	t.Helper()
	for _, s := range []string{testSecret, hookPath, "txfence-private-path", hookQuery, "url-key-do-not-print"} {
		assert.NotContains(t, text, s)
	}
}

func TestIssue10_WebhookRoundTrip(t *testing.T) {
	t.Parallel()
	for _, action := range txm.StuckActions {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			var got Request
			var gotHeader http.Header
			recv := NewReceiver([]byte(testSecret), func(ctx context.Context, r Request) (Answer, error) {
				got = r
				return Answer{Action: action, Reason: "because " + string(action)}, nil
			})
			e := setup(t, 2*time.Second, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotHeader = r.Header.Clone()
				recv.ServeHTTP(w, r)
			}))

			res, err := e.client.Resolve(context.Background(), stuckTx())
			require.NoError(t, err)
			assert.Equal(t, txm.Resolution{Action: action, Reason: "because " + string(action), By: "webhook"}, res)

			want := newRequest(got.DeliveryID, stuckTx())
			assert.Equal(t, want, got, "the receiver sees the transaction as sent")
			assert.Len(t, got.DeliveryID, 26)
			assert.Equal(t, got.DeliveryID, gotHeader.Get(HeaderDelivery))
			assert.Equal(t, "application/json", gotHeader.Get("Content-Type"))
			assert.True(t, strings.HasPrefix(gotHeader.Get(HeaderSignature), "v1="))
		})
	}
}

func TestIssue10_WebhookRefusesBadSignature(t *testing.T) {
	t.Parallel()
	answer := `{"action":"cancel","reason":"forged"}`
	cases := []struct {
		name string
		h    http.Handler
	}{
		{"signed with another secret", scripted(200, answer, []byte("another-secret-0123456789"), 0)},
		{"unsigned", scripted(200, answer, nil, 0)},
		{"signature over another body", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ts, sig := Sign([]byte(testSecret), []byte(`{"action":"noop","reason":""}`), time.Now())
			w.Header().Set(HeaderTimestamp, ts)
			w.Header().Set(HeaderSignature, sig)
			_, _ = io.WriteString(w, answer)
		})},
		{"garbled signature", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderTimestamp, fmt.Sprint(time.Now().Unix()))
			w.Header().Set(HeaderSignature, "v1=not-hex,sha256=abc")
			_, _ = io.WriteString(w, answer)
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, 2*time.Second, tc.h)
			res, err := e.client.Resolve(context.Background(), stuckTx())
			requireNoDecision(t, res, err, ErrRefused)
		})
	}
}

func TestIssue10_WebhookRefusesStaleAnswer(t *testing.T) {
	t.Parallel()
	answer := `{"action":"bump","reason":"old news"}`
	for _, offset := range []time.Duration{-MaxAge - time.Minute, MaxAge + time.Minute} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			e := setup(t, 2*time.Second, scripted(200, answer, []byte(testSecret), offset))
			res, err := e.client.Resolve(context.Background(), stuckTx())
			requireNoDecision(t, res, err, ErrRefused)
			assert.Contains(t, err.Error(), "timestamp")
		})
	}
}

// TestIssue10_WebhookRefusesAnswerForAnotherDelivery: a signed answer that
// names another delivery (one replayed from an earlier exchange) is refused.
func TestIssue10_WebhookRefusesAnswerForAnotherDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, 2*time.Second, scripted(200, `{"action":"cancel","reason":"r","deliveryId":"EARLIER"}`, []byte(testSecret), 0))
	res, err := e.client.Resolve(context.Background(), stuckTx())
	requireNoDecision(t, res, err, ErrRefused)
}

func TestIssue10_WebhookRefusesBadAnswers(t *testing.T) {
	t.Parallel()
	big := `{"action":"bump","reason":"` + strings.Repeat("x", maxBody) + `"}`
	const bound = `"deliveryId":"{delivery}","txId":"{tx}"}`
	cases := []struct {
		name, want string
		h          http.Handler
	}{
		{"unknown action", `unknown action "explode"`, scripted(200, `{"action":"explode","reason":"r",`+bound, []byte(testSecret), 0)},
		{"empty action", `unknown action ""`, scripted(200, `{"reason":"r",`+bound, []byte(testSecret), 0)},
		{"action of another case", `unknown action "BUMP"`, scripted(200, `{"action":"BUMP",`+bound, []byte(testSecret), 0)},
		{"not JSON", "not a JSON answer", scripted(200, `action=bump`, []byte(testSecret), 0)},
		{"trailing data", "not a JSON answer", scripted(200, `{"action":"bump"} {}`, []byte(testSecret), 0)},
		{"empty 204", "not a JSON answer", scripted(204, ``, []byte(testSecret), 0)},
		{"over 64 KiB", "body over 65536 bytes", scripted(200, big, []byte(testSecret), 0)},
		{"status 500", "status 500", scripted(500, `{"action":"bump","reason":"r"}`, []byte(testSecret), 0)},
		{"status 401", "status 401", scripted(401, `unauthorized`, nil, 0)},
		{"status 404", "status 404", http.NotFoundHandler()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, 2*time.Second, tc.h)
			res, err := e.client.Resolve(context.Background(), stuckTx())
			requireNoDecision(t, res, err, ErrBadAnswer)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestIssue10_WebhookDoesNotFollowRedirects: a 3xx is a bad answer, and the
// place it points to is never asked.
func TestIssue10_WebhookDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	t.Cleanup(target.Close)
	e := setup(t, 2*time.Second, http.RedirectHandler(target.URL+"/steal", http.StatusTemporaryRedirect))

	res, err := e.client.Resolve(context.Background(), stuckTx())
	requireNoDecision(t, res, err, ErrBadAnswer)
	assert.Contains(t, err.Error(), "status 307")
	assert.Zero(t, elsewhere.Load())
}

func TestIssue10_WebhookTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	// Handlers read the body first: only then does net/http notice that the
	// client hung up and cancel r.Context().
	release := make(chan struct{})
	e := setup(t, timeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))

	start := time.Now()
	res, err := e.client.Resolve(context.Background(), stuckTx())
	elapsed := time.Since(start)
	requireNoDecision(t, res, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "no answer within 300ms")
	assert.GreaterOrEqual(t, elapsed, timeout)
	assert.Less(t, elapsed, timeout+time.Second, "bounded by the configured timeout")

	// A slow body counts too: headers in time, the rest never.
	slowBody := setup(t, timeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `{"action":`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	// Registered after the servers' Close, so it runs before them.
	t.Cleanup(func() { close(release) })
	start = time.Now()
	res, err = slowBody.client.Resolve(context.Background(), stuckTx())
	requireNoDecision(t, res, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), timeout+time.Second)
}

func TestIssue10_WebhookUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + hookPath + "?" + hookQuery
	srv.Close()
	c, err := New(url, []byte(testSecret), time.Second)
	require.NoError(t, err)

	res, err := c.Resolve(context.Background(), stuckTx())
	requireNoDecision(t, res, err, nil)
	assert.Contains(t, err.Error(), strings.TrimPrefix(srv.URL, "http://"), "named by host")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = c.Resolve(ctx, stuckTx())
	requireNoDecision(t, res, err, context.Canceled)
}

func TestIssue10_WebhookNew(t *testing.T) {
	t.Parallel()
	secret := []byte(testSecret)
	for _, tc := range []struct {
		name, url string
		secret    []byte
		timeout   time.Duration
	}{
		{"does not parse", "https://hooks.example.com/%zz" + hookPath + "?" + hookQuery, secret, time.Second},
		{"not http", "ftp://hooks.example.com" + hookPath + "?" + hookQuery, secret, time.Second},
		{"no host", "https://" + hookPath + "?" + hookQuery, secret, time.Second},
		{"relative", hookPath + "?" + hookQuery, secret, time.Second},
		{"no secret", "https://hooks.example.com" + hookPath, nil, time.Second},
		{"no timeout", "https://hooks.example.com" + hookPath, secret, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.url, tc.secret, tc.timeout)
			require.Error(t, err)
			assertNoSecrets(t, err.Error())
		})
	}

	c, err := New("https://user:pass@hooks.example.com:8443"+hookPath+"?"+hookQuery, secret, time.Second)
	require.NoError(t, err)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("policy", "hook", c)
	for _, text := range []string{c.String(), fmt.Sprint(c), logged.String()} {
		assert.Contains(t, text, "https://user:pass@hooks.example.com:8443"[:8]+"hooks.example.com:8443")
		assertNoSecrets(t, text)
		assert.NotContains(t, text, "pass")
	}
}

// TestIssue10_WebhookClipsLongReason: the audit trail keeps at most 1 KiB of
// the answer's reason, cut between runes.
func TestIssue10_WebhookClipsLongReason(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("€", maxReason) // 3 bytes each
	recv := NewReceiver([]byte(testSecret), func(context.Context, Request) (Answer, error) {
		return Answer{Action: txm.ActionNoop, Reason: long}, nil
	})
	e := setup(t, 2*time.Second, recv)
	res, err := e.client.Resolve(context.Background(), stuckTx())
	require.NoError(t, err)
	assert.LessOrEqual(t, len(res.Reason), maxReason)
	assert.Greater(t, len(res.Reason), maxReason-3)
	assert.True(t, strings.HasPrefix(long, res.Reason))
	assert.True(t, utf8.ValidString(res.Reason))
}

// TestIssue44_WebhookBound: a signed answer is good for its own delivery of
// its own transaction only. One captured from the exchange for delivery D1
// of tx T1 and replayed, well within its five minutes, for delivery D2 of tx
// T2 (or of T1 again) is refused; so are answers signed with the right
// secret that name no delivery, no transaction or another transaction.
func TestIssue44_WebhookBound(t *testing.T) {
	t.Parallel()
	t1, t2 := stuckTx(), stuckTx()
	t2.TxID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"
	recv := NewReceiver([]byte(testSecret), func(_ context.Context, r Request) (Answer, error) {
		return Answer{Action: txm.ActionCancel, Reason: "cancel " + r.TxID}, nil
	})
	var (
		mu       sync.Mutex
		captured *httptest.ResponseRecorder
	)
	replayer := setup(t, 2*time.Second, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if captured == nil { // the first exchange is the receiver's own
			captured = httptest.NewRecorder()
			recv.ServeHTTP(captured, r)
		}
		for k, v := range captured.Header() {
			w.Header()[k] = v
		}
		_, _ = w.Write(captured.Body.Bytes())
	}))

	res, err := replayer.client.Resolve(context.Background(), t1)
	require.NoError(t, err, "D1 for T1 is answered")
	require.Equal(t, txm.Resolution{Action: txm.ActionCancel, Reason: "cancel " + t1.TxID, By: By}, res)
	var a Answer
	require.NoError(t, json.Unmarshal(captured.Body.Bytes(), &a))
	require.Equal(t, t1.TxID, a.TxID, "the signed answer names its transaction")
	require.NotEmpty(t, a.DeliveryID, "and its delivery")

	for _, tx := range []txm.StuckTx{t2, t1} {
		res, err := replayer.client.Resolve(context.Background(), tx)
		requireNoDecision(t, res, err, ErrRefused)
		assert.Contains(t, err.Error(), "another delivery")
	}

	const good = `{"action":"cancel","reason":"r","deliveryId":"{delivery}","txId":"{tx}"}`
	for name, body := range map[string]string{
		"no deliveryId":       `{"action":"cancel","reason":"r","txId":"{tx}"}`,
		"empty deliveryId":    `{"action":"cancel","reason":"r","deliveryId":"","txId":"{tx}"}`,
		"no txId":             `{"action":"cancel","reason":"r","deliveryId":"{delivery}"}`,
		"another transaction": `{"action":"cancel","reason":"r","deliveryId":"{delivery}","txId":"` + t1.TxID + `"}`,
		"neither":             `{"action":"cancel","reason":"r"}`,
	} {
		e := setup(t, 2*time.Second, scripted(200, body, []byte(testSecret), 0))
		res, err := e.client.Resolve(context.Background(), t2)
		requireNoDecision(t, res, err, ErrRefused)
		t.Logf("%s: %v", name, err)
	}
	e := setup(t, 2*time.Second, scripted(200, good, []byte(testSecret), 0))
	res, err = e.client.Resolve(context.Background(), t2)
	require.NoError(t, err, "an answer naming its own delivery and transaction is taken")
	assert.Equal(t, txm.ActionCancel, res.Action)
}
