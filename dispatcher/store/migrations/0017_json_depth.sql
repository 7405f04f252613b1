-- Schema 17: one JSON rule on every door (docs/api.md "JSON values", docs/events.md).
--
-- `dispatcher_json_problem` is new; `dispatcher_publish_event` (the outbox function, the
-- five-argument form that the shorter one calls) now refuses `data` nested deeper than 64
-- levels or holding a number beyond 64-bit integers, raising SQLSTATE 22023 as it does for
-- its other arguments, so that an outbox event is one the API can read back. Its signature is
-- unchanged (CREATE OR REPLACE): a transaction inside a call to it lives through this step.
-- No table is touched: no lock beyond the catalog's.
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

-- The outbox function (schema.sql has its whole comment). `data` follows the API's rule
-- (dispatcher_json_problem): at most 64 levels deep, numbers within 64-bit integers. Every
-- refusal is SQLSTATE 22023, naming what is wrong.
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
