// Overview: totals, message-rate and queued-message charts (polled every 5 s), nodes with
// their alarms, listeners, and definitions export/import (administrators).
import { api, get } from "../api.js";
import { lineChart } from "../chart.js";
import { bytes, facts, fill, form, h, num, section, table } from "../dom.js";

const POLL_MS = 5000;
const KEEP = 120; // samples per series (10 minutes at 5 s)
// message_stats fields charted, with RabbitMQ's labels; missing ones are skipped
const RATES = [["publish", "Publish"], ["confirm", "Publisher confirm"],
  ["deliver_get", "Deliver / get"], ["redeliver", "Redelivered"], ["ack", "Consumer ack"]];
const QUEUED = [["messages_ready", "Ready"], ["messages_unacknowledged", "Unacked"],
  ["messages", "Total"]];
const history = { rates: {}, queued: {} }; // kept across page visits

function sample(store, obj, fields, suffix) {
  const now = Date.now();
  for (const [key] of fields) {
    const value = suffix ? obj?.[`${key}_details`]?.rate : obj?.[key];
    if (value === undefined) continue;
    const points = (store[key] ??= []);
    points.push([now, Number(value)]);
    if (points.length > KEEP) points.shift();
  }
}

function series(store, fields) {
  return fields.filter(([key]) => store[key]).map(([key, label]) => ({ label, points: store[key] }));
}

export async function render(ctx) {
  const charts = h("div", { class: "charts" });
  const totals = h("div", { id: "totals" });
  const nodes = h("div", { id: "nodes" });
  const listeners = h("div", { id: "listeners" });
  fill(ctx.main, h("h1", {}, "Overview"),
    section("Totals", charts, totals),
    section("Nodes", nodes),
    section("Ports and contexts", listeners),
    ctx.isAdmin ? definitionsSection(ctx) : null);

  async function refresh() {
    const o = await get("/overview");
    sample(history.rates, o.message_stats, RATES, true);
    sample(history.queued, o.queue_totals, QUEUED, false);
    fill(charts,
      h("div", { class: "chart-box", id: "chart-queued" }, h("h3", {}, "Queued messages"),
        lineChart(series(history.queued, QUEUED))),
      h("div", { class: "chart-box", id: "chart-rates" }, h("h3", {}, "Message rates"),
        lineChart(series(history.rates, RATES), { unit: "/s" })));
    const t = o.object_totals ?? {};
    fill(totals, h("ul", { class: "counts" },
      ["connections", "channels", "exchanges", "queues", "consumers"].map((k) =>
        h("li", {}, h("a", { href: `#/${k === "consumers" ? "queues" : k}` }, k[0].toUpperCase() + k.slice(1)), ": ",
          h("b", { id: `count-${k}` }, num(t[k]))))),
    facts([["Cluster", o.cluster_name], ["Product", `${o.product_name ?? "amqpq"} ${o.product_version ?? ""}`],
      ["RabbitMQ compatibility", o.rabbitmq_version]]));
    fill(listeners, table([
      { title: "Protocol", value: (l) => l.protocol },
      { title: "Bound to", value: (l) => l.ip_address },
      { title: "Port", value: (l) => String(l.port) },
    ], o.listeners ?? []));
    await renderNodes(nodes);
  }
  await refresh();
  ctx.every(POLL_MS, refresh);
}

async function renderNodes(el) {
  let list;
  try {
    list = await get("/nodes");
  } catch {
    fill(el, h("p", { class: "empty" }, "Node details need the monitoring or administrator tag."));
    return;
  }
  fill(el, table([
    { title: "Name", value: (n) => n.name },
    { title: "Type", value: (n) => n.type },
    { title: "Running", value: (n) => (n.running ? "yes" : "no") },
    { title: "File descriptors", value: (n) => `${num(n.fd_used)} / ${num(n.fd_total)}` },
    { title: "Memory", value: (n) => alarm(n.mem_alarm, `${bytes(n.mem_used)} / ${bytes(n.mem_limit)} high watermark`) },
    { title: "Disk free", value: (n) => alarm(n.disk_free_alarm, `${bytes(n.disk_free)} (${bytes(n.disk_free_limit)} low watermark)`) },
    { title: "Uptime", value: (n) => uptime(n.uptime) },
  ], list, { id: "nodes-table" }));
}

function alarm(on, text) {
  return h("span", { class: on ? "alarm" : "" }, on ? `ALARM ${text}` : text);
}

function uptime(ms) {
  const s = Math.floor((ms ?? 0) / 1000);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${mm}m` : `${mm}m ${s % 60}s`;
}

function definitionsSection(ctx) {
  const vhosts = [["", "All"], ...(ctx.vhost ? [[ctx.vhost, ctx.vhost]] : [])];
  return section("Export definitions",
    form([{ name: "vhost", label: "Virtual host", type: "select", options: vhosts }],
      "Download broker definitions", async ({ vhost }) => {
        const doc = await get(vhost ? `/definitions/${encodeURIComponent(vhost)}` : "/definitions");
        const blob = new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" });
        const a = h("a", { href: URL.createObjectURL(blob), download: `amqpq-definitions${vhost ? "-" + vhost : ""}.json` });
        document.body.append(a);
        a.click();
        a.remove();
        return "Downloaded.";
      }, { id: "export" }),
    h("h3", {}, "Import definitions"),
    form([{ name: "file", label: "Definitions file", type: "file", accept: ".json,application/json", required: true }],
      "Upload broker definitions", async ({ file }) => {
        if (!file) throw new Error("Choose a file first.");
        await api("POST", "/definitions", await file.text());
        return "Your definitions were imported successfully.";
      }, { id: "import" }));
}
