package evm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.DataFeeOracle = (*Client)(nil)

// DataFeeKind is how a chain prices the data fee it charges, beside the
// execution gas, for posting a transaction to its L1.
type DataFeeKind string

const (
	// DataFeeNone: no data fee (an L1, or a chain whose fee is all
	// execution gas). Pricing asks the node nothing.
	DataFeeNone DataFeeKind = ""
	// DataFeeOPStack: the GasPriceOracle predeploy's getL1Fee(bytes) of
	// the transaction's encoding as it will be signed (OP Stack chains).
	DataFeeOPStack DataFeeKind = "op-stack"
	// DataFeeArbitrum: NodeInterface's gasEstimateL1Component, the L1
	// component in L2 gas, at the most per gas the transaction may pay
	// (Arbitrum chains bill the L1 component as L2 gas).
	DataFeeArbitrum DataFeeKind = "arbitrum"
)

func (k DataFeeKind) valid() bool {
	switch k {
	case DataFeeNone, DataFeeOPStack, DataFeeArbitrum:
		return true
	}
	return false
}

// Where the oracles live on their chains.
var (
	// GasPriceOracleAddress is the OP Stack GasPriceOracle predeploy.
	GasPriceOracleAddress = common.HexToAddress("0x420000000000000000000000000000000000000F")
	// NodeInterfaceAddress is the Arbitrum NodeInterface, which the node
	// answers for without code at the address.
	NodeInterfaceAddress = common.HexToAddress("0x00000000000000000000000000000000000000C8")
)

// dataFeeABI holds the two oracle methods, with the signatures of the real
// contracts.
var dataFeeABI = func() abi.ABI {
	parsed, err := abi.JSON(strings.NewReader(`[
{"type":"function","name":"getL1Fee","stateMutability":"view",
 "inputs":[{"name":"_data","type":"bytes"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"gasEstimateL1Component","stateMutability":"payable",
 "inputs":[{"name":"to","type":"address"},{"name":"contractCreation","type":"bool"},{"name":"data","type":"bytes"}],
 "outputs":[{"name":"gasEstimateForL1","type":"uint64"},{"name":"baseFee","type":"uint256"},{"name":"l1BaseFeeEstimate","type":"uint256"}]}
]`))
	if err != nil {
		panic("evm: data fee ABI: " + err.Error())
	}
	return parsed
}()

// dummySignature stands in for the signature a transaction will carry, so
// that an unsigned transaction encodes to its signed length: r and s of 32
// bytes each (a real one is shorter only when it has leading zero bytes)
// and a recovery id.
var dummySignature = append(bytes.Repeat([]byte{0x7f}, 64), 1)

// ChargesDataFee implements txm.DataFeeOracle: whether the DataFee kind is
// not DataFeeNone.
func (c *Client) ChargesDataFee() bool { return c.opts.DataFee != DataFeeNone }

// DataFees implements txm.DataFeeOracle by the chain's DataFee kind, for
// every transaction in one batch of eth_call at the latest block:
//
//   - DataFeeNone: zero for each, without a call.
//   - DataFeeOPStack: GasPriceOracle.getL1Fee of the transaction's binary
//     encoding as it will be signed (its fees and a signature of the signed
//     size in place): the L1 fee the chain charges at today's L1 price.
//   - DataFeeArbitrum: NodeInterface.gasEstimateL1Component(to, creation,
//     calldata), whose gasEstimateForL1 is L2 gas, times the most the
//     transaction may pay per gas (its MaxFeePerGas, or its GasPrice; the
//     L2 base fee the node answered with when neither is given): Arbitrum
//     bills the L1 component as extra L2 gas at the transaction's price,
//     so this bounds what it can cost. An Arbitrum node's gas estimate
//     already holds the L1 component, so a worst case that adds this to
//     gas × fee ceiling counts it twice: too high, never too low.
//
// An oracle that answers nothing (no code at a predeploy's address) fails
// with an error wrapping txm.ErrNoDataFeeOracle.
func (c *Client) DataFees(ctx context.Context, txs []txm.DataFeeTx) ([]*big.Int, error) {
	if c.opts.DataFee == DataFeeNone {
		out := make([]*big.Int, len(txs))
		for i := range out {
			out[i] = new(big.Int)
		}
		return out, nil
	}
	type call struct {
		tx   txm.DataFeeTx
		args callArgs
	}
	calls := make([]call, len(txs))
	for i, t := range txs {
		var (
			to     common.Address
			method string
			args   []any
		)
		switch c.opts.DataFee {
		case DataFeeOPStack:
			raw, err := c.signedEncoding(t)
			if err != nil {
				return nil, fmt.Errorf("price data fee: %w", err)
			}
			to, method, args = GasPriceOracleAddress, "getL1Fee", []any{raw}
		case DataFeeArbitrum:
			var dest common.Address
			if t.To != nil {
				dest = *t.To
			}
			data := t.Data
			if data == nil {
				data = []byte{}
			}
			to, method, args = NodeInterfaceAddress, "gasEstimateL1Component", []any{dest, t.To == nil, data}
		default:
			return nil, fmt.Errorf("price data fee: unknown data fee kind %q", c.opts.DataFee)
		}
		input, err := dataFeeABI.Pack(method, args...)
		if err != nil {
			return nil, fmt.Errorf("price data fee: pack %s: %w", method, err)
		}
		calls[i] = call{tx: t, args: callArgs{From: t.From, To: &to, Data: input}}
	}
	kind := c.opts.DataFee
	fees, err := batchCall(ctx, c, "price data fee", "eth_call", calls,
		func(k call) []any { return []any{k.args, "latest"} },
		func(k call, out *hexutil.Bytes) (*big.Int, error) { return dataFee(kind, k.tx, *out) },
		func(k call) string { return "data fee of a transaction from " + k.tx.From.Hex() })
	if err != nil {
		return nil, err
	}
	for i, f := range fees {
		if f == nil { // a null answer, which eth_call never gives
			return nil, fmt.Errorf("price data fee: %w", dataFeeMissing(kind, calls[i].tx))
		}
	}
	return fees, nil
}

// dataFeeMissing is the error of an oracle that answered nothing.
func dataFeeMissing(kind DataFeeKind, t txm.DataFeeTx) error {
	at := GasPriceOracleAddress
	if kind == DataFeeArbitrum {
		at = NodeInterfaceAddress
	}
	return fmt.Errorf("%w: %s answered nothing for a transaction from %s (%s kind)", txm.ErrNoDataFeeOracle, at.Hex(), t.From.Hex(), kind)
}

// dataFee reads an oracle's answer out for kind.
func dataFee(kind DataFeeKind, t txm.DataFeeTx, out []byte) (*big.Int, error) {
	if len(out) == 0 {
		return nil, dataFeeMissing(kind, t)
	}
	switch kind {
	case DataFeeOPStack:
		vals, err := dataFeeABI.Unpack("getL1Fee", out)
		if err != nil {
			return nil, fmt.Errorf("%w: getL1Fee: %w", txm.ErrNoDataFeeOracle, err)
		}
		return vals[0].(*big.Int), nil
	case DataFeeArbitrum:
		vals, err := dataFeeABI.Unpack("gasEstimateL1Component", out)
		if err != nil {
			return nil, fmt.Errorf("%w: gasEstimateL1Component: %w", txm.ErrNoDataFeeOracle, err)
		}
		gas, baseFee := vals[0].(uint64), vals[1].(*big.Int)
		perGas := t.MaxFeePerGas
		if t.GasPrice != nil {
			perGas = t.GasPrice
		}
		if perGas == nil {
			perGas = baseFee
		}
		return new(big.Int).Mul(new(big.Int).SetUint64(gas), perGas), nil
	}
	return nil, errors.New("unknown data fee kind")
}

// signedEncoding is t's binary encoding as signing will make it: a legacy
// transaction when t has a gas price or the client signs legacy, an
// EIP-1559 one otherwise, with dummySignature in place of the signature.
func (c *Client) signedEncoding(t txm.DataFeeTx) ([]byte, error) {
	value := t.Value
	if value == nil {
		value = new(big.Int)
	}
	orZero := func(v *big.Int) *big.Int {
		if v == nil {
			return new(big.Int)
		}
		return v
	}
	chainID := new(big.Int).SetUint64(c.chainID)
	var inner types.TxData
	if t.GasPrice != nil || c.opts.Legacy {
		price := t.GasPrice
		if price == nil {
			price = t.MaxFeePerGas
		}
		inner = &types.LegacyTx{Nonce: t.Nonce, GasPrice: orZero(price), Gas: t.Gas, To: t.To, Value: value, Data: t.Data}
	} else {
		inner = &types.DynamicFeeTx{ChainID: chainID, Nonce: t.Nonce, GasTipCap: orZero(t.MaxPriorityFeePerGas),
			GasFeeCap: orZero(t.MaxFeePerGas), Gas: t.Gas, To: t.To, Value: value, Data: t.Data}
	}
	tx, err := types.NewTx(inner).WithSignature(types.LatestSignerForChainID(chainID), dummySignature)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return tx.MarshalBinary()
}
