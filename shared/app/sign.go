package app

import (
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/core/types"

	"github.com/txfence/txfence/shared/txm"
)

// cancelGas is the gas of a 0-value self-transfer (cancel, placeholder).
const cancelGas = 21000

// firstFees are the fees of a transaction's first attempt: the caller's
// own, where it chose them, else the suggestion.
func firstFees(t *txm.Tx, suggested txm.Fees) txm.Fees {
	if t.GasPrice != nil || (t.MaxFeePerGas == nil && suggested.GasPrice != nil) {
		price := t.GasPrice
		if price == nil {
			price = suggested.GasPrice
		}
		return txm.Fees{GasPrice: price}
	}
	feeCap, tip := t.MaxFeePerGas, t.MaxPriorityFeePerGas
	if feeCap == nil {
		feeCap = suggested.MaxFeePerGas
	}
	if tip == nil {
		tip = suggested.MaxPriorityFeePerGas
	}
	if tip.Cmp(feeCap) > 0 {
		tip = feeCap
	}
	return txm.Fees{MaxFeePerGas: feeCap, MaxPriorityFeePerGas: tip}
}

// signAttempt signs attempt no of t, of the given kind, with fees: the
// caller's payload for original and replace attempts, a 0-value transfer to
// the signer itself for cancel and placeholder attempts. gas is the payload's
// gas limit (ignored for self-transfers).
func signAttempt(ctx context.Context, sig txm.Signer, t *txm.Tx, kind txm.AttemptKind, no int, gas uint64, fees txm.Fees) (txm.Attempt, error) {
	to, value, data := t.To, t.Value, t.Data
	if kind == txm.AttemptCancel || kind == txm.AttemptPlaceholder {
		self := t.From
		to, value, data, gas = &self, new(big.Int), nil, cancelGas
	}
	if value == nil {
		value = new(big.Int)
	}
	a := txm.Attempt{TxID: t.ID, No: no, Kind: kind, Nonce: t.Nonce, GasLimit: gas}
	chainID := new(big.Int).SetUint64(t.ChainID)
	var inner types.TxData
	if fees.IsLegacy() {
		a.GasPrice = fees.GasPrice
		inner = &types.LegacyTx{Nonce: t.Nonce, GasPrice: fees.GasPrice, Gas: gas, To: to, Value: value, Data: data}
	} else {
		a.MaxFeePerGas, a.MaxPriorityFeePerGas = fees.MaxFeePerGas, fees.MaxPriorityFeePerGas
		inner = &types.DynamicFeeTx{ChainID: chainID, Nonce: t.Nonce, GasTipCap: fees.MaxPriorityFeePerGas,
			GasFeeCap: fees.MaxFeePerGas, Gas: gas, To: to, Value: value, Data: data}
	}
	signed, err := sig.SignTx(ctx, types.NewTx(inner), chainID)
	if err != nil {
		return txm.Attempt{}, fmt.Errorf("sign %s: %w", t.ID, err)
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return txm.Attempt{}, fmt.Errorf("encode %s: %w", t.ID, err)
	}
	a.Hash, a.Raw = signed.Hash(), raw
	return a, nil
}
