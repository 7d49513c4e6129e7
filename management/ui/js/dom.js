// Small DOM helpers shared by the pages: element builder, tables, forms, formatters.

/** h("div", {class: "x", onclick: fn}, child, "text", [more]) -> HTMLElement. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key in el && key !== "list" && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace the children of el. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const link = (href, text) => h("a", { href }, text);

/**
 * A table: columns are {title, value(row) -> node|string, cls}; rows an array.
 * An empty list shows `empty` ("... no items ..." as RabbitMQ writes it).
 */
export function table(columns, rows, { empty = "... no items ...", id } = {}) {
  if (!rows.length) return h("p", { class: "empty", id }, empty);
  return h("table", { class: "list", id },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.cls }, c.title)))),
    h("tbody", {}, rows.map((row) => h("tr", {},
      columns.map((c) => h("td", { class: c.cls }, c.value(row)))))));
}

/** A name filter over a list: calls onChange(text) as the user types. */
export function filterBox(id, onChange) {
  return h("p", { class: "filter" }, h("label", {}, "Filter ",
    h("input", { id, type: "search", placeholder: "name contains…", oninput: (e) => onChange(e.target.value) })));
}

/** The rows whose name contains `text` (case-insensitive). */
export function matching(rows, text) {
  const needle = text.toLowerCase();
  return needle ? rows.filter((r) => String(r.name).toLowerCase().includes(needle)) : rows;
}

/** Label/value pairs as a two-column table (an object's details). */
export function facts(pairs) {
  return h("table", { class: "facts" },
    pairs.filter(Boolean).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))));
}

/** A collapsible section, as RabbitMQ's pages group their forms. */
export function section(title, ...body) {
  return h("details", { class: "section", open: true }, h("summary", {}, title), ...body);
}

/**
 * A form: fields are {name, label, type: text|password|number|select|checkbox|textarea|file,
 * options: [[value, text]], value, placeholder, required}. onSubmit(values, form) may return a
 * message to show; a thrown error's message is shown in red and the form is kept.
 */
export function form(fields, submit, onSubmit, { id } = {}) {
  const note = h("span", { class: "note" });
  const el = h("form", { class: "form", id },
    h("table", {}, fields.map((f) => h("tr", {}, h("th", {}, h("label", { for: fieldId(id, f) },
      f.label, f.required ? " *" : "")), h("td", {}, input(id, f), f.help ? h("small", {}, f.help) : null)))),
    h("p", {}, h("button", { type: "submit" }, submit), " ", note));
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = {};
    for (const f of fields) {
      const control = el.elements.namedItem(f.name);
      values[f.name] = f.type === "checkbox" ? control.checked
        : f.type === "file" ? control.files[0] : control.value;
    }
    note.className = "note";
    note.textContent = "…";
    try {
      const message = await onSubmit(values, el);
      note.className = "note ok";
      note.textContent = message ?? "Done.";
    } catch (err) {
      note.className = "note error";
      note.textContent = err.message;
    }
  });
  return el;
}

const fieldId = (formId, f) => `${formId ?? "f"}-${f.name}`;

function input(formId, f) {
  const common = { name: f.name, id: fieldId(formId, f), required: f.required, placeholder: f.placeholder };
  if (f.type === "select") {
    return h("select", common, (f.options ?? []).map(([value, text]) =>
      h("option", { value, selected: value === f.value }, text)));
  }
  if (f.type === "textarea") return h("textarea", { ...common, rows: f.rows ?? 4 }, f.value ?? "");
  if (f.type === "checkbox") return h("input", { ...common, type: "checkbox", checked: !!f.value });
  return h("input", { ...common, type: f.type ?? "text", value: f.value ?? "", accept: f.accept });
}

/** Parse "key=value" lines into an object; numbers and true/false become typed values. */
export function parseArgs(text) {
  const out = {};
  for (const line of (text ?? "").split("\n")) {
    const trimmed = line.trim();
    if (!trimmed) continue;
    const at = trimmed.indexOf("=");
    if (at < 1) throw new Error(`"${trimmed}": expected key=value`);
    out[trimmed.slice(0, at).trim()] = typed(trimmed.slice(at + 1).trim());
  }
  return out;
}

function typed(raw) {
  if (/^-?\d+$/.test(raw)) return Number(raw);
  if (raw === "true" || raw === "false") return raw === "true";
  if (/^[[{]/.test(raw)) { try { return JSON.parse(raw); } catch { /* keep text */ } }
  return raw;
}

// ---- formatters ---------------------------------------------------------------------------

export function num(n) {
  return n === undefined || n === null ? "" : Number(n).toLocaleString("en");
}

export function rate(details) {
  const r = details?.rate;
  return r === undefined ? "" : `${Number(r).toFixed(r < 10 && r % 1 ? 1 : 0)}/s`;
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(i && v < 10 ? 1 : 0)} ${units[i]}`;
}

export function args(obj) {
  const entries = Object.entries(obj ?? {});
  if (!entries.length) return "";
  return h("span", { class: "args" }, entries.map(([k, v]) =>
    h("span", { class: "arg" }, `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`)));
}

/** RabbitMQ's feature letters: D durable, AD auto-delete, Excl exclusive, I internal. */
export function features(o) {
  const out = [];
  if (o.durable) out.push(h("abbr", { title: "durable", class: "tag" }, "D"));
  if (o.auto_delete) out.push(h("abbr", { title: "auto-delete", class: "tag" }, "AD"));
  if (o.exclusive) out.push(h("abbr", { title: "exclusive", class: "tag" }, "Excl"));
  if (o.internal) out.push(h("abbr", { title: "internal", class: "tag" }, "I"));
  for (const k of Object.keys(o.arguments ?? {}).filter((a) => a !== "x-queue-type")) out.push(h("abbr", { title: `${k}: ${JSON.stringify(o.arguments[k])}`, class: "tag arg" }, shortArg(k)));
  if (o.policy) out.push(h("abbr", { title: "policy", class: "tag policy" }, o.policy));
  return out;
}

function shortArg(key) {
  const names = { "x-queue-type": "Args", "x-message-ttl": "TTL", "x-expires": "Exp",
    "x-max-length": "Lim", "x-max-length-bytes": "Lim B", "x-dead-letter-exchange": "DLX",
    "x-dead-letter-routing-key": "DLK", "x-max-priority": "Pri", "x-overflow": "Ovfl",
    "x-single-active-consumer": "SAC", "x-delivery-limit": "DL", "alternate-exchange": "AE" };
  return names[key] ?? "Args";
}

export function vhostName(v) {
  return v === "/" ? "/" : v;
}

export function showName(name) {
  return name === "" ? "(AMQP default)" : name;
}
