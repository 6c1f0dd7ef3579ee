-- A published outbox row is deleted in the transaction that claimed it,
-- instead of being marked sent and kept: nothing ever read a sent row, and
-- nothing ever deleted one, so the table grew by a row for every allocation
-- call's signer, every drain batch and every outcome, for ever. The claim
-- was a row lock and the mark a new row version with an index entry; the
-- delete is one write. The table now holds only what waits to be
-- published, so the partial index of unsent rows is the primary key's
-- order over the whole table, one index entry fewer per row.
--
-- Expand, then contract: sent_at stays for this release, since code still
-- running during a deploy marks rows sent (its rows are never claimed
-- again, as before); the release after drops the column and those rows.

-- +goose Up
DELETE FROM outbox WHERE sent_at IS NOT NULL;
DROP INDEX outbox_unsent;

-- +goose Down
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;
