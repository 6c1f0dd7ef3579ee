package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txfence/txfence/shared/txm"
)

// translate maps a pgx error to the domain's sentinels, keeping the original
// in the chain. It is the one place where database errors become domain errors.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, txm.ErrNotFound) || errors.Is(err, txm.ErrConflict) ||
		errors.Is(err, txm.ErrUnavailable) || errors.Is(err, txm.ErrFenced) || errors.Is(err, txm.ErrInvalid) {
		return err // already translated
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", txm.ErrNotFound, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %s: %w", txm.ErrConflict, pgErr.ConstraintName, err)
		case pgErr.Code == "23514", pgErr.Code == "23502", pgErr.Code == "23503", pgErr.Code[:2] == "22":
			// check, not-null, foreign-key violations and data exceptions: the
			// input got past validation; still nothing was written.
			return fmt.Errorf("%w: %w", txm.ErrInvalid, err)
		case pgErr.Code[:2] == "08", pgErr.Code[:2] == "53", pgErr.Code[:2] == "57",
			pgErr.Code == "40001", pgErr.Code == "40P01", pgErr.Code == "55P03", pgErr.Code == "25P03":
			// connection exceptions, insufficient resources, operator
			// intervention (shutdown, statement timeout), serialization
			// failures, deadlocks, a lock not granted within lock_timeout
			// and an idle transaction timed out: retryable.
			return fmt.Errorf("%w: %w", txm.ErrUnavailable, err)
		}
		return err
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return fmt.Errorf("%w: %w", txm.ErrUnavailable, err)
	}
	if errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		// The connection went away (a restart, a proxy, the network).
		return fmt.Errorf("%w: %w", txm.ErrUnavailable, err)
	}
	return err
}
