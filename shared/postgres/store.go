package postgres

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/metrics"
)

// Topics names the Pub/Sub topics that outbox rows are written for.
type Topics struct {
	Submit     string
	Receipt    string
	Completion string
	// Lifecycle publishes lifecycle events (not only outcomes) on the
	// completion topic, each with the attribute lifecycle=true
	// (TXFENCE_TOPIC_LIFECYCLE). The feed has them either way.
	Lifecycle bool
}

// Store implements the txm store ports over one pool.
type Store struct {
	pool    *pgxpool.Pool
	leases  *Leases
	topics  Topics
	metrics *metrics.Metrics
	log     *slog.Logger
	shard   string // the shard this database is, "" with one database

	leaseRows sync.Map // leaseRowKey → true: nonce lease rows known to exist
}

// NewStore returns a Store. leases must be over the same pool.
func NewStore(pool *pgxpool.Pool, leases *Leases, topics Topics, m *metrics.Metrics, log *slog.Logger) (*Store, error) {
	if pool == nil || leases == nil || log == nil {
		return nil, errors.New("new store: pool, leases and logger are required")
	}
	if topics.Submit == "" || topics.Receipt == "" || topics.Completion == "" {
		return nil, errors.New("new store: every topic name is required")
	}
	return &Store{pool: pool, leases: leases, topics: topics, metrics: m, log: log}, nil
}

// NewStoreFromConfig builds the lease store and the Store over pool from cfg.
func NewStoreFromConfig(pool *pgxpool.Pool, cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*Store, error) {
	leases, err := NewLeases(pool, cfg.Lease, m, log)
	if err != nil {
		return nil, err
	}
	return NewStore(pool, leases, Topics{Submit: cfg.TopicSubmit, Receipt: cfg.TopicReceipt, Completion: cfg.TopicCompletion,
		Lifecycle: cfg.TopicLifecycle}, m, log)
}

// Leases returns the lease store the Store fences with.
func (s *Store) Leases() *Leases { return s.leases }

// SetShard names the shard this store's database is (TXFENCE_DATABASES):
// completion messages carry it, for their seq counts per shard.
func (s *Store) SetShard(name string) { s.shard = name }

// Shard is the shard this store's database is, "" with one database.
func (s *Store) Shard() string { return s.shard }
