-- Sharding (issue 12): a database that holds a shard of the signers
-- records which shard it is and the newest signer → shard map that used
-- it, and the home shard keeps every map, so that swapped URLs, a map
-- changed without a new version, a stale revision's older map or a signer
-- moved by configuration are refused instead of allocating a signer's
-- nonces in two databases. A database used alone (TXFENCE_DATABASE_URL)
-- writes neither.

-- +goose Up
CREATE TABLE shard_identity (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    name        text        NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$'),
    map_version bigint      NOT NULL CHECK (map_version >= 0),
    map_digest  text        NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The history of signer → shard maps, kept in the home shard (the first
-- of TXFENCE_DATABASES): each version with every configured signer's
-- shard. A newer map may add signers and shards but never move a signer
-- that an older one placed.
CREATE TABLE shard_map (
    version     bigint      PRIMARY KEY CHECK (version >= 0),
    digest      text        NOT NULL,
    assignments jsonb       NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE shard_map;
DROP TABLE shard_identity;
