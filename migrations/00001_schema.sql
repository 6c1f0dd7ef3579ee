-- The whole txfence schema.
-- Addresses are stored in one canonical form: 0x + 40 lower-case hex digits,
-- enforced by the txfence_address domain. Hashes likewise: 0x + 64 lower-case hex.
-- Quantities that can exceed 2^63 (wei values and fees) are numeric(78,0).

-- +goose Up
CREATE DOMAIN txfence_address AS text
    CHECK (VALUE ~ '^0x[0-9a-f]{40}$');
CREATE DOMAIN txfence_hash AS text
    CHECK (VALUE ~ '^0x[0-9a-f]{64}$');
CREATE DOMAIN txfence_uint256 AS numeric(78, 0)
    CHECK (VALUE >= 0 AND VALUE < 115792089237316195423570985008687907853269984665640564039457584007913129639936);

-- One row per (chain, signer, scope). fencing_token starts at 1 and grows by
-- one on every take-over; expires_at is database time. A released lease has
-- expires_at = '-infinity' so that anyone may take it over at once.
CREATE TABLE signer_lease (
    chain_id      bigint          NOT NULL CHECK (chain_id > 0),
    signer        txfence_address NOT NULL,
    scope         text            NOT NULL CHECK (scope IN ('nonce', 'chain')),
    owner         text            NOT NULL CHECK (owner <> ''),
    fencing_token bigint          NOT NULL CHECK (fencing_token > 0),
    expires_at    timestamptz     NOT NULL,
    updated_at    timestamptz     NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (chain_id, signer, scope)
);

-- The next nonce txfence will hand out for a (chain, signer). It never moves
-- backwards. chain_synced_at is when the chain's pending nonce was last
-- folded in: the cache shared by every instance.
CREATE TABLE signer_nonce_cursor (
    chain_id        bigint          NOT NULL CHECK (chain_id > 0),
    signer          txfence_address NOT NULL,
    next_nonce      bigint          NOT NULL CHECK (next_nonce >= 0),
    chain_synced_at timestamptz,
    fencing_token   bigint          NOT NULL CHECK (fencing_token > 0),
    updated_at      timestamptz     NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (chain_id, signer)
);

CREATE TABLE managed_tx (
    id                       uuid            PRIMARY KEY,
    chain_id                 bigint          NOT NULL CHECK (chain_id > 0),
    signer                   txfence_address NOT NULL,
    nonce                    bigint          NOT NULL CHECK (nonce >= 0),
    request_id               text            CHECK (request_id <> ''),
    -- sha256 of the canonical request payload; a replay with the same
    -- request_id and another fingerprint is a conflict.
    payload_fingerprint      bytea           NOT NULL CHECK (octet_length(payload_fingerprint) = 32),
    to_address               txfence_address,
    value                    txfence_uint256 NOT NULL DEFAULT 0,
    data                     bytea           NOT NULL DEFAULT '\x',
    gas_limit                bigint          CHECK (gas_limit > 0),
    max_fee_per_gas          txfence_uint256,
    max_priority_fee_per_gas txfence_uint256,
    gas_price                txfence_uint256,
    metadata                 jsonb,
    state                    text            NOT NULL
        CHECK (state IN ('ALLOCATED', 'TRACKING', 'MINED', 'CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    sub_state                text,
    last_error               text,
    reorg_count              integer         NOT NULL DEFAULT 0 CHECK (reorg_count >= 0),
    broadcast_count          integer         NOT NULL DEFAULT 0 CHECK (broadcast_count >= 0),
    last_broadcast_at        timestamptz,
    -- receipt summary
    receipt_attempt_no       integer,
    receipt_block_number     bigint,
    receipt_block_hash       txfence_hash,
    receipt_status           smallint        CHECK (receipt_status IN (0, 1)),
    receipt_gas_used         bigint,
    receipt_effective_gas_price txfence_uint256,
    mined_at                 timestamptz,
    finalized_at             timestamptz,
    -- the fencing token of the last write, for audit
    fencing_token            bigint          NOT NULL CHECK (fencing_token > 0),
    created_at               timestamptz     NOT NULL DEFAULT clock_timestamp(),
    updated_at               timestamptz     NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT managed_tx_nonce_key UNIQUE (chain_id, signer, nonce)
);

CREATE UNIQUE INDEX managed_tx_request_id_key
    ON managed_tx (chain_id, signer, request_id) WHERE request_id IS NOT NULL;
-- Submit drains ALLOCATED in nonce order; Receipt reads TRACKING per signer.
CREATE INDEX managed_tx_open_by_signer
    ON managed_tx (chain_id, signer, state, nonce)
    WHERE state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK');
-- The sweeps find the oldest untouched work across all signers.
CREATE INDEX managed_tx_sweep
    ON managed_tx (state, updated_at)
    WHERE state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK');
-- Listing by signer in creation order (ids are time-ordered UUIDv7).
CREATE INDEX managed_tx_signer_id ON managed_tx (signer, id);

-- Every signed attempt, persisted before it is broadcast.
CREATE TABLE tx_attempt (
    tx_id                    uuid            NOT NULL REFERENCES managed_tx (id),
    attempt_no               integer         NOT NULL CHECK (attempt_no > 0),
    kind                     text            NOT NULL DEFAULT 'original'
        CHECK (kind IN ('original', 'replace', 'cancel', 'placeholder')),
    tx_hash                  txfence_hash    NOT NULL,
    raw_tx                   bytea           NOT NULL,
    nonce                    bigint          NOT NULL CHECK (nonce >= 0),
    gas_limit                bigint          NOT NULL CHECK (gas_limit > 0),
    max_fee_per_gas          txfence_uint256,
    max_priority_fee_per_gas txfence_uint256,
    gas_price                txfence_uint256,
    created_at               timestamptz     NOT NULL DEFAULT clock_timestamp(),
    broadcast_at             timestamptz,
    broadcast_count          integer         NOT NULL DEFAULT 0 CHECK (broadcast_count >= 0),
    last_error               text,
    fencing_token            bigint          NOT NULL CHECK (fencing_token > 0),
    PRIMARY KEY (tx_id, attempt_no),
    CONSTRAINT tx_attempt_tx_hash_key UNIQUE (tx_hash)
);

-- Why every state change happened, and under whose token.
CREATE TABLE tx_history (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id         uuid        NOT NULL REFERENCES managed_tx (id),
    from_state    text,
    to_state      text        NOT NULL,
    sub_state     text,
    reason        text,
    owner         text        NOT NULL,
    fencing_token bigint      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tx_history_tx ON tx_history (tx_id, id);

-- Messages to publish, written in the same transaction as the change they
-- announce. sent_at is set once the publisher has acknowledged.
CREATE TABLE outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text        NOT NULL CHECK (topic <> ''),
    ordering_key text        NOT NULL DEFAULT '',
    payload      jsonb       NOT NULL,
    attributes   jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at      timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;

-- The ordered feed of terminal outcomes. seq is assigned by the writer under
-- a lock so that seqs become visible in order (see shared/postgres).
CREATE TABLE tx_completion (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id      uuid            NOT NULL REFERENCES managed_tx (id),
    chain_id   bigint          NOT NULL,
    signer     txfence_address NOT NULL,
    state      text            NOT NULL CHECK (state IN ('CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    new_fork   boolean         NOT NULL DEFAULT false,
    created_at timestamptz     NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tx_completion_tx ON tx_completion (tx_id, seq);

-- +goose Down
DROP TABLE tx_completion;
DROP TABLE outbox;
DROP TABLE tx_history;
DROP TABLE tx_attempt;
DROP TABLE managed_tx;
DROP TABLE signer_nonce_cursor;
DROP TABLE signer_lease;
DROP DOMAIN txfence_uint256;
DROP DOMAIN txfence_hash;
DROP DOMAIN txfence_address;
