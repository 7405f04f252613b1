-- Operational events (dispatcher/store/operational.py; what they are and when they happen:
-- dispatcher/domain/operational.py).

-- name: publish
-- Publish operational events at @now, one per element of the arrays @workspace_ids workspaces,
-- @types types, @data data (JSON text), @about webhooks they are about (never delivered there):
-- each in its workspace's stream, unless that is the operator sink's (its deliveries give rise to
-- none), and, with the data @operator_data, in the operator sink's stream when there is a sink.
-- Returns the deliveries made, in all.
WITH new AS (
    SELECT o.*
    FROM unnest(@workspace_ids::text[], @types::text[], @data::json[], @about::text[],
                @operator_data::json[])
        AS o (workspace_id, type, data, about, operator_data)
    JOIN workspaces ws ON ws.id = o.workspace_id AND NOT ws.operator
), copies AS (
    SELECT workspace_id, type, data, about FROM new
    UNION ALL
    SELECT sink.id, new.type, new.operator_data, NULL
    FROM new CROSS JOIN workspaces sink
    WHERE sink.operator
)
SELECT coalesce(sum((
           dispatcher_append_event(dispatcher_new_id('EV'), c.workspace_id, c.type, NULL,
                                   'service', c.data, @now, NULL, NULL, NULL, NULL, c.about,
                                   NULL)
       ).fanned), 0)::int
FROM copies c
