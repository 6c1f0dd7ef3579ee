-- txfence_allocate_plain: the allocation of a plain batch, the commonest
-- kind: no request id to look up (each was made up for its request, so
-- that it cannot exist) and no principal capped, each signer's requests
-- together and the signers in the order of their first request, as the
-- create path builds every batch. It takes the same locks (every signer's
-- lease row, in key order), judges and numbers as txfence_allocate, and
-- writes the same rows, prompts, cursors and lease rows under the same
-- checks, but without what only the general batch needs: the look-ups, the
-- caps, the numbering by a window over the outcomes and the answers
-- gathered by ordered aggregates, whose plans' set-up and sorts cost more
-- than a plain batch's rows. The caller picks it for plain batches; it
-- refuses any other (22023), so that a batch is never answered without its
-- look-ups or caps. A batch with a window to check (a w_* element with a
-- period) is not plain; its records (tokens its requests move out of their
-- signers) are, and, with every request's worst-case cost, are counted in
-- the window usage of the signers that are watched (window_watch), as
-- txfence_allocate counts them.
--
-- A made-up request id repeated in a batch makes the call fail on
-- managed_tx_request_id_key, where txfence_allocate would answer the copy
-- as existing: the create path makes each id from its own transaction id.
--
-- This file is the function's one source: migrate applies it, as CREATE
-- OR REPLACE, after the schema migrations (migrations.Up).

CREATE OR REPLACE FUNCTION txfence_allocate_plain(
    p_owner      text,
    p_lease      interval,
    p_skew       interval,
    p_topic      text,
    s_chain      bigint[],
    s_signer     text[],
    s_pending    bigint[],  -- the chain's pending nonce, null where not asked
    r_group      int[],
    r_id         uuid[],
    r_request_id text[],
    r_lookup     bool[],    -- false: a request id made up for this request, which cannot exist
    r_fp         bytea[],
    r_to         text[],
    r_value      text[],
    r_data       bytea[],
    r_gas        bigint[],
    r_max_fee    text[],
    r_max_prio   text[],
    r_gas_price  text[],
    r_meta       text[],
    r_principal  text[],
    r_hour_count int[],     -- the principal's rolling caps; null: no such cap
    r_hour_value text[],
    r_day_count  int[],
    r_day_value  text[],
    r_fee_ceiling text[],  -- the creator's cap on what any attempt pays per gas; null: the chain's cap
    r_cost       text[],   -- the worst-case cost, value + gas × fee ceiling + data fee, which the caps count
    w_req        int[],    -- the windows, as txfence_allocate takes them: a plain batch has records only
    w_scope      text[],
    w_asset      text[],
    w_period     text[],
    w_amount     text[],
    w_max_amount text[],
    w_max_count  int[],
    w_label      text[],
    r_pending    bool[],    -- true: an approved transaction's held row (txfence_allocate's; never in a plain batch)
    r_execution_fee text[], -- the execution fee bound, gas × fee ceiling, written on the row; null: none
    r_data_fee   text[],   -- the L2 data fee priced at creation, written on the row
    r_send_via   text[])   -- the route the create named for every broadcast (send_via); null: the signer's
RETURNS TABLE (o_idx int, o_outcome text, o_tx_id uuid, o_nonce bigint, o_rule text,
    o_group int, o_token bigint, o_acquired text, o_outbox_id bigint, o_created_at timestamptz,
    o_contended bool)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_signers  int := coalesce(cardinality(s_chain), 0);
    v_requests int := coalesce(cardinality(r_group), 0);
    v_lock_timeout text := current_setting('lock_timeout');
    v_deadline timestamptz; -- when the lease taken here would expire
    v_token    bigint[];  -- per signer
    v_acquired text[];    -- per signer: renewed, taken_over (null: held by another)
    v_contended bool[];   -- per signer: another allocation released its lease row while this call ran
    v_tid      tid[];     -- per signer: its locked lease row, written by this address at the end
    v_base     bigint[];  -- per signer: the first nonce to hand out
    v_outbox   bigint[];  -- per signer: the submit prompt
    v_locked   int;
    v_inserted bigint;
    v_advanced bigint;
    v_released bigint;
    v_g        int;
    v_i        int;
    v_w        int := coalesce(cardinality(w_req), 0);
    v_watched  int[];     -- the signers (g) whose every send is counted
BEGIN
    IF v_signers = 0 OR v_requests = 0 OR p_owner IS NULL OR p_owner = ''
       OR cardinality(s_signer) <> v_signers OR cardinality(s_pending) <> v_signers
       OR (v_requests <> ANY (ARRAY[cardinality(r_id), cardinality(r_request_id), cardinality(r_lookup),
            cardinality(r_fp), cardinality(r_to), cardinality(r_value), cardinality(r_data), cardinality(r_gas),
            cardinality(r_max_fee), cardinality(r_max_prio), cardinality(r_gas_price), cardinality(r_meta),
            cardinality(r_principal), cardinality(r_hour_count), cardinality(r_hour_value),
            cardinality(r_day_count), cardinality(r_day_value), cardinality(r_fee_ceiling),
            cardinality(r_cost), cardinality(r_execution_fee), cardinality(r_data_fee),
            cardinality(r_send_via)])) IS NOT FALSE
       OR (v_w <> ANY (ARRAY[coalesce(cardinality(w_scope), 0), coalesce(cardinality(w_asset), 0),
            coalesce(cardinality(w_period), 0), coalesce(cardinality(w_amount), 0), coalesce(cardinality(w_max_amount), 0),
            coalesce(cardinality(w_max_count), 0), coalesce(cardinality(w_label), 0)])) IS NOT FALSE THEN
        RAISE EXCEPTION 'txfence_allocate_plain: bad arguments' USING ERRCODE = '22023';
    END IF;
    -- A plain batch only: nothing to look up, no cap, no window to check
    -- (records of a signer's tokens only), each signer's requests together
    -- (signer 1's first, then signer 2's, ...).
    IF (true = ANY (r_lookup)) IS NOT FALSE
       OR cardinality(array_remove(r_hour_count, NULL)) > 0 OR cardinality(array_remove(r_hour_value, NULL)) > 0
       OR cardinality(array_remove(r_day_count, NULL)) > 0 OR cardinality(array_remove(r_day_value, NULL)) > 0
       OR coalesce(cardinality(array_remove(w_period, NULL)), 0) > 0
       OR EXISTS (SELECT 1 FROM unnest(w_req, w_scope, w_asset, w_amount) AS w(req, scope, asset, amount)
            WHERE (w.req BETWEEN 1 AND v_requests AND w.scope = 's' AND w.asset IS NOT NULL AND w.amount IS NOT NULL) IS NOT TRUE)
       OR r_group[1] IS DISTINCT FROM 1 OR r_group[v_requests] IS DISTINCT FROM v_signers THEN
        RAISE EXCEPTION 'txfence_allocate_plain: not a plain batch' USING ERRCODE = '22023';
    END IF;
    -- An approved transaction numbers the row it was held in, which only
    -- txfence_allocate does.
    IF cardinality(r_pending) IS DISTINCT FROM v_requests OR (true = ANY (r_pending)) IS NOT FALSE THEN
        RAISE EXCEPTION 'txfence_allocate_plain: not a plain batch' USING ERRCODE = '22023';
    END IF;
    FOR v_i IN 2 .. v_requests LOOP
        IF (r_group[v_i] - r_group[v_i - 1] IN (0, 1)) IS NOT TRUE THEN
            RAISE EXCEPTION 'txfence_allocate_plain: not a plain batch' USING ERRCODE = '22023';
        END IF;
    END LOOP;

    -- Lock every signer's lease row, in (chain, signer) order, and judge it:
    -- renewed (ours and live), taken over (expired by more than the skew, or
    -- released), or held by another. Waiting here behind other allocators
    -- is the designed queue, bounded by statement_timeout, not a stuck lock:
    -- lock_timeout is lifted for it. A row released after this call began
    -- (the rows read are the versions this call waited for) was in another
    -- allocation's hands meanwhile: the signer is contended, which the
    -- caller uses to keep it apart from the signers that are not. Each row
    -- is found by its key (in key order, the order the locks are taken in),
    -- and its address kept: the row is locked until this transaction ends,
    -- so the version locked is the one written at the end.
    PERFORM set_config('lock_timeout', '0', true);
    SELECT array_agg(CASE WHEN k.acquired = 'renewed' THEN k.fencing_token ELSE k.fencing_token + 1 END ORDER BY k.g),
           array_agg(k.acquired ORDER BY k.g), array_agg(k.contended ORDER BY k.g), array_agg(k.tid ORDER BY k.g), count(*)
    INTO v_token, v_acquired, v_contended, v_tid, v_locked
    FROM (
        SELECT u.g::int AS g, l.fencing_token, l.tid,
            CASE
                WHEN l.owner = p_owner AND l.expires_at > clock_timestamp() THEN 'renewed'
                WHEN l.expires_at <= clock_timestamp() - p_skew THEN 'taken_over'
            END AS acquired,
            l.updated_at > statement_timestamp() AS contended
        FROM (SELECT * FROM unnest(s_chain, s_signer) WITH ORDINALITY AS x(c, s, g) ORDER BY x.c, x.s) u
        CROSS JOIN LATERAL (
            SELECT l.ctid AS tid, l.fencing_token, l.owner, l.expires_at, l.updated_at
            FROM signer_lease l
            WHERE l.chain_id = u.c AND l.signer = u.s AND l.scope = 'nonce'
            FOR UPDATE) l) k;
    PERFORM set_config('lock_timeout', v_lock_timeout, true);
    v_deadline := clock_timestamp() + p_lease;
    IF v_locked <> v_signers THEN
        RAISE EXCEPTION 'nonce lease row missing' USING ERRCODE = 'TF004';
    END IF;
    v_g := array_position(v_acquired, NULL);
    IF v_g IS NOT NULL THEN
        RAISE EXCEPTION 'nonce lease held by another owner' USING ERRCODE = 'TF003', HINT = v_g::text;
    END IF;

    -- Where each signer's nonces start: max(cursor, the chain's pending
    -- nonce where it was asked), 0 for a new signer. A request's nonce is
    -- its signer's start plus its place among the signer's requests, which
    -- are together from the signer's first (array_position).
    v_base := ARRAY(
        SELECT coalesce(greatest((
            SELECT c.next_nonce FROM signer_nonce_cursor c WHERE c.chain_id = u.c AND c.signer = u.s), u.p), 0)
        FROM unnest(s_chain, s_signer, s_pending) WITH ORDINALITY AS u(c, s, p, g)
        ORDER BY u.g);

    -- Each row with its TxAccepted event (version 1), pending: the drain
    -- that sends it numbers it and builds its message then
    -- (txfence_event_payload.sql), since building JSON here cost creates a
    -- fifth of their throughput.
    WITH ins AS (
        INSERT INTO managed_tx (id, chain_id, signer, nonce, request_id, payload_fingerprint, to_address, value,
            data, gas_limit, max_fee_per_gas, max_priority_fee_per_gas, gas_price, metadata, state, principal,
            fencing_token, created_owner, created_token, created_at, updated_at, fee_ceiling, execution_fee, data_fee,
            send_via, version)
        SELECT r.id, s_chain[r.g], s_signer[r.g], v_base[r.g] + r.k - array_position(r_group, r.g), r.rid, r.fp, r.to_address,
            coalesce(r.v, '0')::numeric, coalesce(r.data, '\x'), r.gas, r.max_fee::numeric, r.max_prio::numeric,
            r.gas_price::numeric, r.meta::jsonb, 'ALLOCATED', r.p, v_token[r.g], p_owner, v_token[r.g], now(), now(), r.fc::numeric,
            r.xf::numeric, r.df::numeric, r.sv, 1
        FROM unnest(r_group, r_id, r_request_id, r_fp, r_to, r_value, r_data, r_gas, r_max_fee, r_max_prio, r_gas_price,
                r_meta, r_principal, r_fee_ceiling, r_execution_fee, r_data_fee, r_send_via)
            WITH ORDINALITY AS r(g, id, rid, fp, to_address, v, data, gas, max_fee, max_prio, gas_price, meta, p, fc, xf, df, sv, k)
        RETURNING id, chain_id, signer, state, nonce, version)
    INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, type, version, lifecycle, nonce)
        SELECT a.id, a.chain_id, a.signer, a.state, false, 'TxAccepted', a.version, true, a.nonce
        FROM ins a
        ORDER BY a.chain_id, a.signer, a.nonce;
    GET DIAGNOSTICS v_inserted = ROW_COUNT;
    IF v_inserted <> v_requests OR clock_timestamp() >= v_deadline THEN
        RAISE EXCEPTION 'allocate_insert' USING ERRCODE = 'TF001', HINT = '1';
    END IF;

    -- The window usage (this minute's bucket) of the watched signers: each
    -- request's worst-case cost under its signer's native key, and the
    -- tokens it moves out under the signer's token keys.
    v_watched := ARRAY(
        SELECT u.g FROM unnest(s_signer) WITH ORDINALITY AS u(s, g)
        WHERE EXISTS (SELECT 1 FROM window_watch ww WHERE ww.signer = u.s)
           OR EXISTS (SELECT 1 FROM window_watch ww WHERE ww.signer = '*'));
    IF cardinality(v_watched) > 0 THEN
        INSERT INTO window_usage AS wu (key, minute, tx_count, amount)
        SELECT x.k, date_trunc('minute', clock_timestamp()), count(*), sum(x.a)
        FROM (
            SELECT 's/' || s_chain[r.g] || '/' || s_signer[r.g] || '/native' AS k, coalesce(r.cost, r.v, '0')::numeric AS a
            FROM unnest(r_group, r_value, r_cost) AS r(g, v, cost)
            WHERE r.g = ANY (v_watched)
            UNION ALL
            SELECT 's/' || s_chain[r_group[w.req]] || '/' || s_signer[r_group[w.req]] || '/' || w.asset, w.a::numeric
            FROM unnest(w_req, w_asset, w_amount) AS w(req, asset, a)
            WHERE r_group[w.req] = ANY (v_watched)) x
        GROUP BY x.k
        ORDER BY x.k
        ON CONFLICT (key, minute) DO UPDATE
        SET tx_count = wu.tx_count + EXCLUDED.tx_count, amount = wu.amount + EXCLUDED.amount;
    END IF;

    -- One submit prompt per signer (each has new rows), the cursors (never
    -- backwards) and the lease rows, released; fenced again, so that a
    -- batch that outlived its lease while it wrote commits nothing.
    WITH ob AS (
        INSERT INTO outbox (topic, ordering_key, payload)
        SELECT p_topic, u.s, jsonb_build_object('chainId', u.c, 'signer', u.s)
        FROM unnest(s_chain, s_signer) WITH ORDINALITY AS u(c, s, g)
        ORDER BY u.g
        RETURNING id, (payload->>'chainId')::bigint AS c, ordering_key AS s)
    SELECT array_agg(ob.id ORDER BY u.g) INTO v_outbox
    FROM unnest(s_chain, s_signer) WITH ORDINALITY AS u(c, s, g)
    LEFT JOIN ob ON ob.c = u.c AND ob.s = u.s;
    INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, chain_synced_at, fencing_token)
    SELECT u.c, u.s,
        v_base[u.g] + coalesce(array_position(r_group, u.g::int + 1), v_requests + 1) - array_position(r_group, u.g::int),
        CASE WHEN u.p IS NOT NULL THEN clock_timestamp() END, v_token[u.g]
    FROM unnest(s_chain, s_signer, s_pending) WITH ORDINALITY AS u(c, s, p, g)
    ORDER BY u.g
    ON CONFLICT (chain_id, signer) DO UPDATE
    SET next_nonce = EXCLUDED.next_nonce,
        chain_synced_at = coalesce(EXCLUDED.chain_synced_at, c.chain_synced_at),
        fencing_token = EXCLUDED.fencing_token,
        updated_at = clock_timestamp()
    WHERE c.next_nonce <= EXCLUDED.next_nonce;
    GET DIAGNOSTICS v_advanced = ROW_COUNT;
    UPDATE signer_lease AS l
    SET owner = p_owner, fencing_token = x.t, expires_at = '-infinity', updated_at = clock_timestamp(), wanted_at = NULL
    FROM unnest(v_tid, v_token) AS x(tid, t)
    WHERE l.ctid = x.tid;
    GET DIAGNOSTICS v_released = ROW_COUNT;
    IF v_released <> v_signers THEN
        RAISE EXCEPTION 'allocate_release: % of % lease rows written', v_released, v_signers USING ERRCODE = 'XX000';
    END IF;
    IF clock_timestamp() >= v_deadline THEN
        RAISE EXCEPTION 'allocate_cursor' USING ERRCODE = 'TF001', HINT = '1';
    END IF;
    IF v_advanced <> v_signers THEN
        SELECT u.g::int INTO v_g
        FROM unnest(s_chain, s_signer, v_base) WITH ORDINALITY AS u(c, s, b, g)
        JOIN signer_nonce_cursor c ON c.chain_id = u.c AND c.signer = u.s
        WHERE c.next_nonce > u.b
        LIMIT 1;
        RAISE EXCEPTION 'cursor would move backwards' USING ERRCODE = 'TF002', HINT = coalesce(v_g, 1)::text;
    END IF;

    RETURN QUERY
    SELECT r.k::int, 'created'::text, r.id, v_base[r.g] + r.k - array_position(r_group, r.g), NULL::text, r.g,
        v_token[r.g], v_acquired[r.g], v_outbox[r.g], now(), v_contended[r.g]
    FROM unnest(r_group, r_id) WITH ORDINALITY AS r(g, id, k);
END
$$;
