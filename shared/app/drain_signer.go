package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

// SubmitHooks let tests stop a drain at its crash windows. Production
// leaves them nil.
type SubmitHooks struct {
	// AfterPersist runs after a batch of attempts was committed and before
	// any of them is broadcast.
	AfterPersist func()
	// AfterBroadcast runs after a batch was broadcast and before it is
	// marked TRACKING.
	AfterBroadcast func()
}

// DrainSigner is the Submit function's use case: under the signer's chain
// lease it drains ALLOCATED transactions in nonce order, bounded by
// maxInFlight and a time budget. Each batch is built, signed once, persisted
// fenced and committed, then broadcast, then marked TRACKING fenced with a
// `receipt` prompt. Redelivered or duplicate prompts are harmless: a
// persisted attempt is rebroadcast as the same bytes, never signed again.
type DrainSigner struct {
	store   txm.SubmitStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	signers map[common.Address]txm.Signer
	relay   *Relay
	cfg     config.Config
	metrics *metrics.Metrics
	log     *slog.Logger
	hooks   SubmitHooks
}

// NewDrainSigner returns the use case. relay may be nil.
func NewDrainSigner(store txm.SubmitStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, signers map[common.Address]txm.Signer,
	relay *Relay, cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*DrainSigner, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new drain signer: store, leases and logger are required")
	}
	return &DrainSigner{store: store, leases: leases, chains: chains, signers: signers, relay: relay, cfg: cfg, metrics: m, log: log}, nil
}

// SetHooks installs test hooks.
func (d *DrainSigner) SetHooks(h SubmitHooks) { d.hooks = h }

// DrainResult says what one drain did.
type DrainResult struct {
	Broadcast int  // attempts accepted by the node (or already known to it)
	Stuck     int  // transactions moved to STUCK
	Full      bool // stopped because maxInFlight was reached
}

// drainBatch bounds how many transactions are signed and persisted together.
const drainBatch = 64

// ErrNotServed means this deployment has no chain or no key for the
// prompt's signer: no retry can help, so the prompt is acknowledged.
var ErrNotServed = errors.New("signer not served here")

// ErrNoLease means another invocation holds the signer's chain lease; the
// prompt should be retried later (nack).
var ErrNoLease = errors.New("signer busy: chain lease held elsewhere")

// Execute drains one signer. It returns an error when the prompt should be
// retried: the lease is held elsewhere, the lease was lost, or a broadcast
// failed for a reason that may pass.
func (d *DrainSigner) Execute(ctx context.Context, chainID uint64, signer common.Address) (DrainResult, error) {
	var res DrainResult
	chain, ok := d.chains[chainID]
	if !ok {
		return res, fmt.Errorf("drain: chain %d: %w", chainID, ErrNotServed)
	}
	sig, ok := d.signers[signer]
	if !ok {
		return res, fmt.Errorf("drain: no key for signer %s: %w", txm.CanonicalAddress(signer), ErrNotServed)
	}
	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	owner := d.cfg.InstanceID + "/submit/" + uuid.NewString()
	err := withChainLease(ctx, d.leases, key, owner, d.cfg.Lease.RenewEvery, d.log, func(lease txm.Lease, keeper *leaseKeeper) error {
		log := d.log.With(slog.String(logging.KeySigner, txm.CanonicalAddress(signer)), slog.String(logging.KeyOwner, owner),
			slog.Int64(logging.KeyToken, lease.Token))
		start := time.Now()
		for time.Since(start) < d.cfg.SubmitBudget {
			if err := keeper.Lost(); err != nil {
				return err
			}
			inflight, err := d.store.InFlight(ctx, chainID, signer)
			if err != nil {
				return err
			}
			room := d.cfg.MaxInFlight - inflight
			if room <= 0 {
				res.Full = true
				return nil
			}
			items, err := d.store.NextToSubmit(ctx, chainID, signer, min(room, drainBatch))
			if err != nil {
				return err
			}
			if len(items) == 0 {
				return nil
			}
			more, err := d.submitBatch(ctx, log, lease, chain, sig, items, &res)
			if err != nil || !more {
				return err
			}
		}
		return nil
	})
	return res, err
}

// submitBatch signs what has no attempt yet, persists those attempts, then
// broadcasts every item in nonce order and marks the accepted ones
// TRACKING. It reports whether draining should go on.
func (d *DrainSigner) submitBatch(ctx context.Context, log *slog.Logger, lease txm.Lease, chain txm.Chain, sig txm.Signer,
	items []txm.SubmitItem, res *DrainResult) (bool, error) {
	fresh := make([]txm.Attempt, 0, len(items)) // capacity fixed: items point into it
	var fees *txm.Fees
	for i := range items {
		if items[i].Attempt != nil {
			continue
		}
		if fees == nil {
			f, err := chain.SuggestFees(ctx)
			if err != nil {
				return false, fmt.Errorf("suggest fees: %w", err)
			}
			fees = &f
		}
		a, err := d.sign(ctx, chain, sig, items[i].Tx, *fees)
		if err != nil {
			return false, err
		}
		fresh = append(fresh, a)
		items[i].Attempt = &fresh[len(fresh)-1]
	}
	if err := d.store.SaveAttempts(ctx, lease, fresh); err != nil {
		return false, err
	}
	if h := d.hooks.AfterPersist; h != nil && len(fresh) > 0 {
		h()
	}
	// The fence is checked once per batch before the chain sees anything;
	// a stale holder that slips past it can only rebroadcast bytes that are
	// already persisted, which is harmless.
	if err := d.leases.Check(ctx, lease); err != nil {
		return false, err
	}

	// One round trip for the whole batch, in nonce order; the answers are
	// then read in that order up to the first that stops the drain (the
	// transactions after it are persisted and will be sent again).
	raws := make([][]byte, len(items))
	for i, it := range items {
		raws[i] = it.Attempt.Raw
	}
	t0 := time.Now()
	errs := chain.SendRawTransactions(ctx, raws)
	d.metrics.BroadcastLatency(ctx, time.Since(t0).Seconds())
	var done []txm.Broadcasted
	var stop error
	more := true
	for i, it := range items {
		a, err := it.Attempt, errs[i]
		reason := txm.ReasonOf(err)
		switch {
		case err == nil:
			d.metrics.TxSubmit(ctx, "accepted")
			done = append(done, txm.Broadcasted{TxID: a.TxID, AttemptNo: a.No})
			continue
		case reason == txm.ReasonKnown || reason == txm.ReasonNonceTooLow:
			// The attempt is persisted: the node has it, or a transaction
			// at this nonce is already on chain; the receipt check decides.
			d.metrics.TxSubmit(ctx, string(reason))
			done = append(done, txm.Broadcasted{TxID: a.TxID, AttemptNo: a.No, Outcome: reason})
			continue
		}
		d.metrics.TxSubmit(ctx, string(reason))
		log.WarnContext(ctx, "broadcast rejected", slog.String(logging.KeyTxID, a.TxID), slog.Uint64(logging.KeyNonce, a.Nonce),
			slog.String("reason", string(reason)), slog.Any("error", err))
		more = false
		if reason.Deterministic() || reason == txm.ReasonReverted {
			// The same bytes can never succeed: STUCK with the reason, and
			// stop here, since later nonces cannot be mined before this one.
			ids, serr := d.store.MarkStuck(ctx, lease, a.TxID, string(reason), err.Error())
			if serr != nil {
				stop = serr
			} else {
				res.Stuck++
				d.relay.Publish(ctx, ids)
			}
		} else {
			// Underpriced or transient: note it and have the prompt retried.
			if nerr := d.store.NoteBroadcastError(ctx, lease, a.TxID, reason, err.Error()); nerr != nil {
				stop = nerr
			} else {
				stop = err
			}
		}
		break
	}
	if h := d.hooks.AfterBroadcast; h != nil {
		h()
	}
	ids, err := d.store.MarkTracking(ctx, lease, done)
	if err != nil {
		return false, err
	}
	res.Broadcast += len(done)
	d.relay.Publish(ctx, ids)
	return more && stop == nil, stop
}

// sign builds and signs the first attempt of t with the given suggested fees
// (the caller's own fees take precedence).
func (d *DrainSigner) sign(ctx context.Context, chain txm.Chain, sig txm.Signer, t *txm.Tx, fees txm.Fees) (txm.Attempt, error) {
	gas := t.Gas()
	if gas == 0 {
		g, err := chain.EstimateGas(ctx, txm.CallMsg{From: t.From, To: t.To, Value: t.Value, Data: t.Data})
		if err != nil {
			return txm.Attempt{}, fmt.Errorf("estimate gas for %s: %w", t.ID, err)
		}
		gas = g
	}
	value := t.Value
	if value == nil {
		value = new(big.Int)
	}
	a := txm.Attempt{TxID: t.ID, No: 1, Kind: txm.AttemptOriginal, Nonce: t.Nonce, GasLimit: gas}
	var inner types.TxData
	switch {
	case t.GasPrice != nil || (t.MaxFeePerGas == nil && fees.GasPrice != nil):
		price := t.GasPrice
		if price == nil {
			price = fees.GasPrice
		}
		a.GasPrice = price
		inner = &types.LegacyTx{Nonce: t.Nonce, GasPrice: price, Gas: gas, To: t.To, Value: value, Data: t.Data}
	default:
		feeCap, tip := t.MaxFeePerGas, t.MaxPriorityFeePerGas
		if feeCap == nil {
			feeCap = fees.MaxFeePerGas
		}
		if tip == nil {
			tip = fees.MaxPriorityFeePerGas
		}
		if tip.Cmp(feeCap) > 0 {
			tip = feeCap
		}
		a.MaxFeePerGas, a.MaxPriorityFeePerGas = feeCap, tip
		inner = &types.DynamicFeeTx{ChainID: new(big.Int).SetUint64(t.ChainID), Nonce: t.Nonce, GasTipCap: tip, GasFeeCap: feeCap,
			Gas: gas, To: t.To, Value: value, Data: t.Data}
	}
	signed, err := sig.SignTx(ctx, types.NewTx(inner), new(big.Int).SetUint64(t.ChainID))
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
