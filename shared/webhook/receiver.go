package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// receiver is the http.Handler NewReceiver returns.
type receiver struct {
	secret []byte
	decide func(ctx context.Context, t Request) (Answer, error)

	mu        sync.Mutex
	seen      map[string]time.Time // delivery id → when a replay would be stale anyway
	lastPrune time.Time
}

// NewReceiver is the receiving end of the webhook, for a service written in
// Go (and for tests). For each POST it:
//
//   - refuses with 401, without calling decide, a request whose signature does
//     not verify under secret or whose timestamp is more than MaxAge from now;
//   - refuses with 409 a delivery id it has already taken within that window
//     (a replay), and with 400 a body that is not a Request;
//   - calls decide, answers 500 when it fails or returns an unknown action,
//     and otherwise answers 200 with the Answer (its DeliveryID and TxID set
//     to the request's), signed under secret.
//
// It panics when secret is empty or decide is nil.
func NewReceiver(secret []byte, decide func(ctx context.Context, t Request) (Answer, error)) http.Handler {
	if len(secret) == 0 {
		panic("webhook.NewReceiver: a secret is required")
	}
	if decide == nil {
		panic("webhook.NewReceiver: decide is required")
	}
	return &receiver{secret: bytes.Clone(secret), decide: decide, seen: map[string]time.Time{}}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	ts := r.Header.Get(HeaderTimestamp)
	if err := Verify(rc.secret, ts, r.Header.Get(HeaderSignature), body, time.Now(), MaxAge); err != nil {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}

	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "body is not a stuck-transaction request", http.StatusBadRequest)
		return
	}
	if req.DeliveryID == "" || req.DeliveryID != r.Header.Get(HeaderDelivery) {
		http.Error(w, "deliveryId missing or not the "+HeaderDelivery+" header", http.StatusBadRequest)
		return
	}
	unix, _ := strconv.ParseInt(ts, 10, 64) // Verify has read it
	if !rc.take(req.DeliveryID, time.Unix(unix, 0).Add(MaxAge)) {
		http.Error(w, "delivery already taken", http.StatusConflict)
		return
	}

	a, err := rc.decide(r.Context(), req)
	if err == nil {
		a.Action, err = txm.ParseStuckAction(string(a.Action))
	}
	if err != nil {
		// Not answered: a resend of this delivery may try again.
		rc.release(req.DeliveryID)
		http.Error(w, "no decision", http.StatusInternalServerError)
		return
	}
	a.DeliveryID, a.TxID = req.DeliveryID, req.TxID
	out, err := json.Marshal(a)
	if err != nil {
		rc.release(req.DeliveryID)
		http.Error(w, "no decision", http.StatusInternalServerError)
		return
	}
	ts, sig := Sign(rc.secret, out, time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(HeaderTimestamp, ts)
	w.Header().Set(HeaderSignature, sig)
	w.Header().Set(HeaderDelivery, req.DeliveryID)
	_, _ = w.Write(out)
}

// take records delivery id until expires and reports whether it was new.
// Ids whose window has passed are forgotten, at most once every minute.
func (rc *receiver) take(id string, expires time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := time.Now()
	if now.Sub(rc.lastPrune) > time.Minute {
		for k, exp := range rc.seen {
			if now.After(exp) {
				delete(rc.seen, k)
			}
		}
		rc.lastPrune = now
	}
	if _, dup := rc.seen[id]; dup {
		return false
	}
	rc.seen[id] = expires
	return true
}

// release forgets a delivery id that was not answered.
func (rc *receiver) release(id string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.seen, id)
}
