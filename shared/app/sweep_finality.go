package app

import (
	"cmp"
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
	"github.com/txfence/txfence/shared/metrics"
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
	cfg     config.Config
	metrics *metrics.Metrics
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
	cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*SweepFinality, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new sweep finality: store, leases and logger are required")
	}
	return &SweepFinality{store: store, leases: leases, chains: chains, relay: relay, cfg: cfg, metrics: m, log: log}, nil
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

// Run sweeps pass after pass for budget: the next pass starts as soon as a
// chain's head moved (asked every fifth of interval), and interval after
// the last one at the latest. A block can only complete a transaction's
// depth, show a receipt or replace a block when the head moves, and passes
// every interval found it up to an interval late. A pass does not wait for
// the signers it started: a signer still being swept (waiting for its
// lease behind a hot signer's drain, say) is left out of the next passes
// until it is done, and the other signers are swept again on time. Passes
// that waited for their slowest signer held every other signer's
// confirmations behind it (finality lag p99 of 7-8 s in bench-pipeline,
// most of it after the block was deep enough).
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

// number numbers the outcomes recorded pending (by this run's sweeps, or
// by writers that crashed after their commit) and relays their messages,
// once for each kick: a kick that comes while it numbers is one more
// round, so no write's outcomes wait for another write. It runs beside
// the signers' sweeps, after their leases were let go and in no worker
// slot: numbered inside each sweep's holding, after its commit, a write's
// numbering (86 ms at the median for the other signers' small writes,
// which queue for the feed's lock one by one) kept the signer's drain and
// its next confirmations waiting, and the other signers' sweeps waiting
// for the slot. Four alternate bench-pipeline runs, numbering inside and
// here: finality lag p99 1.72/1.65/1.12/1.87 s against 1.29/0.92/1.16/0.91
// s, confirmations more than 1 s late 462/186/175/282 against 97/1/175/2.
func (s *SweepFinality) number(ctx context.Context, sw *sweeps) {
	defer close(sw.numbered)
	for range sw.kicks {
		outbox, err := s.store.NumberCompletions(ctx)
		s.relay.Publish(ctx, outbox)
		// One cut short by the run's end is the next run's to finish.
		if err != nil && ctx.Err() == nil {
			sw.mu.Lock()
			sw.failed++
			sw.last = fmt.Errorf("number outcomes: %w", err)
			sw.mu.Unlock()
		}
	}
}

// kick asks the numberer to number (see number).
func (w *sweeps) kick() {
	select {
	case w.kicks <- struct{}{}:
	default: // one is waiting: it numbers these too
	}
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
// signer stays claimed and done returns that look to sweep again. Dropped,
// such a look waited for the pass at the next head, a block late: a hot
// signer's whole block confirmed 1,050 ms after its depth in
// bench-pipeline.
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

// chainView caches one pass's look at a chain, so that one pass sees one
// chain: the head and finalized block are read once, and each block height
// at most once. The pass's workers share it.
//
// A header is final only by what the node that gave it said in the same
// answer: each is kept with the block under tag (the head, or the
// finalized block) of that answer, so that a block read from a node behind
// or on another fork is never counted deep on the word of another node.
type chainView struct {
	chain     txm.Chain
	tag       string // "latest" or "finalized": the block a header's depth is counted from
	head      txm.Header
	finalized *txm.Header
	fetched   func([]*txm.Header) // remembers what load fetched for later passes

	mu      sync.Mutex // guards headers and under; held while missing ones are fetched
	headers map[uint64]*txm.Header
	under   map[uint64]uint64 // per height: the block under tag of the answer that gave its header
}

func (v *chainView) load(ctx context.Context, numbers []uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var missing []uint64
	asked := map[uint64]bool{}
	for _, n := range numbers {
		if _, ok := v.headers[n]; !ok && !asked[n] {
			asked[n] = true
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hs, tagged, err := v.chain.Blocks(ctx, missing, []string{v.tag})
	if err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	for i, n := range missing {
		v.headers[n] = hs[i]
		if hs[i] != nil && tagged[0] != nil {
			v.under[n] = tagged[0].Number
		}
	}
	if v.fetched != nil {
		v.fetched(hs)
	}
	return nil
}

// depthFrom is the block under the view's tag that header n was read
// with; false when there is none (the node had no finalized block).
func (v *chainView) depthFrom(n uint64) (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	top, ok := v.under[n]
	return top, ok
}

// canonKeep is how many heights below a chain's head canonCache keeps: more
// than a pass looks at in `confirmations` mode (the depth and some lag) or
// in `finalized` mode (two epochs on Ethereum).
const canonKeep = 1024

// canonCache keeps, per chain, the headers that passes read (each pass's
// head, and the blocks it fetched), so that a pass asks the node only for
// the heights it cannot prove canonical from its own head: a header is
// canonical when the chain of parent hashes from the head down reaches it,
// each link matching the cached header's hash. Under bench-pipeline's load
// a pass's one call for the blocks of every signer's MINED transactions
// took 120-380 ms (the node busy with broadcasts), and every confirmation
// of the pass waited for it; with the cache the steady state asks for the
// head alone. A reorg breaks a link, and the heights below it are fetched
// again, as before.
type canonCache struct {
	mu      sync.Mutex
	byChain map[uint64]map[uint64]txm.Header
}

// linked records head as chain id's and returns it with every cached
// header it proves canonical, by height.
func (c *canonCache) linked(id uint64, head txm.Header) map[uint64]*txm.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byChain == nil {
		c.byChain = map[uint64]map[uint64]txm.Header{}
	}
	known := c.byChain[id]
	if known == nil {
		known = map[uint64]txm.Header{}
		c.byChain[id] = known
	}
	out := map[uint64]*txm.Header{head.Number: &head}
	for h := head; h.Number > 0; {
		parent, ok := known[h.Number-1]
		if !ok || parent.Hash != h.ParentHash {
			break
		}
		out[parent.Number] = &parent
		h = parent
	}
	known[head.Number] = head
	if len(known) > canonKeep {
		for n := range known {
			if n+canonKeep/2 < head.Number {
				delete(known, n)
			}
		}
	}
	return out
}

// remember caches headers fetched for chain id (nil ones, heights the node
// does not have, are left out). Whether they are canonical is proven again
// by linked each time they are used.
func (c *canonCache) remember(id uint64, hs []*txm.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := c.byChain[id]
	if known == nil {
		return
	}
	for _, h := range hs {
		if h != nil {
			known[h.Number] = *h
		}
	}
}

// header is the canonical header at n: the head, one the cache proved
// from it, or one load fetched (nil: the node has no block there yet).
func (v *chainView) header(n uint64) *txm.Header {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.headers[n]
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

// view reads a chain's head (and finalized block) once for a pass, in one
// call, so that both come from one node.
func (s *SweepFinality) view(ctx context.Context, id uint64, chain txm.Chain) (*chainView, error) {
	v := &chainView{chain: chain, tag: "latest", fetched: func(hs []*txm.Header) { s.canon.remember(id, hs) }}
	tags := []string{"latest"}
	if s.cfg.FinalityMode == config.FinalityFinalized {
		v.tag = "finalized"
		tags = append(tags, "finalized")
	}
	_, tagged, err := chain.Blocks(ctx, nil, tags)
	switch {
	case err != nil:
		return nil, fmt.Errorf("head: %w", err)
	case tagged[0] == nil:
		return nil, errors.New("head: the node has no latest block")
	case len(tagged) > 1 && tagged[1] == nil:
		return nil, errors.New("finalized: the node has no finalized block")
	}
	v.head = *tagged[0]
	s.sawHead(id, v.head)
	v.headers = s.canon.linked(id, v.head)
	top := v.head.Number
	if len(tagged) > 1 {
		v.finalized = tagged[1]
		top = v.finalized.Number
	}
	v.under = make(map[uint64]uint64, len(v.headers))
	for n := range v.headers {
		v.under[n] = top
	}
	return v, nil
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
// first). That numbering ran first in each pass, and the pass's signers
// waited for it: when writes had just committed outcomes it queued for the
// feed's lock behind their numbering, and the relay waited for Pub/Sub
// (bench-pipeline: 25 ms a pass on average, p99 0.2-0.3 s, of the 0.16 s
// median from a new head to the signers' sweeps starting).
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
// and, when one is final or gone, written: a receipt lookup (the latest
// nonce, the receipts, their blocks) took 0.3-0.6 s under load, and the
// confirmations of transactions MINED long before waited for it. What the
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
	// too (a quarter of the time it was held under load).
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
		err = withChainLease(ctx, s.leases, key, owner, wantItFirst, s.cfg.Lease.RenewEvery, s.log, func(l txm.Lease, _ *leaseKeeper) error {
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
	err = withChainLease(ctx, s.leases, key, owner, wantItFirst, s.cfg.Lease.RenewEvery, s.log, func(l txm.Lease, _ *leaseKeeper) error {
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
		s.metrics.Latency(ctx, metrics.StageConfirmation, time.Since(f.CreatedAt).Seconds())
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
			s.metrics.Latency(ctx, metrics.StageConfirmation, time.Since(m.Tx.CreatedAt).Seconds())
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

// blockHeights lists the heights of the blocks.
func blockHeights(lists ...[]txm.Header) []uint64 {
	var heights []uint64
	for _, l := range lists {
		for _, b := range l {
			heights = append(heights, b.Number)
		}
	}
	return heights
}

// receiptHeights lists the receipt blocks of MINED transactions.
func receiptHeights(mined []txm.Tracked) []uint64 {
	heights := make([]uint64, 0, len(mined))
	for _, m := range mined {
		heights = append(heights, m.Tx.Receipt.BlockNumber)
	}
	return heights
}

// isFinal reports whether the view's header at block is final by the
// answer it was read with: deep enough below that answer's head, or at or
// below its finalized block.
func (s *SweepFinality) isFinal(view *chainView, block uint64) bool {
	top, ok := view.depthFrom(block)
	if !ok || top < block {
		return false
	}
	if s.cfg.FinalityMode == config.FinalityFinalized {
		return true
	}
	return top-block+1 >= s.cfg.Confirmations
}

// watch is how long reported outcomes stay watched: only in confirmations
// mode, since a finalized block does not reorg.
func (s *SweepFinality) watch() time.Duration {
	if s.cfg.FinalityMode == config.FinalityFinalized {
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

// finalHeader is the highest block that is final in this pass's view,
// with its hash; false when there is none yet (or the node has not got
// it).
func (s *SweepFinality) finalHeader(ctx context.Context, view *chainView) (txm.Header, bool, error) {
	if s.cfg.FinalityMode == config.FinalityFinalized {
		if view.finalized == nil {
			return txm.Header{}, false, nil
		}
		return *view.finalized, true, nil
	}
	if view.head.Number+1 < s.cfg.Confirmations {
		return txm.Header{}, false, nil
	}
	n := view.head.Number + 1 - s.cfg.Confirmations
	if err := view.load(ctx, []uint64{n}); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return txm.Header{}, false, err
	}
	h := view.header(n)
	if h == nil {
		return txm.Header{}, false, nil
	}
	return *h, true, nil
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
		if err := view.chain.SendRawTransaction(ctx, a.Raw); err != nil {
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
