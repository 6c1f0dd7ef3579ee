-- txfence_note_reported: the trigger function that keeps reported_block,
-- the blocks that hold reported outcomes (CONFIRMED or FAILED_FINAL with a
-- receipt), a row for each minute a block had an outcome reported in. The
-- finality sweep re-checks the blocks of the outcomes reported within the
-- reorg watch: a reorg deeper than the confirmations reopens them. A
-- trigger writes them, in the transaction of the outcome, whoever writes
-- it; a block's first outcome of a minute adds its row, the others find it.
--
-- This file is the function's one source: migrate applies it, as CREATE
-- OR REPLACE, after the schema migrations (migrations.Up).

CREATE OR REPLACE FUNCTION txfence_note_reported() RETURNS trigger
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
