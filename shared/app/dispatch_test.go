package app

import (
	"context"
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
	mu          sync.Mutex
	flying      map[common.Address]int // signer → calls in flight holding it
	calls       int                    // in flight
	maxCalls    int
	overlap     int // a signer in two calls at once
	sizes       []int
	hold        time.Duration
	next        map[common.Address]uint64
	callSigners [][]common.Address
}

func (s *recordingStore) CursorState(context.Context, uint64, common.Address) (txm.CursorState, error) {
	return txm.CursorState{Exists: true, Synced: true}, nil
}

func (s *recordingStore) FindByRequestID(context.Context, uint64, common.Address, string) (*txm.Tx, error) {
	return nil, txm.ErrNotFound
}

func (s *recordingStore) Allocate(_ context.Context, batches []txm.AllocationBatch) ([][]txm.Created, []int64, error) {
	s.mu.Lock()
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
	c, err := NewCreateTx(store, map[uint64]ChainReader{1: noChain{}}, nil, policies, cfg, nil, logging.Discard())
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
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Wait()
	assert.Zero(t, store.overlap, "a signer was in two calls at once")
	assert.LessOrEqual(t, store.maxCalls, cfg.Workers)
	assert.Greater(t, store.maxCalls, 1, "calls run in parallel lanes")
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

// noChain is a chain that is never asked (the cursor is synced, gas given).
type noChain struct{ ChainReader }

// nopPolicies is a policy store with no policies (only DevPrincipal calls).
type nopPolicies struct{ txm.PolicyStore }
