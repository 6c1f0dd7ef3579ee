package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// ShardStore is the read side and the action log of one shard.
type ShardStore interface {
	txm.TxQueries
	txm.ActionStore
}

// ShardedQueries answers the API's reads over every shard: by signer from
// its shard; by transaction id from whichever shard has it (ids are UUIDs
// and name no shard, so every shard is asked, at once; the one shard of a
// single database holds them all); lists merged in id order. It implements
// txm.TxQueries and txm.ActionStore.
type ShardedQueries struct {
	r  *ShardRouter
	by map[string]ShardStore
}

var (
	_ txm.TxQueries   = (*ShardedQueries)(nil)
	_ txm.ActionStore = (*ShardedQueries)(nil)
)

// NewShardedQueries returns the reads over one store per shard.
func NewShardedQueries(r *ShardRouter, by map[string]ShardStore) (*ShardedQueries, error) {
	if err := checkShards("queries", r, by); err != nil {
		return nil, err
	}
	return &ShardedQueries{r: r, by: by}, nil
}

// locate finds the shard of transaction id. A single shard holds every
// transaction: it is the answer without a read (and the transaction nil).
// Otherwise every shard is asked at once, and the transaction comes with
// its shard. A shard that cannot answer matters only when no other one has
// the transaction: then its error (unavailable) is returned, never
// ErrNotFound, for the transaction may be there.
func (q *ShardedQueries) locate(ctx context.Context, id string) (string, *txm.Tx, error) {
	if len(q.r.names) == 1 {
		name := q.r.names[0]
		return name, nil, q.r.Ready(ctx, name)
	}
	var mu sync.Mutex
	var found *txm.Tx
	var where string
	errs := q.r.each(ctx, q.r.names, func(ctx context.Context, name string) error {
		t, err := q.by[name].GetTx(ctx, id)
		if err == nil {
			mu.Lock()
			found, where = t, name
			mu.Unlock()
		}
		return err
	})
	if found != nil {
		return where, found, nil
	}
	for _, name := range q.r.names {
		if err := errs[name]; err != nil && !errors.Is(err, txm.ErrNotFound) {
			return "", nil, fmt.Errorf("shard %s: %w", name, err)
		}
	}
	return "", nil, fmt.Errorf("get tx %s: %w", id, txm.ErrNotFound)
}

// GetTx implements txm.TxQueries.
func (q *ShardedQueries) GetTx(ctx context.Context, id string) (*txm.Tx, error) {
	name, t, err := q.locate(ctx, id)
	if err != nil || t != nil {
		return t, err
	}
	return q.by[name].GetTx(ctx, id)
}

// FindByRequestID implements txm.TxQueries: in the signer's shard.
func (q *ShardedQueries) FindByRequestID(ctx context.Context, chainID uint64, signer common.Address, requestID string) (*txm.Tx, error) {
	name, err := q.r.For(ctx, signer)
	if errors.Is(err, ErrNotServed) {
		return nil, fmt.Errorf("find tx by request id: %w", txm.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return q.by[name].FindByRequestID(ctx, chainID, signer, requestID)
}

// SignerStatus implements txm.TxQueries: from the signer's shard (a
// signer in no shard has no transactions).
func (q *ShardedQueries) SignerStatus(ctx context.Context, chainID uint64, signer common.Address) (txm.SignerStatus, error) {
	name, err := q.r.For(ctx, signer)
	if errors.Is(err, ErrNotServed) {
		return txm.SignerStatus{ChainID: chainID, Signer: signer}, nil
	}
	if err != nil {
		return txm.SignerStatus{}, err
	}
	return q.by[name].SignerStatus(ctx, chainID, signer)
}

// ListTxs implements txm.TxQueries: the shards that can hold the filter's
// signers are asked for a page each, at once, and the pages merged in id
// order. Every one of them must answer: a page without a shard would move
// the cursor past that shard's transactions.
func (q *ShardedQueries) ListTxs(ctx context.Context, f txm.TxFilter) ([]*txm.Tx, error) {
	names := q.shardsOf(f)
	var mu sync.Mutex
	var all []*txm.Tx
	errs := q.r.each(ctx, names, func(ctx context.Context, name string) error {
		page, err := q.by[name].ListTxs(ctx, f)
		mu.Lock()
		all = append(all, page...)
		mu.Unlock()
		return err
	})
	if len(errs) > 0 {
		return nil, q.r.joinShardErrors(errs)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	limit := f.Limit
	if limit <= 0 {
		limit = 50 // the store's default page
	}
	if len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// shardsOf lists the shards that can hold transactions f selects, in
// configuration order.
func (q *ShardedQueries) shardsOf(f txm.TxFilter) []string {
	var signers []common.Address
	switch {
	case f.Signer != nil:
		signers = []common.Address{*f.Signer}
	case f.Signers != nil:
		signers = f.Signers
	default:
		return q.r.names
	}
	want := map[string]bool{}
	for _, s := range signers {
		if name, ok := q.r.shardOf(s); ok {
			want[name] = true
		}
	}
	var out []string
	for _, name := range q.r.names {
		if want[name] {
			out = append(out, name)
		}
	}
	return out
}

// RecordAction implements txm.ActionStore: in the transaction's shard.
func (q *ShardedQueries) RecordAction(ctx context.Context, r txm.ActionRequest) (txm.Action, bool, []int64, error) {
	name, _, err := q.locate(ctx, r.TxID)
	if err != nil {
		return txm.Action{}, false, nil, err
	}
	return q.by[name].RecordAction(ctx, r)
}

// ListActions implements txm.ActionStore: from the transaction's shard.
func (q *ShardedQueries) ListActions(ctx context.Context, txID string) ([]txm.Action, error) {
	name, _, err := q.locate(ctx, txID)
	if errors.Is(err, txm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return q.by[name].ListActions(ctx, txID)
}
