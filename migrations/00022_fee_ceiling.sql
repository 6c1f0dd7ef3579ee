-- A transaction's worst-case cost is its value and its gas limit at its fee
-- ceiling: the most per gas any of its attempts (the first, a bump, a
-- replacement, a cancel) may pay, the lower of the chain's fee cap and the
-- creator's policy's maxFeePerGas. The rolling caps count that cost, not the
-- value alone: a sender whose value cap was 0 could burn the signer's
-- balance in fees.
--
-- managed_tx.fee_ceiling keeps the creator's maxFeePerGas (null: none, the
-- chain's cap alone bounds the attempts). managed_tx.refusal is the node's
-- refusal of a transaction's payload for good (a fee above the node's cap,
-- a gas limit above the block's, an invalid signature, ...): its nonce is
-- filled by a placeholder, and the transaction ends FAILED_FINAL with that
-- reason instead of holding its signer's later nonces for ever.
--
-- The allocation functions that take them (the cost and the ceiling of each
-- request) live in migrations/functions, their one source, which migrate
-- applies after the schema migrations; no migration holds a function body
-- from here on. The versions of 00015 and 00019, which the previous release
-- calls during a rolling deploy, stay until a later migration drops them.
-- txfence_allocate_fenced has been dead since 00011: dropped.

-- +goose Up
ALTER TABLE managed_tx ADD COLUMN fee_ceiling txfence_uint256, ADD COLUMN refusal text;
DROP FUNCTION IF EXISTS txfence_allocate_fenced(text, bigint[], text[], bigint[]);

-- +goose Down
DROP FUNCTION IF EXISTS txfence_allocate(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[], bytea[], text[], text[],
    bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[], text[], text[]);
DROP FUNCTION IF EXISTS txfence_allocate_plain(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[], bytea[], text[], text[],
    bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[], text[], text[]);
ALTER TABLE managed_tx DROP COLUMN fee_ceiling, DROP COLUMN refusal;
