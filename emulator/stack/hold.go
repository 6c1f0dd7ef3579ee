package stack

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/txfence/txfence/shared/evm/evmtest"
)

// A hold stops the simulated chain right after the block that mines a
// development signer's next transaction, so that the transaction stays
// MINED, short of its confirmations, for as long as someone takes to look
// at it and reorganise its block away (make dev's reorg walk-through).

// ChainHold is the state of the simulated chain's hold.
type ChainHold struct {
	// Armed: the chain stops after the next block with a transaction of a
	// development signer.
	Armed bool
	// Held: the chain stopped at Block, which mined Tx; Skipped blocks
	// were not mined since.
	Held    bool
	Block   uint64
	Tx      common.Hash
	Skipped int
}

// holdState is the hold, guarded by its mutex.
type holdState struct {
	sync.Mutex
	ChainHold
}

// HoldChain arms the hold: the chain keeps mining until a block holds a
// transaction of a development signer, and then mines no more until
// ReleaseChain or Reorg. Arming a chain already held changes nothing.
func (s *Stack) HoldChain() error {
	if s.Chain == nil {
		return errors.New("hold: only the simulated chain can be held")
	}
	s.hold.Lock()
	defer s.hold.Unlock()
	if !s.hold.Held {
		s.hold.Armed = true
	}
	return nil
}

// ReleaseChain ends a hold, armed or held: blocks come again.
func (s *Stack) ReleaseChain() {
	s.hold.Lock()
	defer s.hold.Unlock()
	s.hold.ChainHold = ChainHold{}
}

// ChainHoldState says whether the chain is held, and where.
func (s *Stack) ChainHoldState() ChainHold {
	s.hold.Lock()
	defer s.hold.Unlock()
	return s.hold.ChainHold
}

// mine commits a block of c every interval, as evmtest's StartMining does,
// unless the chain is held; stop ends it and waits.
func (s *Stack) mine(c *evmtest.Chain, interval time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if s.skipHeld() {
				continue
			}
			s.noteHeld(c, c.Commit())
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

// skipHeld counts a block not mined when the chain is held.
func (s *Stack) skipHeld() bool {
	s.hold.Lock()
	defer s.hold.Unlock()
	if s.hold.Held {
		s.hold.Skipped++
	}
	return s.hold.Held
}

// noteHeld holds the chain at block h when the hold is armed and h mined a
// development signer's transaction.
func (s *Stack) noteHeld(c *evmtest.Chain, h common.Hash) {
	s.hold.Lock()
	armed := s.hold.Armed
	s.hold.Unlock()
	if !armed || h == (common.Hash{}) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := c.Backend.Client().BlockByHash(ctx, h)
	if err != nil {
		s.opts.Log.Warn("hold: read the new block", "error", err)
		return
	}
	signer := types.LatestSignerForChainID(big.NewInt(evmtest.ChainID))
	for _, tx := range b.Transactions() {
		from, err := types.Sender(signer, tx)
		if err != nil || !slices.Contains(s.Signers, from) {
			continue
		}
		s.hold.Lock()
		if s.hold.Armed { // not released meanwhile
			s.hold.ChainHold = ChainHold{Held: true, Block: b.NumberU64(), Tx: tx.Hash()}
		}
		s.hold.Unlock()
		return
	}
}
