package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// feeSettings is what replacing an attempt reads of the configuration.
type feeSettings struct {
	bumpPercent func(chainID uint64) int
	caps        func(chainID uint64) txm.FeeCaps
	// ceiling bounds the fees an admin may choose by hand
	// (TXFENCE_MAX_FEE_CAP_WEI); the chain caps bound automatic bumps.
	ceiling *big.Int
	backoff txm.BackoffPolicy
}

func feeSettingsOf(a config.Attempts) feeSettings {
	bumpPercent := func(id uint64) int {
		if p := a.Fees.For(id).BumpPercent; p > 0 {
			return p
		}
		return a.BumpPercent
	}
	return feeSettings{bumpPercent: bumpPercent, caps: a.Fees.Caps, ceiling: a.Fees.MaxFeeCap,
		backoff: txm.BackoffPolicy{Min: a.BackoffMin, Max: a.BackoffMax}}
}

// attempter makes a transaction's attempts after the drain's first one — fee
// bumps, cancels, placeholders, re-signings after a failure, rebroadcasts —
// and records what became of each. Every attempt is persisted fenced before
// the chain sees it, like the drain's. It works under a chain lease its
// caller holds.
type attempter struct {
	store   txm.AttemptStore
	leases  txm.LeaseStore
	relay   *Relay
	fees    feeSettings
	metrics txm.Recorder
	log     *slog.Logger
	// beforeSave, a test hook, runs between signing and persisting.
	beforeSave func()
}

// replacement says what the next attempt is.
type replacement struct {
	// kind is cancel or placeholder; "" keeps what the latest attempt
	// carries (the payload, or a cancel or placeholder already under way).
	kind txm.AttemptKind
	// fees are an admin's choice; nil bumps within the chain's caps.
	fees *txm.Fees
	// refresh takes fresh fees instead of a bump when no node ever accepted
	// an attempt (a funding dip: a cheaper attempt may be affordable).
	refresh bool
	audit   txm.Audit
}

// round is what one attempt at moving a transaction did.
type round struct {
	// progress: a node accepted a new attempt, or the transaction's first,
	// and it is TRACKING (its backoff cleared).
	progress bool
	// sent: the attempt is in a node's pool (accepted or already known).
	sent bool
	// saved: a new attempt was persisted (with its audit, and its admin
	// action marked done); false when an identical earlier attempt was sent
	// instead.
	saved bool
	// refused says why no attempt was made: the fee caps, or an admin's fees
	// too low to replace. Nothing was written.
	refused error
	// reason and err say why the attempt failed; the failure was recorded
	// with its backoff, and failing says how long the failures have lasted.
	reason  txm.BroadcastReason
	err     error
	failing txm.Failing
}

// subStateSigningFailed is recorded as a reason when signing fails.
const reasonSigningFailed txm.BroadcastReason = txm.SubStateSigningFailed

// replace signs, persists and broadcasts the next attempt of t.
func (w *attempter) replace(ctx context.Context, l txm.Lease, chain txm.Chain, sig txm.Signer, t txm.Tracked, r replacement) (round, error) {
	prev := txm.Latest(t.Attempts)
	kind := r.kind
	if kind == "" {
		kind = txm.AttemptReplace
		if prev != nil && prev.Kind != txm.AttemptOriginal {
			kind = prev.Kind
		}
		if prev == nil {
			kind = txm.AttemptOriginal
		}
	}
	gas, err := attemptGas(ctx, chain, t, prev, kind)
	if err != nil {
		return w.failed(ctx, l, t.Tx, txm.ReasonOf(err), err)
	}
	fees, err := w.nextFees(ctx, chain, t, kind, gas, r)
	if errors.Is(err, txm.ErrFeeCapReached) || errors.Is(err, errFeesTooLow) || errors.Is(err, errFeesTooHigh) {
		return round{refused: err}, nil
	}
	if err != nil {
		return w.failed(ctx, l, t.Tx, txm.ReasonTransient, err)
	}
	for i := range t.Attempts {
		if a := &t.Attempts[i]; a.Kind == kind && sameFees(fees, txm.FeesOf(*a)) {
			// Fresh fees equal to an earlier attempt's: that attempt (the
			// same transaction) is the one to send.
			return w.rebroadcast(ctx, l, chain, t, a)
		}
	}
	no := 1
	if prev != nil {
		no = prev.No + 1
	}
	a, err := signAttempt(ctx, sig, t.Tx, kind, no, gas, fees)
	if err != nil {
		return w.failed(ctx, l, t.Tx, reasonSigningFailed, err)
	}
	for i := range t.Attempts {
		if t.Attempts[i].Hash == a.Hash {
			// The very transaction of an earlier attempt (a re-signing of
			// an original with the fees it had): that attempt is the one
			// to send; saving it again would collide with it.
			return w.rebroadcast(ctx, l, chain, t, &t.Attempts[i])
		}
	}

	if w.beforeSave != nil {
		w.beforeSave()
	}
	if err := w.store.SaveReplacement(ctx, l, a, r.audit); err != nil {
		return round{}, err
	}
	w.metrics.Resubmit(ctx, r.audit.Action)
	w.log.InfoContext(ctx, "new attempt", slog.String(logging.KeyTxID, t.Tx.ID), slog.Uint64(logging.KeyNonce, t.Tx.Nonce),
		slog.Int("attempt", a.No), slog.String("kind", string(a.Kind)), slog.String("action", r.audit.Action),
		slog.String("actor", r.audit.Actor), slog.String("fees", feesText(fees)), slog.Int64(logging.KeyToken, l.Token))
	t.Attempts = append(t.Attempts, a)
	sent, err := w.send(ctx, l, chain, t, &t.Attempts[len(t.Attempts)-1], true)
	sent.saved = true
	return sent, err
}

// attemptGas is the gas limit of t's next attempt of kind: a 0-value
// self-transfer's for a cancel or placeholder, whatever the payload's; the
// last attempt's, or the payload's (estimated if it has none), otherwise.
func attemptGas(ctx context.Context, chain txm.Chain, t txm.Tracked, prev *txm.Attempt, kind txm.AttemptKind) (uint64, error) {
	if kind == txm.AttemptCancel || kind == txm.AttemptPlaceholder {
		return cancelGas, nil
	}
	gas := t.Tx.Gas()
	if prev != nil && prev.Kind != txm.AttemptCancel && prev.Kind != txm.AttemptPlaceholder {
		gas = prev.GasLimit
	}
	if gas > 0 {
		return gas, nil
	}
	gas, err := chain.EstimateGas(ctx, txm.CallMsg{From: t.Tx.From, To: t.Tx.To, Value: t.Tx.Value, Data: t.Tx.Data})
	if err != nil {
		return 0, fmt.Errorf("estimate gas: %w", err)
	}
	return gas, nil
}

// rebroadcast sends a persisted attempt again.
func (w *attempter) rebroadcast(ctx context.Context, l txm.Lease, chain txm.Chain, t txm.Tracked, a *txm.Attempt) (round, error) {
	return w.send(ctx, l, chain, t, a, false)
}

// resend is a persisted attempt to send again as it is.
type resend struct {
	t txm.Tracked
	a *txm.Attempt
}

// rebroadcastAll sends accepted attempts of TRACKING transactions again, in
// order, in JSON-RPC batches (a node takes a batch's calls in order), and
// records them in one write: the resubmit sweep's rebroadcast from a lost
// head can be hundreds of a hot signer's transactions, which a call and two
// writes each would hold its lease for seconds. A refusal is recorded as
// send records it; a transport failure ends it with an error, the attempts
// sent before it recorded, and the next pass starts again.
func (w *attempter) rebroadcastAll(ctx context.Context, l txm.Lease, chain txm.Chain, rs []resend) (int, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	if err := w.leases.Check(ctx, l); err != nil {
		return 0, err
	}
	raws, routes := make([][]byte, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		raws[i], routes[i] = r.a.Raw, r.t.Tx.SendVia
	}
	var sent []txm.Broadcasted
	var stop error
	for i, err := range chain.SendRawTransactionsVia(ctx, raws, routes) {
		reason := txm.ReasonOf(err)
		if err != nil && reason != txm.ReasonKnown {
			w.metrics.TxSubmit(ctx, string(reason))
		}
		switch {
		case err == nil, reason == txm.ReasonKnown:
			w.metrics.TxSubmit(ctx, "accepted")
			w.metrics.Resubmit(ctx, "rebroadcast")
			sent = append(sent, txm.Broadcasted{TxID: rs[i].t.Tx.ID, AttemptNo: rs[i].a.No})
			continue
		case reason == txm.ReasonNonceTooLow:
			continue // mined meanwhile: receipts and the finality sweep decide
		case reason == txm.ReasonTransient:
			stop = fmt.Errorf("rebroadcast: %w", err)
		default:
			if _, ferr := w.failed(ctx, l, rs[i].t.Tx, reason, err); ferr != nil {
				stop = ferr
			}
		}
		if stop != nil {
			break
		}
	}
	if err := w.store.NoteRebroadcast(ctx, l, sent); err != nil {
		return 0, err
	}
	return len(sent), stop
}

// send broadcasts a (persisted) and records the outcome: TRACKING when that
// is progress (a new attempt, an attempt no node had accepted, or a
// transaction not yet TRACKING), a rebroadcast stamp otherwise, the failure
// and its backoff when the node refused.
func (w *attempter) send(ctx context.Context, l txm.Lease, chain txm.Chain, t txm.Tracked, a *txm.Attempt, fresh bool) (round, error) {
	if err := w.leases.Check(ctx, l); err != nil {
		return round{}, err
	}
	err := sendVia(ctx, chain, a.Raw, t.Tx.SendVia)
	reason := txm.ReasonOf(err)
	switch {
	case err == nil, reason == txm.ReasonKnown:
		w.metrics.TxSubmit(ctx, "accepted")
		if fresh || a.BroadcastAt == nil || t.Tx.State == txm.StateAllocated {
			ids, err := w.store.MarkTracking(ctx, l, []txm.Broadcasted{{TxID: t.Tx.ID, AttemptNo: a.No}})
			if err != nil {
				return round{}, err
			}
			w.relay.Publish(ctx, ids)
			return round{progress: true, sent: true}, nil
		}
		if err := w.store.NoteRebroadcast(ctx, l, []txm.Broadcasted{{TxID: t.Tx.ID, AttemptNo: a.No}}); err != nil {
			return round{}, err
		}
		w.metrics.Resubmit(ctx, "rebroadcast")
		return round{sent: true}, nil
	case reason == txm.ReasonNonceTooLow:
		// The nonce is taken, by one of these attempts or by another
		// transaction: receipts and the finality sweep decide.
		w.metrics.TxSubmit(ctx, string(reason))
		return round{reason: reason, err: err}, nil
	}
	w.metrics.TxSubmit(ctx, string(reason))
	return w.failed(ctx, l, t.Tx, reason, err)
}

// failed records a failed round with its backoff.
func (w *attempter) failed(ctx context.Context, l txm.Lease, t *txm.Tx, reason txm.BroadcastReason, cause error) (round, error) {
	sub := ""
	switch {
	case reason == reasonSigningFailed:
		sub = txm.SubStateSigningFailed
	case t.State != txm.StateStuck:
		sub = "broadcast_" + string(reason)
	case reason.Deterministic() || reason == txm.ReasonReverted:
		sub = string(reason) // a STUCK transaction's reason changes only to another lasting one
	}
	// After an outage of the chain's endpoints the backoff ends as soon as
	// they answer again (ResumeAfterOutage).
	outage := errors.Is(cause, txm.ErrChainUnreachable)
	failing, err := w.store.NoteFailure(ctx, l, txm.Failure{TxID: t.ID, SubState: sub, Detail: cause.Error(), Outage: outage}, w.fees.backoff)
	if err != nil {
		return round{}, err
	}
	w.log.WarnContext(ctx, "attempt failed", slog.String(logging.KeyTxID, t.ID), slog.Uint64(logging.KeyNonce, t.Nonce),
		slog.String("reason", string(reason)), slog.Int("failures", failing.Failures), slog.Bool("outage", outage), slog.Any("error", cause),
		slog.Int64(logging.KeyToken, l.Token))
	return round{reason: reason, err: cause, failing: failing}, nil
}

// nextFees chooses the fees of the next attempt (of gas units): the
// admin's (which must beat the last attempt by the bump percentage), the
// first attempt's (the caller's own or fresh), fresh ones for a refresh,
// or for a cancel or placeholder, when no node ever accepted an attempt
// (there is nothing to outbid), or else a bump of the last attempt. Every
// one stays within the caps of the attempt: the chain's, the transaction's
// fee ceiling over its gas and the nodes' cap on a transaction's fee.
func (w *attempter) nextFees(ctx context.Context, chain txm.Chain, t txm.Tracked, kind txm.AttemptKind, gas uint64,
	r replacement) (txm.Fees, error) {
	prev := txm.Latest(t.Attempts)
	caps := w.fees.caps(chain.ChainID()).For(t.Tx.FeeCeiling, t.Tx.Gas(), gas)
	if r.fees != nil {
		if !caps.Within(*r.fees) {
			return txm.Fees{}, fmt.Errorf("%w: at %d gas, at most %s wei per gas (tip %s)", errFeesTooHigh, gas, orNone(caps.MaxFee),
				orNone(caps.MaxTip))
		}
		if prev == nil {
			return *r.fees, nil
		}
		min, err := txm.BumpFees(txm.FeesOf(*prev), txm.Fees{}, w.fees.bumpPercent(chain.ChainID()), txm.FeeCaps{})
		if err != nil {
			return txm.Fees{}, err
		}
		if !covers(*r.fees, min) {
			return txm.Fees{}, fmt.Errorf("%w: a replacement must pay at least %s", errFeesTooLow, feesText(min))
		}
		return *r.fees, nil
	}
	fresh, err := chain.SuggestFees(ctx)
	if err != nil {
		return txm.Fees{}, fmt.Errorf("suggest fees: %w", err)
	}
	selfTransfer := kind == txm.AttemptCancel || kind == txm.AttemptPlaceholder
	switch {
	case prev == nil && kind == txm.AttemptOriginal:
		return caps.Clamp(firstFees(t.Tx, fresh)), nil
	case prev == nil, (r.refresh || selfTransfer) && !anyAccepted(t.Attempts):
		return caps.Clamp(txm.Fees{MaxFeePerGas: fresh.MaxFeePerGas, MaxPriorityFeePerGas: fresh.MaxPriorityFeePerGas,
			GasPrice: fresh.GasPrice}), nil
	}
	// The replacement budget stops automation from bumping for ever; an
	// admin's action is the way out once it is spent, bounded by the fee
	// caps alone.
	if r.audit.ActionID == "" {
		if err := caps.AllowBump(len(t.Attempts) - 1); err != nil {
			return txm.Fees{}, err
		}
	}
	return txm.BumpFees(txm.FeesOf(*prev), fresh, w.fees.bumpPercent(chain.ChainID()), caps)
}

func anyAccepted(attempts []txm.Attempt) bool {
	for _, a := range attempts {
		if a.BroadcastAt != nil {
			return true
		}
	}
	return false
}

// covers reports whether every fee of f is at least min's.
func covers(f, min txm.Fees) bool {
	ge := func(a, b *big.Int) bool { return b == nil || a != nil && a.Cmp(b) >= 0 }
	if min.IsLegacy() {
		return ge(f.GasPrice, min.GasPrice)
	}
	return ge(f.MaxFeePerGas, min.MaxFeePerGas) && ge(f.MaxPriorityFeePerGas, min.MaxPriorityFeePerGas)
}

func sameFees(a, b txm.Fees) bool {
	eq := func(x, y *big.Int) bool { return (x == nil) == (y == nil) && (x == nil || x.Cmp(y) == 0) }
	return eq(a.MaxFeePerGas, b.MaxFeePerGas) && eq(a.MaxPriorityFeePerGas, b.MaxPriorityFeePerGas) && eq(a.GasPrice, b.GasPrice)
}

func orNone(v *big.Int) string {
	if v == nil {
		return "no cap"
	}
	return v.String()
}

func feesText(f txm.Fees) string {
	if f.IsLegacy() {
		return "gas price " + f.GasPrice.String()
	}
	return fmt.Sprintf("max fee %s, tip %s", f.MaxFeePerGas, f.MaxPriorityFeePerGas)
}

// sendVia broadcasts one attempt of a transaction on the transaction's
// route (its create's sendVia; "" its signer's).
func sendVia(ctx context.Context, chain txm.Broadcaster, raw []byte, route string) error {
	return chain.SendRawTransactionsVia(ctx, [][]byte{raw}, []string{route})[0]
}
