// Events: the stream, searched by type and time, or found by id; one event with where it went.

import { api, segment } from "./api.js";
import { badge, h, jsonBlock, show, table, when } from "./dom.js";
import { can, session } from "./session.js";
import { Pager, isoToLocal, localToIso, pageHead } from "./ui.js";

const EVENT_ID = /^EV[0-9a-f]{32}$/;
const EXCERPT = 120;

function excerpt(data) {
  const text = JSON.stringify(data);
  return text.length > EXCERPT ? `${text.slice(0, EXCERPT)}…` : text;
}

function searchForms(ctx) {
  const q = ctx.query;
  const id = h("input", { id: "event-id", type: "text", placeholder: "EV…", spellcheck: "false" });
  const idProblem = h("span", { class: "hint", role: "status" });
  const byId = h("form", { class: "filters", role: "search", "aria-label": "Find an event by id" },
    h("label", { class: "field" }, h("span", { class: "caption" }, "Event id"), id),
    h("div", { class: "filter-buttons" }, h("button", { type: "submit" }, "Open")),
    idProblem);
  byId.addEventListener("submit", (e) => {
    e.preventDefault();
    const value = id.value.trim();
    if (!EVENT_ID.test(value)) {
      show(idProblem, "An event id is EV and 32 hex digits.");
      return;
    }
    location.hash = `#/events/${value}`;
  });
  const type = h("input", { id: "event-type", type: "text", list: "event-types", value: q.get("type") || "", placeholder: "call.missed" });
  const types = h("datalist", { id: "event-types" }, session.eventTypes.map((t) => h("option", { value: t })));
  const since = h("input", { id: "event-since", type: "datetime-local", value: isoToLocal(q.get("since")) });
  const until = h("input", { id: "event-until", type: "datetime-local", value: isoToLocal(q.get("until")) });
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter the events" },
    h("label", { class: "field" }, h("span", { class: "caption" }, "Type"), type, types),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Since"), since),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Before"), until),
    h("div", { class: "filter-buttons" },
      h("button", { type: "submit" }, "Search"),
      h("a", { class: "button", href: "#/events" }, "Clear")));
  filters.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    if (type.value.trim()) next.set("type", type.value.trim());
    if (since.value) next.set("since", localToIso(since.value));
    if (until.value) next.set("until", localToIso(until.value));
    const text = next.toString();
    location.hash = `#/events${text ? `?${text}` : ""}`;
  });
  return [byId, filters];
}

export async function eventsPage(ctx) {
  const query = {};
  for (const name of ["type", "since", "until"]) if (ctx.query.get(name)) query[name] = ctx.query.get(name);
  const rows = h("div");
  const paging = h("div");
  const pager = new Pager(
    (cursor) => api("GET", "/v1/events", { query: { ...query, cursor }, signal: ctx.signal }),
    (page) => {
      if (!ctx.live()) return;
      show(rows, page.data.length
        ? table("Events, newest first", ["Created", "Type", "Id", "Data"],
          page.data.map((event) => [
            when(event.createdAt),
            event.type,
            h("a", { href: `#/events/${event.id}` }, event.id),
            h("code", { class: "excerpt-inline" }, excerpt(event.data)),
          ]))
        : h("p", { class: "empty" }, "No events match."));
      show(paging, pager.controls(ctx.fail));
    });
  await pager.refresh();
  if (!ctx.live()) return;
  show(ctx.view, pageHead("Events", "What happened in the workspace, newest first (test events are not part of the stream)."),
    searchForms(ctx), rows, paging);
}

export async function eventPage(ctx) {
  const [id] = ctx.params;
  const event = await api("GET", `/v1/events/${segment(id)}`, { signal: ctx.signal });
  if (!ctx.live()) return;
  const { deliveryCount, deliveries, ...envelope } = event;
  const went = deliveries.length
    ? table("Where the event went", ["Delivery", "Webhook", "Status", "Attempts"],
      deliveries.map((d) => [
        can("webhooks:read") ? h("a", { href: `#/webhooks/${d.webhookId}/deliveries/${d.id}` }, d.id) : d.id,
        can("webhooks:read") ? h("a", { href: `#/webhooks/${d.webhookId}` }, d.webhookId) : d.webhookId,
        badge(d.status),
        String(d.attempts),
      ]))
    : h("p", { class: "empty" }, "No subscription heard this event.");
  show(ctx.view,
    pageHead(event.type, event.id),
    h("dl", { class: "settings" },
      h("div", {}, h("dt", {}, "created"), h("dd", {}, when(event.createdAt))),
      h("div", {}, h("dt", {}, "API version"), h("dd", {}, event.apiVersion))),
    h("section", { "aria-labelledby": "went-title" },
      h("h2", { id: "went-title" }, `Where it went (${deliveryCount})`),
      deliveryCount > deliveries.length ? h("p", { class: "hint" }, `The first ${deliveries.length} are listed.`) : null,
      went),
    h("section", { "aria-labelledby": "envelope-title" },
      h("h2", { id: "envelope-title" }, "Envelope"),
      jsonBlock(envelope, "Event envelope")));
}
