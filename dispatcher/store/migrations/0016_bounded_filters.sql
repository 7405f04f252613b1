-- Schema 16: payload filters are compared under bounds (docs/webhooks.md, "Payload filters").
--
-- `data @> filter` searches a data array once for each element of the filter's array at the
-- same place; fan-out pays that once per filtered subscription, inside the publishing
-- transaction (an outbox caller's own). The API now bounds the filter (4 array elements in all,
-- scalars of at most 64 bytes in arrays, 16 values; dispatcher/domain/payload_filter.py); the database bounds
-- the data compared: `dispatcher_filter_passes`, the one rule fan-out, recover and the filter
-- test share, does not search a data array of more than 128 elements (it does not pass), and
-- gives up past a deadline. `webhooks.payload_filter_arrays` (generated from the filter) holds
-- where the filter's arrays are, so that fan-out does not work it out per subscription.
--
-- `dispatcher_add_deliveries` (the nine-argument one) is replaced in place, same signature: an
-- outbox transaction in a call to it lives through the upgrade. The generated column rewrites
-- `webhooks` under ACCESS EXCLUSIVE (milliseconds per thousand subscriptions): publishing and
-- reading subscriptions wait meanwhile. Filters stored before, beyond the new bounds on the
-- filter, stay and are applied (under the data bound and the deadline); a PATCH of `filter`
-- must meet them.

ALTER TABLE webhooks ADD COLUMN payload_filter_arrays text[]
    GENERATED ALWAYS AS (dispatcher_filter_arrays(payload_filter)) STORED;

-- Its functions as this version left them (dispatcher_filter_arrays, dispatcher_filter_passes,
-- dispatcher_add_deliveries) are now dispatcher/store/functions.sql's, applied by every upgrade in
-- its transaction: a migration never restates a function (docs/operations.md, "Functions").
