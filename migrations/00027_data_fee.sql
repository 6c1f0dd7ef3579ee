-- A transaction's worst-case cost on an L2 is its value, its execution fee
-- bound (its gas limit at its fee ceiling) and the L2 data fee: what the
-- chain charges beside the execution gas for posting it to its L1 (an OP
-- Stack chain's GasPriceOracle, an Arbitrum chain's NodeInterface), priced
-- at creation. The caps count the sum; the row keeps the two fees apart, so
-- that the transaction's view can show both parts.
--
-- managed_tx.execution_fee is the execution fee bound (null: nothing bounded
-- it, or the row predates this); managed_tx.data_fee the L2 data fee (zero
-- on a chain without one; null: the row predates this).
--
-- The allocation functions take them as r_execution_fee and r_data_fee,
-- appended to their arguments, in migrations/functions; the versions
-- before, which the previous release calls during a rolling deploy, stay
-- until a later migration drops them.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN execution_fee txfence_uint256, ADD COLUMN data_fee txfence_uint256;

-- +goose Down
-- The allocation functions that take r_data_fee go first, found by that
-- argument whatever else their signatures hold.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('txfence_allocate', 'txfence_allocate_plain') AND 'r_data_fee' = ANY (p.proargnames)
    LOOP
        EXECUTE 'DROP FUNCTION ' || f::text;
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE managed_tx DROP COLUMN execution_fee, DROP COLUMN data_fee;
