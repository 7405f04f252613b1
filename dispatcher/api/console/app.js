// The console's entry point: signing in and out, the header, and the hash router
// (#/webhooks, #/webhooks/WH…/deliveries, …). Each page is a function of a context (below)
// that renders into the <main> element; leaving a page aborts its requests and stops its timers.

import { api, forgetKey, keepKey, savedKey, whenUnauthorized } from "./api.js";
import { conversationPage, conversationsPage } from "./conversations.js";
import { deliveriesPage, deliveryPage } from "./deliveries.js";
import { h, show } from "./dom.js";
import { eventTypesPage } from "./event-types.js";
import { eventPage, eventsPage } from "./events.js";
import { exchange, inPortal, takeSecret } from "./portal.js";
import { can, loadCatalog, session } from "./session.js";
import { clearNotice, errorBox, isAbort } from "./ui.js";
import { newWebhookPage, webhookPage, webhooksPage } from "./webhooks.js";

const ID = "([A-Z]{2}[0-9a-f]{32})";
const ROUTES = [
  [new RegExp("^/webhooks$"), webhooksPage],
  [new RegExp("^/webhooks/new$"), newWebhookPage],
  [new RegExp(`^/webhooks/${ID}$`), webhookPage],
  [new RegExp(`^/webhooks/${ID}/deliveries$`), deliveriesPage],
  [new RegExp(`^/webhooks/${ID}/deliveries/${ID}$`), deliveryPage],
  [new RegExp("^/events$"), eventsPage],
  [new RegExp(`^/events/${ID}$`), eventPage],
  [new RegExp("^/event-types$"), eventTypesPage],
  [new RegExp("^/conversations$"), conversationsPage],
  [new RegExp(`^/conversations/${ID}$`), conversationPage],
];

const SECTIONS = [
  ["#/webhooks", "Webhooks", "webhooks:read"],
  ["#/events", "Events", "events:read"],
  ["#/conversations", "Conversations", "conversations:read"],
  ["#/event-types", "Event types", null], // any key may read the catalog
];

const view = () => document.getElementById("view");
let current = null; // the page on screen: {controller, timers}

function leave() {
  if (!current) return;
  current.controller.abort();
  for (const timer of current.timers) clearInterval(timer);
  current = null;
}

/** What a page gets: where to render, its address, and what is undone when it is left. */
function context(params, query) {
  const controller = new AbortController();
  const page = { controller, timers: [] };
  current = page;
  return {
    view: view(),
    params,
    query,
    signal: controller.signal,
    /** Whether the reader is still on this page (answers that arrive later are dropped). */
    live: () => current === page,
    /** Run `task` every `ms` while the page is open and the tab visible. */
    every(ms, task) {
      page.timers.push(setInterval(() => {
        if (current === page && !document.hidden) task();
      }, ms));
    },
    /** Show an error in place of the page, unless the page was left. */
    fail(error) {
      if (isAbort(error) || current !== page) return;
      show(view(), errorBox(error));
    },
  };
}

function route() {
  // A portal link opened again in this tab changes only the fragment (no page load): load
  // the page, whose start takes the secret out of the address and exchanges it.
  if (inPortal && location.hash.startsWith("#portal=")) {
    location.reload();
    return;
  }
  leave();
  clearNotice();
  if (!session.me) return;
  const [path, search] = (location.hash.slice(1) || "/webhooks").split("?");
  const query = new URLSearchParams(search || "");
  for (const [pattern, page] of ROUTES) {
    const found = pattern.exec(path);
    if (found) {
      markSection(path);
      const ctx = context(found.slice(1), query);
      show(ctx.view, h("p", { class: "muted" }, "Loading…"));
      ctx.view.focus({ preventScroll: true });
      Promise.resolve(page(ctx)).catch((error) => ctx.fail(error));
      return;
    }
  }
  show(view(), h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/webhooks" }, "Back to the webhooks")));
}

function markSection(path) {
  for (const link of document.querySelectorAll("#nav a")) {
    const here = path.startsWith(link.getAttribute("href").slice(1));
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function header() {
  const me = session.me;
  show(document.getElementById("nav"),
    SECTIONS.filter(([, , scope]) => scope === null || can(scope)).map(([href, caption]) => h("a", { href }, caption)));
  const readOnly = !me.scopes.some((scope) => scope.endsWith(":write"));
  show(document.getElementById("who"),
    h("span", { class: "workspace", title: `${inPortal ? "portal session" : "key"} ${me.keyId}` }, me.workspaceId),
    readOnly ? h("span", { class: "badge badge-readonly" }, "read-only") : null,
    h("button", { type: "button", class: "link-button", id: "sign-out", on: { click: signOut } }, "Sign out"));
}

function signOut(reason) {
  leave();
  forgetKey();
  session.me = null;
  document.getElementById("nav").replaceChildren();
  document.getElementById("who").replaceChildren();
  if (inPortal) portalEnded(typeof reason === "string" ? PORTAL_ENDED : "You signed out.");
  else signInForm(typeof reason === "string" ? reason : "");
}

const PORTAL_ENDED = "This session has ended: it expired, was deleted, or its link was used already. Ask for a new link.";

/** A portal session's page once the session is over: no key form (a portal is not signed in
 * with a key), only what happened. */
function portalEnded(message) {
  show(view(), h("section", { class: "sign-in", id: "portal-ended", "aria-labelledby": "portal-ended-title" },
    h("h1", { id: "portal-ended-title" }, "Session ended"),
    h("p", {}, message)));
}

/** A portal session's page: the link's secret exchanged (once), or the credential kept from
 * the exchange (a reload), then the console as the session may see it. */
async function bootPortal() {
  const secret = takeSecret();
  if (secret && !(await exchange(secret))) {
    portalEnded(PORTAL_ENDED);
    return;
  }
  if (!savedKey()) {
    portalEnded(PORTAL_ENDED);
    return;
  }
  try {
    await start(await api("GET", "/v1/me"));
  } catch (error) {
    if (error.status !== 401) show(view(), errorBox(error));
  }
}

function signInForm(message) {
  const input = h("input", {
    id: "api-key", type: "password", autocomplete: "off", spellcheck: "false", required: true,
    // No name: should this form ever be submitted without its script, the key stays out of
    // any request (an unnamed control is not sent).
  });
  const problem = h("div", { class: "form-problem" }, message ? errorBox(new Error(message)) : null);
  const form = h("form", { class: "sign-in", method: "post", action: "#", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in"),
    h("p", {}, "Use a workspace API key (dk_…). It is kept in this tab only, and forgotten when you sign out or close the tab."),
    h("label", { class: "field", for: "api-key" }, h("span", { class: "caption" }, "API key")),
    input,
    problem,
    h("button", { type: "submit", class: "primary" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    try {
      const me = await api("GET", "/v1/me", { key });
      keepKey(key);
      input.value = "";
      await start(me);
    } catch (error) {
      show(problem, errorBox(error.status === 401 ? new Error("That key is not valid, or it has been revoked.") : error));
    }
  });
  show(view(), form);
  input.focus();
}

async function start(me) {
  session.me = me;
  header();
  await loadCatalog();
  if (!location.hash || location.hash === "#") location.hash = "#/webhooks";
  else route();
}

async function boot() {
  whenUnauthorized(() => signOut("The API no longer accepts this key: sign in again."));
  window.addEventListener("hashchange", route);
  if (inPortal) {
    await bootPortal();
    return;
  }
  if (!savedKey()) {
    signInForm("");
    return;
  }
  try {
    await start(await api("GET", "/v1/me"));
  } catch (error) {
    if (error.status !== 401) show(view(), errorBox(error));
  }
}

boot();
