package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.CompletionListener = (*Store)(nil)

// completionChannel is the LISTEN/NOTIFY channel completion writers notify
// when they commit.
const completionChannel = "txfence_completions"

// Listen implements txm.CompletionListener on one pool connection held for
// as long as ctx lasts.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", translate(err))
	}
	defer func() {
		// The connection is left listening; a fresh one is better than
		// one with a stale LISTEN.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+completionChannel); err != nil {
		return fmt.Errorf("listen: %w", translate(err))
	}
	wake()
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil
			}
			return fmt.Errorf("wait for notification: %w", translate(err))
		}
		wake()
	}
}

// LatestCompletion implements txm.CompletionFeed.
func (s *Store) LatestCompletion(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM tx_completion`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("latest completion: %w", translate(err))
	}
	return seq, nil
}
