// The one way the console talks to the API: same origin, the key in the Authorization header
// and nowhere else. The key lives in this tab's sessionStorage only (never a URL, a cookie or
// a log): closing the tab or signing out forgets it.

const STORAGE_KEY = "dispatcher.console.key";

export function savedKey() {
  return sessionStorage.getItem(STORAGE_KEY);
}

export function keepKey(key) {
  sessionStorage.setItem(STORAGE_KEY, key);
}

export function forgetKey() {
  sessionStorage.removeItem(STORAGE_KEY);
}

/** An answer other than 2xx: its status and the API's error body (docs/api.md). */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }

  /** The field errors (`body.url: ...`), when the API named any. */
  get details() {
    return Array.isArray(this.body.errors) ? this.body.errors : [];
  }
}

let unauthorizedHandler = () => {};

/** What to do when the API refuses the key (revoked, or signed out elsewhere). */
export function whenUnauthorized(handler) {
  unauthorizedHandler = handler;
}

function url(path, query) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(name, value);
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * Call the API: `api("GET", "/v1/webhooks", {query: {limit: 25}})`. Answers the parsed JSON
 * (null for 204); throws ApiError for an error answer. `key` overrides the saved key (signing
 * in); `signal` aborts the call when the page it was for is left.
 */
export async function api(method, path, { query, body, key, signal } = {}) {
  const headers = { Accept: "application/json" };
  const token = key || savedKey();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, signal, credentials: "omit", cache: "no-store", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url(path, query), init);
  if (response.status === 204) return null;
  let parsed = null;
  const type = response.headers.get("Content-Type") || "";
  if (type.startsWith("application/json")) parsed = await response.json();
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (response.status === 401 && !key) unauthorizedHandler(error);
    throw error;
  }
  return parsed;
}

/** A path segment (an id from the page's address) made safe for a URL. */
export function segment(value) {
  return encodeURIComponent(value);
}
