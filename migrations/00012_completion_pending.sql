-- Reported outcomes are numbered after their transaction commits, many at a
-- time. A finality write used to take the feed's lock (an advisory lock
-- that makes seqs become visible in order) and hold it through its COMMIT:
-- every signer's confirmations queued on one lock, each holding it for a
-- WAL flush.
-- Now the write commits its outcomes here, with the transaction's move, and
-- then numbers every pending outcome under the lock in one statement (its
-- own, and those of every write that committed meanwhile): concurrent
-- writers share one numbering, and a numbering that finds nothing writes
-- nothing and flushes nothing. What a crash leaves here is numbered by the
-- next finality pass.

-- +goose Up
CREATE TABLE completion_pending (
    id         bigint          GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id      uuid            NOT NULL REFERENCES managed_tx (id),
    chain_id   bigint          NOT NULL,
    signer     txfence_address NOT NULL,
    state      text            NOT NULL CHECK (state IN ('CONFIRMED', 'FAILED_FINAL', 'STUCK')),
    sub_state  text,
    new_fork   boolean         NOT NULL,
    payload    jsonb           NOT NULL, -- the completion message, without seq and newFork
    attributes jsonb           NOT NULL,
    created_at timestamptz     NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
INSERT INTO tx_completion (tx_id, chain_id, signer, state, new_fork, sub_state)
SELECT tx_id, chain_id, signer, state, new_fork OR EXISTS (SELECT 1 FROM tx_completion c WHERE c.tx_id = p.tx_id), sub_state
FROM completion_pending p ORDER BY id;
DROP TABLE completion_pending;
