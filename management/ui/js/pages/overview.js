// Overview: totals, message-rate and queued-message charts (polled every 5 s), nodes with
// their alarms (each linking to its page), listeners, and definitions export/import (administrators).
import { api, get } from "../api.js";
import { lineChart } from "../chart.js";
import { facts, fill, form, h, link, num, section, table } from "../dom.js";
import { nodesTable } from "./nodes.js";

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
  fill(el, nodesTable(list), h("p", {}, link("#/nodes", "Nodes: leaders and replicas of quorum queues")));
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
