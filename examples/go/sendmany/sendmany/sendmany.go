// Package sendmany sends many transactions over several signers through
// the Go client and follows the completion feed until every one is final:
// the logic of the sendmany example, importable so that it can be tested
// against a running stack.
package sendmany

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/txfence/txfence/client"
)

// Config is one run.
type Config struct {
	// API is the API's root (http://127.0.0.1:8080/Api under make dev).
	API string
	// Key is an API key; empty sends no credential (development mode).
	Key string
	// Signers send the transactions in turn; empty reads the configured
	// signers from GET /v1/signers (which needs the reader role).
	Signers []string
	// To receives each transaction's Value (default 0x…dEaD, 1 wei).
	To    string
	Value *big.Int
	// ChainID may be zero when the deployment has one chain.
	ChainID uint64
	// N is how many transactions to send (default 1,000).
	N int
	// Concurrency is how many creates are in flight at once (default 16).
	Concurrency int
	// Progress is how often a progress line is printed (default 2s).
	Progress time.Duration
	// Retry bounds the client's retries (zero: the client's defaults).
	Retry client.RetryPolicy
}

const deadAddress = "0x000000000000000000000000000000000000dEaD"

func (c Config) withDefaults() Config {
	if c.To == "" {
		c.To = deadAddress
	}
	if c.Value == nil {
		c.Value = big.NewInt(1)
	}
	if c.N == 0 {
		c.N = 1000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.Progress <= 0 {
		c.Progress = 2 * time.Second
	}
	return c
}

// tally is what the run knows so far; its methods hold mu.
type tally struct {
	mu sync.Mutex
	// mine are the transactions this run created.
	mine map[string]bool
	// last is the newest outcome the feed reported of each transaction,
	// this run's or not (an outcome may arrive before its create's
	// answer).
	last map[string]client.State
	// wasStuck are the transactions ever reported STUCK.
	wasStuck map[string]bool
	sent     int
	// created says every create has answered.
	created bool
}

// counts says how many of this run's transactions are confirmed, failed
// and stuck now.
func (t *tally) counts() (confirmed, failed, stuck int) {
	for id := range t.mine {
		switch t.last[id] {
		case client.StateConfirmed:
			confirmed++
		case client.StateFailedFinal:
			failed++
		case client.StateStuck:
			stuck++
		}
	}
	return confirmed, failed, stuck
}

// done says every create answered and each created transaction is final.
func (t *tally) done() bool {
	if !t.created {
		return false
	}
	confirmed, failed, _ := t.counts()
	return confirmed+failed == len(t.mine)
}

// Run sends cfg.N transactions spread over the signers, cfg.Concurrency at
// a time, and follows the feed from a cursor taken before the first create
// until each one is CONFIRMED or FAILED_FINAL (a STUCK one is not final:
// it is reported, and waited for). It prints a progress line every
// cfg.Progress and, at the end, one summary line:
//
//	sendmany: sent=1000 confirmed=1000 failed=0 stuck=0 retries=0 seconds=12.3
//
// where stuck counts the transactions ever reported STUCK and retries the
// client's retries. A create the server refuses ends the run with its
// error; so does ctx.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	cfg = cfg.withDefaults()
	if cfg.N < 0 {
		return fmt.Errorf("sendmany: -n must be positive, not %d", cfg.N)
	}
	opts := []client.Option{client.WithRetryPolicy(cfg.Retry)}
	if cfg.Key != "" {
		opts = append(opts, client.WithAPIKey(cfg.Key))
	}
	c, err := client.New(cfg.API, opts...)
	if err != nil {
		return fmt.Errorf("sendmany: %w", err)
	}
	signers := cfg.Signers
	if len(signers) == 0 {
		if signers, err = listSigners(ctx, c, cfg.ChainID); err != nil {
			return err
		}
	}
	if len(signers) == 0 {
		return errors.New("sendmany: no signers: pass -signers")
	}
	start := time.Now()

	// The cursor is taken before the first create: every outcome of this
	// run's transactions is numbered after it.
	cursor, err := latest(ctx, c)
	if err != nil {
		return err
	}

	var outMu sync.Mutex
	printf := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = fmt.Fprintf(out, format, a...)
	}
	printf("sendmany: sending %d transactions over %d signers to %s from feed cursor %s\n", cfg.N, len(signers), cfg.To, cursor)

	t := &tally{mine: map[string]bool{}, last: map[string]client.State{}, wasStuck: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()

	// Creates, cfg.Concurrency at a time.
	var createErr error
	var errOnce sync.Once
	createsDone := make(chan struct{})
	go func() {
		defer close(createsDone)
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range cfg.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					got, err := c.Create(ctx, client.CreateRequest{ChainID: cfg.ChainID, From: signers[i%len(signers)], To: cfg.To,
						Value: cfg.Value, GasLimit: 21000})
					if err != nil {
						errOnce.Do(func() { createErr = fmt.Errorf("sendmany: %w", err); cancel() })
						continue
					}
					t.mu.Lock()
					t.mine[got.ID] = true
					t.sent++
					t.mu.Unlock()
				}
			}()
		}
		for i := range cfg.N {
			select {
			case jobs <- i:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		close(jobs)
		wg.Wait()
		t.mu.Lock()
		t.created = true
		done := t.done()
		t.mu.Unlock()
		if done {
			stopFollow() // the last outcome came before the last answer
		}
	}()

	// Progress lines until the end.
	progressDone := make(chan struct{})
	defer func() { <-progressDone }()
	go func() {
		defer close(progressDone)
		tk := time.NewTicker(cfg.Progress)
		defer tk.Stop()
		for {
			select {
			case <-followCtx.Done():
				return
			case <-tk.C:
			}
			t.mu.Lock()
			confirmed, failed, stuck := t.counts()
			sent := t.sent
			t.mu.Unlock()
			printf("sendmany: progress sent=%d/%d confirmed=%d failed=%d stuck=%d seconds=%.1f\n",
				sent, cfg.N, confirmed, failed, stuck, time.Since(start).Seconds())
		}
	}()

	var followErr error
	for it, err := range c.Follow(followCtx, cursor, client.FollowOptions{}) {
		if err != nil {
			followErr = err
			break
		}
		t.mu.Lock()
		t.last[it.TxID] = it.State
		if it.State == client.StateStuck && !t.wasStuck[it.TxID] {
			t.wasStuck[it.TxID] = true
			printf("sendmany: stuck tx=%s signer=%s subState=%s (waiting for it)\n", it.TxID, it.Signer, it.SubState)
		}
		done := t.done()
		t.mu.Unlock()
		if done {
			break
		}
	}
	stopFollow()
	<-createsDone
	if createErr != nil {
		return createErr
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done() {
		if followErr == nil {
			followErr = ctx.Err()
		}
		return fmt.Errorf("sendmany: follow the feed: %w", followErr)
	}
	confirmed, failed, _ := t.counts()
	var retries int64
	for _, n := range c.Stats() {
		retries += n
	}
	printf("sendmany: sent=%d confirmed=%d failed=%d stuck=%d retries=%d seconds=%.1f\n",
		t.sent, confirmed, failed, len(t.wasStuck), retries, time.Since(start).Seconds())
	return nil
}

// latest is the feed's cursor now, retried as the client retries a call.
func latest(ctx context.Context, c *client.Client) (client.Cursor, error) {
	var err error
	for attempt := range 10 {
		var p client.FeedPage
		if p, err = c.Completions(ctx, client.CursorLatest, 1, 0); err == nil {
			return p.Next, nil
		}
		if errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrInvalid) {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("sendmany: take the feed's cursor: %w", ctx.Err())
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("sendmany: take the feed's cursor: %w", err)
}

// listSigners reads the configured signers (GET /v1/signers, every page).
func listSigners(ctx context.Context, c *client.Client, chainID uint64) ([]string, error) {
	all, err := c.Signers(ctx, client.SignerOptions{ChainID: chainID, Limit: 500})
	if err != nil {
		return nil, fmt.Errorf("sendmany: %w (pass -signers, or a key with the reader role)", err)
	}
	var signers []string
	for _, s := range all {
		if s.Configured && !containsFold(signers, s.Address) {
			signers = append(signers, s.Address)
		}
	}
	return signers, nil
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
