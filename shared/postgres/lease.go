package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

// Leases implements txm.LeaseStore. Every expiry judgement uses the database
// clock (clock_timestamp(), not now(), so that a long transaction does not
// judge with its start time). The process clock is never consulted.
type Leases struct {
	pool    *pgxpool.Pool
	cfg     config.Lease
	metrics *metrics.Metrics
	log     *slog.Logger
}

var _ txm.LeaseStore = (*Leases)(nil)

// NewLeases returns a lease store over pool.
func NewLeases(pool *pgxpool.Pool, cfg config.Lease, m *metrics.Metrics, log *slog.Logger) (*Leases, error) {
	if pool == nil || log == nil {
		return nil, errors.New("new leases: pool and logger are required")
	}
	if cfg.Duration <= 0 || cfg.ClockSkew < 0 {
		return nil, fmt.Errorf("new leases: duration must be positive and clock skew not negative, got %s and %s", cfg.Duration, cfg.ClockSkew)
	}
	return &Leases{pool: pool, cfg: cfg, metrics: m, log: log}, nil
}

// acquireSQL inserts a new lease (token 1), renews the owner's live lease
// (token unchanged), or takes over a lease that expired more than the skew
// allowance ago or was released (token + 1); otherwise it returns no row.
// prev locks the existing row before the insert runs (it is joined into the
// insert's input so that it is evaluated first), so concurrent acquirers
// queue behind one another and each judges the row as its predecessor left
// it; its token tells a renewal from a take-over. A renewal keeps the mark
// of a waiter that wants the lease (Want), a take-over clears it. A
// take-over also needs the lease not to be wanted by another waiter within
// $7 (0s: whatever was wanted; see AcquireYielding), nor wanted first
// within $8 (see AcquireBehindFirst).
//
// gate first reads the row without a lock: when it shows the lease held by
// another owner (live, or wanted by someone else), nothing is locked or
// written and no row comes back. A waiter polls while a holder works, and
// each refused ask locked the row and committed a lock record (a WAL
// flush): the holder's fenced writes, which share-lock the row, queued
// behind every poll. What gate lets through is judged again under the lock
// as before; a row that changed after gate's snapshot is the next poll's.
const acquireSQL = `
WITH gate AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM signer_lease
        WHERE chain_id = $1 AND signer = $2 AND scope = $3
          AND NOT ((owner = $4 AND expires_at > clock_timestamp())
                   OR (expires_at <= clock_timestamp() - $6::interval
                       AND (wanted_at IS NULL OR wanted_at <= clock_timestamp() - $7::interval)
                       AND (wanted_first_at IS NULL OR wanted_first_at <= clock_timestamp() - $8::interval)))
    ) AS open
),
prev AS (
    SELECT fencing_token FROM signer_lease
    WHERE chain_id = $1 AND signer = $2 AND scope = $3 AND (SELECT open FROM gate)
    FOR UPDATE
)
INSERT INTO signer_lease AS l (chain_id, signer, scope, owner, fencing_token, expires_at, updated_at)
SELECT $1, $2, $3, $4, 1, clock_timestamp() + $5::interval, clock_timestamp()
FROM (SELECT) AS one LEFT JOIN prev ON true
WHERE (SELECT open FROM gate)
ON CONFLICT (chain_id, signer, scope) DO UPDATE
SET owner = EXCLUDED.owner,
    fencing_token = CASE
        WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.fencing_token
        ELSE l.fencing_token + 1 END,
    expires_at = clock_timestamp() + $5::interval,
    updated_at = clock_timestamp(),
    wanted_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.wanted_at END,
    wanted_first_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.wanted_first_at END
WHERE (l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp())
   OR (l.expires_at <= clock_timestamp() - $6::interval
       AND (l.wanted_at IS NULL OR l.wanted_at <= clock_timestamp() - $7::interval)
       AND (l.wanted_first_at IS NULL OR l.wanted_first_at <= clock_timestamp() - $8::interval))
RETURNING fencing_token, expires_at, (SELECT fencing_token FROM prev)`

// yields says whose marks (Want) an acquirer leaves a released lease to,
// and for how long after the mark: any waiter's (any), or only a waiter
// that wants it first (first). Zero yields to nobody.
type yields struct{ any, first time.Duration }

// Acquire implements txm.LeaseStore.
func (s *Leases) Acquire(ctx context.Context, key txm.LeaseKey, owner string) (txm.Lease, txm.AcquireResult, error) {
	return s.acquireSpan(ctx, key, owner, yields{})
}

// AcquireYielding implements txm.LeaseStore.
func (s *Leases) AcquireYielding(ctx context.Context, key txm.LeaseKey, owner string, wantLife time.Duration) (txm.Lease, txm.AcquireResult, error) {
	return s.acquireSpan(ctx, key, owner, yields{any: wantLife})
}

// AcquireBehindFirst implements txm.LeaseStore.
func (s *Leases) AcquireBehindFirst(ctx context.Context, key txm.LeaseKey, owner string, wantLife time.Duration) (txm.Lease, txm.AcquireResult, error) {
	return s.acquireSpan(ctx, key, owner, yields{first: wantLife})
}

func (s *Leases) acquireSpan(ctx context.Context, key txm.LeaseKey, owner string, y yields) (txm.Lease, txm.AcquireResult, error) {
	ctx, span := s.metrics.Start(ctx, "lease.acquire")
	defer span.End()
	l, result, err := s.acquire(ctx, s.pool, key, owner, y)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("txfence.scope", string(key.Scope)))
	}
	metrics.SetResult(span, leaseResult(result, err), err != nil && !errors.Is(err, txm.ErrLeaseHeld))
	return l, result, err
}

// leaseResult is how an acquisition ended, for its span.
func leaseResult(r txm.AcquireResult, err error) string {
	switch {
	case errors.Is(err, txm.ErrLeaseHeld):
		return "held"
	case err != nil:
		return "error"
	}
	return string(r)
}

func (s *Leases) acquire(ctx context.Context, q querier, key txm.LeaseKey, owner string, y yields) (txm.Lease, txm.AcquireResult, error) {
	if err := validAcquire(key, owner); err != nil {
		return txm.Lease{}, "", err
	}
	l := txm.Lease{Key: key, Owner: owner}
	var prev *int64
	err := q.QueryRow(ctx, acquireSQL, acquireArgs(s.cfg, key, owner, y)...).Scan(&l.Token, &l.ExpiresAt, &prev)
	result, err := s.acquired(ctx, key, err, l.Token, prev)
	if err != nil {
		return txm.Lease{}, "", err
	}
	return l, result, nil
}

func validAcquire(key txm.LeaseKey, owner string) error {
	if !key.Scope.Valid() || owner == "" || key.ChainID == 0 {
		return fmt.Errorf("acquire lease %s: %w: scope, owner and chain id are required", key, txm.ErrInvalid)
	}
	return nil
}

func acquireArgs(cfg config.Lease, key txm.LeaseKey, owner string, y yields) []any {
	return []any{int64(key.ChainID), txm.CanonicalAddress(key.Signer), string(key.Scope), owner, cfg.Duration, cfg.ClockSkew, y.any, y.first}
}

// acquired judges acquireSQL's answer (err from its scan, the token it
// returned and the previous token) and counts it.
func (s *Leases) acquired(ctx context.Context, key txm.LeaseKey, err error, token int64, prev *int64) (txm.AcquireResult, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		s.metrics.LeaseAcquire(ctx, "held")
		return "", fmt.Errorf("acquire lease %s: %w", key, txm.ErrLeaseHeld)
	}
	if err != nil {
		s.metrics.LeaseAcquire(ctx, "error")
		return "", fmt.Errorf("acquire lease %s: %w", key, translate(err))
	}
	result := txm.AcquireTakenOver
	switch {
	case prev == nil:
		result = txm.AcquireNew
	case *prev == token:
		result = txm.AcquireRenewed
	}
	s.metrics.LeaseAcquire(ctx, string(result))
	return result, nil
}

// Renew implements txm.LeaseStore.
func (s *Leases) Renew(ctx context.Context, l txm.Lease) (txm.Lease, error) {
	const q = `
UPDATE signer_lease SET expires_at = clock_timestamp() + $6::interval, updated_at = clock_timestamp()
WHERE chain_id = $1 AND signer = $2 AND scope = $3 AND owner = $4 AND fencing_token = $5
  AND expires_at > clock_timestamp()
RETURNING expires_at`
	err := s.pool.QueryRow(ctx, q, append(fenceArgs(l), s.cfg.Duration)...).Scan(&l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return txm.Lease{}, s.fenced(ctx, l, "lease_renew", "")
	}
	if err != nil {
		return txm.Lease{}, fmt.Errorf("renew lease %s: %w", l.Key, translate(err))
	}
	return l, nil
}

// Release implements txm.LeaseStore. The holder may release a lease that has
// expired as long as nobody took it over (the token still matches).
func (s *Leases) Release(ctx context.Context, l txm.Lease) error {
	return s.release(ctx, s.pool, l)
}

// releaseSQL releases the lease of fenceArgs if it still holds that token.
const releaseSQL = `
UPDATE signer_lease SET expires_at = '-infinity', updated_at = clock_timestamp()
WHERE chain_id = $1 AND signer = $2 AND scope = $3 AND owner = $4 AND fencing_token = $5`

func (s *Leases) release(ctx context.Context, q querier, l txm.Lease) error {
	tag, err := q.Exec(ctx, releaseSQL, fenceArgs(l)...)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.Key, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return s.fenced(ctx, l, "lease_release", "")
	}
	return nil
}

// Want implements txm.LeaseStore. It writes only the first mark of each
// kind: a mark first is a mark as well.
func (s *Leases) Want(ctx context.Context, key txm.LeaseKey, owner string, first bool) error {
	_, err := s.pool.Exec(ctx, `
UPDATE signer_lease
SET wanted_at = coalesce(wanted_at, clock_timestamp()),
    wanted_first_at = CASE WHEN $5 THEN coalesce(wanted_first_at, clock_timestamp()) ELSE wanted_first_at END
WHERE chain_id = $1 AND signer = $2 AND scope = $3 AND owner <> $4
  AND (wanted_at IS NULL OR ($5 AND wanted_first_at IS NULL))`,
		int64(key.ChainID), txm.CanonicalAddress(key.Signer), string(key.Scope), owner, first)
	if err != nil {
		return fmt.Errorf("want lease %s: %w", key, translate(err))
	}
	return nil
}

// Wanted implements txm.LeaseStore.
func (s *Leases) Wanted(ctx context.Context, l txm.Lease) (txm.Wanting, error) {
	var w txm.Wanting
	err := s.pool.QueryRow(ctx, `
SELECT wanted_at IS NOT NULL, wanted_first_at IS NOT NULL FROM signer_lease
WHERE chain_id = $1 AND signer = $2 AND scope = $3 AND owner = $4 AND fencing_token = $5`, fenceArgs(l)...).Scan(&w.Any, &w.First)
	if errors.Is(err, pgx.ErrNoRows) {
		return txm.Wanting{}, nil
	}
	if err != nil {
		return txm.Wanting{}, fmt.Errorf("lease %s wanted: %w", l.Key, translate(err))
	}
	return w, nil
}

// Check implements txm.LeaseStore.
func (s *Leases) Check(ctx context.Context, l txm.Lease) error {
	return s.check(ctx, s.pool, l, "lease_check", "")
}

// check returns ErrFenced (counted and logged under op) unless l is current.
func (s *Leases) check(ctx context.Context, q querier, l txm.Lease, op, txID string) error {
	var ok bool
	if err := q.QueryRow(ctx, "SELECT "+fenceHeld, fenceArgs(l)...).Scan(&ok); err != nil {
		return fmt.Errorf("check lease %s: %w", l.Key, translate(err))
	}
	if !ok {
		return s.fenced(ctx, l, op, txID)
	}
	return nil
}

// fenceHeld is the predicate every fenced statement carries: the lease row
// still names this owner and token and has not expired by database time.
// It takes a share lock on the lease row, so a take-over (an update of that
// row) waits until the writing transaction has ended: nothing written under
// token T can commit after T+1 was issued. Its parameters are $1..$5, in the
// order of fenceArgs; a fenced statement's own parameters start at $6.
const fenceHeld = `EXISTS (
    SELECT 1 FROM signer_lease fl
    WHERE fl.chain_id = $1::bigint AND fl.signer = $2::text AND fl.scope = $3::text
      AND fl.owner = $4::text AND fl.fencing_token = $5::bigint
      AND fl.expires_at > clock_timestamp()
    FOR SHARE)`

// fenceArgs are the parameters $1..$5 of fenceHeld.
func fenceArgs(l txm.Lease) []any {
	return []any{int64(l.Key.ChainID), txm.CanonicalAddress(l.Key.Signer), string(l.Key.Scope), l.Owner, l.Token}
}

// fencedExec runs a statement that carries fenceHeld (parameters $1..$5 are
// the lease, args follow from $6) and returns the rows it affected. Zero
// rows means either the lease was lost (ErrFenced, counted and logged) or the
// statement's own predicate matched nothing, in which case it returns 0 and
// no error; the caller decides what an unmatched row means.
func (s *Leases) fencedExec(ctx context.Context, q querier, l txm.Lease, op, txID, sql string, args ...any) (int64, error) {
	tag, err := q.Exec(ctx, sql, append(fenceArgs(l), args...)...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, translate(err))
	}
	if n := tag.RowsAffected(); n > 0 {
		return n, nil
	}
	if err := s.check(ctx, q, l, op, txID); err != nil {
		return 0, err
	}
	return 0, nil
}

// fenced counts and logs one rejected write and returns ErrFenced.
func (s *Leases) fenced(ctx context.Context, l txm.Lease, op, txID string) error {
	s.metrics.LeaseFenced(ctx, op)
	attrs := []any{
		slog.String(logging.KeyOp, op),
		slog.Uint64(logging.KeyChainID, l.Key.ChainID),
		slog.String(logging.KeySigner, txm.CanonicalAddress(l.Key.Signer)),
		slog.String(logging.KeyScope, string(l.Key.Scope)),
		slog.String(logging.KeyOwner, l.Owner),
		slog.Int64(logging.KeyToken, l.Token),
	}
	if txID != "" {
		attrs = append(attrs, slog.String(logging.KeyTxID, txID))
	}
	s.log.WarnContext(ctx, "fenced write rejected", attrs...)
	return fmt.Errorf("%s %s owner %s token %d: %w", op, l.Key, l.Owner, l.Token, txm.ErrFenced)
}
