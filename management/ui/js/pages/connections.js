// Connections (one can be closed with a reason) and channels.
import { del, enc, get } from "../api.js";
import { bytes, facts, fill, form, h, link, num, rate, section, table } from "../dom.js";

const REFRESH_MS = 5000;

function inVhost(ctx, path) {
  return ctx.vhost ? `/vhosts/${enc(ctx.vhost)}/${path}` : `/${path}`;
}

/** RabbitMQ's UI has a Node column when there are several nodes (or the rows come from
 * several nodes). */
function nodeColumn(ctx, rows) {
  return ctx.clustered || new Set(rows.map((r) => r.node)).size > 1
    ? [{ title: "Node", value: (r) => r.node }] : [];
}

function byteRate(details) {
  return details?.rate === undefined ? "" : `${bytes(details.rate)}/s`;
}

function clientName(c) {
  const p = c.client_properties ?? {};
  return [p.product, p.version].filter(Boolean).join(" ");
}

export async function list(ctx) {
  const box = h("div", { id: "connections" });
  fill(ctx.main, h("h1", {}, "Connections"), box);
  const refresh = async () => {
    const rows = await get(inVhost(ctx, "connections"));
    fill(box, table([
    { title: "Name", value: (c) => h("span", {}, link(`#/connections/${enc(c.name)}`, c.name),
      c.user_provided_name ? h("small", {}, ` ${c.user_provided_name}`) : null) },
    ...nodeColumn(ctx, rows),
    { title: "Virtual host", value: (c) => c.vhost },
    { title: "User", value: (c) => c.user },
    { title: "State", value: (c) => h("span", { class: `state ${c.state}` }, c.state) },
    { title: "Protocol", value: (c) => c.protocol },
    { title: "Client", value: clientName },
    { title: "Channels", value: (c) => num(c.channels), cls: "n" },
    { title: "Heartbeat", value: (c) => `${c.timeout}s`, cls: "n" },
    // RabbitMQ's "Network" columns: bytes per second read from and written to the client
    { title: "From client", value: (c) => byteRate(c.recv_oct_details), cls: "n" },
    { title: "To client", value: (c) => byteRate(c.send_oct_details), cls: "n" },
  ], rows, { id: "connections-table" }));
  };
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}

export async function detail(ctx, name) {
  const c = await get(`/connections/${enc(name)}`);
  const chans = await get(`/connections/${enc(name)}/channels`);
  fill(ctx.main, h("h1", {}, "Connection ", h("b", {}, name)),
    section("Overview", facts([
      ["Node", h("span", { id: "connection-node" }, c.node ?? "")],
      ["User", c.user], ["Virtual host", c.vhost], ["State", c.state], ["Protocol", c.protocol],
      ["Authentication", c.auth_mechanism], ["Client", clientName(c)],
      ["Client-provided name", c.user_provided_name ?? ""],
      ["Heartbeat", `${c.timeout}s`], ["Frame max", `${num(c.frame_max)} bytes`],
      ["Channel limit", num(c.channel_max)],
      ["Connected at", new Date(c.connected_at).toLocaleString("en-GB")],
      ["From client", `${byteRate(c.recv_oct_details)} (${bytes(c.recv_oct)} in all)`],
      ["To client", `${byteRate(c.send_oct_details)} (${bytes(c.send_oct)} in all)`],
    ])),
    section("Channels", channelTable(ctx, chans)),
    section("Close this connection",
      form([{ name: "reason", label: "Reason", value: "Closed via management plugin" }],
        "Force Close", async ({ reason }) => {
          await del(`/connections/${enc(name)}`, { headers: { "X-Reason": reason } });
          location.hash = "#/connections";
          return "Closed.";
        }, { id: "close-connection" })));
}

function mode(ch) {
  return [ch.confirm ? "C" : "", ch.transactional ? "T" : ""].join("");
}

function channelTable(ctx, rows) {
  return table([
    { title: "Channel", value: (ch) => ch.name },
    ...nodeColumn(ctx, rows),
    { title: "User", value: (ch) => ch.user },
    { title: "Virtual host", value: (ch) => ch.vhost },
    { title: "Mode", value: (ch) => h("abbr", { title: "C: confirm, T: transactional" }, mode(ch)) },
    { title: "State", value: (ch) => ch.state },
    { title: "Prefetch", value: (ch) => num(ch.prefetch_count), cls: "n" },
    { title: "Unacked", value: (ch) => num(ch.messages_unacknowledged), cls: "n" },
    { title: "Consumers", value: (ch) => num(ch.consumer_count), cls: "n" },
    // message rates, as RabbitMQ's Channels page (a channel shows what it did only)
    { title: "Publish", value: (ch) => rate(ch.message_stats?.publish_details), cls: "n" },
    { title: "Confirm", value: (ch) => rate(ch.message_stats?.confirm_details), cls: "n" },
    { title: "Deliver / get", value: (ch) => rate(ch.message_stats?.deliver_get_details), cls: "n" },
    { title: "Ack", value: (ch) => rate(ch.message_stats?.ack_details), cls: "n" },
  ], rows, { id: "channels-table" });
}

export async function channels(ctx) {
  const box = h("div", { id: "channels" });
  fill(ctx.main, h("h1", {}, "Channels"), box);
  const refresh = async () => fill(box, channelTable(ctx, await get(inVhost(ctx, "channels"))));
  await refresh();
  ctx.every(REFRESH_MS, refresh);
}
