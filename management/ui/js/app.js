// Boot, login, layout and the hash router of the management UI.
import { ApiError, api, basic, credentials, forgetCredentials, get, storeCredentials } from "./api.js";
import { fill, form, h } from "./dom.js";
import * as admin from "./pages/admin.js";
import * as connections from "./pages/connections.js";
import * as exchanges from "./pages/exchanges.js";
import * as federation from "./pages/federation.js";
import * as nodes from "./pages/nodes.js";
import * as overview from "./pages/overview.js";
import * as policies from "./pages/policies.js";
import * as queues from "./pages/queues.js";
import * as shovels from "./pages/shovels.js";

const isAdmin = (u) => u.tags.includes("administrator");
const isPolicymaker = (u) => isAdmin(u) || u.tags.includes("policymaker");
const anyone = () => true;

// [hash prefix, tab title, who sees it]
const TABS = [
  ["#/", "Overview", anyone], ["#/connections", "Connections", anyone],
  ["#/channels", "Channels", anyone], ["#/exchanges", "Exchanges", anyone],
  ["#/queues", "Queues", anyone], ["#/bindings", "Bindings", anyone],
  ["#/users", "Users", isAdmin], ["#/vhosts", "Virtual hosts", isAdmin],
  ["#/permissions", "Permissions", isAdmin], ["#/policies", "Policies", isPolicymaker],
  ["#/limits", "Limits", isAdmin],
  // rabbitmq_shovel_management's Admin pages: status for monitoring, management for policymakers
  ["#/shovels", "Shovel Status", (u) => isAdmin(u) || u.tags.includes("monitoring")],
  ["#/dynamic-shovels", "Shovel Management", isPolicymaker],
  // rabbitmq_federation_management's Admin pages, the same rights
  ["#/federation", "Federation Status", (u) => isAdmin(u) || u.tags.includes("monitoring")],
  ["#/federation-upstreams", "Federation Upstreams", isPolicymaker],
];

// [pattern, render(ctx, ...decoded groups)]
const ROUTES = [
  [/^#\/?$/, overview.render],
  [/^#\/connections$/, connections.list],
  [/^#\/connections\/(.+)$/, connections.detail],
  [/^#\/channels$/, connections.channels],
  [/^#\/exchanges$/, exchanges.list],
  [/^#\/exchanges\/([^/]+)\/([^/]*)$/, exchanges.detail],
  [/^#\/queues$/, queues.list],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, queues.detail],
  [/^#\/bindings$/, exchanges.bindings],
  [/^#\/nodes$/, nodes.list],
  [/^#\/nodes\/(.+)$/, nodes.detail],
  [/^#\/users$/, admin.users],
  [/^#\/vhosts$/, admin.vhosts],
  [/^#\/permissions$/, admin.permissions],
  [/^#\/policies$/, policies.list],
  [/^#\/limits$/, policies.limits],
  [/^#\/shovels$/, shovels.status],
  [/^#\/dynamic-shovels$/, shovels.manage],
  [/^#\/federation$/, federation.status],
  [/^#\/federation-upstreams$/, federation.upstreams],
];

const VHOST_KEY = "amqpq.vhost";
let timers = [];
let user = null;
let clustered = false; // several nodes: lists get RabbitMQ's Node column
let generation = 0; // bumped per route: a slower, older page never schedules or shows

function clearTimers() {
  timers.forEach(clearInterval);
  timers = [];
}

/** What a page gets: the user, the vhost filter, its container and a refresh scheduler. */
function context(main) {
  const mine = generation;
  return {
    user,
    isAdmin: isAdmin(user),
    isPolicymaker: isPolicymaker(user),
    isMonitor: isAdmin(user) || user.tags.includes("monitoring"),
    clustered,
    vhost: sessionStorage.getItem(VHOST_KEY) || "",
    main,
    every(ms, fn) {
      if (mine === generation) timers.push(setInterval(() => fn().catch(showError), ms));
    },
  };
}

function showError(err) {
  if (err instanceof ApiError && err.status === 401 && err.reason === "Login failed") {
    logout();
    return;
  }
  const bar = document.getElementById("status");
  fill(bar, h("span", { class: "error" }, err.message));
}

async function route() {
  clearTimers();
  generation += 1;
  const mine = generation;
  const hash = location.hash || "#/";
  document.querySelectorAll("#nav a").forEach((a) => {
    const target = a.getAttribute("href");
    // a node's page sits under Overview, as in RabbitMQ's UI
    a.classList.toggle("active", target === "#/" ? hash === "#/" || hash === "#" || hash.startsWith("#/nodes") : hash === target || hash.startsWith(`${target}/`));
  });
  fill(document.getElementById("status"));
  await updateVhosts().catch(showError);
  if (mine !== generation) return;
  // each visit renders into its own element, so a stale render lands nowhere visible
  const main = h("div", { class: "page" });
  fill(document.getElementById("main"), main);
  for (const [pattern, render] of ROUTES) {
    const m = hash.match(pattern);
    if (m) {
      fill(main, h("p", { class: "loading" }, "Loading…"));
      try {
        await render(context(main), ...m.slice(1).map(decodeURIComponent));
      } catch (err) {
        fill(main, h("h1", {}, "Error"), h("p", { class: "error" }, err.message));
      }
      return;
    }
  }
  fill(main, h("h1", {}, "Not found"), h("p", {}, `No page ${hash}.`));
}

async function vhostPicker() {
  const select = h("select", { id: "vhost-filter", onchange: (e) => {
    sessionStorage.setItem(VHOST_KEY, e.target.value);
    route();
  } });
  await updateVhosts(select);
  return h("label", { class: "vhost-filter" }, "Virtual host ", select);
}

/** The filter's options: "All" and every vhost the user sees (read again on each page). */
async function updateVhosts(select = document.getElementById("vhost-filter")) {
  if (!select) return;
  const names = (await get("/vhosts")).map((v) => v.name);
  let current = sessionStorage.getItem(VHOST_KEY) || "";
  if (!names.includes(current)) current = "";
  sessionStorage.setItem(VHOST_KEY, current);
  fill(select, h("option", { value: "" }, "All"),
    names.map((n) => h("option", { value: n, selected: n === current }, n)));
  select.value = current;
}

function logout() {
  forgetCredentials();
  user = null;
  clearTimers();
  loginPage();
}

async function layout() {
  // as RabbitMQ's UI: the node columns when a monitoring user sees several nodes
  const monitor = isAdmin(user) || user.tags.includes("monitoring");
  clustered = monitor ? (await get("/nodes").catch(() => [])).length > 1 : false;
  const header = document.getElementById("header");
  fill(header,
    h("div", { class: "brand" }, h("span", { class: "logo" }, "amqpq"), " Management"),
    h("div", { class: "who" }, await vhostPicker(), " ",
      h("span", { id: "user" }, `User ${user.name}`), " ",
      h("button", { id: "logout", onclick: logout }, "Log out")));
  fill(document.getElementById("nav"),
    TABS.filter(([, , who]) => who(user)).map(([href, title]) => h("a", { href }, title)));
  window.onhashchange = route;
  await route();
}

function loginPage() {
  fill(document.getElementById("header"),
    h("div", { class: "brand" }, h("span", { class: "logo" }, "amqpq"), " Management"));
  fill(document.getElementById("nav"));
  fill(document.getElementById("status"));
  window.onhashchange = null;
  fill(document.getElementById("main"), h("div", { class: "login" },
    h("h1", {}, "Log in"),
    form([
      { name: "username", label: "Username", required: true },
      { name: "password", label: "Password", type: "password" },
    ], "Login", async ({ username, password }) => {
      const token = basic(username, password);
      try {
        user = await api("GET", "/whoami", undefined, { token });
      } catch (err) {
        throw new Error(err instanceof ApiError ? err.reason || `HTTP ${err.status}` : err.message);
      }
      storeCredentials(token);
      await layout();
      return "Logged in.";
    }, { id: "login" })));
}

async function boot() {
  if (credentials()) {
    try {
      user = await get("/whoami");
      await layout();
      return;
    } catch {
      forgetCredentials();
    }
  }
  loginPage();
}

boot();
