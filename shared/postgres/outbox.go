package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.OutboxStore = (*Store)(nil)

// A relay of the rows an invocation just wrote (by id) reads them, publishes
// them and then deletes what was published, holding no transaction and no
// connection while Pub/Sub answers: a slow Pub/Sub (each invocation's
// relay may wait up to seconds) must not take the database pool with it.
// Nothing else relays those rows meanwhile: the sweep (by age) takes only
// rows older than its minimum age, seconds more than an invocation's relay
// may take. The sweep claims its rows (deletes them, skipping rows another
// sweep holds) inside a transaction, since sweeps may overlap: published
// rows are gone when it commits, and the rows of a failed publish are
// written back. Every row in the outbox waits to be published (migration
// 00017 deleted the rows that code older than 00014 marked sent).
const (
	readOutboxSQL = `
SELECT id, topic, ordering_key, payload, attributes, created_at, attempts FROM outbox
WHERE id = ANY($1::bigint[]) ORDER BY id LIMIT $2`
	deleteOutboxSQL = `DELETE FROM outbox WHERE id = ANY($1::bigint[])`
	// noteOutboxFailuresSQL notes the error and one more attempt on rows
	// whose publish failed.
	noteOutboxFailuresSQL = `
UPDATE outbox o SET attempts = o.attempts + 1, last_error = f.err
FROM unnest($1::bigint[], $2::text[]) AS f(id, err) WHERE o.id = f.id`
	claimOutboxByAgeSQL = `
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE created_at <= clock_timestamp() - $1::interval
    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING id, topic, ordering_key, payload, attributes, created_at, attempts`
	// keepOutboxSQL writes back the claimed rows whose publish failed,
	// under their own ids (so that their order among the rest holds), with
	// the error.
	outboxBacklogSQL = `
SELECT count(*), count(*) FILTER (WHERE attempts > 0),
       coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8
FROM outbox`
	keepOutboxSQL = `
INSERT INTO outbox (id, topic, ordering_key, payload, attributes, created_at, attempts, last_error) OVERRIDING SYSTEM VALUE
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::timestamptz[], $7::int[], $8::text[])`
)

// claimed is an outbox row taken by a relay.
type claimed struct {
	msg       txm.Message
	attrs     []byte
	createdAt time.Time
	attempts  int
}

// failed is what a relay learnt of the rows it could not publish.
type failed struct {
	id                  []int64
	topic, key, lastErr []string
	payload, attrs      [][]byte
	createdAt           []time.Time
	attempts            []int
	first               error
}

func (f *failed) add(c claimed, err error) {
	if f.first == nil {
		f.first = err
	}
	f.id = append(f.id, c.msg.ID)
	f.topic = append(f.topic, c.msg.Topic)
	f.key = append(f.key, c.msg.OrderingKey)
	f.payload = append(f.payload, c.msg.Data)
	f.attrs = append(f.attrs, c.attrs)
	f.createdAt = append(f.createdAt, c.createdAt)
	f.attempts = append(f.attempts, c.attempts+1)
	f.lastErr = append(f.lastErr, err.Error())
}

// Relay implements txm.OutboxStore: the rows given (by id), or the unsent
// rows older than olderThan (the sweep), at most limit, are published at
// once (one by one, each waiting for Pub/Sub, a sweep's hundreds of
// completions took seconds) in id order, and each published row is
// deleted; a failed publish leaves its row with the error and one more
// attempt, for the sweep. A crash after publishing but before the delete
// leaves the rows in place, to be published again later: at-least-once,
// never lost.
func (s *Store) Relay(ctx context.Context, ids []int64, olderThan time.Duration, limit int,
	publish func(context.Context, []txm.Message) []error) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	if len(ids) > 0 {
		return s.relayByID(ctx, ids, limit, publish)
	}
	return s.relayByAge(ctx, olderThan, limit, publish)
}

// relayByID relays rows an invocation just wrote, in no transaction.
func (s *Store) relayByID(ctx context.Context, ids []int64, limit int,
	publish func(context.Context, []txm.Message) []error) (int, error) {
	done, err := s.publishByID(ctx, ids, limit, publish)
	if len(done) > 0 {
		if derr := s.DeleteOutbox(ctx, done); derr != nil {
			return 0, derr
		}
	}
	return len(done), err
}

// PublishOutbox implements txm.OutboxStore.
func (s *Store) PublishOutbox(ctx context.Context, ids []int64, publish func(context.Context, []txm.Message) []error) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.publishByID(ctx, ids, len(ids), publish)
}

// publishByID reads the rows given, publishes them and notes the error and
// one more attempt on those publish refused. It returns the ids of those
// published, which stay until deleted, and the first publish error.
func (s *Store) publishByID(ctx context.Context, ids []int64, limit int,
	publish func(context.Context, []txm.Message) []error) ([]int64, error) {
	rows, err := s.pool.Query(ctx, readOutboxSQL, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", translate(err))
	}
	took, err := scanClaimed(rows)
	if err != nil || len(took) == 0 {
		return nil, err
	}
	var done []int64
	var bad failed
	for i, err := range publish(ctx, messages(took)) {
		if err == nil {
			done = append(done, took[i].msg.ID)
		} else {
			bad.add(took[i], err)
		}
	}
	if len(bad.id) > 0 {
		if _, err := s.pool.Exec(ctx, noteOutboxFailuresSQL, bad.id, bad.lastErr); err != nil {
			return done, fmt.Errorf("note outbox failures: %w", translate(err))
		}
	}
	return done, bad.err()
}

// DeleteOutbox implements txm.OutboxStore.
func (s *Store) DeleteOutbox(ctx context.Context, ids []int64) error {
	if _, err := s.pool.Exec(ctx, deleteOutboxSQL, ids); err != nil {
		return fmt.Errorf("delete outbox: %w", translate(err))
	}
	return nil
}

// relayByAge relays rows left behind, claimed in a transaction.
func (s *Store) relayByAge(ctx context.Context, olderThan time.Duration, limit int,
	publish func(context.Context, []txm.Message) []error) (int, error) {
	sent := 0
	var bad failed
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimOutboxByAgeSQL, olderThan, limit)
		if err != nil {
			return fmt.Errorf("claim outbox: %w", translate(err))
		}
		took, err := scanClaimed(rows)
		if err != nil {
			return err
		}
		for i, err := range publish(ctx, messages(took)) {
			if err == nil {
				sent++
			} else {
				bad.add(took[i], err)
			}
		}
		if len(bad.id) > 0 {
			if _, err := tx.Exec(ctx, keepOutboxSQL, bad.id, bad.topic, bad.key, bad.payload, bad.attrs,
				bad.createdAt, bad.attempts, bad.lastErr); err != nil {
				return fmt.Errorf("keep unpublished outbox rows: %w", translate(err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return sent, bad.err()
}

// OutboxBacklog implements txm.OutboxStore. Rows a sweep has claimed and
// not committed yet still count: they are not published until it commits.
func (s *Store) OutboxBacklog(ctx context.Context) (txm.OutboxBacklog, error) {
	var b txm.OutboxBacklog
	var age float64
	if err := s.pool.QueryRow(ctx, outboxBacklogSQL).Scan(&b.Rows, &b.Failing, &age); err != nil {
		return txm.OutboxBacklog{}, fmt.Errorf("outbox backlog: %w", translate(err))
	}
	b.OldestAge = time.Duration(age * float64(time.Second))
	return b, nil
}

// err is the first publish error, if any.
func (f *failed) err() error {
	if f.first == nil {
		return nil
	}
	return fmt.Errorf("publish outbox: %w", f.first)
}

// scanClaimed reads outbox rows, in id order (a DELETE returns its rows in
// no set order; an ordering key's messages are published in the order
// they were written).
func scanClaimed(rows pgx.Rows) ([]claimed, error) {
	defer rows.Close()
	var took []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.msg.ID, &c.msg.Topic, &c.msg.OrderingKey, &c.msg.Data, &c.attrs, &c.createdAt, &c.attempts); err != nil {
			return nil, fmt.Errorf("read outbox: %w", translate(err))
		}
		if err := json.Unmarshal(c.attrs, &c.msg.Attributes); err != nil {
			return nil, fmt.Errorf("outbox %d attributes: %w", c.msg.ID, err)
		}
		took = append(took, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox: %w", translate(err))
	}
	slices.SortFunc(took, func(a, b claimed) int { return cmp.Compare(a.msg.ID, b.msg.ID) })
	return took, nil
}

func messages(took []claimed) []txm.Message {
	msgs := make([]txm.Message, len(took))
	for i, c := range took {
		msgs[i] = c.msg
	}
	return msgs
}
