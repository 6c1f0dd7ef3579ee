package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// SweepFinality is the FinalitySweep function's use case. Each pass looks at
// every signer with MINED transactions (or TRACKING ones whose receipt check
// went stale) and, under the signer's chain lease, checks each receipt block
// against the canonical chain: gone or replaced means a reorg (back to
// TRACKING, the attempt rebroadcast if the node no longer has it); deep
// enough (or at or below `finalized`) means CONFIRMED, or FAILED_FINAL for a
// failed receipt, reported with a completion.
type SweepFinality struct {
	store   txm.ReceiptStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	relay   *Relay
	cfg     config.Finality
	metrics txm.Recorder
	log     *slog.Logger
	hooks   SweepHooks

	busyMu sync.Mutex
	busy   map[txm.SignerRef]bool       // signers being swept in this process
	newer  map[txm.SignerRef]signerLook // a later pass's look at a signer being swept (see later)

	headsMu sync.Mutex
	heads   map[uint64]txm.Header // each chain's head as last seen (by a pass or between passes)

	canon canonCache // headers earlier passes read, by chain

	reported contradictions // outcomes found contradicted, so that each is reported once
}

// SweepHooks let tests stop a sweep at a chosen point. Production leaves
// them nil.
type SweepHooks struct {
	// BeforeWrite runs for each signer after its mined transactions and
	// their blocks were read, before anything is written.
	BeforeWrite func()
	// AfterSweep runs for each signer's sweep once it is over (its lease
	// let go), before the signer is let go for the next passes.
	AfterSweep func()
}

// SetHooks installs test hooks.
func (s *SweepFinality) SetHooks(h SweepHooks) { s.hooks = h }

// NewSweepFinality returns the use case. relay may be nil.
func NewSweepFinality(store txm.ReceiptStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, relay *Relay,
	cfg config.Finality, m txm.Recorder, log *slog.Logger) (*SweepFinality, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new sweep finality: store, leases and logger are required")
	}
	return &SweepFinality{store: store, leases: leases, chains: chains, relay: relay, cfg: cfg, metrics: recorderOr(m), log: log}, nil
}

// PassStats says what one pass did.
type PassStats struct {
	Signers, Skipped, Mined, Confirmed, Failed, Reorged, Rebroadcast int
}

func (p *PassStats) add(o PassStats) {
	p.Signers += o.Signers
	p.Skipped += o.Skipped
	p.Mined += o.Mined
	p.Confirmed += o.Confirmed
	p.Failed += o.Failed
	p.Reorged += o.Reorged
	p.Rebroadcast += o.Rebroadcast
}

// reopening adds to work the signers with outcomes reported in a block
// that is no longer canonical in its chain's view (a reorg deeper than the
// confirmation depth), with those blocks to re-check. A block the node
// does not have (a node behind) is not a reorg.
func (s *SweepFinality) reopening(ctx context.Context, views map[uint64]*chainView, reported map[uint64][]txm.Header,
	work []txm.SignerWork) ([]txm.SignerWork, error) {
	var errs []error
	for id, blocks := range reported {
		view := views[id]
		if view == nil {
			continue
		}
		// The pass loaded them; this asks again only for what it failed to.
		if err := view.load(ctx, blockHeights(blocks)); err != nil {
			s.metrics.ReceiptCheck(ctx, "rpc_error")
			errs = append(errs, fmt.Errorf("chain %d reported blocks: %w", id, err))
			continue
		}
		var gone []txm.Header
		for _, b := range blocks {
			if h := view.header(b.Number); h != nil && h.Hash != b.Hash {
				gone = append(gone, b)
			}
		}
		signers, err := s.store.ReportedIn(ctx, id, gone, s.watch())
		if err != nil {
			errs = append(errs, fmt.Errorf("chain %d: %w", id, err))
			continue
		}
		for _, r := range signers {
			i := slices.IndexFunc(work, func(w txm.SignerWork) bool { return w.SignerRef == r.SignerRef })
			if i < 0 {
				work = append(work, r)
				continue
			}
			work[i].Reported, work[i].ReportedBlocks = true, r.ReportedBlocks
		}
	}
	return work, errors.Join(errs...)
}

// sweepSigner looks without the signer's chain lease (the receipts of its
// stale transactions, the blocks of its MINED and reported ones) and takes
// the lease only when there is something to write. Under the lease it read
// all of it, a hot signer's hundreds of receipts included, while the drain
// and the Receipt function waited; and it took every signer's lease every
// pass, mostly to find nothing. The writes are decided again under the
// lease, from the database as it is then; only the receipts found before
// it are carried in (MarkMined writes only what is still TRACKING).
//
// The receipts are looked up while the blocks already known are judged
// and, when one is final or gone, written, because a receipt lookup (the
// latest nonce, the receipts, their blocks) is slow under load and the
// confirmations of transactions MINED long before need not wait for it. What the
// lookup found is written in the same holding of the lease when it is
// done by then, otherwise in a second one.
func (s *SweepFinality) sweepSigner(ctx context.Context, view *chainView, work txm.SignerWork) (PassStats, error) {
	st := PassStats{Signers: 1}
	ref := work.SignerRef
	var look finalityLook
	var lookErr error
	looked := make(chan struct{})
	if work.Stale {
		go func() {
			defer close(looked)
			lookErr = s.lookForReceipts(ctx, view, ref, &look)
		}()
	} else {
		close(looked)
	}
	blocksWork, err := s.lookAtBlocks(ctx, view, work.ReportedBlocks, work.MinedBlocks)
	if err != nil {
		<-looked
		return st, err
	}
	key := txm.LeaseKey{ChainID: ref.ChainID, Signer: ref.Signer, Scope: txm.ScopeChain}
	owner := s.cfg.InstanceID + "/finality/" + uuid.NewString()
	// The outbox rows written under the lease are relayed once it is let
	// go: a drain or receipt check waiting for it need not wait for Pub/Sub
	// too.
	var relayed []int64
	defer func() { s.relay.Publish(ctx, relayed) }()
	receipts := func(l txm.Lease) error {
		if lookErr != nil || !look.work {
			return lookErr
		}
		ids, err := s.writeReceipts(ctx, l, view, ref, look, &st)
		relayed = append(relayed, ids...)
		return err
	}
	// blocks writes what look's blocks call for (reorgs, final outcomes),
	// then what the later looks that came meanwhile call for (see later).
	mine := signerLook{view: view, work: work}
	blocks := func(l txm.Lease, look signerLook) error {
		for {
			if err := s.checkReported(ctx, l, look.view, look.work.ReportedBlocks, &st); err != nil {
				return err
			}
			if err := s.finalize(ctx, l, look.view, ref, look.work.MinedBlocks, nil, &st); err != nil {
				return err
			}
			next, ok := s.later(look)
			if !ok {
				return nil
			}
			look = next
		}
	}
	lookDone := false
	if blocksWork {
		err = withChainLease(ctx, s.leases, key, owner, wantItFirst, s.cfg.RenewEvery, s.log, func(l txm.Lease, _ *leaseKeeper) error {
			if later, ok := s.later(mine); ok {
				mine = later
			}
			if err := blocks(l, mine); err != nil {
				return err
			}
			select {
			case <-looked:
				lookDone = true
				return receipts(l)
			default:
				return nil
			}
		})
		if err != nil || lookDone {
			<-looked
			return st, err
		}
	}
	<-looked
	if lookErr != nil || !look.work {
		return st, lookErr
	}
	err = withChainLease(ctx, s.leases, key, owner, wantItFirst, s.cfg.RenewEvery, s.log, func(l txm.Lease, _ *leaseKeeper) error {
		if err := receipts(l); err != nil {
			return err
		}
		if later, ok := s.later(mine); ok {
			return blocks(l, later)
		}
		return nil
	})
	return st, err
}

// writeReceipts writes what a receipt lookup found, under l: the receipts
// (MINED), the stale transactions whose nonce another took, and the final
// outcomes of those whose block is already final.
func (s *SweepFinality) writeReceipts(ctx context.Context, l txm.Lease, view *chainView, ref txm.SignerRef, look finalityLook,
	st *PassStats) ([]int64, error) {
	var relayed []int64
	if len(look.found) > 0 {
		ids, err := s.store.MarkMined(ctx, l, look.found)
		if err != nil {
			return nil, err
		}
		recordReceiptLatency(ctx, s.metrics, look.stale, look.found)
		relayed = append(relayed, ids...)
		st.Mined = len(look.found)
	}
	if len(look.stale) > 0 {
		ids, err := s.consumedExternally(ctx, l, view, ref, look.stale, look.found, look.latest, st)
		relayed = append(relayed, ids...)
		if err != nil {
			return relayed, err
		}
	}
	return relayed, s.finalize(ctx, l, view, ref, nil, look.found, st)
}

// finalize ends what is MINED in the final blocks among mined (the known
// receipt blocks) and those of found (receipts just written), by the
// blocks alone; when one of the known blocks left the chain it reads and
// settles each MINED transaction (finalizeMined).
func (s *SweepFinality) finalize(ctx context.Context, l txm.Lease, view *chainView, ref txm.SignerRef, mined []txm.Header,
	found []txm.Mined, st *PassStats) error {
	blocks, reorg := s.finalBlocks(view, mined, found)
	if reorg {
		return s.finalizeMined(ctx, l, view, ref, st)
	}
	if len(blocks) == 0 {
		return nil
	}
	if s.hooks.BeforeWrite != nil {
		s.hooks.BeforeWrite()
	}
	final, err := s.store.FinalizeBlocks(ctx, l, blocks)
	for _, f := range final {
		if f.State == txm.StateConfirmed {
			st.Confirmed++
		} else {
			st.Failed++
		}
		s.metrics.Latency(ctx, txm.StageConfirmation, time.Since(f.CreatedAt).Seconds())
	}
	return err
}

// finalBlocks lists the canonical blocks, among the receipt blocks of the
// signer's MINED transactions the pass read and of the receipts its look
// found, that are final in view: FinalizeBlocks ends what is MINED in them
// by the blocks alone, without reading the transactions under the lease.
// It reports a reorg when one of the MINED transactions' blocks is no longer
// canonical: then finalizeMined reads and settles each one. A block the
// node does not have yet (a lagging node) waits.
func (s *SweepFinality) finalBlocks(view *chainView, mined []txm.Header, found []txm.Mined) (blocks []txm.Header, reorg bool) {
	seen := map[txm.Header]bool{}
	consider := func(b txm.Header) bool {
		if seen[b] {
			return false
		}
		seen[b] = true
		h := view.header(b.Number)
		switch {
		case h == nil:
		case h.Hash != b.Hash:
			return true
		case s.isFinal(view, b.Number):
			blocks = append(blocks, b)
		}
		return false
	}
	for _, b := range mined {
		if consider(b) {
			reorg = true
		}
	}
	for _, m := range found {
		// A receipt read since the pass's headers: a different hash is the
		// next pass's to judge.
		consider(txm.Header{Number: m.Receipt.BlockNumber, Hash: m.Receipt.BlockHash})
	}
	return blocks, reorg
}

// finalizeMined reads the signer's MINED transactions under its lease and
// settles each: back to TRACKING when its block left the chain, final when
// its block is final.
func (s *SweepFinality) finalizeMined(ctx context.Context, l txm.Lease, view *chainView, ref txm.SignerRef, st *PassStats) error {
	mined, err := s.store.MinedTxs(ctx, ref.ChainID, ref.Signer)
	if err != nil || len(mined) == 0 {
		return err
	}
	if err := view.load(ctx, receiptHeights(mined)); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return err
	}
	if s.hooks.BeforeWrite != nil {
		s.hooks.BeforeWrite()
	}
	var final []string
	for _, m := range mined {
		r := m.Tx.Receipt
		h := view.header(r.BlockNumber)
		if h == nil {
			// The node is behind (a lagging or load-balanced node): only a
			// different hash at the same height is a reorg (counted by
			// look).
			continue
		}
		if h.Hash != r.BlockHash {
			if err := s.reorged(ctx, l, view, m, h, st); err != nil {
				return err
			}
			continue
		}
		if s.isFinal(view, r.BlockNumber) {
			final = append(final, m.Tx.ID)
			if r.Status == 1 {
				st.Confirmed++
			} else {
				st.Failed++
			}
			s.metrics.Latency(ctx, txm.StageConfirmation, time.Since(m.Tx.CreatedAt).Seconds())
		}
	}
	return s.store.Finalize(ctx, l, final)
}

// finalityLook is what a receipt lookup of one signer found before taking
// its lease.
type finalityLook struct {
	latest uint64
	stale  []txm.Tracked // stale TRACKING/STUCK transactions below latest
	found  []txm.Mined   // receipts of stale ones
	work   bool          // something to write: receipts, or a stale one that may be ended
}

// lookForReceipts looks up the receipts of the signer's stale transactions
// below the chain's latest nonce.
func (s *SweepFinality) lookForReceipts(ctx context.Context, view *chainView, ref txm.SignerRef, look *finalityLook) error {
	var err error
	if look.latest, err = view.chain.LatestNonce(ctx, ref.Signer); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return fmt.Errorf("latest nonce: %w", err)
	}
	if look.stale, _, err = s.store.TrackingBelow(ctx, ref.ChainID, ref.Signer, look.latest, s.cfg.StaleReceiptTimeout); err != nil {
		return err
	}
	if len(look.stale) == 0 {
		return nil
	}
	if look.found, err = findReceipts(ctx, view.chain, look.stale, look.latest); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return err
	}
	// Their blocks, so that one already final is ended in the same hold of
	// the lease; without them it is the next pass's.
	heights := make([]uint64, len(look.found))
	for i, m := range look.found {
		heights[i] = m.Receipt.BlockNumber
	}
	if err := view.load(ctx, heights); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
	}
	// Receipts to write, or stale ones without a receipt whose nonce another
	// transaction may have taken.
	look.work = true
	return nil
}

// lookAtBlocks loads the headers of reported blocks and MINED transactions'
// receipt blocks (the pass loaded most of them already) and reports work
// when one is final or no longer canonical.
func (s *SweepFinality) lookAtBlocks(ctx context.Context, view *chainView, reported, mined []txm.Header) (bool, error) {
	heights := blockHeights(mined, reported)
	if len(heights) == 0 {
		return false, nil
	}
	if err := view.load(ctx, heights); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return false, err
	}
	work := false
	for _, b := range reported {
		if h := view.header(b.Number); h != nil && h.Hash != b.Hash {
			work = true
		}
	}
	for _, b := range mined {
		switch h := view.header(b.Number); {
		case h == nil:
			s.metrics.ReceiptCheck(ctx, "node_behind") // waiting for the node, not a reorg
		case h.Hash != b.Hash || s.isFinal(view, b.Number):
			work = true
		}
	}
	return work, nil
}

// watch is how long reported outcomes stay watched: only in confirmations
// mode, since a finalized block does not reorg.
func (s *SweepFinality) watch() time.Duration {
	if !s.cfg.WatchesReorgs() {
		return 0
	}
	return s.cfg.ReorgWatch
}

// checkReported re-checks the blocks of outcomes reported within the watch
// window (as the pass read them; one reported since is the next pass's); a
// block that left the canonical chain (a reorg deeper than the confirmation
// depth) reopens its transactions, whose next outcome then carries newFork.
// The reopening is guarded by the block, so one another sweep reopened
// meanwhile is left alone.
func (s *SweepFinality) checkReported(ctx context.Context, l txm.Lease, view *chainView, blocks []txm.Header, st *PassStats) error {
	if len(blocks) == 0 {
		return nil
	}
	if err := view.load(ctx, blockHeights(blocks)); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return err
	}
	for _, b := range blocks {
		h := view.header(b.Number)
		if h == nil || h.Hash == b.Hash {
			continue // the same block, or a node behind: not a reorg
		}
		detail := fmt.Sprintf("reported block %d %s is no longer canonical", b.Number, b.Hash.Hex())
		reopened, err := s.store.ReopenBlock(ctx, l, b, detail)
		if err != nil {
			return err
		}
		for _, t := range reopened {
			st.Reorged++
			s.metrics.Reorg(ctx)
			s.log.WarnContext(ctx, "deep reorg reopened a reported transaction", slog.String(logging.KeyTxID, t.Tx.ID),
				slog.String(logging.KeySigner, txm.CanonicalAddress(t.Tx.From)), slog.Uint64(logging.KeyNonce, t.Tx.Nonce),
				slog.String("detail", detail), slog.Int64(logging.KeyToken, l.Token))
			if err := s.rebroadcastLost(ctx, view, t, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// consumedExternally ends the stale transactions whose nonce another
// transaction took: below the signer's nonce at the finality depth, with no
// receipt for any of their attempts. They end FAILED_FINAL
// `nonce_consumed_externally`, reported TxFailed, and the signer's later
// nonces are not held up by them.
//
// That outcome rests on one node's answer, pinned to the final block by its
// hash (ProveNonce): the block, the signer's nonce at it, and the receipt
// of every attempt. A receipt found there is written (MINED), never failed;
// a node that cannot answer for the block leaves the decision to a later
// pass. It returns the outbox rows of what it wrote MINED.
func (s *SweepFinality) consumedExternally(ctx context.Context, l txm.Lease, view *chainView, ref txm.SignerRef,
	stale []txm.Tracked, found []txm.Mined, latest uint64, st *PassStats) ([]int64, error) {
	mined := map[string]bool{}
	for _, m := range found {
		mined[m.TxID] = true
	}
	var candidates []txm.Tracked
	var hashes []common.Hash
	for _, t := range stale {
		if t.Tx.Nonce < latest && !mined[t.Tx.ID] {
			candidates = append(candidates, t)
			for _, a := range t.Attempts {
				hashes = append(hashes, a.Hash)
			}
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	at, ok, err := s.finalHeader(ctx, view)
	if err != nil || !ok {
		return nil, err
	}
	proof, err := view.chain.ProveNonce(ctx, ref.Signer, at, hashes)
	if errors.Is(err, txm.ErrNodeBehind) {
		s.metrics.ReceiptCheck(ctx, "node_behind")
		s.log.DebugContext(ctx, "no endpoint could answer for the final block", slog.String(logging.KeySigner, txm.CanonicalAddress(ref.Signer)),
			slog.Uint64("block", at.Number), slog.Any("error", err))
		return nil, nil
	}
	if err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return nil, err
	}
	var late []txm.Mined
	var ids []string
	k := 0
	for _, t := range candidates {
		var receipt *txm.Mined
		for _, a := range t.Attempts {
			if r := proof.Receipts[k]; r != nil && receipt == nil {
				receipt = &txm.Mined{TxID: t.Tx.ID, AttemptNo: a.No, Receipt: *r}
			}
			k++
		}
		switch {
		case receipt != nil:
			late = append(late, *receipt)
		case t.Tx.Nonce < proof.Nonce:
			ids = append(ids, t.Tx.ID)
		}
	}
	var relayed []int64
	if len(late) > 0 {
		if relayed, err = s.store.MarkMined(ctx, l, late); err != nil {
			return nil, err
		}
		st.Mined += len(late)
	}
	if len(ids) == 0 {
		return relayed, nil
	}
	detail := fmt.Sprintf("another transaction of the signer took the nonce; final at block %d %s", at.Number, at.Hash.Hex())
	if err := s.store.ConsumedExternally(ctx, l, ids, detail); err != nil {
		return relayed, err
	}
	for _, id := range ids {
		st.Failed++
		s.metrics.ReceiptCheck(ctx, "nonce_consumed_externally")
		s.log.WarnContext(ctx, "nonce consumed outside txfence", slog.String(logging.KeyTxID, id),
			slog.String(logging.KeySigner, txm.CanonicalAddress(ref.Signer)), slog.Uint64("block", at.Number),
			slog.Int64(logging.KeyToken, l.Token))
	}
	return relayed, nil
}

// reorged handles a mined transaction whose receipt block is no longer
// canonical: back to TRACKING, and the attempt that was mined rebroadcast
// if the node no longer knows it.
func (s *SweepFinality) reorged(ctx context.Context, l txm.Lease, view *chainView, m txm.Tracked, canonical *txm.Header, st *PassStats) error {
	detail := fmt.Sprintf("block %d %s is no longer canonical", m.Tx.Receipt.BlockNumber, m.Tx.Receipt.BlockHash.Hex())
	if canonical != nil {
		detail += " (now " + canonical.Hash.Hex() + ")"
	}
	if err := s.store.Reorged(ctx, l, m.Tx.ID, detail); err != nil {
		return err
	}
	st.Reorged++
	s.metrics.Reorg(ctx)
	s.log.WarnContext(ctx, "reorg", slog.String(logging.KeyTxID, m.Tx.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(m.Tx.From)),
		slog.Uint64(logging.KeyNonce, m.Tx.Nonce), slog.String("detail", detail), slog.Int64(logging.KeyToken, l.Token))
	return s.rebroadcastLost(ctx, view, m, st)
}

// rebroadcastLost sends again every attempt of t the node no longer knows.
func (s *SweepFinality) rebroadcastLost(ctx context.Context, view *chainView, t txm.Tracked, st *PassStats) error {
	for _, a := range t.Attempts {
		known, err := view.chain.HasTransaction(ctx, a.Hash)
		if err != nil {
			return fmt.Errorf("has transaction: %w", err)
		}
		if known {
			continue
		}
		if err := sendVia(ctx, view.chain, a.Raw, t.Tx.SendVia); err != nil {
			r := txm.ReasonOf(err)
			if r != txm.ReasonKnown && r != txm.ReasonNonceTooLow {
				s.log.WarnContext(ctx, "rebroadcast after reorg", slog.String(logging.KeyTxID, t.Tx.ID), slog.Any("error", err))
			}
			continue
		}
		st.Rebroadcast++
	}
	return nil
}
