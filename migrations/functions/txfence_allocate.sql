-- txfence_allocate: the allocation of a batch of create requests in one
-- call. It takes the nonce leases of the batch's signers, reads their
-- cursors and the request ids that exist, refuses what a rolling cap
-- forbids, numbers the rest, writes the rows, one submit prompt per signer,
-- the usage and the cursors, and releases the leases.
-- The caller sends it as one statement in an implicit transaction, so the
-- lease rows' locks are held from the lock to the commit with no client
-- round trip inside: concurrent allocators for one signer queue on the
-- lease row and each goes through in the server's time.
--
-- It is plpgsql, not one SQL statement, because every statement after the
-- lock wait must see what the previous holder committed (a new snapshot
-- per statement); one statement's snapshot predates its own lock wait.
--
-- Signers are given as arrays s_* (one element per signer, 1-based index
-- g), requests as arrays r_* (one element per request, in order; r_group
-- is the request's g). It answers one row per request: created (with its
-- nonce), existing (the id of the row, in the database or earlier in this
-- batch, that holds its request id) or refused (the cap rule), with the
-- signer's lease token, how the lease was acquired, the submit prompt's
-- outbox id and whether another allocation released the lease row while
-- this call ran (contended).
--
-- Each signer's lease row and cursor is found by its key, so that a call
-- costs what it allocates, not how many signers the database knows; the
-- plans are generic and sequential and bitmap scans are priced out, so
-- that each lookup stays an index probe in a session whose plans were made
-- while a table was empty. The release writes each locked row by the
-- address the lock returned.
--
-- What a request sends, for the rolling caps, is its worst-case cost
-- (r_cost: the value, the gas limit at the fee ceiling and the L2 data
-- fee); r_fee_ceiling (the creator's maxFeePerGas, null for none), the
-- two fees apart (r_execution_fee, r_data_fee) and the route the create
-- named (r_send_via) are written on the row.
--
-- The windows (a policy's "windows") come as arrays w_* too, one element
-- per check (a window a request counts in: w_period the rolling interval
-- or 'day', w_max_amount and w_max_count its caps, w_label what names it
-- in the refusal, 'window_amount:<label>' or 'window_count:<label>') or
-- per record (w_period null: a token the request moves out of its signer,
-- counted under the signer's key when the signer is watched), in request
-- order (w_req). Keys are made here: w_scope 'p' is the request's
-- principal's, 's' its signer's, of w_asset ('native' or a token address),
-- on the request's chain (window_usage). A signer's keys are read and
-- written under its lease row; a principal's keys under a transaction
-- advisory lock on each, taken in one order after every lease row's, so
-- that no two allocations wait on each other in a cycle. A request's checks
-- are all judged, with its caps, before it adds anything to the usage of
-- the requests after it. Every created request of a watched signer
-- (window_watch, or one this batch checks a signer's window of) counts its
-- worst-case cost under the signer's native key.
--
-- A request flagged r_pending is a transaction that waited for approval
-- (PENDING_APPROVAL, without a nonce) and has its approvals: r_id names
-- its row, which is numbered in place rather than inserted, under the same
-- lease, caps and usage as a create; when the row no longer waits (another
-- approver's allocation numbered it, or it ended) it is answered as
-- existing.
--
-- The lease rows must exist (the caller inserts a new signer's first, in
-- its own statement, so that the locks here are only ever taken in one
-- order). Errors: SQLSTATE TF001 fenced (MESSAGE names the write:
-- allocate_insert, allocate_cursor; HINT the signer's g), TF002 the cursor
-- would move backwards (HINT g), TF003 the lease is held by another owner
-- (HINT g), TF004 a lease row is missing, 22023 bad arguments. Anything
-- raised rolls the whole call back.
--
-- This file is the function's one source: migrate applies it, as CREATE
-- OR REPLACE, after the schema migrations (migrations.Up).

CREATE OR REPLACE FUNCTION txfence_allocate(
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
    w_req        int[],    -- the windows: per check or record, its request (ascending)
    w_scope      text[],   -- 'p' the principal's key, 's' the signer's
    w_asset      text[],   -- 'native' or the token's address
    w_period     text[],   -- an interval or 'day' (the UTC day); null: a record, no check
    w_amount     text[],   -- what the request counts in it (wei, or token units)
    w_max_amount text[],   -- null: no cap on the amount
    w_max_count  int[],    -- null: no cap on the count
    w_label      text[],   -- names the window in the refusal
    r_pending    bool[],    -- true: r_id is a held (PENDING_APPROVAL) row that has its approvals, numbered in place
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
    v_base     bigint[];  -- per signer: the first nonce to hand out
    v_outbox   bigint[];  -- per signer: the submit prompt, null without new rows
    v_outcome  text[];    -- per request: created, existing, refused
    v_tx       uuid[];    -- per request
    v_nonce    bigint[];  -- per request, created only
    v_rule     text[];    -- per request, refused only
    v_tid      tid[];     -- per signer: its locked lease row, written by this address at the end
    v_released bigint;
    v_locked   int;
    v_created  int;
    v_inserted bigint;
    v_advanced bigint;
    v_cursors  bigint;
    v_g        int;
    v_capped   bool;
    -- rolling caps: usage per (signer, principal) key, read under the lease
    v_keys     text[] := '{}';
    v_hc       bigint[] := '{}';
    v_hv       numeric[] := '{}';
    v_dc       bigint[] := '{}';
    v_dv       numeric[] := '{}';
    v_k        int;
    v_j        int;
    v_sums     record;
    rec        record;
    -- windows: each w element's key, each request's first and last element,
    -- each signer watched or not, usage read per (key, period) and what
    -- this batch adds per key, before the request judged
    v_w        int := coalesce(cardinality(w_req), 0);
    v_windowed bool := false;
    v_watched  bool[];
    v_wkey     text[] := '{}';
    v_wfrom    int[];
    v_wto      int[];
    v_uk       text[] := '{}';
    v_uc       bigint[] := '{}';
    v_ua       numeric[] := '{}';
    v_ak       text[] := '{}';
    v_ac       bigint[] := '{}';
    v_aa       numeric[] := '{}';
    v_done     text[];
    v_key      text;
    v_amount   numeric;
    v_since    timestamptz;
    v_u        int;
    v_b        int;
    v_i        int;
    v_h        bigint;
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
            coalesce(cardinality(w_max_count), 0), coalesce(cardinality(w_label), 0)])) IS NOT FALSE
       OR EXISTS (SELECT 1 FROM unnest(w_req, w_scope, w_asset, w_amount) WITH ORDINALITY AS w(req, scope, asset, amount, i)
            WHERE (w.req BETWEEN 1 AND v_requests AND w.req >= coalesce(w_req[(w.i - 1)::int], 1) AND w.scope IN ('p', 's')
                   AND w.asset IS NOT NULL AND w.amount IS NOT NULL AND (w.scope = 's' OR r_principal[w.req] IS NOT NULL))
                  IS NOT TRUE) THEN
        RAISE EXCEPTION 'txfence_allocate: bad arguments' USING ERRCODE = '22023';
    END IF;
    IF cardinality(r_pending) IS DISTINCT FROM v_requests THEN
        RAISE EXCEPTION 'txfence_allocate: bad arguments' USING ERRCODE = '22023';
    END IF;

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
    -- The lease rows stay locked by this transaction until it ends: no
    -- other owner can take them meanwhile, so the lease is ours until
    -- v_deadline and its row is written once, at the end, as released.

    -- The held rows of approved requests, locked in id order: a rejection,
    -- an expiry or another approver's allocation of one waits for this call,
    -- and this call sees what such a write committed before it.
    IF true = ANY (r_pending) THEN
        PERFORM 1 FROM managed_tx t
        WHERE t.id IN (SELECT u.id FROM unnest(r_id, r_pending) AS u(id, p) WHERE u.p)
        ORDER BY t.id
        FOR UPDATE;
    END IF;

    -- Where each signer's nonces start (max(cursor, the chain's pending
    -- nonce where it was asked), 0 for a new signer), and the idempotency
    -- re-check under the lease: a request id that exists (in the database,
    -- or earlier in this batch) is answered by that row. An approved
    -- request (whose request id the caller leaves out) is created while its
    -- row still waits, and otherwise answered by that row: another
    -- approver's allocation numbered it, or it ended, or an earlier request
    -- of this batch is that row's (two approvers of one instance).
    SELECT (SELECT array_agg(coalesce(greatest((
                    SELECT c.next_nonce FROM signer_nonce_cursor c WHERE c.chain_id = u.c AND c.signer = u.s), u.p), 0) ORDER BY u.g)
            FROM unnest(s_chain, s_signer, s_pending) WITH ORDINALITY AS u(c, s, p, g)),
           array_agg(CASE WHEN x.pending THEN CASE WHEN x.waiting AND x.first = x.idx THEN 'created' ELSE 'existing' END
                          WHEN x.existing IS NOT NULL OR x.first <> x.idx THEN 'existing' ELSE 'created' END ORDER BY x.idx),
           array_agg(coalesce(x.existing, r_id[x.first]) ORDER BY x.idx),
           bool_or(x.capped)
    INTO v_base, v_outcome, v_tx, v_capped
    FROM (
        SELECT r.idx::int AS idx,
            CASE WHEN r_pending[r.idx] THEN min(r.idx::int) OVER (PARTITION BY r_pending[r.idx], r_id[r.idx])
                 WHEN r.rid IS NULL THEN r.idx::int ELSE min(r.idx::int) OVER (PARTITION BY r.g, r.rid) END AS first,
            CASE WHEN r.lookup AND r.rid IS NOT NULL THEN (
                SELECT e.id FROM managed_tx e
                WHERE e.chain_id = s_chain[r.g] AND e.signer = s_signer[r.g] AND e.request_id = r.rid)
            END AS existing,
            r.hc IS NOT NULL OR r.hv IS NOT NULL OR r.dc IS NOT NULL OR r.dv IS NOT NULL AS capped,
            coalesce(r_pending[r.idx], false) AS pending,
            CASE WHEN r_pending[r.idx] THEN EXISTS (
                SELECT 1 FROM managed_tx e WHERE e.id = r_id[r.idx] AND e.state = 'PENDING_APPROVAL')
            END AS waiting
        FROM unnest(r_group, r_request_id, r_lookup, r_hour_count, r_hour_value, r_day_count, r_day_value)
            WITH ORDINALITY AS r(g, rid, lookup, hc, hv, dc, dv, idx)) x;

    v_rule := array_fill(NULL::text, ARRAY[v_requests]);
    -- The windows' keys, and the signers whose every send is counted: those
    -- watched, and those whose window a request of this batch checks.
    IF v_w > 0 THEN
        v_wkey := ARRAY(
            SELECT w.scope || '/' || s_chain[r_group[w.req]] || '/'
                || CASE w.scope WHEN 'p' THEN r_principal[w.req] ELSE s_signer[r_group[w.req]] END || '/' || w.asset
            FROM unnest(w_req, w_scope, w_asset) WITH ORDINALITY AS w(req, scope, asset, i)
            ORDER BY w.i);
        v_windowed := cardinality(array_remove(w_period, NULL)) > 0;
    END IF;
    v_watched := ARRAY(
        SELECT EXISTS (SELECT 1 FROM window_watch ww WHERE ww.signer = u.s)
            OR EXISTS (SELECT 1 FROM window_watch ww WHERE ww.signer = '*')
            OR EXISTS (SELECT 1 FROM unnest(w_req, w_scope, w_period) AS w(req, scope, period)
                       WHERE r_group[w.req] = u.g AND w.scope = 's' AND w.period IS NOT NULL)
        FROM unnest(s_signer) WITH ORDINALITY AS u(s, g)
        ORDER BY u.g);
    IF v_windowed THEN
        -- A principal's window spans signers, whose lease rows do not
        -- serialize it: a lock on each of its keys does, taken after every
        -- lease row's and in one order (waiting here is the same designed
        -- queue as for the lease rows).
        PERFORM set_config('lock_timeout', '0', true);
        FOR v_h IN
            SELECT DISTINCT hashtextextended('window_usage:' || w.k, 0)
            FROM unnest(w_req, v_wkey, w_scope, w_period) AS w(req, k, scope, period)
            WHERE w.scope = 'p' AND w.period IS NOT NULL AND v_outcome[w.req] = 'created'
            ORDER BY 1
        LOOP
            PERFORM pg_advisory_xact_lock(v_h);
        END LOOP;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        v_wfrom := array_fill(NULL::int, ARRAY[v_requests]);
        v_wto := array_fill(NULL::int, ARRAY[v_requests]);
        FOR v_i IN 1 .. v_w LOOP
            v_wfrom[w_req[v_i]] := coalesce(v_wfrom[w_req[v_i]], v_i);
            v_wto[w_req[v_i]] := v_i;
        END LOOP;
    END IF;

    IF v_capped OR v_windowed THEN
        -- Rolling caps and windows, in request order. The caps: what each
        -- capped principal sent from the signer in the last hour and day
        -- (read under the lease, so that concurrent batches cannot both
        -- pass a cap) plus what this batch gives it before the request.
        -- What a request sends is its worst-case cost (its value and its
        -- gas at its fee ceiling). The windows: what each key's usage holds
        -- in the window's period (read under the key's lock) plus what this
        -- batch adds to the key before the request. A request refused by
        -- one adds to none.
        FOR rec IN
            SELECT r.idx::int AS idx, r.g, r.p, coalesce(r.cost, r.v, '0')::numeric AS v,
                r.hc, r.hv::numeric AS hv, r.dc, r.dv::numeric AS dv,
                r.hc IS NOT NULL OR r.hv IS NOT NULL OR r.dc IS NOT NULL OR r.dv IS NOT NULL AS capped
            FROM unnest(r_group, r_principal, r_value, r_cost, r_hour_count, r_hour_value, r_day_count, r_day_value)
                WITH ORDINALITY AS r(g, p, v, cost, hc, hv, dc, dv, idx)
            WHERE v_windowed OR r.hc IS NOT NULL OR r.hv IS NOT NULL OR r.dc IS NOT NULL OR r.dv IS NOT NULL
            ORDER BY r.idx
        LOOP
            CONTINUE WHEN v_outcome[rec.idx] <> 'created';
            IF rec.capped THEN
                v_k := array_position(v_keys, rec.g || '/' || rec.p);
                IF v_k IS NULL THEN
                    v_keys := v_keys || (rec.g || '/' || rec.p);
                    v_k := cardinality(v_keys);
                    SELECT coalesce(sum(tx_count) FILTER (WHERE minute > clock_timestamp() - interval '1 hour'), 0) AS hc,
                           coalesce(sum(value) FILTER (WHERE minute > clock_timestamp() - interval '1 hour'), 0) AS hv,
                           coalesce(sum(tx_count), 0) AS dc, coalesce(sum(value), 0) AS dv
                    INTO v_sums
                    FROM principal_usage
                    WHERE principal = rec.p AND chain_id = s_chain[rec.g] AND signer = s_signer[rec.g]
                      AND minute > clock_timestamp() - interval '24 hours';
                    v_hc[v_k] := v_sums.hc;
                    v_hv[v_k] := v_sums.hv;
                    v_dc[v_k] := v_sums.dc;
                    v_dv[v_k] := v_sums.dv;
                END IF;
                v_rule[rec.idx] := CASE
                    WHEN rec.hc IS NOT NULL AND v_hc[v_k] + 1 > rec.hc THEN 'hourly_count'
                    WHEN rec.hv IS NOT NULL AND v_hv[v_k] + rec.v > rec.hv THEN 'hourly_value'
                    WHEN rec.dc IS NOT NULL AND v_dc[v_k] + 1 > rec.dc THEN 'daily_count'
                    WHEN rec.dv IS NOT NULL AND v_dv[v_k] + rec.v > rec.dv THEN 'daily_value'
                END;
            END IF;
            IF v_rule[rec.idx] IS NULL AND v_wfrom[rec.idx] IS NOT NULL THEN
                FOR v_i IN v_wfrom[rec.idx] .. v_wto[rec.idx] LOOP
                    CONTINUE WHEN w_period[v_i] IS NULL;
                    v_u := array_position(v_uk, v_wkey[v_i] || ' ' || w_period[v_i]);
                    IF v_u IS NULL THEN
                        -- Usage is kept per minute: a rolling window counts
                        -- the minutes that started within its period, the
                        -- day the minutes of the UTC day.
                        v_since := CASE WHEN w_period[v_i] = 'day'
                            THEN date_trunc('day', clock_timestamp(), 'UTC') - interval '1 minute'
                            ELSE clock_timestamp() - w_period[v_i]::interval END;
                        SELECT coalesce(sum(u.tx_count), 0) AS c, coalesce(sum(u.amount), 0) AS a INTO v_sums
                        FROM window_usage u
                        WHERE u.key = v_wkey[v_i] AND u.minute > v_since;
                        v_uk := v_uk || (v_wkey[v_i] || ' ' || w_period[v_i]);
                        v_u := cardinality(v_uk);
                        v_uc[v_u] := v_sums.c;
                        v_ua[v_u] := v_sums.a;
                    END IF;
                    v_b := array_position(v_ak, v_wkey[v_i]);
                    IF w_max_count[v_i] IS NOT NULL AND v_uc[v_u] + coalesce(v_ac[v_b], 0) + 1 > w_max_count[v_i] THEN
                        v_rule[rec.idx] := 'window_count:' || w_label[v_i];
                        EXIT;
                    END IF;
                    IF w_max_amount[v_i] IS NOT NULL
                       AND v_ua[v_u] + coalesce(v_aa[v_b], 0) + w_amount[v_i]::numeric > w_max_amount[v_i]::numeric THEN
                        v_rule[rec.idx] := 'window_amount:' || w_label[v_i];
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
            IF v_rule[rec.idx] IS NOT NULL THEN
                v_outcome[rec.idx] := 'refused';
                CONTINUE;
            END IF;
            IF rec.capped THEN
                v_hc[v_k] := v_hc[v_k] + 1;
                v_hv[v_k] := v_hv[v_k] + rec.v;
                v_dc[v_k] := v_dc[v_k] + 1;
                v_dv[v_k] := v_dv[v_k] + rec.v;
            END IF;
            IF v_windowed THEN
                -- What the request adds to the keys it counts under, once
                -- each: its signer's native value, then its elements' keys
                -- (a signer's token, a principal's asset).
                v_done := '{}';
                FOR v_i IN 0 .. coalesce(v_wto[rec.idx] - v_wfrom[rec.idx] + 1, 0) LOOP
                    IF v_i = 0 THEN
                        v_key := 's/' || s_chain[rec.g] || '/' || s_signer[rec.g] || '/native';
                        v_amount := rec.v;
                    ELSE
                        v_key := v_wkey[v_wfrom[rec.idx] + v_i - 1];
                        v_amount := w_amount[v_wfrom[rec.idx] + v_i - 1]::numeric;
                    END IF;
                    CONTINUE WHEN v_key = ANY (v_done);
                    v_done := v_done || v_key;
                    v_b := array_position(v_ak, v_key);
                    IF v_b IS NULL THEN
                        v_ak := v_ak || v_key;
                        v_ac := v_ac || 1::bigint;
                        v_aa := v_aa || v_amount;
                    ELSE
                        v_ac[v_b] := v_ac[v_b] + 1;
                        v_aa[v_b] := v_aa[v_b] + v_amount;
                    END IF;
                END LOOP;
            END IF;
        END LOOP;
        -- A request id's later copies share the fate of a refused first one.
        FOR v_j IN 1 .. v_requests LOOP
            IF v_outcome[v_j] = 'existing' THEN
                v_k := array_position(r_id, v_tx[v_j]);
                IF v_k IS NOT NULL AND v_outcome[v_k] = 'refused' THEN
                    v_outcome[v_j] := 'refused';
                    v_rule[v_j] := v_rule[v_k];
                END IF;
            END IF;
        END LOOP;
    END IF;

    -- The rows, with contiguous nonces in request order per signer, each
    -- with who created it under which token. An approved request's held row
    -- is numbered in place, with its gas limit, fee ceiling and fees as judged now
    -- and a history row; the simulation it was held with makes way for the
    -- one it was judged by now (the caller writes it with the call).
    WITH req AS (
        SELECT r.*, r.idx::int AS i,
            CASE WHEN r.o = 'created'
                THEN v_base[r.g] + count(*) FILTER (WHERE r.o = 'created') OVER (PARTITION BY r.g ORDER BY r.idx) - 1
            END AS n
        FROM unnest(r_group, r_id, r_request_id, r_fp, r_to, r_value, r_data, r_gas, r_max_fee, r_max_prio,
                r_gas_price, r_meta, r_principal, v_outcome, r_fee_ceiling, r_execution_fee, r_data_fee, r_send_via)
            WITH ORDINALITY AS r(g, id, rid, fp, to_address, v, data, gas, max_fee, max_prio, gas_price, meta, p, o, fc, xf, df, sv,
                idx)),
    ins AS (
        INSERT INTO managed_tx (id, chain_id, signer, nonce, request_id, payload_fingerprint, to_address, value,
            data, gas_limit, max_fee_per_gas, max_priority_fee_per_gas, gas_price, metadata, state, principal,
            fencing_token, created_owner, created_token, created_at, updated_at, fee_ceiling, execution_fee, data_fee,
            send_via, version)
        SELECT req.id, s_chain[req.g], s_signer[req.g], req.n, req.rid, req.fp, req.to_address, coalesce(req.v, '0')::numeric,
            coalesce(req.data, '\x'), req.gas, req.max_fee::numeric, req.max_prio::numeric, req.gas_price::numeric,
            req.meta::jsonb, 'ALLOCATED', req.p, v_token[req.g], p_owner, v_token[req.g], now(), now(), req.fc::numeric,
            req.xf::numeric, req.df::numeric, req.sv, 1
        FROM req
        WHERE req.o = 'created' AND NOT coalesce(r_pending[req.i], false)
        ORDER BY req.i
        RETURNING id, chain_id, signer, state, nonce, version),
    upd AS (
        UPDATE managed_tx t
        SET nonce = req.n, state = 'ALLOCATED', fencing_token = v_token[req.g], gas_limit = req.gas,
            fee_ceiling = req.fc::numeric, execution_fee = req.xf::numeric, data_fee = req.df::numeric, updated_at = now(),
            version = t.version + 1
        FROM req
        WHERE req.o = 'created' AND r_pending[req.i] AND t.id = req.id AND t.state = 'PENDING_APPROVAL'
        RETURNING t.id, t.fencing_token, t.chain_id, t.signer, t.state, t.nonce, t.version),
    -- Each new or approved row's TxAccepted event, pending: the drain that
    -- sends it numbers it and builds its message then
    -- (txfence_event_payload.sql), since building JSON here cost creates a
    -- fifth of their throughput.
    accepted AS (
        INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, type, version, lifecycle, nonce)
        SELECT a.id, a.chain_id, a.signer, a.state, false, 'TxAccepted', a.version, true, a.nonce
        FROM (SELECT id, chain_id, signer, state, nonce, version FROM ins UNION ALL SELECT id, chain_id, signer, state, nonce, version FROM upd) a
        ORDER BY a.chain_id, a.signer, a.nonce),
    approved AS (
        INSERT INTO tx_history (tx_id, from_state, to_state, reason, owner, fencing_token)
        SELECT upd.id, 'PENDING_APPROVAL', 'ALLOCATED', 'approved', p_owner, upd.fencing_token FROM upd),
    resimulated AS (
        DELETE FROM tx_simulation s USING upd WHERE s.tx_id = upd.id)
    SELECT (SELECT count(*) FROM ins) + (SELECT count(*) FROM upd), (SELECT array_agg(req.n ORDER BY req.i) FROM req),
           (SELECT count(*) FROM req WHERE req.o = 'created')
    INTO v_inserted, v_nonce, v_created;
    IF v_inserted <> v_created OR clock_timestamp() >= v_deadline THEN
        RAISE EXCEPTION 'allocate_insert' USING ERRCODE = 'TF001', HINT = '1';
    END IF;

    -- One submit prompt per signer with new rows, the cursors (never
    -- backwards), what capped principals sent and the windows' usage (this
    -- minute's bucket), and
    -- the lease rows, taken and released in one write; fenced again, so that
    -- a batch that outlived its lease while it wrote commits nothing.
    WITH made AS (
        SELECT u.g::int AS g, u.c, u.s, u.t, u.p, coalesce(c.n, 0) AS n
        FROM unnest(s_chain, s_signer, v_token, s_pending) WITH ORDINALITY AS u(c, s, t, p, g)
        LEFT JOIN (SELECT r.g, count(*) AS n FROM unnest(r_group, v_outcome) AS r(g, o) WHERE r.o = 'created' GROUP BY r.g) c
            ON c.g = u.g),
    ob AS (
        INSERT INTO outbox (topic, ordering_key, payload)
        SELECT p_topic, made.s, jsonb_build_object('chainId', made.c, 'signer', made.s)
        FROM made WHERE made.n > 0
        ORDER BY made.g
        RETURNING id, (payload->>'chainId')::bigint AS c, ordering_key AS s),
    cur AS (
        INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, chain_synced_at, fencing_token)
        SELECT made.c, made.s, v_base[made.g] + made.n, CASE WHEN made.p IS NOT NULL THEN clock_timestamp() END, made.t
        FROM made WHERE made.n > 0 OR made.p IS NOT NULL
        ORDER BY made.g
        ON CONFLICT (chain_id, signer) DO UPDATE
        SET next_nonce = EXCLUDED.next_nonce,
            chain_synced_at = coalesce(EXCLUDED.chain_synced_at, c.chain_synced_at),
            fencing_token = EXCLUDED.fencing_token,
            updated_at = clock_timestamp()
        WHERE c.next_nonce <= EXCLUDED.next_nonce
        RETURNING 1),
    usage AS (
        INSERT INTO principal_usage AS pu (principal, chain_id, signer, minute, tx_count, value)
        SELECT r.p, s_chain[r.g], s_signer[r.g], date_trunc('minute', clock_timestamp()), count(*),
            sum(coalesce(r.cost, r.v, '0')::numeric)
        FROM unnest(r_group, r_principal, r_value, r_cost, v_outcome, r_hour_count, r_hour_value, r_day_count, r_day_value)
            AS r(g, p, v, cost, o, hc, hv, dc, dv)
        WHERE v_capped AND r.o = 'created' AND (r.hc IS NOT NULL OR r.hv IS NOT NULL OR r.dc IS NOT NULL OR r.dv IS NOT NULL)
        GROUP BY r.p, r.g
        ORDER BY r.g, r.p
        ON CONFLICT (principal, chain_id, signer, minute) DO UPDATE
        SET tx_count = pu.tx_count + EXCLUDED.tx_count, value = pu.value + EXCLUDED.value),
    wusage AS (
        -- The windows' usage (this minute's bucket) of the created
        -- requests: a watched signer's native value and tokens, the keys of
        -- the principals' windows they count in (each once a request).
        INSERT INTO window_usage AS wu (key, minute, tx_count, amount)
        SELECT x.k, date_trunc('minute', clock_timestamp()), count(*), sum(x.a)
        FROM (
            SELECT 's/' || s_chain[r.g] || '/' || s_signer[r.g] || '/native' AS k, coalesce(r.cost, r.v, '0')::numeric AS a
            FROM unnest(r_group, r_value, r_cost, v_outcome) AS r(g, v, cost, o)
            WHERE r.o = 'created' AND v_watched[r.g]
            UNION ALL
            (SELECT DISTINCT ON (w.req, w.k) w.k, w.a::numeric
             FROM unnest(w_req, v_wkey, w_scope, w_period, w_amount) AS w(req, k, scope, period, a)
             WHERE v_outcome[w.req] = 'created' AND (w.scope = 'p' AND w.period IS NOT NULL
                 OR w.scope = 's' AND w.period IS NULL AND v_watched[r_group[w.req]]))) x
        GROUP BY x.k
        ORDER BY x.k
        ON CONFLICT (key, minute) DO UPDATE
        SET tx_count = wu.tx_count + EXCLUDED.tx_count, amount = wu.amount + EXCLUDED.amount),
    rel AS (
        UPDATE signer_lease AS l
        SET owner = p_owner, fencing_token = x.t, expires_at = '-infinity', updated_at = clock_timestamp(), wanted_at = NULL
        FROM unnest(v_tid, v_token) AS x(tid, t)
        WHERE l.ctid = x.tid
        RETURNING 1)
    SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM made WHERE made.n > 0 OR made.p IS NOT NULL),
           (SELECT array_agg(ob.id ORDER BY u.g) FROM unnest(s_chain, s_signer) WITH ORDINALITY AS u(c, s, g)
            LEFT JOIN ob ON ob.c = u.c AND ob.s = u.s),
           (SELECT count(*) FROM rel)
    INTO v_advanced, v_cursors, v_outbox, v_released;
    IF v_released <> v_signers THEN
        RAISE EXCEPTION 'allocate_release: % of % lease rows written', v_released, v_signers USING ERRCODE = 'XX000';
    END IF;
    IF clock_timestamp() >= v_deadline THEN
        RAISE EXCEPTION 'allocate_cursor' USING ERRCODE = 'TF001', HINT = '1';
    END IF;
    IF v_advanced <> v_cursors THEN
        SELECT u.g::int INTO v_g
        FROM unnest(s_chain, s_signer, v_base) WITH ORDINALITY AS u(c, s, b, g)
        JOIN signer_nonce_cursor c ON c.chain_id = u.c AND c.signer = u.s
        WHERE c.next_nonce > u.b
        LIMIT 1;
        RAISE EXCEPTION 'cursor would move backwards' USING ERRCODE = 'TF002', HINT = coalesce(v_g, 1)::text;
    END IF;

    RETURN QUERY
    SELECT r.idx::int, r.o, r.t, r.n, r.rule, r.g, v_token[r.g], v_acquired[r.g], v_outbox[r.g], now(), v_contended[r.g]
    FROM unnest(r_group, v_outcome, v_tx, v_nonce, v_rule) WITH ORDINALITY AS r(g, o, t, n, rule, idx);
END
$$;
