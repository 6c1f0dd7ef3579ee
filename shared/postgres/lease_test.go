package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// instance is one independent txfence process as far as the database can
// tell: its own pool, lease store, metrics and owner id prefix.
type instance struct {
	name    string
	pool    *pgxpool.Pool
	leases  *Leases
	metrics *metrics.Metrics
	logs    *testsupport.SyncBuffer
}

func newInstances(t *testing.T, db *pgtest.DB, n int, cfg config.Lease) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		inst := &instance{name: fmt.Sprintf("inst%d", i), pool: pgtest.Pool(t, db.URL), metrics: metrics.New(), logs: &testsupport.SyncBuffer{}}
		var err error
		inst.leases, err = NewLeases(inst.pool, cfg, inst.metrics, logging.New(inst.logs, "info", ""))
		require.NoError(t, err)
		out[i] = inst
	}
	return out
}

var testSigner = common.HexToAddress("0x00000000000000000000000000000000000000a1")

func chainKey() txm.LeaseKey {
	return txm.LeaseKey{ChainID: 1337, Signer: testSigner, Scope: txm.ScopeChain}
}

// bumpCursor is a fenced write: it moves the signer's cursor on by one and
// stamps the writer's token.
func bumpCursor(ctx context.Context, inst *instance, l txm.Lease) (int64, error) {
	const sql = `
INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, fencing_token)
SELECT $1::bigint, $2::text, 1, $5::bigint WHERE ` + fenceHeld + `
ON CONFLICT (chain_id, signer) DO UPDATE
SET next_nonce = c.next_nonce + 1, fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp()`
	return inst.leases.fencedExec(ctx, inst.pool, l, "test_bump_cursor", "", sql)
}

func TestIssue2_LeaseRace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	// A long lease: nobody's lease may expire inside the critical section,
	// so two simultaneous holders could only come from a broken acquire.
	insts := newInstances(t, db, 3, config.Lease{Duration: 30 * time.Second, ClockSkew: time.Second})
	ctx := context.Background()

	const goroutines, rounds = 50, 4
	var (
		holders    atomic.Int32
		maxHolders atomic.Int32
		entries    atomic.Int64
		mu         sync.Mutex
		tokens     []int64 // tokens in the order holders entered
	)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds*2)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			inst := insts[g%len(insts)]
			for r := 0; r < rounds; r++ {
				owner := fmt.Sprintf("%s/g%d/r%d", inst.name, g, r)
				var l txm.Lease
				for {
					var err error
					l, _, err = inst.leases.Acquire(ctx, chainKey(), owner)
					if err == nil {
						break
					}
					if !errors.Is(err, txm.ErrLeaseHeld) {
						errs <- err
						return
					}
					// sleep: a random backoff between tries, as contenders' are; the jitter is part of the load under test
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				}
				n := holders.Add(1)
				for {
					m := maxHolders.Load()
					if n <= m || maxHolders.CompareAndSwap(m, n) {
						break
					}
				}
				mu.Lock()
				tokens = append(tokens, l.Token)
				mu.Unlock()
				entries.Add(1)
				if _, err := bumpCursor(ctx, inst, l); err != nil {
					errs <- fmt.Errorf("fenced write by the holder: %w", err)
				}
				// sleep: the holder stays in its critical section a random while, so that a second holder would overlap it
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				holders.Add(-1)
				if err := inst.leases.Release(ctx, l); err != nil {
					errs <- fmt.Errorf("release by the holder: %w", err)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	assert.EqualValues(t, 1, maxHolders.Load(), "the critical section saw two holders at once")
	require.Len(t, tokens, goroutines*rounds)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "tokens must strictly increase across take-overs (entry %d)", i)
	}
	var next, token int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT next_nonce, fencing_token FROM signer_nonce_cursor`).Scan(&next, &token))
	assert.Equal(t, entries.Load(), next, "every holder's fenced write landed exactly once")
	assert.Equal(t, tokens[len(tokens)-1], token, "the last write carries the last token")
	var acquired int64
	for _, inst := range insts {
		acquired += inst.metrics.Count("lease_acquire_total", "result", "acquired") + inst.metrics.Count("lease_acquire_total", "result", "taken_over")
	}
	assert.Equal(t, int64(goroutines*rounds), acquired, "lease_acquire_total counts every acquisition")
}

func TestIssue2_TakeoverFencing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	// Long enough that A's eight fenced attempts below fit in B's lease on
	// a loaded machine (1.5s did not always, alongside other packages).
	cfg := config.Lease{Duration: 3 * time.Second, ClockSkew: 200 * time.Millisecond}
	insts := newInstances(t, db, 3, cfg)
	a, b, c := insts[0], insts[1], insts[2]
	ctx := context.Background()

	la, res, err := a.leases.Acquire(ctx, chainKey(), "A")
	require.NoError(t, err)
	require.Equal(t, txm.AcquireNew, res)
	n, err := bumpCursor(ctx, a, la)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// Before expiry plus skew nobody else gets it.
	_, _, err = b.leases.Acquire(ctx, chainKey(), "B")
	require.ErrorIs(t, err, txm.ErrLeaseHeld)

	lb := waitTakeOver(t, b, "B")
	require.Equal(t, la.Token+1, lb.Token)
	var takeoverAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT updated_at FROM signer_lease`).Scan(&takeoverAt))

	// Every write by A with the old token changes nothing and says ErrFenced.
	for i := 0; i < 5; i++ {
		n, err := bumpCursor(ctx, a, la)
		require.ErrorIs(t, err, txm.ErrFenced)
		require.Zero(t, n)
	}
	_, err = a.leases.Renew(ctx, la)
	require.ErrorIs(t, err, txm.ErrFenced)
	require.ErrorIs(t, a.leases.Release(ctx, la), txm.ErrFenced)
	require.ErrorIs(t, a.leases.Check(ctx, la), txm.ErrFenced)
	// B's writes succeed, and so do they from any pool, as long as B holds
	// (renewed first: on a loaded machine the checks above can outlast its
	// lease, and then B is rightly fenced too).
	lb2, err := b.leases.Renew(ctx, lb)
	require.NoError(t, err)
	require.Equal(t, lb.Token, lb2.Token, "a renewal keeps the token")
	for i := 0; i < 3; i++ {
		_, err := bumpCursor(ctx, b, lb)
		require.NoError(t, err)
	}
	_, err = bumpCursor(ctx, c, lb)
	require.NoError(t, err, "the lease, not the pool, is what a write is judged by")

	var next, token int64
	var updated time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT next_nonce, fencing_token, updated_at FROM signer_nonce_cursor`).Scan(&next, &token, &updated))
	assert.EqualValues(t, 5, next, "one write by A before, four by B after; none by A after")
	assert.Equal(t, lb.Token, token)
	var stale int
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT count(*) FROM signer_nonce_cursor WHERE fencing_token = $1 AND updated_at >= $2`, la.Token, takeoverAt).Scan(&stale))
	assert.Zero(t, stale, "no row carries A's token after B's take-over")

	assert.EqualValues(t, 5, a.metrics.Count("lease_fenced_total", "op", "test_bump_cursor"))
	assert.EqualValues(t, 1, a.metrics.Count("lease_fenced_total", "op", "lease_renew"))
	assert.EqualValues(t, 1, a.metrics.Count("lease_fenced_total", "op", "lease_release"))
	assert.EqualValues(t, 1, b.metrics.Count("lease_acquire_total", "result", "taken_over"))
	lines := fencedLogLines(t, a.logs.String())
	require.Len(t, lines, 8, "one log line per fenced rejection")
	for _, l := range lines {
		assert.Equal(t, txm.CanonicalAddress(testSigner), l["signer"])
		assert.Equal(t, "chain", l["scope"])
		assert.Equal(t, "A", l["owner"])
		assert.EqualValues(t, la.Token, l["token"])
		assert.Equal(t, "WARNING", l["severity"])
	}
}

// TestIssue2_TakeoverFencing_InFlightTx: a write that passed the fence inside
// a transaction still open when the lease expires cannot commit after the
// take-over: the take-over waits for the transaction, whose next fenced
// write fails, so the transaction rolls back and nothing of A's survives.
func TestIssue2_TakeoverFencing_InFlightTx(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 2, config.Lease{Duration: time.Second, ClockSkew: 50 * time.Millisecond})
	a, b := insts[0], insts[1]
	ctx := context.Background()
	la, _, err := a.leases.Acquire(ctx, chainKey(), "A")
	require.NoError(t, err)

	takeover := make(chan txm.Lease, 1)
	err = WithTx(ctx, a.pool, func(tx pgx.Tx) error {
		q := &instance{name: a.name, pool: a.pool, leases: a.leases, metrics: a.metrics, logs: a.logs}
		if _, err := q.leases.fencedExec(ctx, tx, la, "test_bump_cursor", "", bumpSQL); err != nil {
			return err
		}
		go func() { takeover <- waitTakeOver(t, b, "B") }()
		// The lease expires while the transaction is open: B, which finds it
		// expired, queues for the row behind the transaction.
		testsupport.Eventually(t, 10*time.Second, "B's take-over to wait for A's transaction", func() bool {
			var waiting bool
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
			return waiting
		})
		_, err := q.leases.fencedExec(ctx, tx, la, "test_bump_cursor", "", bumpSQL)
		return err
	})
	require.ErrorIs(t, err, txm.ErrFenced)
	lb := <-takeover
	require.Equal(t, la.Token+1, lb.Token)
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM signer_nonce_cursor`).Scan(&rows))
	assert.Zero(t, rows, "A's transaction rolled back whole")
}

const bumpSQL = `
INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, fencing_token)
SELECT $1::bigint, $2::text, 1, $5::bigint WHERE ` + fenceHeld + `
ON CONFLICT (chain_id, signer) DO UPDATE
SET next_nonce = c.next_nonce + 1, fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp()`

func TestIssue2_RenewRelease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 3, config.Lease{Duration: 5 * time.Second, ClockSkew: time.Second})
	a, b, c := insts[0], insts[1], insts[2]
	ctx := context.Background()

	la, _, err := a.leases.Acquire(ctx, chainKey(), "A")
	require.NoError(t, err)
	// sleep: the clock must move for the renewal to extend the expiry
	time.Sleep(20 * time.Millisecond)
	renewed, err := a.leases.Renew(ctx, la)
	require.NoError(t, err)
	assert.Equal(t, la.Token, renewed.Token, "renewal keeps the token")
	assert.True(t, renewed.ExpiresAt.After(la.ExpiresAt), "renewal extends the expiry")
	again, res, err := a.leases.Acquire(ctx, chainKey(), "A")
	require.NoError(t, err)
	assert.Equal(t, txm.AcquireRenewed, res)
	assert.Equal(t, la.Token, again.Token, "re-acquiring a live lease is a renewal")

	// A non-owner can neither renew nor release, with any token.
	for _, forged := range []txm.Lease{
		{Key: la.Key, Owner: "B", Token: la.Token},
		{Key: la.Key, Owner: "B", Token: la.Token + 1},
		{Key: la.Key, Owner: "A", Token: la.Token + 1},
	} {
		_, err := b.leases.Renew(ctx, forged)
		assert.ErrorIs(t, err, txm.ErrFenced)
		assert.ErrorIs(t, b.leases.Release(ctx, forged), txm.ErrFenced)
	}
	_, _, err = b.leases.Acquire(ctx, chainKey(), "B")
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "the forged calls changed nothing")

	// Release lets another owner in at once, with token + 1.
	require.NoError(t, a.leases.Release(ctx, again))
	lb, res, err := b.leases.Acquire(ctx, chainKey(), "B")
	require.NoError(t, err)
	assert.Equal(t, txm.AcquireTakenOver, res)
	assert.Equal(t, la.Token+1, lb.Token)
	_, err = a.leases.Renew(ctx, again)
	assert.ErrorIs(t, err, txm.ErrFenced, "the old holder cannot renew after releasing")
	_, _, err = c.leases.Acquire(ctx, chainKey(), "C")
	assert.ErrorIs(t, err, txm.ErrLeaseHeld)

	// The two scopes are separate leases.
	ln, res, err := c.leases.Acquire(ctx, txm.LeaseKey{ChainID: 1337, Signer: testSigner, Scope: txm.ScopeNonce}, "C")
	require.NoError(t, err)
	assert.Equal(t, txm.AcquireNew, res)
	assert.EqualValues(t, 1, ln.Token)
}

// TestIssue2_DatabaseTime: whatever a process's clock says, the database's
// clock decides. A's clock runs an hour slow, so A believes its lease has an
// hour left; B's runs an hour fast, so B believes A's lease long expired.
func TestIssue2_DatabaseTime(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 2, config.Lease{Duration: time.Second, ClockSkew: 100 * time.Millisecond})
	a, b := insts[0], insts[1]
	ctx := context.Background()

	la, _, err := a.leases.Acquire(ctx, chainKey(), "A")
	require.NoError(t, err)
	// B (fast clock) sees A's expiry an hour in its past and tries at once: held.
	bClock := time.Now().Add(time.Hour)
	require.True(t, bClock.After(la.ExpiresAt), "B's clock says A's lease expired")
	_, _, err = b.leases.Acquire(ctx, chainKey(), "B")
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "a fast clock cannot take over a lease the database holds live")

	// Wait until the database says A's lease expired.
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT expires_at <= clock_timestamp() FROM signer_lease`).Scan(&expired))
		return expired
	}, 5*time.Second, 10*time.Millisecond)

	// A (slow clock) still believes it holds the lease; every action fails.
	aClock := time.Now().Add(-time.Hour)
	believed := la
	believed.ExpiresAt = la.ExpiresAt.Add(time.Hour)
	require.True(t, aClock.Before(believed.ExpiresAt), "A's clock says the lease is live")
	for _, l := range []txm.Lease{la, believed} {
		_, err = bumpCursor(ctx, a, l)
		assert.ErrorIs(t, err, txm.ErrFenced)
		_, err = a.leases.Renew(ctx, l)
		assert.ErrorIs(t, err, txm.ErrFenced)
		assert.ErrorIs(t, a.leases.Check(ctx, l), txm.ErrFenced)
	}
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM signer_nonce_cursor`).Scan(&rows))
	assert.Zero(t, rows)
	lb := waitTakeOver(t, b, "B")
	assert.Equal(t, la.Token+1, lb.Token)
}

// waitTakeOver polls until inst acquires the chain lease for owner.
func waitTakeOver(t *testing.T, inst *instance, owner string) txm.Lease {
	t.Helper()
	var l txm.Lease
	var err error
	testsupport.Within(10*time.Second, func() bool {
		l, _, err = inst.leases.Acquire(context.Background(), chainKey(), owner)
		return !errors.Is(err, txm.ErrLeaseHeld)
	})
	if err != nil {
		t.Errorf("take over as %s: %v", owner, err)
		return txm.Lease{}
	}
	return l
}

func fencedLogLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split([]byte(text), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		if m["message"] == "fenced write rejected" {
			out = append(out, m)
		}
	}
	return out
}

// TestLeases_AcquireYieldingLeavesAWantedLease: an owner that yields (a
// drain) does not take a released lease that another waiter marked wanted,
// until that waiter took it (which clears the mark) or the mark is older
// than the yielder's wantLife (the waiter gave up). It still renews its
// own live lease while another wants it; a plain Acquire is not held back.
func TestLeases_AcquireYieldingLeavesAWantedLease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 2, config.Lease{Duration: 5 * time.Second, ClockSkew: time.Second})
	a, b := insts[0], insts[1]
	ctx := context.Background()
	const life = 400 * time.Millisecond

	drain, _, err := a.leases.AcquireYielding(ctx, chainKey(), "drain-1", life)
	require.NoError(t, err)
	require.NoError(t, b.leases.Want(ctx, chainKey(), "finality", false))
	renewed, res, err := a.leases.AcquireYielding(ctx, chainKey(), "drain-1", life)
	require.NoError(t, err, "its own live lease renews though wanted")
	assert.Equal(t, txm.AcquireRenewed, res)
	require.NoError(t, a.leases.Release(ctx, renewed))

	_, _, err = a.leases.AcquireYielding(ctx, chainKey(), "drain-2", life)
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "released, but wanted by another")
	fin := takesOver(t, b.leases, "finality", drain)
	require.NoError(t, b.leases.Release(ctx, fin))
	again, _, err := a.leases.AcquireYielding(ctx, chainKey(), "drain-2", life)
	require.NoError(t, err, "the waiter took it and let it go: the mark is gone")
	assert.Equal(t, fin.Token+1, again.Token)

	// A waiter that marks and gives up holds yielders back for wantLife only.
	require.NoError(t, b.leases.Want(ctx, chainKey(), "receipt", false))
	require.NoError(t, a.leases.Release(ctx, again))
	_, _, err = a.leases.AcquireYielding(ctx, chainKey(), "drain-3", life)
	require.ErrorIs(t, err, txm.ErrLeaseHeld)
	// sleep: the mark must grow older than wantLife; that it holds yielders back no longer is what is under test
	time.Sleep(life + 50*time.Millisecond)
	late, _, err := a.leases.AcquireYielding(ctx, chainKey(), "drain-3", life)
	require.NoError(t, err, "a stale mark no longer holds it back")
	wanted, err := a.leases.Wanted(ctx, late)
	require.NoError(t, err)
	assert.False(t, wanted.Any, "and taking it cleared the mark")

	// Acquire does not yield.
	require.NoError(t, b.leases.Want(ctx, chainKey(), "receipt", false))
	require.NoError(t, a.leases.Release(ctx, late))
	_, _, err = b.leases.Acquire(ctx, chainKey(), "sweep")
	require.NoError(t, err)
}

// A waiter's refused ask neither waits for nor blocks the holder's fenced
// write: it reads the row without locking it. Before, each refused ask
// locked the row FOR UPDATE and committed, so it queued behind a fenced
// write's share lock, and the holder's next fenced write queued behind it.
// Once the lease is released the ask takes it, and it still judges the row
// under the lock: a second asker at the same moment is refused.
func TestLeases_RefusedAcquireTakesNoLock(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 2, config.Lease{Duration: 5 * time.Second, ClockSkew: time.Second})
	a, b := insts[0], insts[1]
	ctx := context.Background()

	held, _, err := a.leases.Acquire(ctx, chainKey(), "drain")
	require.NoError(t, err)
	write, err := a.pool.Begin(ctx) // a fenced write in progress: the row share-locked
	require.NoError(t, err)
	defer func() { _ = write.Rollback(ctx) }()
	var ok bool
	require.NoError(t, write.QueryRow(ctx, `SELECT `+fenceHeld, fenceArgs(held)...).Scan(&ok))
	require.True(t, ok)

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _, err = b.leases.Acquire(actx, chainKey(), "finality")
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "refused at once, not after the write")
	_, _, err = b.leases.AcquireYielding(actx, chainKey(), "drain-2", time.Second)
	require.ErrorIs(t, err, txm.ErrLeaseHeld)
	// Only this database's locks: the parallel tests' databases are clones of
	// one template, so their signer_lease has the same oid as this one.
	var locks int
	require.NoError(t, b.pool.QueryRow(ctx, `
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relname = 'signer_lease' AND l.mode = 'RowExclusiveLock' AND l.pid <> $1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(write.Conn().PgConn().PID())).Scan(&locks))
	assert.Zero(t, locks, "no refused ask is still waiting")
	require.NoError(t, write.Commit(ctx))

	require.NoError(t, a.leases.Release(ctx, held))
	got, res, err := b.leases.Acquire(ctx, chainKey(), "finality")
	require.NoError(t, err, "released: taken")
	assert.Equal(t, txm.AcquireTakenOver, res)
	assert.Equal(t, held.Token+1, got.Token)
	_, _, err = a.leases.Acquire(ctx, chainKey(), "receipt")
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "and held again")
}

// takesOver has owner Acquire the lease prev's holder released, and checks
// that it took it over (prev's token + 1).
func takesOver(t *testing.T, leases *Leases, owner string, prev txm.Lease) txm.Lease {
	t.Helper()
	l, res, err := leases.Acquire(context.Background(), prev.Key, owner)
	require.NoError(t, err, "%s takes it", owner)
	assert.Equal(t, txm.AcquireTakenOver, res)
	assert.Equal(t, prev.Token+1, l.Token)
	return l
}

// TestLeases_AWantFirstGoesBeforeTheOtherWaiters: a waiter that wants a
// held lease first (a confirmation) is told apart from one that just
// wants it. A released lease so marked is not taken by AcquireBehindFirst
// (a receipt write) nor by AcquireYielding (a drain) until the
// confirmation took it, which clears both marks, or its mark is older than
// their wantLife; a plain Acquire takes it.
func TestLeases_AWantFirstGoesBeforeTheOtherWaiters(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insts := newInstances(t, db, 2, config.Lease{Duration: 5 * time.Second, ClockSkew: time.Second})
	a, b := insts[0], insts[1]
	ctx := context.Background()
	const life = 400 * time.Millisecond
	wanted := func(l txm.Lease) txm.Wanting {
		w, err := a.leases.Wanted(ctx, l)
		require.NoError(t, err)
		return w
	}

	drain, _, err := a.leases.Acquire(ctx, chainKey(), "drain")
	require.NoError(t, err)
	require.NoError(t, b.leases.Want(ctx, chainKey(), "receipt", false))
	assert.Equal(t, txm.Wanting{Any: true}, wanted(drain))
	require.NoError(t, b.leases.Want(ctx, chainKey(), "finality", true))
	assert.Equal(t, txm.Wanting{Any: true, First: true}, wanted(drain), "a first mark after another")
	renewed, res, err := a.leases.AcquireBehindFirst(ctx, chainKey(), "drain", life)
	require.NoError(t, err, "its own live lease renews though wanted first")
	assert.Equal(t, txm.AcquireRenewed, res)
	assert.Equal(t, txm.Wanting{Any: true, First: true}, wanted(renewed), "and a renewal keeps the marks")
	require.NoError(t, a.leases.Release(ctx, renewed))

	_, _, err = b.leases.AcquireBehindFirst(ctx, chainKey(), "receipt", life)
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "released, but wanted first by another")
	_, _, err = b.leases.AcquireYielding(ctx, chainKey(), "drain-2", life)
	require.ErrorIs(t, err, txm.ErrLeaseHeld)
	fin := takesOver(t, b.leases, "finality", drain)
	assert.Equal(t, txm.Wanting{}, wanted(fin), "taking it cleared both marks")
	require.NoError(t, b.leases.Release(ctx, fin))
	rec, _, err := b.leases.AcquireBehindFirst(ctx, chainKey(), "receipt", life)
	require.NoError(t, err, "then the receipt write takes it")
	assert.Equal(t, fin.Token+1, rec.Token)

	// A plain mark does not hold AcquireBehindFirst back.
	require.NoError(t, a.leases.Want(ctx, chainKey(), "drain", false))
	require.NoError(t, b.leases.Release(ctx, rec))
	sweep, _, err := b.leases.AcquireBehindFirst(ctx, chainKey(), "resubmit", life)
	require.NoError(t, err, "wanted, but not first")

	// A confirmation that marks and gives up holds the others back for
	// their wantLife only.
	require.NoError(t, a.leases.Want(ctx, chainKey(), "finality", true))
	require.NoError(t, b.leases.Release(ctx, sweep))
	_, _, err = b.leases.AcquireBehindFirst(ctx, chainKey(), "receipt-2", life)
	require.ErrorIs(t, err, txm.ErrLeaseHeld)
	// sleep: the mark must grow older than wantLife; that it holds yielders back no longer is what is under test
	time.Sleep(life + 50*time.Millisecond)
	late, _, err := b.leases.AcquireBehindFirst(ctx, chainKey(), "receipt-2", life)
	require.NoError(t, err, "a stale first mark no longer holds it back")
	assert.Equal(t, txm.Wanting{}, wanted(late))
}
