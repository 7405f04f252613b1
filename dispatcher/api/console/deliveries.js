// A webhook's deliveries (filters, newest first, paging, refreshing by itself) and one delivery
// (its payload, its attempts as a timeline, Retry).

import { api, segment } from "./api.js";
import { badge, h, jsonBlock, orDash, show, table, when } from "./dom.js";
import { can, session } from "./session.js";
import { Pager, actionButton, errorBox, isoToLocal, localToIso, notify, pageHead, select } from "./ui.js";
import { recoverForm, webhookPath, webhookTitle } from "./webhooks.js";

const LIST_REFRESH_MS = 5000;
const DELIVERY_REFRESH_MS = 2000;
const STATUSES = [["", "any status"], ["pending", "pending"], ["delivered", "delivered"], ["failed", "failed"]];
const FILTERS = ["status", "event", "eventId", "since", "until"];

function response(delivery) {
  if (delivery.responseStatus === null) return "—";
  return `${delivery.responseStatus}${delivery.responseMs === null ? "" : ` in ${delivery.responseMs} ms`}`;
}

function filtersForm(ctx, hookId) {
  const q = ctx.query;
  const status = select("status", STATUSES, q.get("status") || "", { id: "filter-status" });
  const event = select("event", [["", "any event"], ...session.eventTypes.map((type) => [type, type])], q.get("event") || "", { id: "filter-event" });
  const eventId = h("input", { id: "filter-event-id", name: "eventId", type: "text", value: q.get("eventId") || "", placeholder: "EV…", pattern: "EV[0-9a-f]{32}" });
  const since = h("input", { id: "filter-since", name: "since", type: "datetime-local", value: isoToLocal(q.get("since")) });
  const until = h("input", { id: "filter-until", name: "until", type: "datetime-local", value: isoToLocal(q.get("until")) });
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter the deliveries" },
    h("label", { class: "field" }, h("span", { class: "caption" }, "Status"), status),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Event type"), event),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Event id"), eventId),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Created since"), since),
    h("label", { class: "field" }, h("span", { class: "caption" }, "Created before"), until),
    h("div", { class: "filter-buttons" },
      h("button", { type: "submit" }, "Apply"),
      h("a", { class: "button", href: `#/webhooks/${hookId}/deliveries` }, "Clear")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    const values = { status: status.value, event: event.value, eventId: eventId.value.trim(), since: localToIso(since.value), until: localToIso(until.value) };
    for (const name of FILTERS) if (values[name]) next.set(name, values[name]);
    const text = next.toString();
    location.hash = `#/webhooks/${hookId}/deliveries${text ? `?${text}` : ""}`;
  });
  return form;
}

export async function deliveriesPage(ctx) {
  const [hookId] = ctx.params;
  const hook = await api("GET", webhookPath(hookId), { signal: ctx.signal });
  const query = Object.fromEntries(FILTERS.filter((name) => ctx.query.get(name)).map((name) => [name, ctx.query.get(name)]));
  const rows = h("div", { class: "deliveries" });
  const paging = h("div");
  const updated = h("span", { class: "muted small", "aria-live": "off" });
  const auto = h("input", { type: "checkbox", id: "auto-refresh", checked: true });
  const problem = h("div");
  const pager = new Pager(
    (cursor) => api("GET", `${webhookPath(hookId)}/deliveries`, { query: { ...query, cursor }, signal: ctx.signal }),
    (page) => {
      if (!ctx.live()) return;
      problem.replaceChildren();
      show(rows, page.data.length
        ? table("Deliveries, newest first", ["Created", "Event", "Status", "Attempts", "Last response", "Last error", ""],
          page.data.map((d) => [
            when(d.createdAt),
            d.event,
            badge(d.status),
            String(d.attempts),
            response(d),
            h("span", { class: "error-text" }, orDash(d.lastError)),
            h("a", { href: `#/webhooks/${hookId}/deliveries/${d.id}`, "aria-label": `Open delivery ${d.id}` }, "Open"),
          ]))
        : h("p", { class: "empty" }, "No deliveries match."));
      show(paging, pager.controls(ctx.fail));
    });
  const reload = async () => {
    await pager.refresh();
    if (ctx.live()) show(updated, `Updated ${new Date().toLocaleTimeString()}`);
  };
  await reload();
  if (!ctx.live()) return;
  show(ctx.view,
    pageHead("Deliveries", webhookTitle(hook),
      h("a", { class: "button", href: `#/webhooks/${hookId}` }, "The webhook")),
    filtersForm(ctx, hookId),
    h("div", { class: "list-bar" },
      h("label", { class: "check" }, auto, "Refresh by itself"), updated),
    problem, rows, paging,
    can("webhooks:write") ? recoverForm(ctx, hook) : null);
  ctx.every(LIST_REFRESH_MS, () => {
    if (auto.checked) reload().catch((error) => { if (ctx.live() && error.name !== "AbortError") show(problem, errorBox(error)); });
  });
}

// -- one delivery -----------------------------------------------------------------------------

function attemptItem(attempt) {
  return h("li", { class: `attempt attempt-${attempt.outcome}` },
    h("div", { class: "attempt-head" },
      h("strong", {}, `Attempt ${attempt.attemptNumber}`), " ",
      badge(attempt.outcome.replace("_", " "), attempt.outcome), " ",
      when(attempt.createdAt)),
    h("dl", { class: "attempt-facts" },
      h("div", {}, h("dt", {}, "status"), h("dd", {}, orDash(attempt.responseStatus))),
      h("div", {}, h("dt", {}, "time"), h("dd", {}, `${attempt.responseMs} ms`)),
      h("div", {}, h("dt", {}, "trigger"), h("dd", {}, attempt.trigger.replace("_", " ")))),
    attempt.error ? h("p", { class: "error-text" }, attempt.error) : null,
    attempt.responseBody
      ? h("details", {}, h("summary", {}, "Response excerpt"), h("pre", { class: "excerpt" }, attempt.responseBody))
      : null);
}

function summary(hookId, delivery) {
  const eventId = delivery.payload && delivery.payload.id;
  const facts = [
    ["status", badge(delivery.status)],
    ["webhook", h("a", { href: `#/webhooks/${hookId}` }, hookId)],
    ["event", delivery.event],
    ["event id", eventId && can("events:read") && delivery.event !== "webhook.test" ? h("a", { href: `#/events/${eventId}` }, eventId) : orDash(eventId)],
    ["created", when(delivery.createdAt)],
    ["delivered", when(delivery.deliveredAt)],
    ["next attempt", when(delivery.nextAttemptAt)],
    ["attempts", String(delivery.attempts)],
    ["last response", response(delivery)],
    ["last error", h("span", { class: "error-text" }, orDash(delivery.lastError))],
  ];
  return h("dl", { class: "settings delivery-facts" },
    facts.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", { "data-fact": name }, value))));
}

export async function deliveryPage(ctx) {
  const [hookId, deliveryId] = ctx.params;
  const path = `${webhookPath(hookId)}/deliveries/${segment(deliveryId)}`;
  const facts = h("div");
  const payload = h("div");
  const timeline = h("ol", { class: "timeline", reversed: true });
  const paging = h("div");
  const problem = h("div");
  const attempts = new Pager(
    (cursor) => api("GET", `${path}/attempts`, { query: { cursor }, signal: ctx.signal }),
    (page) => {
      if (!ctx.live()) return;
      show(timeline, page.data.length ? page.data.map(attemptItem) : h("li", { class: "empty" }, "No attempt yet."));
      show(paging, attempts.controls(ctx.fail));
    });
  let shown = null;
  const refresh = async () => {
    const delivery = await api("GET", path, { signal: ctx.signal });
    if (!ctx.live()) return;
    const seen = JSON.stringify(delivery);
    if (seen !== shown) {
      shown = seen;
      show(facts, summary(hookId, delivery));
      if (!payload.firstChild) show(payload, jsonBlock(delivery.payload, "Payload"));
    }
    await attempts.refresh();
  };
  const retry = can("webhooks:write")
    ? actionButton("Retry", async () => {
      try {
        await api("POST", `${path}/retry`, { signal: ctx.signal });
        problem.replaceChildren();
        notify("Retry queued: the delivery is due now.");
        await refresh();
      } catch (error) { show(problem, errorBox(error)); }
    }, { id: "retry", class: "primary" })
    : null;
  await refresh();
  if (!ctx.live()) return;
  show(ctx.view,
    pageHead(`Delivery ${deliveryId}`, null,
      h("a", { class: "button", href: `#/webhooks/${hookId}/deliveries` }, "All deliveries"), retry),
    problem,
    facts,
    h("section", { "aria-labelledby": "payload-title" }, h("h2", { id: "payload-title" }, "Payload"), payload),
    h("section", { "aria-labelledby": "attempts-title" }, h("h2", { id: "attempts-title" }, "Attempts"), timeline, paging));
  ctx.every(DELIVERY_REFRESH_MS, () => {
    refresh().catch((error) => { if (ctx.live() && error.name !== "AbortError") show(problem, errorBox(error)); });
  });
}
