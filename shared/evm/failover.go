package evm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// do runs fn against the healthiest endpoint (see readOrder) and, when
// that fails at the transport level (see failover), against each other
// endpoint once, in that order: the healthy ones first, then, as the best
// available, those lagging, then those dead. Every attempt gets its own
// CallTimeout, and its outcome updates the endpoint's health. A JSON-RPC
// error is returned as it came; transport failures are returned joined,
// each naming its endpoint, and wrap txm.ErrChainUnreachable when every
// endpoint failed so.
func (c *Client) do(ctx context.Context, fn func(ctx context.Context, rc *rpc.Client) error) error {
	order := c.readOrder(ctx)
	var errs []error
	transport := 0
	changed := false
	defer func() {
		if changed {
			c.noteChanges(ctx)
		}
	}()
	for _, ep := range order {
		if ep.wrong.Load() {
			continue
		}
		err := c.verify(ctx, ep)
		if err == nil {
			err = c.call(ctx, ep, fn)
		}
		if c.note(ctx, ep, err) {
			changed = true
		}
		if err == nil || (!failover(err) && !errors.Is(err, ErrWrongChain)) {
			c.servedBy(ctx, ep)
			return err
		}
		if !errors.Is(err, ErrWrongChain) {
			if !isBehind(err) {
				transport++
			}
			err = fmt.Errorf("%s: %w", ep.name, err)
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break // the caller gave up: do not try the next endpoint
		}
	}
	if len(errs) == 0 {
		return fmt.Errorf("no usable endpoint: %w", ErrWrongChain)
	}
	if transport == len(errs) && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", txm.ErrChainUnreachable, errors.Join(errs...))
	}
	return errors.Join(errs...)
}

// call runs fn once against ep, within CallTimeout. Its error never shows
// the endpoint's URL, which may carry a provider's key: transport errors
// quote it (net/http with the password masked, go-ethereum's WebSocket
// dialer without the user info, either escaped), and a server may echo its
// path; redact.Error hides every form.
func (c *Client) call(ctx context.Context, ep *endpoint, fn func(ctx context.Context, rc *rpc.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	return redact.Error(fn(ctx, ep.rpc), ep.raw)
}

// hideURLs hides every endpoint's URL in err's text, for the errors that do
// not pass through call: a batch element's, which is the node's answer but
// may quote a URL (a gateway naming its upstream, say).
func (c *Client) hideURLs(err error) error {
	raws := make([]string, 0, len(c.endpoints)+len(c.sendOnly))
	for _, ep := range c.endpoints {
		raws = append(raws, ep.raw)
	}
	for _, ep := range c.sendOnly {
		raws = append(raws, ep.raw)
	}
	return redact.Error(err, raws...)
}

// verify checks ep's chain id once. An endpoint on another chain is marked
// and never used again; an endpoint that cannot answer is checked again next
// time. Its errors are all reasons to fail over.
func (c *Client) verify(ctx context.Context, ep *endpoint) error {
	if ep.verified.Load() {
		return nil
	}
	var id hexutil.Big
	err := c.call(ctx, ep, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &id, "eth_chainId")
	})
	if err != nil {
		return &unverifiedError{err: fmt.Errorf("check chain id: %w", err)}
	}
	got := id.ToInt()
	if !got.IsUint64() || got.Uint64() != c.chainID {
		ep.wrong.Store(true)
		return fmt.Errorf("%s: %w: chain id %s, want %d", ep.name, ErrWrongChain, got, c.chainID)
	}
	ep.verified.Store(true)
	return nil
}

// unverifiedError is an endpoint whose chain id could not be read: whatever
// it says, do not use it for this call.
type unverifiedError struct{ err error }

func (e *unverifiedError) Error() string { return e.err.Error() }
func (e *unverifiedError) Unwrap() error { return e.err }

// failover reports whether err says the endpoint, not the request, failed,
// so the same request may succeed elsewhere: connection refused or reset,
// EOF, the per-call timeout, any non-2xx HTTP status (5xx, 429, but also
// 401/403/404 from a misconfigured endpoint), a response that is not
// JSON-RPC, or an answer that cannot be used for the block a call is
// pinned to (behindError). A JSON-RPC error response (nonce too low,
// execution reverted, ...) is the node's answer to the request and is not
// retried elsewhere.
func failover(err error) bool {
	var unverified *unverifiedError
	if errors.As(err, &unverified) || isBehind(err) {
		return true
	}
	var rpcErr rpc.Error
	return !errors.As(err, &rpcErr)
}
