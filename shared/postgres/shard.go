package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/txm"
)

// ErrShardRefused means a database is not the shard the configuration
// says it is, or the configuration's signer → shard map is older than, or
// contradicts, one that already used it. Nothing is done there until the
// configuration is fixed; it also matches txm.ErrUnavailable, so callers
// are told to retry (503) rather than given another answer.
var ErrShardRefused = errors.New("shard refused")

// ShardClaim is what a process believes of one shard.
type ShardClaim struct {
	Name       string
	MapVersion int64
	Map        string // the map's canonical text; its digest is recorded
	// ShardOf is the map: the shard of a signer, false when it has none.
	ShardOf func(common.Address) (string, bool)
}

// MapDigest is the digest a shard records of a map's canonical text.
func MapDigest(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:8])
}

// ClaimShard checks, in one transaction, that the database behind pool is
// the shard c names and may be used with c's map, recording the name on
// first use and the map's version when it is newer:
//   - a database that records another name is refused (swapped URLs);
//   - a map older than the recorded one is refused (a stale revision), and
//     so is the same version with another text (a map changed without a
//     new version);
//   - a database that holds nonce cursors of a signer the map assigns to
//     another shard is refused: the signer's nonces would be allocated in
//     two databases. Moving a signer is an operator's procedure, not a
//     configuration change.
func ClaimShard(ctx context.Context, pool *pgxpool.Pool, c ShardClaim) error {
	if c.ShardOf == nil {
		return errors.New("claim shard: the map is required")
	}
	digest := MapDigest(c.Map)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: shard %q: %s", txm.ErrUnavailable, ErrShardRefused, c.Name, fmt.Sprintf(format, args...))
	}
	return WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO shard_identity (name, map_version, map_digest) VALUES ($1, $2, $3) ON CONFLICT (only_row) DO NOTHING`,
			c.Name, c.MapVersion, digest); err != nil {
			return fmt.Errorf("claim shard: %w", translate(err))
		}
		var name, storedDigest string
		var version int64
		if err := tx.QueryRow(ctx, `SELECT name, map_version, map_digest FROM shard_identity FOR UPDATE`).
			Scan(&name, &version, &storedDigest); err != nil {
			return fmt.Errorf("claim shard: %w", translate(err))
		}
		switch {
		case name != c.Name:
			return refuse("the database is shard %q (check the URLs of TXFENCE_DATABASES)", name)
		case version > c.MapVersion:
			return refuse("TXFENCE_SHARD_MAP v%d is older than v%d, which already used this shard", c.MapVersion, version)
		case version == c.MapVersion && storedDigest != digest:
			return refuse("TXFENCE_SHARD_MAP v%d differs from the v%d that already used this shard: a changed map needs a new version", c.MapVersion, version)
		case version < c.MapVersion:
			if _, err := tx.Exec(ctx, `UPDATE shard_identity SET map_version = $1, map_digest = $2, updated_at = clock_timestamp()`,
				c.MapVersion, digest); err != nil {
				return fmt.Errorf("claim shard: %w", translate(err))
			}
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT signer FROM signer_nonce_cursor ORDER BY 1`)
		if err != nil {
			return fmt.Errorf("claim shard: %w", translate(err))
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("claim shard: %w", translate(err))
		}
		var elsewhere []string
		for _, s := range held {
			if other, ok := c.ShardOf(common.HexToAddress(s)); ok && other != c.Name {
				elsewhere = append(elsewhere, s+" (mapped to "+other+")")
			}
		}
		if len(elsewhere) > 0 {
			if len(elsewhere) > 5 {
				elsewhere = append(elsewhere[:5], fmt.Sprintf("and %d more", len(elsewhere)-5))
			}
			return refuse("it holds the nonces of signers the map puts elsewhere: %s", strings.Join(elsewhere, ", "))
		}
		return nil
	})
}
