-- A transaction whose round of work failed because no endpoint of its
-- chain answered (an outage of the chain's endpoints, not a refusal) backs
-- off like any other, but its backoff ends as soon as the endpoints answer
-- again: a node restarted after 20 seconds left signed rows waiting for
-- their own backoff, and their signer's later rows behind them.
-- backoff_outage says the row's current backoff is such a one (NoteFailure
-- sets it with every failure); managed_tx_outage finds the few rows that
-- back off so, by chain, for the sweep that resumes them. A row leaves the
-- index when its backoff is cleared, by success or by that sweep.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN backoff_outage boolean NOT NULL DEFAULT false;
CREATE INDEX managed_tx_outage ON managed_tx (chain_id, signer)
    WHERE backoff_outage AND next_attempt_at IS NOT NULL;

-- +goose Down
DROP INDEX managed_tx_outage;
ALTER TABLE managed_tx DROP COLUMN backoff_outage;
