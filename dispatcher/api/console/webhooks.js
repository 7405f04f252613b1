// Webhooks: the list with each endpoint's health and last hour, one webhook with its actions,
// and the create / edit form (GET/POST/PATCH /v1/webhooks…, docs/webhooks.md).

import { api, segment } from "./api.js";
import { attemptsChart } from "./chart.js";
import { badge, field, h, orDash, show, when } from "./dom.js";
import { can, rangeHint, subscribableTypes, webhookFieldBounds, webhookFieldList } from "./session.js";
import { Pager, actionButton, errorBox, isoToLocal, localToIso, notify, pageHead, percent, select } from "./ui.js";

const WINDOWS = [["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"]];
const DISABLED_WHY = {
  manual: "disabled by its owner",
  failing: "disabled: the endpoint kept failing",
  gone: "disabled: the endpoint answered 410 Gone",
};

export function webhookTitle(hook) {
  return hook.name || hook.url || hook.id;
}

/** Where its events go: its URL, or, for a poll webhook (no URL), how they are read. */
function endpointOf(hook) {
  return hook.mode === "poll" ? `poll mode: GET ${webhookPath(hook.id)}/poll` : hook.url;
}

export function webhookPath(id) {
  return `/v1/webhooks/${segment(id)}`;
}

function statusBadge(hook) {
  if (!hook.disabledAt) return badge("enabled", "enabled");
  return h("span", { class: "status-line" }, badge("disabled", "disabled"), " ",
    h("span", { class: "why" }, DISABLED_WHY[hook.disabledReason] || hook.disabledReason || "",
      " since ", when(hook.disabledAt)));
}

/** The figures of GET …/stats in a few words: success rate, p95, failing since, effective rate. */
function healthLine(stats) {
  const attempts = Object.values(stats.attempts).reduce((sum, count) => sum + count, 0);
  return h("dl", { class: "figures" },
    h("div", {}, h("dt", {}, "success rate"), h("dd", { class: "figure-rate" }, percent(stats.successRate))),
    h("div", {}, h("dt", {}, "p95 response"), h("dd", {}, stats.responseMs.p95 === null ? "—" : `${stats.responseMs.p95} ms`)),
    h("div", {}, h("dt", {}, "attempts"), h("dd", {}, String(attempts))),
    h("div", {}, h("dt", {}, "failed deliveries"), h("dd", {}, String(stats.deliveries.failed))),
    stats.failingSince
      ? h("div", { class: "failing" }, h("dt", {}, "failing since"), h("dd", {}, when(stats.failingSince)))
      : null,
    // Flow control: the rate in force now (its rateLimit, or lower while the receiver's 429s
    // have it adapted); absent when unrestricted.
    stats.effectiveRateLimit === null || stats.effectiveRateLimit === undefined
      ? null
      : h("div", { class: "effective-rate" }, h("dt", {}, "effective rate"),
        h("dd", {}, `${Math.round(stats.effectiveRateLimit * 10) / 10} requests/s`)));
}

async function loadHealth(ctx, hook, box, window = "24h") {
  try {
    const [stats, minutes] = await Promise.all([
      api("GET", `${webhookPath(hook.id)}/stats`, { query: { window }, signal: ctx.signal }),
      api("GET", `${webhookPath(hook.id)}/stats/minutes`, { signal: ctx.signal }),
    ]);
    if (ctx.live()) show(box, healthLine(stats), attemptsChart(minutes.minutes));
  } catch (error) {
    if (ctx.live() && error.name !== "AbortError") show(box, errorBox(error));
  }
}

function card(ctx, hook) {
  const health = h("div", { class: "health" }, h("p", { class: "muted" }, "Loading health…"));
  loadHealth(ctx, hook, health);
  return h("article", { class: "card webhook-card", "data-webhook": hook.id },
    h("header", { class: "card-head" },
      h("h2", {}, h("a", { href: `#/webhooks/${hook.id}` }, webhookTitle(hook))),
      statusBadge(hook)),
    h("p", { class: "url" }, h("code", {}, endpointOf(hook))),
    h("p", { class: "events" }, hook.events.join(", ")),
    health,
    h("p", { class: "card-links" },
      h("a", { href: `#/webhooks/${hook.id}/deliveries` }, "Deliveries"),
      h("a", { href: `#/webhooks/${hook.id}` }, "Details and actions")));
}

export async function webhooksPage(ctx) {
  const list = h("div", { class: "cards" });
  const paging = h("div");
  const pager = new Pager(
    (cursor) => api("GET", "/v1/webhooks", { query: { cursor }, signal: ctx.signal }),
    (page) => {
      if (!ctx.live()) return;
      show(list, page.data.length
        ? page.data.map((hook) => card(ctx, hook))
        : h("p", { class: "empty" }, "No webhooks yet."));
      show(paging, pager.controls(ctx.fail));
    });
  await pager.refresh();
  show(ctx.view,
    pageHead("Webhooks", "Each subscription, its endpoint's health over 24 hours, and its attempts over the last hour.",
      can("webhooks:write") ? h("a", { class: "button primary", href: "#/webhooks/new" }, "Create a webhook") : null),
    list, paging);
}

// -- one webhook ------------------------------------------------------------------------------

function settingsList(hook) {
  const rows = [
    ["id", h("code", {}, hook.id)],
    ["mode", hook.mode || "push"],
    ...(hook.mode === "poll" ? [] : [["URL", h("code", {}, hook.url)]]),
    ["name", orDash(hook.name)],
    ["events", hook.events.join(", ")],
    ["numbers", hook.numberIds === null ? "every number" : (hook.numberIds.join(", ") || "none")],
    ["max concurrency", String(hook.maxConcurrency)],
    ["created", when(hook.createdAt)],
  ];
  for (const extra of extraFields().filter((field) => !field.writeOnly)) {
    if (!(extra.name in hook)) continue;
    const value = hook[extra.name];
    rows.push([extra.caption, extra.describe ? extra.describe(value) : h("code", {}, JSON.stringify(value))]);
  }
  if ("secretHeaderNames" in hook) rows.push(["secret header names", hook.secretHeaderNames.join(", ") || "none"]);
  if ("tls" in hook) rows.push(["mutual TLS", tlsSummary(hook.tls)]);
  return h("dl", { class: "settings" }, rows.map(([name, value]) => h("div", {}, h("dt", {}, name), h("dd", {}, value))));
}

/** Mutual TLS as the API answers it (never its key): on or off, the client certificate's
 * subject and expiry, and which CAs verify the receiver. */
function tlsSummary(tls) {
  if (!tls) return "off";
  return h("span", { class: "tls" }, "on: client certificate ", h("code", {}, tls.subject || "?"),
    `, expires ${tls.expiresAt ? when(tls.expiresAt) : "?"}; the receiver verified against `,
    tls.caCertificate ? "its own CA" : "the system's CAs");
}

function actions(ctx, hook, refresh) {
  const path = webhookPath(hook.id);
  const secretBox = h("div", { class: "secret-box" });
  const showSecret = (secret, caption) => show(secretBox,
    h("p", {}, caption), h("code", { class: "secret" }, secret));
  const buttons = [
    h("a", { class: "button", href: `#/webhooks/${hook.id}/deliveries` }, "Deliveries"),
    actionButton("Show the signing secret", async () => {
      try {
        showSecret((await api("GET", `${path}/secret`, { signal: ctx.signal })).secret, "Current signing secret:");
      } catch (error) { show(secretBox, errorBox(error)); }
    }),
  ];
  if (can("webhooks:write")) {
    buttons.push(
      actionButton("Send a test", async () => {
        try {
          const delivery = await api("POST", `${path}/test`, { signal: ctx.signal });
          notify(`Test delivery ${delivery.id} queued.`);
          show(secretBox, h("p", {}, "Test delivery queued: ",
            h("a", { href: `#/webhooks/${hook.id}/deliveries/${delivery.id}` }, delivery.id)));
        } catch (error) { show(secretBox, errorBox(error)); }
      }, { id: "send-test" }),
      actionButton(hook.disabledAt ? "Enable" : "Disable", async () => {
        try {
          await api("PATCH", path, { body: { enabled: Boolean(hook.disabledAt) }, signal: ctx.signal });
          notify(hook.disabledAt ? "Webhook enabled." : "Webhook disabled.");
          await refresh();
        } catch (error) { show(secretBox, errorBox(error)); }
      }, { id: "toggle-enabled" }),
      actionButton("Rotate the secret", async () => {
        if (!window.confirm("Rotate the signing secret? The previous one keeps signing beside the new one for the grace period.")) return;
        try {
          showSecret((await api("POST", `${path}/secret/rotate`, { signal: ctx.signal })).secret, "New signing secret:");
        } catch (error) { show(secretBox, errorBox(error)); }
      }));
  }
  return h("div", {}, h("div", { class: "actions" }, buttons), secretBox);
}

export async function webhookPage(ctx) {
  const [id] = ctx.params;
  const windowChoice = select("window", WINDOWS, "24h", { id: "health-window" });
  const health = h("div", { class: "health" }, h("p", { class: "muted" }, "Loading health…"));
  let hook = null;
  const reloadHealth = () => loadHealth(ctx, hook, health, windowChoice.value);
  windowChoice.addEventListener("change", reloadHealth);
  // Drawn again after each change (enable, disable, edit); the health box and its timer stay.
  const render = async () => {
    hook = await api("GET", webhookPath(id), { signal: ctx.signal });
    if (!ctx.live()) return;
    show(ctx.view,
      pageHead(webhookTitle(hook), endpointOf(hook), statusBadge(hook)),
      actions(ctx, hook, render),
      h("section", { "aria-labelledby": "health-title" },
        h("div", { class: "section-head" }, h("h2", { id: "health-title" }, "Health"), field("Window", windowChoice)),
        health),
      h("section", { "aria-labelledby": "settings-title" },
        h("h2", { id: "settings-title" }, "Settings"),
        settingsList(hook),
        can("webhooks:write")
          ? h("details", { class: "edit" }, h("summary", {}, "Edit"),
            webhookForm(ctx, hook, async () => { notify("Saved."); await render(); }))
          : null),
      can("webhooks:write") ? recoverForm(ctx, hook) : null);
    reloadHealth();
  };
  await render();
  ctx.every(15000, reloadHealth);
}

// -- recover ----------------------------------------------------------------------------------

export function recoverForm(ctx, hook) {
  const since = h("input", { type: "datetime-local", id: "recover-since", required: true,
    value: isoToLocal(new Date(Date.now() - 3600 * 1000).toISOString()) });
  const until = h("input", { type: "datetime-local", id: "recover-until" });
  const result = h("div", { role: "status" });
  const form = h("form", { class: "recover" },
    h("p", { class: "hint" }, "Queue again the failed deliveries created in the window, and create the deliveries this webhook missed (while disabled). At most 14 days back."),
    h("div", { class: "row" },
      field("Since", since),
      field("Until (optional)", until, "empty: now")),
    h("button", { type: "submit" }, "Recover"),
    result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { since: localToIso(since.value) };
    if (until.value) body.until = localToIso(until.value);
    try {
      const answer = await api("POST", `${webhookPath(hook.id)}/recover`, { body, signal: ctx.signal });
      show(result, h("p", { class: "ok" }, `${answer.queued} deliveries queued.`));
    } catch (error) { show(result, errorBox(error)); }
  });
  return h("section", { "aria-labelledby": "recover-title" },
    h("h2", { id: "recover-title" }, "Recover"), form);
}

// -- create and edit --------------------------------------------------------------------------

// Fields the subscription may carry beyond the first ones (custom headers, payload filter,
// ordering, rate limit): shown whatever the server answers, sent only when changed, so that a
// server that does not know them yet refuses them with its own 400 message.
const EXTRA_FIELDS = [
  { name: "headers", caption: "headers", kind: "json", hint: 'JSON object, e.g. {"X-Team": "payments"}; sent with every attempt' },
  { name: "secretHeaders", caption: "secret headers", kind: "json", writeOnly: true, hint: "JSON object, sent with every attempt and never shown again; empty keeps them, {} clears them" },
  { name: "filter", caption: "payload filter", kind: "json", hint: 'JSON object the event data must contain, e.g. {"direction": "incoming"}; empty: every event' },
  { name: "ordering", caption: "ordering", kind: "choice", choices: [["", "(server default)"], ["none", "none"], ["fifo", "fifo"]] },
  { name: "tls", caption: "mutual TLS", kind: "json", writeOnly: true, hint: 'JSON object {"clientCertificate": PEM, "clientKey": PEM, "caCertificate": PEM or null}; the key is never shown again; empty keeps it, null removes it' },
  { name: "rateLimit", caption: "rate limit (requests/s)", kind: "integer", hint: () => [rangeHint("rateLimit"), "empty: no limit"].filter(Boolean).join("; ") },
  // Answered without its clientSecret (write-only): shown and pre-filled without it.
  { name: "auth", caption: "authentication", kind: "json", describe: describeAuth,
    hint: 'OAuth 2.0 client credentials, JSON: {"type": "oauth2", "tokenUrl": "https://…", "clientId": "…", "clientSecret": "…", "scope": "…"}; the secret is never shown again: left out, the stored one is kept (same tokenUrl and clientId); empty: none' },
];

/** A webhook's `auth` in words: its type, token URL and client id (never a secret). */
function describeAuth(auth) {
  if (!auth) return "none";
  return h("span", {}, `${auth.type}: client `, h("code", {}, auth.clientId), " at ", h("code", {}, auth.tokenUrl),
    auth.scope ? `, scope ${auth.scope}` : "", auth.audience ? `, audience ${auth.audience}` : "");
}
// The fields the form writes out itself (the first ones and the extra ones above).
const WRITTEN = new Set(["url", "events", "name", "numberIds", "maxConcurrency", ...EXTRA_FIELDS.map((extra) => extra.name)]);
// Every other field of the create body is an option the API passes through (null: the
// service's default), drawn from its schema in the OpenAPI document (domain/endpoints.py
// `PASSED`): no edit here for a new one. Optional wording, by name, over the generic one.
const PASSED_WORDING = {
  timeoutSeconds: { caption: "timeout (seconds)" },
  retrySchedule: { caption: "retry schedule (seconds)", hint: "JSON array of the delays after each failed attempt, e.g. [10, 60, 600]; empty: the service default" },
};

// `maxPayloadKilobytes` -> "max payload kilobytes".
const wordsOf = (name) => name.replace(/([A-Z])/g, " $1").toLowerCase();

function passedField({ name, type, title, description }) {
  const kind = type === "number" || type === "integer" ? type : "json";
  const wording = PASSED_WORDING[name] || {};
  const generic = () => [kind === "json" ? `JSON ${type || "value"}` : rangeHint(name), "empty: the service default"]
    .filter(Boolean).join("; ");
  return { name, kind, caption: wording.caption || title || wordsOf(name), hint: wording.hint || description || generic };
}

/** The extra fields, then the options passed through, as the API documents them. */
function extraFields() {
  return [...EXTRA_FIELDS, ...webhookFieldList().filter((given) => !WRITTEN.has(given.name)).map(passedField)];
}

function extraControl(extra, hook) {
  const id = `field-${extra.name}`;
  const known = hook && extra.name in hook && !extra.writeOnly;
  const value = known ? hook[extra.name] : null;
  if (extra.kind === "choice") {
    return select(extra.name, extra.choices, value === null ? "" : value, { id });
  }
  if (extra.kind === "integer" || extra.kind === "number") {
    const { minimum, maximum } = webhookFieldBounds(extra.name);
    const step = extra.kind === "integer" ? 1 : "any";
    return h("input", { id, name: extra.name, type: "number", min: minimum, max: maximum, step, value: value === null ? "" : value });
  }
  const empty = value === null || (typeof value === "object" && Object.keys(value).length === 0);
  return h("textarea", { id, name: extra.name, rows: 2, spellcheck: "false", value: empty ? "" : JSON.stringify(value, null, 2) });
}

function readExtra(extra, control) {
  const text = control.value.trim();
  if (extra.kind === "choice") return text || null;
  if (extra.kind === "integer" || extra.kind === "number") return text === "" ? null : Number(text);
  if (text === "") return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${extra.caption}: not valid JSON`);
  }
}

function numberIdsOf(text) {
  const ids = text.split(/[\s,]+/).filter(Boolean);
  return ids.length ? ids : null;
}

/** The create (hook undefined) or edit form; `done(hook)` runs after a success. */
function webhookForm(ctx, hook, done) {
  const url = h("input", { id: "field-url", type: "url", required: true, value: hook ? hook.url || "" : "", placeholder: "https://example.com/webhooks" });
  const poll = Boolean(hook && hook.mode === "poll"); // no URL to show or set
  const name = h("input", { id: "field-name", type: "text", maxlength: webhookFieldBounds("name").maxLength, value: hook ? hook.name || "" : "" });
  const types = subscribableTypes();
  const chosen = new Set(hook ? hook.events : []);
  const boxes = types.map((type) => h("input", { type: "checkbox", value: type, checked: chosen.has(type) }));
  const eventsText = h("input", { id: "field-events", type: "text", value: hook ? hook.events.join(", ") : "" });
  const events = types.length
    ? h("fieldset", { class: "events-choice" }, h("legend", {}, "Events"),
      boxes.map((box) => h("label", { class: "check" }, box, box.value)))
    : field("Events (comma-separated)", eventsText);
  const numbers = h("input", { id: "field-numbers", type: "text", value: hook && hook.numberIds ? hook.numberIds.join(", ") : "" });
  const { minimum, maximum } = webhookFieldBounds("maxConcurrency");
  const concurrency = h("input", { id: "field-concurrency", type: "number", min: minimum, max: maximum, value: hook ? hook.maxConcurrency : "" });
  const extras = extraFields().map((extra) => [extra, extraControl(extra, hook)]);
  const initial = new Map([[url, url.value], [name, name.value], [numbers, numbers.value], [concurrency, String(concurrency.value)],
    ...extras.map(([, control]) => [control, control.value])]);
  const initialEvents = [...chosen].sort().join(",");
  const changed = (control) => control.value !== initial.get(control);
  const problem = h("div", { class: "form-problem" });
  const selectedEvents = () => types.length
    ? boxes.filter((box) => box.checked).map((box) => box.value)
    : eventsText.value.split(/[\s,]+/).filter(Boolean);

  const body = () => {
    const fields = {};
    if (!poll && (!hook || changed(url))) fields.url = url.value.trim();
    const picked = selectedEvents();
    if (!hook || [...picked].sort().join(",") !== initialEvents) fields.events = picked;
    if (hook ? changed(name) : name.value.trim()) fields.name = name.value.trim() || null;
    if (hook ? changed(numbers) : numbers.value.trim()) fields.numberIds = numberIdsOf(numbers.value);
    if (hook ? changed(concurrency) : concurrency.value) fields.maxConcurrency = concurrency.value ? Number(concurrency.value) : null;
    for (const [extra, control] of extras) {
      if (changed(control)) fields[extra.name] = readExtra(extra, control);
    }
    return fields;
  };

  const form = h("form", { class: "webhook-form", novalidate: true },
    poll ? null : field("URL", url, "where the deliveries are sent (http or https)"),
    field("Name (optional)", name),
    events,
    field("Numbers (optional)", numbers, "PN… ids separated by commas; empty: every number"),
    field("Max concurrency", concurrency, "requests in flight at once; empty: the service default"),
    h("fieldset", { class: "extras" }, h("legend", {}, "Headers, filter, ordering, rate limit and more"),
      extras.map(([extra, control]) => field(extra.caption, control, typeof extra.hint === "function" ? extra.hint() : extra.hint))),
    problem,
    h("button", { type: "submit", class: "primary" }, hook ? "Save changes" : "Create the webhook"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let fields;
    try {
      fields = body();
    } catch (error) {
      show(problem, errorBox(error));
      return;
    }
    if (hook && Object.keys(fields).length === 0) {
      show(problem, h("p", { class: "muted" }, "Nothing changed."));
      return;
    }
    try {
      const saved = hook
        ? await api("PATCH", webhookPath(hook.id), { body: fields, signal: ctx.signal })
        : await api("POST", "/v1/webhooks", { body: fields, signal: ctx.signal });
      problem.replaceChildren();
      await done(saved);
    } catch (error) {
      show(problem, errorBox(error));
    }
  });
  return form;
}

export async function newWebhookPage(ctx) {
  if (!can("webhooks:write")) {
    show(ctx.view, pageHead("Create a webhook"), h("p", {}, "This key cannot create webhooks (it lacks webhooks:write)."));
    return;
  }
  const form = webhookForm(ctx, undefined, async (created) => {
    show(ctx.view,
      pageHead("Webhook created", endpointOf(created)),
      h("p", {}, "Its signing secret (also shown on the webhook's page, with Show the signing secret):"),
      h("code", { class: "secret" }, created.secret),
      h("p", {}, h("a", { class: "button primary", href: `#/webhooks/${created.id}` }, "Open the webhook")));
  });
  show(ctx.view, pageHead("Create a webhook"), form);
}
