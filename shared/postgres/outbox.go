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

// The claim deletes the rows it takes (skipping rows another relay has
// claimed), inside the relay's transaction: published rows are gone when it
// commits, and the rows of a failed publish are written back. sent_at is
// only set by code older than migration 00014, whose rows are not claimed
// again.
const (
	claimOutboxByIDSQL = `
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE id = ANY($1::bigint[]) AND sent_at IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING id, topic, ordering_key, payload, attributes, created_at, attempts`
	claimOutboxByAgeSQL = `
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE sent_at IS NULL AND created_at <= clock_timestamp() - $1::interval
    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING id, topic, ordering_key, payload, attributes, created_at, attempts`
	// keepOutboxSQL writes back the rows whose publish failed, under their
	// own ids (so that their order among the rest holds), with the error.
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

// Relay implements txm.OutboxStore. Rows are claimed (deleted, skipping
// rows another relay holds) inside one transaction, published at once (one
// by one, each waiting for Pub/Sub, a sweep's hundreds of completions took
// seconds), and the transaction commits: a published row is gone. A failed
// publish writes its row back with the error and one more attempt, unsent,
// for the sweep. A crash after publishing but before the commit leaves
// every claimed row in place, to be published again later: at-least-once,
// never lost.
func (s *Store) Relay(ctx context.Context, ids []int64, olderThan time.Duration, limit int,
	publish func(context.Context, []txm.Message) []error) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	sent := 0
	var pubErr error
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var rows pgx.Rows
		var err error
		if len(ids) > 0 {
			rows, err = tx.Query(ctx, claimOutboxByIDSQL, ids, limit)
		} else {
			rows, err = tx.Query(ctx, claimOutboxByAgeSQL, olderThan, limit)
		}
		if err != nil {
			return fmt.Errorf("claim outbox: %w", translate(err))
		}
		var took []claimed
		for rows.Next() {
			var c claimed
			if err := rows.Scan(&c.msg.ID, &c.msg.Topic, &c.msg.OrderingKey, &c.msg.Data, &c.attrs, &c.createdAt, &c.attempts); err != nil {
				rows.Close()
				return fmt.Errorf("claim outbox: %w", translate(err))
			}
			if err := json.Unmarshal(c.attrs, &c.msg.Attributes); err != nil {
				rows.Close()
				return fmt.Errorf("outbox %d attributes: %w", c.msg.ID, err)
			}
			took = append(took, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim outbox: %w", translate(err))
		}
		// A DELETE returns its rows in no set order; an ordering key's
		// messages are published in the order they were written.
		slices.SortFunc(took, func(a, b claimed) int { return cmp.Compare(a.msg.ID, b.msg.ID) })
		msgs := make([]txm.Message, len(took))
		for i, c := range took {
			msgs[i] = c.msg
		}
		var back struct {
			id                  []int64
			topic, key, lastErr []string
			payload, attrs      [][]byte
			createdAt           []time.Time
			attempts            []int
		}
		for i, err := range publish(ctx, msgs) {
			if err == nil {
				sent++
				continue
			}
			if pubErr == nil {
				pubErr = err
			}
			c := took[i]
			back.id = append(back.id, c.msg.ID)
			back.topic = append(back.topic, c.msg.Topic)
			back.key = append(back.key, c.msg.OrderingKey)
			back.payload = append(back.payload, c.msg.Data)
			back.attrs = append(back.attrs, c.attrs)
			back.createdAt = append(back.createdAt, c.createdAt)
			back.attempts = append(back.attempts, c.attempts+1)
			back.lastErr = append(back.lastErr, err.Error())
		}
		if len(back.id) > 0 {
			if _, err := tx.Exec(ctx, keepOutboxSQL, back.id, back.topic, back.key, back.payload, back.attrs,
				back.createdAt, back.attempts, back.lastErr); err != nil {
				return fmt.Errorf("keep unpublished outbox rows: %w", translate(err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if pubErr != nil {
		return sent, fmt.Errorf("publish outbox: %w", pubErr)
	}
	return sent, nil
}
