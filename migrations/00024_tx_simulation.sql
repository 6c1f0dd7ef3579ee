-- tx_simulation: what a create's simulation showed, one row per simulated
-- transaction (a plain transfer is not simulated and has none): how the
-- node simulated it, the effects (txm.Effect's JSON form, in order) and,
-- for a revert accepted under an advisory simulation policy, its decoded
-- reason. Written in the allocation's own transaction, beside the row; kept
-- apart from managed_tx so that the allocation functions and the hot plain
-- path are unchanged.

-- +goose Up
CREATE TABLE tx_simulation (
    tx_id   uuid  PRIMARY KEY REFERENCES managed_tx (id) ON DELETE CASCADE,
    method  text  NOT NULL CHECK (method <> ''),
    effects jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(effects) = 'array'),
    revert  text  CHECK (revert <> '')
);

-- +goose Down
DROP TABLE tx_simulation;
