// Pieces every page uses: headings, error and notice display, cursor paging, time inputs.

import { ApiError } from "./api.js";
import { h, show } from "./dom.js";

/** A page's title block: its heading, a line under it, and actions on the right. */
export function pageHead(title, subtitle, ...actions) {
  return h("div", { class: "page-head" },
    h("div", {},
      h("h1", {}, title),
      subtitle ? h("p", { class: "subtitle" }, subtitle) : null),
    actions.length ? h("div", { class: "actions" }, actions) : null);
}

/** An error as the reader should see it: the API's message and each field's problem. */
export function errorBox(error) {
  if (error instanceof ApiError) {
    const details = error.details;
    return h("div", { class: "error", role: "alert" },
      h("p", {}, h("strong", {}, `${error.status} ${error.body.code || "error"}`),
        details.length ? null : `: ${error.message}`),
      details.length
        ? h("ul", {}, details.map((detail) => h("li", {}, `${detail.path}: ${detail.message}`)))
        : null,
      error.body.trace ? h("p", { class: "muted small" }, `trace ${error.body.trace}`) : null);
  }
  return h("div", { class: "error", role: "alert" }, h("p", {}, String(error && error.message || error)));
}

export function isAbort(error) {
  return error && error.name === "AbortError";
}

/** A transient line in the notice area (polite live region). */
export function notify(text) {
  const area = document.getElementById("notice");
  show(area, h("p", {}, text));
}

export function clearNotice() {
  document.getElementById("notice").replaceChildren();
}

/**
 * Cursor paging: the API's lists go forward only (nextCursor), so the way back is the stack
 * of cursors seen. `load(cursor)` fetches a page; `render(page)` shows it.
 */
export class Pager {
  constructor(load, render) {
    this.load = load;
    this.render = render;
    this.cursors = [null];
    this.next = null;
    this.shown = null; // the page on screen, as JSON
  }

  get cursor() {
    return this.cursors[this.cursors.length - 1];
  }

  /** Load the current page again; it is drawn again only if it changed, so that a page
   * refreshing by itself keeps the reader's focus and what they unfolded. */
  async refresh() {
    const page = await this.load(this.cursor);
    const seen = JSON.stringify(page);
    this.next = page.nextCursor;
    if (seen === this.shown) return;
    this.shown = seen;
    this.render(page);
  }

  async forward() {
    if (!this.next) return;
    this.cursors.push(this.next);
    await this.refresh();
  }

  async back() {
    if (this.cursors.length < 2) return;
    this.cursors.pop();
    await this.refresh();
  }

  async first() {
    this.cursors = [null];
    await this.refresh();
  }

  /** The Newer / Older buttons under a list. */
  controls(fail) {
    if (this.cursors.length < 2 && !this.next) return null; // one page: nothing to move to
    const guard = (step) => () => step().catch(fail);
    return h("div", { class: "pager" },
      h("button", { type: "button", disabled: this.cursors.length < 2, on: { click: guard(() => this.back()) } }, "← Newer"),
      h("span", { class: "muted" }, `page ${this.cursors.length}`),
      h("button", { type: "button", disabled: !this.next, on: { click: guard(() => this.forward()) } }, "Older →"));
  }
}

/** `<input type=datetime-local>` value (the reader's local time) -> ISO 8601 with offset. */
export function localToIso(value) {
  if (!value) return "";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? "" : date.toISOString();
}

/** ISO 8601 -> a datetime-local value in the reader's time zone. */
export function isoToLocal(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/** A <select> of `choices` ([value, caption] pairs), with `current` selected. */
export function select(name, choices, current, props = {}) {
  return h("select", { name, ...props },
    choices.map(([value, caption]) => h("option", { value, selected: value === current }, caption)));
}

/** A button that runs `action` once at a time, showing `busy` while it runs. */
export function actionButton(caption, action, props = {}) {
  const button = h("button", { type: "button", ...props }, caption);
  button.addEventListener("click", async () => {
    if (button.disabled) return;
    button.disabled = true;
    try {
      await action();
    } finally {
      if (button.isConnected) button.disabled = false;
    }
  });
  return button;
}

/** A percentage from a ratio (null: nothing to count). */
export function percent(ratio) {
  return ratio === null || ratio === undefined ? "—" : `${(ratio * 100).toFixed(1)}%`;
}
