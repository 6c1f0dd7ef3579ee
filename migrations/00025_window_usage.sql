-- Rolling windows (a policy's "windows"): what was sent, per minute, under
-- a key that names whose sends and of what: 'p/<chain>/<principal>/<asset>'
-- (a principal's, from every signer) or 's/<chain>/<signer>/<asset>' (a
-- signer's, from every principal), the asset being 'native' (the amount
-- is the worst-case cost, value and gas at the fee ceiling) or a token's
-- address (the units the simulated effects move out of the signer). The
-- allocation functions read and write it under locks: a signer's keys under
-- its nonce lease row, a principal's under a transaction-scoped advisory
-- lock on the key, taken after every lease row's.
--
-- window_watch names the signers whose every send is counted, whoever
-- creates it ('*': every signer): those a policy with a signer's window
-- names, written with the policy. The other signers' sends are not counted
-- under their keys, so that a deployment without signer windows pays
-- nothing for them; a signer's window counts from when its signer was first
-- watched. A row is never removed by a later policy version: the counting
-- goes on, and a window added back finds its usage.
--
-- Usage older than the longest window (31 days) and a day is deleted by
-- the resubmit sweep (PruneUsage), by window_usage_minute.
--
-- The allocation functions that take the windows live in
-- migrations/functions (their one source); the versions without them stay
-- for the previous release during a rolling deploy.

-- +goose Up
CREATE TABLE window_usage (
    key      text          NOT NULL CHECK (left(key, 2) IN ('p/', 's/')),
    minute   timestamptz   NOT NULL,
    tx_count integer       NOT NULL CHECK (tx_count >= 0),
    amount   numeric(78,0) NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (key, minute)
);
CREATE INDEX window_usage_minute ON window_usage (minute);

CREATE TABLE window_watch (
    signer text        PRIMARY KEY CHECK (signer = '*' OR signer ~ '^0x[0-9a-f]{40}$'),
    since  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP FUNCTION IF EXISTS txfence_allocate(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[], bytea[], text[], text[],
    bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[], text[], text[],
    int[], text[], text[], text[], text[], text[], int[], text[]);
DROP FUNCTION IF EXISTS txfence_allocate_plain(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[], bytea[], text[], text[],
    bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[], text[], text[],
    int[], text[], text[], text[], text[], text[], int[], text[]);
DROP TABLE window_watch;
DROP TABLE window_usage;
