package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.OutboxStore = (*Store)(nil)

// Relay implements txm.OutboxStore. Rows are claimed with FOR UPDATE SKIP
// LOCKED inside one transaction, published at once (one by one, each
// waiting for Pub/Sub, a sweep's hundreds of completions took seconds), and
// marked sent in the same transaction; a failed publish records the error
// on its row, which stays unsent for the sweep. A crash after publishing but
// before the commit publishes the rows again later: at-least-once, never
// lost.
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
			rows, err = tx.Query(ctx, `
SELECT id, topic, ordering_key, payload, attributes FROM outbox
WHERE id = ANY($1::bigint[]) AND sent_at IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, ids, limit)
		} else {
			rows, err = tx.Query(ctx, `
SELECT id, topic, ordering_key, payload, attributes FROM outbox
WHERE sent_at IS NULL AND created_at <= clock_timestamp() - $1::interval
ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, olderThan, limit)
		}
		if err != nil {
			return fmt.Errorf("claim outbox: %w", translate(err))
		}
		var msgs []txm.Message
		for rows.Next() {
			var m txm.Message
			var attrs []byte
			if err := rows.Scan(&m.ID, &m.Topic, &m.OrderingKey, &m.Data, &attrs); err != nil {
				rows.Close()
				return fmt.Errorf("claim outbox: %w", translate(err))
			}
			if err := json.Unmarshal(attrs, &m.Attributes); err != nil {
				rows.Close()
				return fmt.Errorf("outbox %d attributes: %w", m.ID, err)
			}
			msgs = append(msgs, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim outbox: %w", translate(err))
		}
		var done []int64
		for i, err := range publish(ctx, msgs) {
			if err == nil {
				done = append(done, msgs[i].ID)
				continue
			}
			if pubErr == nil {
				pubErr = err
			}
			if _, err := tx.Exec(ctx, `UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1`,
				msgs[i].ID, err.Error()); err != nil {
				return fmt.Errorf("note outbox error: %w", translate(err))
			}
		}
		if len(done) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE outbox SET sent_at = clock_timestamp(), attempts = attempts + 1 WHERE id = ANY($1::bigint[])`, done); err != nil {
				return fmt.Errorf("mark outbox sent: %w", translate(err))
			}
		}
		sent = len(done)
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
