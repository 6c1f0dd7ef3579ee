-- The contract of migration 00014, first half. Code older than 00014
-- marked a published outbox row sent (sent_at) instead of deleting it,
-- and during 00014's deploy it could still run and mark rows sent after
-- 00014 had deleted those before. Nothing relays or deletes such a row
-- (the relays skip it), so they are deleted here, and from this release
-- on no code reads sent_at: every row in the outbox waits to be
-- published. The column itself goes in a later release, since the
-- release before this one, which still reads it, may run during this
-- one's deploy.

-- +goose Up
DELETE FROM outbox WHERE sent_at IS NOT NULL;

-- +goose Down
-- Nothing to restore: the rows deleted had been published.
SELECT 1;
