// Federation, as rabbitmq_federation_management adds it to RabbitMQ's UI (Admin):
// "Federation Status" (#/federation: GET /api/federation-links, restart) and "Federation
// Upstreams" (#/federation-upstreams: the `federation-upstream` parameters, a form to add
// one with PUT /api/parameters/federation-upstream/{vhost}/{name}, delete).
import { del, enc, get, put } from "../api.js";
import { fill, form, h, section, table } from "../dom.js";
import { scoped, vhostField } from "./common.js";
import { ACK_MODES, REFRESH_MS, button, uris } from "./links.js";

/** Federation Status: the links this node runs (exchange or queue, upstream, state). */
export async function status(ctx) {
  const box = h("div", { id: "federation-links" });
  async function refresh() {
    const rows = await get(scoped(ctx, "federation-links"));
    fill(box, table([
      { title: "Upstream", value: (l) => l.upstream },
      { title: "URI", value: (l) => h("code", {}, l.uri ?? "") },
      { title: "Virtual host", value: (l) => l.vhost },
      { title: "Exchange / Queue", value: (l) => (l.type === "exchange"
        ? [`exchange: ${l.exchange}`, l.upstream_exchange !== l.exchange
          ? [h("br"), h("small", {}, `from ${l.upstream_exchange}`)] : null]
        : [`queue: ${l.queue}`, l.upstream_queue !== l.queue
          ? [h("br"), h("small", {}, `from ${l.upstream_queue}`)] : null]) },
      // "error" is drawn as the shovels' "terminated" (ui.css colours both states)
      { title: "State", value: (l) => [h("span", { class: `state ${l.status === "error" ? "terminated" : l.status}` }, l.status),
        l.error ? [h("br"), h("small", { class: "reason" }, l.error)] : null] },
      { title: "Last changed", value: (l) => l.timestamp },
      { title: "", value: (l) => (ctx.isAdmin ? button("Restart", () => del(
        `/federation-links/vhost/${enc(l.vhost)}/${enc(l.id)}/${enc(l.node)}/restart`), refresh) : "") },
    ], rows, { id: "federation-links-table", empty: "... no links ..." }));
  }
  fill(ctx.main, h("h1", {}, "Federation Status"), box);
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

/** The `value` of a federation-upstream parameter from the form's fields (RabbitMQ's keys). */
function upstreamValue(v) {
  const value = { uri: v.uri, "ack-mode": v.ack_mode, "trust-user-id": v.trust_user_id === "true" };
  for (const [field, key] of [["exchange", "exchange"], ["queue", "queue"],
    ["consumer_tag", "consumer-tag"]]) {
    if (v[field]) value[key] = v[field];
  }
  for (const [field, key] of [["prefetch", "prefetch-count"], ["reconnect_delay", "reconnect-delay"],
    ["max_hops", "max-hops"], ["expires", "expires"], ["message_ttl", "message-ttl"]]) {
    if (v[field] !== "") value[key] = Number(v[field]);
  }
  return value;
}

const paramPath = (p) => `/parameters/federation-upstream/${enc(p.vhost)}/${enc(p.name)}`;

/** Federation Upstreams: the `federation-upstream` parameters, delete, and the form to add one. */
export async function upstreams(ctx) {
  const box = h("div", { id: "federation-upstreams" });
  async function refresh() {
    const path = ctx.vhost ? `/parameters/federation-upstream/${enc(ctx.vhost)}`
      : "/parameters/federation-upstream";
    fill(box, table([
      { title: "Name", value: (p) => p.name },
      { title: "Virtual host", value: (p) => p.vhost },
      { title: "URI", value: (p) => h("code", {}, uris(p.value.uri)) },
      { title: "Prefetch count", value: (p) => String(p.value["prefetch-count"] ?? "") },
      { title: "Reconnect delay", value: (p) => String(p.value["reconnect-delay"] ?? "") },
      { title: "Ack mode", value: (p) => p.value["ack-mode"] ?? "on-confirm" },
      { title: "Exchange", value: (p) => p.value.exchange ?? "" },
      { title: "Max hops", value: (p) => String(p.value["max-hops"] ?? "") },
      { title: "Queue", value: (p) => p.value.queue ?? "" },
      { title: "", value: (p) => (ctx.isAdmin ? button("Delete", () => del(paramPath(p)), refresh, "danger") : "") },
    ], await get(path), { id: "federation-upstreams-table", empty: "... no upstreams ..." }));
  }
  fill(ctx.main, h("h1", {}, "Federation Upstreams"), box,
    ctx.isAdmin ? section("Add a new upstream", form([
      await vhostField(ctx),
      { name: "name", label: "Name", required: true },
      { name: "uri", label: "URI", required: true,
        help: "amqp://user:password@host:5672/vhost (amqp:// alone is this broker)" },
      { name: "prefetch", label: "Prefetch count", type: "number", placeholder: "1000" },
      { name: "reconnect_delay", label: "Reconnect delay (s)", type: "number", placeholder: "5" },
      { name: "ack_mode", label: "Acknowledgement mode", type: "select", value: "on-confirm", options: ACK_MODES },
      { name: "trust_user_id", label: "Trust user-id", type: "select", value: "false",
        options: [["false", "No"], ["true", "Yes"]] },
      { name: "exchange", label: "Exchange", help: "federated exchanges: the upstream's (default: the same name)" },
      { name: "max_hops", label: "Max hops", type: "number", placeholder: "1" },
      { name: "expires", label: "Expires (ms)", type: "number" },
      { name: "message_ttl", label: "Message TTL (ms)", type: "number" },
      { name: "queue", label: "Queue", help: "federated queues: the upstream's (default: the same name)" },
      { name: "consumer_tag", label: "Consumer tag", placeholder: "federation-link-<name>" },
    ], "Add upstream", async (v) => {
      await put(`/parameters/federation-upstream/${enc(v.vhost)}/${enc(v.name)}`, { value: upstreamValue(v) });
      await refresh();
      return `Upstream ${v.name} added.`;
    }, { id: "add-upstream" })) : null);
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}
