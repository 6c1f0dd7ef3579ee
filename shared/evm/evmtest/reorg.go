package evmtest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// Reorg replaces the last depth blocks with a branch of depth+1 new blocks
// while the chain stays in use. Transactions of the removed blocks return to
// the pool (and so into the new blocks) unless drop is set, in which case
// the chain forgets them. Transactions waiting in the pool, or sent while
// the reorg runs, are kept, as a node keeps its pool through a reorg.
//
// The simulated backend forks only from an empty pool, so Reorg reads the
// pool's content (and, through a subscription, whatever becomes executable
// meanwhile), empties it, forks, seals the new branch and sends the kept
// transactions again. A transaction that reaches the pool in the moment
// between the read and the emptying, and is not yet executable, is lost,
// as a node may lose one: senders must rebroadcast (txfence does), or hold
// their sends while Reorg runs (rpcproxy's Hold). Reorg holds the
// block-production lock throughout, so a mining ticker waits.
func (c *Chain) Reorg(depth int, drop bool) error {
	if depth < 1 {
		return fmt.Errorf("reorg: depth %d: must be positive", depth)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("reorg: chain is closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := c.rpcClient()
	if err != nil {
		return fmt.Errorf("reorg: %w", err)
	}
	ec := c.Backend.Client()

	arrived := make(chan *types.Transaction, 4096)
	sub, err := rc.EthSubscribe(ctx, arrived, "newPendingTransactions", true)
	if err != nil {
		return fmt.Errorf("reorg: subscribe to the pool: %w", err)
	}
	defer sub.Unsubscribe()
	var kept []*types.Transaction

	head, err := ec.HeaderByNumber(ctx, nil)
	if err != nil {
		return fmt.Errorf("reorg: head: %w", err)
	}
	if head.Number.Int64() <= int64(depth) {
		return fmt.Errorf("reorg: the chain has only %d blocks", head.Number.Int64())
	}
	forget := map[common.Hash]bool{} // with drop: the removed blocks' transactions
	for n := head.Number.Int64() - int64(depth) + 1; drop && n <= head.Number.Int64(); n++ {
		b, err := ec.BlockByNumber(ctx, big.NewInt(n))
		if err != nil {
			return fmt.Errorf("reorg: block %d: %w", n, err)
		}
		for _, tx := range b.Transactions() {
			forget[tx.Hash()] = true
		}
	}
	base, err := ec.HeaderByNumber(ctx, new(big.Int).Sub(head.Number, big.NewInt(int64(depth))))
	if err != nil {
		return fmt.Errorf("reorg: base block: %w", err)
	}

	// Empty the pool and fork; a transaction that lands in between makes
	// the fork refuse, so go round again. The pool is read just before it
	// is emptied, each time.
	for tries := 0; ; tries++ {
		content, err := poolContent(ctx, rc)
		if err != nil {
			return fmt.Errorf("reorg: %w", err)
		}
		kept = append(kept, content...)
		c.Backend.Rollback()
		if err = c.Backend.Fork(base.Hash()); err == nil {
			break
		}
		if !strings.Contains(err.Error(), "pending block dirty") || tries == 1000 {
			return fmt.Errorf("reorg: fork at %d: %w", base.Number, err)
		}
	}
	if drop {
		c.Backend.Rollback()
	}
	for i := 0; i <= depth; i++ {
		c.commitLocked()
	}

	// Collect what arrived until the subscription has been quiet a moment,
	// then send back everything kept; what the new branch already holds is
	// refused as known or as a used nonce, which is fine.
	for quiet := time.NewTimer(100 * time.Millisecond); ; {
		select {
		case tx := <-arrived:
			kept = append(kept, tx)
			quiet.Reset(100 * time.Millisecond)
			continue
		case err := <-sub.Err():
			return fmt.Errorf("reorg: pool subscription: %w", err)
		case <-quiet.C:
		}
		break
	}
	seen := map[common.Hash]bool{}
	for _, tx := range kept {
		if seen[tx.Hash()] || forget[tx.Hash()] {
			continue
		}
		seen[tx.Hash()] = true
		_ = ec.SendTransaction(ctx, tx)
	}
	return nil
}

// rpcClient is the backend's in-process RPC client, which, unlike HTTP,
// serves subscriptions. simulated.Backend wraps an *ethclient.Client in a
// struct whose embedded field hides ethclient's Client method, so the field
// is read by reflection.
func (c *Chain) rpcClient() (*rpc.Client, error) {
	v := reflect.ValueOf(c.Backend.Client())
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("Client"); f.IsValid() && f.CanInterface() {
			if ec, ok := f.Interface().(*ethclient.Client); ok && ec != nil {
				return ec.Client(), nil
			}
		}
	}
	return nil, errors.New("the simulated backend's client holds no *ethclient.Client")
}

// poolContent returns every transaction in the pool, pending and queued.
func poolContent(ctx context.Context, rc *rpc.Client) ([]*types.Transaction, error) {
	var content map[string]map[string]map[string]*types.Transaction // pending|queued → sender → nonce → tx
	if err := rc.CallContext(ctx, &content, "txpool_content"); err != nil {
		return nil, fmt.Errorf("read the pool: %w", err)
	}
	var txs []*types.Transaction
	for _, bySender := range content {
		for _, byNonce := range bySender {
			for _, tx := range byNonce {
				txs = append(txs, tx)
			}
		}
	}
	return txs, nil
}
