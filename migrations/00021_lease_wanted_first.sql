-- A signer's chain lease can be wanted first: by a confirmation, whose
-- write is small and decides the finality lag, while a hot signer's drain
-- holds the lease and receipt writes wait for it too (migration 00006's
-- mark). A drain lets a lease wanted first go after the batch it is on
-- rather than after its hold (250 ms), and the other waiters with work
-- (receipts, the resubmit sweep) do not take it before the confirmation
-- did (or gave up), so that a confirmation waits behind one drain batch
-- and not also behind the receipt writes that take the lease as the drain
-- lets it go. Taking the lease clears the mark, as wanted_at's.

-- +goose Up
ALTER TABLE signer_lease ADD COLUMN wanted_first_at timestamptz;

-- +goose Down
ALTER TABLE signer_lease DROP COLUMN wanted_first_at;
