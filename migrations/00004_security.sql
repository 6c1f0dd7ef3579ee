-- Security (issue 11): who created each transaction, API keys (hashes
-- only), versioned per-principal policies, rolling usage for the caps, and
-- an audit log of refusals and admin actions.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN principal text;

-- An API key is "txfk_<id>_<secret>"; only sha256 of the whole key is kept.
CREATE TABLE api_key (
    id         text        PRIMARY KEY CHECK (id ~ '^k_[0-9a-f]{16}$'),
    principal  text        NOT NULL CHECK (principal <> ''),
    hash       bytea       NOT NULL CHECK (octet_length(hash) = 32),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text        NOT NULL,
    revoked_at timestamptz,
    revoked_by text
);
CREATE INDEX api_key_principal ON api_key (principal);

-- Each change writes a new version; the highest is in force.
CREATE TABLE principal_policy (
    principal  text        NOT NULL CHECK (principal <> ''),
    version    integer     NOT NULL CHECK (version > 0),
    policy     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text        NOT NULL,
    PRIMARY KEY (principal, version)
);

-- What each principal sent from each signer, per minute, for the rolling
-- hourly and daily caps; written in the allocating transaction.
CREATE TABLE principal_usage (
    principal text            NOT NULL,
    chain_id  bigint          NOT NULL,
    signer    txfence_address NOT NULL,
    minute    timestamptz     NOT NULL,
    tx_count  integer         NOT NULL CHECK (tx_count >= 0),
    value     txfence_uint256 NOT NULL,
    PRIMARY KEY (principal, chain_id, signer, minute)
);
CREATE INDEX principal_usage_minute ON principal_usage (minute);

-- Refusals and admin actions: who, what, on what, and how it ended.
CREATE TABLE audit_log (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    principal text        NOT NULL,
    action    text        NOT NULL,
    target    text        NOT NULL DEFAULT '',
    outcome   text        NOT NULL,
    detail    text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_principal ON audit_log (principal, id);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE principal_usage;
DROP TABLE principal_policy;
DROP TABLE api_key;
ALTER TABLE managed_tx DROP COLUMN principal;
