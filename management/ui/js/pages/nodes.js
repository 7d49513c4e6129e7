// Nodes: every node of the cluster with its file descriptors, memory, disk, alarms, uptime and
// the quorum queues it leads or holds a replica of; a node's page (#/nodes/<name>), as
// RabbitMQ's management UI has one. Needs the monitoring or administrator tag (/api/nodes).
import { enc, get } from "../api.js";
import { bytes, facts, fill, h, link, num, section, table } from "../dom.js";

const REFRESH_MS = 5000;

export function alarm(on, text) {
  return h("span", { class: on ? "alarm" : "" }, on ? `ALARM ${text}` : text);
}

export function uptime(ms) {
  const s = Math.floor((ms ?? 0) / 1000);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${mm}m` : `${mm}m ${s % 60}s`;
}

const known = (v) => v !== undefined && v !== null;
const fds = (n) => (known(n.fd_used) ? `${num(n.fd_used)} / ${num(n.fd_total)}` : "");
const memory = (n) => (known(n.mem_used)
  ? alarm(n.mem_alarm, `${bytes(n.mem_used)} / ${bytes(n.mem_limit)} high watermark`) : "");
const disk = (n) => (known(n.disk_free)
  ? alarm(n.disk_free_alarm, `${bytes(n.disk_free)} (${bytes(n.disk_free_limit)} low watermark)`) : "");

/** The quorum queues led by `name`, and those with a replica on it (leader included). */
function quorumOn(name, queues) {
  const quorum = queues.filter((q) => q.type === "quorum");
  return {
    leaders: quorum.filter((q) => q.leader === name),
    replicas: quorum.filter((q) => (q.members ?? []).includes(name)),
  };
}

/** The nodes table (overview and Nodes page): each name links to the node's page. */
export function nodesTable(list, queues) {
  return table([
    { title: "Name", value: (n) => link(`#/nodes/${enc(n.name)}`, n.name) },
    { title: "Type", value: (n) => n.type },
    { title: "Running", value: (n) => (n.running ? "yes" : "no") },
    { title: "File descriptors", value: fds },
    { title: "Memory", value: memory },
    { title: "Disk free", value: disk },
    { title: "Uptime", value: (n) => (n.running && known(n.uptime) ? uptime(n.uptime) : "") },
    ...(queues ? [
      { title: "Quorum leaders", value: (n) => num(quorumOn(n.name, queues).leaders.length), cls: "n" },
      { title: "Quorum replicas", value: (n) => num(quorumOn(n.name, queues).replicas.length), cls: "n" },
    ] : []),
  ], list, { id: "nodes-table" });
}

export async function list(ctx) {
  const box = h("div", { id: "nodes" });
  fill(ctx.main, h("h1", {}, "Nodes"), box);
  async function refresh() {
    const [nodes, queues] = await Promise.all([get("/nodes"), get("/queues")]);
    fill(box, nodesTable(nodes, queues));
  }
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

function queueTable(rows, id, empty) {
  return table([
    { title: "Virtual host", value: (q) => q.vhost },
    { title: "Name", value: (q) => link(`#/queues/${enc(q.vhost)}/${enc(q.name)}`, q.name) },
    { title: "Leader", value: (q) => q.leader ?? q.node },
    { title: "Members", value: (q) => (q.members ?? []).join(", ") },
    { title: "Online", value: (q) => (q.online ?? []).join(", ") },
    { title: "Messages", value: (q) => num(q.messages), cls: "n" },
  ], rows, { id, empty });
}

export async function detail(ctx, name) {
  const info = h("div", { id: "node-info" });
  const leaders = h("div", { id: "node-leaders" });
  const replicas = h("div", { id: "node-replicas" });
  const classic = h("div", { id: "node-queues" });
  fill(ctx.main, h("h1", {}, "Node ", h("b", { id: "node-name" }, name)),
    section("Overview", info),
    section("Quorum queue leaders", leaders),
    section("Quorum queue replicas", replicas),
    section("Other queues on this node", classic));
  async function refresh() {
    const [n, queues] = await Promise.all([get(`/nodes/${enc(name)}`), get("/queues")]);
    const on = quorumOn(name, queues);
    fill(info, facts([
      ["Running", n.running ? "yes" : "no"],
      ["Uptime", n.running && known(n.uptime) ? uptime(n.uptime) : ""],
      ["File descriptors", h("span", { id: "node-fds" }, fds(n))],
      ["Socket descriptors", known(n.sockets_used) ? `${num(n.sockets_used)} / ${num(n.sockets_total)}` : ""],
      ["Memory", h("span", { id: "node-memory" }, memory(n))],
      ["Disk space", h("span", { id: "node-disk" }, disk(n))],
      ["Alarms", h("span", { id: "node-alarms" }, alarms(n))],
      ["Processors", num(n.processors)],
      ["OS pid", n.os_pid ?? ""],
      ["Connections", num(n.connections ?? n.sockets_used)],
    ]));
    fill(leaders, queueTable(on.leaders, "node-leaders-table", "... no quorum queue leaders ..."));
    fill(replicas, queueTable(on.replicas, "node-replicas-table", "... no quorum queue replicas ..."));
    fill(classic, queueTable(queues.filter((q) => q.type !== "quorum" && q.node === name),
      "node-queues-table", "... no queues ..."));
  }
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

function alarms(n) {
  const on = [n.mem_alarm && "memory", n.disk_free_alarm && "disk"].filter(Boolean);
  return on.length ? h("span", { class: "alarm" }, on.join(", ")) : "none";
}
