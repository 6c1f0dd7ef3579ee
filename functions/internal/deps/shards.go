package deps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/postgres"
)

// Shard is one database of the process and the clients over it.
type Shard struct {
	Name  string // "" for the one database of TXFENCE_DATABASE_URL
	DB    *postgres.DB
	Store *postgres.Store
	Relay *app.Relay // nil when no Pub/Sub project is configured

	check   checkOnce
	claimed atomic.Bool // both the map and this shard passed their checks
}

// openShards builds the pool and store of every database. The home shard
// (the one database, or the first shard) is opened with a ping: it holds
// the API keys, the policies and the history of signer maps, so nothing is
// served without it and the process does not start. The other shards are
// connected lazily and checked on first use (ready), so that a shard that
// is down fails only its own signers' work.
func (p *Process) openShards(ctx context.Context) error {
	cfg := p.Config
	for i, d := range cfg.Databases() {
		open := postgres.Connect
		if i == 0 {
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
		// The one database of TXFENCE_DATABASE_URL has no name to claim
		// and no map to check: it is ready once open.
		sh.claimed.Store(d.Name == "")
		p.Shards = append(p.Shards, sh)
		if sh.Store, err = postgres.NewStoreFromConfig(db.Pool, cfg, p.Metrics, p.Log); err != nil {
			return err
		}
		sh.Store.SetShard(d.Name)
	}
	p.DB = p.Shards[0].DB
	r, err := app.NewShardRouter(p.ShardNames(), cfg.ShardLookup(), p.ready)
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

// ready says whether shard name may be used: once per process, the map is
// checked against the history the home shard keeps (postgres.RecordShardMap:
// no stale revision, no changed map under one version, no signer moved),
// and once per shard, the database is checked to be that shard
// (postgres.ClaimShard). Until both succeed the shard's signers are
// refused (503) and the checks are retried on their next calls.
func (p *Process) ready(ctx context.Context, name string) error {
	sh := p.Shard(name)
	if sh == nil {
		return fmt.Errorf("no shard %q", name)
	}
	if sh.claimed.Load() {
		return nil
	}
	if err := p.mapReady(ctx); err != nil {
		return err
	}
	if err := p.claim(ctx, sh); err != nil {
		return err
	}
	sh.claimed.Store(true)
	return nil
}

// mapReady records or checks the process's map in the home shard, once.
// The first map ever recorded needs every shard's claim.
func (p *Process) mapReady(ctx context.Context) error {
	m := &p.mapCheck
	return m.once(ctx, func() error {
		cfg := p.Config
		assign := map[common.Address]string{}
		for _, s := range cfg.Signers {
			if name, ok := cfg.ShardFor(s.Address); ok {
				assign[s.Address] = name
			}
		}
		err := postgres.RecordShardMap(ctx, p.Shards[0].DB.Pool, postgres.MapRecord{Version: cfg.ShardMap.Version,
			Digest: postgres.MapDigest(cfg.ShardMap.String()), Assignments: assign}, func(ctx context.Context) error {
			for _, sh := range p.Shards {
				if err := p.claim(ctx, sh); err != nil {
					return err
				}
			}
			return nil
		})
		if errors.Is(err, postgres.ErrShardRefused) {
			p.Log.ErrorContext(ctx, "signer map refused: every signer gets 503 until the configuration is fixed", slog.Any("error", err))
		}
		return err
	})
}

// claim checks, once, that sh's database is the shard it is configured as.
func (p *Process) claim(ctx context.Context, sh *Shard) error {
	return sh.check.once(ctx, func() error {
		err := postgres.ClaimShard(ctx, sh.DB.Pool, postgres.ShardClaim{Name: sh.Name, MapVersion: p.Config.ShardMap.Version,
			Map: p.Config.ShardMap.String(), ShardOf: p.Config.ShardFor})
		if errors.Is(err, postgres.ErrShardRefused) {
			p.Log.ErrorContext(ctx, "shard refused: its signers get 503 until the configuration is fixed", slog.String("shard", sh.Name), slog.Any("error", err))
		}
		if err == nil {
			p.Log.InfoContext(ctx, "shard ready", slog.String("shard", sh.Name), slog.Int64("map_version", p.Config.ShardMap.Version))
		}
		return err
	})
}

// checkOnce runs a check until it succeeds once. A failure is answered
// again for claimRetry without running the check, so that the calls of an
// unreachable shard do not queue behind each other's connection attempts.
type checkOnce struct {
	mu        sync.Mutex
	ok        atomic.Bool // read on every routed call: no lock once passed
	failedAt  time.Time
	failedErr error
}

// claimRetry is how long a failed check is answered from memory.
const claimRetry = time.Second

func (c *checkOnce) once(ctx context.Context, check func() error) error {
	if c.ok.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok.Load() {
		return nil
	}
	if c.failedErr != nil && time.Since(c.failedAt) < claimRetry {
		return c.failedErr
	}
	if err := check(); err != nil {
		if ctx.Err() == nil { // not the caller's own cancellation
			c.failedAt, c.failedErr = time.Now(), err
		}
		return err
	}
	c.failedErr = nil
	c.ok.Store(true)
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
