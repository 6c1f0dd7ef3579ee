package webhook

import (
	"math/big"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// maxBody bounds a request or answer body: 64 KiB.
const maxBody = 64 << 10

// Request is the JSON body txfence POSTs for one STUCK transaction. Its field
// names are part of the wire contract: new fields may be added, none is
// renamed or removed. Amounts are wei as decimal strings (they overflow
// JavaScript numbers); times are RFC 3339 in UTC.
type Request struct {
	// DeliveryID is this request's random id, the same as the
	// X-Txfence-Delivery header. It is in the body so that the signature
	// covers it: a receiver that remembers it can refuse a replay.
	DeliveryID string `json:"deliveryId"`
	TxID       string `json:"txId"`
	ChainID    uint64 `json:"chainId"`
	// Signer is the sending address, EIP-55 checksummed.
	Signer string `json:"signer"`
	Nonce  uint64 `json:"nonce"`
	// To is the recipient, EIP-55 checksummed; absent for a contract
	// creation.
	To        string `json:"to,omitempty"`
	Value     string `json:"value"`
	RequestID string `json:"requestId"`
	// SubState says why the transaction is stuck (txm.SubState* or a
	// broadcast rejection reason).
	SubState  string `json:"subState"`
	LastError string `json:"lastError"`
	// Attempts is the number of signed attempts so far.
	Attempts int `json:"attempts"`
	// LatestFees are the fees of the latest attempt; empty when there is
	// none.
	LatestFees Fees `json:"latestFees"`
	// BaseFee is the chain's current base fee; absent when unknown (or on a
	// legacy chain).
	BaseFee string `json:"baseFee,omitempty"`
	// Failures counts rounds of work that did not move the transaction.
	Failures   int       `json:"failures"`
	CreatedAt  time.Time `json:"createdAt"`
	StuckSince time.Time `json:"stuckSince"`
	// ChainNonce is the chain's latest nonce for the signer.
	ChainNonce uint64 `json:"chainNonce"`
	// FeeCapsLeft says whether a bump is still possible within the
	// configured fee caps.
	FeeCapsLeft bool `json:"feeCapsLeft"`
}

// Fees are an attempt's fees in wei, as decimal strings; a field is absent
// when the attempt does not have it (gasPrice on EIP-1559, the other two on
// legacy).
type Fees struct {
	MaxFeePerGas         string `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             string `json:"gasPrice,omitempty"`
}

// Answer is the JSON body a webhook answers with (status 200, signed like
// the request).
type Answer struct {
	// Action is one of "noop", "bump", "cancel", "placeholder".
	Action txm.StuckAction `json:"action"`
	// Reason is free text for the audit trail.
	Reason string `json:"reason"`
	// DeliveryID and TxID are the request's, both required: inside the
	// signed body they bind the answer to the one request it answers, so
	// that an answer captured from one exchange cannot be replayed for
	// another delivery or another transaction. Receiver sets both.
	DeliveryID string `json:"deliveryId"`
	TxID       string `json:"txId"`
}

// newRequest describes t on the wire.
func newRequest(deliveryID string, t txm.StuckTx) Request {
	r := Request{
		DeliveryID: deliveryID,
		TxID:       t.TxID,
		ChainID:    t.ChainID,
		Signer:     t.Signer.Hex(),
		Nonce:      t.Nonce,
		Value:      decimal(t.Value),
		RequestID:  t.RequestID,
		SubState:   t.SubState,
		LastError:  t.LastError,
		Attempts:   t.Attempts,
		LatestFees: Fees{
			MaxFeePerGas:         optDecimal(t.LatestFees.MaxFeePerGas),
			MaxPriorityFeePerGas: optDecimal(t.LatestFees.MaxPriorityFeePerGas),
			GasPrice:             optDecimal(t.LatestFees.GasPrice),
		},
		BaseFee:     optDecimal(t.BaseFee),
		Failures:    t.Failures,
		CreatedAt:   t.CreatedAt.UTC(),
		StuckSince:  t.StuckSince.UTC(),
		ChainNonce:  t.ChainNonce,
		FeeCapsLeft: t.FeeCapsLeft,
	}
	if t.To != nil {
		r.To = t.To.Hex()
	}
	return r
}

// decimal writes v in base 10; nil is 0.
func decimal(v *big.Int) string {
	if v == nil {
		return "0"
	}
	return v.String()
}

// optDecimal writes v in base 10; nil is "" (and its field is left out).
func optDecimal(v *big.Int) string {
	if v == nil {
		return ""
	}
	return v.String()
}
