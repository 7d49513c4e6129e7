// What several pages share: the vhost field of create forms and path builders.
import { enc, get } from "../api.js";

/** A select of the vhosts the user sees, preselecting the header's vhost filter. */
export async function vhostField(ctx, name = "vhost") {
  const names = (await get("/vhosts")).map((v) => v.name);
  return { name, label: "Virtual host", type: "select", value: ctx.vhost || "/",
    options: names.map((n) => [n, n]) };
}

/** "/queues" or "/queues/{vhost}" following the header's vhost filter. */
export function scoped(ctx, kind) {
  return ctx.vhost ? `/${kind}/${enc(ctx.vhost)}` : `/${kind}`;
}

/** The exchange's name in URLs ("" is amq.default). */
export function xname(name) {
  return name === "" ? "amq.default" : enc(name);
}

export function bindingPath(b) {
  const kind = b.destination_type === "queue" ? "q" : "e";
  return `/bindings/${enc(b.vhost)}/e/${xname(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`;
}
