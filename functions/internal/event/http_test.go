package event

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type requestKey struct{}

// serve serves fn through Handler, with each request's Ce-Id in its
// context, so that fn can tell whether it got its own request's event.
func serve(t *testing.T, fn func(context.Context, event.Event) error) *httptest.Server {
	t.Helper()
	h := Handler(fn)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(w, r.WithContext(context.WithValue(r.Context(), requestKey{}, r.Header.Get("Ce-Id"))))
	}))
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { srv.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("a request never ended: the handler wedged")
		}
	})
	return srv
}

// pushCE posts a binary-mode CloudEvent, as Eventarc and the bridge do.
func pushCE(ctx context.Context, url, id string) (int, error) {
	body := `{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(`{"chainId":1,"signer":"0x00000000000000000000000000000000000000aa"}`)) +
		`","messageId":"` + id + `"},"subscription":"projects/p/subscriptions/s"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "//pubsub.googleapis.com/projects/p/topics/t")
	req.Header.Set("Ce-Type", MessagePublishedType)
	req.Header.Set("Ce-Time", time.Now().UTC().Format(time.RFC3339Nano))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestHandler_CancelledPushesWedgeNothing: concurrent pushes, half of them
// given up by their client while being handled, then more: every push that
// is not given up is answered at once, and each handler runs with its own
// request's event and context. The CloudEvents SDK's receive handler, which
// the Functions Framework serves CloudEvent functions with, pairs requests
// and handlers over one shared channel: a cancelled request left another
// one hanging for good (cloudevents/sdk-go#1332), and handlers ran under
// other requests' contexts.
func TestHandler_CancelledPushesWedgeNothing(t *testing.T) {
	t.Parallel()
	var mismatched atomic.Int32
	srv := serve(t, func(ctx context.Context, e event.Event) error {
		if ctx.Value(requestKey{}) != e.ID() {
			mismatched.Add(1)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	var wg sync.WaitGroup
	for round := 0; round < 40; round++ {
		for i := 0; i < 200; i++ {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%30)*time.Millisecond)
				defer cancel()
				_, _ = pushCE(ctx, srv.URL+"/Submit", fmt.Sprintf("gone-%d-%d", round, i))
			})
		}
		wg.Wait()
	}
	// One at a time: a request whose message no handler takes hangs.
	var answered atomic.Int32
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code, err := pushCE(ctx, srv.URL+"/Submit", fmt.Sprintf("kept-%d", i))
		cancel()
		if assert.NoError(t, err, "push %d hung", i) && assert.Equal(t, http.StatusOK, code) {
			answered.Add(1)
		}
	}
	assert.EqualValues(t, 20, answered.Load())
	assert.Zero(t, mismatched.Load(), "a handler ran with another request's event")
}

// TestHandler_PlainPushAndAnswers: a plain Pub/Sub push (terraform's push
// subscriptions) becomes the messagePublished CloudEvent: the message id,
// its publish time, the body as data, which Prompt reads. A handler's
// failure is a 500 that names nothing of it; what is no Pub/Sub message is
// a 400 and reaches no handler.
func TestHandler_PlainPushAndAnswers(t *testing.T) {
	t.Parallel()
	published := time.Date(2026, 11, 25, 7, 0, 0, 123000000, time.UTC)
	var got []event.Event
	var mu sync.Mutex
	fail := errors.New("secret: database at 10.0.0.7 refused")
	srv := serve(t, func(_ context.Context, e event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e)
		if e.ID() == "fails" {
			return fail
		}
		return nil
	})
	post := func(path, contentType, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, contentType, strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	data := base64.StdEncoding.EncodeToString([]byte(`{"chainId":1337,"signer":"0x00000000000000000000000000000000000000aa"}`))
	body := `{"message":{"data":"` + data + `","attributes":{"k":"v"},"messageId":"42","message_id":"42",` +
		`"publishTime":"2026-11-25T07:00:00.123Z"},"subscription":"projects/p/subscriptions/txfence-submit-push"}`
	code, _ := post("/projects/p/topics/txfence-submit", "application/json", body)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, got, 1)
	e := got[0]
	assert.Equal(t, "42", e.ID())
	assert.Equal(t, MessagePublishedType, e.Type())
	assert.Equal(t, "//pubsub.googleapis.com/projects/p/topics/txfence-submit", e.Source())
	assert.True(t, published.Equal(e.Time()), "publish time %s", e.Time())
	assert.JSONEq(t, body, string(e.Data()))
	chainID, signer, err := Prompt(e)
	require.NoError(t, err)
	assert.EqualValues(t, 1337, chainID)
	assert.Equal(t, common.HexToAddress("0xaa"), signer)

	code, answer := post("/projects/p/topics/txfence-submit", "application/json", strings.Replace(body, `"42"`, `"fails"`, 2))
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.NotContains(t, answer, "10.0.0.7")
	assert.NotContains(t, answer, "secret")

	for _, bad := range []string{``, `not json`, `{}`, `{"message":{}}`, `{"deliveryAttempt":1}`} {
		code, _ := post("/Submit", "application/json", bad)
		assert.Equal(t, http.StatusBadRequest, code, "%q", bad)
	}
	resp, err := http.Get(srv.URL + "/Submit")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Len(t, got, 2, "only the two messages reached the handler")
}
