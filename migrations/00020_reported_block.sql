-- reported_block: the blocks that hold reported outcomes (CONFIRMED or
-- FAILED_FINAL with a receipt), a row for each minute a block had an
-- outcome reported in. The finality sweep re-checks, every pass, the blocks
-- of the outcomes reported within the reorg watch (TXFENCE_REORG_WATCH, 10
-- minutes by default): a reorg deeper than the confirmations reopens them.
-- It found them in managed_tx, by reading and sorting every outcome of
-- the watch for its distinct blocks, a read that grows with the outcomes
-- (at 500 a second a 10-minute watch holds 300,000) where the blocks are
-- a few dozen. Here the watch holds a row per block and minute.
--
-- A trigger writes them, in the transaction of the outcome, whoever writes
-- it: the release before this one, which does not know the table, may
-- still finalize outcomes while this one deploys. A block's first outcome
-- of a minute adds its row; the others find it. Since the rows are by
-- minute, a block is watched from its last outcome for at least the watch.
-- Two writers adding the same block's row at once wait for each other's
-- commit (a finality write is one statement, committed at once).

-- +goose Up
CREATE TABLE reported_block (
    chain_id     bigint       NOT NULL,
    block_number bigint       NOT NULL,
    block_hash   txfence_hash NOT NULL,
    minute       timestamptz  NOT NULL,
    PRIMARY KEY (chain_id, block_number, block_hash, minute)
);
CREATE INDEX reported_block_minute ON reported_block (minute);

-- +goose StatementBegin
CREATE FUNCTION txfence_note_reported() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    m timestamptz := date_trunc('minute', NEW.finalized_at);
BEGIN
    PERFORM 1 FROM reported_block r
    WHERE r.chain_id = NEW.chain_id AND r.block_number = NEW.receipt_block_number
      AND r.block_hash = NEW.receipt_block_hash AND r.minute = m;
    IF NOT FOUND THEN
        INSERT INTO reported_block (chain_id, block_number, block_hash, minute)
        VALUES (NEW.chain_id, NEW.receipt_block_number, NEW.receipt_block_hash, m)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- What was reported before: read without holding up the writers. The
-- trigger's lock (until the commit) then holds them up only for the catch-up
-- of what they reported meanwhile, found through managed_tx_finalized.
INSERT INTO reported_block (chain_id, block_number, block_hash, minute)
SELECT DISTINCT chain_id, receipt_block_number, receipt_block_hash, date_trunc('minute', finalized_at)
FROM managed_tx
WHERE state IN ('CONFIRMED', 'FAILED_FINAL') AND receipt_block_number IS NOT NULL AND finalized_at IS NOT NULL;

CREATE TRIGGER managed_tx_reported_block
    AFTER INSERT OR UPDATE OF state ON managed_tx
    FOR EACH ROW
    WHEN (NEW.state IN ('CONFIRMED', 'FAILED_FINAL') AND NEW.receipt_block_number IS NOT NULL
          AND NEW.finalized_at IS NOT NULL)
    EXECUTE FUNCTION txfence_note_reported();

INSERT INTO reported_block (chain_id, block_number, block_hash, minute)
SELECT DISTINCT chain_id, receipt_block_number, receipt_block_hash, date_trunc('minute', finalized_at)
FROM managed_tx
WHERE state IN ('CONFIRMED', 'FAILED_FINAL') AND receipt_block_number IS NOT NULL
  AND finalized_at >= now() - interval '1 hour'
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TRIGGER managed_tx_reported_block ON managed_tx;
DROP FUNCTION txfence_note_reported();
DROP TABLE reported_block;
