-- Submit sends a signer's ALLOCATED transactions in nonce order up to the
-- first one held: one backing off, or a STUCK one no node ever accepted.
-- Finding the holds scanned the signer's every row, once per candidate: a
-- hot signer with 26,000 rows took 215ms to pick its next 64, and the
-- drain spent most of its time there. The holds are few; so is this index.

-- +goose Up
CREATE INDEX managed_tx_held ON managed_tx (chain_id, signer, nonce)
    WHERE (state = 'ALLOCATED' AND next_attempt_at IS NOT NULL)
       OR (state = 'STUCK' AND broadcast_count = 0);

-- +goose Down
DROP INDEX managed_tx_held;
