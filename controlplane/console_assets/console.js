// The OpenEAS console: one module, no dependencies, served by the control plane.
// Views are built from the REST API (docs/api.md) with DOM calls and textContent only, so
// nothing a service or a user typed is ever parsed as HTML. The credential (the admin token,
// or an AccessKey pair as "<AccessKeyId>:<AccessKeySecret>", which the API takes as a bearer)
// lives in this tab's sessionStorage and travels as an Authorization header: no cookie, no
// CSRF surface.

const TOKEN_KEY = "openeas.admin";
const LIST_POLL_MS = 3000;
const SERVICE_POLL_MS = 3000;
const METRICS_POLL_MS = 10000;
const STATUSES = ["Creating", "Waiting", "Running", "Updating", "Stopped", "Failed", "Deleting"];
const EXAMPLE = `{
  "name": "triton_test",
  "processor": "triton",
  "processor_params": [
    "--model-repository=oss://triton-model-repo/models",
    "--allow-http=true"
  ],
  "metadata": {"instance": 1, "cpu": 4, "gpu": 1, "memory": 10000}
}
`;

const view = document.getElementById("view");
let timers = [];

// -- DOM -----------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined));
  return el;
}

function field(label, input) {
  input.id ||= "f-" + label.toLowerCase().replace(/[^a-z0-9]+/g, "-");
  return h("div", { class: "field" }, h("label", { for: input.id, text: label }), input);
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function statusBadge(s) {
  const badge = h("span", { class: `status ${s.Status}`, text: s.Status });
  return h("span", { title: s.Message || null }, badge, s.Reason ? h("span", { class: "muted", text: " " + s.Reason }) : null);
}

function copyButton(getText, label = "Copy") {
  const button = h("button", { type: "button", class: "small", text: label });
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(getText());
      button.textContent = "Copied";
    } catch {
      button.textContent = "Select and copy";
    }
    setTimeout(() => (button.textContent = label), 1500);
  });
  return button;
}

// -- API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, { method = "GET", body, headers = {}, text = false } = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const init = { method, headers: { Authorization: "Bearer " + token, ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    signOut("The admin token or AccessKey pair was not accepted: sign in again.");
    throw new ApiError(401, null);
  }
  if (text && r.ok) return r.text();
  const type = r.headers.get("content-type") || "";
  const data = type.includes("json") ? await r.json() : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

const servicePath = (s) => `/api/v2/services/${encodeURIComponent(s.Region)}/${encodeURIComponent(s.ServiceName)}`;

// Problems as the API answers them: JSON damage by line (column, what to type instead, the
// line as it should read — what eascmd prints), or spec fields with their fix.
function problemView(e) {
  const box = h("div", { class: "problems", role: "alert" });
  const body = e.body || {}; // none when the request itself failed (network)
  const errors = body.errors || [];
  const title = body.title ? `${body.title}: ` : "";
  box.append(h("p", { class: "error", text: title + (errors.length ? `${errors.length} problem(s)` : e.message) }));
  const items = [];
  const lines = new Map(); // line -> its problems, in order
  for (const p of errors) {
    if (!p.line) items.push(h("li", {}, h("code", { class: "where", text: p.field }), " ", p.message, p.fix ? h("div", { class: "fix", text: p.fix }) : null));
    else if (lines.has(p.line)) lines.get(p.line).push(p);
    else lines.set(p.line, [p]);
  }
  for (const [line, ps] of lines) {
    const quotes = ps.filter((p) => p.message.startsWith("typographic quote "));
    const said = ps.filter((p) => !quotes.includes(p)).map((p) => `column ${p.column}: ${p.message}`);
    if (quotes.length) {
      const chars = [...new Set(quotes.map((p) => p.message.slice(-1)))].join(" ");
      said.unshift(`typographic quotes ${chars} (columns ${quotes.map((p) => p.column).join(", ")}): type straight quotes " instead`);
    }
    const fix = ps.find((p) => p.fix);
    items.push(h("li", {},
      h("code", { class: "where", text: `line ${line}` }), " ", said.join("; "),
      fix ? h("div", { class: "fix" }, h("code", { text: fix.fix })) : null));
  }
  if (items.length) box.append(h("ul", {}, items));
  return box;
}

// -- shell ---------------------------------------------------------------------------------

function every(ms, fn) {
  fn();
  timers.push(setInterval(() => document.visibilityState === "visible" && fn(), ms));
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  history.replaceState(null, "", "#/"); // no hashchange: it would re-render without the message
  route(message);
}

function signIn(message) {
  document.getElementById("nav").hidden = true;
  const form = document.getElementById("signin").content.firstElementChild.cloneNode(true);
  view.replaceChildren(form);
  const error = form.querySelector("#signin-error");
  error.textContent = message || "";
  form.querySelector("input").focus();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const value = (id) => form.querySelector(id).value.trim();
    const [token, keyId, secret] = [value("#admin-token"), value("#access-key-id"), value("#access-key-secret")];
    if (!token && !(keyId && secret)) {
      error.textContent = "Give the admin token, or both the AccessKeyId and its AccessKeySecret.";
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token || `${keyId}:${secret}`);
    try {
      await api("/api/v2/services?pageSize=1");
      route();
    } catch (e) {
      if (e.status === 401) return; // signOut already asked again, saying why
      sessionStorage.removeItem(TOKEN_KEY); // unchecked: not signed in
      error.textContent = e.message;
    }
  });
}

function route(message) {
  timers.forEach(clearInterval);
  timers = [];
  if (!sessionStorage.getItem(TOKEN_KEY)) return signIn(message);
  document.getElementById("nav").hidden = false;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "create") return createView();
  if (parts[0] === "services" && parts.length === 3) return serviceView(parts[1], parts[2]);
  return listView();
}

// -- service list --------------------------------------------------------------------------

function listView() {
  const state = { page: 1, size: 20, name: "", status: "" };
  const name = h("input", { type: "search", placeholder: "part of a name", id: "filter-name" });
  const status = h("select", { id: "filter-status" }, h("option", { value: "", text: "any" }), STATUSES.map((s) => h("option", { value: s, text: s })));
  const body = h("tbody");
  const pager = h("div", { class: "pager" });
  const error = h("p", { class: "error", role: "alert" });
  const table = h("table", { class: "services" },
    h("caption", { class: "visually-hidden", text: "Services" }),
    // Endpoint and times give way on a phone (the service page has them).
    h("thead", {}, h("tr", {}, ["Service", "Status", "Running / total", "Endpoint", "Created", "Updated"].map((t, i) => h("th", { scope: "col", class: i > 2 ? "wide" : null, text: t })))),
    body,
  );
  view.replaceChildren(
    h("section", {},
      h("div", { class: "title-row" }, h("h2", { text: "Services" }), h("a", { href: "#/create", class: "button", text: "Create service" })),
      h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() }, field("Name", name), field("Status", status)),
      error,
      h("div", { class: "scroll" }, table),
      pager,
    ),
  );
  let typing;
  name.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.name = name.value.trim(); state.page = 1; load(); }, 250);
  });
  status.addEventListener("change", () => { state.status = status.value; state.page = 1; load(); });

  let shown = ""; // what the table shows: an unchanged answer leaves the DOM (and focus) alone
  async function load() {
    const q = new URLSearchParams({ pageNumber: state.page, pageSize: state.size, sort: "createTime", order: "desc" });
    if (state.name) q.set("name", state.name);
    if (state.status) q.set("status", state.status);
    let data;
    try {
      data = await api("/api/v2/services?" + q);
      error.textContent = "";
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    const key = JSON.stringify([state, data.TotalCount, data.Services]);
    if (key === shown) return;
    shown = key;
    body.replaceChildren(...data.Services.map((s) => h("tr", {},
      h("td", {}, h("a", { href: `#/services/${encodeURIComponent(s.Region)}/${encodeURIComponent(s.ServiceName)}`, text: s.ServiceName })),
      h("td", {}, statusBadge(s)),
      h("td", { class: "num", text: `${s.RunningInstance} / ${s.TotalInstance}` }),
      h("td", { class: "wide" }, h("code", { class: "endpoint", text: s.InternetEndpoint })),
      h("td", { class: "muted wide", text: when(s.CreateTime) }),
      h("td", { class: "muted wide", text: when(s.UpdateTime) }),
    )));
    if (!data.Services.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted", text: state.name || state.status ? "No service matches." : "No services yet." })));
    const pages = Math.max(1, Math.ceil(data.TotalCount / state.size));
    const go = (page) => () => { state.page = page; load(); };
    pager.replaceChildren(
      h("button", { type: "button", disabled: state.page <= 1, onclick: go(state.page - 1), text: "Previous" }),
      h("span", { text: ` Page ${state.page} of ${pages} · ${data.TotalCount} service(s) ` }),
      h("button", { type: "button", disabled: state.page >= pages, onclick: go(state.page + 1), text: "Next" }),
    );
  }
  every(LIST_POLL_MS, load);
}

// -- create --------------------------------------------------------------------------------

function createView() {
  const text = h("textarea", { id: "spec-text", rows: 12, spellcheck: "false", "aria-describedby": "spec-help" });
  text.value = EXAMPLE;
  const out = h("div", { id: "create-result" });
  const submit = h("button", { type: "submit", text: "Create" });
  view.replaceChildren(
    h("section", {},
      h("h2", { text: "Create a service" }),
      h("form", { class: "card", onsubmit: create },
        field("Service JSON (as for eascmd create)", text),
        h("p", { id: "spec-help", class: "muted", text: "Paste it as it is: quotes, dashes and commas damaged by a blog or a chat are pointed out with the line as it should read." }),
        submit,
      ),
      out,
    ),
  );

  async function create(ev) {
    ev.preventDefault();
    submit.disabled = true;
    try {
      const made = await api("/api/v2/services", { method: "POST", body: text.value });
      out.replaceChildren(createdView(made));
    } catch (e) {
      const parts = [problemView(e)];
      if (e.body && e.body.corrected) {
        parts.push(h("button", { type: "button", onclick: () => { text.value = e.body.corrected; out.replaceChildren(); text.focus(); }, text: "Apply the corrections" }));
      }
      out.replaceChildren(...parts);
    } finally {
      submit.disabled = false;
    }
  }
}

function clientSnippet(endpoint, token) {
  const secure = endpoint.startsWith("https://");
  const url = endpoint.replace(/^https?:\/\//, "");
  return `import tritonclient.http as httpclient

client = httpclient.InferenceServerClient(url="${url}"${secure ? ", ssl=True" : ""})
headers = {"Authorization": "${token}"}
print(client.is_server_ready(headers=headers))
# client.infer("<model>", inputs, outputs=outputs, headers=headers)
`;
}

function tokenPanel(title, endpoint, token) {
  const snippet = clientSnippet(endpoint, token);
  return h("div", { class: "card created", role: "status" },
    h("h3", { text: title }),
    h("dl", {},
      h("dt", { text: "Endpoint" }), h("dd", {}, h("code", { text: endpoint }), " ", copyButton(() => endpoint)),
      h("dt", { text: "Token" }), h("dd", {}, h("code", { class: "token", text: token }), " ", copyButton(() => token)),
    ),
    h("p", { class: "muted", text: "The token is shown once here; an admin can show or rotate it later on the service page." }),
    h("pre", { class: "snippet" }, h("code", { text: snippet })),
    copyButton(() => snippet, "Copy snippet"),
  );
}

function createdView(made) {
  const panel = tokenPanel(`Created ${made.ServiceName}`, made.InternetEndpoint, made.Token);
  panel.append(" ", h("a", { href: `#/services/${encodeURIComponent(made.Region)}/${encodeURIComponent(made.ServiceName)}`, text: "Open the service" }));
  return panel;
}

// -- charts --------------------------------------------------------------------------------

// A line chart as SVG: one polyline per series over the window, gaps where a value is null.
function chart(title, points, series, unit) {
  const W = 320, H = 120, L = 38, B = 16, T = 8;
  const values = series.flatMap((s) => points.map(s.get)).filter((v) => v !== null && v !== undefined);
  const top = niceMax(Math.max(1, ...values));
  const x = (i) => L + ((W - L - 4) * i) / Math.max(1, points.length - 1);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
  svg.append(
    svgEl("line", { x1: L, y1: y(0), x2: W - 4, y2: y(0), class: "axis" }),
    svgEl("line", { x1: L, y1: y(top), x2: W - 4, y2: y(top), class: "grid" }),
    svgText(L - 4, y(top) + 4, fmt(top), "end"),
    svgText(L - 4, y(0) + 4, "0", "end"),
    svgText(L, H - 2, points.length ? `-${Math.round((points.length * 10) / 60)} min` : "", "start"),
    svgText(W - 4, H - 2, "now", "end"),
  );
  const latest = [];
  for (const s of series) {
    let d = "";
    let pen = false;
    points.forEach((p, i) => {
      const v = s.get(p);
      if (v === null || v === undefined) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    if (d) svg.append(svgEl("path", { d, class: `line ${s.cls}` }));
    const last = [...points].reverse().map(s.get).find((v) => v !== null && v !== undefined);
    latest.push(`${s.label ? s.label + " " : ""}${last === undefined ? "–" : fmt(last)}${unit}`);
  }
  const summary = latest.join(", ");
  svg.setAttribute("aria-label", `${title} over the last hour; latest: ${summary}`);
  return h("figure", { class: "chart-box" },
    h("figcaption", {}, h("strong", { text: title }), h("span", { class: "muted legend", text: " " + summary })),
    svg,
  );
}

function svgEl(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function svgText(x, y, text, anchor) {
  const t = svgEl("text", { x, y, "text-anchor": anchor });
  t.textContent = text;
  return t;
}

function niceMax(v) {
  if (v <= 0) return 0;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

function fmt(v) {
  return Math.abs(v) >= 100 ? Math.round(v).toString() : Number(v.toPrecision(3)).toString();
}

function chartsView(metrics) {
  const p = metrics.Points;
  const grid = h("div", { class: "charts" },
    chart("Requests/s", p, [{ label: "", get: (x) => x.RequestsPerSecond, cls: "a" }], ""),
    chart("Latency (ms)", p, [
      { label: "p50", get: (x) => x.LatencyP50Ms, cls: "a" },
      { label: "p99", get: (x) => x.LatencyP99Ms, cls: "b" },
    ], " ms"),
    chart("Errors/s (5xx)", p, [{ label: "", get: (x) => x.ErrorsPerSecond, cls: "err" }], ""),
    chart("Ready replicas", p, [{ label: "", get: (x) => x.Replicas, cls: "a" }], ""),
  );
  if (p.some((x) => x.Backlog !== null && x.Backlog !== undefined)) {
    grid.append(chart("Queue backlog", p, [{ label: "", get: (x) => x.Backlog, cls: "b" }], ""));
  }
  if (!metrics.Leading) {
    return [h("p", { class: "muted", text: "This control plane does not lead: the gateways report traffic to the one that does, so only replica counts show here." }), grid];
  }
  return [grid];
}

// -- service page --------------------------------------------------------------------------

function serviceView(cluster, name) {
  const path = `/api/v2/services/${encodeURIComponent(cluster)}/${encodeURIComponent(name)}`;
  let current = null;
  const head = h("div", { class: "title-row" }, h("h2", { text: name }));
  const summary = h("div", { class: "summary" });
  const notice = h("div", { id: "action-result", "aria-live": "polite" });
  const charts = h("div", { id: "charts" }, h("p", { class: "muted", text: "Loading charts…" }));
  const replicas = h("div");
  const events = h("div");
  const spec = h("pre", { class: "spec" });
  const logs = logView(path);

  const scaleInput = h("input", { type: "number", min: 0, max: 100, id: "scale-instances", required: true });
  const stopStart = h("button", { type: "button", id: "stop-start", text: "Stop" });
  const actions = h("div", { class: "card actions" },
    h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); act("scale", { method: "PUT", body: { Instance: Number(scaleInput.value) } }, `Scaled to ${scaleInput.value}`); } },
      field("Instances", scaleInput), h("button", { type: "submit", text: "Scale" })),
    stopStart,
    h("button", { type: "button", onclick: () => showToken("GET"), text: "Show token" }),
    h("button", { type: "button", onclick: () => confirmInline("Rotate the token? The old one stops working at once.", () => showToken("POST")), text: "Rotate token" }),
    h("button", { type: "button", class: "danger", onclick: askDelete, text: "Delete…" }),
  );
  stopStart.addEventListener("click", () => {
    const stopping = !current.Stopped;
    act(stopping ? "stop" : "start", { method: "PUT" }, stopping ? "Stopping" : "Starting");
  });

  view.replaceChildren(
    h("section", {},
      h("p", {}, h("a", { href: "#/", text: "← Services" })),
      head, summary, actions, notice,
      h("h3", { text: "Last hour" }), charts,
      h("h3", { text: "Replicas" }), replicas,
      h("h3", { text: "Events" }), events,
      h("h3", { text: "Log" }), logs.el,
      h("h3", { text: "Spec" }), spec,
      h("h3", { text: "Modify" }), modifyForm(),
      h("h3", { text: "Autoscaler" }), autoscalerForm(),
      h("h3", { text: "Group" }), releaseForm(),
    ),
  );

  async function act(what, init, done) {
    try {
      current = await api(`${path}/${what}`, init);
      notice.replaceChildren(h("p", { class: "ok", text: done }));
      render();
    } catch (e) {
      notice.replaceChildren(problemView(e));
    }
  }

  async function showToken(method) {
    try {
      const t = await api(`${path}/token`, { method });
      notice.replaceChildren(tokenPanel(method === "POST" ? "New token" : "Token", current.InternetEndpoint, t.Token));
    } catch (e) {
      notice.replaceChildren(problemView(e));
    }
  }

  function confirmInline(question, then) {
    notice.replaceChildren(h("div", { class: "card confirm", role: "alertdialog", "aria-label": question },
      h("p", { text: question }),
      h("button", { type: "button", onclick: then, text: "Yes" }), " ",
      h("button", { type: "button", onclick: () => notice.replaceChildren(), text: "Cancel" })));
    notice.querySelector("button").focus();
  }

  function askDelete() {
    const typed = h("input", { id: "delete-confirm", autocomplete: "off", oninput: () => typed.setCustomValidity("") });
    const form = h("form", { class: "card confirm", onsubmit: async (e) => {
      e.preventDefault();
      if (typed.value !== name) { typed.setCustomValidity("type the service name"); typed.reportValidity(); return; }
      try {
        await api(path, { method: "DELETE" });
        location.hash = "#/";
      } catch (err) {
        notice.replaceChildren(problemView(err));
      }
    } },
      h("p", { text: `Deleting ${name} stops its replicas and removes it; its endpoint stops answering.` }),
      field(`Type ${name} to confirm`, typed),
      h("button", { type: "submit", class: "danger", text: "Delete service" }), " ",
      h("button", { type: "button", onclick: () => notice.replaceChildren(), text: "Cancel" }));
    notice.replaceChildren(form);
    typed.focus();
  }

  function modifyForm() {
    const text = h("textarea", { id: "modify-text", rows: 6, spellcheck: "false" });
    text.value = '{\n  "metadata": {"instance": 1}\n}\n';
    const out = h("div");
    return h("form", { class: "card", onsubmit: async (e) => {
      e.preventDefault();
      try {
        current = await api(path, { method: "PUT", body: text.value, headers: { "If-Match": `"${current.ResourceVersion}"` } });
        out.replaceChildren(h("p", { class: "ok", text: "Modified; replicas roll to the new spec where it changed." }));
        render();
      } catch (err) {
        const parts = [problemView(err)];
        if (err.body && err.body.corrected) parts.push(h("button", { type: "button", onclick: () => { text.value = err.body.corrected; out.replaceChildren(); }, text: "Apply the corrections" }));
        out.replaceChildren(...parts);
      }
    } },
      field("JSON merged into the spec (RFC 7386; null removes a key)", text),
      h("button", { type: "submit", text: "Apply" }), out);
  }

  function autoscalerForm() {
    const text = h("textarea", { id: "autoscaler-text", rows: 5, spellcheck: "false" });
    const out = h("div");
    api(`${path}/autoscaler`).then((a) => { text.value = JSON.stringify(a, null, 2); }).catch(() => {
      text.value = '{\n  "min": 1,\n  "max": 4,\n  "scaleStrategies": [{"metricName": "qps", "threshold": 100}]\n}\n';
    });
    const send = async (method) => {
      try {
        const got = await api(`${path}/autoscaler`, method === "PUT" ? { method, body: text.value } : { method });
        out.replaceChildren(h("p", { class: "ok", text: method === "PUT" ? "Autoscaler set." : "Autoscaler removed; the instance count stays where it is." }));
        if (method === "PUT") text.value = JSON.stringify(got, null, 2);
      } catch (err) {
        out.replaceChildren(problemView(err));
      }
    };
    return h("form", { class: "card", onsubmit: (e) => { e.preventDefault(); send("PUT"); } },
      field("Autoscaler (as eascmd autoscale sets it)", text),
      h("button", { type: "submit", text: "Set autoscaler" }), " ",
      h("button", { type: "button", onclick: () => send("DELETE"), text: "Remove" }), out);
  }

  function releaseForm() {
    const weight = h("input", { type: "number", min: 0, max: 1000, id: "release-weight" });
    const state = h("select", { id: "release-state" }, ["", "grouping", "standalone"].map((v) => h("option", { value: v, text: v || "(keep)" })));
    const out = h("div");
    return h("form", { class: "card inline", onsubmit: async (e) => {
      e.preventDefault();
      const body = {};
      if (weight.value !== "") body.Weight = Number(weight.value);
      if (state.value) body.TrafficState = state.value;
      try {
        current = await api(`${path}/release`, { method: "PUT", body });
        out.replaceChildren(h("p", { class: "ok", text: "Group settings saved." }));
        render();
      } catch (err) {
        out.replaceChildren(problemView(err));
      }
    } },
      h("p", { class: "muted", text: "For a member of a group (metadata.group): its weight and whether it takes group traffic." }),
      field("Weight (0–1000)", weight), field("Traffic", state),
      h("button", { type: "submit", text: "Save" }), out);
  }

  function render() {
    const s = current;
    head.replaceChildren(h("h2", { text: s.ServiceName }), statusBadge(s));
    summary.replaceChildren(h("dl", { class: "facts" },
      h("dt", { text: "Running / total" }), h("dd", { id: "instances", text: `${s.RunningInstance} / ${s.TotalInstance}` + (s.PendingInstance ? ` (${s.PendingInstance} pending)` : "") }),
      h("dt", { text: "Endpoint" }), h("dd", {}, h("code", { text: s.InternetEndpoint }), " ", copyButton(() => s.InternetEndpoint)),
      h("dt", { text: "Intranet" }), h("dd", {}, h("code", { text: s.IntranetEndpoint })),
      s.Message ? [h("dt", { text: "Message" }), h("dd", { text: s.Message })] : null,
      h("dt", { text: "Created" }), h("dd", { text: when(s.CreateTime) }),
      h("dt", { text: "Updated" }), h("dd", { text: when(s.UpdateTime) }),
    ));
    // ServiceConfig is a JSON string, as EAS answers it.
    const config = typeof s.ServiceConfig === "string" ? JSON.parse(s.ServiceConfig) : s.ServiceConfig;
    if (document.activeElement !== scaleInput) scaleInput.value = config.metadata?.instance ?? s.TotalInstance;
    stopStart.textContent = s.Stopped ? "Start" : "Stop";
    spec.textContent = JSON.stringify(config, null, 2);
    replicas.replaceChildren(replicaTable(s.Replicas));
    logs.replicas(s.Replicas);
  }

  let shown = ""; // the describe and events last rendered: unchanged ones leave focus alone
  async function load() {
    try {
      current = await api(path);
      const ev = await api(`${path}/events`);
      const key = JSON.stringify([current, ev.Events]);
      if (key === shown) return;
      shown = key;
      render();
      events.replaceChildren(eventTable(ev.Events));
    } catch (e) {
      if (e.status === 404) {
        timers.forEach(clearInterval);
        summary.replaceChildren(h("p", { class: "error", text: `No service ${name}: deleted, or a wrong name.` }));
      }
    }
  }

  async function loadMetrics() {
    try {
      charts.replaceChildren(...chartsView(await api(`${path}/metrics?window=3600`)));
    } catch (e) {
      if (e.status !== 401) charts.replaceChildren(h("p", { class: "error", text: e.message }));
    }
  }

  every(SERVICE_POLL_MS, load);
  every(METRICS_POLL_MS, loadMetrics);
}

function replicaTable(rows) {
  if (!rows.length) return h("p", { class: "muted", text: "No replicas." });
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, ["Replica", "State", "Endpoint", "Restarts", "Detail"].map((t) => h("th", { scope: "col", text: t })))),
    h("tbody", {}, rows.map((r) => h("tr", {},
      h("td", { text: r.name }),
      h("td", {}, h("span", { class: `status ${r.state}`, text: r.state }), r.current === false ? h("span", { class: "muted", text: " (old spec)" }) : null),
      h("td", {}, h("code", { text: r.endpoint || "" })),
      h("td", { class: "num", text: String(r.restarts ?? 0) }),
      h("td", {}, progressView(r.progress), r.reason ? h("span", { text: `${r.reason}: ${r.message || ""}` }) : null),
    ))),
  ));
}

function progressView(p) {
  if (!p) return null;
  const pct = p.bytes_total ? Math.floor((100 * p.bytes_done) / p.bytes_total) : 0;
  const label = `${p.phase} ${p.files_done}/${p.files_total} files` + (p.bytes_total ? ` (${pct}%)` : "");
  return h("span", {}, h("progress", { max: 100, value: pct, "aria-label": label }), " ", label, " ");
}

function eventTable(rows) {
  if (!rows.length) return h("p", { class: "muted", text: "No events." });
  return h("div", { class: "scroll events" }, h("table", {},
    h("thead", {}, h("tr", {}, ["Time", "Type", "Reason", "Message"].map((t) => h("th", { scope: "col", text: t })))),
    h("tbody", {}, [...rows].reverse().slice(0, 50).map((e) => h("tr", {},
      h("td", { class: "muted", text: when(e.Time) }),
      h("td", { text: e.Type }),
      h("td", { text: e.Reason }),
      h("td", { text: e.Message }),
    ))),
  ));
}

// The tail of one replica's output, fetched on demand (logs can be large).
function logView(path) {
  const pick = h("select", { id: "log-replica" }, h("option", { value: "", text: "newest" }));
  const tail = h("select", { id: "log-tail" }, [100, 200, 1000].map((n) => h("option", { value: n, text: `${n} lines`, selected: n === 200 })));
  const out = h("pre", { class: "log", tabindex: 0, "aria-label": "replica log" });
  const show = async () => {
    const q = new URLSearchParams({ tail: tail.value });
    if (pick.value !== "") q.set("replica", pick.value);
    try {
      out.textContent = (await api(`${path}/logs?${q}`, { text: true })) || "(empty)";
      out.scrollTop = out.scrollHeight;
    } catch (e) {
      out.textContent = e.message;
    }
  };
  const el = h("form", { class: "card", onsubmit: (e) => { e.preventDefault(); show(); } },
    h("div", { class: "inline" }, field("Replica", pick), field("Lines", tail), h("button", { type: "submit", text: "Show log" })),
    out);
  let known = "";
  return {
    el,
    replicas(rows) {
      const names = rows.map((r) => r.name).join(",");
      if (names === known) return;
      known = names;
      const chosen = pick.value;
      // The number eascmd logs --replica takes: the name's numeric suffix, else the position.
      const number = (r, i) => (/-(\d+)$/.exec(r.name) || [null, i])[1];
      pick.replaceChildren(h("option", { value: "", text: "newest" }), rows.map((r, i) => h("option", { value: number(r, i), text: r.name })));
      pick.value = chosen;
    },
  };
}

// -- start ---------------------------------------------------------------------------------

document.getElementById("signout").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", () => route());
route();
