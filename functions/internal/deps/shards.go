package deps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/postgres"
)

// Shard is one database of the process and the clients over it.
type Shard struct {
	Name  string // "" for the one database of TXFENCE_DATABASE_URL
	DB    *postgres.DB
	Store *postgres.Store
	Relay *app.Relay // nil when no Pub/Sub project is configured

	claimMu   sync.Mutex
	claimed   atomic.Bool // read on every routed call: no lock once claimed
	failedAt  time.Time   // the last failed claim, answered again for claimRetry
	failedErr error
}

// claimRetry is how long a failed claim is answered without asking the
// database again, so that the calls of a shard that is unreachable do not
// queue behind one another's connection attempts.
const claimRetry = time.Second

// openShards builds the pool and store of every database. One database is
// opened as before sharding (a ping: the process does not start without
// it). Shards are connected lazily and checked on first use (ready), so
// that a shard that is down fails only its own signers' work.
func (p *Process) openShards(ctx context.Context) error {
	cfg := p.Config
	for _, d := range cfg.Databases() {
		open := postgres.Connect
		if !cfg.Sharded() {
			open = postgres.Open
		}
		db, err := open(ctx, d.Database)
		if err != nil {
			if d.Name == "" {
				return fmt.Errorf("open database: %w", err)
			}
			return fmt.Errorf("open shard %s: %w", d.Name, err)
		}
		sh := &Shard{Name: d.Name, DB: db}
		p.Shards = append(p.Shards, sh)
		if sh.Store, err = postgres.NewStoreFromConfig(db.Pool, cfg, p.Metrics, p.Log); err != nil {
			return err
		}
		sh.Store.SetShard(d.Name)
	}
	p.DB = p.Shards[0].DB
	ready := p.ready
	if !cfg.Sharded() {
		p.Store = p.Shards[0].Store
		ready = nil
	}
	r, err := app.NewShardRouter(p.ShardNames(), cfg.ShardFor, ready)
	if err != nil {
		return err
	}
	p.Router = r
	return nil
}

// ShardNames lists the shards in configuration order.
func (p *Process) ShardNames() []string {
	out := make([]string, len(p.Shards))
	for i, sh := range p.Shards {
		out[i] = sh.Name
	}
	return out
}

// Shard returns the shard named name.
func (p *Process) Shard(name string) *Shard {
	for _, sh := range p.Shards {
		if sh.Name == name {
			return sh
		}
	}
	return nil
}

// ready checks, once per process and shard, that the database is the
// shard the configuration names and may be used with its map
// (postgres.ClaimShard). Until that succeeds the shard's signers are
// refused (503) and the check is retried on their next call.
func (p *Process) ready(ctx context.Context, name string) error {
	sh := p.Shard(name)
	if sh == nil {
		return fmt.Errorf("no shard %q", name)
	}
	if sh.claimed.Load() {
		return nil
	}
	sh.claimMu.Lock()
	defer sh.claimMu.Unlock()
	if sh.claimed.Load() {
		return nil
	}
	if sh.failedErr != nil && time.Since(sh.failedAt) < claimRetry {
		return sh.failedErr
	}
	err := postgres.ClaimShard(ctx, sh.DB.Pool, postgres.ShardClaim{Name: name, MapVersion: p.Config.ShardMap.Version,
		Map: p.Config.ShardMap.String(), ShardOf: p.Config.ShardFor})
	if errors.Is(err, postgres.ErrShardRefused) {
		p.Log.ErrorContext(ctx, "shard refused: its signers get 503 until the configuration is fixed", slog.String("shard", name), slog.Any("error", err))
	}
	if err != nil {
		if ctx.Err() == nil { // not the caller's own cancellation
			sh.failedAt, sh.failedErr = time.Now(), err
		}
		return err
	}
	sh.failedErr = nil
	sh.claimed.Store(true)
	p.Log.InfoContext(ctx, "shard ready", slog.String("shard", name), slog.Int64("map_version", p.Config.ShardMap.Version))
	return nil
}

// PerShard builds one use case per shard with build.
func PerShard[T any](p *Process, build func(sh *Shard) (T, error)) (map[string]T, error) {
	out := make(map[string]T, len(p.Shards))
	for _, sh := range p.Shards {
		v, err := build(sh)
		if err != nil {
			return nil, err
		}
		out[sh.Name] = v
	}
	return out, nil
}
