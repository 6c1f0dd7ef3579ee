-- The contract of migration 00014, second half: outbox.sent_at goes. No
-- code has read or written it since the release of 00017 (every row in the
-- outbox waits to be published; a relay deletes what it published), and
-- that release is the one before this, the only one that may still run
-- during this one's deploy.

-- +goose Up
ALTER TABLE outbox DROP COLUMN sent_at;

-- +goose Down
-- The column as it was, empty: every row left waits to be published.
ALTER TABLE outbox ADD COLUMN sent_at timestamptz;
