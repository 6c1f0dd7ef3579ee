package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
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
// lease it first carries out the signer's pending admin actions, then
// drains ALLOCATED transactions in nonce order, bounded by maxInFlight (STUCK
// transactions count) and a time budget. Each batch is built, signed once,
// persisted fenced and committed, then broadcast, then marked TRACKING
// fenced with a `receipt` prompt. Redelivered or duplicate prompts are
// harmless: a persisted attempt is rebroadcast as the same bytes, never
// signed again.
//
// A transaction that fails to leave ALLOCATED (the signer fails, the node
// refuses it for a reason that may pass) is retried with backoff, not at the
// prompt's rate: the failure is recorded, the prompt acknowledged, and the
// resubmit sweep prompts again when the backoff has run out. After
// stuckAfter of failures it goes STUCK with its reason (one TxStuck). A
// first attempt refused as underpriced is replaced with bumped fees.
type DrainSigner struct {
	store   txm.SubmitStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	signers map[common.Address]txm.Signer
	work    *attempter
	relay   *Relay
	cfg     config.Drain
	metrics txm.Recorder
	log     *slog.Logger
	hooks   SubmitHooks
	running coalescer[txm.LeaseKey] // one drain per signer at a time in this process
	fees    *feeCache               // fee suggestions shared by this process's drains
	// delegations remembers which signers carry an EIP-7702 delegation:
	// their in-flight limit is their chain's delegated limit (cfg.InFlight).
	delegations delegations
}

// NewDrainSigner returns the use case. relay may be nil.
func NewDrainSigner(store txm.SubmitStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, signers map[common.Address]txm.Signer,
	relay *Relay, cfg config.Drain, m txm.Recorder, log *slog.Logger) (*DrainSigner, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new drain signer: store, leases and logger are required")
	}
	return &DrainSigner{store: store, leases: leases, chains: chains, signers: signers, relay: relay, cfg: cfg, metrics: recorderOr(m), log: log,
		fees: newFeeCache(feeReuse), work: &attempter{store: store, leases: leases, relay: relay, fees: feeSettingsOf(cfg.Attempts), metrics: recorderOr(m), log: log}}, nil
}

// SetHooks installs test hooks.
func (d *DrainSigner) SetHooks(h SubmitHooks) { d.hooks = h }

// DrainResult says what one drain did.
type DrainResult struct {
	Broadcast  int  // attempts accepted by the node (or already known to it)
	Stuck      int  // transactions moved to STUCK
	Full       bool // stopped because maxInFlight was reached
	Failed     int  // transactions whose attempt failed and now back off
	Yielded    bool // stopped with work left (budget spent, or the lease did not come back), and prompted again
	HandedOver int  // times it let the lease go to a waiter and took it back
	Coalesced  bool // a drain of the signer was running here: it goes round once more instead
}

// DrainBatch bounds how many transactions are signed, persisted and
// broadcast together (the broadcast in JSON-RPC batches of the client's
// MaxBatch). Each batch costs two commits and a few round trips whatever
// its size, so larger batches let a hot signer's backlog keep up with the
// node. MaxInFlight bounds it first (64 by default).
const DrainBatch = 512

// signBudget bounds the time one batch spends signing: a remote signer
// (Cloud KMS answers in tens of milliseconds) signs fewer per batch, so that
// the batch is broadcast soon and an invocation waiting for the lease
// (receipts, confirmations, up to chainLeaseWait) is let in between
// batches rather than after hundreds of remote calls.
const signBudget = chainLeaseWait / 4

// drainHold is how long a drain keeps the signer's chain lease, while work
// remains, once another invocation marked it wanted. Then it lets the
// lease go, so that the signer's receipts and confirmations, which wait for
// the same lease (up to chainLeaseWait), are not held up behind a hot
// signer's drain for the whole submit budget, and takes it back after.
// Nobody waiting, it drains on until the budget: handing the lease on
// every drainHold regardless cost a hot signer most of its broadcast rate.
// A confirmation (a mark first) is let in after the batch the drain is on
// (see drainHeld). A quarter of chainLeaseWait lowers the confirmations'
// wait for the lease without costing the drain's broadcast rate.
const drainHold = chainLeaseWait / 4

// Execute drains one signer. It returns an error when the prompt should be
// retried: the lease is held elsewhere, the lease was lost, or the database
// or chain failed before any transaction's failure could be recorded. A
// transaction's own failure is recorded with its backoff and the prompt
// acknowledged.
func (d *DrainSigner) Execute(ctx context.Context, chainID uint64, signer common.Address) (DrainResult, error) {
	var total DrainResult
	ran, err := d.running.do(txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}, func() (bool, error) {
		res, err := d.drain(ctx, chainID, signer)
		total.Broadcast += res.Broadcast
		total.Stuck += res.Stuck
		total.Failed += res.Failed
		total.HandedOver += res.HandedOver
		total.Full, total.Yielded = res.Full, res.Yielded
		return res.Yielded, err
	})
	total.Coalesced = !ran
	return total, err
}

// drain is one round of Execute. When the lease is wanted it lets it go
// and, once the waiter has taken it, waits for it again and goes on
// (handOver): a receipt or confirmation write holds it for milliseconds,
// while handing the rest of the drain on through a fresh prompt cost a
// Pub/Sub round trip and the next invocation's wait each time. Only when
// the lease does not come back within chainLeaseWait, or the budget is
// spent, does it prompt Submit again and end.
func (d *DrainSigner) drain(ctx context.Context, chainID uint64, signer common.Address) (DrainResult, error) {
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
	// Most prompts of a busy signer find its rows already drained (every
	// allocation call prompts, and the drain that ran meanwhile took them
	// all): such a prompt is acknowledged after one read, without taking
	// and releasing the lease. Rows or actions written after the read come
	// with prompts of their own.
	work, err := d.store.HasSubmitWork(ctx, chainID, signer)
	if err != nil || !work.Any() {
		return res, err
	}
	// Without pending actions at that read, the first holding of the lease
	// does not look for them again (one round trip less per drain): an
	// action requested since comes with a prompt of its own.
	actions := work.Actions
	owner := d.cfg.InstanceID + "/submit/" + uuid.NewString()
	start := time.Now()
	relay := &behind{relay: d.relay, ctx: ctx}
	defer relay.wait()
	defer d.numberEvents(ctx, &res)
	for {
		var handed *txm.Lease
		err := withChainLease(ctx, d.leases, key, owner, awaitIt, d.cfg.RenewEvery, d.log, func(lease txm.Lease, keeper *leaseKeeper) error {
			wanted, err := d.drainHeld(ctx, key, lease, keeper, chain, sig, start, actions, relay, &res)
			actions = true // after a hand-over, look again
			if wanted {
				handed = &lease
			}
			return err
		})
		switch {
		case errors.Is(err, ErrNoLease) && res.HandedOver > 0:
			// The lease did not come back: hand the rest on.
			return res, d.promptAgain(ctx, key, &res)
		case err != nil || handed == nil:
			return res, err
		}
		res.HandedOver++
		awaitTaken(ctx, d.leases, *handed)
	}
}

// numberEvents numbers, once the drain let its lease go, the events
// pending after its broadcasts: theirs, and the TxAccepted events of what
// it sent, which the create path leaves pending so that creating stays
// cheap. Numbering waits for the feed's lock behind every other writer;
// under the signer's lease that wait held up its confirmations. A failure
// is logged: the finality pass numbers what is left.
func (d *DrainSigner) numberEvents(ctx context.Context, res *DrainResult) {
	if res.Broadcast == 0 {
		return
	}
	ids, err := d.store.NumberCompletions(ctx)
	if err != nil {
		d.log.WarnContext(ctx, "events recorded but not numbered yet; the next finality pass numbers them", slog.Any("error", err))
	}
	d.relay.Publish(ctx, ids)
}

// handOverWait bounds how long a drain that let its lease go waits for the
// waiter to take it before asking for it again: a waiter polls at most
// every 100ms, and one that gave up must not cost the drain more.
const handOverWait = 200 * time.Millisecond

// awaitTaken waits, up to handOverWait, until l's released lease was taken
// by the invocation that wanted it, so that asking for it again does not
// take it back from under the waiter.
func awaitTaken(ctx context.Context, leases txm.LeaseStore, l txm.Lease) {
	deadline := time.Now().Add(handOverWait)
	for pause := 2 * time.Millisecond; time.Now().Before(deadline); pause = min(2*pause, 20*time.Millisecond) {
		wanted, err := leases.Wanted(ctx, l)
		if err != nil || !wanted.Any {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// drainHeld drains under one holding of the lease, first carrying out the
// pending admin actions when actions says there may be some: it reports
// wanted (and stops) after the batch it is on once a confirmation marked
// the lease wanted first, and after drainHold once another invocation
// marked it wanted; at the end of the budget it prompts Submit again and
// stops. The marks are read between batches (one small read a batch after
// the first): a confirmation of a hot signer, one a block, waited for the
// rest of drainHold behind a drain, and its block's finality lag with it.
func (d *DrainSigner) drainHeld(ctx context.Context, key txm.LeaseKey, lease txm.Lease, keeper *leaseKeeper, chain txm.Chain, sig txm.Signer,
	start time.Time, actions bool, relay *behind, res *DrainResult) (wanted bool, err error) {
	log := d.log.With(slog.String(logging.KeySigner, txm.CanonicalAddress(key.Signer)), slog.String(logging.KeyOwner, lease.Owner),
		slog.Int64(logging.KeyToken, lease.Token))
	if actions {
		if err := d.work.runActions(ctx, d.store, lease, chain, sig); err != nil {
			return false, err
		}
	}
	// A delegated signer's node holds one of its transactions at a time:
	// the limit is read when the signer's work starts.
	maxInFlight := d.inFlightLimit(ctx, key, chain, log)
	held := time.Now()
	for batch := 0; ; batch++ {
		if err := keeper.Lost(); err != nil {
			return false, err
		}
		if time.Since(start) >= d.cfg.SubmitBudget {
			return false, d.promptAgain(ctx, key, res)
		}
		if batch > 0 {
			wanted, err := d.leases.Wanted(ctx, lease)
			if err != nil || wanted.First || (wanted.Any && time.Since(held) >= drainHold) {
				return err == nil, err
			}
		}
		items, inflight, err := d.store.NextToSubmit(ctx, key.ChainID, key.Signer, maxInFlight, DrainBatch)
		if err != nil {
			return false, err
		}
		room := maxInFlight - inflight
		if len(items) == 0 {
			res.Full = room <= 0
			return false, nil
		}
		limit := min(room, DrainBatch)
		more, err := d.submitBatch(ctx, log, lease, chain, sig, items, len(items) < limit, relay, res)
		if err != nil || !more {
			return false, err
		}
	}
}

// promptAgain hands the rest of the drain on: a fresh Submit prompt.
func (d *DrainSigner) promptAgain(ctx context.Context, key txm.LeaseKey, res *DrainResult) error {
	res.Yielded = true
	ids, err := d.store.PromptSubmit(ctx, key)
	if err != nil {
		return err
	}
	d.relay.Publish(ctx, ids)
	return nil
}

// submitBatch signs what has no attempt yet, persists those attempts, then
// broadcasts every item in nonce order and marks the accepted ones
// TRACKING. It reports whether draining should go on. last says the items
// are all the signer had: once every one of them is TRACKING the drain
// ends without reading again (rows written since come with prompts of
// their own, as for HasSubmitWork).
func (d *DrainSigner) submitBatch(ctx context.Context, log *slog.Logger, lease txm.Lease, chain txm.Chain, sig txm.Signer,
	items []txm.SubmitItem, last bool, relay *behind, res *DrainResult) (bool, error) {
	if first := items[0]; first.Attempt != nil && feesFault(first.Tx.SubState) {
		// Its last broadcast was refused as underpriced: replace it first.
		r, err := d.work.replace(ctx, lease, chain, sig, txm.Tracked{Tx: first.Tx, Attempts: []txm.Attempt{*first.Attempt}},
			replacement{audit: txm.Audit{Action: "bump", Actor: "txfence", Reason: "refused as " + first.Tx.SubState}})
		if err != nil {
			return false, err
		}
		return d.settle(ctx, lease, first.Tx, r, res)
	}
	fresh := make([]txm.Attempt, 0, len(items)) // capacity fixed: items point into it
	sctx, span := d.metrics.StartSpan(ctx, "submit.sign")
	given := len(items)
	items, signFailed, signErr := d.signFresh(sctx, chain, sig, items, &fresh)
	span.End()
	switch {
	case errors.Is(signErr, errSuggestFees):
		return false, signErr
	case signErr != nil && len(items) == 0:
		// The first one failed: it backs off.
		r, err := d.work.failed(ctx, lease, signFailed, reasonSigningFailed, signErr)
		return d.settleErr(ctx, lease, signFailed, r, err, res)
	}
	pctx, span := d.metrics.StartSpan(ctx, "submit.persist")
	err := d.store.SaveAttempts(pctx, lease, fresh)
	span.End()
	if err != nil {
		return false, err
	}
	if h := d.hooks.AfterPersist; h != nil && len(fresh) > 0 {
		h()
	}
	// The fence is checked once per batch before the chain sees anything
	// (the attempts' fenced write just did, if there were any); a stale
	// holder that slips past it can only rebroadcast bytes that are already
	// persisted, which is harmless.
	if len(fresh) == 0 {
		if err := d.leases.Check(ctx, lease); err != nil {
			return false, err
		}
	}

	// One round trip for the whole batch, in nonce order; the answers are
	// then read in that order up to the first that stops the drain (the
	// transactions after it are persisted and will be sent again).
	raws, routes := make([][]byte, len(items)), make([]string, len(items))
	for i, it := range items {
		raws[i], routes[i] = it.Attempt.Raw, it.Tx.SendVia
	}
	t0 := time.Now()
	bctx, span := d.metrics.StartClientSpan(ctx, "submit.broadcast")
	errs := chain.SendRawTransactionsVia(bctx, raws, routes)
	span.End()
	d.metrics.Latency(ctx, txm.StageBroadcast, time.Since(t0).Seconds())
	var done []txm.Broadcasted
	var refused *txm.SubmitItem
	var refusal error
	for i, it := range items {
		a, err := it.Attempt, errs[i]
		reason := txm.ReasonOf(err)
		d.metrics.TxSubmit(ctx, submitResult(err, reason))
		switch {
		case err == nil:
			if a.BroadcastAt == nil { // its first acceptance
				d.metrics.Latency(ctx, txm.StageSubmit, time.Since(it.Tx.CreatedAt).Seconds())
			}
			done = append(done, txm.Broadcasted{TxID: a.TxID, AttemptNo: a.No})
			continue
		case reason == txm.ReasonKnown || reason == txm.ReasonNonceTooLow:
			// The attempt is persisted: the node has it, or a transaction
			// at this nonce is already on chain; the receipt check decides.
			done = append(done, txm.Broadcasted{TxID: a.TxID, AttemptNo: a.No, Outcome: reason})
			continue
		case reason == txm.ReasonDelegatedLimit:
			// Not the transaction's failure: the node holds as many of a
			// delegated signer's transactions as it takes. It stays
			// ALLOCATED, its attempt persisted, and goes out when the one
			// before is mined (which prompts Submit again).
			log.InfoContext(ctx, "the node holds the delegated signer's in-flight limit; the transaction waits its turn",
				slog.String(logging.KeyTxID, a.TxID), slog.Uint64(logging.KeyNonce, a.Nonce))
			refused, refusal = &items[i], err
		}
		if refused != nil {
			break
		}
		log.WarnContext(ctx, "broadcast rejected", slog.String(logging.KeyTxID, a.TxID), slog.Uint64(logging.KeyNonce, a.Nonce),
			slog.String("reason", string(reason)), slog.Any("error", err))
		refused, refusal = &items[i], err
		break
	}
	if h := d.hooks.AfterBroadcast; h != nil {
		h()
	}
	tctx, span := d.metrics.StartSpan(ctx, "submit.track")
	ids, err := d.store.MarkTracking(tctx, lease, done)
	span.End()
	if err != nil {
		return false, err
	}
	res.Broadcast += len(done)
	relay.publish(ids)
	switch {
	case refused != nil && txm.ReasonOf(refusal) == txm.ReasonDelegatedLimit:
		d.noteDelegated(ctx, lease.Key, true, log)
		res.Full = true
		return false, nil
	case refused != nil:
		reason := txm.ReasonOf(refusal)
		if reason.Permanent() && refused.Attempt.Kind != txm.AttemptCancel && refused.Attempt.Kind != txm.AttemptPlaceholder {
			// The node will never take this transaction: fill its nonce so
			// that the signer's later ones go on, and let it end with the
			// node's reason once the placeholder is mined.
			return d.fill(ctx, log, lease, chain, sig, refused, reason, refusal, res)
		}
		if reason.Deterministic() || reason == txm.ReasonReverted {
			// The same bytes can never succeed: STUCK with the reason, and
			// stop here; later nonces wait until it is resolved.
			return false, d.markStuck(ctx, lease, refused.Tx, string(reason), refusal.Error(), res)
		}
		r, err := d.work.failed(ctx, lease, refused.Tx, reason, refusal)
		return d.settleErr(ctx, lease, refused.Tx, r, err, res)
	case signErr != nil:
		r, err := d.work.failed(ctx, lease, signFailed, reasonSigningFailed, signErr)
		return d.settleErr(ctx, lease, signFailed, r, err, res)
	}
	return !last || len(items) < given, nil // the signing budget left some
}

// fill puts a placeholder (a 21,000-gas 0-value self-transfer) at the
// nonce of a transaction whose payload the node refused for good, with the
// refusal recorded: the transaction ends FAILED_FINAL with that reason once
// the placeholder is mined, and the later nonces are not held up. A
// placeholder the node refuses for good too (the signer's key or chain id
// is wrong for every transaction) leaves the transaction STUCK for an
// operator.
func (d *DrainSigner) fill(ctx context.Context, log *slog.Logger, lease txm.Lease, chain txm.Chain, sig txm.Signer,
	refused *txm.SubmitItem, reason txm.BroadcastReason, refusal error, res *DrainResult) (bool, error) {
	log.WarnContext(ctx, "the node refused a transaction for good; filling its nonce", slog.String(logging.KeyTxID, refused.Tx.ID),
		slog.Uint64(logging.KeyNonce, refused.Tx.Nonce), slog.String("reason", string(reason)))
	r, err := d.work.replace(ctx, lease, chain, sig, txm.Tracked{Tx: refused.Tx, Attempts: []txm.Attempt{*refused.Attempt}},
		replacement{kind: txm.AttemptPlaceholder, audit: txm.Audit{Action: string(txm.AttemptPlaceholder), Actor: "txfence",
			Reason: "the node refused the transaction for good: " + refusal.Error(), Refused: reason}})
	if err != nil {
		return false, err
	}
	if r.reason.Permanent() {
		return false, d.markStuck(ctx, lease, refused.Tx, string(r.reason), r.err.Error(), res)
	}
	return d.settle(ctx, lease, refused.Tx, r, res)
}

// signFresh signs, with one fee suggestion, the items that have no attempt
// yet, appending the attempts to fresh (whose capacity the caller fixed:
// items point into it). When one fails it returns the items before it, the
// failed transaction and the error, so that what came before is broadcast
// and the failed one backs off. Once signing has taken signBudget it
// returns the items before the next one to sign: the rest are the next
// batch's.
func (d *DrainSigner) signFresh(ctx context.Context, chain txm.Chain, sig txm.Signer, items []txm.SubmitItem,
	fresh *[]txm.Attempt) ([]txm.SubmitItem, *txm.Tx, error) {
	var fees *txm.Fees
	start := time.Now()
	for i := range items {
		if items[i].Attempt != nil {
			continue
		}
		if i > 0 && time.Since(start) >= signBudget {
			return items[:i], nil, nil
		}
		if fees == nil {
			f, err := d.fees.suggest(ctx, items[i].Tx.ChainID, chain)
			if err != nil {
				return items, nil, fmt.Errorf("%w: %w", errSuggestFees, err)
			}
			fees = &f
		}
		a, err := d.sign(ctx, chain, sig, items[i].Tx, *fees)
		if err != nil {
			return items[:i], items[i].Tx, err
		}
		*fresh = append(*fresh, a)
		items[i].Attempt = &(*fresh)[len(*fresh)-1]
	}
	return items, nil, nil
}

func submitResult(err error, reason txm.BroadcastReason) string {
	if err == nil {
		return "accepted"
	}
	return string(reason)
}

// settle reads what a single-transaction round did: go on after progress;
// after a failure stop (the transaction backs off), going STUCK once the
// failures have lasted stuckAfter; at the fee cap go STUCK.
func (d *DrainSigner) settle(ctx context.Context, l txm.Lease, t *txm.Tx, r round, res *DrainResult) (bool, error) {
	switch {
	case r.refused != nil:
		return false, d.markStuck(ctx, l, t, txm.SubStateFeeCapReached, r.refused.Error(), res)
	case r.progress || r.sent:
		res.Broadcast++
		return true, nil
	case r.err == nil || r.reason == txm.ReasonNonceTooLow:
		return false, nil
	}
	res.Failed++
	if r.failing.For < d.cfg.StuckAfter {
		return false, nil
	}
	sub := txm.SubStateBroadcastFailing
	switch {
	case r.reason == reasonSigningFailed:
		sub = txm.SubStateSigningFailed
	case r.reason != txm.ReasonTransient:
		sub = string(r.reason)
	}
	return false, d.markStuck(ctx, l, t, sub, fmt.Sprintf("failing for %s: %v", r.failing.For.Round(time.Second), r.err), res)
}

func (d *DrainSigner) settleErr(ctx context.Context, l txm.Lease, t *txm.Tx, r round, err error, res *DrainResult) (bool, error) {
	if err != nil {
		return false, err
	}
	return d.settle(ctx, l, t, r, res)
}

func (d *DrainSigner) markStuck(ctx context.Context, l txm.Lease, t *txm.Tx, subState, detail string, res *DrainResult) error {
	ids, err := d.store.MarkStuck(ctx, l, t.ID, subState, detail)
	if err != nil {
		return err
	}
	res.Stuck++
	d.relay.Publish(ctx, ids)
	return nil
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
	payload := t.Gas()
	if payload == 0 {
		payload = gas
	}
	caps := d.cfg.Attempts.Fees.Caps(t.ChainID).For(t.FeeCeiling, payload, gas)
	return signAttempt(ctx, sig, t, txm.AttemptOriginal, 1, gas, caps.Clamp(firstFees(t, fees)))
}

// behind relays a drain's receipt prompts while the drain goes on with its
// next batch, one relay at a time (each waits for the one before): under
// load a relay took as long as a batch's database work. The drain waits for
// the last before it returns, so nothing is left running after the
// invocation.
type behind struct {
	relay *Relay
	ctx   context.Context
	done  chan struct{} // closed when the last relay started has ended
}

func (b *behind) publish(ids []int64) {
	if b.relay == nil || len(ids) == 0 {
		return
	}
	b.wait()
	done := make(chan struct{})
	b.done = done
	go func() {
		defer close(done)
		b.relay.Publish(b.ctx, ids)
	}()
}

func (b *behind) wait() {
	if b.done != nil {
		<-b.done
	}
}
