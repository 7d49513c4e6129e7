// The HTTP API client: every request carries the stored Basic credentials, as RabbitMQ's UI
// does. Paths are relative ("api/..."), so the UI also works behind a path prefix.
const KEY = "amqpq.credentials";

export const enc = encodeURIComponent;

/** Basic credentials ("user:password" base64) kept for this browser tab, or null. */
export function credentials() {
  return sessionStorage.getItem(KEY);
}

export function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return btoa(String.fromCharCode(...bytes));
}

export function storeCredentials(token) {
  sessionStorage.setItem(KEY, token);
}

export function forgetCredentials() {
  sessionStorage.removeItem(KEY);
}

/** An error answer: HTTP status plus RabbitMQ's {"error", "reason"} body. */
export class ApiError extends Error {
  constructor(status, body) {
    const reason = body && typeof body === "object" ? body.reason ?? body.error : body;
    super(reason ? `${status}: ${typeof reason === "string" ? reason : JSON.stringify(reason)}`
      : `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.reason = typeof reason === "string" ? reason : JSON.stringify(reason ?? "");
  }
}

/** One request; resolves to the parsed JSON (null for 204), rejects with ApiError. */
export async function api(method, path, body, { token, headers } = {}) {
  const h = { Authorization: `Basic ${token ?? credentials() ?? ""}`, ...headers };
  let payload;
  if (body !== undefined) {
    h["Content-Type"] = "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  // credentials "omit": our own Authorization header only, and no browser login prompt on 401
  const res = await fetch(`api${path}`, { method, headers: h, body: payload, credentials: "omit" });
  const text = res.status === 204 ? "" : await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const get = (path) => api("GET", path);
export const put = (path, body, opts) => api("PUT", path, body ?? {}, opts);
export const post = (path, body, opts) => api("POST", path, body ?? {}, opts);
export const del = (path, opts) => api("DELETE", path, undefined, opts);
