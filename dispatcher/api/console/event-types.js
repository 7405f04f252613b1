// The event catalog (GET /v1/event-types): every type a delivery can carry, what it means,
// the JSON Schema of its `data` and an example. Any signed-in key may read it.

import { api } from "./api.js";
import { h, jsonBlock, show } from "./dom.js";
import { pageHead } from "./ui.js";

function eventType(item) {
  const id = `type-${item.name.replaceAll(".", "-")}`;
  return h("section", { class: "event-type", id, "data-type": item.name, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, h("code", {}, item.name)),
    h("p", { class: "description" }, item.description),
    h("details", { class: "schema" },
      h("summary", {}, "Schema of data (JSON Schema 2020-12)"),
      jsonBlock(item.schema, `Schema of ${item.name} data`)),
    h("details", { class: "example", open: true },
      h("summary", {}, "Example data"),
      jsonBlock(item.example, `Example of ${item.name} data`)));
}

export async function eventTypesPage(ctx) {
  const page = await api("GET", "/v1/event-types", { signal: ctx.signal });
  if (!ctx.live()) return;
  const index = h("nav", { class: "type-index", "aria-label": "Event types" },
    h("ul", {}, page.data.map((item) => h("li", {},
      h("a", { href: `#/event-types?type=${encodeURIComponent(item.name)}` }, item.name)))));
  const sections = page.data.map(eventType);
  show(ctx.view,
    pageHead("Event types", "Every event a webhook can receive: what it means, the schema of its data, and an example. Each delivery's body is the envelope {id, type, apiVersion, createdAt, data}."),
    index,
    sections);
  const wanted = ctx.query.get("type");
  const target = wanted && sections.find((section) => section.dataset.type === wanted);
  if (target) {
    target.querySelector("details.schema").open = true;
    target.scrollIntoView();
  }
}
