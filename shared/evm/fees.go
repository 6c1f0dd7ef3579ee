package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// SuggestFees suggests fees for a new attempt.
//
// EIP-1559 (the latest header has a base fee and Legacy is off): the tip is
// eth_maxPriorityFeePerGas, or, only when the node says it does not serve
// that method, the median over recent blocks of eth_feeHistory's 50th
// percentile reward. Any other failure of eth_maxPriorityFeePerGas is
// returned: a fallback over quiet blocks suggests a tip of 0, which is
// never mined. Whichever way it was found, the tip is raised to
// MinPriorityFee and clamped to MaxPriorityFeeCap. The max fee is
// BaseFeeMultiplier × base fee + tip, clamped to MaxFeeCap; the tip never
// exceeds the max fee (validate keeps MinPriorityFee at or below
// MaxFeeCap, so the floor holds too). BaseFee is the latest block's.
//
// Legacy: eth_gasPrice clamped to MaxFeeCap.
func (c *Client) SuggestFees(ctx context.Context) (txm.Fees, error) {
	head, err := c.header(ctx, "latest")
	if err != nil {
		return txm.Fees{}, fmt.Errorf("suggest fees: %w", err)
	}
	if head == nil {
		return txm.Fees{}, errors.New("suggest fees: node has no latest block")
	}
	if c.opts.Legacy || head.BaseFee == nil {
		price, err := c.bigCall(ctx, "eth_gasPrice")
		if err != nil {
			return txm.Fees{}, fmt.Errorf("suggest fees: %w", err)
		}
		return txm.Fees{GasPrice: clampMax(price, c.opts.MaxFeeCap)}, nil
	}
	tip, err := c.tip(ctx)
	if err != nil {
		return txm.Fees{}, fmt.Errorf("suggest fees: %w", err)
	}
	if c.opts.MinPriorityFee != nil && tip.Cmp(c.opts.MinPriorityFee) < 0 {
		tip = new(big.Int).Set(c.opts.MinPriorityFee)
	}
	tip = clampMax(tip, c.opts.MaxPriorityFeeCap)
	maxFee := new(big.Int).Mul(head.BaseFee.ToInt(), new(big.Int).SetUint64(c.opts.BaseFeeMultiplier))
	maxFee.Add(maxFee, tip)
	maxFee = clampMax(maxFee, c.opts.MaxFeeCap)
	tip = clampMax(tip, maxFee)
	return txm.Fees{MaxFeePerGas: maxFee, MaxPriorityFeePerGas: tip, BaseFee: new(big.Int).Set(head.BaseFee.ToInt())}, nil
}

// tip asks eth_maxPriorityFeePerGas, falling back to eth_feeHistory only
// when the node does not serve the method (see methodMissing); with
// TipFromFeeHistory it asks the fee history alone.
func (c *Client) tip(ctx context.Context) (*big.Int, error) {
	if !c.opts.TipFromFeeHistory {
		tip, err := c.bigCall(ctx, "eth_maxPriorityFeePerGas")
		if err == nil || !methodMissing(err) {
			return tip, err
		}
	}
	var hist struct {
		Reward [][]*hexutil.Big `json:"reward"`
	}
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &hist, "eth_feeHistory", hexutil.Uint64(c.opts.FeeHistoryBlocks), "latest",
			[]float64{c.opts.FeeHistoryPercentile})
	})
	if err != nil {
		return nil, fmt.Errorf("get fee history: %w", err)
	}
	var rewards []*big.Int
	for _, r := range hist.Reward {
		if len(r) > 0 && r[0] != nil {
			rewards = append(rewards, r[0].ToInt())
		}
	}
	if len(rewards) == 0 {
		return new(big.Int), nil
	}
	slices.SortFunc(rewards, (*big.Int).Cmp)
	return rewards[len(rewards)/2], nil
}

// bigCall calls a method that takes no parameters and returns a quantity.
func (c *Client) bigCall(ctx context.Context, method string) (*big.Int, error) {
	var v hexutil.Big
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &v, method)
	})
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", method, err)
	}
	return v.ToInt(), nil
}

// clampMax returns min(v, max), or v when max is nil.
func clampMax(v, max *big.Int) *big.Int {
	if max != nil && v.Cmp(max) > 0 {
		return new(big.Int).Set(max)
	}
	return v
}
