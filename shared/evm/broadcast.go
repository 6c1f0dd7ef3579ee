package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// A broadcast goes out on several paths at once: every healthy read
// endpoint (the best available when none is) and the send-only endpoints
// of its route (see paths). It is accepted when any path accepted it; the
// paths' answers are merged into one per transaction (see merge), so that
// the node that answers "already known" after another accepted the same
// bytes does not turn an acceptance into a failure.

// SendRawTransaction is eth_sendRawTransaction on every path of raw's
// route at once. Its error, merged from the paths' answers, is classified
// by ClassifyBroadcast into a *txm.BroadcastError. On a chain without a
// public pool, "nonce too high" is followed by the same bytes again at
// once, up to NonceTooHighRetries times (see nonceTooHighRetries).
func (c *Client) SendRawTransaction(ctx context.Context, raw []byte) error {
	return c.SendRawTransactions(ctx, [][]byte{raw})[0]
}

// SendRawTransactions sends raws, in order, on every path of their route
// at once: to each path in JSON-RPC batches of at most MaxBatch calls, one
// after another (nodes process a batch's calls in order), or as one call
// when there is one transaction. It returns one error per transaction,
// nil for those a path accepted, each merged from the paths' answers and
// classified like SendRawTransaction's; on a path, a transport failure is
// the answer of every element of its batch and of those after it, which
// that path is not sent. On a chain without a public pool, the
// transactions answered "nonce too high" are sent again, in order, at
// once, up to NonceTooHighRetries times.
func (c *Client) SendRawTransactions(ctx context.Context, raws [][]byte) []error {
	return c.SendRawTransactionsVia(ctx, raws, nil)
}

// SendRawTransactionsVia is SendRawTransactions with a route per
// transaction, as its create named it: routes[i] names a send-only
// endpoint or RoutePublic and is taken instead of the signer's route; ""
// (or a nil routes) takes the signer's route.
func (c *Client) SendRawTransactionsVia(ctx context.Context, raws [][]byte, routes []string) []error {
	errs := c.sendBatches(ctx, raws, routes)
	for try := 0; try < c.nonceTooHighRetries() && ctx.Err() == nil; try++ {
		var again []int
		for i, err := range errs {
			if nonceTooHigh(err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		resend := make([][]byte, len(again))
		var via []string
		if routes != nil {
			via = make([]string, len(again))
		}
		for j, i := range again {
			resend[j] = raws[i]
			if via != nil {
				via[j] = routes[i]
			}
		}
		for j, err := range c.sendBatches(ctx, resend, via) {
			errs[again[j]] = err
		}
	}
	return errs
}

// nonceTooHighRetries is how many times a "nonce too high" answer is
// followed by the same bytes: a sequencer keeps no transaction whose nonce
// is ahead of the sender's (it holds one for a moment, then refuses it), so
// one whose predecessor is still on its way, through another endpoint or an
// earlier batch, gets in when sent again; a public pool queues such a
// transaction itself and answers no such thing.
func (c *Client) nonceTooHighRetries() int {
	if !c.opts.NoPublicMempool {
		return 0
	}
	return c.opts.NonceTooHighRetries
}

// sendBatches is SendRawTransactionsVia without the retries.
func (c *Client) sendBatches(ctx context.Context, raws [][]byte, routes []string) []error {
	errs := make([]error, len(raws))
	for _, g := range c.routeGroups(raws, routes) {
		group := make([][]byte, len(g.at))
		for i, at := range g.at {
			group[i] = raws[at]
		}
		for i, err := range c.broadcast(ctx, g.route, group) {
			errs[g.at[i]] = err
		}
	}
	return errs
}

// routeGroup is the transactions, by index, that take one route.
type routeGroup struct {
	route string
	at    []int
}

// routeGroups splits raws by their routes: routes[i] where given, else
// the route of their signers (Options.Routes), keeping their order within
// each group; without either, all take the default route.
func (c *Client) routeGroups(raws [][]byte, routes []string) []routeGroup {
	given := false
	for _, r := range routes {
		given = given || r != ""
	}
	if len(c.opts.Routes) == 0 && !given {
		g := routeGroup{at: make([]int, len(raws))}
		for i := range raws {
			g.at[i] = i
		}
		return []routeGroup{g}
	}
	var out []routeGroup
	where := map[string]int{}
	signer := types.LatestSignerForChainID(new(big.Int).SetUint64(c.chainID))
	for i, raw := range raws {
		route := ""
		var tx types.Transaction
		if i < len(routes) && routes[i] != "" {
			route = routes[i]
		} else if len(c.opts.Routes) > 0 && tx.UnmarshalBinary(raw) == nil {
			if from, err := types.Sender(signer, &tx); err == nil {
				route = c.opts.Routes[from]
			}
		}
		j, ok := where[route]
		if !ok {
			j = len(out)
			where[route] = j
			out = append(out, routeGroup{route: route})
		}
		out[j].at = append(out[j].at, i)
	}
	return out
}

// paths are where a broadcast of route goes: the send-only endpoint the
// route names, alone when it has no public fallback; otherwise the
// healthy read endpoints (the best available when none is) and, for the
// default route, every send-only endpoint with public fallback that is
// not dead within its backoff. RoutePublic takes the read endpoints only,
// and so does a route that names no endpoint (a transaction's, whose
// endpoint was since taken out of the configuration).
func (c *Client) paths(ctx context.Context, route string) []*endpoint {
	var extra []*endpoint
	public := true
	switch route {
	case "", RoutePublic:
		if route == "" {
			extra = c.fallbacks()
		}
	default:
		for _, ep := range c.sendOnly {
			if ep.send.Name == route {
				extra, public = []*endpoint{ep}, ep.send.PublicFallback
			}
		}
	}
	var paths []*endpoint
	if public {
		paths = c.healthyReads(ctx)
	}
	return append(paths, extra...)
}

// fallbacks are the send-only endpoints with public fallback that are not
// dead within their backoff.
func (c *Client) fallbacks() []*endpoint {
	now := time.Now()
	c.hmu.Lock()
	defer c.hmu.Unlock()
	var out []*endpoint
	for _, ep := range c.sendOnly {
		if ep.send.PublicFallback && (ep.health.failures == 0 || !now.Before(ep.health.retryAt)) {
			out = append(out, ep)
		}
	}
	return out
}

// broadcast sends raws on every path of route at once and merges the
// answers of each transaction.
func (c *Client) broadcast(ctx context.Context, route string, raws [][]byte) []error {
	paths := c.paths(ctx, route)
	out := make([]error, len(raws))
	if len(paths) == 0 {
		for i := range out {
			out[i] = ClassifyBroadcast(errors.New("no endpoint to broadcast to: every one serves another chain"))
		}
		return out
	}
	answers := make([][]error, len(paths)) // by path, then by transaction
	var wg sync.WaitGroup
	for p, ep := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[p] = c.sendPath(ctx, ep, raws)
		}()
	}
	wg.Wait()
	c.noteChanges(ctx)
	// A transaction every path failed to reach, with no read endpoint left
	// answering, met an outage of the chain's endpoints, not of its route.
	outage := ctx.Err() == nil && !c.anyReadAlive()
	per := make([]error, len(paths))
	for i := range raws {
		for p := range paths {
			per[p] = answers[p][i]
		}
		out[i] = merge(per, outage)
	}
	return out
}

// anyReadAlive reports whether a read endpoint answered its last call.
func (c *Client) anyReadAlive() bool {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	for _, ep := range c.endpoints {
		if !ep.wrong.Load() && ep.health.failures == 0 {
			return true
		}
	}
	return false
}

// sendPath sends raws to ep, and returns its answer to each: nil, the
// node's JSON-RPC error, or the transport failure that kept it from
// answering (a *pathError). Its outcome updates ep's health.
func (c *Client) sendPath(ctx context.Context, ep *endpoint, raws [][]byte) []error {
	out := make([]error, len(raws))
	fail := func(from int, err error) []error {
		for i := from; i < len(raws); i++ {
			out[i] = &pathError{name: ep.name, err: err}
		}
		return out
	}
	if ep.send == nil {
		if err := c.verify(ctx, ep); err != nil {
			c.note(ctx, ep, err)
			return fail(0, err)
		}
	}
	if len(raws) == 1 {
		err := c.call(ctx, ep, func(ctx context.Context, rc *rpc.Client) error {
			return rc.CallContext(ctx, nil, "eth_sendRawTransaction", hexutil.Bytes(raws[0]))
		})
		c.note(ctx, ep, err)
		if err != nil && failover(err) {
			return fail(0, err)
		}
		out[0] = c.hideURLs(err)
		return out
	}
	elems := make([]rpc.BatchElem, len(raws))
	hashes := make([]common.Hash, len(raws))
	for lo := 0; lo < len(raws); lo += c.opts.MaxBatch {
		hi := min(lo+c.opts.MaxBatch, len(raws))
		for i := lo; i < hi; i++ {
			elems[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{hexutil.Bytes(raws[i])}, Result: &hashes[i]}
		}
		err := c.call(ctx, ep, func(ctx context.Context, rc *rpc.Client) error {
			return rc.BatchCallContext(ctx, elems[lo:hi])
		})
		c.note(ctx, ep, err)
		if err != nil && failover(err) {
			return fail(lo, err)
		}
		if err != nil {
			// The node answered the whole batch with one error.
			for i := lo; i < len(raws); i++ {
				out[i] = c.hideURLs(err)
			}
			return out
		}
		for i := lo; i < hi; i++ {
			out[i] = c.hideURLs(elems[i].Error)
		}
	}
	return out
}

// pathError is a path's transport failure: it did not answer.
type pathError struct {
	name string
	err  error
}

func (e *pathError) Error() string { return e.name + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// merge makes one answer of the paths' answers to one transaction, in
// order of preference: accepted when any path accepted it; else the first
// "already known", then the first "nonce too low" (both mean a node has
// it or its nonce is taken, which the receipts decide); else the first
// refusal for a reason (a node that could not say why, transient, comes
// after); else, every path having failed at the transport level, their
// failures joined, naming each path, and wrapping txm.ErrChainUnreachable
// when outage says the chain's endpoints are out.
func merge(answers []error, outage bool) error {
	var nodes, failures []error
	for _, a := range answers {
		var pe *pathError
		switch {
		case a == nil:
			return nil
		case errors.As(a, &pe):
			failures = append(failures, a)
		default:
			nodes = append(nodes, ClassifyBroadcast(a))
		}
	}
	for _, pick := range []func(txm.BroadcastReason) bool{
		func(r txm.BroadcastReason) bool { return r == txm.ReasonKnown },
		func(r txm.BroadcastReason) bool { return r == txm.ReasonNonceTooLow },
		func(r txm.BroadcastReason) bool { return r != txm.ReasonTransient },
		func(txm.BroadcastReason) bool { return true },
	} {
		for _, err := range nodes {
			if pick(txm.ReasonOf(err)) {
				return err
			}
		}
	}
	joined := errors.Join(failures...)
	if outage {
		joined = fmt.Errorf("%w: %w", txm.ErrChainUnreachable, joined)
	}
	return &txm.BroadcastError{Reason: txm.ReasonTransient, Err: joined}
}
