package app

import (
	"context"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// heads shares each chain's head among the callers of one process that
// wait for it to move: however many wait, a chain is asked at most once a
// poll, and no goroutine runs but the waiters' own.
type heads struct {
	poll time.Duration

	mu     sync.Mutex
	chains map[uint64]*chainHead
}

// chainHead is one chain's head as last asked. Its mutex is held while the
// chain is asked, so that concurrent askers take that answer.
type chainHead struct {
	mu   sync.Mutex
	head txm.Header
	at   time.Time // when it was asked; zero: never
}

func newHeads(poll time.Duration) *heads {
	return &heads{poll: poll, chains: map[uint64]*chainHead{}}
}

// head returns chain id's head, asked less than a poll ago.
func (h *heads) head(ctx context.Context, id uint64, chain txm.Chain) (txm.Header, error) {
	h.mu.Lock()
	c := h.chains[id]
	if c == nil {
		c = &chainHead{}
		h.chains[id] = c
	}
	h.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < h.poll {
		return c.head, nil
	}
	head, err := chain.Head(ctx)
	if err != nil {
		return txm.Header{}, err
	}
	c.head, c.at = head, time.Now()
	return head, nil
}

// after waits until chain id's head is above number, asking every poll,
// and returns it; ctx bounds the wait. A failed ask is asked again at the
// next poll: a node that is away for a moment ends no wait.
func (h *heads) after(ctx context.Context, id uint64, chain txm.Chain, number uint64) (txm.Header, error) {
	for {
		sleep(h.poll)(ctx)
		if err := ctx.Err(); err != nil {
			return txm.Header{}, err
		}
		if head, err := h.head(ctx, id, chain); err == nil && head.Number > number {
			return head, nil
		}
	}
}
