// Who is signed in, what the key may do (GET /v1/me), and what the API documents (the event
// types, and a webhook's fields with their types and bounds, read from its OpenAPI document so
// that the console never drifts from the service: the bounds and the options passed through
// are written once, in dispatcher/domain/endpoints.py).

import { api } from "./api.js";

export const session = { me: null, eventTypes: [], webhookBounds: {}, webhookFields: {} };

// A scope another one also grants (docs/api.md): a key that reads webhooks reads events too.
const ALSO_GRANTED_BY = { "events:read": "webhooks:read" };

/** Whether the signed-in key holds `scope`: the console shows only what the API would do. */
export function can(scope) {
  const held = (session.me && session.me.scopes) || [];
  return held.includes(scope) || held.includes(ALSO_GRANTED_BY[scope]);
}

// The bounds a field's schema states (of its non-null form, when it may be null).
const BOUNDS = ["minimum", "maximum", "minLength", "maxLength", "maxItems"];

function boundsOf(schema) {
  const given = givenForm(schema);
  return Object.fromEntries(BOUNDS.filter((bound) => bound in given).map((bound) => [bound, given[bound]]));
}

// The non-null form of a field's schema (`{}` when none is given).
function givenForm(schema) {
  const variants = schema.anyOf || [schema];
  return variants.find((variant) => variant.type && variant.type !== "null") || {};
}

/** The schema of each field of a webhook's create body, by field name, in the body's order. */
function webhookFields(documented) {
  const body = documented.paths["/v1/webhooks"].post.requestBody.content["application/json"].schema;
  const schema = body.$ref ? documented.components.schemas[body.$ref.split("/").pop()] : body;
  return schema.properties;
}

export async function loadCatalog() {
  try {
    const documented = await api("GET", "/v1/openapi.json");
    const listing = documented.paths["/v1/webhooks/{webhook_id}/deliveries"].get.parameters;
    const event = listing.find((parameter) => parameter.name === "event");
    session.eventTypes = (event && event.schema.enum) || [];
    session.webhookFields = webhookFields(documented);
    session.webhookBounds = Object.fromEntries(Object.entries(session.webhookFields)
      .map(([name, field]) => [name, boundsOf(field)]));
  } catch {
    session.eventTypes = [];
    session.webhookBounds = {};
    session.webhookFields = {};
  }
}

/** The bounds the API states for a webhook field (`{minimum, maximum, maxLength, ...}`; `{}`
 * when the document could not be read: the server's 400 still says what is wrong). */
export function webhookFieldBounds(name) {
  return session.webhookBounds[name] || {};
}

/** The fields of a webhook's create body as the API documents them, in its order: each one's
 * name, its type (of its non-null form: "number", "integer", "array", ...), title and
 * description ([] when the document could not be read). */
export function webhookFieldList() {
  return Object.entries(session.webhookFields).map(([name, schema]) => {
    const given = givenForm(schema);
    return { name, type: given.type, title: schema.title || given.title, description: schema.description || given.description };
  });
}

/** A field's range as a hint: "1..10000", or "" when the document gave none. */
export function rangeHint(name) {
  const { minimum, maximum } = webhookFieldBounds(name);
  return minimum !== undefined && maximum !== undefined ? `${minimum}..${maximum}` : "";
}

/** The event types a subscription may name (the test event is sent only by "Send a test"). */
export function subscribableTypes() {
  return session.eventTypes.filter((type) => type !== "webhook.test");
}
