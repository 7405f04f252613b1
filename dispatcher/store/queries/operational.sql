-- Operational events (dispatcher/store/operational.py; what they are and when they happen:
-- dispatcher/domain/operational.py).

-- name: publish
-- Publish operational events at $1, one per element of the arrays $2 workspaces, $3 types,
-- $4 data (JSON text), $5 webhooks they are about (never delivered there): each in its
-- workspace's stream, unless that is the operator sink's (its deliveries give rise to none),
-- and, with the data $6, in the operator sink's stream when there is a sink. Returns the
-- deliveries made, in all.
WITH new AS (
    SELECT o.*
    FROM unnest($2::text[], $3::text[], $4::json[], $5::text[], $6::json[])
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
                                   'service', c.data, $1, NULL, NULL, NULL, NULL, c.about,
                                   NULL)
       ).fanned), 0)::int
FROM copies c
