package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// ChainReader is what creating a transaction asks of a chain: the pending
// nonce (only when the shared cursor's sync is stale), whether the
// destination holds code (cached), the simulation of a call (one batched
// request for the calls of an allocation batch), the decoding of a revert,
// gas estimation for a plain transfer, and the L2 data fee (one batched
// request, none on a chain without one).
type ChainReader interface {
	txm.NonceSource
	txm.GasEstimator
	txm.Simulator
	txm.CodeChecker
	txm.RevertDecoder
	txm.DataFeeOracle
}

// CreateStore is the storage CreateTx needs.
type CreateStore interface {
	txm.Allocator
	FindByRequestID(ctx context.Context, chainID uint64, signer common.Address, requestID string) (*txm.Tx, error)
	// Hold is txm.ApprovalStore's: a create held for approval.
	Hold(ctx context.Context, h txm.Hold) (*txm.Tx, bool, error)
}

// CreateTx allocates nonces for create requests. Requests wait in the
// instance's dispatcher, which runs up to Workers allocation batches at once
// (each one database call, for any number of signers), a signer in at most
// one of them: the requests that arrive while a signer's batch is in flight
// go together in its next. Across instances only the signer's nonce lease
// serializes.
type CreateTx struct {
	store    CreateStore
	relay    *Relay
	chains   map[uint64]ChainReader
	policies *Policies
	cfg      config.Create
	metrics  txm.Recorder
	log      *slog.Logger
	dispatch *dispatcher

	// synced remembers, per signer, until when (this process's monotonic
	// clock) the shared cursor's chain sync is known to be fresh, so that a
	// batch does not read the cursor outside its transaction just to learn
	// that the chain need not be asked.
	syncedMu sync.Mutex
	synced   map[signerKey]time.Time
}

// NewCreateTx returns the use case. Every configured chain needs a reader.
// relay may be nil (the outbox sweep then publishes the submit prompts).
func NewCreateTx(store CreateStore, chains map[uint64]ChainReader, relay *Relay, policies *Policies, cfg config.Create,
	m txm.Recorder, log *slog.Logger) (*CreateTx, error) {
	if store == nil || policies == nil || log == nil {
		return nil, errors.New("new create tx: store, policies and logger are required")
	}
	for _, id := range cfg.ChainIDs {
		if chains[id] == nil {
			return nil, fmt.Errorf("new create tx: no chain reader for chain %d", id)
		}
	}
	return &CreateTx{store: store, relay: relay, chains: chains, policies: policies, cfg: cfg, metrics: recorderOr(m), log: log,
		dispatch: newDispatcher(cfg.InstanceID, cfg.Workers, cfg.BatchSize), synced: map[signerKey]time.Time{}}, nil
}

// Execute validates r, asks who's policy, answers a replay of a known
// request id at once, and otherwise allocates a nonce through the signer's
// dispatcher; a create that is not a plain transfer is simulated first,
// with the other calls of its allocation batch (simulateBatch). Invalid
// input returns a *txm.ValidationError, a refusal a *txm.Refusal
// (ErrForbidden), a call whose simulation reverts a *txm.RevertedError and
// one that fails in the EVM otherwise a *txm.ExecutionError (both
// ErrInvalid); nothing is written for any. A request
// without a request id gets one (r.RequestID), so that every create can be
// retried safely: after ErrOutcomeUnknown (the database connection was lost
// during COMMIT and the outcome could not be read back) the caller retries
// with it.
//
// Its span, "create", has children for the gas estimate (when one is
// needed), the wait in the dispatcher ("create.batch_wait") and, in the
// trace of the request that leads the batch, the allocation transaction
// ("create.allocate", linked to the other requests of the batch).
func (c *CreateTx) Execute(ctx context.Context, who txm.Principal, r *txm.Request) (txm.Created, error) {
	start := time.Now()
	ctx, span := c.metrics.StartSpan(ctx, "create")
	defer span.End()
	created, err := c.execute(ctx, who, r)
	result := createResult(created, err)
	c.metrics.TxCreate(ctx, result, 1)
	c.metrics.CreateLatency(ctx, result, time.Since(start).Seconds())
	span.SetResult(result, err != nil && !errors.Is(err, txm.ErrInvalid) && !errors.Is(err, txm.ErrForbidden))
	if errors.Is(err, txm.ErrForbidden) {
		c.policies.Refused(ctx, who, "create", txm.CanonicalAddress(r.From), err)
	}
	return created, err
}

func createResult(c txm.Created, err error) string {
	switch {
	case err == nil:
		return string(c.Outcome)
	case errors.Is(err, txm.ErrInvalid):
		return "invalid"
	case errors.Is(err, txm.ErrForbidden):
		return "forbidden"
	case errors.Is(err, txm.ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, txm.ErrUnavailable), errors.Is(err, txm.ErrFenced), errors.Is(err, ErrChainUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}

func (c *CreateTx) execute(ctx context.Context, who txm.Principal, r *txm.Request) (txm.Created, error) {
	if err := ValidateRequest(r, c.cfg); err != nil {
		return txm.Created{}, err
	}
	pol, err := c.policies.For(ctx, who)
	if err != nil {
		return txm.Created{}, err
	}
	if err := pol.CheckSend(r); err != nil {
		return txm.Created{}, err
	}
	r.Principal = who.ID
	r.FeeCeiling = pol.MaxFeePerGas
	txID, err := uuid.NewV7()
	if err != nil {
		return txm.Created{}, fmt.Errorf("new tx id: %w", err)
	}
	if r.RequestID == "" {
		// Made up here, so it cannot exist yet: no lookup. It is the
		// row's own time-ordered id, so the request id index grows at
		// its end, like the primary key.
		r.RequestID, r.MadeUpID = "txf-"+txID.String(), true
	} else { // phase one of idempotency: answer known ids without queueing
		existing, err := c.store.FindByRequestID(ctx, r.ChainID, r.From, r.RequestID)
		switch {
		case err == nil:
			return resolveFor(who, existing, r.Fingerprint()), nil
		case !errors.Is(err, txm.ErrNotFound):
			return txm.Created{}, err
		}
	}
	if r.ErrorABI != "" {
		if _, err := c.chains[r.ChainID].DecodeRevert(nil, r.ErrorABI); err != nil {
			v := &txm.ValidationError{}
			v.Add("errorAbi", "%s", strings.TrimPrefix(err.Error(), txm.ErrInvalid.Error()+": "))
			return txm.Created{}, v
		}
	}
	return c.judgeAndQueue(ctx, who, pol, r, txID.String())
}

// judgeAndQueue is what a create does once it is known to be new: it is
// simulated (in its allocation batch) or, for a plain transfer, estimated,
// judged by the creator's policy, and allocated, or held for approval when
// a rule of the policy requires it (hold). A request approved at last goes
// the same way, apart from the hold.
func (c *CreateTx) judgeAndQueue(ctx context.Context, who txm.Principal, pol txm.Policy, r *txm.Request, txID string) (txm.Created, error) {
	simulate, err := c.needsSimulation(ctx, r, pol)
	if err != nil {
		return txm.Created{}, err
	}
	if simulate {
		// Simulated with the other calls of its allocation batch, in one
		// request, before it gets a nonce (runBatch); the checks that need
		// its gas run then (judge).
		return c.queue(ctx, who, pol, r, txID, true)
	}
	if r.GasLimit == 0 || !pol.SkipEstimation {
		// A given gas limit is the call's: the node says whether it is
		// enough, and whether the call fails at all.
		gctx, span := c.metrics.StartClientSpan(ctx, "chain.estimate_gas")
		gas, err := c.chains[r.ChainID].EstimateGas(gctx, txm.CallMsg{From: r.From, To: r.To, Value: r.Value, Data: r.Data,
			Gas: r.GasLimit})
		span.End()
		var revert *txm.RevertError
		var funds *txm.InsufficientFundsError
		var failed *txm.ExecutionError
		switch {
		case errors.As(err, &revert):
			v := &txm.ValidationError{}
			v.Add("data", "the call would revert: %s", revert.Error())
			return txm.Created{}, v
		case errors.As(err, &funds):
			return txm.Created{}, fundsInvalid(funds)
		case errors.As(err, &failed):
			// The node ran the call and it fails (out of gas at any limit,
			// an invalid opcode, ...): no retry changes that.
			return txm.Created{}, failed
		case err != nil:
			return txm.Created{}, fmt.Errorf("%w: estimate gas: %w", ErrChainUnavailable, err)
		}
		if r.GasLimit == 0 {
			if gas > c.cfg.MaxGasLimit {
				v := &txm.ValidationError{}
				v.Add("gasLimit", "the estimate %d exceeds the cap %d", gas, c.cfg.MaxGasLimit)
				return txm.Created{}, v
			}
			r.GasEstimate = gas
		}
	}
	r.Effects = plainEffects(r)
	if err := c.checkEffects(pol, r); err != nil {
		return txm.Created{}, err
	}
	if err := c.priceDataFees(ctx, r.ChainID, []*txm.Request{r}); err != nil {
		return txm.Created{}, err
	}
	if err := c.checkCost(pol, r); err != nil {
		return txm.Created{}, err
	}
	if rule := approvalFor(pol, r); rule != nil {
		return c.hold(ctx, who, r, txID, *rule)
	}
	return c.queue(ctx, who, pol, r, txID, false)
}

// checkCost is what a create must pass once its gas limit is known and its
// data fee priced (priceDataFees): the policy's caps on the gas limit and
// the worst-case cost (value, execution fee bound and data fee), and the
// nodes' cap on a transaction's fee.
func (c *CreateTx) checkCost(pol txm.Policy, r *txm.Request) error {
	chainCap := c.cfg.Fees.For(r.ChainID).MaxFee
	r.ExecutionFee = r.ExecutionFeeBound(chainCap)
	r.Cost = r.WorstCaseCost(chainCap)
	if err := pol.CheckCost(r); err != nil {
		return err
	}
	return checkTxFee(r, c.cfg.Fees.For(r.ChainID).TxFeeCap)
}

// dataFeeNonce is the nonce a create's data fee is priced with, before it
// has one: the largest of the five-byte encoding no signer's nonce grows
// past, so that the size priced is not below the signed transaction's.
const dataFeeNonce = math.MaxUint32

// priceDataFees prices the L2 data fee of each of rs, creates on chain
// chainID whose gas limit is known, in one call (none on a chain without a
// data fee), and records it in each (DataFee). Each is priced as it will be
// signed at its worst: at its gas limit, and at the most it may pay per gas
// (PerGasBound) where something bounds it, its own fees otherwise. A chain
// that cannot price them is unavailable, as a failed estimate is.
func (c *CreateTx) priceDataFees(ctx context.Context, chainID uint64, rs []*txm.Request) error {
	oracle := c.chains[chainID]
	if !oracle.ChargesDataFee() {
		for _, r := range rs {
			r.DataFee = new(big.Int)
		}
		return nil
	}
	chainCap := c.cfg.Fees.For(chainID).MaxFee
	txs := make([]txm.DataFeeTx, len(rs))
	for i, r := range rs {
		t := txm.DataFeeTx{From: r.From, To: r.To, Value: r.Value, Data: r.Data, Nonce: dataFeeNonce, Gas: r.Gas(),
			MaxFeePerGas: r.MaxFeePerGas, MaxPriorityFeePerGas: r.MaxPriorityFeePerGas, GasPrice: r.GasPrice}
		if perGas := r.PerGasBound(chainCap); perGas != nil {
			if t.GasPrice != nil {
				t.GasPrice = perGas
			} else {
				t.MaxFeePerGas, t.MaxPriorityFeePerGas = perGas, perGas
			}
		}
		txs[i] = t
	}
	pctx, span := c.metrics.StartClientSpan(ctx, "chain.data_fees")
	span.SetInt("txfence.batch_size", len(txs))
	fees, err := oracle.DataFees(pctx, txs)
	span.End()
	if err != nil {
		return fmt.Errorf("%w: data fee: %w", ErrChainUnavailable, err)
	}
	if len(fees) != len(rs) {
		return fmt.Errorf("%w: data fee: %d fees for %d transactions", ErrChainUnavailable, len(fees), len(rs))
	}
	for i, r := range rs {
		r.DataFee = fees[i]
	}
	return nil
}

// queue hands r to the dispatcher and answers with its allocation.
func (c *CreateTx) queue(ctx context.Context, who txm.Principal, pol txm.Policy, r *txm.Request, txID string,
	simulate bool) (txm.Created, error) {
	var sim *simCheck
	if simulate {
		sim = &simCheck{pol: pol}
	}
	var caps map[string]txm.Policy
	if pol.HasRollingCaps() || pol.HasWindows() {
		caps = map[string]txm.Policy{who.ID: pol}
	}
	created, err := c.enqueue(ctx, r, txID, caps, sim)
	var held *heldForApproval
	switch {
	case errors.As(err, &held): // its simulation showed it needs approval
		return c.hold(ctx, who, r, txID, held.rule)
	case err != nil:
		return created, err
	case created.Outcome == txm.OutcomeRefused:
		return txm.Created{}, created.Refusal
	case created.Outcome != txm.OutcomeCreated && created.Tx != nil:
		return resolveFor(who, created.Tx, r.Fingerprint()), nil // a replay found inside the batch
	}
	return created, nil
}

// fundsInvalid is the node's answer about the signer's balance, not an
// outage: retrying cannot help until the signer is funded.
func fundsInvalid(funds *txm.InsufficientFundsError) error {
	v := &txm.ValidationError{}
	if funds.Have != nil && funds.Want != nil {
		v.Add("value", "the signer's balance is %s wei; the transaction needs %s wei", funds.Have, funds.Want)
	} else {
		v.Add("value", "the signer's balance cannot pay for the value and gas")
	}
	return v
}

// checkTxFee refuses a request whose own fee, at its gas limit, with its L2
// data fee, is above the nodes' cap on a transaction's fee (nil: none): no
// node would take it, and waiting changes nothing. Fees chosen at signing
// are held under it.
func checkTxFee(r *txm.Request, txFeeCap *big.Int) error {
	if txFeeCap == nil {
		return nil
	}
	field, fee := "maxFeePerGas", r.MaxFeePerGas
	if fee == nil {
		field, fee = "gasPrice", r.GasPrice
	}
	if fee == nil {
		return nil
	}
	total := new(big.Int).Mul(fee, new(big.Int).SetUint64(r.Gas()))
	if r.DataFee == nil || r.DataFee.Sign() == 0 {
		if total.Cmp(txFeeCap) > 0 {
			v := &txm.ValidationError{}
			v.Add(field, "at a gas limit of %d the fee can reach %s wei, above the nodes' cap of %s wei on a transaction's fee; no node would take it",
				r.Gas(), total, txFeeCap)
			return v
		}
		return nil
	}
	if total.Add(total, r.DataFee); total.Cmp(txFeeCap) > 0 {
		v := &txm.ValidationError{}
		v.Add(field, "at a gas limit of %d the fee can reach %s wei, an L1 data fee of %s wei included, above the nodes' cap of %s wei on a transaction's fee; no node would take it",
			r.Gas(), total, r.DataFee, txFeeCap)
		return v
	}
	return nil
}

// resolveFor is txm.Resolve for the caller who: another principal's
// transaction under the same request id is a conflict that names nothing of
// it.
func resolveFor(who txm.Principal, existing *txm.Tx, fingerprint [32]byte) txm.Created {
	if existing.Principal != "" && existing.Principal != who.ID {
		return txm.Created{Outcome: txm.OutcomeConflict}
	}
	return txm.Resolve(existing, fingerprint)
}

// ValidateRequest checks a decoded request against the configuration: the
// chain and signer are configured, a route it names is one of the chain's, sizes and fees within the caps, a given
// gas limit at least the transaction's intrinsic gas, the request id and
// metadata storable (no request can fail the batch it is allocated in).
// Field names are the wire names.
func ValidateRequest(r *txm.Request, cfg config.Create) error {
	v := &txm.ValidationError{}
	if !cfg.HasChain(r.ChainID) {
		v.Add("chainId", "chain %d is not configured", r.ChainID)
	}
	if _, ok := cfg.Signer(r.From); !ok {
		v.Add("from", "%s is not a configured signer", txm.CanonicalAddress(r.From))
	}
	if r.SendVia != "" && cfg.HasChain(r.ChainID) && !slices.Contains(cfg.SendVia[r.ChainID], r.SendVia) {
		// The routes are named, never their URLs.
		v.Add("sendVia", "%q is not a route of chain %d: name one of %s", r.SendVia, r.ChainID, quoteAll(cfg.SendVia[r.ChainID]))
	}
	if r.To == nil && len(r.Data) == 0 {
		v.Add("data", "a contract creation (no \"to\") needs init code")
	}
	if len(r.Data) > cfg.MaxDataBytes {
		v.Add("data", "%d bytes exceeds the limit of %d", len(r.Data), cfg.MaxDataBytes)
	}
	if r.GasLimit != 0 {
		intrinsic := txm.IntrinsicGas(r.Data, r.To == nil)
		switch {
		case r.GasLimit > cfg.MaxGasLimit:
			v.Add("gasLimit", "must be at most %d, got %d", cfg.MaxGasLimit, r.GasLimit)
		case r.GasLimit < intrinsic:
			v.Add("gasLimit", "%d is below the intrinsic gas of this transaction, %d (base cost and calldata); no node would accept it", r.GasLimit, intrinsic)
		}
	}
	for _, f := range []struct {
		name string
		v    *big.Int
	}{{"maxFeePerGas", r.MaxFeePerGas}, {"maxPriorityFeePerGas", r.MaxPriorityFeePerGas}, {"gasPrice", r.GasPrice}} {
		if f.v != nil && cfg.Fees.MaxFeeCap != nil && f.v.Cmp(cfg.Fees.MaxFeeCap) > 0 {
			v.Add(f.name, "%s wei exceeds the cap of %s wei", f.v, cfg.Fees.MaxFeeCap)
		}
	}
	if r.MaxFeePerGas != nil && r.MaxPriorityFeePerGas != nil && r.MaxPriorityFeePerGas.Cmp(r.MaxFeePerGas) > 0 {
		v.Add("maxPriorityFeePerGas", "must not exceed maxFeePerGas")
	}
	if r.GasPrice != nil && (r.MaxFeePerGas != nil || r.MaxPriorityFeePerGas != nil) {
		v.Add("gasPrice", "give either gasPrice (legacy) or the EIP-1559 fee fields, not both")
	}
	if len(r.RequestID) > 200 {
		v.Add("requestId", "must be at most 200 characters")
	} else if why := textProblem(r.RequestID); why != "" {
		v.Add("requestId", "%s", why)
	}
	if len(r.Metadata) > 16*1024 {
		v.Add("metadata", "must be at most 16 KiB")
	} else if len(r.Metadata) > 0 {
		if why := metadataProblem(r.Metadata); why != "" {
			v.Add("metadata", "%s", why)
		}
	}
	return v.Err()
}

// runBatch allocates one batch, which may hold several signers' requests,
// in one database transaction, and delivers every waiter's result.
func (c *CreateTx) runBatch(ctx context.Context, owner string, batch []*waiter, landed func()) {
	for _, w := range batch {
		w.wait.End()
	}
	// Answers are given once the batch is over and the dispatcher has
	// started what it made possible: a hot signer's next batch is on its way
	// before this one's requests are woken to write their responses.
	type answer struct {
		w   *waiter
		res result
	}
	var answers []answer
	var outbox []int64
	defer func() {
		landed()
		for _, a := range answers {
			c.metrics.Latency(ctx, txm.StageAllocation, time.Since(a.w.enqueued).Seconds())
			a.w.done <- a.res
		}
		// One submit prompt per signer and batch, published after everyone
		// has an answer, and deleted with the next calls' prompts.
		c.relay.PublishDeleteLater(ctx, outbox)
	}()
	deliver := func(w *waiter, res result) { answers = append(answers, answer{w, res}) }
	batch = c.simulateBatch(ctx, batch, func(w *waiter, err error) { deliver(w, result{err: err}) })
	var keys []signerKey
	groups := map[signerKey][]*waiter{}
	for _, w := range batch {
		if _, ok := groups[w.key]; !ok {
			keys = append(keys, w.key)
		}
		groups[w.key] = append(groups[w.key], w)
	}
	var members [][]*waiter
	var pending []*uint64
	started := time.Now() // before the chain is asked: a sync's freshness counts from here
	for _, key := range keys {
		ws := groups[key]
		p, err := c.chainPending(ctx, key)
		if err != nil {
			for _, w := range ws {
				deliver(w, result{err: err})
			}
			continue
		}
		members, pending = append(members, ws), append(pending, p)
	}
	if len(members) == 0 {
		return
	}
	results, ob, err := c.allocate(ctx, owner, members, pending)
	switch {
	case errors.Is(err, txm.ErrInvalid) && len(batch) > 1:
		// The database refused something validation let through: each
		// request alone, so that the one at fault fails by itself.
		c.log.WarnContext(ctx, "allocation batch refused by the database; allocating its requests one by one",
			slog.String(logging.KeyOwner, owner), slog.Int("size", len(batch)), slog.Any("error", err))
		for g, ws := range members {
			for _, w := range ws {
				res, ob, err := c.allocate(ctx, owner, [][]*waiter{{w}}, []*uint64{pending[g]})
				if err != nil {
					deliver(w, result{err: c.settle(ctx, w, err)})
					continue
				}
				deliver(w, result{created: res[0][0]})
				outbox = append(outbox, ob...)
			}
		}
		return
	case err != nil:
		c.log.WarnContext(ctx, "allocation batch failed", slog.String(logging.KeyOwner, owner), slog.Int("signers", len(members)),
			slog.Int("size", len(batch)), slog.Any("error", err))
		for _, ws := range members {
			for _, w := range ws {
				created, err := c.recover(ctx, w, err)
				deliver(w, result{created: created, err: err})
			}
		}
		return
	}
	outbox = ob
	allocated, waited := make([]signerKey, len(members)), make([]bool, len(members))
	for g, ws := range members {
		allocated[g], waited[g] = ws[0].key, len(results[g]) > 0 && results[g][0].Contended
	}
	c.dispatch.markContended(allocated, waited)
	for g, ws := range members {
		if pending[g] != nil { // this batch folded the chain's nonce in
			c.markSynced(ws[0].key, started.Add(c.cfg.NonceStateTimeout))
		}
		for i, res := range results[g] {
			deliver(ws[i], result{created: res}) // the store logs each allocation with its token
		}
	}
}

// allocate runs one allocation transaction for groups of waiters, one group
// per signer.
func (c *CreateTx) allocate(ctx context.Context, owner string, members [][]*waiter, pending []*uint64) ([][]txm.Created, []int64, error) {
	ctx, span := c.metrics.StartSpan(ctx, "create.allocate")
	defer span.End()
	if span.Recording() {
		// The leader's trace holds the transaction; the other requests'
		// traces are linked to it.
		size := 0
		for _, ws := range members {
			size += len(ws)
			for _, w := range ws {
				span.Link(w.ctx)
			}
		}
		span.SetInt("txfence.batch_size", size)
		span.SetInt("txfence.signers", len(members))
	}
	batches := make([]txm.AllocationBatch, len(members))
	for g, ws := range members {
		b := txm.AllocationBatch{ChainID: ws[0].key.chainID, Signer: ws[0].key.signer, Owner: owner, ChainPending: pending[g],
			Requests: make([]*txm.Request, len(ws)), TxIDs: make([]string, len(ws))}
		for i, w := range ws {
			b.Requests[i], b.TxIDs[i] = w.req, w.txID
			for p, pol := range w.caps {
				if b.Caps == nil {
					b.Caps = map[string]txm.Policy{}
				}
				b.Caps[p] = pol
			}
		}
		batches[g] = b
	}
	return c.store.Allocate(ctx, batches)
}

// settle is the error a request that failed alone gets: a database refusal
// of its values is the caller's bad input (422), told without the
// database's words.
func (c *CreateTx) settle(ctx context.Context, w *waiter, err error) error {
	if !errors.Is(err, txm.ErrInvalid) {
		_, err = c.recover(ctx, w, err)
		return err
	}
	v := &txm.ValidationError{}
	v.Add("", "the request's values were refused by the database; check data and metadata")
	return v
}

// recover answers a waiter whose batch failed: when the failure came at
// COMMIT (ErrOutcomeUnknown), the request id tells what really happened;
// when that cannot be read, the outcome stays unknown and the caller retries
// with the request id. Other failures wrote nothing.
func (c *CreateTx) recover(ctx context.Context, w *waiter, err error) (txm.Created, error) {
	if !errors.Is(err, txm.ErrOutcomeUnknown) {
		return txm.Created{}, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
	defer cancel()
	for {
		existing, ferr := c.store.FindByRequestID(rctx, w.req.ChainID, w.req.From, w.req.RequestID)
		switch {
		case ferr == nil && w.req.Approved && existing.State == txm.StatePendingApproval:
			// An approved request's row exists before its allocation: it
			// still waits, so the allocation did not commit.
			return txm.Created{}, fmt.Errorf("%w: the commit did not happen", txm.ErrUnavailable)
		case ferr == nil && existing.ID == w.txID:
			return txm.Created{Outcome: txm.OutcomeCreated, Tx: existing}, nil // it committed
		case ferr == nil:
			return txm.Resolve(existing, w.req.Fingerprint()), nil
		case errors.Is(ferr, txm.ErrNotFound):
			return txm.Created{}, fmt.Errorf("%w: the commit did not happen", txm.ErrUnavailable) // nothing written
		}
		select {
		case <-rctx.Done():
			return txm.Created{}, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// recoverTimeout bounds how long a request whose commit went unanswered
// tries to read its outcome back.
const recoverTimeout = 3 * time.Second

// chainPending asks the chain for the signer's pending nonce when the
// shared cursor's sync is stale (or absent); nil when the cursor is trusted.
func (c *CreateTx) chainPending(ctx context.Context, key signerKey) (*uint64, error) {
	now := time.Now()
	if c.freshUntil(key).After(now) {
		return nil, nil
	}
	cur, err := c.store.CursorState(ctx, key.chainID, key.signer)
	if err != nil {
		return nil, err
	}
	if !cur.NeedsChainSync(c.cfg.NonceStateTimeout) {
		c.markSynced(key, now.Add(c.cfg.NonceStateTimeout-cur.SyncAge))
		return nil, nil
	}
	pctx, span := c.metrics.StartClientSpan(ctx, "chain.pending_nonce")
	n, err := c.chains[key.chainID].PendingNonce(pctx, key.signer)
	span.End()
	if err != nil {
		return nil, fmt.Errorf("%w: pending nonce: %w", ErrChainUnavailable, err)
	}
	return &n, nil
}

func (c *CreateTx) freshUntil(key signerKey) time.Time {
	c.syncedMu.Lock()
	defer c.syncedMu.Unlock()
	return c.synced[key]
}

// markSynced records that key's cursor sync is fresh until until (later
// knowledge only ever extends it).
func (c *CreateTx) markSynced(key signerKey, until time.Time) {
	c.syncedMu.Lock()
	defer c.syncedMu.Unlock()
	if until.After(c.synced[key]) {
		c.synced[key] = until
	}
}

// quoteAll is names quoted and joined with ", ".
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
