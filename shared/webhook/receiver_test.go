package webhook

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// receiverSetup serves NewReceiver(testSecret, decide) and counts decide's
// calls.
type receiverSetup struct {
	url   string
	calls atomic.Int32
}

func setupReceiver(t *testing.T, decide func(ctx context.Context, r Request) (Answer, error)) *receiverSetup {
	t.Helper()
	s := &receiverSetup{}
	if decide == nil {
		decide = func(context.Context, Request) (Answer, error) {
			return Answer{Action: txm.ActionBump, Reason: "ok"}, nil
		}
	}
	srv := httptest.NewServer(NewReceiver([]byte(testSecret), func(ctx context.Context, r Request) (Answer, error) {
		s.calls.Add(1)
		return decide(ctx, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// signedRequest is one delivery as txfence would send it.
type signedRequest struct {
	body             []byte
	ts, sig, deliver string
}

func newSignedRequest(t *testing.T, secret string, at time.Time) signedRequest {
	t.Helper()
	id := "DELIVERY-" + at.Format("150405.000000000")
	body, err := json.Marshal(newRequest(id, stuckTx()))
	require.NoError(t, err)
	ts, sig := Sign([]byte(secret), body, at)
	return signedRequest{body: body, ts: ts, sig: sig, deliver: id}
}

func (s *receiverSetup) post(t *testing.T, r signedRequest) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(r.body))
	require.NoError(t, err)
	req.Header.Set(HeaderTimestamp, r.ts)
	req.Header.Set(HeaderSignature, r.sig)
	req.Header.Set(HeaderDelivery, r.deliver)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// TestIssue10_WebhookReceiverSignsItsAnswer: the answer verifies under the
// shared secret and names the delivery and the transaction it answers.
func TestIssue10_WebhookReceiverSignsItsAnswer(t *testing.T) {
	t.Parallel()
	s := setupReceiver(t, func(_ context.Context, r Request) (Answer, error) {
		return Answer{Action: txm.ActionCancel, Reason: fmt.Sprintf("nonce %d", r.Nonce), DeliveryID: "ignored", TxID: "ignored"}, nil
	})
	r := newSignedRequest(t, testSecret, time.Now())
	resp, body := s.post(t, r)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	require.NoError(t, Verify([]byte(testSecret), resp.Header.Get(HeaderTimestamp), resp.Header.Get(HeaderSignature), body, time.Now(), MaxAge))
	var a Answer
	require.NoError(t, json.Unmarshal(body, &a))
	assert.Equal(t, Answer{Action: txm.ActionCancel, Reason: "nonce 42", DeliveryID: r.deliver, TxID: stuckTx().TxID}, a)
	assert.Equal(t, r.deliver, resp.Header.Get(HeaderDelivery))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
}

func TestIssue10_WebhookReceiverRefusesReplay(t *testing.T) {
	t.Parallel()
	s := setupReceiver(t, nil)
	r := newSignedRequest(t, testSecret, time.Now())

	resp, _ := s.post(t, r)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = s.post(t, r)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)

	// Re-signed later with the same delivery id: still the same delivery.
	again := r
	again.ts, again.sig = Sign([]byte(testSecret), r.body, time.Now().Add(time.Second))
	resp, _ = s.post(t, again)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)

	// Another header value does not make it a new delivery.
	again.deliver = "SOMETHING-ELSE"
	resp, _ = s.post(t, again)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	assert.EqualValues(t, 1, s.calls.Load(), "decide runs once per delivery")
}

// TestIssue10_WebhookReceiverRefusesConcurrentReplay: of many copies of one
// delivery sent at once, exactly one is answered.
func TestIssue10_WebhookReceiverRefusesConcurrentReplay(t *testing.T) {
	t.Parallel()
	// The first copy's decision is held until every other copy has been
	// answered, so that all of them arrive while it is being decided; a
	// receiver that let a second copy through would hold it here too, until
	// the bound, and answer it.
	others := make(chan struct{})
	s := setupReceiver(t, func(context.Context, Request) (Answer, error) {
		select {
		case <-others:
		case <-time.After(5 * time.Second):
		}
		return Answer{Action: txm.ActionNoop}, nil
	})
	r := newSignedRequest(t, testSecret, time.Now())
	var ok, conflict, answered atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			resp, _ := s.post(t, r)
			switch resp.StatusCode {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusConflict:
				conflict.Add(1)
			}
			if resp.StatusCode != http.StatusOK && answered.Add(1) == 9 {
				close(others)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, ok.Load())
	assert.EqualValues(t, 9, conflict.Load())
	assert.EqualValues(t, 1, s.calls.Load())
}

func TestIssue10_WebhookReceiverRefusesOtherSecret(t *testing.T) {
	t.Parallel()
	s := setupReceiver(t, nil)

	// Through txfence's own client, configured with the wrong secret.
	c, err := New(s.url+hookPath+"?"+hookQuery, []byte("another-secret-0123456789"), 2*time.Second)
	require.NoError(t, err)
	res, err := c.Resolve(context.Background(), stuckTx())
	requireNoDecision(t, res, err, ErrBadAnswer)
	assert.Contains(t, err.Error(), "status 401")

	// By hand.
	resp, _ := s.post(t, newSignedRequest(t, "another-secret-0123456789", time.Now()))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	unsigned := newSignedRequest(t, testSecret, time.Now())
	unsigned.sig = ""
	resp, _ = s.post(t, unsigned)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	assert.Zero(t, s.calls.Load(), "decide is not called for a refused request")
}

func TestIssue10_WebhookReceiverRefusesStaleRequest(t *testing.T) {
	t.Parallel()
	s := setupReceiver(t, nil)
	for _, at := range []time.Time{time.Now().Add(-MaxAge - time.Minute), time.Now().Add(MaxAge + time.Minute)} {
		resp, _ := s.post(t, newSignedRequest(t, testSecret, at))
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	assert.Zero(t, s.calls.Load())
}

func TestIssue10_WebhookReceiverRefusesBadRequests(t *testing.T) {
	t.Parallel()
	s := setupReceiver(t, nil)
	signed := func(body string) signedRequest {
		ts, sig := Sign([]byte(testSecret), []byte(body), time.Now())
		return signedRequest{body: []byte(body), ts: ts, sig: sig, deliver: "D"}
	}

	resp, _ := s.post(t, signed(`not json`))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = s.post(t, signed(`{"txId":"t"}`))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "no deliveryId in the body")
	resp, _ = s.post(t, signed(`{"deliveryId":"D","txId":"`+strings.Repeat("x", maxBody)+`"}`))
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	get, err := http.Get(s.url)
	require.NoError(t, err)
	get.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, get.StatusCode)

	assert.Zero(t, s.calls.Load())
}

// TestIssue10_WebhookReceiverDecideFails: no decision is a 500, and the
// delivery may be sent again.
func TestIssue10_WebhookReceiverDecideFails(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	s := setupReceiver(t, func(context.Context, Request) (Answer, error) {
		if fail.Load() {
			return Answer{}, errors.New("database down")
		}
		return Answer{Action: "explode"}, nil
	})
	r := newSignedRequest(t, testSecret, time.Now())
	resp, body := s.post(t, r)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.NotContains(t, string(body), "database down", "decide's error stays inside")

	fail.Store(false)
	resp, _ = s.post(t, r)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "an unknown action is not answered")
	assert.EqualValues(t, 2, s.calls.Load(), "an unanswered delivery may be sent again")
}

func TestNewReceiverRejectsMissingParts(t *testing.T) {
	t.Parallel()
	decide := func(context.Context, Request) (Answer, error) { return Answer{}, nil }
	assert.Panics(t, func() { NewReceiver(nil, decide) })
	assert.Panics(t, func() { NewReceiver([]byte(testSecret), nil) })
}
