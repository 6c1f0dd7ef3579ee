package evmtest

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
)

// What happens on the chain outside txfence: funding top-ups, a key used by
// another program, other users filling blocks. Each sends a transaction
// signed with a key it is given, straight to the simulated node; none
// commits a block.

// SpamTip is the priority fee of the transactions sent here: far above the
// tips txfence offers on a quiet chain, so that they are included first. (Each
// transaction's fee also stays under the node's 1 ether RPC fee cap.)
var SpamTip = big.NewInt(20 * params.GWei)

// Send signs and sends a transfer of value from key to to, at the key's
// pending nonce with fees above the current base fee, and returns it.
func (c *Chain) Send(ctx context.Context, key *ecdsa.PrivateKey, to common.Address, value *big.Int) (*types.Transaction, error) {
	return c.sendTx(ctx, key, &to, value, nil, params.TxGas, nil)
}

// SendAt is Send at a chosen nonce: another program using a key txfence
// manages takes that nonce.
func (c *Chain) SendAt(ctx context.Context, key *ecdsa.PrivateKey, nonce uint64, to common.Address, value *big.Int) (*types.Transaction, error) {
	return c.sendTx(ctx, key, &to, value, nil, params.TxGas, &nonce)
}

// Burn sends n calls to GasBurner (which must be in the genesis, see
// GasBurnerAccount) from key, each using gas, and waits until the pool has
// them pending; with the high SpamTip they fill the next block first. Four
// calls of 15M gas fill a block of the simulated chain's default 60M gas
// limit (the base fee then rises by 12.5%); two keep it at the target (the
// base fee stays).
func (c *Chain) Burn(ctx context.Context, key *ecdsa.PrivateKey, n int, gas uint64) error {
	nonce, err := c.Backend.Client().PendingNonceAt(ctx, crypto.PubkeyToAddress(key.PublicKey))
	if err != nil {
		return fmt.Errorf("pending nonce: %w", err)
	}
	for i := range uint64(n) {
		at := nonce + i
		if _, err := c.sendTx(ctx, key, &GasBurner, new(big.Int), nil, gas, &at); err != nil {
			return err
		}
	}
	return c.waitPending(ctx, crypto.PubkeyToAddress(key.PublicKey), nonce+uint64(n))
}

// waitPending waits until the pool counts the sender's transactions up to
// nonce as pending: the pool promotes new transactions in the background,
// and a block sealed before that would leave them out.
func (c *Chain) waitPending(ctx context.Context, from common.Address, nonce uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		n, err := c.Backend.Client().PendingNonceAt(ctx, from)
		if err != nil {
			return fmt.Errorf("wait pending: %w", err)
		}
		if n >= nonce {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("wait pending: %w", ctx.Err())
		}
	}
}

// BaseFee is the base fee of the latest block.
func (c *Chain) BaseFee(ctx context.Context) (*big.Int, error) {
	h, err := c.Backend.Client().HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("base fee: %w", err)
	}
	return h.BaseFee, nil
}

func (c *Chain) sendTx(ctx context.Context, key *ecdsa.PrivateKey, to *common.Address, value *big.Int, data []byte, gas uint64,
	nonce *uint64) (*types.Transaction, error) {
	cl := c.Backend.Client()
	from := crypto.PubkeyToAddress(key.PublicKey)
	if nonce == nil {
		n, err := cl.PendingNonceAt(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("pending nonce: %w", err)
		}
		nonce = &n
	}
	base, err := c.BaseFee(ctx)
	if err != nil {
		return nil, err
	}
	feeCap := new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), SpamTip)
	id := big.NewInt(ChainID)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{ChainID: id, Nonce: *nonce,
		GasTipCap: SpamTip, GasFeeCap: feeCap, Gas: gas, To: to, Value: value, Data: data})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if err := cl.SendTransaction(ctx, tx); err != nil {
		return nil, fmt.Errorf("send from %s: %w", from.Hex(), err)
	}
	return tx, nil
}
