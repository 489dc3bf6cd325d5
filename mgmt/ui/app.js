// brokerd management UI: a single page, routed by the URL's hash, that
// calls the management JSON API under /api with the logged-in user's
// basic-auth credentials (kept in sessionStorage, so they end with the tab).
// No build step: plain ES modules, DOM built with h() (never innerHTML, so
// names and payloads cannot inject markup).

const AUTH = "brokerd.auth";
const USER = "brokerd.user";
const main = document.getElementById("main");
const statusEl = document.getElementById("status");

// h builds an element: h("a", {href: "#"}, "text", child, ...).
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of kids.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// APIError is a non-2xx reply; reason is the API's message.
// body is the reply's JSON, when it had one.
class APIError extends Error {
  constructor(status, reason, body) { super(reason); this.status = status; this.reason = reason; this.body = body; }
}

// api calls the JSON API with the session's credentials (or auth).
async function api(method, path, body, auth = sessionStorage.getItem(AUTH), extra = {}) {
  const headers = { "Accept": "application/json", ...extra };
  if (auth) headers["Authorization"] = "Basic " + auth;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  // credentials "omit": a 401 then never makes the browser prompt for a
  // password (the API answers bad credentials with WWW-Authenticate); the
  // Authorization header is sent all the same.
  const r = await fetch("/api" + path, { method, headers, credentials: "omit", body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = text; } }
  if (!r.ok) {
    const reason = (data && typeof data === "object" && (data.reason || data.error)) || r.statusText || String(r.status);
    if (r.status === 401 && auth && path !== "/whoami") { logout(); }
    throw new APIError(r.status, reason, data);
  }
  return data;
}

const enc = encodeURIComponent;
function announce(msg) { statusEl.textContent = msg; }
function fmt(n) { return typeof n === "number" ? n.toLocaleString("en") : (n ?? ""); }
function errorBox(e) { return h("p", { class: "error", role: "alert" }, e instanceof APIError ? e.reason : String(e)); }

function b64utf8(s) { return btoa(String.fromCharCode(...new TextEncoder().encode(s))); }

function logout() {
  sessionStorage.removeItem(AUTH);
  sessionStorage.removeItem(USER);
  location.hash = "#/login";
  render();
}

function setPage(title, ...content) {
  document.title = title + " — brokerd";
  main.replaceChildren(h("h1", {}, title), ...content.filter(c => c !== null && c !== undefined && c !== false));
  for (const a of document.querySelectorAll("#nav a")) {
    const here = location.hash.startsWith(a.getAttribute("href"));
    if (here) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
}

// ---- login ----

function loginPage() {
  const err = h("div");
  const user = h("input", { id: "username", name: "username", autocomplete: "username", required: true });
  const pass = h("input", { id: "password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const form = h("form", { class: "stack", id: "login", "aria-describedby": "login-error" },
    h("label", { for: "username" }, "Username", user),
    h("label", { for: "password" }, "Password", pass),
    h("div", { id: "login-error" }, err),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Log in")));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const auth = b64utf8(user.value + ":" + pass.value);
    try {
      const me = await api("GET", "/whoami", undefined, auth);
      sessionStorage.setItem(AUTH, auth);
      sessionStorage.setItem(USER, me.name);
      location.hash = "#/overview";
    } catch (e) {
      err.replaceChildren(errorBox(e));
      pass.select();
      pass.focus();
    }
  });
  setPage("Log in", form);
  user.focus();
}

// ---- overview ----

// RATES are the message_stats counters the overview shows as rates.
const RATES = [["publish", "Publish"], ["deliver_get", "Deliver / get"], ["ack", "Acknowledge"], ["redeliver", "Redeliver"], ["dead_lettered", "Dead-lettered"]];

// alarmsNow reads the alarms health check: 200 without alarms, 503 with
// them (its body then lists them).
function alarmsNow() {
  return api("GET", "/health/checks/alarms").catch(e => e instanceof APIError && e.status === 503 ? { status: "failed", reason: e.reason, alarms: e.body?.alarms } : Promise.reject(e));
}

function alarmView(alarms) {
  if (alarms.status === "ok") return h("p", { id: "ov-alarms", class: "ok" }, "No alarms.");
  const res = (alarms.alarms || []).map(a => a.resource);
  return h("div", { id: "ov-alarms", class: "alarm", role: "alert" },
    h("strong", {}, res.length ? `Resource alarm: ${res.join(", ")}` : (alarms.reason || "Alarm in effect")),
    h("p", {}, "Publishing connections are blocked until every alarm clears; consumers keep draining."));
}

// mayMonitor tells whether the user may read /api/nodes (monitoring or
// administrator tag): asking without would answer 401, which logs out.
async function mayMonitor() {
  const me = await api("GET", "/whoami");
  return (me.tags || []).some(t => t === "monitoring" || t === "administrator");
}

function bytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function duration(ms) {
  if (typeof ms !== "number") return "";
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), hh = Math.floor(s % 86400 / 3600), mm = Math.floor(s % 3600 / 60);
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${mm}m` : mm ? `${mm}m ${s % 60}s` : `${s}s`;
}

// nodesView is the overview's node table (/api/nodes): on a cluster every
// node, its role and, as the leader knows them, whether it runs, its lag
// in log entries and when the leader last heard from it; the node
// answering (the leader) with its uptime, memory and free disk. A value
// the answering node does not know is left empty.
function nodesView(nodes) {
  const cluster = nodes.some(n => n.raft);
  return h("div", { class: "table-wrap" }, h("table", { id: "nodes" },
    h("thead", {}, h("tr", {}, colHead("Name"), cluster ? colHead("Role") : null, colHead("Running"), colHead("Uptime", "num"),
      colHead("Memory used", "num"), colHead("Disk free", "num"),
      cluster ? [colHead("Lag (entries)", "num"), colHead("Last contact", "num")] : null)),
    h("tbody", {}, nodes.map(n => {
      const r = n.raft || {};
      return h("tr", { dataset: { node: n.name, running: String(n.running) } },
        h("th", { scope: "row" }, n.name),
        cluster ? h("td", { class: "role" }, r.leader ? "leader" : "follower") : null,
        h("td", { class: n.running ? "ok" : "down" }, n.running ? "running" : "not running"),
        h("td", { class: "num" }, duration(n.uptime)),
        h("td", { class: "num" }, bytes(n.mem_used)),
        h("td", { class: "num" }, bytes(n.disk_free)),
        cluster ? [h("td", { class: "num lag" }, r.lag ?? ""),
          h("td", { class: "num" }, r.self ? "" : typeof r.last_contact === "number" ? `${fmt(r.last_contact)} ms ago` : "never")] : null);
    }))));
}

// overviewPage shows totals, alarms, message rates and, to monitoring
// users, the nodes. Rates are computed
// here from the growth of the overview's counters between two polls, 5 s
// apart (the API keeps no rate samples), so they show after the second.
async function overviewPage() {
  const monitor = await mayMonitor();
  const nodesNow = () => monitor ? api("GET", "/nodes") : Promise.resolve(null);
  let [ov, alarms, nodes] = await Promise.all([api("GET", "/overview"), alarmsNow(), nodesNow()]);
  let prev = { at: performance.now(), stats: ov.message_stats || {} }, samples = 1, shownAlarms = JSON.stringify(alarms);
  const card = (label, id, value) => h("div", {}, h("dt", {}, label), h("dd", { id }, value));
  const alarmBox = h("section", { "aria-labelledby": "alarms-h", id: "alarms" }, h("h2", { id: "alarms-h" }, "Alarms"), alarmView(alarms));
  const totals = ov => {
    const t = ov.object_totals || {}, q = ov.queue_totals || {};
    return [["Connections", "connections", t.connections], ["Channels", "channels", t.channels], ["Queues", "queues", t.queues],
      ["Messages", "messages", q.messages], ["Ready", "ready", q.messages_ready], ["Unacked", "unacked", q.messages_unacknowledged]];
  };
  setPage("Overview",
    alarmBox,
    h("section", { "aria-labelledby": "totals-h" },
      h("h2", { id: "totals-h" }, "Totals"),
      h("dl", { class: "cards" }, totals(ov).map(([label, id, v]) => card(label, "ov-" + id, fmt(v ?? 0))))),
    h("section", { "aria-labelledby": "rates-h" }, h("h2", { id: "rates-h" }, "Message rates (per second, over the last 5 s)"),
      h("dl", { class: "cards", id: "rates" }, RATES.map(([k, label]) => card(label, "rate-" + k, "—")))),
    h("section", { "aria-labelledby": "node-h", id: "node" },
      h("h2", { id: "node-h" }, nodes && nodes.length > 1 ? "Nodes" : "Node"),
      h("p", { id: "ov-node" }, `${ov.product_name || "brokerd"} ${ov.product_version || ""} on ${ov.node || ""}`,
        ov.cluster_name && ov.cluster_name !== ov.node ? `, cluster ${ov.cluster_name}` : ""),
      nodes ? nodesView(nodes) : null,
      h("p", {}, h("a", { href: "#/nodes" }, "Resources, limits and health checks"))));
  const nodeBox = document.getElementById("node");
  main.dataset.samples = samples;
  every(5000, async () => {
    try {
      [ov, alarms, nodes] = await Promise.all([api("GET", "/overview"), alarmsNow(), nodesNow()]);
    } catch (e) { shownAlarms = ""; alarmBox.replaceChildren(alarmBox.firstChild, errorBox(e)); return; }
    if (nodes) document.getElementById("nodes")?.replaceWith(nodesView(nodes).firstChild);
    nodeBox.dataset.polls = (Number(nodeBox.dataset.polls) || 0) + 1;
    const now = performance.now(), secs = (now - prev.at) / 1000, stats = ov.message_stats || {};
    for (const [k] of RATES) {
      const el = document.getElementById("rate-" + k);
      if (!el || typeof stats[k] !== "number" || typeof prev.stats[k] !== "number") continue;
      const r = Math.max(0, stats[k] - prev.stats[k]) / secs;
      el.textContent = r.toFixed(1);
      el.dataset.delta = stats[k] - prev.stats[k];
    }
    prev = { at: now, stats };
    for (const [, id, v] of totals(ov)) { const el = document.getElementById("ov-" + id); if (el) el.textContent = fmt(v ?? 0); }
    // Redrawn only when they change: a new role=alert is announced.
    const seen = JSON.stringify(alarms);
    if (seen !== shownAlarms) { shownAlarms = seen; alarmBox.replaceChildren(alarmBox.firstChild, alarmView(alarms)); }
    main.dataset.samples = ++samples;
  });
}

// ---- nodes and health checks ----

// nodeCells are the node page's columns: [heading, class, cell content of
// node n]. A value the answering node does not report (a cluster peer's
// memory, say) is left empty.
const nodeCells = [
  ["Running", "running", n => n.running ? "running" : "not running"],
  ["Uptime", "num uptime", n => duration(n.uptime)],
  ["Memory used / limit", "num mem", n => usage(bytes(n.mem_used), n.mem_limit ? bytes(n.mem_limit) : "no limit", n.mem_alarm, "memory")],
  ["Disk free / limit", "num disk", n => usage(bytes(n.disk_free), n.disk_free_limit ? bytes(n.disk_free_limit) : "no limit", n.disk_free_alarm, "disk")],
  ["File descriptors used / total", "num fd", n => usage(fmt(n.fd_used), n.fd_total ? fmt(n.fd_total) : "no limit")],
  ["Sockets used / total", "num sockets", n => usage(fmt(n.sockets_used), n.sockets_total ? fmt(n.sockets_total) : "no limit")],
  ["Processes used / total", "num proc", n => usage(fmt(n.proc_used), fmt(n.proc_total))],
  ["Run queue", "num runq", n => fmt(n.run_queue)],
  ["Processors", "num cpus", n => fmt(n.processors)],
];

// usage renders "used / total", with an alarm flag when alarm is true;
// nothing when used is unknown.
function usage(used, total, alarm, what) {
  if (used === "") return "";
  return [used, " / ", total, alarm ? [" ", h("strong", { class: "flag-alarm" }, `${what} alarm`)] : null];
}

// scrollBox wraps a table with no control in it: at phone width it
// scrolls sideways, so it takes focus (arrow keys scroll it) and is a
// named region.
function scrollBox(label, table) { return h("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": label }, table); }

function nodeDetailView(nodes) {
  return scrollBox("Nodes", h("table", { id: "nodes-detail" },
    h("caption", { class: "visually-hidden" }, "Nodes: resources in use against their limits"),
    h("thead", {}, h("tr", {}, colHead("Name"), nodeCells.map(([label, cls]) => colHead(label, cls.startsWith("num") ? "num" : undefined)))),
    h("tbody", {}, nodes.map(n => h("tr", { dataset: { node: n.name, running: String(n.running), memAlarm: String(!!n.mem_alarm), diskAlarm: String(!!n.disk_free_alarm) } },
      h("th", { scope: "row" }, n.name),
      nodeCells.map(([, cls, cell]) => h("td", { class: cls + (cls === "running" ? (n.running ? " ok" : " down") : "") }, cell(n))))))));
}

// healthChecks are the health checks of RabbitMQ's API the nodes page
// runs: those of the whole node, then a port and a protocol check per
// listener the overview lists.
function healthChecks(listeners) {
  const checks = ["alarms", "local-alarms", "virtual-hosts", "certificate-expiration/1/months", "is-in-service", "ready-to-accept-clients", "below-node-connection-limit"];
  for (const l of listeners || []) checks.push(`port-listener/${l.port}`);
  // "amqp/ssl" is one segment: %2F, as RabbitMQ's paths carry a slash.
  for (const p of new Set((listeners || []).map(l => l.protocol))) checks.push(`protocol-listener/${enc(p)}`);
  return checks;
}

// runCheck runs one health check: passed (200), failed (503, with the
// check's reason and fields) or error (any other answer).
async function runCheck(path) {
  try {
    return { path, result: "passed", body: await api("GET", "/health/checks/" + path) };
  } catch (e) {
    if (e instanceof APIError && e.status === 503) return { path, result: "failed", body: e.body && typeof e.body === "object" ? e.body : { reason: e.reason } };
    return { path, result: "error", body: { reason: e instanceof APIError ? `${e.status}: ${e.reason}` : String(e) } };
  }
}

// checkDetails says what a check's answer holds beyond its status: the
// reason, the alarms, the certificates expiring, the listeners there
// are, the connection count and limit.
function checkDetails(body) {
  const out = [];
  if (body.reason) out.push(h("span", { class: "reason" }, body.reason));
  for (const [k, v] of Object.entries(body)) {
    if (k === "status" || k === "reason") continue;
    if (k === "alarms" && Array.isArray(v)) out.push(h("span", {}, "alarms: " + v.map(a => `${a.resource} on ${a.node}`).join(", ")));
    else if (k === "expired" && Array.isArray(v)) {
      out.push(h("ul", { class: "reasons" }, v.map(l => h("li", {}, `${l.protocol} on ${l.interface}:${l.port}: `,
        [["certificate", l.certfile, l.certfile_expires_on], ["CA", l.cacertfile, l.cacertfile_expires_on]]
          .filter(([, , exp]) => exp && exp.length).map(([what, file, exp]) => `${what} ${file} expires ${exp.join(", ")}`).join("; ")))));
    } else out.push(h("span", {}, `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`));
  }
  return out.flatMap((c, i) => i && c.tagName !== "UL" ? ["; ", c] : [c]);
}

function checksView(results) {
  return scrollBox("Health checks", h("table", { id: "health-checks" },
    h("thead", {}, h("tr", {}, colHead("Check"), colHead("Result"), colHead("Details"))),
    h("tbody", {}, results.map(c => h("tr", { dataset: { check: c.path, result: c.result } },
      h("th", { scope: "row" }, h("code", {}, c.path)),
      h("td", { class: "result " + (c.result === "passed" ? "ok" : "down") }, c.result),
      h("td", { class: "details" }, checkDetails(c.body || {})))))));
}

// nodesPage shows each node's resources against their limits (GET
// /api/nodes, to monitoring users) and the result of every health check,
// both again every 5 s. A user without the monitoring tag sees the checks
// only (asking for the nodes would be refused, and log out).
async function nodesPage() {
  const monitor = await mayMonitor();
  const load = async () => {
    const ov = await api("GET", "/overview");
    return Promise.all([monitor ? api("GET", "/nodes") : null, Promise.all(healthChecks(ov.listeners).map(runCheck))]);
  };
  let [nodes, checks] = await load();
  const nodeBox = h("section", { "aria-labelledby": "nodes-h", id: "nodes-section" }, h("h2", { id: "nodes-h" }, "Nodes"),
    nodes ? nodeDetailView(nodes) : h("p", {}, "Node details need the monitoring or administrator tag."));
  const checkBox = h("section", { "aria-labelledby": "checks-h", id: "checks-section" }, h("h2", { id: "checks-h" }, "Health checks"),
    h("p", { class: "hint" }, "RabbitMQ's health checks (GET /api/health/checks/…), run every 5 s: passed answers 200, failed 503 with the reason."),
    checksView(checks));
  const msg = h("div", { id: "nodes-msg" });
  setPage("Nodes and health", nodeBox, checkBox, msg);
  main.dataset.polls = 0;
  every(5000, async () => {
    try { [nodes, checks] = await load(); } catch (e) { msg.replaceChildren(errorBox(e)); return; }
    msg.replaceChildren();
    if (nodes) document.getElementById("nodes-detail")?.closest(".table-wrap").replaceWith(nodeDetailView(nodes));
    document.getElementById("health-checks")?.closest(".table-wrap").replaceWith(checksView(checks));
    main.dataset.polls = Number(main.dataset.polls) + 1;
  });
}

// ---- queues ----

// FEATURES maps a queue argument (x-…) or its policy key to RabbitMQ's
// badge; the badge's title names it in full for screen readers.
const FEATURES = [
  ["message-ttl", "TTL", "Message TTL"],
  ["expires", "Exp", "Auto expire"],
  ["max-length", "Lim", "Max length"],
  ["max-length-bytes", "Lim B", "Max length bytes"],
  ["dead-letter-exchange", "DLX", "Dead letter exchange"],
  ["dead-letter-routing-key", "DLK", "Dead letter routing key"],
  ["dead-letter-strategy", "DLS", "Dead letter strategy"],
  ["delivery-limit", "DlvLim", "Delivery limit"],
];

function badge(text, title, cls = "") { return h("abbr", { class: "badge " + cls, title }, text); }

// features returns a queue's badges: flags, then each feature set by an
// argument or by its effective policy (marked as from the policy).
function features(q) {
  const out = [];
  if (q.durable) out.push(badge("D", "Durable"));
  if (q.auto_delete) out.push(badge("AD", "Auto delete"));
  if (q.exclusive) out.push(badge("Excl", "Exclusive"));
  const args = q.arguments || {}, pol = q.effective_policy_definition || {};
  for (const [key, short, long] of FEATURES) {
    if (("x-" + key) in args) out.push(badge(short, `${long}: ${JSON.stringify(args["x-" + key])}`));
    else if (key in pol) out.push(badge(short, `${long} (policy): ${JSON.stringify(pol[key])}`, "policy"));
  }
  const retry = retrySettings(q);
  if (retry.length) {
    const text = retry.map(([k, sources]) => `${k}: ` + sources.map(([v, from]) => JSON.stringify(v) + (from === "policy" ? " (policy)" : "")).join(" / ")).join(", ");
    out.push(badge("retry", "Delayed retry with backoff — " + text, retry.every(r => r[1].every(s => s[1] === "policy")) ? "policy retry" : "retry"));
  }
  return out;
}

// retrySettings lists a queue's delayed-retry settings (RabbitMQ 4.3's
// x-delayed-retry-type/-min/-max, LavinMQ's -multiplier, brokerd's
// jitter): [name without x-, [[value, "argument" | "policy"], ...]], the
// argument first where both set a key (the broker resolves them: the
// policy's type wins, the smaller min, max, multiplier and jitter apply).
function retrySettings(q) {
  const args = q.arguments || {}, pol = q.effective_policy_definition || {};
  const out = new Map();
  const add = (k, v, from) => { if (!out.has(k)) out.set(k, []); out.get(k).push([v, from]); };
  for (const [k, v] of Object.entries(args)) if (k.startsWith("x-delayed-retry-")) add(k.slice(2), v, "argument");
  for (const [k, v] of Object.entries(pol)) if (k.startsWith("delayed-retry-")) add(k, v, "policy");
  return [...out.entries()].sort((a, b) => a[0].localeCompare(b[0]));
}

// retrySection is the queue page's delayed-retry settings, shown when the
// queue has any; messages_delayed (messages waiting out a retry delay) is
// shown when the API gives it.
function retrySection(q) {
  const retry = retrySettings(q);
  if (!retry.length) return null;
  return h("section", { "aria-labelledby": "retry-h", id: "retry" }, h("h2", { id: "retry-h" }, "Delayed retry"),
    h("table", { class: "kv", id: "retry-settings" }, h("tbody", {},
      retry.map(([k, sources]) => h("tr", { dataset: { key: k } }, h("th", { scope: "row" }, k),
        h("td", {}, sources.flatMap(([v, from], i) => [i ? " · " : "", typeof v === "object" ? JSON.stringify(v) : String(v), " ", h("small", {}, `(${from})`)])))),
      q.messages_delayed !== undefined ? h("tr", {}, h("th", { scope: "row" }, "Waiting to retry"), h("td", { id: "q-delayed" }, fmt(q.messages_delayed))) : null)));
}

const queueState = { name: "", sort: "name", reverse: false, page: 1, size: 100 };
const QCOLS = "name,vhost,type,durable,auto_delete,exclusive,arguments,policy,operator_policy,effective_policy_definition,messages,messages_ready,messages_unacknowledged,state,message_stats";

// QRATES are the message_stats counters the queue list and page show as
// rates per second.
const QRATES = [["publish", "Incoming"], ["deliver_get", "Deliver / get"], ["ack", "Ack"]];

// queueSample is a queue's counters at a poll (performance.now() ms).
function queueSample(q, at) {
  const ms = q.message_stats || {};
  return { at, stats: Object.fromEntries(QRATES.map(([k]) => [k, ms[k] ?? 0])) };
}

// queueRate is counter k's growth from sample prev to now per second, "—"
// without an earlier sample; delta is the growth (for the tests).
function queueRate(prev, now, k) {
  if (!prev || now.at <= prev.at) return { text: "—" };
  const delta = Math.max(0, now.stats[k] - prev.stats[k]);
  return { text: (delta / ((now.at - prev.at) / 1000)).toFixed(1), delta };
}

// queueListPrev keeps the queue list's last poll (each shown queue's
// sample, by vhost and name), so the next one shows rates; a poll sets
// queueListPolled, any other render of the list starts afresh.
let queueListPrev = new Map(), queueListPolled = false;

function queueLink(q) { return `#/queue/${enc(q.vhost)}/${enc(q.name)}`; }

async function queuesPage() {
  const st = queueState, polled = queueListPolled;
  queueListPolled = false;
  const params = new URLSearchParams({ page: st.page, page_size: st.size, sort: st.sort, sort_reverse: st.reverse, columns: QCOLS });
  if (st.name) params.set("name", st.name);
  let res;
  try {
    res = await api("GET", "/queues?" + params);
  } catch (e) {
    if (e instanceof APIError && e.status === 400 && st.page > 1) { st.page = 1; return queuesPage(); }
    throw e;
  }
  const at = performance.now();
  const prevSamples = polled ? queueListPrev : new Map(), prevAt = polled ? queueListPrev.at : undefined;
  queueListPrev = new Map();
  queueListPrev.at = at;
  const rateCells = q => {
    const key = q.vhost + "\n" + q.name, now = queueSample(q, at);
    queueListPrev.set(key, now);
    return QRATES.map(([k]) => {
      const r = queueRate(prevSamples.get(key), now, k);
      return h("td", { class: "num rate", dataset: r.delta === undefined ? { rate: k } : { rate: k, delta: r.delta } }, r.text);
    });
  };
  const filter = h("input", { id: "q-filter", type: "search", value: st.name, "aria-describedby": "q-count" });
  let timer;
  filter.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { st.name = filter.value; st.page = 1; rerender("#q-filter"); }, 250);
  });
  const form = h("form", { class: "inline", role: "search", onsubmit: ev => { ev.preventDefault(); clearTimeout(timer); st.name = filter.value; st.page = 1; rerender("#q-filter"); } },
    h("label", { for: "q-filter" }, "Filter by name", filter));
  const sortHead = (key, label, cls = "") => {
    const active = st.sort === key;
    return h("th", { scope: "col", class: cls, "aria-sort": active ? (st.reverse ? "descending" : "ascending") : "none" },
      h("button", { type: "button", dataset: { sort: key }, onclick: () => {
        if (st.sort === key) st.reverse = !st.reverse; else { st.sort = key; st.reverse = false; }
        rerender(`th button[data-sort="${key}"]`);
      } }, label, active ? (st.reverse ? " ▼" : " ▲") : ""));
  };
  const rows = res.items.map(q => h("tr", { dataset: { queue: q.name, vhost: q.vhost } },
    h("td", { class: "wide" }, q.vhost),
    h("th", { scope: "row" }, h("a", { href: queueLink(q) }, q.name)),
    h("td", { class: "wide" }, q.type),
    h("td", { class: "features" }, features(q)),
    h("td", { class: "policy" }, q.policy || "", q.operator_policy ? [" ", badge("op", "Operator policy " + q.operator_policy, "policy")] : null),
    h("td", { class: "wide" }, q.state),
    h("td", { class: "num wide" }, fmt(q.messages_ready)),
    h("td", { class: "num wide" }, fmt(q.messages_unacknowledged)),
    h("td", { class: "num messages" }, fmt(q.messages)),
    rateCells(q)));
  const go = p => () => { st.page = p; rerender(p < st.page ? "#q-prev" : "#q-next"); };
  setPage("Queues", form,
    h("p", { id: "q-count" }, `${fmt(res.filtered_count)} of ${fmt(res.total_count)} queues` + (res.page_count > 1 ? `, page ${res.page} of ${res.page_count}` : "")),
    h("div", { class: "table-wrap" }, h("table", { id: "queues", dataset: prevAt === undefined ? { at } : { at, prevAt } },
      h("caption", { class: "visually-hidden" }, "Queues; column headers sort; rates are per second since the last refresh (every 5 s)"),
      h("thead", {}, h("tr", {},
        sortHead("vhost", "Virtual host", "wide"), sortHead("name", "Name"), sortHead("type", "Type", "wide"),
        h("th", { scope: "col" }, "Features"), sortHead("policy", "Policy"), sortHead("state", "State", "wide"),
        sortHead("messages_ready", "Ready", "num wide"), sortHead("messages_unacknowledged", "Unacked", "num wide"),
        sortHead("messages", "Total", "num"),
        QRATES.map(([k, label]) => h("th", { scope: "col", class: "num rate" }, label, h("span", { "aria-hidden": "true" }, " /s"), h("span", { class: "visually-hidden" }, " per second"))))),
      h("tbody", {}, rows))),
    res.page_count > 1 ? h("nav", { class: "pager", "aria-label": "Pages" },
      h("button", { type: "button", id: "q-prev", disabled: res.page <= 1, onclick: go(res.page - 1) }, "Previous"),
      h("span", {}, `Page ${res.page} of ${res.page_count}`),
      h("button", { type: "button", id: "q-next", disabled: res.page >= res.page_count, onclick: go(res.page + 1) }, "Next")) : null);
  // The list follows the queues every 5 s, not while a control in the
  // page has focus (a redraw would lose the user's place).
  every(5000, () => {
    const el = document.activeElement;
    if (el === main || !main.contains(el)) { queueListPolled = true; rerender(); }
  });
}

// rerender redraws the current page and puts focus back on the control
// (found by selector) that caused it, so keyboard users keep their place.
async function rerender(focusSel) {
  await render();
  const el = focusSel && main.querySelector(focusSel);
  if (el) {
    el.focus();
    if (el.setSelectionRange && el.value !== undefined) el.setSelectionRange(el.value.length, el.value.length);
  }
}

// ---- depth chart ----

const SVG = "http://www.w3.org/2000/svg";

// svg is h for SVG elements (attributes only; no event handlers).
function svg(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of kids.flat(Infinity)) if (c !== undefined && c !== null) el.append(c instanceof Node ? c : String(c));
  return el;
}

const CHART_WINDOW = 10 * 60 * 1000;

// depthHistory keeps each queue's samples ({at, ready, unacked}) of the
// last 10 minutes while the tab is open, so leaving the page and coming
// back keeps the chart.
const depthHistory = new Map();

function depthSample(q) {
  const key = q.vhost + "\n" + q.name, now = Date.now();
  const list = (depthHistory.get(key) || []).filter(s => now - s.at <= CHART_WINDOW);
  list.push({ at: now, ready: q.messages_ready ?? 0, unacked: q.messages_unacknowledged ?? 0 });
  depthHistory.set(key, list);
  return list;
}

// depthChart draws ready and unacked over the last 10 minutes as an inline
// SVG line chart, an image whose label gives the latest values (its
// legend is plain text next to it).
function depthChart(samples) {
  const W = 600, H = 170, L = 44, R = 8, T = 10, B = 22;
  const last = samples[samples.length - 1], now = last.at;
  const peak = Math.max(1, ...samples.map(s => Math.max(s.ready, s.unacked)));
  const x = at => L + (W - L - R) * (1 - (now - at) / CHART_WINDOW);
  const y = v => T + (H - T - B) * (1 - v / peak);
  const series = (key) => [
    svg("polyline", { class: "line " + key, points: samples.map(s => `${x(s.at).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ") }),
    svg("circle", { class: "dot " + key, cx: x(now).toFixed(1), cy: y(last[key]).toFixed(1), r: 3 })];
  return svg("svg", { id: "depth-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `Queue depth over the last 10 minutes: now ${last.ready} ready, ${last.unacked} unacked; peak ${peak}` },
    svg("line", { class: "axis", x1: L, y1: y(0), x2: W - R, y2: y(0) }),
    svg("line", { class: "grid", x1: L, y1: y(peak), x2: W - R, y2: y(peak) }),
    svg("text", { x: L - 6, y: y(peak) + 4, "text-anchor": "end" }, fmt(peak)),
    svg("text", { x: L - 6, y: y(0) + 4, "text-anchor": "end" }, "0"),
    svg("text", { x: L, y: H - 4 }, "10 min ago"),
    svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, "now"),
    series("ready"), series("unacked"));
}

function depthLegend() {
  return h("ul", { class: "legend" },
    h("li", {}, h("span", { class: "swatch ready", "aria-hidden": "true" }), "Ready"),
    h("li", {}, h("span", { class: "swatch unacked", "aria-hidden": "true" }), "Unacked (dashed)"));
}

// ---- one queue ----

function kvTable(obj, id) {
  const keys = Object.keys(obj || {});
  if (!keys.length) return h("p", { id }, "None");
  return h("table", { class: "kv", id }, h("tbody", {}, keys.sort().map(k =>
    h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, typeof obj[k] === "object" ? JSON.stringify(obj[k]) : String(obj[k]))))));
}

const DEATH_COLS = ["count", "reason", "queue", "exchange", "routing-keys", "time"];

function deathTable(deaths) {
  return h("table", { class: "x-death" },
    h("caption", {}, "x-death"),
    h("thead", {}, h("tr", {}, DEATH_COLS.map(c => h("th", { scope: "col" }, c)))),
    h("tbody", {}, deaths.map(d => h("tr", {}, DEATH_COLS.map(c => {
      let v = d[c];
      if (c === "time" && typeof v === "number") v = new Date(v * 1000).toISOString();
      return h("td", { dataset: { col: c } }, Array.isArray(v) ? v.join(", ") : (v ?? ""));
    })))));
}

function messageView(m, i) {
  const props = { ...(m.properties || {}) };
  const headers = { ...(props.headers || {}) };
  delete props.headers;
  const deaths = headers["x-death"];
  delete headers["x-death"];
  return h("article", { class: "message", "aria-label": `Message ${i + 1}` },
    h("h3", {}, `Message ${i + 1}`, m.seq !== undefined ? ` (seq ${m.seq})` : ""),
    h("p", {}, `Exchange “${m.exchange}”, routing key “${m.routing_key}”`, m.redelivered ? ", redelivered" : ""),
    Array.isArray(deaths) && deaths.length ? deathTable(deaths) : null,
    Object.keys(props).length ? [h("h4", {}, "Properties"), kvTable(props)] : null,
    Object.keys(headers).length ? [h("h4", {}, "Headers"), kvTable(headers)] : null,
    h("h4", {}, "Payload", m.payload_encoding === "base64" ? " (base64)" : ""),
    h("pre", { class: "payload" }, m.payload));
}

async function queuePage(vhost, name) {
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  const [q, bindings] = await Promise.all([api("GET", path), api("GET", path + "/bindings")]);
  let sample = queueSample(q, performance.now());
  const bindMsg = h("div", { id: "qbind-msg" });
  const chartWrap = h("div", { class: "chart" }, depthChart(depthSample(q)));
  const chartMsg = h("div");
  const chartBox = h("section", { "aria-labelledby": "depth-h" }, h("h2", { id: "depth-h" }, "Depth (last 10 minutes, every 5 s)"),
    chartWrap, depthLegend(), chartMsg);
  const peekBox = h("section", { "aria-labelledby": "peek-h", id: "peek" }, h("h2", { id: "peek-h" }, "Messages (peek: left in place)"));
  const list = h("div", { id: "peek-list" });
  let next = 0, nextPrio = 0, shown = 0;
  const more = h("button", { type: "button", id: "peek-more", hidden: true }, "Show more");
  const load = async () => {
    try {
      const p = await api("GET", `${path}/peek?count=20` + (next ? `&from=${next}&priority=${nextPrio}` : ""));
      if (!p.messages.length && !shown) list.append(h("p", {}, "No ready messages."));
      for (const m of p.messages) list.append(messageView(m, shown++));
      next = p.next;
      nextPrio = p.next_priority ?? 0;
      more.hidden = !next;
      announce(`${shown} messages shown`);
    } catch (e) { list.append(errorBox(e)); }
  };
  more.addEventListener("click", load);
  peekBox.append(list, more);
  setPage(`Queue ${name}`,
    h("p", {}, h("a", { href: "#/queues" }, "← Queues")),
    h("section", { "aria-labelledby": "det-h" }, h("h2", { id: "det-h" }, "Details"),
      h("table", { class: "kv", id: "queue-details" }, h("tbody", {},
        [["Virtual host", q.vhost], ["Type", q.type], ["Features", features(q)], ["State", q.state],
         ["Policy", q.policy || "none"], ["Operator policy", q.operator_policy || "none"],
         ["Messages", fmt(q.messages), "q-messages"], ["Ready", fmt(q.messages_ready), "q-ready"],
         ["Unacked", fmt(q.messages_unacknowledged), "q-unacked"], ["Consumers", fmt(q.consumers), "q-consumers"],
         ...QRATES.map(([k, label]) => [label + " (per second)", "—", "q-rate-" + k])]
          .map(([k, v, id]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", { id }, v)))))),
    retrySection(q),
    chartBox,
    h("section", { "aria-labelledby": "args-h" }, h("h2", { id: "args-h" }, "Arguments"), kvTable(q.arguments, "queue-arguments")),
    h("section", { "aria-labelledby": "pol-h" }, h("h2", { id: "pol-h" }, "Effective policy definition"), kvTable(q.effective_policy_definition, "queue-policy")),
    h("section", { "aria-labelledby": "qb-h" }, h("h2", { id: "qb-h" }, "Bindings"),
      bindingsTable("queue-bindings", bindings, bindMsg), bindForm("qbind-form", q.vhost, { queue: q.name }, bindMsg), bindMsg),
    redriveSection(q, () => refresh()),
    peekBox);
  // The chart and the counts follow the queue every 5 s while the page is
  // open (and at each step of a redrive's progress).
  const refresh = async () => {
    let now;
    try { now = await api("GET", path); } catch (e) { chartMsg.replaceChildren(errorBox(e)); return; }
    chartMsg.replaceChildren();
    chartWrap.replaceChildren(depthChart(depthSample(now)));
    for (const [id, v] of [["q-messages", now.messages], ["q-ready", now.messages_ready], ["q-unacked", now.messages_unacknowledged], ["q-consumers", now.consumers], ["q-delayed", now.messages_delayed]]) {
      const el = document.getElementById(id);
      if (el) el.textContent = fmt(v);
    }
    // Rates from the growth since the previous sample (the page's load
    // or last refresh); the samples' times are on the details table.
    const prev = sample;
    sample = queueSample(now, performance.now());
    for (const [k] of QRATES) {
      const el = document.getElementById("q-rate-" + k), r = queueRate(prev, sample, k);
      if (!el) continue;
      el.textContent = r.text;
      if (r.delta !== undefined) el.dataset.delta = r.delta;
    }
    const det = document.getElementById("queue-details");
    if (det) Object.assign(det.dataset, { prevAt: prev.at, at: sample.at });
  };
  every(5000, refresh);
  await load();
}

// ---- redrive ----

const DEATH_REASONS = [["", "any reason"], ["rejected", "rejected"], ["expired", "expired"], ["maxlen", "maxlen (length limit)"], ["delivery_limit", "delivery_limit"]];

// redriveSection is the queue page's "Redrive" button and its dialog: a
// form that starts a redrive task (POST .../redrive), then the task's live
// progress (GET /api/redrives/{id} every 500 ms), with Cancel. changed is
// called at each step, so the page's counts follow the moves.
function redriveSection(q, changed) {
  const dlg = h("dialog", { id: "redrive-dialog", "aria-labelledby": "rd-h" });
  const open = h("button", { type: "button", id: "redrive-open", onclick: () => { showForm(); dlg.showModal(); } }, "Redrive…");
  let timer = null;
  const stop = () => { if (timer) clearInterval(timer); timer = null; };
  dlg.addEventListener("close", () => { stop(); open.focus(); changed(); });
  const closeBtn = () => h("button", { type: "button", onclick: () => dlg.close() }, "Close");

  const showForm = () => {
    stop();
    const msg = h("div", { id: "rd-msg" });
    const xName = h("input", { id: "rd-exchange", disabled: true, autocomplete: "off" });
    const xKey = h("input", { id: "rd-key", disabled: true, autocomplete: "off" });
    const radio = (value, label, checked) => h("label", { class: "inline" },
      h("input", { type: "radio", name: "rd-to", id: `rd-to-${value}`, value, checked,
        onchange: () => { xName.disabled = xKey.disabled = value !== "exchange"; } }), " ", label);
    const reason = h("select", { id: "rd-reason" }, DEATH_REASONS.map(([v, l]) => h("option", { value: v }, l)));
    const source = h("input", { id: "rd-source", autocomplete: "off", placeholder: "any queue" });
    const age = h("input", { id: "rd-age", type: "number", min: 0, step: "any", placeholder: "any age", inputmode: "decimal" });
    const max = h("input", { id: "rd-max", type: "number", min: 1, step: 1, placeholder: "all", inputmode: "numeric" });
    const rate = h("input", { id: "rd-rate", type: "number", min: 0.1, step: "any", placeholder: "unlimited", inputmode: "decimal" });
    const form = h("form", { id: "redrive-form", class: "stack", onsubmit: async ev => {
      ev.preventDefault();
      const body = { to: form.querySelector('input[name="rd-to"]:checked').value };
      if (body.to === "exchange") { body.exchange = xName.value; body.routing_key = xKey.value; }
      if (reason.value) body.reason = reason.value;
      if (source.value) body.source_queue = source.value;
      if (age.value) body.min_age_ms = Math.round(Number(age.value) * 60000);
      if (max.value) body.max = Number(max.value);
      if (rate.value) body.rate = Number(rate.value);
      try {
        const task = await api("POST", `/queues/${enc(q.vhost)}/${enc(q.name)}/redrive`, body);
        announce(`Redrive task ${task.id} started`);
        showTask(task);
      } catch (e) { msg.replaceChildren(errorBox(e)); }
    } },
      h("fieldset", {}, h("legend", {}, "Send each message to"),
        radio("origin", "the queue it was dead-lettered from (its latest x-death)", true), h("br"),
        radio("exchange", "an exchange, with a routing key", false),
        h("div", { class: "row" }, h("label", { for: "rd-exchange" }, "Exchange (empty: the default exchange)", xName),
          h("label", { for: "rd-key" }, "Routing key", xKey))),
      h("label", { for: "rd-reason" }, "Only messages dead-lettered for", reason),
      h("div", { class: "row" }, h("label", { for: "rd-source" }, "Only dead-lettered from queue", source),
        h("label", { for: "rd-age" }, "Only dead-lettered at least (minutes) ago", age)),
      h("div", { class: "row" }, h("label", { for: "rd-max" }, "At most (messages)", max),
        h("label", { for: "rd-rate" }, "Rate (messages a second)", rate)),
      msg,
      h("div", {}, h("button", { type: "submit", class: "primary" }, "Start redrive"), " ", closeBtn()));
    dlg.replaceChildren(h("h2", { id: "rd-h" }, `Redrive from ${q.name}`),
      h("p", {}, "Each message moves in one atomic step: it is never lost or duplicated, across a crash too. Its x-death stays; x-redriven-count counts redrives."),
      form);
  };

  const showTask = task => {
    const bar = h("progress", { id: "rd-progress", max: 1, value: 0, "aria-labelledby": "rd-status" });
    const status = h("p", { id: "rd-status", role: "status", "aria-live": "polite" });
    const failures = h("div", { id: "rd-failures" });
    const msg = h("div");
    const cancel = h("button", { type: "button", id: "rd-cancel", onclick: async () => {
      try { await api("DELETE", `/redrives/${enc(task.id)}`); await step(); } catch (e) { msg.replaceChildren(errorBox(e)); }
    } }, "Cancel redrive");
    const again = h("button", { type: "button", hidden: true, onclick: showForm }, "New redrive");
    dlg.replaceChildren(h("h2", { id: "rd-h" }, `Redrive from ${q.name}`),
      h("p", {}, `Task ${task.id}: to ${task.to === "exchange" ? `exchange “${exchangeLabel(task.exchange === "amq.default" ? "" : task.exchange)}” with key “${task.routing_key}”` : "each message's origin queue"}` +
        (task.rate ? `, ${task.rate} a second` : "") + (task.max ? `, at most ${task.max}` : "") + (task.reason ? `, reason ${task.reason}` : "") +
        (task.source_queue ? `, from ${task.source_queue}` : "") + (task.min_age_ms ? `, at least ${task.min_age_ms / 60000} min old` : "")),
      bar, status, failures, msg, h("div", {}, cancel, " ", again, " ", closeBtn()));
    const show = t => {
      bar.max = Math.max(t.moved + t.remaining, t.moved + t.failed, 1);
      bar.value = t.moved + t.failed;
      status.dataset.state = t.state;
      status.textContent = `${t.state[0].toUpperCase()}${t.state.slice(1)}: moved ${fmt(t.moved)}, failed ${fmt(t.failed)}, remaining in ${q.name} ${fmt(t.remaining)}` +
        (t.error ? ` — ${t.error}` : "");
      if (t.failures?.length) failures.replaceChildren(failureTable(t));
      cancel.hidden = t.state !== "running";
      again.hidden = t.state === "running";
    };
    const step = async () => {
      try {
        const t = await api("GET", `/redrives/${enc(task.id)}`);
        show(t);
        changed();
        if (t.state !== "running") { stop(); announce(`Redrive ${t.state}: ${t.moved} moved, ${t.failed} failed`); }
      } catch (e) { stop(); msg.replaceChildren(errorBox(e)); }
    };
    show(task);
    stop();
    if (task.state === "running") timer = setInterval(step, 500); else step();
  };
  return h("section", { "aria-labelledby": "rd-sec-h" }, h("h2", { id: "rd-sec-h" }, "Redrive"),
    h("p", {}, "Move this queue's ready messages back to the queue each was dead-lettered from, or through an exchange."),
    open, dlg);
}

// failureTable lists a task's failures (the first 100, then more pages
// of them on request) and counts them by reason.
function failureTable(t) {
  const row = f => h("tr", {}, h("td", { class: "num" }, f.seq), h("td", {}, f.reason));
  const body = h("tbody", {}, t.failures.map(row));
  const msg = h("div");
  let next = t.failures.length < t.failed ? t.failures[t.failures.length - 1].seq + 1 : 0;
  const more = h("button", { type: "button", class: "more-failures", hidden: !next, onclick: async () => {
    try {
      const p = await api("GET", `/redrives/${enc(t.id)}/failures?count=1000&from=${next}`);
      body.append(...p.failures.map(row));
      next = p.next;
      more.hidden = !next;
      announce(`${body.childElementCount} failures shown`);
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  } }, "Show more failures");
  return h("div", {},
    h("h3", {}, "Not moved (left in the queue)"),
    h("ul", { class: "reasons" }, Object.entries(t.failure_reasons || {}).map(([r, n]) => h("li", {}, `${r}: ${fmt(n)}`))),
    h("div", { class: "table-wrap" }, h("table", { class: "failures" },
      h("thead", {}, h("tr", {}, colHead("Seq", "num"), colHead("Reason"))), body)),
    more, msg);
}

// redrivesPage lists every redrive task with its progress; running ones
// can be cancelled, ended ones forgotten. It refreshes every 2 s.
async function redrivesPage() {
  const tasks = await api("GET", "/redrives");
  const msg = h("div", { id: "redrives-msg" });
  const act = async (t, what) => {
    try { await api("DELETE", `/redrives/${enc(t.id)}` + (what === "forgotten" ? "?forget=true" : "")); announce(`Redrive task ${t.id} ${what}`); await rerender(); }
    catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  setPage("Redrives",
    h("p", {}, "Redrive tasks move dead letters back; start one from a queue's page."),
    msg,
    h("div", { class: "table-wrap" }, h("table", { id: "redrives" },
      h("thead", {}, h("tr", {}, colHead("Task"), colHead("Queue"), colHead("To", "wide"), colHead("State"),
        colHead("Moved", "num"), colHead("Failed", "num"), colHead("Remaining", "num"), colHead("Started", "wide"), actionsHead())),
      h("tbody", {}, tasks.length ? tasks.slice().reverse().map(t => h("tr", { dataset: { task: t.id, state: t.state } },
        h("th", { scope: "row" }, h("code", {}, t.id)),
        h("td", {}, h("a", { href: queueLink({ vhost: t.vhost, name: t.queue }) }, t.queue), t.vhost !== "/" ? h("small", {}, ` (${t.vhost})`) : null),
        h("td", { class: "wide" }, t.to === "exchange" ? `${t.exchange} / ${t.routing_key}` : "origin"),
        h("td", { class: "state" }, t.state, t.error ? h("small", {}, ` — ${t.error}`) : null),
        h("td", { class: "num moved" }, fmt(t.moved)), h("td", { class: "num failed" }, fmt(t.failed)),
        h("td", { class: "num remaining" }, fmt(t.remaining)),
        h("td", { class: "wide" }, new Date(t.created_at).toLocaleString()),
        h("td", {}, t.state === "running"
          ? h("button", { type: "button", "aria-label": `Cancel redrive task ${t.id}`, onclick: () => act(t, "cancelled") }, "Cancel")
          : h("button", { type: "button", "aria-label": `Forget redrive task ${t.id}`, onclick: () => act(t, "forgotten") }, "Forget"))))
        : h("tr", {}, h("td", { colspan: 9 }, "No redrive tasks."))))));
  every(2000, () => {
    const el = document.activeElement;
    if (el === main || !main.contains(el)) rerender();
  });
}

// ---- exchanges and bindings ----

// exchangeLink names the default exchange amq.default, as the API does.
function exchangeLink(vhost, name) { return `#/exchange/${enc(vhost)}/${enc(name || "amq.default")}`; }
function exchangeLabel(name) { return name || "(AMQP default)"; }

function exchangeFeatures(x) {
  const out = [];
  if (x.durable) out.push(badge("D", "Durable"));
  if (x.auto_delete) out.push(badge("AD", "Auto delete"));
  if (x.internal) out.push(badge("I", "Internal"));
  if (x.type === "x-delayed-message") {
    const n = x.messages_delayed ?? 0;
    out.push(badge(`delayed ${fmt(n)}`, `Delayed exchange (x-delayed-type ${(x.arguments || {})["x-delayed-type"] ?? "?"}): ${fmt(n)} messages scheduled`, "delayed"));
  }
  return out;
}

function colHead(label, cls) { return h("th", { scope: "col", class: cls }, label); }
function actionsHead() { return h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")); }

// bindingsTable lists bindings, each with an Unbind button except those of
// the default exchange (implicit, they cannot be removed). After an unbind
// the page is drawn again; a refusal shows in msg.
function bindingsTable(id, list, msg) {
  if (!list.length) return h("p", { id }, "No bindings.");
  const unbind = b => async () => {
    if (!confirm(`Delete the binding from ${exchangeLabel(b.source)} to ${b.destination} with routing key “${b.routing_key}”?`)) return;
    try {
      await api("DELETE", `/bindings/${enc(b.vhost)}/e/${enc(b.source)}/${b.destination_type === "queue" ? "q" : "e"}/${enc(b.destination)}/${enc(b.properties_key)}`);
      announce("Binding deleted");
      await rerender();
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  return h("div", { class: "table-wrap" }, h("table", { id },
    h("thead", {}, h("tr", {}, colHead("From"), colHead("To"), colHead("Routing key"), colHead("Arguments", "wide"), actionsHead())),
    h("tbody", {}, list.map(b => h("tr", { dataset: { source: b.source, destination: b.destination, key: b.routing_key } },
      h("td", {}, h("a", { href: exchangeLink(b.vhost, b.source) }, exchangeLabel(b.source))),
      h("td", {}, h("a", { href: b.destination_type === "queue" ? queueLink({ vhost: b.vhost, name: b.destination }) : exchangeLink(b.vhost, b.destination) }, b.destination),
        " ", h("small", {}, b.destination_type === "queue" ? "(queue)" : "(exchange)")),
      h("td", { class: "rk" }, b.routing_key),
      h("td", { class: "wide" }, Object.keys(b.arguments || {}).length ? JSON.stringify(b.arguments) : ""),
      h("td", {}, b.source ? h("button", { type: "button", class: "unbind", "aria-label": `Unbind ${exchangeLabel(b.source)} → ${b.destination} (${b.routing_key})`, onclick: unbind(b) }, "Unbind") : null))))));
}

// bindForm adds a binding: POST /api/bindings/{vhost}/e/{source}/{q|e}/{dest}.
// fixed gives what the page already knows (the source, or the queue).
function bindForm(id, vhost, fixed, msg) {
  const f = {
    source: h("input", { id: id + "-source", required: true }),
    kind: h("select", { id: id + "-kind" }, h("option", { value: "q" }, "queue"), h("option", { value: "e" }, "exchange")),
    dest: h("input", { id: id + "-dest", required: true }),
    key: h("input", { id: id + "-key" }),
  };
  return h("form", { class: "inline", id, "aria-label": "Add a binding", onsubmit: async ev => {
    ev.preventDefault();
    const source = fixed.source ?? f.source.value, kind = fixed.queue !== undefined ? "q" : f.kind.value, dest = fixed.queue ?? f.dest.value;
    try {
      await api("POST", `/bindings/${enc(vhost)}/e/${enc(source)}/${kind}/${enc(dest)}`, { routing_key: f.key.value, arguments: {} });
      announce("Binding added");
      await rerender();
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  } },
    fixed.source === undefined ? h("label", { for: f.source.id }, "From exchange", f.source) : null,
    fixed.queue === undefined ? [h("label", { for: f.kind.id }, "To", f.kind), h("label", { for: f.dest.id }, "Name", f.dest)] : null,
    h("label", { for: f.key.id }, "Routing key", f.key),
    h("button", { type: "submit", class: "primary" }, "Bind"));
}

const exchangeState = { name: "" };

async function exchangesPage() {
  const st = exchangeState;
  const params = new URLSearchParams({ sort: "name", columns: "name,vhost,type,durable,auto_delete,internal,policy,arguments,messages_delayed" });
  if (st.name) params.set("name", st.name);
  const xs = await api("GET", "/exchanges?" + params);
  const filter = h("input", { id: "x-filter", type: "search", value: st.name, "aria-describedby": "x-count" });
  let timer;
  const apply = () => { clearTimeout(timer); st.name = filter.value; rerender("#x-filter"); };
  filter.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(apply, 250); });
  setPage("Exchanges",
    h("form", { class: "inline", role: "search", onsubmit: ev => { ev.preventDefault(); apply(); } },
      h("label", { for: "x-filter" }, "Filter by name", filter)),
    h("p", { id: "x-count" }, `${fmt(xs.length)} exchanges`),
    h("div", { class: "table-wrap" }, h("table", { id: "exchanges" },
      h("thead", {}, h("tr", {}, colHead("Virtual host", "wide"), colHead("Name"), colHead("Type"), colHead("Features"), colHead("Policy", "wide"))),
      h("tbody", {}, xs.map(x => h("tr", { dataset: { exchange: x.name, vhost: x.vhost } },
        h("td", { class: "wide" }, x.vhost),
        h("th", { scope: "row" }, h("a", { href: exchangeLink(x.vhost, x.name) }, exchangeLabel(x.name))),
        h("td", { class: "type" }, x.type),
        h("td", { class: "features" }, exchangeFeatures(x)),
        h("td", { class: "wide" }, x.policy || "")))))));
}

async function exchangePage(vhost, name) {
  const x = await api("GET", `/exchanges/${enc(vhost)}/${enc(name)}`);
  const base = `/exchanges/${enc(vhost)}/${enc(name)}/bindings`;
  const [src, dst] = await Promise.all([api("GET", base + "/source"), api("GET", base + "/destination")]);
  const msg = h("div", { id: "bind-msg" });
  const sched = x.type === "x-delayed-message" ? scheduledSection(x) : null;
  setPage(`Exchange ${exchangeLabel(x.name)}`,
    h("p", {}, h("a", { href: "#/exchanges" }, "← Exchanges")),
    h("section", { "aria-labelledby": "det-h" }, h("h2", { id: "det-h" }, "Details"),
      h("table", { class: "kv", id: "exchange-details" }, h("tbody", {},
        [["Virtual host", x.vhost], ["Type", x.type], ["Features", exchangeFeatures(x)], ["Policy", x.policy || "none"]]
          .map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v)))))),
    sched,
    h("section", { "aria-labelledby": "args-h" }, h("h2", { id: "args-h" }, "Arguments"), kvTable(x.arguments, "exchange-arguments")),
    h("section", { "aria-labelledby": "src-h" }, h("h2", { id: "src-h" }, "Bindings from this exchange"),
      bindingsTable("bindings-source", src, msg),
      x.name ? bindForm("bind-form", x.vhost, { source: x.name }, msg) : null, msg),
    h("section", { "aria-labelledby": "dst-h" }, h("h2", { id: "dst-h" }, "Bindings to this exchange"),
      bindingsTable("bindings-destination", dst, msg)));
  if (sched) await sched.ready; // the page is drawn once its list is
}

// inText renders ms from now as "in 1 h 5 min", "in 12 s", or "due".
function inText(ms) {
  if (ms <= 0) return "due";
  const s = Math.round(ms / 1000);
  if (s < 60) return `in ${ms < 1000 ? (ms / 1000).toFixed(1) : s} s`;
  const m = Math.floor(s / 60), hh = Math.floor(m / 60), d = Math.floor(hh / 24);
  if (d) return `in ${d} d ${hh % 24} h`;
  if (hh) return `in ${hh} h ${m % 60} min`;
  return `in ${m} min ${s % 60} s`;
}

// scheduledSection is a delayed exchange's page's list of the messages it
// holds, in due-time order, 50 at a time (GET .../scheduled), each with a
// Cancel button, and a form that cancels every message matching its
// filters (POST .../scheduled/cancel); both ask for confirmation, then
// draw the list again.
function scheduledSection(x) {
  const path = `/exchanges/${enc(x.vhost)}/${enc(x.name)}/scheduled`;
  const count = h("p", { id: "sched-count" });
  const msg = h("div", { id: "sched-msg" });
  const body = h("tbody");
  const table = h("div", { class: "table-wrap" }, h("table", { id: "scheduled" },
    h("caption", { class: "visually-hidden" }, "Scheduled messages, soonest first"),
    h("thead", {}, h("tr", {}, colHead("Due"), colHead("In"), colHead("Routing key"), colHead("Size", "num"), colHead("Id", "wide"), actionsHead())),
    body));
  const empty = h("p", { id: "sched-empty", hidden: true }, "No scheduled messages.");
  const more = h("button", { type: "button", id: "sched-more", hidden: true }, "Show more");
  let next = "";
  const load = async (reset) => {
    try {
      if (reset) { next = ""; body.replaceChildren(); }
      const p = await api("GET", `${path}?count=50` + (next ? `&after=${enc(next)}` : ""));
      count.textContent = `${fmt(p.messages_delayed)} messages scheduled`;
      for (const m of p.messages) body.append(scheduledRow(m));
      next = p.next;
      more.hidden = !next;
      empty.hidden = body.children.length > 0;
      table.hidden = !empty.hidden;
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  const cancel = async (what, req) => {
    if (!confirm(what)) return;
    try {
      const r = await req();
      msg.replaceChildren(h("p", { class: "ok", role: "status" }, `Cancelled ${fmt(r.cancelled)} scheduled message${r.cancelled === 1 ? "" : "s"}.`));
      announce(`Cancelled ${r.cancelled}`);
    } catch (e) { msg.replaceChildren(errorBox(e)); }
    await load(true);
  };
  const scheduledRow = m => h("tr", { dataset: { id: m.id, key: m.routing_key } },
    h("td", {}, h("time", { datetime: m.due }, m.due.replace("T", " ").replace("Z", " UTC"))),
    h("td", {}, inText(m.due_in_ms)),
    h("td", { class: "rk" }, m.routing_key),
    h("td", { class: "num" }, bytes(m.payload_bytes)),
    h("td", { class: "wide" }, String(m.id)),
    h("td", {}, h("button", { type: "button", class: "cancel-one", "aria-label": `Cancel message ${m.id} due ${m.due}`,
      onclick: () => cancel(`Cancel the message due ${m.due} (routing key “${m.routing_key}”)? It will not be delivered.`,
        () => api("DELETE", `${path}/${m.id}`)) }, "Cancel")));
  const f = {
    key: h("input", { id: "sc-key", autocomplete: "off" }),
    hname: h("input", { id: "sc-hname", autocomplete: "off" }),
    hvalue: h("input", { id: "sc-hvalue", autocomplete: "off" }),
    before: h("input", { id: "sc-before", type: "datetime-local", step: "1" }),
  };
  const form = h("form", { class: "inline", id: "sched-cancel-form", "aria-label": "Cancel scheduled messages by filter", onsubmit: ev => {
    ev.preventDefault();
    const req = {}, parts = [];
    if (f.key.value) { req.routing_key = f.key.value; parts.push(`routing key “${f.key.value}”`); }
    if (f.hname.value) { req.headers = { [f.hname.value]: f.hvalue.value }; parts.push(`header ${f.hname.value} = “${f.hvalue.value}”`); }
    if (f.before.value) { const t = new Date(f.before.value); req.due_before = t.toISOString(); parts.push(`due before ${t.toISOString()}`); }
    if (!parts.length) req.all = true;
    cancel(parts.length ? `Cancel every scheduled message with ${parts.join(", ")}? They will not be delivered.`
      : `Cancel ALL messages scheduled on ${x.name}? They will not be delivered.`, () => api("POST", path + "/cancel", req));
  } },
    h("label", { for: f.key.id }, "Routing key", f.key),
    h("label", { for: f.hname.id }, "Header", f.hname),
    h("label", { for: f.hvalue.id }, "Header value", f.hvalue),
    h("label", { for: f.before.id }, "Due before (local time)", f.before),
    h("button", { type: "submit", class: "danger" }, "Cancel matching…"));
  more.addEventListener("click", () => load(false));
  const section = h("section", { "aria-labelledby": "sched-h", id: "sched" }, h("h2", { id: "sched-h" }, "Scheduled"),
    count, table, empty, more,
    h("h3", {}, "Cancel by filter"), h("p", { class: "hint" }, "Every scheduled message matching all the filters given is cancelled; with none, all of them."),
    form, msg);
  section.ready = load(true);
  return section;
}

// ---- policies ----

async function policiesPage() {
  const [pols, vhosts] = await Promise.all([api("GET", "/policies"), api("GET", "/vhosts?columns=name").catch(() => [{ name: "/" }])]);
  const msg = h("div", { id: "policy-msg" });
  const rows = pols.map(p => h("tr", { dataset: { policy: p.name, vhost: p.vhost } },
    h("td", { class: "wide" }, p.vhost), h("th", { scope: "row" }, p.name), h("td", {}, p.pattern),
    h("td", { class: "wide" }, p["apply-to"]), h("td", {}, h("pre", {}, JSON.stringify(p.definition))), h("td", { class: "num" }, p.priority),
    h("td", { class: "actions" }, h("button", { type: "button", class: "edit", "aria-label": `Edit policy ${p.name}`, onclick: () => edit(p) }, "Edit"), " ",
      h("button", { type: "button", "aria-label": `Delete policy ${p.name}`, onclick: async () => {
      if (!confirm(`Delete policy ${p.name}?`)) return;
      try {
        await api("DELETE", `/policies/${enc(p.vhost)}/${enc(p.name)}`);
        announce(`Policy ${p.name} deleted`);
        await rerender();
      } catch (e) { msg.replaceChildren(errorBox(e)); }
    } }, "Delete"))));
  const f = {
    vhost: h("select", { id: "p-vhost" }, vhosts.map(v => h("option", { value: v.name }, v.name))),
    name: h("input", { id: "p-name", required: true }),
    pattern: h("input", { id: "p-pattern", required: true, placeholder: "^orders\\." }),
    applyTo: h("select", { id: "p-apply" }, ["all", "queues", "exchanges"].map(v => h("option", { value: v }, v))),
    priority: h("input", { id: "p-priority", type: "number", value: "0" }),
    definition: h("textarea", { id: "p-definition", rows: 4, required: true, placeholder: '{"dead-letter-exchange": "dlx"}', "aria-describedby": "p-def-help" }),
  };
  const form = h("form", { class: "stack", id: "policy-form", onsubmit: async ev => {
    ev.preventDefault();
    let def;
    try { def = JSON.parse(f.definition.value); } catch (e) { msg.replaceChildren(errorBox("Definition is not valid JSON: " + e.message)); f.definition.focus(); return; }
    try {
      await api("PUT", `/policies/${enc(f.vhost.value)}/${enc(f.name.value)}`,
        { pattern: f.pattern.value, "apply-to": f.applyTo.value, priority: Number(f.priority.value) || 0, definition: def });
      announce(`Policy ${f.name.value} saved`);
      await rerender();
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  } },
    h("label", { for: "p-vhost" }, "Virtual host", f.vhost),
    h("label", { for: "p-name" }, "Name", f.name),
    h("label", { for: "p-pattern" }, "Pattern (regular expression)", f.pattern),
    h("label", { for: "p-apply" }, "Apply to", f.applyTo),
    h("label", { for: "p-priority" }, "Priority", f.priority),
    h("label", { for: "p-definition" }, "Definition (JSON object)", f.definition),
    h("small", { id: "p-def-help" }, "e.g. {\"dead-letter-exchange\": \"dlx\", \"message-ttl\": 60000}"),
    msg,
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Add / update policy")));
  // edit fills the form with policy p (saving puts it under the same
  // name, which replaces it) and moves focus there.
  const edit = p => {
    if (![...f.vhost.options].some(o => o.value === p.vhost)) f.vhost.append(h("option", { value: p.vhost }, p.vhost));
    f.vhost.value = p.vhost;
    f.name.value = p.name;
    f.pattern.value = p.pattern;
    f.applyTo.value = p["apply-to"];
    f.priority.value = String(p.priority ?? 0);
    f.definition.value = JSON.stringify(p.definition, null, 2);
    msg.replaceChildren();
    f.name.focus();
    announce(`Editing policy ${p.name}`);
  };
  setPage("Policies",
    h("div", { class: "table-wrap" }, h("table", { id: "policies" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "wide" }, "Virtual host"), h("th", { scope: "col" }, "Name"),
        h("th", { scope: "col" }, "Pattern"), h("th", { scope: "col", class: "wide" }, "Apply to"), h("th", { scope: "col" }, "Definition"),
        h("th", { scope: "col", class: "num" }, "Priority"), h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7 }, "No policies."))))),
    h("section", { "aria-labelledby": "add-h" }, h("h2", { id: "add-h" }, "Add or update a policy"), form));
}

// ---- users and permissions ----

// usersPage lists users and permissions (administrator only: others see
// the API's refusal) with forms to add a user, set a permission, and
// buttons to delete and clear. Every refusal shows the API's reason.
async function usersPage() {
  const [users, perms, vhosts, topicPerms] = await Promise.all([api("GET", "/users"), api("GET", "/permissions"), api("GET", "/vhosts?columns=name"),
    api("GET", "/topic-permissions").catch(e => e)]);
  const userMsg = h("div", { id: "user-msg" }), permMsg = h("div", { id: "perm-msg" }), topicMsg = h("div", { id: "topic-msg" });
  const act = (msg, what, fn) => async () => {
    try { await fn(); announce(what); await rerender(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  const uf = {
    name: h("input", { id: "u-name", required: true, autocomplete: "off" }),
    password: h("input", { id: "u-password", type: "password", autocomplete: "new-password" }),
    tags: h("input", { id: "u-tags", placeholder: "administrator, monitoring", "aria-describedby": "u-tags-help" }),
  };
  const userForm = h("form", { class: "stack", id: "user-form", onsubmit: ev => {
    ev.preventDefault();
    const body = { tags: uf.tags.value.split(",").map(s => s.trim()).filter(Boolean).join(",") };
    if (uf.password.value) body.password = uf.password.value;
    act(userMsg, `User ${uf.name.value} saved`, () => api("PUT", `/users/${enc(uf.name.value)}`, body))();
  } },
    h("label", { for: "u-name" }, "Username", uf.name),
    h("label", { for: "u-password" }, "Password (empty: no password login)", uf.password),
    h("label", { for: "u-tags" }, "Tags", uf.tags),
    h("small", { id: "u-tags-help" }, "Comma-separated: administrator, monitoring, policymaker, management"),
    userMsg,
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Add / update user")));
  const pf = {
    user: h("select", { id: "perm-user" }, users.map(u => h("option", { value: u.name }, u.name))),
    vhost: h("select", { id: "perm-vhost" }, vhosts.map(v => h("option", { value: v.name }, v.name))),
    configure: h("input", { id: "perm-configure", value: ".*" }),
    write: h("input", { id: "perm-write", value: ".*" }),
    read: h("input", { id: "perm-read", value: ".*" }),
  };
  const permForm = h("form", { class: "inline", id: "perm-form", onsubmit: ev => {
    ev.preventDefault();
    act(permMsg, `Permissions of ${pf.user.value} in ${pf.vhost.value} set`, () => api("PUT", `/permissions/${enc(pf.vhost.value)}/${enc(pf.user.value)}`,
      { configure: pf.configure.value, write: pf.write.value, read: pf.read.value }))();
  } },
    h("label", { for: "perm-user" }, "User", pf.user), h("label", { for: "perm-vhost" }, "Virtual host", pf.vhost),
    h("label", { for: "perm-configure" }, "Configure", pf.configure), h("label", { for: "perm-write" }, "Write", pf.write),
    h("label", { for: "perm-read" }, "Read", pf.read),
    h("button", { type: "submit", class: "primary" }, "Set permission"));
  const tf = {
    user: h("select", { id: "tp-user" }, users.map(u => h("option", { value: u.name }, u.name))),
    vhost: h("select", { id: "tp-vhost" }, vhosts.map(v => h("option", { value: v.name }, v.name))),
    exchange: h("input", { id: "tp-exchange", value: "amq.topic", required: true }),
    write: h("input", { id: "tp-write", value: ".*" }),
    read: h("input", { id: "tp-read", value: ".*" }),
  };
  const topicForm = h("form", { class: "inline", id: "tp-form", "aria-label": "Set a topic permission", onsubmit: ev => {
    ev.preventDefault();
    act(topicMsg, `Topic permission of ${tf.user.value} on ${tf.exchange.value} in ${tf.vhost.value} set`, () => api("PUT", `/topic-permissions/${enc(tf.vhost.value)}/${enc(tf.user.value)}`,
      { exchange: tf.exchange.value, write: tf.write.value, read: tf.read.value }))();
  } },
    h("label", { for: "tp-user" }, "User", tf.user), h("label", { for: "tp-vhost" }, "Virtual host", tf.vhost),
    h("label", { for: "tp-exchange" }, "Topic exchange", tf.exchange), h("label", { for: "tp-write" }, "Write", tf.write),
    h("label", { for: "tp-read" }, "Read", tf.read),
    h("button", { type: "submit", class: "primary" }, "Set topic permission"));
  const me = sessionStorage.getItem(USER);
  setPage("Users and permissions",
    h("section", { "aria-labelledby": "users-h" }, h("h2", { id: "users-h" }, "Users"),
      h("div", { class: "table-wrap" }, h("table", { id: "users" },
        h("thead", {}, h("tr", {}, colHead("Name"), colHead("Tags"), actionsHead())),
        h("tbody", {}, users.map(u => h("tr", { dataset: { user: u.name } },
          h("th", { scope: "row" }, u.name),
          h("td", { class: "tags" }, (u.tags || []).join(", ")),
          h("td", {}, u.name === me ? h("small", {}, "(you)") : h("button", { type: "button", class: "delete", "aria-label": `Delete user ${u.name}`,
            onclick: () => confirm(`Delete user ${u.name}?`) && act(userMsg, `User ${u.name} deleted`, () => api("DELETE", `/users/${enc(u.name)}`))() }, "Delete"))))))),
      h("h3", {}, "Add or update a user"), userForm),
    h("section", { "aria-labelledby": "perms-h" }, h("h2", { id: "perms-h" }, "Permissions"),
      h("div", { class: "table-wrap" }, h("table", { id: "permissions" },
        h("thead", {}, h("tr", {}, colHead("User"), colHead("Virtual host"), colHead("Configure"), colHead("Write"), colHead("Read"), actionsHead())),
        h("tbody", {}, perms.length ? perms.map(p => h("tr", { dataset: { user: p.user, vhost: p.vhost } },
          h("th", { scope: "row" }, p.user), h("td", {}, p.vhost),
          h("td", { class: "configure" }, h("code", {}, p.configure)), h("td", { class: "write" }, h("code", {}, p.write)), h("td", { class: "read" }, h("code", {}, p.read)),
          h("td", {}, h("button", { type: "button", class: "clear", "aria-label": `Clear permissions of ${p.user} in ${p.vhost}`,
            onclick: () => confirm(`Clear the permissions of ${p.user} in ${p.vhost}?`) && act(permMsg, `Permissions of ${p.user} in ${p.vhost} cleared`,
              () => api("DELETE", `/permissions/${enc(p.vhost)}/${enc(p.user)}`))() }, "Clear")))) : h("tr", {}, h("td", { colspan: 6 }, "No permissions."))))),
      h("h3", {}, "Set a permission"), permForm, permMsg),
    h("section", { "aria-labelledby": "topic-h" }, h("h2", { id: "topic-h" }, "Topic permissions"),
      h("p", { class: "hint" }, "Patterns the routing keys a user publishes to (write) and binds with (read) on a topic exchange must match; {username} and {vhost} stand for the connection's user and virtual host."),
      Array.isArray(topicPerms) ? h("div", { class: "table-wrap" }, h("table", { id: "topic-permissions" },
        h("thead", {}, h("tr", {}, colHead("User"), colHead("Virtual host"), colHead("Exchange"), colHead("Write"), colHead("Read"), actionsHead())),
        h("tbody", {}, topicPerms.length ? topicPerms.map(p => h("tr", { dataset: { user: p.user, vhost: p.vhost, exchange: p.exchange } },
          h("th", { scope: "row" }, p.user), h("td", {}, p.vhost), h("td", { class: "exchange" }, p.exchange),
          h("td", { class: "write" }, h("code", {}, p.write)), h("td", { class: "read" }, h("code", {}, p.read)),
          h("td", {}, h("button", { type: "button", class: "clear", "aria-label": `Clear the topic permission of ${p.user} in ${p.vhost} on ${p.exchange}`,
            onclick: () => confirm(`Clear the topic permission of ${p.user} in ${p.vhost} on exchange ${p.exchange}?`) && act(topicMsg, `Topic permission of ${p.user} in ${p.vhost} on ${p.exchange} cleared`,
              () => api("DELETE", `/topic-permissions/${enc(p.vhost)}/${enc(p.user)}/${enc(p.exchange)}`))() }, "Clear")))) : h("tr", {}, h("td", { colspan: 6 }, "No topic permissions."))))) : errorBox(topicPerms),
      h("h3", {}, "Set a topic permission"), topicForm, topicMsg));
}

// ---- shovels ----

// myTags are the logged-in user's tags: pages leave out what the user may
// not ask for (a refusal is a 401, which logs out).
async function myTags() { return (await api("GET", "/whoami")).tags || []; }

// shovelEnd describes one side of a shovel (a /api/shovels row's src_ or
// dest_ fields): its URI, then its queue, or its exchange and routing key.
function shovelEnd(s, side) {
  const q = s[side + "_queue"], x = s[side + "_exchange"], k = s[side + "_exchange_key"];
  const what = q ? `queue ${q}` : x !== undefined && x !== null ? `exchange ${exchangeLabel(x)}` + (k ? `, key ${k}` : "")
    : side === "dest" ? "routing key kept" : "";
  return [h("code", { class: "uri" }, s[side + "_uri"] ?? ""), h("br"), h("span", { class: "what" }, what)];
}

// uriValue is a URI field's value: one URI, or a list when the field
// holds several (separated by spaces or commas), as src-uri and dest-uri
// take either.
function uriValue(text) {
  const list = text.split(/[\s,]+/).filter(Boolean);
  return list.length === 1 ? list[0] : list;
}

// shovelsPage lists the shovels (GET /api/shovels: state, why it
// stopped, where from and to, messages forwarded), each with Restart and
// Delete (both asking first), and, to policymakers, a form that adds a
// dynamic shovel (PUT /api/parameters/shovel/{vhost}/{name}). Every
// refusal shows the API's reason. The list follows the shovels every 5 s
// while no control of the page has focus.
async function shovelsPage() {
  const tags = await myTags();
  const maySet = tags.includes("administrator") || tags.includes("policymaker");
  const mayList = tags.includes("administrator") || tags.includes("monitoring");
  const [list, vhosts] = await Promise.all([mayList ? api("GET", "/shovels").catch(e => e) : new Error("it needs the monitoring tag"),
    api("GET", "/vhosts?columns=name").catch(() => [{ name: "/" }])]);
  const msg = h("div", { id: "shovel-msg" });
  const act = (what, req) => async () => {
    try { await req(); announce(what); await rerender(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  const rows = Array.isArray(list) ? list.map(s => h("tr", { dataset: { shovel: s.name, vhost: s.vhost, state: s.state } },
    h("td", { class: "wide" }, s.vhost),
    h("th", { scope: "row" }, s.name),
    h("td", { class: "state" }, h("span", { class: s.state === "running" ? "ok" : s.state === "terminated" ? "down" : "" }, s.state),
      s.reason ? [h("br"), h("small", { class: "reason" }, s.reason)] : null),
    h("td", { class: "src" }, shovelEnd(s, "src")),
    h("td", { class: "dest" }, shovelEnd(s, "dest")),
    h("td", { class: "num forwarded" }, fmt(s.messages_forwarded ?? "")),
    h("td", { class: "wide blocked" }, s.blocked_status ?? ""),
    h("td", { class: "wide since" }, s.timestamp ?? ""),
    h("td", { class: "actions" },
      h("button", { type: "button", class: "restart", "aria-label": `Restart shovel ${s.name} in ${s.vhost}`,
        onclick: () => confirm(`Restart shovel ${s.name} in ${s.vhost}? Its connections are closed and opened again.`) &&
          act(`Shovel ${s.name} restarted`, () => api("DELETE", `/shovels/vhost/${enc(s.vhost)}/${enc(s.name)}/restart`))() }, "Restart"), " ",
      maySet ? h("button", { type: "button", class: "delete danger", "aria-label": `Delete shovel ${s.name} in ${s.vhost}`,
        onclick: () => confirm(`Delete shovel ${s.name} in ${s.vhost}? It stops; messages it has not yet settled stay on the source.`) &&
          act(`Shovel ${s.name} deleted`, () => api("DELETE", `/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`))() }, "Delete") : null))) : [];
  setPage("Shovels",
    h("p", { class: "hint" }, "Dynamic shovels move messages from a queue or exchange to another, on this broker or another one (RabbitMQ's shovel parameter)."),
    Array.isArray(list) ? h("div", { class: "table-wrap" }, h("table", { id: "shovels" },
      h("thead", {}, h("tr", {}, colHead("Virtual host", "wide"), colHead("Name"), colHead("State"), colHead("Source"), colHead("Destination"),
        colHead("Forwarded", "num"), colHead("Blocked status", "wide"), colHead("Since", "wide"), actionsHead())),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9 }, "No shovels."))))) : h("p", { class: "error", role: "alert", id: "shovels-error" },
      `The shovels' status cannot be read: ${list instanceof APIError ? list.reason : String(list)}`),
    msg,
    maySet ? h("section", { "aria-labelledby": "add-shovel-h" }, h("h2", { id: "add-shovel-h" }, "Add a shovel"), shovelForm(vhosts, msg)) : null);
  every(5000, () => {
    const el = document.activeElement;
    if (el === main || !main.contains(el)) rerender();
  });
}

// shovelForm puts a shovel parameter: the source (URI, then a queue or an
// exchange and routing key), the destination (the same), ack mode,
// delete-after, prefetch and reconnect delay; fields left empty are left
// to the shovel's defaults.
function shovelForm(vhosts, msg) {
  const input = (id, attrs = {}) => h("input", { id, autocomplete: "off", ...attrs });
  const f = {
    vhost: h("select", { id: "sh-vhost" }, vhosts.map(v => h("option", { value: v.name }, v.name))),
    name: input("sh-name", { required: true }),
    srcUri: input("sh-src-uri", { value: "amqp://", required: true, "aria-describedby": "sh-uri-help" }),
    srcType: h("select", { id: "sh-src-type" }, h("option", { value: "queue" }, "Queue"), h("option", { value: "exchange" }, "Exchange")),
    srcQueue: input("sh-src-queue"), srcExchange: input("sh-src-exchange"), srcKey: input("sh-src-key"),
    destUri: input("sh-dest-uri", { value: "amqp://", required: true, "aria-describedby": "sh-uri-help" }),
    destType: h("select", { id: "sh-dest-type" }, h("option", { value: "queue" }, "Queue"), h("option", { value: "exchange" }, "Exchange")),
    destQueue: input("sh-dest-queue"), destExchange: input("sh-dest-exchange"), destKey: input("sh-dest-key"),
    ackMode: h("select", { id: "sh-ack-mode" }, [["on-confirm", "On confirm (no loss)"], ["on-publish", "On publish"], ["no-ack", "No ack (may lose messages)"]]
      .map(([v, l]) => h("option", { value: v }, l))),
    deleteAfter: h("select", { id: "sh-delete-after" }, [["never", "Never"], ["queue-length", "After the messages in the queue at start"], ["count", "After a number of messages"]]
      .map(([v, l]) => h("option", { value: v }, l))),
    deleteCount: input("sh-delete-count", { type: "number", min: 0, step: 1 }),
    prefetch: input("sh-prefetch", { type: "number", min: 1, step: 1, placeholder: "1000" }),
    reconnect: input("sh-reconnect", { type: "number", min: 0, step: 1, placeholder: "5" }),
  };
  const lbl = (el, text) => h("label", { for: el.id }, text, el);
  const srcQ = lbl(f.srcQueue, "Source queue"), srcX = h("div", { class: "row" }, lbl(f.srcExchange, "Source exchange"), lbl(f.srcKey, "Routing key"));
  const destQ = lbl(f.destQueue, "Destination queue"), destX = h("div", { class: "row" }, lbl(f.destExchange, "Destination exchange"), lbl(f.destKey, "Routing key (empty: the message's)"));
  const count = lbl(f.deleteCount, "Messages to move");
  const sync = () => {
    srcQ.hidden = f.srcType.value !== "queue"; srcX.hidden = !srcQ.hidden;
    destQ.hidden = f.destType.value !== "queue"; destX.hidden = !destQ.hidden;
    count.hidden = f.deleteAfter.value !== "count";
  };
  for (const sel of [f.srcType, f.destType, f.deleteAfter]) sel.addEventListener("change", sync);
  sync();
  const form = h("form", { class: "stack", id: "shovel-form", onsubmit: async ev => {
    ev.preventDefault();
    const v = { "src-protocol": "amqp091", "src-uri": uriValue(f.srcUri.value), "dest-protocol": "amqp091", "dest-uri": uriValue(f.destUri.value) };
    const need = (el, what) => { if (el.value) return true; msg.replaceChildren(errorBox(`${what} is required.`)); el.focus(); return false; };
    if (f.srcType.value === "queue") { if (!need(f.srcQueue, "The source queue")) return; v["src-queue"] = f.srcQueue.value; }
    else {
      if (!need(f.srcExchange, "The source exchange")) return;
      v["src-exchange"] = f.srcExchange.value;
      if (f.srcKey.value) v["src-exchange-key"] = f.srcKey.value;
    }
    if (f.destType.value === "queue") { if (!need(f.destQueue, "The destination queue")) return; v["dest-queue"] = f.destQueue.value; }
    else {
      if (!need(f.destExchange, "The destination exchange")) return;
      v["dest-exchange"] = f.destExchange.value;
      if (f.destKey.value) v["dest-exchange-key"] = f.destKey.value;
    }
    v["ack-mode"] = f.ackMode.value;
    if (f.deleteAfter.value === "count") { if (!need(f.deleteCount, "The number of messages to move")) return; v["src-delete-after"] = Number(f.deleteCount.value); }
    else v["src-delete-after"] = f.deleteAfter.value;
    if (f.prefetch.value) v["src-prefetch-count"] = Number(f.prefetch.value);
    if (f.reconnect.value) v["reconnect-delay"] = Number(f.reconnect.value);
    try {
      await api("PUT", `/parameters/shovel/${enc(f.vhost.value)}/${enc(f.name.value)}`, { value: v });
      announce(`Shovel ${f.name.value} added`);
      await rerender();
    } catch (e) { msg.replaceChildren(errorBox(e)); }
  } },
    h("div", { class: "row" }, lbl(f.vhost, "Virtual host"), lbl(f.name, "Name")),
    h("div", { class: "row sides" },
      h("fieldset", {}, h("legend", {}, "Source"), lbl(f.srcUri, "URI"), lbl(f.srcType, "From"), srcQ, srcX,
        lbl(f.prefetch, "Prefetch count (empty: 1000)"), lbl(f.deleteAfter, "Delete the shovel"), count),
      h("fieldset", {}, h("legend", {}, "Destination"), lbl(f.destUri, "URI"), lbl(f.destType, "To"), destQ, destX)),
    h("small", { id: "sh-uri-help" }, "amqp://user:password@host:5672/vhost, several separated by spaces to fail over; amqp:// alone is this broker's virtual host /, amqp:///name another of its virtual hosts."),
    h("div", { class: "row" }, lbl(f.ackMode, "Acknowledgement mode"), lbl(f.reconnect, "Reconnect delay, seconds (empty: 5; 0: never)")),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Add shovel")));
  return form;
}

// ---- limits ----

// LIMITS are the limits RabbitMQ sets per virtual host and per user.
const VHOST_LIMITS = ["max-connections", "max-queues"], USER_LIMITS = ["max-connections", "max-channels"];

// limitRows flattens GET /api/vhost-limits or /api/user-limits ([{vhost
// or user, value: {limit: n}}]) into [owner, limit, n] rows.
function limitRows(list, key) {
  return list.flatMap(l => Object.entries(l.value || {}).map(([k, v]) => [l[key], k, v])).sort((a, b) => a[0].localeCompare(b[0]) || a[1].localeCompare(b[1]));
}

// limitSection is one table of limits with, when o.editable, a Clear
// button each (asking first) and a form that sets one (PUT
// .../{owner}/{limit} {"value": n}).
function limitSection(o) {
  const msg = h("div", { id: o.id + "-msg" });
  const f = {
    owner: h("select", { id: o.id + "-owner" }, o.owners.map(n => h("option", { value: n }, n))),
    name: h("select", { id: o.id + "-name" }, o.limits.map(n => h("option", { value: n }, n))),
    value: h("input", { id: o.id + "-value", type: "number", step: 1, required: true, "aria-describedby": o.id + "-help" }),
  };
  const act = (what, req) => async () => {
    try { await req(); announce(what); await rerender(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  };
  const rows = Array.isArray(o.list) ? limitRows(o.list, o.key) : [];
  return h("section", { "aria-labelledby": o.id + "-h" }, h("h2", { id: o.id + "-h" }, o.title),
    Array.isArray(o.list) ? h("div", { class: "table-wrap" }, h("table", { id: o.id },
      h("thead", {}, h("tr", {}, colHead(o.ownerLabel), colHead("Limit"), colHead("Value", "num"), o.editable ? actionsHead() : null)),
      h("tbody", {}, rows.length ? rows.map(([owner, name, v]) => h("tr", { dataset: { [o.key]: owner, limit: name } },
        h("th", { scope: "row" }, owner), h("td", {}, name), h("td", { class: "num value" }, fmt(v)),
        o.editable ? h("td", {}, h("button", { type: "button", class: "clear", "aria-label": `Clear ${name} of ${owner}`,
          onclick: () => confirm(`Clear the ${name} limit of ${owner}?`) &&
            act(`Limit ${name} of ${owner} cleared`, () => api("DELETE", `${o.path}/${enc(owner)}/${enc(name)}`))() }, "Clear")) : null))
        : h("tr", {}, h("td", { colspan: o.editable ? 4 : 3 }, "No limits."))))) : errorBox(o.list),
    o.editable ? h("form", { class: "inline", id: o.id + "-form", "aria-label": `Set a limit of a ${o.ownerLabel.toLowerCase()}`, onsubmit: ev => {
      ev.preventDefault();
      act(`Limit ${f.name.value} of ${f.owner.value} set to ${f.value.value}`,
        () => api("PUT", `${o.path}/${enc(f.owner.value)}/${enc(f.name.value)}`, { value: Number(f.value.value) }))();
    } },
      h("label", { for: f.owner.id }, o.ownerLabel, f.owner), h("label", { for: f.name.id }, "Limit", f.name),
      h("label", { for: f.value.id }, "Value", f.value),
      h("button", { type: "submit", class: "primary" }, "Set limit")) : null,
    h("p", { class: "hint", id: o.id + "-help" }, o.help),
    msg);
}

// limitsPage shows the virtual hosts' limits and, to administrators, the
// users' (RabbitMQ's Admin → Limits); administrators, who alone may
// change them, get the forms and Clear buttons (another user's change
// would be refused with a 401, which logs out).
async function limitsPage() {
  const admin = (await myTags()).includes("administrator");
  const [vl, vhosts, ul, users] = await Promise.all([api("GET", "/vhost-limits").catch(e => e), api("GET", "/vhosts?columns=name"),
    admin ? api("GET", "/user-limits").catch(e => e) : null, admin ? api("GET", "/users") : null]);
  setPage("Limits",
    limitSection({ id: "vhost-limits", title: "Virtual host limits", key: "vhost", ownerLabel: "Virtual host", path: "/vhost-limits",
      list: vl, owners: vhosts.map(v => v.name), limits: VHOST_LIMITS, editable: admin,
      help: "max-connections: client connections open at once in the virtual host; max-queues: queues in it. A negative value means no limit; 0 refuses every new one." }),
    admin ? limitSection({ id: "user-limits", title: "User limits", key: "user", ownerLabel: "User", path: "/user-limits",
      list: ul, owners: users.map(u => u.name), limits: USER_LIMITS, editable: true,
      help: "max-connections: connections the user has open at once; max-channels: channels the user has open at once, over all its connections. A negative value means no limit." })
      : h("p", {}, "User limits need the administrator tag."));
}

// ---- connections and channels ----

// connectionsPage lists connections and channels, refreshed every 5 s
// while no close form is open. Close asks for a reason in a small form and
// sends it as X-Reason: the client gets connection.close 320
// CONNECTION_FORCED with it.
async function connectionsPage() {
  const [conns, chans] = await Promise.all([api("GET", "/connections"), api("GET", "/channels")]);
  const msg = h("div", { id: "conn-msg" });
  const closeBox = h("div", { id: "close-box" });
  const openClose = (c, button) => {
    const reason = h("input", { id: "close-reason", value: "Closed via management UI", required: true });
    const cancel = () => { closeBox.replaceChildren(); button.focus(); };
    const form = h("form", { class: "stack", id: "close-form", "aria-labelledby": "close-h",
      onkeydown: ev => { if (ev.key === "Escape") cancel(); },
      onsubmit: async ev => {
        ev.preventDefault();
        try {
          await api("DELETE", `/connections/${enc(c.name)}`, undefined, undefined, { "X-Reason": reason.value });
          announce(`Connection ${c.name} closed`);
          await rerender();
        } catch (e) { msg.replaceChildren(errorBox(e)); }
      } },
      h("h3", { id: "close-h" }, `Close connection ${c.user_provided_name || c.name}?`),
      h("label", { for: "close-reason" }, "Reason (sent to the client)", reason),
      h("div", {}, h("button", { type: "submit", class: "primary" }, "Close connection"), " ",
        h("button", { type: "button", onclick: cancel }, "Cancel")));
    closeBox.replaceChildren(form);
    reason.focus();
  };
  setPage("Connections and channels",
    h("section", { "aria-labelledby": "conns-h" }, h("h2", { id: "conns-h" }, `Connections (${conns.length})`),
      h("div", { class: "table-wrap" }, h("table", { id: "connections" },
        h("thead", {}, h("tr", {}, colHead("Name"), colHead("User"), colHead("Virtual host", "wide"), colHead("Peer", "wide"),
          colHead("State", "wide"), colHead("Channels", "num"), actionsHead())),
        h("tbody", {}, conns.length ? conns.map(c => {
          const close = h("button", { type: "button", class: "close", "aria-label": `Close connection ${c.user_provided_name || c.name}` }, "Close");
          close.addEventListener("click", () => openClose(c, close));
          return h("tr", { dataset: { connection: c.name, clientName: c.user_provided_name ?? "" } },
            h("th", { scope: "row" }, c.user_provided_name ? [c.user_provided_name, h("br"), h("small", {}, c.name)] : c.name),
            h("td", { class: "user" }, c.user), h("td", { class: "wide vhost" }, c.vhost),
            h("td", { class: "wide peer" }, `${c.peer_host}:${c.peer_port}`), h("td", { class: "wide state" }, c.state),
            h("td", { class: "num channels" }, fmt(c.channels)), h("td", {}, close));
        }) : h("tr", {}, h("td", { colspan: 7 }, "No connections."))))),
      closeBox, msg),
    h("section", { "aria-labelledby": "chans-h" }, h("h2", { id: "chans-h" }, `Channels (${chans.length})`),
      h("div", { class: "table-wrap" }, h("table", { id: "channels" },
        h("thead", {}, h("tr", {}, colHead("Channel"), colHead("User", "wide"), colHead("Virtual host", "wide"), colHead("State", "wide"),
          colHead("Prefetch", "num"), colHead("Unacked", "num"), colHead("Consumers", "num"))),
        h("tbody", {}, chans.length ? chans.map(ch => h("tr", { dataset: { channel: ch.name, connection: ch.connection_details?.name ?? "" } },
          h("th", { scope: "row" }, ch.name), h("td", { class: "wide" }, ch.user), h("td", { class: "wide" }, ch.vhost),
          h("td", { class: "wide" }, ch.state), h("td", { class: "num prefetch" }, fmt(ch.prefetch_count)),
          h("td", { class: "num unacked" }, fmt(ch.messages_unacknowledged)), h("td", { class: "num consumers" }, fmt(ch.consumer_count))))
          : h("tr", {}, h("td", { colspan: 7 }, "No channels.")))))));
  // Not while the close form is open or a control in the page has focus
  // (a redraw would lose the user's place).
  every(5000, () => {
    const el = document.activeElement;
    if (!closeBox.firstChild && (el === main || !main.contains(el))) rerender();
  });
}

// ---- routing ----

let rendering = 0;

// timers are the page's polls. every is called just after setPage; its
// poll stops when render starts another page, or when that page's heading
// has left the document (the page was redrawn or superseded), so a page
// polls only while it is on screen.
let timers = [];
function every(ms, fn) {
  const heading = main.firstElementChild;
  const id = setInterval(() => { if (heading.isConnected) fn(); else clearInterval(id); }, ms);
  timers.push(id);
}

// render draws the page the hash names; a newer render supersedes an
// older one still waiting for the API.
async function render() {
  const mine = ++rendering;
  for (const t of timers) clearInterval(t);
  timers = [];
  const user = sessionStorage.getItem(USER);
  document.getElementById("nav").hidden = !user;
  document.getElementById("logout").hidden = !user;
  document.getElementById("who").textContent = user ? `User: ${user}` : "";
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  if (!user) { loginPage(); return; }
  try {
    switch (parts[0]) {
      case "queues": await queuesPage(); break;
      case "queue": await queuePage(decodeURIComponent(parts[1] || ""), decodeURIComponent(parts.slice(2).join("/"))); break;
      case "policies": await policiesPage(); break;
      case "exchanges": await exchangesPage(); break;
      case "users": await usersPage(); break;
      case "connections": await connectionsPage(); break;
      case "redrives": await redrivesPage(); break;
      case "nodes": await nodesPage(); break;
      case "shovels": await shovelsPage(); break;
      case "limits": await limitsPage(); break;
      case "exchange": await exchangePage(decodeURIComponent(parts[1] || ""), decodeURIComponent(parts.slice(2).join("/"))); break;
      case "login": location.hash = "#/overview"; return;
      default: await overviewPage();
    }
  } catch (e) {
    if (mine === rendering && sessionStorage.getItem(USER)) setPage("Error", errorBox(e));
  }
  if (mine === rendering) main.dataset.loaded = location.hash;
}

document.getElementById("logout").addEventListener("click", logout);
window.addEventListener("hashchange", () => { render().then(() => main.focus({ preventScroll: true })); });
render();
