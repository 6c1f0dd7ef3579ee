-- A reorg that moves a transaction back sets fork_pending, so that the next
-- outcome reported for it carries newFork.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN fork_pending boolean NOT NULL DEFAULT false;
-- The finality sweep finds signers with mined or stale work.
CREATE INDEX managed_tx_mined ON managed_tx (chain_id, signer) WHERE state = 'MINED';

-- +goose Down
DROP INDEX managed_tx_mined;
ALTER TABLE managed_tx DROP COLUMN fork_pending;
