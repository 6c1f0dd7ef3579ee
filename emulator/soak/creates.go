package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// Kinds of create.
const (
	kindPlain   = "plain"   // a small transfer
	kindMaxFee1 = "maxfee1" // a small transfer whose caller caps the fee at 1 wei, below any base fee
	kindDip     = "dip"     // a transfer larger than the signer's balance (the funding dip)
)

// sink is where transfers go.
var sink = common.HexToAddress("0x000000000000000000000000000000000000dEaD")

// created is one create the soak made.
type created struct {
	RequestID string
	TxID      string // "" until the API answered 200/202
	Signer    common.Address
	Kind      string
	Phase     string // the fault under way when it was made
}

// creates makes the soak's create requests, spread evenly over the load
// period, as clients do: each request with a request id, retried with the
// same id on a transport error, a 5xx or a 429, on the next server.
type creates struct {
	r        *run
	interval time.Duration
	maxFee1  map[int]bool // which creates cap the fee at 1 wei

	mu   sync.Mutex
	list []*created

	retries, failed atomic.Int64
	client          *http.Client
}

func newCreates(r *run, loadFor time.Duration) *creates {
	c := &creates{r: r, interval: loadFor / time.Duration(r.cfg.Txs), maxFee1: map[int]bool{},
		client: &http.Client{Timeout: 10 * time.Second}}
	// "Some" creates: by default one in 250, at least two, at seeded places.
	n := r.cfg.MaxFee1
	if n == 0 {
		n = max(2, r.cfg.Txs/250)
	}
	for n = min(n, r.cfg.Txs); len(c.maxFee1) < n; {
		c.maxFee1[r.intn(r.cfg.Txs)] = true
	}
	return c
}

// run makes the creates until all are made or ctx is done, and waits for
// those in flight.
func (c *creates) run(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // clients in flight
	start := time.Now()
	for i := 0; i < c.r.cfg.Txs; i++ {
		if d := time.Until(start.Add(time.Duration(i) * c.interval)); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		kind := kindPlain
		if c.maxFee1[i] {
			kind = kindMaxFee1
		}
		signer := c.r.s.Signers[c.r.intn(len(c.r.s.Signers))]
		value := big.NewInt(int64(1 + c.r.intn(1_000_000_000)))
		wg.Go(func() {
			defer func() { <-sem }()
			c.create(i, signer, kind, value)
		})
	}
	wg.Wait()
}

// create makes one create and records it; a create the API refuses, or
// that cannot be made within the soak's timeout, is a violation.
func (c *creates) create(i int, signer common.Address, kind string, value *big.Int) *created {
	cr := &created{RequestID: fmt.Sprintf("soak-%d-%s-%d", c.r.cfg.Seed, kind, i), Signer: signer, Kind: kind, Phase: c.r.phase.Load().(string)}
	c.mu.Lock()
	c.list = append(c.list, cr)
	c.mu.Unlock()
	body := map[string]any{"from": txm.CanonicalAddress(signer), "to": txm.CanonicalAddress(sink),
		"value": value.String(), "gasLimit": 21000, "requestId": cr.RequestID}
	if kind == kindMaxFee1 {
		body["maxFeePerGas"] = "1"
	}
	raw, _ := json.Marshal(body)

	deadline := time.Now().Add(c.r.cfg.Timeout)
	backoff := 200 * time.Millisecond
	var last string
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			c.retries.Add(1)
			time.Sleep(backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
		url := c.r.s.ServerURLs[(i+attempt)%len(c.r.s.ServerURLs)] + "/Api/v1/transactions"
		status, answer, err := c.post(url, raw)
		switch {
		case err != nil:
			last = err.Error()
			continue
		case status == http.StatusAccepted || status == http.StatusOK:
			var v struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(answer, &v); err != nil || v.ID == "" {
				c.r.violation("create %s: %d answer without an id: %s", cr.RequestID, status, answer)
				return cr
			}
			c.mu.Lock()
			cr.TxID = v.ID
			c.mu.Unlock()
			return cr
		case status >= 500 || status == http.StatusTooManyRequests:
			last = fmt.Sprintf("%d %s", status, bytes.TrimSpace(answer))
			continue
		default: // 409 for a replay of the same payload, or a refusal of a valid request
			c.r.violation("create %s (%s): %d %s", cr.RequestID, kind, status, bytes.TrimSpace(answer))
			return cr
		}
	}
	c.failed.Add(1)
	c.r.violation("create %s (%s): not made within %s, last answer: %s", cr.RequestID, kind, c.r.cfg.Timeout, last)
	return cr
}

func (c *creates) post(url string, body []byte) (int, []byte, error) {
	resp, err := c.client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// made counts the creates that got a transaction id.
func (c *creates) made() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, cr := range c.list {
		if cr.TxID != "" {
			n++
		}
	}
	return n
}

// all returns a copy of every create.
func (c *creates) all() []created {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]created, len(c.list))
	for i, cr := range c.list {
		out[i] = *cr
	}
	return out
}
