-- The address and hash domains checked their form with a bounded
-- repetition ('^0x[0-9a-f]{40}$'), which PostgreSQL's regular expressions
-- run several times slower than the same language written as a length and
-- an unbounded class, and every row of managed_tx checks two addresses
-- (its signer and recipient) and every allocation call's cursor write one
-- per signer.
--
-- The new constraints accept exactly the values the old ones did ([0-9a-f]
-- are one byte each, so 42 bytes are 0x and 40 digits). They are added NOT
-- VALID: the rows already stored were checked by the old constraints, and
-- validating would lock and read every table that uses the domains; new
-- values are checked all the same.

-- +goose Up
ALTER DOMAIN txfence_address ADD CONSTRAINT txfence_address_form
    CHECK (octet_length(VALUE) = 42 AND VALUE ~ '^0x[0-9a-f]*$') NOT VALID;
ALTER DOMAIN txfence_address DROP CONSTRAINT txfence_address_check;
ALTER DOMAIN txfence_hash ADD CONSTRAINT txfence_hash_form
    CHECK (octet_length(VALUE) = 66 AND VALUE ~ '^0x[0-9a-f]*$') NOT VALID;
ALTER DOMAIN txfence_hash DROP CONSTRAINT txfence_hash_check;

-- +goose Down
ALTER DOMAIN txfence_hash ADD CONSTRAINT txfence_hash_check CHECK (VALUE ~ '^0x[0-9a-f]{64}$') NOT VALID;
ALTER DOMAIN txfence_hash DROP CONSTRAINT txfence_hash_form;
ALTER DOMAIN txfence_address ADD CONSTRAINT txfence_address_check CHECK (VALUE ~ '^0x[0-9a-f]{40}$') NOT VALID;
ALTER DOMAIN txfence_address DROP CONSTRAINT txfence_address_form;
