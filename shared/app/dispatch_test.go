package app

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// recordingStore is an allocator that holds each call until released and
// records what was in flight at once.
type recordingStore struct {
	mu       sync.Mutex
	flying   map[common.Address]int // signer → calls in flight holding it
	calls    int                    // in flight
	maxCalls int
	overlap  int // a signer in two calls at once
	// calls that started while another was in flight
	overlapStarts int
	sizes         []int
	hold          time.Duration
	next          map[common.Address]uint64
	callSigners   [][]common.Address
}

func (s *recordingStore) CursorState(context.Context, uint64, common.Address) (txm.CursorState, error) {
	return txm.CursorState{Exists: true, Synced: true}, nil
}

func (s *recordingStore) FindByRequestID(context.Context, uint64, common.Address, string) (*txm.Tx, error) {
	return nil, txm.ErrNotFound
}

func (s *recordingStore) Hold(context.Context, txm.Hold) (*txm.Tx, bool, error) {
	return nil, false, errors.New("no approvals here")
}

func (s *recordingStore) Allocate(_ context.Context, batches []txm.AllocationBatch) ([][]txm.Created, []int64, error) {
	s.mu.Lock()
	if s.calls > 0 {
		s.overlapStarts++
	}
	s.calls++
	s.maxCalls = max(s.maxCalls, s.calls)
	size := 0
	var signers []common.Address
	for _, b := range batches {
		if s.flying[b.Signer] > 0 {
			s.overlap++
		}
		s.flying[b.Signer]++
		size += len(b.Requests)
		signers = append(signers, b.Signer)
	}
	s.sizes = append(s.sizes, size)
	s.callSigners = append(s.callSigners, signers)
	s.mu.Unlock()
	// sleep: an allocation call takes this long, so that requests arrive while it is in flight
	time.Sleep(s.hold)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]txm.Created, len(batches))
	for i, b := range batches {
		s.flying[b.Signer]--
		for k, r := range b.Requests {
			out[i] = append(out[i], txm.Created{Outcome: txm.OutcomeCreated,
				Tx: &txm.Tx{ID: b.TxIDs[k], Request: *r, Nonce: s.next[b.Signer], State: txm.StateAllocated}})
			s.next[b.Signer]++
		}
	}
	s.calls--
	return out, nil, nil
}

// TestDispatcher_LanesAndSigners: at most Workers allocation calls are in
// flight, a signer is never in two at once (its requests of one moment go
// in one call), a call spans many signers, and the requests that arrive
// while a hot signer's call is in flight go together in its next.
// (TestDispatcher_SecondLaneWhenLate shows the lanes in parallel.)
func TestDispatcher_LanesAndSigners(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.InstanceID, cfg.Workers, cfg.BatchSize = "i", 3, 50
	cfg.Chains = []config.Chain{{ID: 1}}
	hot := common.HexToAddress("0x1")
	cfg.Signers = []config.Signer{{Address: hot}}
	for i := 2; i < 40; i++ {
		cfg.Signers = append(cfg.Signers, config.Signer{Address: common.BigToAddress(big.NewInt(int64(i)))})
	}
	store := &recordingStore{flying: map[common.Address]int{}, next: map[common.Address]uint64{}, hold: 20 * time.Millisecond}
	policies, err := NewPolicies(nopPolicies{}, nil, nil, logging.Discard())
	require.NoError(t, err)
	c, err := NewCreateTx(store, map[uint64]ChainReader{1: noChain{}}, nil, policies, cfg.Create(), nil, logging.Discard())
	require.NoError(t, err)

	to := common.HexToAddress("0xdead")
	var wg sync.WaitGroup
	nonces := map[common.Address][]uint64{}
	var mu sync.Mutex
	for i := 0; i < 400; i++ {
		signer := hot
		if i%2 == 1 {
			signer = cfg.Signers[1+i%(len(cfg.Signers)-1)].Address
		}
		wg.Go(func() {
			created, err := c.Execute(context.Background(), DevPrincipal, &txm.Request{ChainID: 1, From: signer, To: &to,
				Value: big.NewInt(1), GasLimit: 21000, RequestID: fmt.Sprint("r", i)})
			if assert.NoError(t, err) {
				mu.Lock()
				nonces[signer] = append(nonces[signer], created.Tx.Nonce)
				mu.Unlock()
			}
		})
		if i%40 == 0 {
			// sleep: the creates arrive over time, in bursts, as a service's do; the pacing is the load under test
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Wait()
	assert.Zero(t, store.overlap, "a signer was in two calls at once")
	assert.LessOrEqual(t, store.maxCalls, cfg.Workers)
	multi, largest := 0, 0
	for i, ss := range store.callSigners {
		if len(ss) > 1 {
			multi++
		}
		largest = max(largest, store.sizes[i])
	}
	assert.Positive(t, multi, "a call spans several signers")
	assert.Less(t, len(store.sizes), 400/5, "requests went together: %d calls for 400", len(store.sizes))
	assert.LessOrEqual(t, largest, cfg.BatchSize)
	for s, ns := range nonces {
		seen := map[uint64]bool{}
		for _, n := range ns {
			assert.False(t, seen[n], "signer %s nonce %d twice", s, n)
			seen[n] = true
		}
	}
}

// gateStore is an allocator whose calls each wait for the test to let
// them go, and that tells the test when one starts. Its contended signers'
// allocations say that they waited for another's.
type gateStore struct {
	recordingStore
	started   chan []common.Address // the signers of each call as it starts
	release   chan struct{}         // one receive per call
	contended map[common.Address]bool
}

func newGateStore() *gateStore {
	return &gateStore{recordingStore: recordingStore{flying: map[common.Address]int{}, next: map[common.Address]uint64{}},
		started: make(chan []common.Address, 4), release: make(chan struct{}), contended: map[common.Address]bool{}}
}

func (s *gateStore) Allocate(ctx context.Context, batches []txm.AllocationBatch) ([][]txm.Created, []int64, error) {
	var signers []common.Address
	for _, b := range batches {
		signers = append(signers, b.Signer)
	}
	s.started <- signers
	<-s.release
	out, ob, err := s.recordingStore.Allocate(ctx, batches)
	for i, b := range batches {
		for k := range out[i] {
			out[i][k].Contended = s.contended[b.Signer]
		}
	}
	return out, ob, err
}

// dispatchSetup is a CreateTx over store with two lanes and n signers.
func dispatchSetup(t *testing.T, store CreateStore, n int, opts ...func(*config.Config)) (*CreateTx, []common.Address) {
	t.Helper()
	cfg := config.Defaults()
	cfg.InstanceID, cfg.Workers, cfg.BatchSize = "i", 2, 50
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Chains = []config.Chain{{ID: 1}}
	var signers []common.Address
	for i := 1; i <= n; i++ {
		signers = append(signers, common.BigToAddress(big.NewInt(int64(i))))
		cfg.Signers = append(cfg.Signers, config.Signer{Address: signers[len(signers)-1]})
	}
	policies, err := NewPolicies(nopPolicies{}, nil, nil, logging.Discard())
	require.NoError(t, err)
	c, err := NewCreateTx(store, map[uint64]ChainReader{1: noChain{}}, nil, policies, cfg.Create(), nil, logging.Discard())
	require.NoError(t, err)
	return c, signers
}

func createFor(c *CreateTx, signer common.Address, id string) error {
	to := common.HexToAddress("0xdead")
	_, err := c.Execute(context.Background(), DevPrincipal, &txm.Request{ChainID: 1, From: signer, To: &to,
		Value: big.NewInt(1), GasLimit: 21000, RequestID: id})
	return err
}

// TestDispatcher_SecondLaneWhenLate: while a call for uncontended signers
// is in flight, another signer's create waits for it rather than starting
// a second call (one call in flight carries the most requests), until the
// call in flight is late (a chain asked for a stale nonce, say): then the
// second lane starts and the other signer's create does not wait for it.
func TestDispatcher_SecondLaneWhenLate(t *testing.T) {
	t.Parallel()
	store := newGateStore()
	c, signers := dispatchSetup(t, store, 2)
	slow, other := signers[0], signers[1]
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, createFor(c, slow, "slow")) })
	require.Equal(t, []common.Address{slow}, <-store.started)

	wg.Go(func() { assert.NoError(t, createFor(c, other, "other")) })
	select {
	case got := <-store.started:
		t.Fatalf("a second call started at once, for %v, while the first was not late", got)
	case <-time.After(lateAfter / 2):
	}
	select {
	case got := <-store.started:
		assert.Equal(t, []common.Address{other}, got, "once the first call is late, the second lane takes the other signer")
	case <-time.After(10 * lateAfter):
		t.Fatal("no second call while the first was late")
	}
	store.release <- struct{}{} // both calls are in flight: let them go
	store.release <- struct{}{}
	wg.Wait()
}

// TestDispatcher_ContendedSignersApart: once a signer's allocation waited
// for another instance's, its creates go in calls of their own, in a lane
// of their own: the other signers' creates neither join its call (which
// waits for the signer's lease row) nor wait for it, and go on in one call
// at a time.
func TestDispatcher_ContendedSignersApart(t *testing.T) {
	t.Parallel()
	store := newGateStore()
	c, signers := dispatchSetup(t, store, 3)
	hot, a, b := signers[0], signers[1], signers[2]
	store.contended[hot] = true
	var wg sync.WaitGroup
	// Uncontended until its first allocation says otherwise: the first
	// call has the hot signer and another.
	wg.Go(func() { assert.NoError(t, createFor(c, hot, "hot-0")) })
	require.Equal(t, []common.Address{hot}, <-store.started)
	wg.Go(func() { assert.NoError(t, createFor(c, a, "a-0")) })
	require.Equal(t, []common.Address{a}, <-store.started, "the first call is late, so a second starts")
	store.release <- struct{}{}
	store.release <- struct{}{}
	wg.Wait()

	// Now the hot signer is contended: its call and the others' run side by
	// side at once, neither waiting to be late.
	wg.Go(func() { assert.NoError(t, createFor(c, hot, "hot-1")) })
	require.Equal(t, []common.Address{hot}, <-store.started)
	wg.Go(func() { assert.NoError(t, createFor(c, a, "a-1")) })
	select {
	case got := <-store.started:
		assert.Equal(t, []common.Address{a}, got, "the others' call holds none of the contended signer's creates")
	case <-time.After(lateAfter / 2):
		t.Fatal("the other signers waited for the contended signer's call")
	}
	// A third call would start only once the others' call is late; the
	// contended lane is taken. b waits for a's call, then goes.
	wg.Go(func() { assert.NoError(t, createFor(c, b, "b-1")) })
	select {
	case got := <-store.started:
		t.Fatalf("a third call started at once, for %v", got)
	case <-time.After(lateAfter / 4):
	}
	store.release <- struct{}{}
	store.release <- struct{}{}
	require.Equal(t, []common.Address{b}, <-store.started)
	store.release <- struct{}{}
	wg.Wait()
}

// TestDispatcher_ContendedBatchWaits: a batch of contended signers, whose
// call would wait for the lease row behind other instances' calls anyway,
// waits ContendedWait before it closes, so that what arrives meanwhile goes
// in the same call; a batch of uncontended signers does not wait.
func TestDispatcher_ContendedBatchWaits(t *testing.T) {
	t.Parallel()
	store := newGateStore()
	const wait = 300 * time.Millisecond
	c, signers := dispatchSetup(t, store, 2, func(c *config.Config) { c.ContendedWait = wait })
	hot, calm := signers[0], signers[1]
	store.contended[hot] = true
	var wg sync.WaitGroup

	// Uncontended: the call starts at once with the one create, and the
	// next create, 50 ms later, goes in a call of its own.
	wg.Go(func() { assert.NoError(t, createFor(c, calm, "calm-0")) })
	require.Equal(t, []common.Address{calm}, <-store.started)
	// sleep: the next create comes 50 ms later, the same gap as the contended case's below
	time.Sleep(50 * time.Millisecond)
	wg.Go(func() { assert.NoError(t, createFor(c, calm, "calm-1")) })
	store.release <- struct{}{}
	require.Equal(t, []common.Address{calm}, <-store.started)
	store.release <- struct{}{}
	wg.Wait()
	assert.Equal(t, []int{1, 1}, store.sizes, "an uncontended signer's batch does not wait")

	// The hot signer's first allocation says it waited for another
	// instance's: from then on it is contended.
	wg.Go(func() { assert.NoError(t, createFor(c, hot, "hot-0")) })
	require.Equal(t, []common.Address{hot}, <-store.started)
	store.release <- struct{}{}
	wg.Wait()

	// Its next batch forms at once but waits before its call: the creates
	// that come 50 ms later join it.
	before := len(store.sizes)
	wg.Go(func() { assert.NoError(t, createFor(c, hot, "hot-1")) })
	// sleep: the later creates come 50 ms after the batch formed, within ContendedWait; the gap is what is under test
	time.Sleep(50 * time.Millisecond)
	for i := 2; i <= 3; i++ {
		wg.Go(func() { assert.NoError(t, createFor(c, hot, fmt.Sprintf("hot-%d", i))) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for open := true; open; {
		select {
		case <-store.started:
			store.release <- struct{}{}
		case <-done:
			open = false
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Equal(t, []int{3}, store.sizes[before:], "the contended batch gathered what came while it waited")
}

// TestDispatcher_OneCallUnlessLate: under a steady load on many signers,
// whose calls all take about as long, an instance keeps one call in flight
// (calls that start while another is in flight are rare: only one that a
// slow moment made late), and so its calls carry more requests.
func TestDispatcher_OneCallUnlessLate(t *testing.T) {
	t.Parallel()
	store := &recordingStore{flying: map[common.Address]int{}, next: map[common.Address]uint64{}, hold: 5 * time.Millisecond}
	c, signers := dispatchSetup(t, store, 40)
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			for i := range 10 {
				assert.NoError(t, createFor(c, signers[(g+i)%len(signers)], fmt.Sprint("r", g, "-", i)))
			}
		})
	}
	wg.Wait()
	overlapped, calls := store.overlapStarts, len(store.sizes)
	t.Logf("%d calls for 400 creates, %d started while another was in flight", calls, overlapped)
	assert.Less(t, overlapped, max(calls/10, 2), "calls ran two at a time although none was late")
	assert.Less(t, calls, 400/5, "requests went together")
}

// noChain is a chain that is never asked (the cursor is synced, gas given),
// without a data fee.
type noChain struct{ ChainReader }

func (noChain) ChargesDataFee() bool { return false }

// nopPolicies is a policy store with no policies (only DevPrincipal calls).
type nopPolicies struct{ txm.PolicyStore }
