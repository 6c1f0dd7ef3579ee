-- Liveness (issue 10): per-transaction backoff, attempt outcomes, outcome
-- reasons in the feed, audited actions, and the admin actions' idempotency.

-- +goose Up
-- A transaction that fails to make progress (signing or broadcast keeps
-- failing, or it is STUCK) is worked again no sooner than next_attempt_at,
-- the wait doubling with each consecutive failure. failing_since is when the
-- current run of failures began; stuck_since when it entered STUCK.
ALTER TABLE managed_tx
    ADD COLUMN next_attempt_at timestamptz,
    ADD COLUMN failures        integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    ADD COLUMN failing_since   timestamptz,
    ADD COLUMN stuck_since     timestamptz;

-- Which attempt was mined; the others at its nonce are recorded as replaced.
ALTER TABLE tx_attempt
    ADD COLUMN outcome text CHECK (outcome IN ('mined', 'replaced'));

-- Why an outcome happened (cancelled, nonce_consumed_externally, reverted,
-- the STUCK reason), as reported at the time.
ALTER TABLE tx_completion ADD COLUMN sub_state text;

-- Who or what acted: an admin principal, a stuck-resolution policy, or the
-- automatic fee bumper; and which action.
ALTER TABLE tx_history
    ADD COLUMN action text,
    ADD COLUMN actor  text;

-- Admin actions on a transaction, idempotent under the caller's action id.
-- Recorded by the API, carried out under the signer's chain lease by the
-- function that holds the key.
CREATE TABLE tx_action (
    tx_id         uuid        NOT NULL REFERENCES managed_tx (id),
    action_id     text        NOT NULL CHECK (action_id <> '' AND length(action_id) <= 200),
    action        text        NOT NULL CHECK (action IN ('resubmit', 'replace', 'cancel')),
    params        jsonb       NOT NULL DEFAULT '{}',
    fingerprint   bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    actor         text        NOT NULL CHECK (actor <> ''),
    reason        text        NOT NULL CHECK (reason <> ''),
    status        text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    result        text,
    fencing_token bigint,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    done_at       timestamptz,
    PRIMARY KEY (tx_id, action_id)
);
CREATE INDEX tx_action_pending ON tx_action (tx_id, created_at) WHERE status = 'pending';

-- +goose Down
DROP TABLE tx_action;
ALTER TABLE tx_history DROP COLUMN actor, DROP COLUMN action;
ALTER TABLE tx_completion DROP COLUMN sub_state;
ALTER TABLE tx_attempt DROP COLUMN outcome;
ALTER TABLE managed_tx
    DROP COLUMN stuck_since,
    DROP COLUMN failing_since,
    DROP COLUMN failures,
    DROP COLUMN next_attempt_at;
