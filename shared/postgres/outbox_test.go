package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// writeOutbox writes n outbox rows for topic, each ordering key taking
// turns among keys, and returns their ids in order.
func writeOutbox(t *testing.T, db *pgtest.DB, topic string, n int, keys ...string) []int64 {
	t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		var id int64
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`INSERT INTO outbox (topic, ordering_key, payload, attributes) VALUES ($1, $2, $3, '{"n":"x"}') RETURNING id`,
			topic, keys[i%len(keys)], fmt.Sprintf(`{"i": %d}`, i)).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

type outboxRow struct {
	ID       int64
	Attempts int
	LastErr  *string
}

func outboxRows(t *testing.T, db *pgtest.DB) []outboxRow {
	t.Helper()
	rows, _ := db.Pool.Query(context.Background(), `SELECT id, attempts, last_error FROM outbox ORDER BY id`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	require.NoError(t, err)
	return out
}

// TestRelay_DeletesWhatItPublished: a relay publishes the rows it claims in
// the order they were written, with their content, and a published row is
// gone; a row whose publish failed stays under its id, with the error and
// one more attempt, and the sweep publishes it (a sweep that fails writes
// the row it claimed back as it was, with its error).
func TestRelay_DeletesWhatItPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	ids := writeOutbox(t, db, "s", 6, "k1", "k2")

	var got []txm.Message
	n, err := s.Relay(ctx, ids, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
		got = msgs
		errs := make([]error, len(msgs))
		errs[3] = errors.New("topic s: unavailable")
		return errs
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unavailable")
	assert.Equal(t, 5, n)
	require.Len(t, got, 6)
	for i, m := range got {
		assert.Equal(t, ids[i], m.ID, "published in the order written")
		assert.Equal(t, "s", m.Topic)
		assert.Equal(t, []string{"k1", "k2"}[i%2], m.OrderingKey)
		assert.JSONEq(t, fmt.Sprintf(`{"i": %d}`, i), string(m.Data))
		assert.Equal(t, map[string]string{"n": "x"}, m.Attributes)
	}
	left := outboxRows(t, db)
	require.Len(t, left, 1, "the published rows are gone")
	assert.Equal(t, ids[3], left[0].ID, "the failed row kept its id")
	assert.Equal(t, 1, left[0].Attempts)
	require.NotNil(t, left[0].LastErr)
	assert.Equal(t, "topic s: unavailable", *left[0].LastErr)

	// A sweep whose publish fails writes the row it claimed back, under
	// its id, with the error and one more attempt.
	n, err = s.Relay(ctx, nil, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
		return []error{errors.New("topic s: still unavailable")}
	})
	require.Error(t, err)
	assert.Zero(t, n)
	left = outboxRows(t, db)
	require.Len(t, left, 1)
	assert.Equal(t, ids[3], left[0].ID)
	assert.Equal(t, 2, left[0].Attempts)
	require.NotNil(t, left[0].LastErr)
	assert.Equal(t, "topic s: still unavailable", *left[0].LastErr)

	// The next sweep publishes it, content intact.
	n, err = s.Relay(ctx, nil, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
		got = msgs
		return make([]error, len(msgs))
	})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.Len(t, got, 1)
	assert.Equal(t, ids[3], got[0].ID)
	assert.JSONEq(t, `{"i": 3}`, string(got[0].Data))
	assert.Equal(t, "k2", got[0].OrderingKey)
	assert.Empty(t, outboxRows(t, db))
}

// TestPublishOutbox_LeavesPublishedRowsToDelete: publishing rows by id
// without deleting them notes the failures as Relay does and returns the
// ids of the rows published, which stay until DeleteOutbox deletes them
// (the rows of many relays in one statement).
func TestPublishOutbox_LeavesPublishedRowsToDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	first := writeOutbox(t, db, "s", 3, "k")
	second := writeOutbox(t, db, "s", 2, "k")

	var got []int64
	done, err := s.PublishOutbox(ctx, first, func(_ context.Context, msgs []txm.Message) []error {
		errs := make([]error, len(msgs))
		for _, m := range msgs {
			got = append(got, m.ID)
		}
		errs[1] = errors.New("topic s: unavailable")
		return errs
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unavailable")
	assert.Equal(t, first, got, "the rows given, in the order written")
	assert.Equal(t, []int64{first[0], first[2]}, done, "the ids of those published")
	left := outboxRows(t, db)
	require.Len(t, left, 5, "nothing deleted yet")
	assert.Equal(t, 1, left[1].Attempts, "the failure noted")
	require.NotNil(t, left[1].LastErr)
	assert.Equal(t, "topic s: unavailable", *left[1].LastErr)
	assert.Zero(t, left[0].Attempts)

	more, err := s.PublishOutbox(ctx, second, func(_ context.Context, msgs []txm.Message) []error {
		return make([]error, len(msgs))
	})
	require.NoError(t, err)
	assert.Equal(t, second, more)
	require.NoError(t, s.DeleteOutbox(ctx, append(done, more...)))
	left = outboxRows(t, db)
	require.Len(t, left, 1, "the published rows of both relays gone")
	assert.Equal(t, first[1], left[0].ID, "the failed row kept")
	require.NoError(t, s.DeleteOutbox(ctx, done), "rows already gone are skipped")
}

// TestRelay_DyingAfterPublishLosesNothing: a relay that published but did
// not settle (its process died, or its context ended), by id or by age,
// leaves every row it took as it was, for the sweep to publish again.
func TestRelay_DyingAfterPublishLosesNothing(t *testing.T) {
	t.Parallel()
	for _, byID := range []bool{true, false} {
		t.Run(fmt.Sprintf("by id %v", byID), func(t *testing.T) {
			db := pgtest.New(t)
			s := testStore(t, db.Pool)
			ids := writeOutbox(t, db, "s", 4, "k")
			before := outboxRows(t, db)
			if !byID {
				ids = nil
			}

			ctx, cancel := context.WithCancel(context.Background())
			published := 0
			_, err := s.Relay(ctx, ids, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
				published = len(msgs)
				cancel() // dies before it settles
				return make([]error, len(msgs))
			})
			require.Error(t, err)
			assert.Equal(t, 4, published)
			assert.Equal(t, before, outboxRows(t, db), "every row still there, unchanged")

			n, err := s.Relay(context.Background(), nil, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
				return make([]error, len(msgs))
			})
			require.NoError(t, err)
			assert.Equal(t, 4, n, "published again")
			assert.Empty(t, outboxRows(t, db))
		})
	}
}

// TestRelay_SlowPublishHoldsNoConnection: while an invocation's relay waits
// for Pub/Sub, the database pool is free: a Pub/Sub slowdown must not
// starve the requests that share the pool (with one connection, a relay
// that held its transaction open across the publish blocked everyone).
func TestRelay_SlowPublishHoldsNoConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := testStore(t, pool)
	ids := writeOutbox(t, db, "s", 3, "k")

	publishing, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Relay(context.Background(), ids, 0, 100, func(_ context.Context, msgs []txm.Message) []error {
			close(publishing)
			<-release // Pub/Sub is slow
			return make([]error, len(msgs))
		})
		done <- err
	}()
	<-publishing
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var one int
	err = pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
	cancel()
	close(release)
	require.NoError(t, err, "the pool's one connection is free while the relay publishes")
	require.NoError(t, <-done)
	assert.Empty(t, outboxRows(t, db))
}

// TestRelay_ConcurrentRelaysPublishEachRowOnce: overlapping sweeps of
// several instances (pools of their own) racing for the same rows publish
// each row once: a claimed row is skipped, not waited for.
func TestRelay_ConcurrentRelaysPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := writeOutbox(t, db, "s", 400, "a", "b", "c")

	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		s := testStore(t, pgtest.Pool(t, db.URL))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				n, err := s.Relay(context.Background(), nil, 0, 25, func(_ context.Context, msgs []txm.Message) []error {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range msgs {
						seen[m.ID]++
					}
					return make([]error, len(msgs))
				})
				if !assert.NoError(t, err) {
					return
				}
				if n == 0 {
					return // nothing left that no other relay holds
				}
			}
		}()
	}
	wg.Wait()
	assert.Len(t, seen, len(ids), "every row published")
	for id, n := range seen {
		assert.Equal(t, 1, n, "row %d published %d times", id, n)
	}
	assert.Empty(t, outboxRows(t, db))
}

// TestOutboxBacklog_CountsWhatWaits: the backlog is the rows not published
// yet, how many of them failed a publish, and the age of the oldest.
func TestOutboxBacklog_CountsWhatWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	b, err := s.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.Equal(t, txm.OutboxBacklog{}, b, "an empty outbox")

	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox (topic, payload, created_at) VALUES
    ('s', '{}', clock_timestamp() - interval '2 minutes')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox (topic, payload, attempts, last_error, created_at) VALUES
    ('s', '{}', 3, 'unavailable', clock_timestamp() - interval '1 minute')`)
	require.NoError(t, err)
	writeOutbox(t, db, "s", 2, "k")
	b, err = s.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 4, b.Rows)
	assert.EqualValues(t, 1, b.Failing)
	assert.InDelta(t, 120, b.OldestAge.Seconds(), 5, "the oldest unsent row")
}

// TestOutboxSentRows_DeletedByMigration17: rows that code older than
// migration 00014 marked sent (published, never relayed again, never
// deleted) are deleted by 00017; the rows that wait stay, and are the
// backlog.
func TestOutboxSentRows_DeletedByMigration17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := migratedDatabase(t)
	require.NoError(t, m.DownTo(ctx, 16))
	_, err := pool.Exec(ctx, `INSERT INTO outbox (topic, payload, created_at, sent_at) VALUES
    ('s', '{"n":1}', clock_timestamp() - interval '1 hour', clock_timestamp() - interval '59 minutes'),
    ('s', '{"n":2}', clock_timestamp() - interval '1 hour', NULL)`)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx))

	var payloads []string
	rows, err := pool.Query(ctx, `SELECT payload::text FROM outbox ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		payloads = append(payloads, p)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{`{"n": 2}`}, payloads, "the sent row is gone, the waiting one stays")

	s := testStore(t, pool)
	b, err := s.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, b.Rows)
}

// TestOutboxSentAt_DroppedByMigration18: the outbox has no sent_at column
// once migrated up (the second half of 00014's change), and going down
// gives it back, empty, to the code of the release before.
func TestOutboxSentAt_DroppedByMigration18(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := migratedDatabase(t)
	hasSentAt := func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
WHERE table_schema = 'public' AND table_name = 'outbox' AND column_name = 'sent_at'`).Scan(&n))
		return n == 1
	}
	assert.False(t, hasSentAt(), "dropped")
	writeOutbox(t, &pgtest.DB{Pool: pool}, "s", 2, "k")
	require.NoError(t, m.DownTo(ctx, 17))
	assert.True(t, hasSentAt(), "back for the release before")
	var unsent int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&unsent))
	assert.Equal(t, 2, unsent, "the rows that wait, unsent")
	require.NoError(t, m.Up(ctx))
	assert.False(t, hasSentAt())
}
