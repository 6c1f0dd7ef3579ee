package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// ShardRouter knows which database (shard) holds each signer, and whether a
// shard may be used yet. Every use case exists once per shard, over that
// shard's store, leases and outbox; the Sharded* types route each signer's
// work to its shard's instance, and the sweeps run every shard's. One
// database is the one-shard case: a single shard named "" holding every
// signer (OneDatabase), served by the same types. Nothing crosses shards: a
// signer's nonces, leases, fencing tokens, transactions and completions live
// in its shard only.
type ShardRouter struct {
	names   []string
	shardOf func(common.Address) (string, bool)
	ready   func(ctx context.Context, shard string) error
}

// NewShardRouter returns a router over the shards names (configuration
// order), shardOf being the signer → shard map. ready, when not nil, is
// asked before a shard is used (the process checks once that the database
// is the shard it is configured as); its error is the caller's.
func NewShardRouter(names []string, shardOf func(common.Address) (string, bool), ready func(ctx context.Context, shard string) error) (*ShardRouter, error) {
	if len(names) == 0 || shardOf == nil {
		return nil, errors.New("new shard router: shards and the map are required")
	}
	return &ShardRouter{names: append([]string(nil), names...), shardOf: shardOf, ready: ready}, nil
}

// OneDatabase is the router of a deployment with one database: a single
// shard, named "", that holds every signer and is always ready.
func OneDatabase() *ShardRouter {
	return &ShardRouter{names: []string{""}, shardOf: func(common.Address) (string, bool) { return "", true }}
}

// Ready returns nil when shard may be used.
func (r *ShardRouter) Ready(ctx context.Context, shard string) error {
	if r.ready == nil {
		return nil
	}
	return r.ready(ctx, shard)
}

// For returns signer's shard, ready to use. A signer in no shard is not
// served (ErrNotServed).
func (r *ShardRouter) For(ctx context.Context, signer common.Address) (string, error) {
	name, ok := r.shardOf(signer)
	if !ok {
		return "", fmt.Errorf("signer %s is in no shard: %w", txm.CanonicalAddress(signer), ErrNotServed)
	}
	if err := r.Ready(ctx, name); err != nil {
		return "", err
	}
	return name, nil
}

// each runs fn for every shard concurrently, each once it is ready, and
// returns the errors by shard (none: an empty map). It returns when every
// fn has. A single shard is run in the caller's goroutine.
func (r *ShardRouter) each(ctx context.Context, names []string, fn func(ctx context.Context, shard string) error) map[string]error {
	errs := map[string]error{}
	if len(names) == 1 {
		err := r.Ready(ctx, names[0])
		if err == nil {
			err = fn(ctx, names[0])
		}
		if err != nil {
			errs[names[0]] = err
		}
		return errs
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.Ready(ctx, name)
			if err == nil {
				err = fn(ctx, name)
			}
			if err != nil {
				mu.Lock()
				errs[name] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// joinShardErrors names each shard's error, in configuration order (the
// one database's, unnamed, as it is).
func (r *ShardRouter) joinShardErrors(errs map[string]error) error {
	var out []error
	for _, name := range r.names {
		if err := errs[name]; err != nil {
			out = append(out, shardError(name, err))
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// shardError names the shard err comes from (the one database's is
// unnamed).
func shardError(name string, err error) error {
	if name == "" {
		return err
	}
	return fmt.Errorf("shard %s: %w", name, err)
}

// checkShards verifies that by has exactly one use case per shard.
func checkShards[T comparable](what string, r *ShardRouter, by map[string]T) error {
	var zero T
	if r == nil || len(by) != len(r.names) {
		return fmt.Errorf("new sharded %s: a router and one per shard are required", what)
	}
	for _, name := range r.names {
		if by[name] == zero {
			return fmt.Errorf("new sharded %s: none for shard %q", what, name)
		}
	}
	return nil
}

// ShardedDrain is DrainSigner routed by signer.
type ShardedDrain struct {
	r  *ShardRouter
	by map[string]*DrainSigner
}

// NewShardedDrain returns the router over one DrainSigner per shard.
func NewShardedDrain(r *ShardRouter, by map[string]*DrainSigner) (*ShardedDrain, error) {
	if err := checkShards("drain", r, by); err != nil {
		return nil, err
	}
	return &ShardedDrain{r: r, by: by}, nil
}

// Execute drains signer in its shard.
func (s *ShardedDrain) Execute(ctx context.Context, chainID uint64, signer common.Address) (DrainResult, error) {
	name, err := s.r.For(ctx, signer)
	if err != nil {
		return DrainResult{}, fmt.Errorf("drain: %w", err)
	}
	return s.by[name].Execute(ctx, chainID, signer)
}

// ShardedReceipts is CheckReceipts routed by signer.
type ShardedReceipts struct {
	r  *ShardRouter
	by map[string]*CheckReceipts
}

// NewShardedReceipts returns the router over one CheckReceipts per shard.
func NewShardedReceipts(r *ShardRouter, by map[string]*CheckReceipts) (*ShardedReceipts, error) {
	if err := checkShards("receipts", r, by); err != nil {
		return nil, err
	}
	return &ShardedReceipts{r: r, by: by}, nil
}

// Execute checks signer's receipts in its shard.
func (s *ShardedReceipts) Execute(ctx context.Context, chainID uint64, signer common.Address) (int, error) {
	name, err := s.r.For(ctx, signer)
	if err != nil {
		return 0, fmt.Errorf("check receipts: %w", err)
	}
	return s.by[name].Execute(ctx, chainID, signer)
}

// ShardedCreate is CreateTx routed by the request's signer: each shard's
// CreateTx has its own workers and batches, so a batch never spans two
// databases and stays one transaction.
type ShardedCreate struct {
	r   *ShardRouter
	by  map[string]*CreateTx
	cfg config.Create
}

// NewShardedCreate returns the router over one CreateTx per shard.
func NewShardedCreate(r *ShardRouter, by map[string]*CreateTx, cfg config.Create) (*ShardedCreate, error) {
	if err := checkShards("create", r, by); err != nil {
		return nil, err
	}
	return &ShardedCreate{r: r, by: by, cfg: cfg}, nil
}

// Execute creates r in its signer's shard. A signer in no shard is not a
// configured one: the request is invalid, as with one database.
func (s *ShardedCreate) Execute(ctx context.Context, who txm.Principal, r *txm.Request) (txm.Created, error) {
	name, err := s.r.For(ctx, r.From)
	if errors.Is(err, ErrNotServed) {
		if verr := ValidateRequest(r, s.cfg); verr != nil {
			return txm.Created{}, verr
		}
		v := &txm.ValidationError{}
		v.Add("from", "%s is not a configured signer", txm.CanonicalAddress(r.From))
		return txm.Created{}, v
	}
	if err != nil {
		return txm.Created{}, err
	}
	return s.by[name].Execute(ctx, who, r)
}

// ShardedActions is RequestAction routed by the transaction's shard, found
// by asking every shard for the id (ids carry no shard).
type ShardedActions struct {
	q  *ShardedQueries
	by map[string]*RequestAction
}

// NewShardedActions returns the router over one RequestAction per shard.
func NewShardedActions(q *ShardedQueries, by map[string]*RequestAction) (*ShardedActions, error) {
	if q == nil {
		return nil, errors.New("new sharded actions: queries are required")
	}
	if err := checkShards("actions", q.r, by); err != nil {
		return nil, err
	}
	return &ShardedActions{q: q, by: by}, nil
}

// Execute validates r, then records it in its transaction's shard.
func (s *ShardedActions) Execute(ctx context.Context, r txm.ActionRequest) (txm.Action, bool, error) {
	if err := s.by[s.q.r.names[0]].validate(r); err != nil {
		return txm.Action{}, false, err
	}
	name, _, err := s.q.locate(ctx, r.TxID)
	if err != nil {
		return txm.Action{}, false, err
	}
	return s.by[name].Execute(ctx, r)
}

// ShardedApprovals is ApproveTx and RejectTx routed by the transaction's
// shard, found as ShardedActions finds it.
type ShardedApprovals struct {
	q       *ShardedQueries
	approve map[string]*ApproveTx
	reject  map[string]*RejectTx
}

// NewShardedApprovals returns the router over one ApproveTx and one
// RejectTx per shard.
func NewShardedApprovals(q *ShardedQueries, approve map[string]*ApproveTx, reject map[string]*RejectTx) (*ShardedApprovals, error) {
	if q == nil {
		return nil, errors.New("new sharded approvals: queries are required")
	}
	if err := checkShards("approve", q.r, approve); err != nil {
		return nil, err
	}
	if err := checkShards("reject", q.r, reject); err != nil {
		return nil, err
	}
	return &ShardedApprovals{q: q, approve: approve, reject: reject}, nil
}

// Approve approves txID in its shard (ApproveTx).
func (s *ShardedApprovals) Approve(ctx context.Context, who txm.Principal, pol txm.Policy, txID, comment string) (*txm.Tx, error) {
	name, _, err := s.q.locate(ctx, txID)
	if err != nil {
		return nil, err
	}
	return s.approve[name].Execute(ctx, who, pol, txID, comment)
}

// Reject rejects txID in its shard (RejectTx).
func (s *ShardedApprovals) Reject(ctx context.Context, who txm.Principal, pol txm.Policy, txID, reason string) (*txm.Tx, error) {
	name, _, err := s.q.locate(ctx, txID)
	if err != nil {
		return nil, err
	}
	return s.reject[name].Execute(ctx, who, pol, txID, reason)
}
