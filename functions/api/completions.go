package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/txm"
)

// completionView is one event of the feed on the wire.
type completionView struct {
	Seq      int64     `json:"seq"`
	Type     string    `json:"type"`
	Version  int64     `json:"version"`
	TxID     string    `json:"txId"`
	ChainID  uint64    `json:"chainId"`
	Signer   string    `json:"signer"`
	State    txm.State `json:"state"`
	NewFork  bool      `json:"newFork"`
	SubState string    `json:"subState,omitempty"`
	// Nonce is absent for a transaction that never got one (it ended
	// while it waited for approval).
	Nonce     *uint64   `json:"nonce,omitempty"`
	Hash      *string   `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
	// Shard is the database the outcome was written in, when signers are
	// sharded: seq counts per shard. The one database is unnamed.
	Shard string `json:"shard,omitempty"`
	// The event's own fields (fees, block, previousHash, ...), in the
	// events=lifecycle feed only: the outcomes feed keeps its fields.
	*txm.EventDetail
}

type completionPage struct {
	Items []completionView `json:"items"`
	// Next is the cursor to pass as after for the following page: each
	// shard's last delivered seq, or the request's where it had none.
	Next feedCursor `json:"next"`
	// UnavailableShards could not be read; their items come on a later
	// page (Next did not move past them).
	UnavailableShards []string `json:"unavailableShards,omitempty"`
}

// feedCursor is a cursor on the wire: the one database's is a seq, a JSON
// number as it always was; a cursor naming shards ("a:12,b:40") is a
// string.
type feedCursor string

func (c feedCursor) MarshalJSON() ([]byte, error) {
	if _, err := strconv.ParseUint(string(c), 10, 64); err == nil {
		return []byte(c), nil
	}
	return json.Marshal(string(c))
}

// UnmarshalJSON reads either form back.
func (c *feedCursor) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*c = feedCursor(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*c = feedCursor(s)
	return nil
}

// maxWait bounds a long poll.
const maxWait = 30 * time.Second

// completions serves the ordered feed of outcomes of the caller's signers
// (with events=lifecycle, every event of their transactions' lifecycles):
// items after the cursor after, oldest first (after=latest: from every
// shard's newest seq on, so that only what happens from now is answered).
// With wait, an empty answer is held back until an item arrives or wait
// passes (at most 30s); a caller holds at most its policy's number of
// waits at once (429 beyond). Consumers remember the last cursor they
// processed and deduplicate redeliveries by (shard, seq).
func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	feed := h.deps.Completions
	var errs []fieldError
	limit, wait := 100, time.Duration(0)
	var after app.FeedCursor
	latest := q.Get("after") == "latest"
	if !latest {
		c, err := feed.ParseCursor(q.Get("after"))
		if err != nil {
			errs = append(errs, fieldError{Field: "after", Message: err.Error()})
		}
		after = c
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			errs = append(errs, fieldError{Field: "limit", Message: "must be between 1 and 1000"})
		}
		limit = n
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			if n, nerr := strconv.Atoi(s); nerr == nil {
				d, err = time.Duration(n)*time.Second, nil
			}
		}
		if err != nil || d < 0 || d > maxWait {
			errs = append(errs, fieldError{Field: "wait", Message: "must be a duration (e.g. 10s) or seconds, at most 30s"})
		}
		wait = d
	}
	lifecycle := false
	switch q.Get("events") {
	case "", "outcomes":
	case "lifecycle":
		lifecycle = true
	default:
		errs = append(errs, fieldError{Field: "events", Message: "must be outcomes or lifecycle"})
	}
	for k := range q {
		if k != "after" && k != "limit" && k != "wait" && k != "events" {
			errs = append(errs, fieldError{Field: k, Message: "unknown query parameter"})
		}
	}
	if len(errs) > 0 {
		writeProblem(w, badRequest("invalid query parameters", errs...))
		return
	}
	if latest { // only what happens from now on (a console that wants to be woken)
		c, err := feed.Latest(r.Context())
		if err != nil {
			writeProblem(w, problemFor(err))
			return
		}
		after = c
	}
	c := callerOf(r)
	items, next, unavailable, err := feed.Page(r.Context(), c.who, c.pol, after, limit, wait, lifecycle)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	page := completionPage{Items: make([]completionView, len(items)), Next: feedCursor(feed.FormatCursor(next)), UnavailableShards: unavailable}
	for i, it := range items {
		page.Items[i] = viewOf(it.Completion)
		page.Items[i].Shard = it.Shard
		if lifecycle {
			d := it.Detail
			page.Items[i].EventDetail = &d
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// viewOf is a completion's wire form.
func viewOf(c txm.Completion) completionView {
	v := completionView{Seq: c.Seq, Type: string(c.Type), Version: c.Version, TxID: c.TxID, ChainID: c.ChainID,
		Signer: txm.CanonicalAddress(c.Signer), State: c.State, NewFork: c.NewFork, SubState: c.SubState, Nonce: c.Nonce,
		CreatedAt: c.CreatedAt.UTC()}
	if v.Type == "" { // a feed that does not type its outcomes
		v.Type = string(txm.EventFor(c.State))
	}
	if c.Hash != nil {
		s := c.Hash.Hex()
		v.Hash = &s
	}
	return v
}
