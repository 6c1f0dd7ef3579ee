package evmtest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/params"
)

// ChainID is the chain id of every simulated chain.
const ChainID = 1337

// MinerTip is the lowest priority fee per gas (0.001 gwei) the simulated
// miner includes; the pool accepts cheaper transactions, which then never
// get mined.
const MinerTip = params.GWei / 1000

// httpModules are the RPC namespaces served over HTTP.
var httpModules = []string{"eth", "net", "web3", "debug", "txpool"}

// Chain is a simulated chain served over HTTP at URL. Commit, Fork,
// Rollback, Reorg and the mining ticker are serialised; the Backend's own
// methods are not, so use Chain's while the ticker runs.
type Chain struct {
	// Backend is the simulated backend, for in-process access.
	Backend *simulated.Backend
	// URL is the HTTP JSON-RPC endpoint, http://127.0.0.1:<port>.
	URL string

	mu        sync.Mutex // serialises block production
	closed    bool       // guarded by mu
	closeOnce sync.Once
	closeErr  error
	mining    sync.Mutex // guards stops
	stops     []func()
	sealed    map[common.Hash]time.Time // guarded by mu: when each block became readable
}

type config struct {
	backendOpts []func(*node.Config, *ethconfig.Config)
}

// Option configures New.
type Option func(*config)

// WithBackendOption passes an option through to simulated.NewBackend, e.g.
// to change the block gas limit or the txpool settings.
func WithBackendOption(o func(nodeConf *node.Config, ethConf *ethconfig.Config)) Option {
	return func(c *config) { c.backendOpts = append(c.backendOpts, o) }
}

// WithBlockGasLimit sets the block gas limit (the gas target is half of
// it); go-ethereum's default is 60M. A small limit makes blocks cheap to fill
// past the target.
func WithBlockGasLimit(gas uint64) Option {
	return WithBackendOption(func(_ *node.Config, ethConf *ethconfig.Config) {
		ethConf.Genesis.GasLimit = gas
		ethConf.Miner.GasCeil = gas
	})
}

// WithMinerTip sets the lowest priority fee per gas the miner includes
// (MinerTip by default); it is also the node's first tip suggestion
// (eth_maxPriorityFeePerGas) before blocks carry transactions to sample.
func WithMinerTip(wei *big.Int) Option {
	return WithBackendOption(func(_ *node.Config, ethConf *ethconfig.Config) {
		ethConf.Miner.GasPrice = new(big.Int).Set(wei)
	})
}

// WithTxPoolQueue sets how many transactions the node's pool holds per
// account, and in all, waiting for promotion (geth's default: 64 and
// 1,024). geth drops the highest of an account's waiting transactions past
// that when a block lands while they wait, which a signer keeping hundreds in
// flight meets at block boundaries: a node serving such a signer must queue
// as many as it keeps in flight.
func WithTxPoolQueue(perAccount uint64) Option {
	return WithBackendOption(func(_ *node.Config, ethConf *ethconfig.Config) {
		ethConf.TxPool.AccountQueue = perAccount
		ethConf.TxPool.GlobalQueue = max(ethConf.TxPool.GlobalQueue, perAccount)
	})
}

// New starts a simulated chain with alloc as its genesis state and serves it
// over HTTP on a free port of 127.0.0.1. Close it when done.
//
// The chain starts at height 1: New seals one empty block, because until the
// first block geth's transaction indexer never reports done, and lookups of
// unknown transactions fail with "transaction indexing is in progress"
// instead of returning null as a synced node does.
//
// simulated.Backend does not expose its node, so the address of a port-0
// listener cannot be read back: New picks a free port just before starting
// the node with its HTTP server on it, and should another process take the
// port in between, starts again on another.
func New(alloc types.GenesisAlloc, opts ...Option) (*Chain, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("start simulated chain: %w", err)
		}
		serve := func(nodeConf *node.Config, _ *ethconfig.Config) {
			nodeConf.HTTPHost = "127.0.0.1"
			nodeConf.HTTPPort = port
			nodeConf.HTTPModules = httpModules
		}
		backend, err := newBackend(alloc, append(slices.Clip(cfg.backendOpts), serve))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d: %w", port, err))
			continue
		}
		c := &Chain{Backend: backend, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
		c.Commit()
		return c, nil
	}
	return nil, fmt.Errorf("start simulated chain: %w", errors.Join(errs...))
}

// Start is New for a test: it fails the test on error and closes the chain
// in t.Cleanup.
func Start(t testing.TB, alloc types.GenesisAlloc, opts ...Option) *Chain {
	t.Helper()
	c, err := New(alloc, opts...)
	if err != nil {
		t.Fatalf("evmtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("evmtest: close: %v", err)
		}
	})
	return c
}

// newBackend is simulated.NewBackend, which panics when the node cannot
// start (e.g. its HTTP port is taken), returning an error instead.
func newBackend(alloc types.GenesisAlloc, opts []func(*node.Config, *ethconfig.Config)) (b *simulated.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("new simulated backend: %v", r)
		}
	}()
	return simulated.NewBackend(alloc, opts...), nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Commit seals the pending transactions into a new block and returns its
// hash; the zero hash once the chain is closed.
func (c *Chain) Commit() common.Hash {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return common.Hash{}
	}
	return c.commitLocked()
}

// commitLocked is Commit with c.mu held and the chain open.
func (c *Chain) commitLocked() common.Hash {
	h := c.Backend.Commit()
	c.waitIndexed()
	if c.sealed == nil {
		c.sealed = map[common.Hash]time.Time{}
	}
	c.sealed[h] = time.Now()
	return h
}

// SealedAt is when the block with hash h was committed and readable over
// RPC (false for a block this Chain did not commit). The pipeline benchmark
// measures finality lag from it.
func (c *Chain) SealedAt(h common.Hash) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.sealed[h]
	return t, ok
}

// waitIndexed waits, for up to 30 seconds (on a loaded machine the indexer
// can take several), until the transaction indexer has caught up with the
// head. Until it has, geth answers a lookup of an
// unknown transaction (eth_getTransactionByHash, eth_getTransactionReceipt)
// with "transaction indexing is in progress" instead of null, which a real
// node only does while syncing.
func (c *Chain) waitIndexed() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		_, _, err := c.Backend.Client().TransactionByHash(ctx, common.Hash{})
		if errors.Is(err, ethereum.NotFound) || ctx.Err() != nil {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// Fork makes parent the head, so that the next Commits build a side chain
// that becomes canonical once it is longer. The pool must be empty (Commit
// or Rollback first); transactions of the abandoned blocks return to it.
func (c *Chain) Fork(parent common.Hash) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("fork: chain is closed")
	}
	if err := c.Backend.Fork(parent); err != nil {
		return fmt.Errorf("fork at %s: %w", parent, err)
	}
	return nil
}

// Rollback drops every pending transaction.
func (c *Chain) Rollback() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.Backend.Rollback()
	}
}

// StartMining commits a block every interval until stop is called or the
// chain is closed. stop waits for the ticker to end and may be called more
// than once.
func (c *Chain) StartMining(interval time.Duration) (stop func()) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c.Commit()
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() { close(done) })
		<-finished
	}
	c.mining.Lock()
	c.stops = append(c.stops, stop)
	c.mining.Unlock()
	return stop
}

// Close stops any mining ticker, the HTTP server and the chain. It may be
// called more than once.
func (c *Chain) Close() error {
	c.closeOnce.Do(func() {
		c.mining.Lock()
		stops := c.stops
		c.stops = nil
		c.mining.Unlock()
		for _, stop := range stops {
			stop()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.closed = true
		c.closeErr = c.Backend.Close()
	})
	return c.closeErr
}
