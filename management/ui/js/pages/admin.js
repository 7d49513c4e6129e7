// Administrator pages: users, virtual hosts, permissions and topic permissions.
import { del, enc, get, put } from "../api.js";
import { fill, form, h, num, section, table } from "../dom.js";
import { vhostField } from "./common.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

function remove(label, path, refresh) {
  return h("button", { class: "danger", onclick: async (e) => {
    e.target.disabled = true;
    await del(path);
    await refresh();
  } }, label);
}

export async function users(ctx) {
  const box = h("div", { id: "users" });
  async function refresh() {
    const access = {};
    for (const p of await get("/permissions")) (access[p.user] ??= []).push(p.vhost);
    fill(box, table([
      { title: "Name", value: (u) => u.name },
      { title: "Tags", value: (u) => (u.tags.length ? u.tags.join(", ") : h("i", {}, "No access to the UI")) },
      { title: "Can access virtual hosts", value: (u) => (access[u.name] ?? []).join(", ") || h("i", {}, "No access") },
      { title: "Has password", value: (u) => (u.password_hash ? "●" : "○") },
      { title: "", value: (u) => (u.name === ctx.user.name ? "" : remove("Delete", `/users/${enc(u.name)}`, refresh)) },
    ], await get("/users")));
  }
  fill(ctx.main, h("h1", {}, "Users"), box,
    section("Add a user", form([
      { name: "name", label: "Username", required: true },
      { name: "password", label: "Password", type: "password" },
      { name: "tags", label: "Tags", placeholder: "management", help: `comma-separated: ${TAGS.join(", ")}` },
    ], "Add user", async (v) => {
      const body = { tags: v.tags };
      if (v.password) body.password = v.password;
      await put(`/users/${enc(v.name)}`, body);
      await refresh();
      return `User ${v.name} added.`;
    }, { id: "add-user" })));
  await refresh();
}

export async function vhosts(ctx) {
  const box = h("div", { id: "vhosts" });
  async function refresh() {
    fill(box, table([
      { title: "Name", value: (v) => v.name },
      { title: "Description", value: (v) => v.description ?? "" },
      { title: "Tags", value: (v) => (v.tags ?? []).join(", ") },
      { title: "Ready", value: (v) => num(v.messages_ready), cls: "n" },
      { title: "Unacked", value: (v) => num(v.messages_unacknowledged), cls: "n" },
      { title: "Total", value: (v) => num(v.messages), cls: "n" },
      { title: "", value: (v) => remove("Delete", `/vhosts/${enc(v.name)}`, refresh) },
    ], await get("/vhosts")));
  }
  fill(ctx.main, h("h1", {}, "Virtual hosts"), box,
    section("Add a new virtual host", form([
      { name: "name", label: "Name", required: true },
      { name: "description", label: "Description" },
      { name: "tags", label: "Tags", help: "comma-separated" },
    ], "Add virtual host", async (v) => {
      await put(`/vhosts/${enc(v.name)}`, { description: v.description, tags: v.tags });
      await refresh();
      return `Virtual host ${v.name} added.`;
    }, { id: "add-vhost" })));
  await refresh();
}

export async function permissions(ctx) {
  const box = h("div", { id: "permissions" });
  const topicBox = h("div", { id: "topic-permissions" });
  const userNames = (await get("/users")).map((u) => [u.name, u.name]);
  async function refresh() {
    fill(box, table([
      { title: "User", value: (p) => p.user }, { title: "Virtual host", value: (p) => p.vhost },
      { title: "Configure regexp", value: (p) => p.configure }, { title: "Write regexp", value: (p) => p.write },
      { title: "Read regexp", value: (p) => p.read },
      { title: "", value: (p) => remove("Clear", `/permissions/${enc(p.vhost)}/${enc(p.user)}`, refresh) },
    ], await get("/permissions")));
    fill(topicBox, table([
      { title: "User", value: (p) => p.user }, { title: "Virtual host", value: (p) => p.vhost },
      { title: "Exchange", value: (p) => p.exchange }, { title: "Write regexp", value: (p) => p.write },
      { title: "Read regexp", value: (p) => p.read },
      { title: "", value: (p) => remove("Clear", `/topic-permissions/${enc(p.vhost)}/${enc(p.user)}`, refresh) },
    ], await get("/topic-permissions")));
  }
  const vhost = await vhostField(ctx);
  fill(ctx.main, h("h1", {}, "Permissions"), box,
    section("Set permission", form([
      { name: "user", label: "User", type: "select", options: userNames }, vhost,
      { name: "configure", label: "Configure regexp", value: ".*" },
      { name: "write", label: "Write regexp", value: ".*" },
      { name: "read", label: "Read regexp", value: ".*" },
    ], "Set permission", async (v) => {
      await put(`/permissions/${enc(v.vhost)}/${enc(v.user)}`, { configure: v.configure, write: v.write, read: v.read });
      await refresh();
      return "Permission set.";
    }, { id: "set-permission" })),
    h("h2", {}, "Topic permissions"), topicBox,
    section("Set topic permission", form([
      { name: "user", label: "User", type: "select", options: userNames }, vhost,
      { name: "exchange", label: "Exchange", value: "amq.topic" },
      { name: "write", label: "Write regexp", value: ".*" },
      { name: "read", label: "Read regexp", value: ".*" },
    ], "Set topic permission", async (v) => {
      await put(`/topic-permissions/${enc(v.vhost)}/${enc(v.user)}`, { exchange: v.exchange, write: v.write, read: v.read });
      await refresh();
      return "Topic permission set.";
    }, { id: "set-topic-permission" })));
  await refresh();
}
