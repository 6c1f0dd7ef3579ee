-- A create may name the route every broadcast of its transaction takes
-- (sendVia): a send-only endpoint of its chain, or 'public' (the chain's
-- read endpoints only), instead of its signer's route.
--
-- managed_tx.send_via is that name (null: the signer's route). The
-- allocation functions take it as r_send_via, appended to their
-- arguments, in migrations/functions; the versions before, which the
-- previous release calls during a rolling deploy, stay until a later
-- migration drops them.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN send_via text CHECK (char_length(send_via) BETWEEN 1 AND 32);

-- +goose Down
-- The allocation functions that take r_send_via go first, found by that
-- argument whatever else their signatures hold.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('txfence_allocate', 'txfence_allocate_plain') AND 'r_send_via' = ANY (p.proargnames)
    LOOP
        EXECUTE 'DROP FUNCTION ' || f::text;
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE managed_tx DROP COLUMN send_via;
