package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// violations found so far; see run.violation.
type violations struct {
	mu    sync.Mutex
	list  []string
	byKey map[string]int // by invariant, for the summary
}

// violation records a broken invariant. The first words of the message
// (up to the first colon) name it in the summary.
func (r *run) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.viol.mu.Lock()
	defer r.viol.mu.Unlock()
	if r.viol.byKey == nil {
		r.viol.byKey = map[string]int{}
	}
	r.viol.list = append(r.viol.list, msg)
	key, _, _ := strings.Cut(msg, ":")
	r.viol.byKey[invariantOf(key)]++
	if len(r.viol.list) <= r.cfg.MaxReported {
		r.out.printf("violation: %s", msg)
	} else if len(r.viol.list) == r.cfg.MaxReported+1 {
		r.out.printf("violation: ... (more are counted, not printed)")
	}
}

// invariantOf names the invariant a violation's key belongs to.
func invariantOf(key string) string {
	switch {
	case strings.HasPrefix(key, "create "):
		return "create"
	default:
		return key
	}
}

// row is one managed_tx row, as the checks need it.
type row struct {
	ID, Signer, State, SubState, LastError, RequestID string
	Nonce                                             int64
	ReceiptBlock                                      *string // receipt_block_hash
	ReceiptHash                                       *string // the hash of the attempt the receipt is for
	Attempts, Broadcasts, Reorgs                      int
}

// feedEntry is one item of the completions feed.
type feedEntry struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	TxID    string `json:"txId"`
	State   string `json:"state"`
	NewFork bool   `json:"newFork"`
	Version int64  `json:"version"`
}

// openRow is a transaction left open, with what the soak knows of it.
type openRow struct {
	row
	Kind, Phase string
}

// check reads every row and the whole feed and checks the invariants.
func (r *run) check(ctx context.Context) Result {
	var res Result
	r.phase.Store("checking")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rows, err := r.rows(ctx)
	if err != nil {
		r.violation("check: cannot read the rows: %v", err)
		res.Violations = r.violationCount()
		return res
	}
	res.Txs = len(rows)
	byID := make(map[string]*row, len(rows))
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}

	// One row per create, with its request id; no row the soak did not ask for.
	creates := r.creates.all()
	made := map[string]created{}
	for _, c := range creates {
		if c.TxID == "" {
			continue
		}
		made[c.TxID] = c
		switch rw := byID[c.TxID]; {
		case rw == nil:
			r.violation("one row per create: %s answered tx %s, which has no row", c.RequestID, c.TxID)
		case rw.RequestID != c.RequestID || !strings.EqualFold(rw.Signer, c.Signer.Hex()):
			r.violation("one row per create: tx %s has request id %q and signer %s, the create was %q from %s",
				c.TxID, rw.RequestID, rw.Signer, c.RequestID, c.Signer.Hex())
		}
	}
	for _, rw := range rows {
		if _, ok := made[rw.ID]; !ok {
			r.violation("one row per create: tx %s (request id %q) was not created by the soak", rw.ID, rw.RequestID)
		}
	}

	// Every transaction final, FAILED_FINAL with a reason.
	var open []openRow
	for _, rw := range rows {
		switch rw.State {
		case "CONFIRMED":
			res.Confirmed++
		case "FAILED_FINAL":
			res.Failed++
			if rw.SubState == "" {
				r.violation("failed with a reason: tx %s (nonce %d of %s) is FAILED_FINAL without a sub-state", rw.ID, rw.Nonce, rw.Signer)
			}
		default:
			res.Open++
			c := made[rw.ID]
			open = append(open, openRow{row: rw, Kind: c.Kind, Phase: c.Phase})
		}
	}

	r.checkNonces(rows)
	if outcomes, err := r.feed(ctx, "outcomes"); err != nil {
		r.violation("feed: cannot read the completions feed: %v", err)
	} else {
		r.checkFeed(rows, byID, outcomes)
		r.checkLifecycle(ctx, rows, byID, outcomes)
	}
	r.checkOnChain(ctx, rows)
	r.checkFailedNotMined(ctx)
	r.reportAttempts(ctx)
	r.reportOpen(ctx, open)
	res.Violations = r.violationCount()
	return res
}

func (r *run) violationCount() int {
	r.viol.mu.Lock()
	defer r.viol.mu.Unlock()
	return len(r.viol.list)
}

// rows reads every managed_tx row with the hash of its receipt's attempt.
func (r *run) rows(ctx context.Context) ([]row, error) {
	q, err := r.db.Query(ctx, `
SELECT t.id::text, t.signer, t.nonce, t.state, coalesce(t.sub_state, ''), coalesce(t.last_error, ''),
       coalesce(t.request_id, ''), t.receipt_block_hash, a.tx_hash,
       (SELECT count(*) FROM tx_attempt x WHERE x.tx_id = t.id), t.broadcast_count, t.reorg_count
FROM managed_tx t
LEFT JOIN tx_attempt a ON a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no
ORDER BY t.signer, t.nonce`)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	var out []row
	for q.Next() {
		var rw row
		if err := q.Scan(&rw.ID, &rw.Signer, &rw.Nonce, &rw.State, &rw.SubState, &rw.LastError, &rw.RequestID,
			&rw.ReceiptBlock, &rw.ReceiptHash, &rw.Attempts, &rw.Broadcasts, &rw.Reorgs); err != nil {
			return nil, err
		}
		out = append(out, rw)
	}
	return out, q.Err()
}

// checkNonces: the nonces of each signer are 0, 1, 2, ... with no gap and
// no duplicate (the chain is fresh and only txfence uses the signers' keys).
func (r *run) checkNonces(rows []row) {
	bySigner := map[string][]int64{}
	for _, rw := range rows {
		bySigner[rw.Signer] = append(bySigner[rw.Signer], rw.Nonce)
	}
	for signer, nonces := range bySigner {
		sort.Slice(nonces, func(i, j int) bool { return nonces[i] < nonces[j] })
		for i, n := range nonces {
			if n != int64(i) {
				r.violation("nonces contiguous: signer %s has %d transactions with nonces %d..%d; the %d-th is %d",
					signer, len(nonces), nonces[0], nonces[len(nonces)-1], i, n)
				break
			}
		}
	}
}

// checkFeed: one outcome per settled transaction plus newFork re-reports:
// its first entry is its first report, and every later entry carries
// newFork=true; the first carries newFork=false unless the transaction was
// reorged before it was first reported (a reorg sets newFork on the
// next event); its last entry's state is the row's state;
// entries in seq order, for known transactions.
func (r *run) checkFeed(rows []row, byID map[string]*row, feed []feedEntry) {
	byTx := map[string][]feedEntry{}
	for i, e := range feed {
		if i > 0 && e.Seq <= feed[i-1].Seq {
			r.violation("feed in seq order: seq %d follows %d", e.Seq, feed[i-1].Seq)
		}
		if byID[e.TxID] == nil {
			r.violation("feed of known transactions: seq %d reports tx %s, which has no row", e.Seq, e.TxID)
			continue
		}
		if want := eventType(e.State); e.Type != want {
			r.violation("feed event types: seq %d (tx %s) is a %s of state %s", e.Seq, e.TxID, e.Type, e.State)
		}
		byTx[e.TxID] = append(byTx[e.TxID], e)
	}
	for _, rw := range rows {
		entries := byTx[rw.ID]
		settled := rw.State == "CONFIRMED" || rw.State == "FAILED_FINAL"
		if len(entries) == 0 {
			if settled || rw.State == "STUCK" {
				r.violation("one outcome per transaction: tx %s (nonce %d of %s) is %s and has no entry in the feed", rw.ID, rw.Nonce, rw.Signer, rw.State)
			}
			continue
		}
		if first := entries[0]; first.NewFork && rw.Reorgs == 0 {
			r.violation("one outcome per transaction: tx %s was never reorged, yet its first report carries newFork (%s)",
				rw.ID, describe(entries))
		}
		for _, e := range entries[1:] {
			if !e.NewFork {
				r.violation("one outcome per transaction: tx %s: entry seq %d (%s) is a second report without newFork (%s)",
					rw.ID, e.Seq, e.State, describe(entries))
			}
		}
		if last := entries[len(entries)-1]; (settled || rw.State == "STUCK") && last.State != rw.State {
			r.violation("feed ends at the row's state: tx %s is %s but its last entry (seq %d) says %s (%s)",
				rw.ID, rw.State, last.Seq, last.State, describe(entries))
		}
	}
}

// checkLifecycle checks the lifecycle feed (events=lifecycle): every
// event of a known transaction, in seq order; each transaction's versions
// grow and start with its acceptance; it has a TxReorged event for each
// reorg its row counts; its last event's state is the row's once it is
// settled or STUCK; and the outcomes among the events are the outcomes
// feed's, seq for seq.
func (r *run) checkLifecycle(ctx context.Context, rows []row, byID map[string]*row, outcomes []feedEntry) {
	events, err := r.feed(ctx, "lifecycle")
	if err != nil {
		r.violation("lifecycle feed: cannot read it: %v", err)
		return
	}
	var seen []int64
	byTx := map[string][]feedEntry{}
	for i, e := range events {
		if i > 0 && e.Seq <= events[i-1].Seq {
			r.violation("lifecycle feed in seq order: seq %d follows %d", e.Seq, events[i-1].Seq)
		}
		if byID[e.TxID] == nil {
			r.violation("lifecycle feed of known transactions: seq %d names tx %s, which has no row", e.Seq, e.TxID)
			continue
		}
		if eventType(e.State) == e.Type {
			seen = append(seen, e.Seq)
		}
		byTx[e.TxID] = append(byTx[e.TxID], e)
	}
	want := make([]int64, len(outcomes))
	for i, e := range outcomes {
		want[i] = e.Seq
	}
	if !slices.Equal(seen, want) {
		r.violation("lifecycle feed's outcomes: %d outcomes among its events, the outcomes feed has %d", len(seen), len(want))
	}
	for _, rw := range rows {
		entries := byTx[rw.ID]
		if len(entries) == 0 {
			r.violation("lifecycle of every transaction: tx %s (%s) has no event", rw.ID, rw.State)
			continue
		}
		if first := entries[0].Type; first != "TxAccepted" && first != "TxPendingApproval" {
			r.violation("lifecycle starts with acceptance: tx %s starts with %s (%s)", rw.ID, first, describe(entries))
		}
		reorged := 0
		for i, e := range entries {
			if i > 0 && e.Version <= entries[i-1].Version {
				r.violation("lifecycle versions grow: tx %s: seq %d has version %d after %d (%s)",
					rw.ID, e.Seq, e.Version, entries[i-1].Version, describe(entries))
			}
			if e.Type == "TxReorged" {
				reorged++
			}
		}
		if reorged != rw.Reorgs {
			r.violation("lifecycle shows each reorg: tx %s was reorged %d times, %d TxReorged events (%s)",
				rw.ID, rw.Reorgs, reorged, describe(entries))
		}
		settled := rw.State == "CONFIRMED" || rw.State == "FAILED_FINAL" || rw.State == "STUCK"
		if last := entries[len(entries)-1]; settled && last.State != rw.State {
			r.violation("lifecycle ends at the row's state: tx %s is %s but its last event (seq %d) says %s (%s)",
				rw.ID, rw.State, last.Seq, last.State, describe(entries))
		}
	}
}

func eventType(state string) string {
	switch state {
	case "CONFIRMED":
		return "TxConfirmed"
	case "FAILED_FINAL":
		return "TxFailed"
	case "STUCK":
		return "TxStuck"
	}
	return "?"
}

func describe(entries []feedEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = fmt.Sprintf("%d:%s/%s/v%d/newFork=%v", e.Seq, e.Type, e.State, e.Version, e.NewFork)
	}
	return strings.Join(parts, " ")
}

// feed reads the whole completions feed through the API, a page at a
// time: the outcomes, or every event (events "lifecycle").
func (r *run) feed(ctx context.Context, events string) ([]feedEntry, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	var out []feedEntry
	after := int64(0)
	for {
		var page struct {
			Items []feedEntry `json:"items"`
			Next  int64       `json:"next"`
		}
		url := fmt.Sprintf("%s/Api/v1/completions?after=%d&limit=1000&events=%s", r.s.ServerURLs[0], after, events)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return out, err
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return out, fmt.Errorf("decode page after %d: %w", after, err)
		}
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("page after %d: status %d", after, resp.StatusCode)
		}
		out = append(out, page.Items...)
		if len(page.Items) == 0 {
			return out, nil
		}
		after = page.Next
	}
}

// checkOnChain: every CONFIRMED transaction's receipt is on the canonical
// chain, in the block the row names, with status 1.
func (r *run) checkOnChain(ctx context.Context, rows []row) {
	ec := r.s.Chain.Backend.Client()
	for _, rw := range rows {
		if rw.State != "CONFIRMED" {
			continue
		}
		if rw.ReceiptHash == nil || rw.ReceiptBlock == nil {
			r.violation("confirmed on chain: tx %s is CONFIRMED without a receipt attempt or block", rw.ID)
			continue
		}
		rc, err := ec.TransactionReceipt(ctx, common.HexToHash(*rw.ReceiptHash))
		if err != nil {
			r.violation("confirmed on chain: tx %s (%s): no receipt: %v", rw.ID, *rw.ReceiptHash, err)
			continue
		}
		if rc.Status != types.ReceiptStatusSuccessful || !strings.EqualFold(rc.BlockHash.Hex(), *rw.ReceiptBlock) {
			r.violation("confirmed on chain: tx %s: the chain has status %d in block %s, the row block %s",
				rw.ID, rc.Status, rc.BlockHash.Hex(), *rw.ReceiptBlock)
		}
	}
}

// checkFailedNotMined: no FAILED_FINAL transaction has an attempt that
// carries its payment (an original or a replacement) mined successfully on
// the canonical chain: a caller told it failed would send it again. (A
// cancel or placeholder attempt mined, or a receipt with status 0, is how
// a transaction fails.)
func (r *run) checkFailedNotMined(ctx context.Context) {
	q, err := r.db.Query(ctx, `
SELECT t.id::text, t.nonce, t.signer, coalesce(t.sub_state, ''), a.tx_hash
FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id
WHERE t.state = 'FAILED_FINAL' AND a.kind IN ('original', 'replace')`)
	if err != nil {
		r.violation("failed but not mined: cannot read the attempts: %v", err)
		return
	}
	type attempt struct {
		id, signer, sub, hash string
		nonce                 int64
	}
	var all []attempt
	for q.Next() {
		var a attempt
		if err := q.Scan(&a.id, &a.nonce, &a.signer, &a.sub, &a.hash); err != nil {
			q.Close()
			r.violation("failed but not mined: cannot read the attempts: %v", err)
			return
		}
		all = append(all, a)
	}
	q.Close()
	ec := r.s.Chain.Backend.Client()
	for _, a := range all {
		rc, err := ec.TransactionReceipt(ctx, common.HexToHash(a.hash))
		if err != nil || rc.Status != types.ReceiptStatusSuccessful {
			continue // not mined (ethereum.NotFound), or mined and failed
		}
		r.violation("failed but not mined: tx %s (nonce %d of %s) is FAILED_FINAL %s, but its attempt %s is mined in block %d",
			a.id, a.nonce, a.signer, a.sub, a.hash, rc.BlockNumber)
	}
}

// reportOpen prints the transactions left open, grouped, so that one can
// see which fault left them so: per signer the lowest open nonce (which
// holds up the others), then each open row, bounded.
func (r *run) reportOpen(ctx context.Context, open []openRow) {
	if len(open) == 0 {
		return
	}
	groups := map[string]int{}
	lowest := map[string]openRow{}
	for _, o := range open {
		groups[fmt.Sprintf("%s/%s (%s, created during %s)", o.State, orNone(o.SubState), o.Kind, o.Phase)]++
		if l, ok := lowest[o.Signer]; !ok || o.Nonce < l.Nonce {
			lowest[o.Signer] = o
		}
	}
	r.out.printf("soak: %d transactions left open:", len(open))
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.out.printf("  %5d %s", groups[k], k)
	}
	signers := make([]string, 0, len(lowest))
	for s := range lowest {
		signers = append(signers, s)
	}
	sort.Strings(signers)
	for _, s := range signers {
		o := lowest[s]
		r.out.printf("  signer %s: lowest open nonce %d is %s/%s (%s, created during %s, %d attempts, %d broadcasts): %s",
			s, o.Nonce, o.State, orNone(o.SubState), o.Kind, o.Phase, o.Attempts, o.Broadcasts, trim(o.LastError, 200))
		for _, h := range r.history(ctx, o.ID) {
			r.out.printf("      %s", h)
		}
	}
	for i, o := range open {
		if i == r.cfg.MaxReported {
			r.out.printf("open: ... %d more", len(open)-i)
			break
		}
		r.out.printf("open: tx %s nonce %d of %s: %s/%s (%s, created during %s): %s",
			o.ID, o.Nonce, o.Signer, o.State, orNone(o.SubState), o.Kind, o.Phase, trim(o.LastError, 160))
	}
}

// reportAttempts prints how many attempts of each kind were signed: a
// soak that settles without replacements shows the faults were outwaited,
// not resolved.
func (r *run) reportAttempts(ctx context.Context) {
	q, err := r.db.Query(ctx, `SELECT kind, count(*) FROM tx_attempt GROUP BY kind`)
	if err != nil {
		return
	}
	defer q.Close()
	kinds := map[string]int{}
	for q.Next() {
		var k string
		var n int
		if q.Scan(&k, &n) == nil {
			kinds[k] = n
		}
	}
	var reorged, rebroadcast int
	_ = r.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE reorg_count > 0), count(*) FILTER (WHERE broadcast_count > 1) FROM managed_tx`).Scan(&reorged, &rebroadcast)
	r.out.printf("soak: attempts by kind: %s; transactions reorged: %d, broadcast more than once: %d", formatCounts(kinds), reorged, rebroadcast)
	routes := r.s.Bridge.Stats().Routes
	for _, sub := range slices.Sorted(maps.Keys(routes)) {
		st := routes[sub]
		r.out.printf("soak: pushes on %s: %d delivered, %d retried, %d dead-lettered; answers %s", sub, st.Delivered, st.Retried,
			st.DeadLettered, formatCounts(answerCounts(st.Answers)))
	}
}

// answerCounts is a route's answers by class, for formatCounts.
func answerCounts(m map[string]uint64) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = int(v)
	}
	return out
}

// history is what happened to a transaction, oldest first, in seconds
// since the soak began: its state changes (tx_history) and its attempts.
func (r *run) history(ctx context.Context, txID string) []string {
	var out []string
	q, err := r.db.Query(ctx, `
SELECT created_at, coalesce(from_state, '-') || ' -> ' || to_state || coalesce(' ' || sub_state, '') ||
       coalesce(': ' || reason, '') || ' (' || owner || ')'
FROM tx_history WHERE tx_id = $1
UNION ALL
SELECT created_at, '- -> ALLOCATED: created (' || created_owner || ')'
FROM managed_tx WHERE id = $1 AND created_owner IS NOT NULL
UNION ALL
SELECT created_at, format('attempt %s (%s) signed, max fee %s, broadcast %s times%s', attempt_no, kind,
       coalesce(max_fee_per_gas::text, gas_price::text), broadcast_count, coalesce(', last error: ' || last_error, ''))
FROM tx_attempt WHERE tx_id = $1
ORDER BY 1`, txID)
	if err != nil {
		return []string{"history: " + err.Error()}
	}
	defer q.Close()
	for q.Next() {
		var at time.Time
		var what string
		if q.Scan(&at, &what) == nil {
			out = append(out, fmt.Sprintf("+%5.1fs %s", at.Sub(r.start).Seconds(), trim(what, 220)))
		}
	}
	return out
}

// report prints the faults injected and the violations by invariant.
func (r *run) report() {
	r.winMu.Lock()
	for _, w := range r.windows {
		r.out.printf("soak: fault %-18s at +%s: %s", w.name, w.start.Sub(r.start).Round(time.Second), w.detail)
	}
	r.winMu.Unlock()
	r.viol.mu.Lock()
	defer r.viol.mu.Unlock()
	keys := make([]string, 0, len(r.viol.byKey))
	for k := range r.viol.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.out.printf("soak: violations of %q: %d", k, r.viol.byKey[k])
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
