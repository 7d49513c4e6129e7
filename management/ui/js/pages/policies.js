// Policies and operator policies; virtual host and user limits.
import { del, enc, get, put } from "../api.js";
import { args, fill, form, h, num, parseArgs, section, table } from "../dom.js";
import { scoped, vhostField } from "./common.js";

const APPLY_TO = [["all", "Exchanges and queues"], ["exchanges", "Exchanges"], ["queues", "Queues"],
  ["classic_queues", "Classic queues"], ["quorum_queues", "Quorum queues"]];

function clear(path, refresh) {
  return h("button", { class: "danger", onclick: async () => { await del(path); await refresh(); } }, "Clear");
}

function policyTable(kind, rows, refresh) {
  return table([
    { title: "Virtual host", value: (p) => p.vhost }, { title: "Name", value: (p) => p.name },
    { title: "Pattern", value: (p) => p.pattern }, { title: "Apply to", value: (p) => p["apply-to"] },
    { title: "Definition", value: (p) => args(p.definition) },
    { title: "Priority", value: (p) => String(p.priority), cls: "n" },
    { title: "", value: (p) => clear(`/${kind}/${enc(p.vhost)}/${enc(p.name)}`, refresh) },
  ], rows);
}

async function policyForm(ctx, kind, id, refresh) {
  return form([
    await vhostField(ctx),
    { name: "name", label: "Name", required: true },
    { name: "pattern", label: "Pattern", required: true, placeholder: "^amq\\." },
    { name: "apply_to", label: "Apply to", type: "select", value: "all", options: APPLY_TO },
    { name: "priority", label: "Priority", type: "number", value: "0" },
    { name: "definition", label: "Definition", type: "textarea", rows: 3, required: true,
      placeholder: "max-length=1000", help: "key=value, one per line (e.g. message-ttl, max-length, dead-letter-exchange)" },
  ], kind === "policies" ? "Add / update policy" : "Add / update operator policy", async (v) => {
    await put(`/${kind}/${enc(v.vhost)}/${enc(v.name)}`, { pattern: v.pattern,
      definition: parseArgs(v.definition), priority: Number(v.priority || 0), "apply-to": v.apply_to });
    await refresh();
    return `Policy ${v.name} set.`;
  }, { id });
}

export async function list(ctx) {
  const box = h("div", { id: "policies" });
  const opBox = h("div", { id: "operator-policies" });
  async function refresh() {
    fill(box, policyTable("policies", await get(scoped(ctx, "policies")), refresh));
    if (ctx.isAdmin) fill(opBox, policyTable("operator-policies", await get(scoped(ctx, "operator-policies")), refresh));
  }
  fill(ctx.main, h("h1", {}, "Policies"), box,
    section("Add / update a policy", await policyForm(ctx, "policies", "add-policy", refresh)),
    ctx.isAdmin ? [h("h2", {}, "Operator policies"), opBox,
      section("Add / update an operator policy", await policyForm(ctx, "operator-policies", "add-operator-policy", refresh))] : null);
  await refresh();
}

const VHOST_LIMITS = [["max-connections", "max-connections"], ["max-queues", "max-queues"]];
const USER_LIMITS = [["max-connections", "max-connections"], ["max-channels", "max-channels"]];

function limitRows(rows, kind) {
  return rows.flatMap((r) => Object.entries(r.value).map(([name, value]) => ({ owner: r[kind], name, value })));
}

export async function limits(ctx) {
  const vbox = h("div", { id: "vhost-limits" });
  const ubox = h("div", { id: "user-limits" });
  const userNames = (await get("/users")).map((u) => [u.name, u.name]);
  async function refresh() {
    fill(vbox, table([
      { title: "Virtual host", value: (r) => r.owner }, { title: "Limit", value: (r) => r.name },
      { title: "Value", value: (r) => num(r.value), cls: "n" },
      { title: "", value: (r) => clear(`/vhost-limits/${enc(r.owner)}/${enc(r.name)}`, refresh) },
    ], limitRows(await get("/vhost-limits"), "vhost")));
    fill(ubox, table([
      { title: "User", value: (r) => r.owner }, { title: "Limit", value: (r) => r.name },
      { title: "Value", value: (r) => num(r.value), cls: "n" },
      { title: "", value: (r) => clear(`/user-limits/${enc(r.owner)}/${enc(r.name)}`, refresh) },
    ], limitRows(await get("/user-limits"), "user")));
  }
  fill(ctx.main, h("h1", {}, "Virtual host limits"), vbox,
    section("Set / update a virtual host limit", form([
      await vhostField(ctx),
      { name: "name", label: "Limit", type: "select", options: VHOST_LIMITS },
      { name: "value", label: "Value", type: "number", required: true },
    ], "Set / update limit", async (v) => {
      await put(`/vhost-limits/${enc(v.vhost)}/${enc(v.name)}`, { value: Number(v.value) });
      await refresh();
      return "Limit set.";
    }, { id: "set-vhost-limit" })),
    h("h1", {}, "User limits"), ubox,
    section("Set / update a user limit", form([
      { name: "user", label: "User", type: "select", options: userNames },
      { name: "name", label: "Limit", type: "select", options: USER_LIMITS },
      { name: "value", label: "Value", type: "number", required: true },
    ], "Set / update limit", async (v) => {
      await put(`/user-limits/${enc(v.user)}/${enc(v.name)}`, { value: Number(v.value) });
      await refresh();
      return "Limit set.";
    }, { id: "set-user-limit" })));
  await refresh();
}
