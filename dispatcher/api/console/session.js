// Who is signed in, what the key may do (GET /v1/me), and what the API documents (the event
// types, read from its OpenAPI document so that the console never drifts from the service).

import { api } from "./api.js";

export const session = { me: null, eventTypes: [] };

// A scope another one also grants (docs/api.md): a key that reads webhooks reads events too.
const ALSO_GRANTED_BY = { "events:read": "webhooks:read" };

/** Whether the signed-in key holds `scope`: the console shows only what the API would do. */
export function can(scope) {
  const held = (session.me && session.me.scopes) || [];
  return held.includes(scope) || held.includes(ALSO_GRANTED_BY[scope]);
}

export async function loadCatalog() {
  try {
    const documented = await api("GET", "/v1/openapi.json");
    const listing = documented.paths["/v1/webhooks/{webhook_id}/deliveries"].get.parameters;
    const event = listing.find((parameter) => parameter.name === "event");
    session.eventTypes = (event && event.schema.enum) || [];
  } catch {
    session.eventTypes = [];
  }
}

/** The event types a subscription may name (the test event is sent only by "Send a test"). */
export function subscribableTypes() {
  return session.eventTypes.filter((type) => type !== "webhook.test");
}
