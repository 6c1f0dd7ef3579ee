package evm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// Client implements txm.Chain over one or more JSON-RPC endpoints of the same
// chain, reading from the healthiest and failing over between them (see
// do and health.go), and broadcasting through every healthy one and the
// send-only endpoints (see broadcast.go). It is safe for concurrent use.
type Client struct {
	chainID   uint64
	opts      Options
	log       *slog.Logger
	endpoints []*endpoint // read endpoints, in order of preference
	sendOnly  []*endpoint // send-only endpoints, in configuration order
	sim       simState    // which simulation method the chain serves
	code      codeCache   // which addresses hold code (HasCode)

	// hmu guards every endpoint's health, refreshing and degraded.
	hmu        sync.Mutex
	refreshing chan struct{} // non-nil while heads are read; closed when done
	degraded   bool          // the last read went to an endpoint that is not healthy
}

var (
	_ txm.Chain                = (*Client)(nil)
	_ txm.EndpointHealthReader = (*Client)(nil)
)

// endpoint is one JSON-RPC endpoint. Its chain id is checked before first
// use; one found on another chain is never used again. A send-only
// endpoint's is never checked: it is never read from.
type endpoint struct {
	name     string // "endpoint i (scheme://host)", for errors (see endpointName)
	raw      string // the URL as configured (it may carry a key): never shown
	rpc      *rpc.Client
	verified atomic.Bool
	wrong    atomic.Bool
	send     *SendOnlyEndpoint // nil for a read endpoint
	health   health            // guarded by Client.hmu
}

// Dial connects to every URL (all for the same chain, in order of
// preference) and checks each one's eth_chainId. A URL that answers with
// another chain id is refused with an error wrapping ErrWrongChain; a URL
// that cannot be reached is kept and checked when first used. Dial fails if
// no URL can be reached.
func Dial(ctx context.Context, chainID uint64, urls []string, opts Options) (*Client, error) {
	if len(urls) == 0 {
		return nil, errors.New("dial: no endpoint URLs")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c := newClient(chainID, opts)
	for i, u := range urls {
		rc, err := rpc.DialOptions(ctx, u)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("dial %s: %w", endpointName(i, u), redact.Error(err, u))
		}
		c.endpoints = append(c.endpoints, &endpoint{name: endpointName(i, u), raw: u, rpc: rc})
	}
	if err := c.dialSendOnly(ctx); err != nil {
		c.Close()
		return nil, err
	}
	var unreachable []error
	reachable := -1
	for i, ep := range c.endpoints {
		err := c.verify(ctx, ep)
		switch {
		case err == nil:
			if reachable < 0 {
				reachable = i
			}
		case errors.Is(err, ErrWrongChain):
			c.Close()
			return nil, fmt.Errorf("dial: %w", err)
		default:
			c.note(ctx, ep, err)
			unreachable = append(unreachable, fmt.Errorf("%s: %w", ep.name, err))
		}
	}
	if reachable < 0 {
		c.Close()
		return nil, fmt.Errorf("dial: no endpoint reachable: %w", errors.Join(unreachable...))
	}
	c.refresh(ctx) // the heads, so that the first reads already go to the healthiest
	return c, nil
}

// New builds a client over already dialled RPC clients, in order of
// preference; their chain ids are checked when first used. The Client owns
// them: Close closes them.
func New(chainID uint64, clients []*rpc.Client, opts Options) (*Client, error) {
	if len(clients) == 0 {
		return nil, errors.New("new evm client: no RPC clients")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("new evm client: %w", err)
	}
	c := newClient(chainID, opts)
	for i, rc := range clients {
		if rc == nil {
			return nil, fmt.Errorf("new evm client: RPC client %d is nil", i)
		}
		c.endpoints = append(c.endpoints, &endpoint{name: fmt.Sprintf("endpoint %d", i), rpc: rc})
	}
	if err := c.dialSendOnly(context.Background()); err != nil {
		c.Close()
		return nil, fmt.Errorf("new evm client: %w", err)
	}
	return c, nil
}

func newClient(chainID uint64, opts Options) *Client {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{chainID: chainID, opts: opts, log: log.With(slog.Uint64("chain_id", chainID))}
}

// dialSendOnly connects to the send-only endpoints of the options (an
// HTTP URL is not reached before its first broadcast).
func (c *Client) dialSendOnly(ctx context.Context) error {
	for _, s := range c.opts.SendOnly {
		name := sendOnlyName(&s)
		rc, err := rpc.DialOptions(ctx, s.URL)
		if err != nil {
			return fmt.Errorf("dial %s: %w", name, redact.Error(err, s.URL))
		}
		c.sendOnly = append(c.sendOnly, &endpoint{name: name, raw: s.URL, rpc: rc, send: &s})
	}
	return nil
}

// ChainID is the chain id the client was configured with, and that every
// endpoint it uses has confirmed.
func (c *Client) ChainID() uint64 { return c.chainID }

// Close closes every endpoint's connection. Nothing of the client runs
// between calls, so nothing else is left to stop.
func (c *Client) Close() {
	for _, ep := range c.endpoints {
		ep.rpc.Close()
	}
	for _, ep := range c.sendOnly {
		ep.rpc.Close()
	}
}

// endpointName names endpoint i by its scheme and host only (redact.URL):
// provider URLs often carry an API key in the path, the query or the user
// info.
func endpointName(i int, raw string) string {
	name := redact.URL(raw)
	if name == redact.Unparsable {
		return fmt.Sprintf("endpoint %d", i)
	}
	return fmt.Sprintf("endpoint %d (%s)", i, name)
}

// sendOnlyName names a send-only endpoint by its configured name and its
// URL's scheme and host.
func sendOnlyName(s *SendOnlyEndpoint) string {
	return fmt.Sprintf("send-only %s (%s)", s.Name, redact.URL(s.URL))
}
