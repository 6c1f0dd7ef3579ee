-- txfence_event_attributes: the completion-topic attributes of a feed
-- event (without its seq and newFork, which numbering sets): what a
-- subscription filters on. A lifecycle event has lifecycle=true, an
-- outcome no such attribute, so that `NOT attributes:lifecycle` keeps a
-- subscription to the outcomes. Built with txfence_event_payload.
--
-- This file is the function's one source: migrate applies it, as CREATE
-- OR REPLACE, after the schema migrations (migrations.Up).

CREATE OR REPLACE FUNCTION txfence_event_attributes(p_type text, p_chain bigint, p_signer text, p_state text,
    p_sub_state text, p_version bigint, p_lifecycle boolean, p_shard text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('chain', p_chain::text, 'signer', p_signer, 'state', p_state,
        'type', p_type, 'subState', coalesce(p_sub_state, ''), 'version', p_version::text,
        'lifecycle', CASE WHEN p_lifecycle THEN 'true' END, 'shard', nullif(p_shard, '')))
$$;
