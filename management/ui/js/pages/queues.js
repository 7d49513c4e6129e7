// Queues: list and add; a queue's page: details, consumers, bindings, publish, get messages
// (requeued by default, as RabbitMQ's UI does), move messages, delete and purge.
import { del, enc, get, post, put } from "../api.js";
import { args, bytes, facts, features, fill, filterBox, form, h, link, matching, num, parseArgs, rate, section, table } from "../dom.js";
import { bindingTable, publish, PUBLISH_FIELDS } from "./exchanges.js";
import { scoped, vhostField, xname } from "./common.js";

const REFRESH_MS = 5000;
// RabbitMQ's UI labels of the get ack modes; the first (requeue) is its default
const ACK_MODES = [["ack_requeue_true", "Nack message requeue true"],
  ["reject_requeue_true", "Reject requeue true"], ["ack_requeue_false", "Automatic ack"],
  ["reject_requeue_false", "Reject requeue false"]];

export async function list(ctx) {
  const box = h("div", { id: "queues" });
  let rows = [];
  let text = "";
  fill(ctx.main, h("h1", {}, "Queues"), filterBox("queues-filter", (t) => { text = t; draw(); }), box,
    section("Add a new queue", form([
      await vhostField(ctx),
      { name: "type", label: "Type", type: "select", value: "classic", options: [["classic", "Classic"], ["quorum", "Quorum"]] },
      { name: "name", label: "Name", required: true },
      { name: "durability", label: "Durability", type: "select", value: "true", options: [["true", "Durable"], ["false", "Transient"]] },
      { name: "auto_delete", label: "Auto delete", type: "select", value: "false", options: [["false", "No"], ["true", "Yes"]] },
      { name: "arguments", label: "Arguments", type: "textarea", rows: 2, placeholder: "x-message-ttl=60000", help: "key=value, one per line" },
    ], "Add queue", async (v) => {
      const a = parseArgs(v.arguments);
      if (v.type !== "classic") a["x-queue-type"] = v.type;
      await put(`/queues/${enc(v.vhost)}/${enc(v.name)}`, { durable: v.durability === "true",
        auto_delete: v.auto_delete === "true", arguments: a });
      await refresh();
      return `Queue ${v.name} added.`;
    }, { id: "add-queue" })));
  async function refresh() {
    rows = await get(scoped(ctx, "queues"));
    draw();
  }
  function draw() {
    fill(box, table([
      { title: "Virtual host", value: (q) => q.vhost },
      { title: "Name", value: (q) => link(`#/queues/${enc(q.vhost)}/${enc(q.name)}`, q.name) },
      ...(ctx.clustered || clustered(rows) ? [{ title: "Node", value: nodeCell }] : []),
      { title: "Type", value: (q) => q.type },
      { title: "Features", value: features },
      { title: "State", value: (q) => q.state },
      { title: "Ready", value: (q) => num(q.messages_ready), cls: "n" },
      { title: "Unacked", value: (q) => num(q.messages_unacknowledged), cls: "n" },
      { title: "Total", value: (q) => num(q.messages), cls: "n" },
      { title: "Consumers", value: (q) => num(q.consumers), cls: "n" },
      { title: "Incoming", value: (q) => rate(q.message_stats?.publish_details), cls: "n" },
      { title: "Deliver / get", value: (q) => rate(q.message_stats?.deliver_get_details), cls: "n" },
      { title: "Ack", value: (q) => rate(q.message_stats?.ack_details), cls: "n" },
    ], matching(rows, text), { id: "queues-table" }));
  }
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

/** RabbitMQ's UI shows the Node column when there is more than one node: here, when the
 * queues are on several nodes or a quorum queue has several members. */
function clustered(rows) {
  return new Set(rows.map((q) => q.node)).size > 1 || rows.some((q) => (q.members ?? []).length > 1);
}

/** The node a queue is on (a quorum queue: its leader) and, as RabbitMQ's UI, "+N" for the
 * other members, with members and online ones in the tooltip; unreachable members marked. */
function nodeCell(q) {
  const members = q.members ?? [];
  const others = members.filter((m) => m !== q.node);
  if (!others.length) return h("span", { class: "node" }, q.node ?? "");
  const offline = members.filter((m) => !(q.online ?? []).includes(m));
  return h("span", { class: "node" }, q.node ?? "", " ",
    h("abbr", { class: offline.length ? "tag alarm" : "tag", title: `members: ${members.join(", ")}; online: ${(q.online ?? []).join(", ")}` },
      `+${others.length}`));
}

export async function detail(ctx, vhost, name) {
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  const info = h("div", { id: "queue-info" });
  const consumers = h("div", { id: "queue-consumers" });
  const bindings = h("div", { id: "queue-bindings" });
  const messages = h("div", { id: "messages" });
  async function refresh() {
    const q = await get(path);
    fill(info, facts([
      ["Type", q.type], ["Features", features(q)], ["Arguments", args(q.arguments)],
      ["Node", h("span", { id: "queue-node" }, link(`#/nodes/${enc(q.node ?? "")}`, q.node ?? ""))],
      q.type === "quorum" ? ["Leader", h("span", { id: "queue-leader" }, q.leader ?? "")] : null,
      q.type === "quorum" ? ["Members", h("span", { id: "queue-members" }, (q.members ?? []).join(", "))] : null,
      q.type === "quorum" ? ["Online", h("span", { id: "queue-online" }, (q.online ?? []).join(", "))] : null,
      ["Policy", q.policy ?? ""], ["Operator policy", q.operator_policy ?? ""],
      ["State", q.state], ["Consumers", num(q.consumers)],
      ["Messages", h("span", { id: "queue-messages" }, `${num(q.messages)} total, ${num(q.messages_ready)} ready, ${num(q.messages_unacknowledged)} unacked`)],
      ["Message body bytes", bytes(q.message_bytes)],
      ["Incoming", rate(q.message_stats?.publish_details)],
      ["Deliver / get", rate(q.message_stats?.deliver_get_details)],
    ]));
    fill(consumers, table([
      { title: "Channel", value: (c) => c.channel_details?.name },
      { title: "Consumer tag", value: (c) => c.consumer_tag },
      { title: "Ack required", value: (c) => (c.ack_required ? "●" : "○") },
      { title: "Exclusive", value: (c) => (c.exclusive ? "●" : "○") },
      { title: "Prefetch", value: (c) => num(c.prefetch_count), cls: "n" },
      { title: "Arguments", value: (c) => args(c.arguments) },
    ], q.consumer_details ?? [], { empty: "... no consumers ..." }));
    fill(bindings, bindingTable(await get(`${path}/bindings`), refresh, "from"));
  }
  fill(ctx.main, h("h1", {}, "Queue ", h("b", {}, name), h("small", {}, ` in virtual host ${vhost}`)),
    section("Overview", info),
    section("Consumers", consumers),
    section("Bindings", bindings, form([
      { name: "source", label: "From exchange", required: true },
      { name: "routing_key", label: "Routing key" },
      { name: "arguments", label: "Arguments", type: "textarea", rows: 2, help: "key=value, one per line" },
    ], "Bind", async (v) => {
      await post(`/bindings/${enc(vhost)}/e/${xname(v.source)}/q/${enc(name)}`,
        { routing_key: v.routing_key, arguments: parseArgs(v.arguments) });
      await refresh();
      return "Bound.";
    }, { id: "bind-queue" })),
    section("Publish message", h("p", { class: "hint" }, "Published to the default exchange with this queue's name as the routing key."),
      form(PUBLISH_FIELDS, "Publish message", async (v) => {
        await publish(vhost, "", name, v);
        await refresh();
        return "Message published.";
      }, { id: "queue-publish" })),
    section("Get messages", h("p", { class: "hint" }, "Getting messages with a requeue mode puts them back, flagged redelivered."),
      form([
        { name: "ackmode", label: "Ack mode", type: "select", value: "ack_requeue_true", options: ACK_MODES },
        { name: "encoding", label: "Encoding", type: "select", value: "auto", options: [["auto", "Auto string / base64"], ["base64", "base64"]] },
        { name: "count", label: "Messages", type: "number", value: "1" },
      ], "Get Message(s)", async (v) => {
        const got = await post(`${path}/get`, { count: Number(v.count), ackmode: v.ackmode, encoding: v.encoding, truncate: 50000 });
        fill(messages, got.length ? got.map(showMessage) : h("p", { class: "empty" }, "Queue is empty"));
        await refresh();
        return `${got.length} message(s).`;
      }, { id: "get-messages" }), messages),
    section("Move messages", h("p", { class: "hint" }, "Moves the ready messages to another queue of this virtual host, inside the broker: each is acked here only once the destination has it."),
      form([{ name: "destination", label: "Destination queue", required: true }], "Move messages", async (v) => {
        const res = await post(`${path}/move`, { destination: v.destination });
        await refresh();
        return `Moved ${res.moved} message(s); ${res.remaining} left.`;
      }, { id: "move-messages" })),
    section("Delete", form([], "Delete Queue", async () => {
      if (!confirm(`Delete queue ${name}?`)) return "Cancelled.";
      await del(path);
      location.hash = "#/queues";
      return "Deleted.";
    }, { id: "delete-queue" })),
    section("Purge", form([], "Purge Messages", async () => {
      await del(`${path}/contents`);
      await refresh();
      return "Purged.";
    }, { id: "purge-queue" })));
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

function showMessage(m, i) {
  return h("div", { class: "message" }, h("h3", {}, `Message ${i + 1}`),
    h("p", {}, `The server reported ${num(m.message_count)} messages remaining.`),
    facts([["Exchange", m.exchange === "" ? "(AMQP default)" : m.exchange], ["Routing Key", m.routing_key],
      ["Redelivered", m.redelivered ? "●" : "○"],
      ["Properties", properties(m.properties)],
      ["Payload", h("div", {}, h("small", {}, `${num(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`),
        h("pre", { class: "payload" }, m.payload))]]));
}

/** A message's properties, headers one per line (RabbitMQ shows [] for none). */
function properties(props) {
  if (Array.isArray(props) || !props) return "";
  return facts(Object.entries(props).map(([k, v]) => [k, k === "headers" ? args(v)
    : typeof v === "object" ? JSON.stringify(v) : String(v)]));
}
