package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
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

// MapRecord is a signer → shard map as the home shard keeps it: its
// version, the digest of its canonical text, and the shard of every
// configured signer.
type MapRecord struct {
	Version     int64
	Digest      string
	Assignments map[common.Address]string
}

// RecordShardMap checks m against the maps the home shard (pool) has
// recorded and records it when it is new, in one transaction that
// serializes recorders:
//   - an older version than the newest recorded is refused (a stale
//     revision), and so is a recorded version with another digest;
//   - a newer one may add signers and shards, but a signer an earlier map
//     placed must stay in its shard (moving a signer is an operator's
//     procedure, not a configuration change);
//   - the first map ever recorded runs first (which checks every shard:
//     data from before the map existed must already be where it puts it).
//
// The same version again is accepted as it is.
func RecordShardMap(ctx context.Context, pool *pgxpool.Pool, m MapRecord, first func(ctx context.Context) error) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: %s", txm.ErrUnavailable, ErrShardRefused, fmt.Sprintf(format, args...))
	}
	return WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE shard_map IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("record shard map: %w", translate(err))
		}
		rows, err := tx.Query(ctx, `SELECT version, digest, assignments FROM shard_map ORDER BY version`)
		if err != nil {
			return fmt.Errorf("record shard map: %w", translate(err))
		}
		type recorded struct {
			version int64
			digest  string
			assign  map[string]string
		}
		history, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (recorded, error) {
			var rec recorded
			err := r.Scan(&rec.version, &rec.digest, &rec.assign)
			return rec, err
		})
		if err != nil {
			return fmt.Errorf("record shard map: %w", translate(err))
		}
		if n := len(history); n > 0 {
			newest := history[n-1]
			switch {
			case newest.version > m.Version:
				return refuse("TXFENCE_SHARD_MAP v%d is older than v%d, already in use", m.Version, newest.version)
			case newest.version == m.Version && newest.digest == m.Digest:
				return nil
			case newest.version == m.Version:
				return refuse("TXFENCE_SHARD_MAP v%d differs from the v%d in use: a changed map needs a new version", m.Version, newest.version)
			}
			last := map[common.Address]string{}
			for _, rec := range history {
				for a, s := range rec.assign {
					last[common.HexToAddress(a)] = s
				}
			}
			var moved []string
			for a, s := range m.Assignments {
				if was, ok := last[a]; ok && was != s {
					moved = append(moved, fmt.Sprintf("%s (%s → %s)", txm.CanonicalAddress(a), was, s))
				}
			}
			if len(moved) > 0 {
				sort.Strings(moved)
				return refuse("TXFENCE_SHARD_MAP v%d moves signers an earlier map placed: %s; a signer's nonces stay in its shard", m.Version, strings.Join(moved, ", "))
			}
		} else if err := first(ctx); err != nil {
			return err
		}
		assign := make(map[string]string, len(m.Assignments))
		for a, s := range m.Assignments {
			assign[txm.CanonicalAddress(a)] = s
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shard_map (version, digest, assignments) VALUES ($1, $2, $3)`, m.Version, m.Digest, assign); err != nil {
			return fmt.Errorf("record shard map: %w", translate(err))
		}
		return nil
	})
}
