// Building the page from data, safely: every element is made with createElement, every value
// from the API goes in as text (a Text node or textContent), every listener is attached with
// addEventListener. Nothing here parses a string as HTML, and the page's Content-Security-Policy
// (Trusted Types) makes any such sink throw in Chromium should one ever be added.

const SVG_NS = "http://www.w3.org/2000/svg";

function refuseHandlerAttribute(name) {
  if (/^on/i.test(name)) {
    throw new Error(`event handler attributes are not used here (${name}); pass "on" listeners`);
  }
}

function setProps(element, props) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "on") {
      for (const [event, listener] of Object.entries(value)) {
        element.addEventListener(event, listener);
      }
    } else if (name === "text") {
      element.textContent = String(value);
    } else if (name === "value") {
      element.value = String(value);
    } else if (name === "checked" || name === "disabled" || name === "selected") {
      element[name] = Boolean(value);
    } else {
      refuseHandlerAttribute(name);
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element: h("a", {href: "#/x", class: "y"}, "text", otherNode). */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  setProps(element, props);
  append(element, children);
  return element;
}

/** An SVG element, made the same way. */
export function svg(tag, props = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  setProps(element, props);
  append(element, children);
  return element;
}

/** Replace what `element` shows. */
export function show(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A date-time as the reader's local time, in a <time> that keeps the exact instant. */
export function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  return h("time", { datetime: iso, title: iso }, date.toLocaleString());
}

/** A value that may be null, as text. */
export function orDash(value) {
  return value === null || value === undefined || value === "" ? "—" : String(value);
}

/** Pretty-printed JSON, as text in a <pre>. */
export function jsonBlock(value, label) {
  return h("pre", { class: "json", tabindex: 0, "aria-label": label || "JSON" },
    JSON.stringify(value, null, 2));
}

/** A <label> around a control with its caption. */
export function field(caption, control, hint) {
  return h("label", { class: "field" },
    h("span", { class: "caption" }, caption),
    control,
    hint ? h("span", { class: "hint" }, hint) : null);
}

/** A table from column captions and rows of cells (cells are nodes or text). */
export function table(caption, headings, rows) {
  return h("div", { class: "table-wrap" },
    h("table", {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headings.map((heading) => h("th", { scope: "col" }, heading)))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell)))))));
}

/** A status word with a colour class (pending, delivered, failed, success, ...). */
export function badge(word, kind) {
  return h("span", { class: `badge badge-${kind || word}` }, word);
}
