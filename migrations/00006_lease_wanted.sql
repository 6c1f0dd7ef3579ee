-- A signer's chain lease is shared by Submit, Receipt and the sweeps. A
-- hot signer's drain keeps it while nobody else needs it (handing it on
-- every half second cost the drain most of its broadcast rate) and lets
-- it go soon after another invocation marks it wanted. Taking the lease
-- clears the mark.

-- +goose Up
ALTER TABLE signer_lease ADD COLUMN wanted_at timestamptz;

-- +goose Down
ALTER TABLE signer_lease DROP COLUMN wanted_at;
