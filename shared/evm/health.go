package evm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// Endpoint health. Each read endpoint's head is read (one eth_blockNumber)
// at most once per HeadInterval, by the first call that finds the last
// reading older, before it chooses where to go: nothing runs between
// calls, so a client left alone costs nothing and Close has nothing to
// stop. An endpoint whose head is more than LagBlocks behind the best
// head known is lagging; one whose last call failed
// at the transport level is dead until a call or a head reading succeeds,
// and is not tried again (unless nothing else is left) before a backoff
// that doubles with each failure in a row.

// health is what the client knows of one endpoint.
type health struct {
	head      uint64
	headKnown bool
	headAt    time.Time // when head was read (zero: never)
	failures  int       // transport failures in a row: dead while > 0
	retryAt   time.Time // a dead endpoint is not tried before then
	lastErr   string    // the kind of its last failure (errorKind)
	lastErrAt time.Time
	reported  txm.EndpointState // the state last logged
}

// refresh reads the heads that are due: those read longer than
// HeadInterval ago, and those of dead endpoints whose backoff ran out, at
// once. One refresh runs at a time; a call that finds one running goes on
// with what is known, unless nothing is known yet, and then waits for it.
// The probes end before refresh returns.
func (c *Client) refresh(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	c.hmu.Lock()
	var due []*endpoint
	known := false
	for _, ep := range c.endpoints {
		if ep.wrong.Load() {
			continue
		}
		h := &ep.health
		known = known || !h.headAt.IsZero() || h.failures > 0
		switch {
		case h.failures > 0:
			if !now.Before(h.retryAt) {
				due = append(due, ep)
			}
		case h.headAt.IsZero() || now.Sub(h.headAt) >= c.opts.HeadInterval:
			due = append(due, ep)
		}
	}
	if len(due) == 0 || (c.refreshing != nil && known) {
		c.hmu.Unlock()
		return
	}
	if running := c.refreshing; running != nil {
		c.hmu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
		}
		return
	}
	done := make(chan struct{})
	c.refreshing = done
	c.hmu.Unlock()

	var wg sync.WaitGroup
	for _, ep := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.probe(ctx, ep)
		}()
	}
	wg.Wait()

	c.hmu.Lock()
	c.refreshing = nil
	close(done)
	changes := c.changesLocked()
	c.hmu.Unlock()
	c.logChanges(ctx, changes)
}

// probe reads ep's head (checking its chain id first, if not yet done).
func (c *Client) probe(ctx context.Context, ep *endpoint) {
	var n hexutil.Uint64
	err := c.verify(ctx, ep)
	if err == nil {
		err = c.call(ctx, ep, func(ctx context.Context, rc *rpc.Client) error {
			return rc.CallContext(ctx, &n, "eth_blockNumber")
		})
	}
	if c.note(ctx, ep, err); err != nil && (failover(err) || ctx.Err() != nil) {
		return
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	// A node that does not serve eth_blockNumber answers all the same:
	// its head is unknown, and it is read from after those whose head is.
	ep.health.headAt = time.Now()
	if err == nil {
		ep.health.head, ep.health.headKnown = uint64(n), true
	}
}

// note updates ep's health from the outcome of one call to it: an answer,
// a JSON-RPC error included, means it is alive; a transport failure makes
// it dead for a backoff. A pinned read it could not answer, or a call its
// caller gave up on, says nothing of its health. It reports whether ep
// was dead or is now.
func (c *Client) note(ctx context.Context, ep *endpoint, err error) bool {
	switch {
	case err != nil && errors.Is(err, ErrWrongChain):
		c.failed(ep, err)
		return true
	case err != nil && (isBehind(err) || ctx.Err() != nil):
		return false
	case err != nil && failover(err):
		c.failed(ep, err)
		return true
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	was := ep.health.failures > 0
	ep.health.failures, ep.health.retryAt = 0, time.Time{}
	return was
}

// failed records a transport failure of ep: it is dead, and passed over
// for DeadBackoffMin × 2^(failures in a row − 1), at most DeadBackoffMax.
func (c *Client) failed(ep *endpoint, err error) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	h := &ep.health
	h.failures++
	wait := c.opts.DeadBackoffMax
	if h.failures <= 30 {
		wait = min(c.opts.DeadBackoffMin<<(h.failures-1), c.opts.DeadBackoffMax)
	}
	now := time.Now()
	h.retryAt = now.Add(wait)
	h.lastErr, h.lastErrAt = errorKind(err), now
}

// bestHeadLocked is the highest head the read endpoints reported, a dead
// one's last included: the chain is at least there, so that a node that
// stopped following it stays lagging when the one ahead of it dies.
func (c *Client) bestHeadLocked() uint64 {
	var best uint64
	for _, ep := range c.endpoints {
		if h := &ep.health; h.headKnown && !ep.wrong.Load() {
			best = max(best, h.head)
		}
	}
	return best
}

// stateLocked is ep's state given the best head.
func (c *Client) stateLocked(ep *endpoint, best uint64) txm.EndpointState {
	h := &ep.health
	switch {
	case ep.wrong.Load() || h.failures > 0:
		return txm.EndpointDead
	case ep.send == nil && h.headKnown && best > h.head && best-h.head > c.opts.LagBlocks:
		return txm.EndpointLagging
	}
	return txm.EndpointHealthy
}

// readOrder returns the read endpoints in the order reads try them, after
// reading the heads that are due: the healthy ones, highest head first
// (then in order of preference), then the lagging ones, highest head
// first, then the dead ones, those whose backoff ends first first. Those
// serving another chain are left out.
func (c *Client) readOrder(ctx context.Context) []*endpoint {
	c.refresh(ctx)
	c.hmu.Lock()
	defer c.hmu.Unlock()
	best := c.bestHeadLocked()
	type ranked struct {
		ep    *endpoint
		state int
	}
	order := make([]ranked, 0, len(c.endpoints))
	for _, ep := range c.endpoints {
		if ep.wrong.Load() {
			continue
		}
		order = append(order, ranked{ep: ep, state: slices.Index(txm.EndpointStates, c.stateLocked(ep, best))})
	}
	slices.SortStableFunc(order, func(a, b ranked) int {
		if a.state != b.state {
			return a.state - b.state
		}
		ha, hb := &a.ep.health, &b.ep.health
		if txm.EndpointStates[a.state] == txm.EndpointDead {
			return ha.retryAt.Compare(hb.retryAt)
		}
		switch {
		case ha.headKnown && (!hb.headKnown || ha.head > hb.head):
			return -1
		case hb.headKnown && (!ha.headKnown || hb.head > ha.head):
			return 1
		}
		return 0
	})
	out := make([]*endpoint, len(order))
	for i, r := range order {
		out[i] = r.ep
	}
	return out
}

// healthyReads are the read endpoints broadcasts go to: the healthy ones,
// in read order; when there is none, the best available (the lagging
// ones, or else every dead one), and that is logged.
func (c *Client) healthyReads(ctx context.Context) []*endpoint {
	order := c.readOrder(ctx)
	c.hmu.Lock()
	best := c.bestHeadLocked()
	var by [3][]*endpoint
	for _, ep := range order {
		s := slices.Index(txm.EndpointStates, c.stateLocked(ep, best))
		by[s] = append(by[s], ep)
	}
	c.hmu.Unlock()
	for _, eps := range by {
		if len(eps) > 0 {
			c.servedBy(ctx, eps[0])
			return eps
		}
	}
	return nil
}

// servedBy logs, once until a healthy endpoint serves again, that a call
// went to an endpoint that is not healthy because no healthy one was left.
func (c *Client) servedBy(ctx context.Context, ep *endpoint) {
	c.hmu.Lock()
	state := c.stateLocked(ep, c.bestHeadLocked())
	was, now := c.degraded, state != txm.EndpointHealthy
	c.degraded = now
	c.hmu.Unlock()
	if now && !was {
		c.log.WarnContext(ctx, "no healthy endpoint answered: using the best available", slog.String("endpoint", ep.name),
			slog.String("state", string(state)))
	}
}

// change is an endpoint whose state changed since it was last logged.
type change struct {
	name       string
	from, to   txm.EndpointState
	head, best uint64
	lastErr    string
}

// changesLocked lists, and marks as logged, the state changes of every
// endpoint.
func (c *Client) changesLocked() []change {
	best := c.bestHeadLocked()
	var out []change
	for _, ep := range slices.Concat(c.endpoints, c.sendOnly) {
		h := &ep.health
		s := c.stateLocked(ep, best)
		from := h.reported
		if from == "" {
			from = txm.EndpointHealthy // a new endpoint is logged only once it is not
		}
		if s != from {
			out = append(out, change{name: ep.name, from: from, to: s, head: h.head, best: best, lastErr: h.lastErr})
		}
		h.reported = s
	}
	return out
}

// logChanges logs each endpoint's change of state.
func (c *Client) logChanges(ctx context.Context, changes []change) {
	for _, ch := range changes {
		attrs := []any{slog.String("endpoint", ch.name), slog.String("from", string(ch.from)), slog.String("state", string(ch.to))}
		switch ch.to {
		case txm.EndpointHealthy:
			c.log.InfoContext(ctx, "endpoint healthy again", attrs...)
		case txm.EndpointLagging:
			c.log.WarnContext(ctx, "endpoint lagging: not read from until it catches up",
				append(attrs, slog.Uint64("head", ch.head), slog.Uint64("best_head", ch.best))...)
		default:
			c.log.WarnContext(ctx, "endpoint dead: passed over and retried with backoff", append(attrs, slog.String("last_error", ch.lastErr))...)
		}
	}
}

// noteChanges logs the state changes calls have made since the last time.
func (c *Client) noteChanges(ctx context.Context) {
	c.hmu.Lock()
	changes := c.changesLocked()
	c.hmu.Unlock()
	c.logChanges(ctx, changes)
}

// EndpointHealth implements txm.EndpointHealthReader: every endpoint, the
// read ones in order of preference then the send-only ones, as last seen
// (it reads nothing).
func (c *Client) EndpointHealth() []txm.EndpointHealth {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	best := c.bestHeadLocked()
	out := make([]txm.EndpointHealth, 0, len(c.endpoints)+len(c.sendOnly))
	for _, ep := range slices.Concat(c.endpoints, c.sendOnly) {
		h := &ep.health
		e := txm.EndpointHealth{Name: ep.name, State: c.stateLocked(ep, best), LastError: h.lastErr}
		if ep.send != nil {
			e.Name, e.SendOnly, e.PublicFallback = ep.send.Name, true, ep.send.PublicFallback
		}
		if h.headKnown {
			e.Head = h.head
			if best > h.head {
				e.Lag = best - h.head
			}
		}
		if !h.headAt.IsZero() {
			at := h.headAt
			e.CheckedAt = &at
		}
		if !h.lastErrAt.IsZero() {
			at := h.lastErrAt
			e.LastErrorAt = &at
		}
		out = append(out, e)
	}
	return out
}

// errorKind names what kind of failure err is, for the health view and
// metrics: never its text, which may quote a URL.
func errorKind(err error) string {
	var httpErr rpc.HTTPError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrWrongChain):
		return "wrong_chain"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &httpErr):
		return fmt.Sprintf("http_%d", httpErr.StatusCode)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &netErr):
		return "connection"
	}
	return "transport"
}
