-- Sharding (issue 12): a database that holds a shard of the signers
-- records which shard it is and the newest signer → shard map that used
-- it, so that swapped URLs, a map changed without a new version, or a
-- stale revision's older map are refused instead of allocating a signer's
-- nonces in two databases. A database used alone (TXFENCE_DATABASE_URL)
-- never writes it.

-- +goose Up
CREATE TABLE shard_identity (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    name        text        NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$'),
    map_version bigint      NOT NULL CHECK (map_version >= 0),
    map_digest  text        NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE shard_identity;
