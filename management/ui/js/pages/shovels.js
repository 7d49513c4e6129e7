// Shovels, as rabbitmq_shovel_management adds them to RabbitMQ's UI: "Shovel Status"
// (#/shovels: GET /api/shovels, restart, delete) and "Shovel Management" (#/dynamic-shovels:
// the `shovel` parameters, a form to add a dynamic shovel with
// PUT /api/parameters/shovel/{vhost}/{name}, delete).
import { del, enc, get, put } from "../api.js";
import { fill, form, h, section, table } from "../dom.js";
import { scoped, vhostField } from "./common.js";
import { ACK_MODES, REFRESH_MS, button, uris } from "./links.js";

const DELETE_AFTER = [["never", "Never"], ["queue-length", "After initial transfer"]];
const END_TYPES = [["queue", "Queue"], ["exchange", "Exchange"]];

/** One end of a status row or a parameter value: the URI, then what it reads or writes. */
function end(uri, queue, exchange, key) {
  const what = queue !== undefined && queue !== null ? `queue: ${queue}`
    : exchange !== undefined && exchange !== null
      ? `exchange: ${exchange}${key !== undefined && key !== null ? ` (key: ${key})` : ""}` : "";
  return h("span", { class: "shovel-end" }, h("code", {}, uri ?? ""), what ? [h("br"), what] : null);
}

const paramPath = (s) => `/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`;

/** Shovel Status: the shovels this node runs, their state and ends; restart and delete. */
export async function status(ctx) {
  const box = h("div", { id: "shovels" });
  async function refresh() {
    const rows = await get(scoped(ctx, "shovels"));
    fill(box, table([
      { title: "Name", value: (s) => s.name },
      { title: "Virtual host", value: (s) => s.vhost },
      { title: "State", value: (s) => [h("span", { class: `state ${s.state}` }, s.state),
        s.reason ? [h("br"), h("small", { class: "reason" }, s.reason)] : null] },
      { title: "Source", value: (s) => (s.state === "running"
        ? end(s.src_uri, s.src_queue, s.src_exchange, s.src_exchange_key) : "") },
      { title: "Destination", value: (s) => (s.state === "running"
        ? end(s.dest_uri, s.dest_queue, s.dest_exchange, s.dest_exchange_key) : "") },
      { title: "Last changed", value: (s) => s.timestamp },
      { title: "", value: (s) => (ctx.isAdmin ? [
        button("Restart", () => del(`/shovels/vhost/${enc(s.vhost)}/${enc(s.name)}/restart`), refresh), " ",
        button("Delete", () => del(paramPath(s)), refresh, "danger")] : "") },
    ], rows, { id: "shovels-table", empty: "... no shovels ..." }));
  }
  fill(ctx.main, h("h1", {}, "Shovel Status"), box);
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

/** The `value` of a shovel parameter from the form's fields (RabbitMQ's keys). */
function shovelValue(v) {
  const value = { "src-protocol": "amqp091", "src-uri": v.src_uri,
    "dest-protocol": "amqp091", "dest-uri": v.dest_uri,
    "ack-mode": v.ack_mode, "src-delete-after": v.delete_after,
    "dest-add-forward-headers": v.forward_headers === "true" };
  value[`src-${v.src_type}`] = v.src_name;
  if (v.src_type === "exchange" && v.src_key) value["src-exchange-key"] = v.src_key;
  value[`dest-${v.dest_type}`] = v.dest_name;
  if (v.dest_type === "exchange" && v.dest_key) value["dest-exchange-key"] = v.dest_key;
  if (v.prefetch) value["src-prefetch-count"] = Number(v.prefetch);
  if (v.reconnect_delay) value["reconnect-delay"] = Number(v.reconnect_delay);
  return value;
}

/** Shovel Management: the `shovel` parameters, delete, and the form to add one. */
export async function manage(ctx) {
  const box = h("div", { id: "dynamic-shovels" });
  async function refresh() {
    const path = ctx.vhost ? `/parameters/shovel/${enc(ctx.vhost)}` : "/parameters/shovel";
    fill(box, table([
      { title: "Name", value: (p) => p.name },
      { title: "Virtual host", value: (p) => p.vhost },
      { title: "Source", value: (p) => end(uris(p.value["src-uri"]), p.value["src-queue"],
        p.value["src-exchange"], p.value["src-exchange-key"]) },
      { title: "Destination", value: (p) => end(uris(p.value["dest-uri"]), p.value["dest-queue"],
        p.value["dest-exchange"], p.value["dest-exchange-key"]) },
      { title: "Ack mode", value: (p) => p.value["ack-mode"] ?? "on-confirm" },
      { title: "Delete after", value: (p) => String(p.value["src-delete-after"] ?? p.value["delete-after"] ?? "never") },
      { title: "", value: (p) => (ctx.isAdmin ? button("Delete", () => del(paramPath(p)), refresh, "danger") : "") },
    ], await get(path), { id: "dynamic-shovels-table", empty: "... no shovels ..." }));
  }
  fill(ctx.main, h("h1", {}, "Shovel Management"), box,
    ctx.isAdmin ? section("Add a new shovel", form([
      await vhostField(ctx),
      { name: "name", label: "Name", required: true },
      { name: "src_uri", label: "Source URI", required: true, value: "amqp://",
        help: "amqp:// alone is this broker; amqp://user:password@host:5672/vhost another" },
      { name: "src_type", label: "Source", type: "select", value: "queue", options: END_TYPES },
      { name: "src_name", label: "Source queue / exchange", required: true },
      { name: "src_key", label: "Source routing key", help: "exchange only (default #)" },
      { name: "prefetch", label: "Prefetch count", type: "number", placeholder: "1000" },
      { name: "delete_after", label: "Auto-delete", type: "select", value: "never", options: DELETE_AFTER },
      { name: "dest_uri", label: "Destination URI", required: true, value: "amqp://" },
      { name: "dest_type", label: "Destination", type: "select", value: "queue", options: END_TYPES },
      { name: "dest_name", label: "Destination queue / exchange", required: true },
      { name: "dest_key", label: "Destination routing key", help: "exchange only (default: the message's own)" },
      { name: "forward_headers", label: "Add forwarding headers", type: "select", value: "false",
        options: [["false", "No"], ["true", "Yes"]] },
      { name: "reconnect_delay", label: "Reconnect delay (s)", type: "number", placeholder: "5" },
      { name: "ack_mode", label: "Acknowledgement mode", type: "select", value: "on-confirm", options: ACK_MODES },
    ], "Add shovel", async (v) => {
      await put(`/parameters/shovel/${enc(v.vhost)}/${enc(v.name)}`, { value: shovelValue(v) });
      await refresh();
      return `Shovel ${v.name} added.`;
    }, { id: "add-shovel" })) : null);
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}
