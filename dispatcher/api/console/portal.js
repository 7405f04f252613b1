// A portal session's link (docs/console.md, "Portal sessions"): `/console/PS…#portal=<secret>`.
// The secret rides in the fragment, which the browser never sends (no server log, no Referer);
// it is taken out of the address at once, then exchanged, once, for the session's credential,
// kept as a key is (this tab's sessionStorage). The session's id in the path is no secret: it
// tells the server which origin may frame this page.

import { forgetKey, keepKey } from "./api.js";

/** Whether this page is a portal session's (its address is `/console/PS…`). */
export const inPortal = /\/console\/PS[0-9a-f]{32}$/.test(location.pathname);

/** The link's secret, removed from the address bar (and so from the history) before anything
 * else happens; null when the address carries none (a reload). */
export function takeSecret() {
  const found = /^#portal=([A-Za-z0-9_-]{1,200})$/.exec(location.hash);
  if (!found) return null;
  history.replaceState(null, "", location.pathname);
  return found[1];
}

/** Exchange the secret for the session's credential and keep it; the exchange's answer
 * (`{token, sessionId, workspaceId, capabilities, scopes, expiresAt}`), or null when the link
 * is no longer valid (used already, expired or deleted). */
export async function exchange(secret) {
  forgetKey();
  const response = await fetch("/v1/portal-sessions/exchange", {
    method: "POST",
    headers: { Accept: "application/json", "Content-Type": "application/json" },
    body: JSON.stringify({ secret }),
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
  });
  if (!response.ok) return null;
  const exchanged = await response.json();
  keepKey(exchanged.token);
  return exchanged;
}
