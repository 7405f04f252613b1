// Conversations: the open and done folders, moving a thread between them, and its messages.

import { api, segment } from "./api.js";
import { badge, h, show, table, when } from "./dom.js";
import { can } from "./session.js";
import { Pager, actionButton, errorBox, notify, pageHead } from "./ui.js";

const FOLDERS = [["open", "Open"], ["done", "Done"]];

function other(status) {
  return status === "open" ? "done" : "open";
}

async function move(ctx, conversation) {
  const moved = await api("POST", `/v1/conversations/${segment(conversation.id)}/status`,
    { body: { status: other(conversation.status) }, signal: ctx.signal });
  notify(`Moved to ${moved.status}.`);
  return moved;
}

export async function conversationsPage(ctx) {
  const folder = ctx.query.get("status") === "done" ? "done" : "open";
  const rows = h("div");
  const paging = h("div");
  const problem = h("div");
  const pager = new Pager(
    (cursor) => api("GET", "/v1/conversations", { query: { status: folder, cursor }, signal: ctx.signal }),
    (page) => {
      if (!ctx.live()) return;
      show(rows, page.data.length
        ? table(`${folder} conversations`, ["Contact", "Number", "Last activity", "Last item", ""],
          page.data.map((c) => [
            h("a", { href: `#/conversations/${c.id}` }, c.contact),
            h("code", {}, c.numberId),
            when(c.lastItemAt),
            c.lastItemKind === "call_log" ? "call" : "message",
            can("conversations:write")
              ? actionButton(folder === "open" ? "Move to done" : "Move to open", async () => {
                try {
                  await move(ctx, c);
                  await pager.refresh();
                } catch (error) { show(problem, errorBox(error)); }
              })
              : "",
          ]))
        : h("p", { class: "empty" }, `No ${folder} conversations.`));
      show(paging, pager.controls(ctx.fail));
    });
  await pager.refresh();
  if (!ctx.live()) return;
  show(ctx.view,
    pageHead("Conversations", "Threads between your numbers and their contacts."),
    h("nav", { class: "tabs", "aria-label": "Folders" },
      FOLDERS.map(([status, caption]) => h("a", {
        href: `#/conversations?status=${status}`,
        "aria-current": status === folder ? "page" : null,
      }, caption))),
    problem, rows, paging);
}

function messageItem(message) {
  return h("li", { class: `message message-${message.direction}` },
    h("div", { class: "message-head" },
      h("strong", {}, message.direction === "incoming" ? message.from : `to ${message.to}`), " ",
      when(message.createdAt), " ", badge(message.status)),
    h("p", { class: "message-text" }, message.text),
    message.media.length
      ? h("ul", { class: "media" }, message.media.map((m) => h("li", {}, `${m.contentType}: `, h("code", {}, m.url))))
      : null);
}

export async function conversationPage(ctx) {
  const [id] = ctx.params;
  let conversation = await api("GET", `/v1/conversations/${segment(id)}`, { signal: ctx.signal });
  if (!ctx.live()) return;
  const head = h("div");
  const problem = h("div");
  const messages = h("ol", { class: "messages" });
  const paging = h("div");
  const renderHead = () => show(head,
    pageHead(conversation.contact, `with ${conversation.numberId}`, badge(conversation.status),
      can("conversations:write")
        ? actionButton(conversation.status === "open" ? "Move to done" : "Move to open", async () => {
          try {
            conversation = await move(ctx, conversation);
            problem.replaceChildren();
            renderHead();
          } catch (error) { show(problem, errorBox(error)); }
        }, { id: "move-conversation" })
        : null));
  const pager = new Pager(
    (cursor) => api("GET", "/v1/messages", {
      query: { numberId: conversation.numberId, contact: conversation.contact, cursor }, signal: ctx.signal,
    }),
    (page) => {
      if (!ctx.live()) return;
      show(messages, page.data.length
        ? page.data.map(messageItem)
        : h("li", { class: "empty" }, "No messages (calls are not listed here)."));
      show(paging, pager.controls(ctx.fail));
    });
  renderHead();
  show(ctx.view, head, problem,
    h("section", { "aria-labelledby": "messages-title" },
      h("h2", { id: "messages-title" }, "Messages, newest first"),
      can("messages:read")
        ? [messages, paging]
        : h("p", { class: "hint" }, "This key cannot read messages (it lacks messages:read).")));
  if (can("messages:read")) await pager.refresh();
}
