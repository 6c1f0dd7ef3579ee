package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// signerKey identifies one signer on one chain.
type signerKey struct {
	chainID uint64
	signer  common.Address
}

// waiter is one create request waiting for its allocation.
type waiter struct {
	req      *txm.Request
	txID     string                // the row's id if it is created
	caps     map[string]txm.Policy // rolling caps to pass
	sim      *simCheck             // not nil: simulate before allocating
	key      signerKey
	enqueued time.Time
	wait     txm.Span        // create.batch_wait: ends when its batch starts
	ctx      context.Context // the request's: its create span is linked from its batch
	done     chan result     // buffered 1: the outcome
	lead     chan *job       // buffered 1: run this batch (w is in it)
	taken    bool            // under dispatcher.mu: in a batch, no longer queued
}

type result struct {
	created txm.Created
	err     error
}

// job is one allocation batch and the lane it runs in.
type job struct {
	lane      int
	contended bool // a batch of contended signers (see dispatcher)
	batch     []*waiter
}

// dispatcher forms allocation batches. Requests queue in arrival order; up
// to one batch per lane is in flight, and a signer is in at most one batch
// in flight (so that its requests of one moment go in one transaction, and
// the instance never queues on its own lease). A batch takes, in arrival
// order, the queued requests of signers that are not in flight, up to the
// batch size, whatever their signers. While a batch is in flight, the
// requests that arrive gather for the next: the in-flight batch is what
// batches a hot signer.
//
// With more than one lane, contended signers (whose last allocation
// waited for another instance's: see markContended) go in batches of
// their own, and the others in one batch at a time. Every call has a fixed
// cost in database CPU besides its rows, so one call in flight carries the
// most requests per call, where two in flight for any signers split them.
// A call that waits for a contended signer's lease row must not hold up
// the other signers, so contended signers have lanes of their own (all but
// one). A batch of uncontended signers that is late (lateAfter: a chain
// asked for a stale nonce, a slow moment of the database) lets another
// start beside it. With one lane, or a batch size of 1 (no batching),
// every batch takes any signer and every free lane starts one at once.
//
// A batch runs in the goroutine of its first request, which delivers every
// result and then starts what became possible; no goroutine outlives its
// request (the timer that starts a batch when one in flight becomes late
// only forms it and hands it to its first request).
type dispatcher struct {
	size  int      // batch size
	lanes []string // the lease owner of each lane

	mu        sync.Mutex
	queue     []*waiter
	free      []int // lanes with no batch in flight
	flying    map[signerKey]bool
	contended map[signerKey]time.Time // signers that count as contended, until when
	calm      map[int]time.Time       // lanes with a batch of uncontended signers in flight: since when
	crowded   int                     // batches of contended signers in flight
	late      *time.Timer             // forms again when a batch of uncontended signers becomes late
}

func newDispatcher(instanceID string, lanes, size int) *dispatcher {
	d := &dispatcher{size: size, flying: map[signerKey]bool{}, contended: map[signerKey]time.Time{}, calm: map[int]time.Time{}}
	for i := 0; i < lanes; i++ {
		d.lanes = append(d.lanes, fmt.Sprintf("%s/w%d", instanceID, i))
		d.free = append(d.free, lanes-1-i)
	}
	return d
}

const (
	// lateAfter is how long a batch of uncontended signers runs before
	// another may start beside it.
	lateAfter = 100 * time.Millisecond
	// contendedFor is how long a signer counts as contended after an
	// allocation of it waited for another instance's.
	contendedFor = 200 * time.Millisecond
)

// split reports whether contended and uncontended signers go in separate
// batches.
func (d *dispatcher) split() bool { return len(d.lanes) > 1 && d.size > 1 }

// formLocked forms batches for free lanes while queued requests of signers
// not in flight remain, as the lanes' rules allow, and hands each to its
// first request; when only lateness holds a batch back, it arranges to
// look again then. Callers hold d.mu.
func (d *dispatcher) formLocked() {
	for len(d.free) > 0 && len(d.queue) > 0 {
		now := time.Now()
		contended := false
		switch {
		case !d.split():
		case d.crowded < len(d.lanes)-1 && d.startableLocked(true, now):
			contended = true
		case d.startableLocked(false, now):
			if wait := d.untilLateLocked(now); wait > 0 {
				d.lookAgainLocked(wait)
				return
			}
		default:
			return
		}
		batch := d.takeLocked(nil, contended, now)
		if len(batch) == 0 {
			return
		}
		lane := d.free[len(d.free)-1]
		d.free = d.free[:len(d.free)-1]
		if contended {
			d.crowded++
		} else {
			d.calm[lane] = now
		}
		batch[0].lead <- &job{lane: lane, contended: contended, batch: batch}
	}
}

// isContended reports whether key counts as contended at now. Callers
// hold d.mu.
func (d *dispatcher) isContended(key signerKey, now time.Time) bool {
	return d.split() && d.contended[key].After(now)
}

// untilLateLocked is how long until every batch of uncontended signers in
// flight is late; 0 when none is in flight. Callers hold d.mu.
func (d *dispatcher) untilLateLocked(now time.Time) time.Duration {
	var wait time.Duration
	for _, at := range d.calm {
		wait = max(wait, lateAfter-now.Sub(at))
	}
	return wait
}

// startableLocked reports whether a queued request of a signer that is
// not in flight, contended or not, waits. Callers hold d.mu.
func (d *dispatcher) startableLocked(contended bool, now time.Time) bool {
	for _, w := range d.queue {
		if !d.flying[w.key] && d.isContended(w.key, now) == contended {
			return true
		}
	}
	return false
}

// lookAgainLocked forms again after wait. Callers hold d.mu.
func (d *dispatcher) lookAgainLocked(wait time.Duration) {
	if d.late == nil {
		d.late = time.AfterFunc(wait, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.formLocked()
		})
		return
	}
	d.late.Reset(wait)
}

// takeLocked adds to batch, in arrival order and up to the batch size, the
// queued requests that may join it: of its signers, or of signers not in
// flight and, when split, as contended as the batch, which are then in
// flight. Callers hold d.mu.
func (d *dispatcher) takeLocked(batch []*waiter, contended bool, now time.Time) []*waiter {
	mine := map[signerKey]bool{}
	for _, w := range batch {
		mine[w.key] = true
	}
	rest := d.queue[:0]
	for _, w := range d.queue {
		if len(batch) < d.size && (mine[w.key] || !d.flying[w.key] && d.isContended(w.key, now) == contended) {
			mine[w.key], d.flying[w.key] = true, true
			w.taken = true
			batch = append(batch, w)
			continue
		}
		rest = append(rest, w)
	}
	clear(d.queue[len(rest):])
	d.queue = rest
	return batch
}

// markContended records, for each signer of a batch that landed, whether
// its allocation waited for another instance's.
func (d *dispatcher) markContended(keys []signerKey, waited []bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for i, key := range keys {
		switch {
		case waited[i]:
			d.contended[key] = now.Add(contendedFor)
		case !d.contended[key].After(now):
			delete(d.contended, key)
		}
	}
}

// landed frees j's lane and signers and forms what became possible.
func (d *dispatcher) landed(j *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range j.batch {
		delete(d.flying, w.key)
	}
	if j.contended {
		d.crowded--
	} else {
		delete(d.calm, j.lane)
	}
	d.free = append(d.free, j.lane)
	d.formLocked()
}

// withdraw removes w from the queue if no batch has taken it.
func (d *dispatcher) withdraw(w *waiter) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.taken {
		return false
	}
	for i, q := range d.queue {
		if q == w {
			d.queue = append(d.queue[:i], d.queue[i+1:]...)
			return true
		}
	}
	return false
}

// batchTimeout bounds one batch; it runs detached from the leader's request
// so that one cancelled client does not fail everyone in its batch.
const batchTimeout = 30 * time.Second

// enqueue queues r, to be created as txID, and waits for its allocation.
func (c *CreateTx) enqueue(ctx context.Context, r *txm.Request, txID string, caps map[string]txm.Policy,
	sim *simCheck) (txm.Created, error) {
	_, wait := c.metrics.StartSpan(ctx, "create.batch_wait")
	w := &waiter{req: r, txID: txID, caps: caps, sim: sim, key: signerKey{chainID: r.ChainID, signer: r.From}, enqueued: time.Now(),
		wait: wait, ctx: ctx, done: make(chan result, 1), lead: make(chan *job, 1)}

	d := c.dispatch
	c.metrics.QueueDepth(ctx, 1)
	d.mu.Lock()
	d.queue = append(d.queue, w)
	d.formLocked()
	d.mu.Unlock()
	for {
		select {
		case res := <-w.done:
			return res.created, res.err
		case j := <-w.lead:
			c.run(ctx, j)
		case <-ctx.Done():
			if d.withdraw(w) {
				w.wait.End()
				c.metrics.QueueDepth(context.WithoutCancel(ctx), -1)
				return txm.Created{}, ctx.Err()
			}
			// Already in a batch: see it through (and run it, if it is w's
			// to run).
			select {
			case res := <-w.done:
				return res.created, res.err
			case j := <-w.lead:
				c.run(context.WithoutCancel(ctx), j)
				res := <-w.done
				return res.created, res.err
			}
		}
	}
}

// run runs j, after waiting up to BatchWait (ContendedWait for a batch of
// contended signers) for more requests to join it when it is short, and
// then lets the dispatcher go on.
//
// A contended signer's call would wait for its lease row anyway, behind the
// other instances' calls: waiting here instead, before the batch closes,
// lets what arrives meanwhile go in the same call, so that each holding of
// the row carries more.
func (c *CreateTx) run(ctx context.Context, j *job) {
	d := c.dispatch
	wait := c.cfg.BatchWait
	if j.contended {
		wait = max(wait, c.cfg.ContendedWait)
	}
	if wait > 0 && len(j.batch) < d.size {
		time.Sleep(wait)
		d.mu.Lock()
		j.batch = d.takeLocked(j.batch, j.contended, time.Now())
		d.mu.Unlock()
	}
	c.metrics.QueueDepth(ctx, -int64(len(j.batch)))
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	c.runBatch(bctx, d.lanes[j.lane], j.batch, func() { d.landed(j) })
}
