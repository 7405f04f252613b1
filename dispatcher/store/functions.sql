-- Every function of dispatcher's database, as its latest release has them: the outbox function
-- applications call, the fan-out, the envelope, the ids, the payload filters' rule, the lanes,
-- the partitions, the triggers' functions, and the overloads older releases still call.
--
-- A repeatable file (Flyway's pattern): not numbered, applied whole by every upgrade
-- (dispatcher/store/schema.py), after schema.sql on a fresh database and after the numbered
-- migrations on an older one, in the same transaction; it is also applied before them, with
-- the bodies left unchecked, so that a migration may use a function (a trigger, a generated
-- column) the way this file has it. So a function is written here once, in its one current
-- form, and changed here in place; a migration never restates one. Every statement is
-- idempotent (CREATE OR REPLACE). A change that CREATE OR REPLACE cannot make (a parameter
-- renamed or removed, another return type) is a migration's DROP FUNCTION, and a function
-- older releases call is never dropped while they may run (docs/operations.md, "Functions").

-- Ids: a type prefix and 32 hex characters of a random UUID: opaque, URL-safe, unguessable.
-- Python makes the same shape (dispatcher.domain.ids); SQL needs it for set-based inserts.
CREATE OR REPLACE FUNCTION dispatcher_new_id(prefix text) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT prefix || replace(gen_random_uuid()::text, '-', '')
$$;

-- Two response-time histograms of the rollups (103 buckets: dispatcher.domain.health.BUCKETS)
-- added bucket by bucket; NULL is a histogram with nothing in it. Spelled out, since
-- unnest-and-aggregate costs ten times as much on the record path (queries/stats.sql,
-- record_batch); a single SQL expression whose arguments are columns there, so the planner
-- inlines it into the upsert: no function call per row.
CREATE OR REPLACE FUNCTION dispatcher_add_histograms(a integer[], b integer[]) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a ELSE ARRAY[
        a[1] + b[1],
        a[2] + b[2],
        a[3] + b[3],
        a[4] + b[4],
        a[5] + b[5],
        a[6] + b[6],
        a[7] + b[7],
        a[8] + b[8],
        a[9] + b[9],
        a[10] + b[10],
        a[11] + b[11],
        a[12] + b[12],
        a[13] + b[13],
        a[14] + b[14],
        a[15] + b[15],
        a[16] + b[16],
        a[17] + b[17],
        a[18] + b[18],
        a[19] + b[19],
        a[20] + b[20],
        a[21] + b[21],
        a[22] + b[22],
        a[23] + b[23],
        a[24] + b[24],
        a[25] + b[25],
        a[26] + b[26],
        a[27] + b[27],
        a[28] + b[28],
        a[29] + b[29],
        a[30] + b[30],
        a[31] + b[31],
        a[32] + b[32],
        a[33] + b[33],
        a[34] + b[34],
        a[35] + b[35],
        a[36] + b[36],
        a[37] + b[37],
        a[38] + b[38],
        a[39] + b[39],
        a[40] + b[40],
        a[41] + b[41],
        a[42] + b[42],
        a[43] + b[43],
        a[44] + b[44],
        a[45] + b[45],
        a[46] + b[46],
        a[47] + b[47],
        a[48] + b[48],
        a[49] + b[49],
        a[50] + b[50],
        a[51] + b[51],
        a[52] + b[52],
        a[53] + b[53],
        a[54] + b[54],
        a[55] + b[55],
        a[56] + b[56],
        a[57] + b[57],
        a[58] + b[58],
        a[59] + b[59],
        a[60] + b[60],
        a[61] + b[61],
        a[62] + b[62],
        a[63] + b[63],
        a[64] + b[64],
        a[65] + b[65],
        a[66] + b[66],
        a[67] + b[67],
        a[68] + b[68],
        a[69] + b[69],
        a[70] + b[70],
        a[71] + b[71],
        a[72] + b[72],
        a[73] + b[73],
        a[74] + b[74],
        a[75] + b[75],
        a[76] + b[76],
        a[77] + b[77],
        a[78] + b[78],
        a[79] + b[79],
        a[80] + b[80],
        a[81] + b[81],
        a[82] + b[82],
        a[83] + b[83],
        a[84] + b[84],
        a[85] + b[85],
        a[86] + b[86],
        a[87] + b[87],
        a[88] + b[88],
        a[89] + b[89],
        a[90] + b[90],
        a[91] + b[91],
        a[92] + b[92],
        a[93] + b[93],
        a[94] + b[94],
        a[95] + b[95],
        a[96] + b[96],
        a[97] + b[97],
        a[98] + b[98],
        a[99] + b[99],
        a[100] + b[100],
        a[101] + b[101],
        a[102] + b[102],
        a[103] + b[103]
    ] END
$$;

-- A message's or call's thread (number @p_number_id, other party @p_contact): made if absent
-- (`open`, as @p_id), its latest item recorded (@p_now, of kind @p_kind); an incoming item
-- reopens a `done` thread (an inbox), an outgoing one leaves the folder alone. Answers the
-- thread's id. Called by each of queries/messages.sql's `create_` statements, the one home of
-- the rule; PL/pgSQL, so that its upsert's plan is kept by the session, not made per call.
CREATE OR REPLACE FUNCTION dispatcher_touch_conversation(
    p_id text, p_workspace_id text, p_number_id text, p_contact text, p_now timestamptz,
    p_kind text, p_incoming boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    thread text;
BEGIN
    INSERT INTO conversations AS c
        (id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind)
    VALUES (p_id, p_workspace_id, p_number_id, p_contact, 'open', p_now, p_now, p_kind)
    ON CONFLICT (number_id, contact) DO UPDATE SET
        last_item_at = greatest(c.last_item_at, EXCLUDED.last_item_at),
        last_item_kind = EXCLUDED.last_item_kind,
        status = CASE WHEN p_incoming THEN 'open' ELSE c.status END
    RETURNING c.id INTO thread;
    RETURN thread;
END
$$;

-- A change to a key (a revocation, a deletion, a workspace's keys cascading away, a TRUNCATE)
-- notifies `dispatcher_api_keys`: every process that keeps valid keys in memory forgets them at
-- once (dispatcher/store/key_cache.py). Inserts need no notice: a new key is looked up.
CREATE OR REPLACE FUNCTION dispatcher_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_api_keys', '');
    RETURN NULL;
END
$$;

-- The places of a payload filter's arrays, each as the text of a text[] path (`{tags}`,
-- `{address,lines}`), sorted; NULL when it has none. Only objects are walked: a filter's arrays
-- hold only scalars (dispatcher/domain/payload_filter.py), so an array is never inside another
-- one. Kept beside each filter (webhooks.payload_filter_arrays) so that fan-out reads it, not
-- works it out, per subscription.
CREATE OR REPLACE FUNCTION dispatcher_filter_arrays(p_filter jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    WITH RECURSIVE walk (path, value) AS (
        SELECT ARRAY[]::text[], p_filter
        UNION ALL
        SELECT walk.path || member.key, member.value
        FROM walk,
             jsonb_each(CASE WHEN jsonb_typeof(walk.value) = 'object' THEN walk.value
                             ELSE '{}' END) AS member
    )
    SELECT array_agg(walk.path::text ORDER BY walk.path::text)
    FROM walk
    WHERE jsonb_typeof(walk.value) = 'array'
$$;

-- The one rule of whether an event's data passes a payload filter, whatever asks (fan-out,
-- recover, POST /v1/webhooks/{id}/filter/test): the data contains the filter (`@>`), and no
-- array of the data where the filter has one (p_filter_arrays, dispatcher_filter_arrays of
-- p_filter) holds more than 128 elements. `@>` searches the data's array once for each
-- element of the filter's, so this bounds one comparison's work (4 filter elements at most,
-- the domain's bound, x 128); a longer data array is not searched, and so does not pass
-- (docs/webhooks.md, "Payload filters"; the domain's MAX_COMPARED_ARRAY_ELEMENTS is the same
-- number). No filter passes everything.
--
-- p_deadline (NULL: none): a comparison asked for after it fails with SQLSTATE 57014
-- (query_canceled, as a statement timeout), so that a caller comparing many filters (fan-out)
-- stops in bounded time; the transaction fails, nothing of it is stored.
CREATE OR REPLACE FUNCTION dispatcher_filter_passes(
    p_data jsonb, p_filter jsonb, p_filter_arrays text[], p_deadline timestamptz
) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    place text;
    compared jsonb;
BEGIN
    IF p_filter IS NULL THEN
        RETURN true;
    END IF;
    IF clock_timestamp() > p_deadline THEN
        RAISE EXCEPTION 'dispatcher: comparing the payload filters of the event''s subscribers '
                        'took longer than its time limit'
            USING ERRCODE = '57014';
    END IF;
    IF p_filter_arrays IS NOT NULL THEN
        FOREACH place IN ARRAY p_filter_arrays LOOP
            compared := p_data #> place::text[];
            IF jsonb_typeof(compared) = 'array' AND jsonb_array_length(compared) > 128 THEN
                RETURN false;
            END IF;
        END LOOP;
    END IF;
    RETURN coalesce(p_data @> p_filter, false);
END
$$;

-- Lanes whose head has left the queue get their next head: the recorder calls this with the
-- deliveries its record settled (p_heads), in the same transaction; the maintenance loop with
-- NULL, for any lane whose head is gone whatever the way (a give-up on disable or delete):
-- then lanes a claim or a record holds are left for the next run. The next head is the
-- lane's first member (lowest lane_seq), due at p_now if it was parked; a lane with no member
-- left goes. Returns how many lanes got a new head.
--
-- The lanes are locked first (in key order), and only then are their members read, by a
-- statement of its own: it sees every member committed until then, among them any that a
-- claim parked while it held the lane.
CREATE OR REPLACE FUNCTION dispatcher_advance_lanes(p_heads text[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    locked text[];
    moved integer;
BEGIN
    IF p_heads IS NOT NULL THEN
        SELECT array_agg(l.head_id) INTO locked FROM (
            SELECT head_id FROM delivery_lanes WHERE head_id = ANY (p_heads)
            ORDER BY webhook_id, lane FOR UPDATE
        ) l;
    ELSE
        SELECT array_agg(l.head_id) INTO locked FROM (
            SELECT head_id FROM delivery_lanes
            WHERE NOT EXISTS (SELECT 1 FROM delivery_queue q WHERE q.delivery_id = head_id)
            ORDER BY webhook_id, lane FOR UPDATE SKIP LOCKED
        ) l;
    END IF;
    IF locked IS NULL THEN
        RETURN 0;
    END IF;
    WITH lanes AS (
        SELECT l.webhook_id, l.lane, next.delivery_id AS next_id
        FROM delivery_lanes l
        LEFT JOIN LATERAL (
            SELECT q.delivery_id FROM delivery_queue q
            WHERE q.webhook_id = l.webhook_id AND q.lane = l.lane
            ORDER BY q.lane_seq
            LIMIT 1
        ) next ON true
        WHERE l.head_id = ANY (locked)
          AND NOT EXISTS (SELECT 1 FROM delivery_queue h WHERE h.delivery_id = l.head_id)
    ), gone AS (
        DELETE FROM delivery_lanes l
        USING lanes
        WHERE l.webhook_id = lanes.webhook_id AND l.lane = lanes.lane AND lanes.next_id IS NULL
    ), promoted AS (
        UPDATE delivery_queue q
        SET due_at = p_now
        FROM lanes
        WHERE q.delivery_id = lanes.next_id AND NOT isfinite(q.due_at) AND q.lease_owner IS NULL
    )
    UPDATE delivery_lanes l
    SET head_id = lanes.next_id
    FROM lanes
    WHERE l.webhook_id = lanes.webhook_id AND l.lane = lanes.lane AND lanes.next_id IS NOT NULL;
    GET DIAGNOSTICS moved = ROW_COUNT;
    RETURN moved;
END
$$;

-- One upsert per statement: the changes of a whole statement (a disable of an endpoint with a
-- large backlog) are summed first, and rows are locked in key order.
CREATE OR REPLACE FUNCTION dispatcher_count_status_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT sum(attempts) FROM changed_after)
       IS DISTINCT FROM (SELECT sum(attempts) FROM changed_before) THEN
        RETURN NULL;  -- the recorder's: counted with its attempts
    END IF;
    INSERT INTO webhook_status_changes AS s (webhook_id, minute, delivered, failed)
    SELECT c.webhook_id, c.minute, sum(c.delivered), sum(c.failed)
    FROM (
        SELECT webhook_id, date_bin('1 minute', created_at, TIMESTAMPTZ 'epoch') AS minute,
               (status = 'delivered')::integer AS delivered, (status = 'failed')::integer AS failed
        FROM changed_after WHERE status <> 'pending'
        UNION ALL
        SELECT webhook_id, date_bin('1 minute', created_at, TIMESTAMPTZ 'epoch'),
               -(status = 'delivered')::integer, -(status = 'failed')::integer
        FROM changed_before WHERE status <> 'pending'
    ) c
    GROUP BY c.webhook_id, c.minute
    HAVING sum(c.delivered) <> 0 OR sum(c.failed) <> 0
    ORDER BY c.webhook_id, c.minute
    ON CONFLICT (webhook_id, minute) DO UPDATE
    SET delivered = s.delivered + excluded.delivered, failed = s.failed + excluded.failed;
    RETURN NULL;
END
$$;

-- Daily partitions [day, day + 1) in UTC for events, deliveries and delivery_attempts, for every day from p_from to p_to.
-- Deliveries partitions are tuned for their update-heavy life (see docs/scaling.md). A day whose
-- rows already sit in a default partition is skipped (creating it would fail); returns the
-- number of partitions created.
CREATE OR REPLACE FUNCTION dispatcher_ensure_partitions(p_from date, p_to date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    lower_bound timestamptz;
    upper_bound timestamptz;
    suffix text;
    created integer := 0;
BEGIN
    -- Serialise partition creation (start-up of several replicas, maintenance loops).
    PERFORM pg_advisory_xact_lock(hashtext('dispatcher_partitions'));
    FOR day IN SELECT generate_series(p_from, p_to, interval '1 day')::date LOOP
        suffix := to_char(day, 'YYYYMMDD');
        lower_bound := day::timestamp AT TIME ZONE 'UTC';
        upper_bound := (day + 1)::timestamp AT TIME ZONE 'UTC';
        IF to_regclass('events_p' || suffix) IS NULL THEN
            IF EXISTS (SELECT 1 FROM events_default
                       WHERE created_at >= lower_bound AND created_at < upper_bound)
               OR EXISTS (SELECT 1 FROM deliveries_default
                          WHERE created_at >= lower_bound AND created_at < upper_bound)
               OR EXISTS (SELECT 1 FROM delivery_attempts_default
                          WHERE delivery_created_at >= lower_bound
                            AND delivery_created_at < upper_bound) THEN
                RAISE NOTICE 'dispatcher: rows for % are in the default partitions; skipped', day;
                CONTINUE;
            END IF;
            EXECUTE format(
                'CREATE TABLE events_p%s PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                suffix, lower_bound, upper_bound);
            EXECUTE format(
                'CREATE TABLE deliveries_p%s PARTITION OF deliveries FOR VALUES FROM (%L) TO (%L) '
                'WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
                'autovacuum_analyze_scale_factor = 0.02)',
                suffix, lower_bound, upper_bound);
            EXECUTE format(
                'CREATE TABLE delivery_attempts_p%s PARTITION OF delivery_attempts '
                'FOR VALUES FROM (%L) TO (%L)',
                suffix, lower_bound, upper_bound);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

-- The envelope every delivery of an event carries (docs/events.md), built here and only here:
-- dispatcher_append_event stores its text once, and every attempt sends those bytes. Compact
-- JSON with its keys in this order; `createdAt` in UTC with milliseconds and a `Z`; `data` as
-- given: a json value keeps its text, so the service's data keeps the bytes it serialized
-- (an outbox caller's jsonb is spelled as jsonb spells it). The version is the one
-- dispatcher.domain.events.API_VERSION names (tests/store/test_envelope.py compares them).
--
-- One expression, STABLE and not STRICT: the planner inlines it into the statement that
-- calls it.
CREATE OR REPLACE FUNCTION dispatcher_envelope(
    p_id text, p_type text, p_created_at timestamptz, p_data json
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT '{"id":' || to_json(p_id)::text
        || ',"type":' || to_json(p_type)::text
        || ',"apiVersion":"2026-11-01"'
        || ',"createdAt":"'
        || to_char(p_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"'
        || ',"data":' || p_data::text
        || '}'
$$;

-- Whether a subscription that hears event types p_events and numbers p_number_ids (NULL:
-- every number) hears an event of type p_type about number p_number_id: the rule fan-out
-- applies (dispatcher_add_deliveries) and a poll applies (store/queries/poll.sql), with the
-- payload filter's (dispatcher_filter_passes). One expression, IMMUTABLE: the planner inlines
-- it into the statement that calls it.
CREATE OR REPLACE FUNCTION dispatcher_hears(
    p_events text[], p_number_ids text[], p_type text, p_number_id text
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_type = ANY (p_events) AND (p_number_ids IS NULL OR p_number_id = ANY (p_number_ids))
$$;

-- Where polls stand (docs/webhooks.md, "Poll mode"; store/queries/poll.sql): the oldest
-- transaction of this database still running as the calling statement's snapshot sees it (its
-- xmax when none is), so that every event of an older transaction (`events.txid`) has ended
-- and, committed, is visible to the statement; an event not visible yet has a txid at or
-- past it. Transactions of the cluster's other databases cannot have written this database's
-- events and are left out, known by their backend's database (pg_stat_activity); one that
-- cannot be told apart (its backend gone since the snapshot, a subtransaction, a prepared
-- transaction, a backend whose details this role may not read) counts as this database's:
-- a poll may wait for it, never miss what it wrote. STABLE: it reads the caller's snapshot;
-- plpgsql, so that its statement is planned once a session (a SQL function's is planned at
-- every call: 5 ms).
CREATE OR REPLACE FUNCTION dispatcher_poll_horizon() RETURNS xid8
LANGUAGE plpgsql STABLE AS $$
DECLARE
    snap pg_snapshot := pg_current_snapshot();
    edge xid8;
BEGIN
    IF pg_snapshot_xmin(snap) = pg_snapshot_xmax(snap) THEN
        RETURN pg_snapshot_xmax(snap);  -- nothing running
    END IF;
    SELECT min(running) INTO edge
    FROM pg_snapshot_xip(snap) AS running
    WHERE running::xid NOT IN (
        SELECT a.backend_xid FROM pg_stat_get_activity(NULL) AS a
        WHERE a.backend_xid IS NOT NULL
          AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()));
    RETURN coalesce(edge, pg_snapshot_xmax(snap));
END
$$;

-- A poll's page (store/queries/poll.sql `poll`, docs/webhooks.md "Poll mode"): the next
-- p_limit events of workspace p_workspace_id that webhook p_webhook_id hears, after position
-- (p_txid, p_event_id) in (txid, id) order, created at or after p_since (NULL: any), of
-- transactions older than the horizon (dispatcher_poll_horizon, read once, from this call's
-- snapshot: every such event has ended and, committed, is visible here), so that an event
-- committed late is never behind a position handed out. What the webhook hears is fan-out's
-- rule: dispatcher_hears, then dispatcher_filter_passes (with fan-out's 5 s deadline). One
-- row with NULL event columns when there is none; every row carries the webhook's mode,
-- whether it is disabled, and the horizon; no row when the workspace has no such webhook
-- (or it is deleted). A push or disabled webhook's row has no events (nothing is walked), nor
-- does any with p_limit 0 (where a consumer that starts now starts: the horizon). One
-- statement for the whole poll: a round trip is most of a poll's time.
--
-- An index walk whatever the statistics say (events_poll on every partition, merged in
-- order, stopped at p_limit): without enable_sort off the planner, misled by estimates of the
-- row comparison, sorts every event after the position first (150 ms for 20,000 instead of
-- under 1). One generic plan for the session, as fan-out's.
CREATE OR REPLACE FUNCTION dispatcher_poll(
    p_workspace_id text, p_webhook_id text, p_txid xid8, p_event_id text, p_since timestamptz,
    p_limit integer
) RETURNS TABLE (mode text, disabled boolean, horizon xid8, txid xid8, id text, payload text)
LANGUAGE plpgsql STABLE
SET enable_sort = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    hook record;
    edge xid8 := dispatcher_poll_horizon();
    walked integer;
BEGIN
    SELECT w.mode, w.disabled_at IS NOT NULL AS disabled, w.events, w.number_ids,
           w.payload_filter, w.payload_filter_arrays
    INTO hook
    FROM webhooks w
    WHERE w.id = p_webhook_id AND w.workspace_id = p_workspace_id AND w.deleted_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    walked := CASE WHEN hook.mode = 'poll' AND NOT hook.disabled THEN p_limit ELSE 0 END;
    RETURN QUERY
        SELECT hook.mode, hook.disabled, edge, page.txid, page.id, page.payload
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT e.txid, e.id, e.payload
            FROM events e
            WHERE e.workspace_id = p_workspace_id
              AND (e.txid, e.id) > (p_txid, p_event_id)
              AND e.txid < edge
              AND e.created_at >= coalesce(p_since, '-infinity')
              AND dispatcher_hears(hook.events, hook.number_ids, e.type, e.number_id)
              AND (hook.payload_filter IS NULL
                   OR dispatcher_filter_passes(e.payload::jsonb -> 'data', hook.payload_filter,
                                               hook.payload_filter_arrays,
                                               clock_timestamp() + interval '5 seconds'))
            ORDER BY e.txid, e.id
            LIMIT walked
        ) AS page ON true;
END
$$;

-- The one way into `deliveries`: a pending delivery of an event to each webhook that should
-- have it, with its row in the engine's queue, in one statement; a webhook that has this
-- event's delivery already is skipped. Returns how many were made.
--
-- Which webhooks: with p_webhook_ids NULL, every live subscription of the workspace that hears
-- the event's type and number and whose payload filter the event's data contains (a new
-- event's fan-out); otherwise exactly those, whatever they hear (a webhook's test event; a
-- recover, whose caller chose them and applied the filter). Due at p_due_at (NULL: as of the
-- event), because of p_trigger (the attempt log's; NULL: a test event's delivery is due
-- because of the test, any other because of the schedule). The event's fields come as
-- arguments: no join back to its row, but for its data when a subscriber has a filter.
--
-- No NOTIFY here: a NOTIFY in the publishing transaction takes a cluster-wide lock through the
-- commit (and its WAL flush), which serialises every publisher's commit. The service wakes
-- the engines after its commit (dispatcher.store.notifications.DELIVERIES_CHANNEL); engines
-- also probe the queue when idle (the outbox door).
--
-- p_excluded_webhook_id: a subscriber left out (an operational event never goes to the
-- subscription it is about; NULL: none). Every argument is required: the shorter signature
-- below, with defaults, is what earlier releases call.
--
-- A fifo subscription's delivery (not a test's) joins its ordering lane, the event's ordering
-- key ('' without one), at the lane's end: unparked, for the first claim that walks it to
-- decide (delivery_lanes). The key is read from the event only when such a subscriber exists.
--
-- Payload filters are compared under bounds (dispatcher_filter_passes) and within a time
-- limit from the start of this fan-out (clock_timestamp() as the call starts: each event's
-- fan-out has its own, so a statement that publishes many events, a batch or an outbox
-- caller's bulk insert, is not failed by the time its other events took): 5 s, or
-- `dispatcher.filter_time_limit` when set. A
-- statement timeout cannot do it: one set inside a function is not armed for the statement
-- already running, and an outbox call runs in the application's own transaction, under its
-- settings.
CREATE OR REPLACE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[], p_due_at timestamptz, p_trigger text,
    p_excluded_webhook_id text
) RETURNS integer
-- One generic plan for its statement, kept for the session: with the default, the planner
-- prefers a custom plan per call (it can fold p_webhook_ids away), and planning the statement
-- costs Postgres more than running it (publish measured at 550 against 190 µs of CPU with no
-- subscriber).
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    fanned integer;
    -- The filter step's time limit: 5 s, or the setting dispatcher.filter_time_limit (an
    -- interval; per database, role, session or transaction).
    filter_deadline timestamptz := clock_timestamp() + coalesce(
        nullif(current_setting('dispatcher.filter_time_limit', true), '')::interval,
        interval '5 seconds');
BEGIN
    WITH hook (id, fifo) AS (
        -- The subscribers: a one-time filter on p_webhook_ids leaves this branch out whole
        -- when webhooks are named.
        SELECT w.id, w.ordering = 'fifo'
        FROM webhooks w
        WHERE p_webhook_ids IS NULL
          AND w.workspace_id = p_workspace_id
          AND w.deleted_at IS NULL
          AND w.disabled_at IS NULL
          -- A poll webhook has no deliveries: its events are read by its polls (schema 24).
          AND w.mode = 'push'
          AND dispatcher_hears(w.events, w.number_ids, p_type, p_number_id)
          AND w.id IS DISTINCT FROM p_excluded_webhook_id
          -- The payload filter (dispatcher_filter_passes, the one rule). The event's data is
          -- read back from its row (written before this call, in this transaction) by an
          -- uncorrelated subquery: parsed once per call, and only when a subscriber has a
          -- filter. The filter step has a deadline (filter_deadline): past it, the call
          -- fails as a statement timeout would, whoever's transaction it runs in.
          AND (w.payload_filter IS NULL
               OR dispatcher_filter_passes(
                      (SELECT e.payload::jsonb -> 'data' FROM events e
                       WHERE e.id = p_event_id AND e.created_at = p_created_at),
                      w.payload_filter, w.payload_filter_arrays, filter_deadline))
        UNION ALL
        SELECT DISTINCT named.id, coalesce(w.ordering = 'fifo', false)
        FROM unnest(p_webhook_ids) AS named (id)
        LEFT JOIN webhooks w ON w.id = named.id
    ), made AS (
        INSERT INTO deliveries
            (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
        SELECT dispatcher_new_id('WD'), p_workspace_id, hook.id, p_event_id, p_type,
               p_created_at, coalesce(p_due_at, p_created_at)
        FROM hook
        ON CONFLICT (webhook_id, event_id, created_at) DO NOTHING
        RETURNING id, created_at, webhook_id, event_id, next_attempt_at
    )
    INSERT INTO delivery_queue
        (delivery_id, created_at, webhook_id, event_id, is_test, due_at, trigger, lane, lane_seq)
    SELECT made.id, made.created_at, made.webhook_id, made.event_id, p_type = 'webhook.test',
           made.next_attempt_at,
           coalesce(p_trigger, CASE WHEN p_type = 'webhook.test' THEN 'test' ELSE 'schedule' END),
           CASE WHEN hook.fifo AND p_type <> 'webhook.test' THEN
               coalesce((SELECT e.ordering_key FROM events e
                         WHERE e.id = p_event_id AND e.created_at = p_created_at), '')
           END,
           CASE WHEN hook.fifo AND p_type <> 'webhook.test' THEN nextval('delivery_lane_seq') END
    FROM made
    JOIN hook ON hook.id = made.webhook_id;
    GET DIAGNOSTICS fanned = ROW_COUNT;
    RETURN fanned;
END
$$;

-- dispatcher_add_deliveries as schemas 6 to 8 made it (releases of then call it by position):
-- the same, nobody left out. Kept, never dropped: a function dropped while a transaction is in
-- a call to it fails that transaction, and an outbox publish must live through an upgrade.
CREATE OR REPLACE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[] DEFAULT NULL, p_due_at timestamptz DEFAULT NULL,
    p_trigger text DEFAULT NULL
) RETURNS integer
LANGUAGE sql AS $$
    SELECT dispatcher_add_deliveries(p_event_id, p_created_at, p_workspace_id, p_type,
                                     p_number_id, p_webhook_ids, p_due_at, p_trigger, NULL)
$$;

-- A new event's fan-out to its subscribers, as releases before schema 6 call it (their
-- publishing statements, during an upgrade): dispatcher_add_deliveries, inlined into the
-- caller's statement. Nothing of this release calls it.
CREATE OR REPLACE FUNCTION dispatcher_fan_out(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text, p_number_id text
) RETURNS integer
LANGUAGE sql AS $$
    SELECT dispatcher_add_deliveries(p_event_id, p_created_at, p_workspace_id, p_type,
                                     p_number_id, NULL, NULL, NULL, NULL)
$$;

-- The one way into `events`, whatever the door: the API, inbound messages and calls, the
-- carrier, a webhook's test (dispatcher/store/queries/events.sql), and the outbox function
-- below. Stores the event with its envelope, then makes its deliveries (to p_webhook_ids alone
-- when given: a test). Returns the payload, the envelope's text as every attempt sends it, and
-- how many deliveries were made. p_trace_context is the W3C traceparent of the publishing
-- span, when the service traces (dispatcher/tracing.py).
--
-- p_excluded_webhook_id is the subscription an operational event is about (it never goes
-- there); p_ordering_key the event's ordering lane (`events.ordering_key`). Every argument is
-- required: the shorter signature below, with defaults, is what earlier releases call.
--
-- Called once per event (`SELECT dispatcher_append_event(...)`, which returns one record):
-- one INSERT, then the deliveries as a simple expression.
CREATE OR REPLACE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text, p_fingerprint bytea,
    p_webhook_ids text[], p_trace_context text, p_excluded_webhook_id text,
    p_ordering_key text, OUT payload text, OUT fanned integer
)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (id, workspace_id, type, number_id, source, payload, idempotency_key,
                        request_fingerprint, created_at, trace_context, ordering_key)
    VALUES (p_id, p_workspace_id, p_type, p_number_id, p_source,
            dispatcher_envelope(p_id, p_type, p_created_at, p_data), p_idempotency_key,
            p_fingerprint, p_created_at, p_trace_context, p_ordering_key)
    RETURNING events.payload INTO payload;
    fanned := dispatcher_add_deliveries(p_id, p_created_at, p_workspace_id, p_type, p_number_id,
                                        p_webhook_ids, NULL, NULL, p_excluded_webhook_id);
END
$$;

-- Many events at once, in one call: the multi-row door every batch takes (POST
-- /v1/events/batch, the carrier's steps, operational events: dispatcher/store/events.py). It
-- checks nothing (the service has): not an outbox function. The arrays run in
-- parallel, one element per event: its id, workspace, type, number, data, idempotency key and
-- request fingerprint (NULL: none), the subscriber left out (an operational event's) and its
-- ordering key; every event is from p_source at p_created_at with p_trace_context. Returns one
-- row per event, in the arrays' order: its id, its payload (the envelope, as
-- dispatcher_append_event stores it) and how many deliveries it made.
--
-- One INSERT for every event, then the fan-out, event by event in the arrays' order (so that
-- the events of one ordering lane join a fifo subscription's lane in that order), through
-- dispatcher_add_deliveries, the one rule of who hears what. It is called only for an event
-- whose workspace has a live subscription to its type: a cheap necessary condition (one probe
-- of webhooks_live) that spares a batch without subscribers a call per event.
CREATE OR REPLACE FUNCTION dispatcher_append_events(
    p_ids text[], p_workspace_ids text[], p_types text[], p_number_ids text[], p_source text,
    p_data json[], p_created_at timestamptz, p_idempotency_keys text[], p_fingerprints bytea[],
    p_trace_context text, p_excluded_webhook_ids text[], p_ordering_keys text[]
) RETURNS TABLE (event_id text, event_payload text, event_fanned integer)
LANGUAGE plpgsql AS $$
DECLARE
    stored_ids text[];
    stored_payloads text[];
    item record;
BEGIN
    WITH stored AS (
        INSERT INTO events (id, workspace_id, type, number_id, source, payload,
                            idempotency_key, request_fingerprint, created_at, trace_context,
                            ordering_key)
        SELECT new.id, new.workspace_id, new.type, new.number_id, p_source,
               dispatcher_envelope(new.id, new.type, p_created_at, new.data),
               new.idempotency_key, new.fingerprint, p_created_at, p_trace_context,
               new.ordering_key
        FROM unnest(p_ids, p_workspace_ids, p_types, p_number_ids, p_data, p_idempotency_keys,
                    p_fingerprints, p_ordering_keys)
            AS new (id, workspace_id, type, number_id, data, idempotency_key, fingerprint,
                    ordering_key)
        RETURNING events.id, events.payload
    )
    SELECT array_agg(stored.id), array_agg(stored.payload)
    INTO stored_ids, stored_payloads
    FROM stored;

    FOR item IN
        SELECT new.id, new.workspace_id, new.type, new.number_id, new.excluded, made.payload,
               EXISTS (SELECT 1 FROM webhooks w
                       WHERE w.workspace_id = new.workspace_id
                         AND w.deleted_at IS NULL AND w.disabled_at IS NULL
                         AND new.type = ANY (w.events)) AS heard
        FROM unnest(p_ids, p_workspace_ids, p_types, p_number_ids, p_excluded_webhook_ids)
                 WITH ORDINALITY AS new (id, workspace_id, type, number_id, excluded, position)
        JOIN unnest(stored_ids, stored_payloads) AS made (id, payload) ON made.id = new.id
        ORDER BY new.position
    LOOP
        event_id := item.id;
        event_payload := item.payload;
        event_fanned := 0;
        IF item.heard THEN
            event_fanned := dispatcher_add_deliveries(item.id, p_created_at, item.workspace_id,
                                                      item.type, item.number_id, NULL, NULL,
                                                      NULL, item.excluded);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- dispatcher_append_event as schemas 6 to 8 made it (releases of then call it by position):
-- the same, nobody left out, no ordering key. Kept, never dropped (see above).
CREATE OR REPLACE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text DEFAULT NULL,
    p_fingerprint bytea DEFAULT NULL, p_webhook_ids text[] DEFAULT NULL,
    p_trace_context text DEFAULT NULL, OUT payload text, OUT fanned integer
)
LANGUAGE sql AS $$
    SELECT * FROM dispatcher_append_event(p_id, p_workspace_id, p_type, p_number_id, p_source,
                                          p_data, p_created_at, p_idempotency_key,
                                          p_fingerprint, p_webhook_ids, p_trace_context,
                                          NULL, NULL)
$$;

-- Why a JSON value cannot be stored as an event's `data` (NULL: it can), the rule every door
-- applies (dispatcher/domain/json_values.py, docs/api.md "JSON values"): nested at most 64
-- levels (an object or array is a level: `{"a": [1]}` is 2), and every number between -2^63
-- and 2^64 - 1 (what 64-bit integers hold). A deeper value, or a larger number, would be
-- stored and then fail, or change, every time the service reads it back. Two walks in C
-- (jsonpath): a container at level 64 (the root is level 0) makes a value 65 deep.
CREATE OR REPLACE FUNCTION dispatcher_json_problem(p_value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_path_exists(
            p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')
        THEN 'must nest at most 64 levels deep (objects and arrays)'
        WHEN jsonb_path_exists(
            p_value, 'strict $.** ? (@.type() == "number" && '
                     '(@ < -9223372036854775808 || @ > 18446744073709551615))')
        THEN 'numbers must lie between -9223372036854775808 and 18446744073709551615 '
             '(64-bit integers); send larger ones as strings'
    END
$$;

-- The transactional outbox: an application sharing this database calls this inside its own
-- transaction; the event (and its deliveries) exist if and only if that transaction commits.
--   BEGIN;
--   UPDATE orders SET state = 'paid' WHERE id = 42;
--   SELECT dispatcher_publish_event('WS…', 'contact.updated', '{"id": "CT42"}', NULL, 'CT42');
--   COMMIT;
-- The last two arguments, the number and the ordering key (the event's lane for fifo
-- subscriptions: 1 to 200 characters, no control characters), may be NULL. Every argument
-- is required: the shorter signature below, with defaults, takes three or four.
-- `data` follows the API's rule (dispatcher_json_problem): at most 64 levels deep, numbers
-- within 64-bit integers. Every refusal is SQLSTATE 22023, naming what is wrong.
CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text, p_ordering_key text
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    event_id text := dispatcher_new_id('EV');
    problem text;
BEGIN
    IF p_type IS NULL OR p_type = 'webhook.test' OR p_type !~ '^[a-z]+(\.[a-z_]+)+$' THEN
        RAISE EXCEPTION 'dispatcher_publish_event: invalid event type %', p_type
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(p_data) IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_data -> 'id') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'dispatcher_publish_event: data must be an object with a string id'
            USING ERRCODE = '22023';
    END IF;
    problem := dispatcher_json_problem(p_data);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'dispatcher_publish_event: data %', problem USING ERRCODE = '22023';
    END IF;
    IF p_number_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM phone_numbers WHERE id = p_number_id AND workspace_id = p_workspace_id
    ) THEN
        RAISE EXCEPTION 'dispatcher_publish_event: number % is not the workspace''s', p_number_id
            USING ERRCODE = '22023';
    END IF;
    IF p_ordering_key IS NOT NULL AND (
        char_length(p_ordering_key) NOT BETWEEN 1 AND 200
        OR p_ordering_key ~ '[\x01-\x1f\x7f-\x9f]'
    ) THEN
        RAISE EXCEPTION 'dispatcher_publish_event: the ordering key must be 1 to 200 characters '
                        'without control characters'
            USING ERRCODE = '22023';
    END IF;
    PERFORM dispatcher_append_event(event_id, p_workspace_id, p_type, p_number_id, 'outbox',
                                    p_data::json, now(), NULL, NULL, NULL, NULL, NULL,
                                    p_ordering_key);
    RETURN event_id;
END
$$;

-- dispatcher_publish_event as schemas 1 to 9 made it (applications call it so): the same,
-- without an ordering key. Kept, never dropped (an outbox transaction may be in a call to it
-- while a migration runs).
CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text DEFAULT NULL
) RETURNS text
LANGUAGE sql AS $$
    SELECT dispatcher_publish_event(p_workspace_id, p_type, p_data, p_number_id, NULL)
$$;

-- The database's one poller (store/notifications.py, engine/worker.py `_poll`) probes here, in
-- the database, instead of sending a statement every few milliseconds: one call waits for up
-- to p_for_seconds, probing every p_probe_seconds, and returns as soon as what is due differs
-- from what the poller saw last (p_seen_due, p_seen_newest), or when the time is up. A probe is
-- `due_mark`'s: how many rows are due (of the newest p_cap, read backwards through the due
-- index) and the newest due time, at the database's clock plus p_skew (a test's clock). So an
-- idle database costs the poller's process one round trip a second, and Postgres the probes
-- alone. Which changes are worth waking the engines for is decided by the caller
-- (queue.DueMark.announces). Index walks only, like the engine's statements: its plan must not
-- depend on statistics.
CREATE OR REPLACE FUNCTION dispatcher_watch_due(
    p_seen_due integer, p_seen_newest timestamptz, p_skew interval, p_probe_seconds float8,
    p_for_seconds float8, p_cap integer, OUT due integer, OUT newest timestamptz
)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => p_for_seconds);
BEGIN
    LOOP
        SELECT count(*)::integer, max(d.due_at) INTO due, newest FROM (
            SELECT q.due_at FROM delivery_queue q
            WHERE q.due_at <= clock_timestamp() + p_skew
            ORDER BY q.due_at DESC LIMIT p_cap
        ) d;
        EXIT WHEN due IS DISTINCT FROM p_seen_due OR newest IS DISTINCT FROM p_seen_newest
            OR clock_timestamp() >= deadline;
        PERFORM pg_sleep(p_probe_seconds);
    END LOOP;
END
$$;
