-- Lifecycle events: besides its outcomes, the feed records every step of a
-- transaction (accepted, pending approval, broadcast, replaced, mined,
-- reorged) as an event, written through the outcomes' own pipeline
-- (completion_pending, numbered into tx_completion and the completion
-- topic's outbox), so that each gets the feed's seq.
--
-- managed_tx.version counts a transaction's events: each step that writes
-- one increments it in the statement that moves the transaction, and the
-- event carries the new value. An event row has its type, that version,
-- whether it is a lifecycle event (false for the outcomes TxConfirmed,
-- TxFailed and TxStuck) and its own fields (detail: hashes, fees, block,
-- endpoint, revert reason). Rows written before have no type, version or
-- detail: they are outcomes, typed by their state.
--
-- The allocation functions record TxAccepted without its message and
-- attributes (payload and attributes NULL, the nonce in its own column):
-- building JSON per created row cost creates a fifth of their throughput,
-- so numbering builds them (migrations/functions/txfence_event_*.sql).
-- For the same reason completion_pending loses its foreign key: its rows
-- are written by the statement that writes or moves their transaction,
-- and tx_completion, where numbering puts them, keeps its own; the check
-- per created row cost creates about a tenth more.
--
-- The default feed reads outcomes only; tx_completion_outcomes keeps that
-- read off the lifecycle rows.
--
-- tx_completion_typed makes every row numbered from now on name its type
-- (rows written before keep none: NOT VALID checks new rows only). A
-- revision from before events, still running while a deploy rolls out,
-- numbers without a type: its numbering then fails whole, deleting
-- nothing, and the new revisions number what it left, so that it never
-- numbers a lifecycle event as an outcome.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN version bigint NOT NULL DEFAULT 0;

ALTER TABLE completion_pending
    ADD COLUMN type text,
    ADD COLUMN version bigint,
    ADD COLUMN lifecycle boolean NOT NULL DEFAULT false,
    ADD COLUMN detail jsonb,
    ADD COLUMN nonce bigint,
    DROP CONSTRAINT completion_pending_tx_id_fkey,
    ALTER COLUMN payload DROP NOT NULL,
    ALTER COLUMN attributes DROP NOT NULL,
    DROP CONSTRAINT completion_pending_state_check,
    ADD CONSTRAINT completion_pending_state_check CHECK (state IN ('PENDING_APPROVAL', 'ALLOCATED', 'TRACKING', 'STUCK',
        'MINED', 'CONFIRMED', 'FAILED_FINAL'));

ALTER TABLE tx_completion
    ADD COLUMN type text,
    ADD COLUMN version bigint,
    ADD COLUMN lifecycle boolean NOT NULL DEFAULT false,
    ADD COLUMN detail jsonb,
    DROP CONSTRAINT tx_completion_state_check,
    ADD CONSTRAINT tx_completion_state_check CHECK (state IN ('PENDING_APPROVAL', 'ALLOCATED', 'TRACKING', 'STUCK',
        'MINED', 'CONFIRMED', 'FAILED_FINAL'));

ALTER TABLE tx_completion ADD CONSTRAINT tx_completion_typed CHECK (type IS NOT NULL) NOT VALID;

CREATE INDEX tx_completion_outcomes ON tx_completion (seq) WHERE NOT lifecycle;

-- +goose Down
DROP INDEX tx_completion_outcomes;
ALTER TABLE tx_completion DROP CONSTRAINT tx_completion_typed;
DELETE FROM completion_pending WHERE lifecycle;
DELETE FROM tx_completion WHERE lifecycle;
ALTER TABLE tx_completion
    DROP CONSTRAINT tx_completion_state_check,
    ADD CONSTRAINT tx_completion_state_check CHECK (state IN ('CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    DROP COLUMN type, DROP COLUMN version, DROP COLUMN lifecycle, DROP COLUMN detail;
ALTER TABLE completion_pending
    DROP CONSTRAINT completion_pending_state_check,
    ADD CONSTRAINT completion_pending_state_check CHECK (state IN ('CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    ADD CONSTRAINT completion_pending_tx_id_fkey FOREIGN KEY (tx_id) REFERENCES managed_tx (id),
    ALTER COLUMN payload SET NOT NULL,
    ALTER COLUMN attributes SET NOT NULL,
    DROP COLUMN type, DROP COLUMN version, DROP COLUMN lifecycle, DROP COLUMN detail, DROP COLUMN nonce;
ALTER TABLE managed_tx DROP COLUMN version;
