-- The finality sweep re-checks, every pass, the blocks of outcomes reported
-- within the reorg watch (TXFENCE_REORG_WATCH, 10 minutes by default): which
-- signers have some, and each signer's blocks. Both read every finished
-- transaction the table ever held, and a table only grows. These indexes
-- keep both to the window.

-- +goose Up
CREATE INDEX managed_tx_finalized ON managed_tx (finalized_at)
    WHERE state IN ('CONFIRMED', 'FAILED_FINAL');
CREATE INDEX managed_tx_reported ON managed_tx (chain_id, signer, finalized_at)
    WHERE state IN ('CONFIRMED', 'FAILED_FINAL');

-- +goose Down
DROP INDEX managed_tx_reported;
DROP INDEX managed_tx_finalized;
