package deps

import (
	"context"
	"sync"

	"github.com/txfence/txfence/shared/txm"
)

// Lazy builds a function's handler from the process's dependencies on first
// use and keeps it; a failed build is retried by the next call.
type Lazy[T any] struct {
	Build func(ctx context.Context, p *Process) (T, error)
	mu    sync.Mutex
	v     T
	ok    bool
}

// Get returns the handler, building it if needed.
func (l *Lazy[T]) Get(ctx context.Context) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok {
		return l.v, nil
	}
	p, err := Get(ctx)
	if err != nil {
		return l.v, err
	}
	v, err := l.Build(ctx, p)
	if err != nil {
		return l.v, err
	}
	l.v, l.ok = v, true
	return v, nil
}

// ChainPorts returns the process's chain clients as the port type.
func (p *Process) ChainPorts() map[uint64]txm.Chain {
	out := map[uint64]txm.Chain{}
	for id, c := range p.Chains {
		out[id] = c
	}
	return out
}
