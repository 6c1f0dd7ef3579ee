-- txfence_allocate finds each signer of a batch by key: its lease row, its
-- nonce cursor, a request id's row. Its plans are generic (planned once per
-- session, for any batch), and for a batch of about ten signers against a
-- lease table of 1,000 the planner chose to hash the batch and read the
-- whole lease table, twice a call (the lock and the release), and the whole
-- cursor table once: each call's cost grew with every signer the database
-- holds, not with the signers it allocates for. A batch of 12 of 1,000
-- signers: the lock 0.36 ms with the table read against 0.19 ms by its key,
-- the cursor read 0.30 against 0.21 ms, in one quiet call each (auto_explain).
-- With sequential scans priced out, each is an index probe per signer;
-- a table with no usable index is still read, at that price.

-- +goose Up
ALTER FUNCTION txfence_allocate(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[],
    bytea[], text[], text[], bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[])
    SET enable_seqscan = off;

-- +goose Down
ALTER FUNCTION txfence_allocate(text, interval, interval, text, bigint[], text[], bigint[], int[], uuid[], text[], bool[],
    bytea[], text[], text[], bytea[], bigint[], text[], text[], text[], text[], text[], int[], text[], int[], text[])
    RESET enable_seqscan;
