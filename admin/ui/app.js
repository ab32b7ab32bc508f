// switchboard's dashboard: polls /api/v1/dashboard once a second and draws
// it. Every value goes into the page as text (never as HTML), and the
// page loads nothing from elsewhere.
"use strict";

const POLL_MS = 1000;
const KEEP = 60; // points per sparkline: the last minute

// el makes an element: el("td", {class: "num"}, "12", child...).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function table(head, rows) {
  const thead = el("thead", {}, el("tr", {}, ...head.map(h => el("th", h.num ? {class: "num"} : {}, h.t || h))));
  return el("div", {class: "scroll"}, el("table", {}, thead, el("tbody", {}, ...rows)));
}

function fmtRate(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}
function fmtPct(v) { return v === null || !isFinite(v) ? "–" : (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%"; }
function fmtMs(v) { return v === null || !isFinite(v) ? "–" : v < 0.01 ? (v * 1e3).toFixed(2) + " ms" : (v * 1e3).toFixed(0) + " ms"; }
function ago(t, now) {
  const d = Math.max(0, (now - new Date(t)) / 1000);
  if (d < 90) return d.toFixed(0) + "s ago";
  if (d < 5400) return (d / 60).toFixed(0) + "m ago";
  if (d < 172800) return (d / 3600).toFixed(0) + "h ago";
  return (d / 86400).toFixed(0) + "d ago";
}

// spark draws the history of one series.
function spark(points, cls) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark" + (cls ? " " + cls : ""));
  svg.setAttribute("viewBox", "0 0 " + (KEEP - 1) + " 20");
  svg.setAttribute("preserveAspectRatio", "none");
  const vals = points.map(v => (v === null || !isFinite(v) ? 0 : v));
  const max = Math.max(...vals, 1e-9);
  const off = KEEP - vals.length;
  const base = document.createElementNS(ns, "line");
  base.setAttribute("x1", "0"); base.setAttribute("x2", String(KEEP - 1));
  base.setAttribute("y1", "19.5"); base.setAttribute("y2", "19.5");
  svg.append(base);
  const pl = document.createElementNS(ns, "polyline");
  pl.setAttribute("points", vals.map((v, i) => (off + i) + "," + (19 - 18 * v / max).toFixed(1)).join(" "));
  svg.append(pl);
  return svg;
}

// History of every series, and the previous poll's counters.
const hist = new Map();
function push(key, v) {
  let h = hist.get(key);
  if (!h) { h = []; hist.set(key, h); }
  h.push(v);
  if (h.length > KEEP) h.shift();
  return h;
}
let prev = null;

// rate is the per-second change of a counter between two polls.
function rate(cur, old, dt) {
  if (old === undefined || dt <= 0 || cur < old) return null;
  return (cur - old) / dt;
}

function metricSum(d, name, match) {
  let v = 0, count = 0, sum = 0;
  for (const s of (d.metrics[name] || [])) {
    if (!match(s.labels)) continue;
    v += s.value || 0; count += s.count || 0; sum += s.sum || 0;
  }
  return {v, count, sum};
}

function counters(d) {
  const c = {};
  for (const u of d.upstreams) {
    for (const e of u.endpoints) {
      c["ep|" + u.name + "|" + e.address] = {req: e.requests, fail: e.failures};
    }
    const lat = metricSum(d, "switchboard_http_request_duration_seconds", l => l.upstream === u.name);
    c["up|" + u.name] = {count: lat.count, sum: lat.sum};
  }
  for (const name of ["switchboard_ratelimit_decisions_total", "switchboard_concurrency_rejections_total",
    "switchboard_fallback_responses_total", "switchboard_upstream_retries_total"]) {
    for (const s of (d.metrics[name] || [])) c["m|" + name + "|" + JSON.stringify(s.labels)] = {v: s.value};
  }
  return c;
}

function renderUpstreams(d, cur, dt) {
  const body = document.querySelector("#upstreams .body");
  const now = new Date(d.time);
  const out = [];
  if (d.upstreams.length === 0) out.push(el("p", {class: "muted"}, "No upstreams yet."));
  for (const u of d.upstreams) {
    let upReq = 0, upFail = 0, known = false;
    const rows = u.endpoints.map(e => {
      const key = "ep|" + u.name + "|" + e.address;
      const old = prev && prev.c[key];
      const rr = old ? rate(e.requests, old.req, dt) : null;
      const fr = old ? rate(e.failures, old.fail, dt) : null;
      if (rr !== null) { upReq += rr; upFail += fr || 0; known = true; }
      const er = rr ? (fr || 0) / rr : (rr === 0 ? 0 : null);
      const rh = push(key + "|rate", rr);
      const eh = push(key + "|err", er);
      return el("tr", {class: "row-" + e.state, "data-endpoint": e.address, "data-state": e.state},
        el("td", {}, e.address),
        el("td", {class: "state state-" + e.state}, e.state),
        el("td", {class: "reason"}, e.reason || ""),
        el("td", {title: e.since}, ago(e.since, now)),
        el("td", {class: "num"}, e.weight),
        el("td", {class: "num"}, e.in_flight),
        el("td", {class: "num"}, fmtRate(rr)),
        el("td", {}, spark(rh)),
        el("td", {class: "num"}, fmtPct(er)),
        el("td", {}, spark(eh, "err")),
        el("td", {class: "num"}, e.requests),
        el("td", {class: "num"}, e.connections_open + "/" + e.connections_idle));
    });
    const ukey = "up|" + u.name;
    const old = prev && prev.c[ukey];
    const lc = cur[ukey];
    const lat = old && lc.count > old.count ? (lc.sum - old.sum) / (lc.count - old.count) : null;
    const lh = push(ukey + "|lat", lat);
    const rh = push(ukey + "|rate", known ? upReq : null);
    const healthy = u.ready === u.total && u.total > 0;
    out.push(el("div", {class: "upstream", "data-upstream": u.name},
      el("h3", {}, u.name,
        el("span", {class: "pill"}, u.policy),
        el("span", {class: healthy ? "ok" : u.ready === 0 ? "bad" : "warn"}, u.ready + "/" + u.total + " ready"),
        el("span", {class: "muted"}, fmtRate(known ? upReq : null) + " req/s"), spark(rh),
        el("span", {class: "muted"}, "errors " + fmtPct(known && upReq ? upFail / upReq : null)),
        el("span", {class: "muted"}, "latency " + fmtMs(lat)), spark(lh)),
      u.endpoints.length === 0 ? el("p", {class: "muted"}, "No endpoints.") :
        table(["endpoint", "state", "reason", "since", {t: "weight", num: 1}, {t: "in flight", num: 1},
          {t: "req/s", num: 1}, "", {t: "errors", num: 1}, "", {t: "requests", num: 1}, {t: "conns open/idle", num: 1}], rows)));
  }
  body.replaceChildren(...out);
}

function renderListeners(d) {
  const body = document.querySelector("#listeners .body");
  const rows = [];
  for (const l of d.listeners) {
    const where = l.protocol + (l.tls ? "+tls" : "") + " " + (l.addr || l.listen);
    if (!l.routes || l.routes.length === 0) {
      rows.push(el("tr", {}, el("td", {}, l.name), el("td", {}, where),
        el("td", {class: "muted"}, l.auto_routes ? "(auto routes: none yet)" : "—"), el("td", {}, l.upstream || ""), el("td", {}), el("td", {})));
    }
    for (const r of (l.routes || [])) {
      const b = r.breaker;
      const last = b && b.recent.length ? b.recent[b.recent.length - 1] : null;
      rows.push(el("tr", {"data-route": r.name},
        el("td", {}, l.name), el("td", {}, where),
        el("td", {class: "wrap"}, (r.methods ? r.methods.join(",") + " " : "") + (r.host || "*") + (r.path_prefix || "/")),
        el("td", {}, r.upstream),
        el("td", {class: b ? "state state-" + b.state : "muted"}, b ? b.state : "—"),
        el("td", {class: "wrap muted"}, last ? last.from + "→" + last.to + " " + ago(last.at, new Date(d.time)) + (last.reason ? ": " + last.reason : "") : (r.limits || []).join(", "))));
    }
  }
  body.replaceChildren(rows.length ? table(["listener", "address", "match", "upstream", "breaker", "last change / protections"], rows) : el("p", {class: "muted"}, "No listeners."));
}

function renderProtection(d, dt) {
  const body = document.querySelector("#protection .body");
  const rows = [];
  const names = {
    switchboard_ratelimit_decisions_total: l => ["rate limit " + l.limiter, l.route, l.decision],
    switchboard_concurrency_rejections_total: l => ["concurrency (" + l.scope + ")", l.route, "rejected"],
    switchboard_fallback_responses_total: l => ["fallback " + l.step, l.route, l.reason],
    switchboard_upstream_retries_total: l => ["retry", l.upstream, l.reason],
  };
  for (const [name, label] of Object.entries(names)) {
    for (const s of (d.metrics[name] || [])) {
      if (!s.value) continue; // a series made ready but never counted
      const key = "m|" + name + "|" + JSON.stringify(s.labels);
      const old = prev && prev.c[key];
      const r = old ? rate(s.value, old.v, dt) : null;
      const h = push(key, r);
      const [what, where, decision] = label(s.labels);
      rows.push(el("tr", {}, el("td", {}, what), el("td", {}, where), el("td", {class: decision === "rejected" ? "bad" : ""}, decision),
        el("td", {class: "num"}, fmtRate(r)), el("td", {}, spark(h, decision === "allowed" ? "" : "err")), el("td", {class: "num"}, s.value)));
    }
  }
  body.replaceChildren(rows.length ? table(["what", "route / upstream", "decision", {t: "/s", num: 1}, "", {t: "total", num: 1}], rows) :
    el("p", {class: "muted"}, "No limiter, fallback or retry has decided anything yet."));
}

function renderDiscovery(d) {
  const body = document.querySelector("#discovery .body");
  const rows = (d.discovery || []).map(s => el("tr", {},
    el("td", {}, s.registry), el("td", {}, s.service + (s.tags && s.tags.length ? " [" + s.tags.join(",") + "]" : "")),
    el("td", {class: "num"}, s.instances),
    el("td", {class: s.stale ? "bad" : "ok"}, s.stale ? "stale" : "fresh"),
    el("td", {class: "num"}, s.age_seconds ? s.age_seconds.toFixed(0) + "s" : "0"),
    el("td", {}, s.from_cache ? "yes" : ""),
    el("td", {class: "wrap muted"}, s.last_error || "")));
  body.replaceChildren(rows.length ? table(["registry", "service", {t: "instances", num: 1}, "view", {t: "age", num: 1}, "from cache", "last error"], rows) :
    el("p", {class: "muted"}, "No upstream follows a registry."));
}

function renderRegistry(d) {
  const body = document.querySelector("#registry .body");
  if (d.registry === null || d.registry === undefined) {
    body.replaceChildren(el("p", {class: "muted"}, "The embedded registry is not running."));
    return;
  }
  const rows = [];
  for (const i of d.registry) {
    const checks = i.checks.length ? i.checks : [{name: "(no checks)", status: "passing", output: ""}];
    for (const c of checks) {
      rows.push(el("tr", {"data-instance": i.id},
        el("td", {}, i.service), el("td", {}, i.id), el("td", {}, i.address + ":" + i.port),
        el("td", {}, c.name || c.id), el("td", {class: "state state-" + c.status}, c.status),
        el("td", {class: "wrap muted"}, c.output || "")));
    }
  }
  body.replaceChildren(rows.length ? table(["service", "id", "address", "check", "status", "output"], rows) :
    el("p", {class: "muted"}, "No service is registered."));
}

function renderTCP(d) {
  const body = document.querySelector("#tcp .body");
  const rows = (d.tcp || []).map(t => el("tr", {},
    el("td", {}, t.listener), el("td", {class: "num"}, t.active), el("td", {class: "num"}, t.queued),
    el("td", {class: "num"}, t.accepted), el("td", {class: "num"}, t.rejected)));
  body.replaceChildren(rows.length ? table(["listener", {t: "active", num: 1}, {t: "queued", num: 1}, {t: "accepted", num: 1}, {t: "rejected", num: 1}], rows) :
    el("p", {class: "muted"}, "No tcp listeners."));
}

function renderReloads(d) {
  const body = document.querySelector("#reloads .body");
  const now = new Date(d.time);
  const list = (d.reloads || []).slice().reverse();
  const rows = list.map(r => el("tr", {},
    el("td", {title: r.at}, ago(r.at, now)), el("td", {class: r.ok ? "ok" : "bad"}, r.ok ? "applied" : "refused"),
    el("td", {class: "wrap"}, r.error || "")));
  body.replaceChildren(rows.length ? table(["when", "result", "error"], rows) : el("p", {class: "muted"}, "No reload since start."));
  const last = list[0];
  const top = document.getElementById("reload");
  top.textContent = last ? "last reload " + (last.ok ? "applied " : "REFUSED ") + ago(last.at, now) : "";
  top.className = last && !last.ok ? "bad" : "muted";
}

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const resp = await fetch("/api/v1/dashboard", {cache: "no-store"});
    if (!resp.ok) throw new Error("admin API answered " + resp.status);
    const d = await resp.json();
    const t = new Date(d.time) / 1000;
    const dt = prev ? t - prev.t : 0;
    const c = counters(d);
    renderUpstreams(d, c, dt);
    renderListeners(d);
    renderProtection(d, dt);
    renderDiscovery(d);
    renderRegistry(d);
    renderTCP(d);
    renderReloads(d);
    prev = {t, c};
    conn.textContent = "live";
    conn.dataset.ok = "true";
    document.getElementById("clock").textContent = new Date(d.time).toLocaleTimeString();
  } catch (err) {
    conn.textContent = "disconnected: " + err.message;
    conn.dataset.ok = "false";
  }
  setTimeout(poll, POLL_MS);
}

poll();
