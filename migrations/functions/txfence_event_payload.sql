-- txfence_event_payload: a feed event's completion-topic message
-- (txm.CompletionMessage as JSON, without its seq and newFork, which
-- numbering sets), built where the event is recorded as pending: by the
-- store's statements and by the allocation functions, which record
-- TxAccepted. A plain SQL expression, inlined into the statements that
-- call it. p_sub_state '' and p_shard '' are none; p_detail holds the
-- event's own fields (hash, fees, block, ...), its nulls dropped.
--
-- This file is the function's one source: migrate applies it, as CREATE
-- OR REPLACE, after the schema migrations (migrations.Up).

CREATE OR REPLACE FUNCTION txfence_event_payload(p_type text, p_tx uuid, p_chain bigint, p_signer text, p_state text,
    p_sub_state text, p_nonce bigint, p_version bigint, p_detail jsonb, p_shard text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('type', p_type, 'seq', 0, 'txId', p_tx::text, 'chainId', p_chain,
        'signer', p_signer, 'state', p_state, 'newFork', false, 'subState', nullif(p_sub_state, ''),
        'nonce', p_nonce, 'version', p_version, 'shard', nullif(p_shard, '')))
        || coalesce(jsonb_strip_nulls(p_detail), '{}'::jsonb)
$$;
