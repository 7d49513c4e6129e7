// Exchanges (list, add, detail with bindings, publish a message, delete) and bindings.
import { del, enc, get, post, put } from "../api.js";
import { args, facts, features, fill, filterBox, form, h, link, matching, parseArgs, rate, section, showName, table } from "../dom.js";
import { bindingPath, scoped, vhostField, xname } from "./common.js";

const REFRESH_MS = 5000;
const TYPES = ["direct", "fanout", "topic", "headers", "x-consistent-hash", "x-message-deduplication"];

export async function list(ctx) {
  const box = h("div", { id: "exchanges" });
  let rows = [];
  let text = "";
  fill(ctx.main, h("h1", {}, "Exchanges"), filterBox("exchanges-filter", (t) => { text = t; draw(); }), box,
    section("Add a new exchange", form([
      await vhostField(ctx),
      { name: "name", label: "Name", required: true },
      { name: "type", label: "Type", type: "select", value: "direct", options: TYPES.map((t) => [t, t]) },
      { name: "durability", label: "Durability", type: "select", value: "true", options: [["true", "Durable"], ["false", "Transient"]] },
      { name: "auto_delete", label: "Auto delete", type: "select", value: "false", options: [["false", "No"], ["true", "Yes"]] },
      { name: "internal", label: "Internal", type: "select", value: "false", options: [["false", "No"], ["true", "Yes"]] },
      { name: "arguments", label: "Arguments", type: "textarea", rows: 2, placeholder: "alternate-exchange=my-ae", help: "key=value, one per line" },
    ], "Add exchange", async (v) => {
      await put(`/exchanges/${enc(v.vhost)}/${enc(v.name)}`, { type: v.type, durable: v.durability === "true",
        auto_delete: v.auto_delete === "true", internal: v.internal === "true", arguments: parseArgs(v.arguments) });
      await refresh();
      return `Exchange ${v.name} added.`;
    }, { id: "add-exchange" })));
  async function refresh() {
    rows = await get(scoped(ctx, "exchanges"));
    draw();
  }
  function draw() {
    fill(box, table([
      { title: "Virtual host", value: (x) => x.vhost },
      { title: "Name", value: (x) => link(`#/exchanges/${enc(x.vhost)}/${enc(x.name)}`, showName(x.name)) },
      { title: "Type", value: (x) => x.type },
      { title: "Features", value: features },
      { title: "Message rate in", value: (x) => rate(x.message_stats?.publish_in_details), cls: "n" },
    ], matching(rows, text)));
  }
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

export async function detail(ctx, vhost, name) {
  const x = await get(`/exchanges/${enc(vhost)}/${xname(name)}`);
  const bindingsBox = h("div", { id: "exchange-bindings" });
  const refresh = async () => {
    const rows = name === "" ? [] : await get(`/exchanges/${enc(vhost)}/${xname(name)}/bindings/source`);
    fill(bindingsBox, name === "" ? h("p", {}, "Default exchange: every queue is bound with its name as the routing key.")
      : bindingTable(rows, refresh, "to"));
  };
  fill(ctx.main, h("h1", {}, "Exchange ", h("b", {}, showName(name)), h("small", {}, ` in virtual host ${vhost}`)),
    section("Overview", facts([["Type", x.type], ["Features", features(x)], ["Arguments", args(x.arguments)],
      ["Publish rate in", rate(x.message_stats?.publish_in_details)]])),
    section("Bindings", bindingsBox, name === "" ? null : addBinding(vhost, name, refresh)),
    section("Publish message", publishForm(vhost, name)),
    name === "" || name.startsWith("amq.") ? null : section("Delete this exchange",
      form([], "Delete", async () => {
        await del(`/exchanges/${enc(vhost)}/${xname(name)}`);
        location.hash = "#/exchanges";
      }, { id: "delete-exchange" })));
  await refresh();
}

function addBinding(vhost, source, refresh) {
  return form([
    { name: "kind", label: "To", type: "select", value: "q", options: [["q", "To queue"], ["e", "To exchange"]] },
    { name: "destination", label: "Destination", required: true },
    { name: "routing_key", label: "Routing key" },
    { name: "arguments", label: "Arguments", type: "textarea", rows: 2, help: "key=value, one per line" },
  ], "Bind", async (v) => {
    await post(`/bindings/${enc(vhost)}/e/${xname(source)}/${v.kind}/${enc(v.destination)}`,
      { routing_key: v.routing_key, arguments: parseArgs(v.arguments) });
    await refresh();
    return "Bound.";
  }, { id: "add-binding" });
}

/** Bindings with an Unbind button; `side` "to" shows destinations, "from" sources. */
export function bindingTable(rows, refresh, side = "both") {
  const cols = [];
  if (side !== "to") cols.push({ title: "From", value: (b) => link(`#/exchanges/${enc(b.vhost)}/${enc(b.source)}`, showName(b.source)) });
  if (side !== "from") cols.push({ title: "To", value: (b) => link(`#/${b.destination_type === "queue" ? "queues" : "exchanges"}/${enc(b.vhost)}/${enc(b.destination)}`, `${b.destination} (${b.destination_type})`) });
  cols.push({ title: "Routing key", value: (b) => b.routing_key },
    { title: "Arguments", value: (b) => args(b.arguments) },
    { title: "", value: (b) => (b.source === "" ? h("small", {}, "(default binding)")
      : h("button", { class: "unbind", onclick: async () => { await del(bindingPath(b)); await refresh(); } }, "Unbind")) });
  return table(cols, rows, { empty: "... no bindings ..." });
}

function publishForm(vhost, name) {
  return form([
    { name: "routing_key", label: "Routing key" },
    ...PUBLISH_FIELDS,
  ], "Publish message", async (v) => {
    await publish(vhost, name, v.routing_key, v);
    return "Message published.";
  }, { id: "publish" });
}

const INT_PROPS = new Set(["priority", "timestamp", "delivery_mode"]);

/** POST .../publish from a publish form's values; an unrouted message is an error. */
export async function publish(vhost, exchange, routingKey, v) {
  const properties = {};
  for (const [k, value] of Object.entries(parseArgs(v.properties))) {
    properties[k] = INT_PROPS.has(k) ? Number(value) : String(value);
  }
  properties.delivery_mode = Number(v.delivery_mode);
  const headers = parseArgs(v.headers);
  if (Object.keys(headers).length) properties.headers = headers;
  const res = await post(`/exchanges/${enc(vhost)}/${xname(exchange)}/publish`, { properties,
    routing_key: routingKey, payload: v.payload, payload_encoding: v.encoding });
  if (!res.routed) throw new Error("Message published, but not routed.");
}

/** The publish form's fields after the routing key. */
export const PUBLISH_FIELDS = [
  { name: "delivery_mode", label: "Delivery mode", type: "select", value: "1", options: [["1", "1 - Non-persistent"], ["2", "2 - Persistent"]] },
  { name: "headers", label: "Headers", type: "textarea", rows: 2, help: "key=value, one per line" },
  { name: "properties", label: "Properties", type: "textarea", rows: 2, placeholder: "content_type=text/plain", help: "content_type, message_id, expiration, ...: key=value" },
  { name: "payload", label: "Payload", type: "textarea", rows: 4 },
  { name: "encoding", label: "Payload encoding", type: "select", value: "string", options: [["string", "String (default)"], ["base64", "Base64"]] },
];

export async function bindings(ctx) {
  const box = h("div", { id: "bindings" });
  const refresh = async () => fill(box, bindingTable(
    (await get(scoped(ctx, "bindings"))).filter((b) => b.source !== ""), refresh));
  fill(ctx.main, h("h1", {}, "Bindings"), box,
    section("Add a binding", form([
      await vhostField(ctx),
      { name: "source", label: "From exchange", required: true },
      { name: "kind", label: "To", type: "select", value: "q", options: [["q", "Queue"], ["e", "Exchange"]] },
      { name: "destination", label: "Destination", required: true },
      { name: "routing_key", label: "Routing key" },
      { name: "arguments", label: "Arguments", type: "textarea", rows: 2, help: "key=value, one per line" },
    ], "Bind", async (v) => {
      await post(`/bindings/${enc(v.vhost)}/e/${xname(v.source)}/${v.kind}/${enc(v.destination)}`,
        { routing_key: v.routing_key, arguments: parseArgs(v.arguments) });
      await refresh();
      return "Bound.";
    }, { id: "add-binding" })));
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}
