package app

import (
	"bytes"
	"context"
	"sort"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// ShardedOperator reads the console's views over every shard: the signers
// list merged in (chain, signer) order, each configured signer asked of its
// own shard only; attempts and history from the shard that holds the
// transaction.
type ShardedOperator struct {
	r       *ShardRouter
	by      map[string]txm.OperatorQueries
	queries *ShardedQueries
}

var _ txm.OperatorQueries = (*ShardedOperator)(nil)

// NewShardedOperator returns the console's reads over one store per shard.
func NewShardedOperator(r *ShardRouter, by map[string]txm.OperatorQueries, queries *ShardedQueries) (*ShardedOperator, error) {
	if err := checkShards("operator", r, by); err != nil {
		return nil, err
	}
	return &ShardedOperator{r: r, by: by, queries: queries}, nil
}

// ListSigners implements txm.OperatorQueries: every shard is asked for a
// page at once (with the configured signers it holds), and the pages are
// merged. Every shard must answer: a page without one would skip its
// signers.
func (o *ShardedOperator) ListSigners(ctx context.Context, f txm.SignerListFilter) (txm.SignerPage, error) {
	configured := map[string][]common.Address{}
	for _, a := range f.Configured {
		if name, ok := o.r.shardOf(a); ok {
			configured[name] = append(configured[name], a)
		}
	}
	var mu sync.Mutex
	var all txm.SignerPage
	errs := o.r.each(ctx, o.r.names, func(ctx context.Context, name string) error {
		sf := f
		sf.Configured = configured[name]
		page, err := o.by[name].ListSigners(ctx, sf)
		mu.Lock()
		all.Items = append(all.Items, page.Items...)
		all.Total += page.Total
		mu.Unlock()
		return err
	})
	if len(errs) > 0 {
		return txm.SignerPage{}, o.r.joinShardErrors(errs)
	}
	sort.Slice(all.Items, func(i, j int) bool {
		a, b := all.Items[i].SignerKey, all.Items[j].SignerKey
		if a.ChainID != b.ChainID {
			return a.ChainID < b.ChainID
		}
		return bytes.Compare(a.Signer.Bytes(), b.Signer.Bytes()) < 0
	})
	if f.Limit > 0 && len(all.Items) > f.Limit {
		all.Items = all.Items[:f.Limit]
	}
	return all, nil
}

// TxAttempts implements txm.OperatorQueries.
func (o *ShardedOperator) TxAttempts(ctx context.Context, txID string) ([]txm.AttemptView, error) {
	name, _, err := o.queries.locate(ctx, txID)
	if err != nil {
		return nil, err
	}
	return o.by[name].TxAttempts(ctx, txID)
}

// TxHistory implements txm.OperatorQueries.
func (o *ShardedOperator) TxHistory(ctx context.Context, txID string) ([]txm.HistoryEntry, error) {
	name, _, err := o.queries.locate(ctx, txID)
	if err != nil {
		return nil, err
	}
	return o.by[name].TxHistory(ctx, txID)
}
