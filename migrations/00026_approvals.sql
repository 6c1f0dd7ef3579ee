-- Approvals: a create above a threshold of its creator's policy waits for
-- M approvals as a PENDING_APPROVAL row of managed_tx (its one home: read,
-- listed, reported like any transaction) that holds no nonce, so that it
-- holds up none of its signer's other transactions. Its nonce is NULL
-- (managed_tx_nonce_key allows any number of NULLs) until its last approval
-- allocates it the signer's next nonce under the nonce lease (txfence_allocate's
-- r_pending); a rejection, an expiry or a failed check at approval ends it
-- FAILED_FINAL without one. A row holds a fencing token exactly when it holds
-- a nonce: only the lease hands out nonces.
--
-- tx_approval keeps the rule the transaction waits for, as it was when it
-- was held (the policy may change meanwhile); tx_approval_decision each
-- approver's one decision. managed_tx_pending_approval finds the few rows
-- that wait, for the sweep that expires them.
--
-- The new constraints are added NOT VALID: every row stored before holds a
-- nonce and a token and a state the old check allowed, so validating would
-- only lock and read the whole table; new rows are checked all the same.

-- +goose Up
ALTER TABLE managed_tx
    ALTER COLUMN nonce DROP NOT NULL,
    ALTER COLUMN fencing_token DROP NOT NULL,
    DROP CONSTRAINT managed_tx_state_check,
    ADD CONSTRAINT managed_tx_state_check CHECK (state IN ('PENDING_APPROVAL', 'ALLOCATED', 'TRACKING', 'MINED', 'CONFIRMED',
        'FAILED_FINAL', 'STUCK')) NOT VALID,
    ADD CONSTRAINT managed_tx_nonce_held CHECK ((nonce IS NULL) = (state = 'PENDING_APPROVAL' OR state = 'FAILED_FINAL'
        AND sub_state IN ('rejected', 'approval_expired', 'reverted_at_approval', 'refused_at_approval'))) NOT VALID,
    ADD CONSTRAINT managed_tx_token_held CHECK ((fencing_token IS NULL) = (nonce IS NULL)) NOT VALID;

CREATE INDEX managed_tx_pending_approval ON managed_tx (chain_id, signer) WHERE state = 'PENDING_APPROVAL';

CREATE TABLE tx_approval (
    tx_id         uuid        PRIMARY KEY REFERENCES managed_tx (id) ON DELETE CASCADE,
    asset         text        NOT NULL CHECK (asset <> ''), -- 'native' or the token's address
    above         numeric(78, 0) NOT NULL CHECK (above >= 0),
    required      integer     NOT NULL CHECK (required >= 1),
    approvers     text[],     -- the named approvers; NULL when a role approves
    approver_role text        CHECK (approver_role <> ''),
    expires_at    timestamptz NOT NULL,
    gas_estimated boolean     NOT NULL, -- estimated again at approval
    error_abi     text,                 -- to decode a revert at approval
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((approvers IS NULL) <> (approver_role IS NULL)),
    CHECK (approvers IS NULL OR cardinality(approvers) >= required)
);

CREATE TABLE tx_approval_decision (
    tx_id     uuid        NOT NULL REFERENCES tx_approval (tx_id) ON DELETE CASCADE,
    principal text        NOT NULL CHECK (principal <> ''),
    decision  text        NOT NULL CHECK (decision IN ('approve', 'reject')),
    text      text        CHECK (length(text) <= 1000), -- an approval's comment, a rejection's reason
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tx_id, principal),
    CHECK (decision = 'approve' OR text <> '')
);

-- +goose Down
-- The allocation functions that take r_pending (migrations/functions) go
-- first, found by that argument whatever else their signatures hold: the
-- versions before them, which the migrations down to here keep, are called
-- by name alone.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('txfence_allocate', 'txfence_allocate_plain') AND 'r_pending' = ANY (p.proargnames)
    LOOP
        EXECUTE 'DROP FUNCTION ' || f::text;
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TABLE tx_approval_decision;
DROP TABLE tx_approval;
DROP INDEX managed_tx_pending_approval;
-- The transactions that never got a nonce go with the feature: nothing of
-- them reached a chain.
DELETE FROM completion_pending WHERE tx_id IN (SELECT id FROM managed_tx WHERE nonce IS NULL);
DELETE FROM tx_completion WHERE tx_id IN (SELECT id FROM managed_tx WHERE nonce IS NULL);
DELETE FROM tx_history WHERE tx_id IN (SELECT id FROM managed_tx WHERE nonce IS NULL);
DELETE FROM tx_action WHERE tx_id IN (SELECT id FROM managed_tx WHERE nonce IS NULL);
DELETE FROM managed_tx WHERE nonce IS NULL;
ALTER TABLE managed_tx
    DROP CONSTRAINT managed_tx_token_held,
    DROP CONSTRAINT managed_tx_nonce_held,
    DROP CONSTRAINT managed_tx_state_check,
    ADD CONSTRAINT managed_tx_state_check CHECK (state IN ('ALLOCATED', 'TRACKING', 'MINED', 'CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    ALTER COLUMN fencing_token SET NOT NULL,
    ALTER COLUMN nonce SET NOT NULL;
