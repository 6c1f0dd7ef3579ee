package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// Run sweeps pass after pass for budget: the next pass starts as soon as a
// chain's head moved (asked every fifth of interval), and interval after
// the last one at the latest. A block can only complete a transaction's
// depth, show a receipt or replace a block when the head moves, and passes
// every interval found it up to an interval late. A pass does not wait for
// the signers it started: a signer still being swept (waiting for its
// lease behind a hot signer's drain, say) is left out of the next passes
// until it is done, and the other signers are swept again on time, since a
// pass that waited for its slowest signer held every other signer's
// confirmations behind it.
func (s *SweepFinality) Run(ctx context.Context, budget, interval time.Duration) (PassStats, error) {
	// Once an invocation: a block stays listed a minute past the watch.
	if err := s.store.PruneReported(ctx, s.watch()); err != nil {
		s.log.WarnContext(ctx, "prune reported blocks", "err", err)
	}
	if _, err := s.CheckOutcomes(ctx); err != nil {
		s.log.WarnContext(ctx, "check outcomes", "err", err)
	}
	sw := s.sweeping(ctx)
	err := runPasses(ctx, budget, interval, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.launch(ctx, sw)
	}, func(struct{}) {}, s.untilHeadMoves(interval))
	st, serr := sw.wait()
	return st, errors.Join(err, serr)
}

// sweeps are the signer sweeps a Run or a Pass started: at most workers at
// once, and what they did; and their numberer, which numbers the outcomes
// they recorded into the completion feed (see number).
type sweeps struct {
	slots chan struct{}
	wg    sync.WaitGroup

	kicks    chan struct{} // asks the numberer to number; one waiting kick covers any number of writes
	numbered chan struct{} // closed when the numberer is done

	mu     sync.Mutex
	st     PassStats
	failed int
	last   error
}

func (s *SweepFinality) sweeping(ctx context.Context) *sweeps {
	sw := &sweeps{slots: make(chan struct{}, max(s.cfg.ReceiptWorkers, 1)), kicks: make(chan struct{}, 1), numbered: make(chan struct{})}
	go s.number(ctx, sw)
	return sw
}

// wait waits for every sweep started and for the numbering of what they
// recorded, and returns what they did, and the last failure with how many
// failed.
func (w *sweeps) wait() (PassStats, error) {
	w.wg.Wait()
	close(w.kicks)
	<-w.numbered
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last != nil {
		return w.st, fmt.Errorf("%d signer sweeps failed, the last: %w", w.failed, w.last)
	}
	return w.st, nil
}

// claim marks ref as being swept by this process; false if it already is.
func (s *SweepFinality) claim(ref txm.SignerRef) bool {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	if s.busy == nil {
		s.busy = map[txm.SignerRef]bool{}
	}
	if s.busy[ref] {
		return false
	}
	s.busy[ref] = true
	return true
}

// done ends the sweep that started from look, unless a pass skipped its
// signer with a higher head after the sweep last asked for a later look
// (while it let its lease go and relayed its messages, say): then the
// signer stays claimed and done returns that look to sweep again, because
// dropped, such a look waits for the pass at the next head, a block late.
func (s *SweepFinality) done(ctx context.Context, look signerLook) (signerLook, bool) {
	ref := look.work.SignerRef
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	later, ok := s.newer[ref]
	delete(s.newer, ref)
	if ok && ctx.Err() == nil && later.view.head.Number > look.view.head.Number {
		return later, true
	}
	delete(s.busy, ref)
	return look, false
}

// signerLook is one pass's look at a signer: the chain as the pass saw it
// and the signer's work as the pass read it.
type signerLook struct {
	view *chainView
	work txm.SignerWork
}

// passed records the look of a pass that skipped ref because this process
// is still sweeping it, for that sweep to write what it calls for.
func (s *SweepFinality) passed(look signerLook) {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	if s.newer == nil {
		s.newer = map[txm.SignerRef]signerLook{}
	}
	s.newer[look.work.SignerRef] = look
}

// later returns a later pass's look at the signer of look, when one
// skipped the signer (see passed) with its chain's head higher than look's.
// A hot signer's sweep often outlasts the next pass or two (it waits for
// its lease behind the drain's batch in progress, then writes hundreds of
// rows), and the passes meanwhile skip the signer: the blocks they saw
// final waited for the pass after the sweep, a second or more of finality
// lag. The sweep writes them too, in the same holding of its lease. A later
// look's view holds the headers of every block in its work (its pass loaded
// them for all its signers before starting any).
func (s *SweepFinality) later(look signerLook) (signerLook, bool) {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	later, ok := s.newer[look.work.SignerRef]
	if !ok {
		return look, false
	}
	delete(s.newer, look.work.SignerRef)
	if later.view.head.Number <= look.view.head.Number {
		return look, false
	}
	return later, true
}

// headPoll is how often a finality sweep asks its chains for their head
// between passes: a fifth of the interval (one small call per chain each
// time; 100 ms on the local stack, 400 ms by default), within bounds, so
// that a head that moved is seen within a fifth of the interval and a
// hosted node is not asked more than a few times per pass.
func headPoll(interval time.Duration) time.Duration {
	return min(max(interval/5, 10*time.Millisecond), time.Second)
}

// untilHeadMoves is Run's pause between passes: until a chain's head
// differs from the one last seen (or a head is seen for the first time),
// or interval.
func (s *SweepFinality) untilHeadMoves(interval time.Duration) func(context.Context) {
	poll := headPoll(interval)
	return func(ctx context.Context) {
		deadline := time.Now().Add(interval)
		for {
			wait := min(poll, time.Until(deadline))
			if wait <= 0 {
				return
			}
			sleep(wait)(ctx)
			if ctx.Err() != nil || s.headMoved(ctx, max(poll, 200*time.Millisecond)) {
				return
			}
		}
	}
}

// headMoved asks each chain for its head (each within timeout) and reports
// whether one moved since it was last seen. A chain that does not answer in
// time counts as not moved: the pass at the interval reports it.
func (s *SweepFinality) headMoved(ctx context.Context, timeout time.Duration) bool {
	moved := false
	for id, chain := range s.chains {
		hctx, cancel := context.WithTimeout(ctx, timeout)
		h, err := chain.Head(hctx)
		cancel()
		if err == nil && s.sawHead(id, h) {
			moved = true
		}
	}
	return moved
}

// sawHead records h as chain id's head and reports whether it differs from
// the one seen before.
func (s *SweepFinality) sawHead(id uint64, h txm.Header) bool {
	s.headsMu.Lock()
	defer s.headsMu.Unlock()
	if s.heads == nil {
		s.heads = map[uint64]txm.Header{}
	}
	last, seen := s.heads[id]
	s.heads[id] = h
	return !seen || last != h
}

// Pass sweeps every signer with work once, TXFENCE_RECEIPT_WORKERS signers
// at a time, and returns when they are done: each signer's work is a few
// round trips to the database and the node, so one after another a pass
// over a hundred signers took longer than a block. Signers whose lease is
// held elsewhere, or that another sweep of this process is sweeping, are
// skipped this pass (that sweep gets the pass's look: see later); an RPC
// failure for one chain skips that chain and is returned after the others
// were swept.
func (s *SweepFinality) Pass(ctx context.Context) (PassStats, error) {
	sw := s.sweeping(ctx)
	err := s.launch(ctx, sw)
	st, serr := sw.wait()
	return st, errors.Join(err, serr)
}

// launch starts a sweep, in sw, of every signer with work that this process
// is not sweeping yet, and returns once each has started (a worker slot
// free). It reads the signers and each chain's head and blocks once for
// all of them. What fails before a signer's sweep starts is returned.
// Once they have started it asks the numberer to number what was left
// pending (by writers that crashed after their commit, or a run that ended
// first) last, so that the pass's signers do not wait for the feed's lock
// or for Pub/Sub before their sweeps start.
func (s *SweepFinality) launch(ctx context.Context, sw *sweeps) error {
	defer sw.kick()
	found, err := s.store.SignersWithWork(ctx, s.cfg.StaleReceiptTimeout, s.watch())
	if err != nil {
		return err
	}
	views := map[uint64]*chainView{}
	var errs []error
	// viewOf is the pass's view of chain id, read once (nil: the chain is
	// not served here, or its head could not be read, and is skipped).
	viewOf := func(id uint64) *chainView {
		if view, seen := views[id]; seen {
			return view
		}
		var view *chainView
		if chain, ok := s.chains[id]; ok {
			var err error
			if view, err = s.view(ctx, id, chain); err != nil {
				s.metrics.ReceiptCheck(ctx, "rpc_error")
				errs = append(errs, fmt.Errorf("chain %d %w", id, err))
			}
		}
		views[id] = view
		return view
	}
	work := make([]txm.SignerWork, 0, len(found.Signers))
	for _, ref := range found.Signers {
		if viewOf(ref.ChainID) != nil {
			work = append(work, ref)
		}
	}
	// Every block the signers' looks and the reported outcomes need, in one
	// call per chain: a failure here is left to each signer's own load,
	// which asks again for what is missing and reports it.
	byChain := map[uint64][]uint64{}
	for _, w := range work {
		byChain[w.ChainID] = append(byChain[w.ChainID], blockHeights(w.MinedBlocks)...)
	}
	for id, blocks := range found.Reported {
		if viewOf(id) != nil {
			byChain[id] = append(byChain[id], blockHeights(blocks)...)
		}
	}
	for id, heights := range byChain {
		if len(heights) > 0 {
			_ = views[id].load(ctx, heights)
		}
	}
	work, err = s.reopening(ctx, views, found.Reported, work)
	if err != nil {
		errs = append(errs, err)
	}
	s.mostReadyFirst(views, work)
	for _, ref := range work {
		if !s.claim(ref.SignerRef) {
			s.passed(signerLook{view: views[ref.ChainID], work: ref})
			sw.mu.Lock()
			sw.st.Skipped++
			sw.mu.Unlock()
			continue
		}
		sw.slots <- struct{}{}
		sw.wg.Go(func() {
			defer func() { <-sw.slots }()
			for look, again := (signerLook{view: views[ref.ChainID], work: ref}), true; again; look, again = s.done(ctx, look) {
				one, err := s.sweepSigner(ctx, look.view, look.work)
				sw.record(ref.SignerRef, one, err)
				if h := s.hooks.AfterSweep; h != nil {
					h()
				}
			}
		})
	}
	return errors.Join(errs...)
}

// record adds one signer sweep's stats and failure to w's.
func (w *sweeps) record(ref txm.SignerRef, one PassStats, err error) {
	if one.Confirmed+one.Failed > 0 || err != nil {
		w.kick() // an outcome may have been recorded before the failure
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st.add(one)
	switch {
	case errors.Is(err, ErrNoLease):
		w.st.Skipped++
	case err != nil:
		w.failed++
		w.last = fmt.Errorf("signer %s: %w", txm.CanonicalAddress(ref.Signer), err)
	}
}

// minedIn is how many of w's MINED transactions its i-th block holds.
func minedIn(w txm.SignerWork, i int) int {
	if i < len(w.MinedCounts) {
		return w.MinedCounts[i]
	}
	return 1
}

// mostReadyFirst orders work so that the signers with the most
// transactions to end now (MINED in blocks that are final, or that left
// the chain) are swept first, the others after in their order. A pass
// sweeps ReceiptWorkers signers at once, and under load every signer had
// a final block in each pass: in (chain, signer) order a hot signer, with
// more than half of the pass's confirmations, waited for a free worker
// behind up to a hundred signers with one each.
func (s *SweepFinality) mostReadyFirst(views map[uint64]*chainView, work []txm.SignerWork) {
	ready := make(map[txm.SignerRef]int, len(work))
	for _, w := range work {
		view := views[w.ChainID]
		n := 0
		for i, b := range w.MinedBlocks {
			h := view.header(b.Number)
			if h != nil && (h.Hash != b.Hash || s.isFinal(view, b.Number)) {
				n += minedIn(w, i)
			}
		}
		ready[w.SignerRef] = n
	}
	slices.SortStableFunc(work, func(a, b txm.SignerWork) int { return cmp.Compare(ready[b.SignerRef], ready[a.SignerRef]) })
}
