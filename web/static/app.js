// agentplane run viewer. Plain JavaScript, no dependencies. Every datum
// comes from the API of the same origin; text is put in the page with
// textContent only (never innerHTML), model and tool text is asked for in
// the render package's safe form (?render=safe), and the session cookie
// (HttpOnly) travels by itself; state-changing calls carry X-CSRF-Token.
"use strict";

const S = { session: null, csrf: "", es: null, timers: [], keys: null };

// ---------- helpers ----------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = String(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of kids.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const $ = (id) => document.getElementById(id);
function status(msg) { $("status").textContent = msg; }
function money(micros, cur) { return cur ? (micros / 1e6).toFixed(2) + " " + cur : (micros / 1e6).toFixed(4); }
function pct(x) { return (100 * x).toFixed(1) + "%"; }
function time(t) { return t ? new Date(t).toISOString().replace("T", " ").slice(0, 19) : ""; }
function terminal(st) { return ["completed", "completed_partial", "failed", "cancelled"].includes(st); }
function cleanup() {
  if (S.es) { S.es.close(); S.es = null; }
  for (const t of S.timers) clearInterval(t);
  S.timers = [];
  S.keys = null;
}

class APIError extends Error {
  constructor(status, body) { super((body && body.error && body.error.message) || ("HTTP " + status)); this.status = status; this.body = body; }
}
async function api(method, path, body, headers) {
  const h = Object.assign({}, headers || {});
  if (body !== undefined) h["Content-Type"] = "application/json";
  if (method !== "GET" && method !== "HEAD" && S.csrf) h["X-CSRF-Token"] = S.csrf;
  const r = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin", cache: "no-store" });
  if (r.status === 204) return null;
  const ct = r.headers.get("Content-Type") || "";
  const data = ct.includes("application/json") ? await r.json() : await r.text();
  if (!r.ok) {
    if (r.status === 401 && !path.startsWith("/v1/session")) showLogin("Your session ended; sign in again.");
    throw new APIError(r.status, data);
  }
  return data;
}

// ---------- sign in ----------
function showLogin(msg) {
  cleanup();
  S.session = null; S.csrf = "";
  $("nav").hidden = true; $("logout").hidden = true; $("who").textContent = "";
  $("view").replaceChildren();
  $("login").hidden = false;
  $("login-error").textContent = msg || "";
  $("api-key").focus();
}
async function signedIn(sess) {
  S.session = sess; S.csrf = sess.csrf_token;
  $("login").hidden = true; $("nav").hidden = false; $("logout").hidden = false;
  $("who").textContent = sess.user + " · " + sess.tenant;
  if (!location.hash || location.hash === "#" || location.hash === "#/login") location.hash = "#/runs";
  else route();
  refreshInboxCount();
}
async function boot() {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = $("api-key").value.trim();
    $("api-key").value = "";
    if (!key) return;
    try { await signedIn(await api("POST", "/v1/session", undefined, { Authorization: "Bearer " + key })); }
    catch (e) { $("login-error").textContent = e.status === 401 ? "That key was not accepted." : e.message; }
  });
  $("logout").addEventListener("click", async () => {
    try { await api("DELETE", "/v1/session"); } catch (e) { /* already gone */ }
    showLogin("Signed out.");
  });
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", onKey);
  try { await signedIn(await api("GET", "/v1/session")); } catch (e) { showLogin(); }
}

// ---------- keyboard ----------
function onKey(ev) {
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement && document.activeElement.tagName);
  if (ev.key === "Escape" && typing) { document.activeElement.blur(); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (ev.key === "/") { const f = document.querySelector("[data-filter]"); if (f) { ev.preventDefault(); f.focus(); } return; }
  if (S.keys && S.keys[ev.key]) { ev.preventDefault(); S.keys[ev.key](); }
}

// ---------- routing ----------
function parseHash() {
  const h = location.hash.replace(/^#\/?/, "");
  const [path, qs] = h.split("?");
  return { parts: path.split("/").map(decodeURIComponent), q: new URLSearchParams(qs || "") };
}
function route() {
  if (!S.session) return;
  cleanup();
  const { parts, q } = parseHash();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === "#/" + parts[0]);
  const v = $("view");
  v.replaceChildren();
  const fail = (e) => v.append(el("p", { class: "error", text: e.message }));
  switch (parts[0]) {
    case "run": return viewRun(v, parts[1]).catch(fail);
    case "diff": return viewDiff(v, parts[1]).catch(fail);
    case "approvals": return viewApprovals(v).catch(fail);
    case "metrics": return viewMetrics(v, q).catch(fail);
    default: return viewRuns(v, q).catch(fail);
  }
}

// ---------- runs list (virtualised) ----------
const ROW = 24, PAGE = 500, MAX_RUNS = 20000;
const FILTERS = [["agent", "agent"], ["version", "version"], ["status", "status"], ["user", "user"], ["prompt_hash", "prompt hash"]];

async function viewRuns(v, q) {
  const inputs = {};
  const bar = el("form", { class: "filters", id: "filters" });
  for (const [name, label] of FILTERS) {
    inputs[name] = el("input", { id: "f-" + name, name, placeholder: label, value: q.get(name) || "", "data-filter": name === "agent" ? "1" : null });
    bar.append(inputs[name]);
  }
  const count = el("span", { class: "muted", id: "runs-count" });
  bar.append(el("button", { type: "submit", text: "Filter" }), count, el("span", { class: "muted", text: "j/k move · Enter open · / filter" }));
  bar.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [n] of FILTERS) if (inputs[n].value.trim()) p.set(n, inputs[n].value.trim());
    location.hash = "#/runs" + (p.toString() ? "?" + p : "");
  });
  const head = el("div", { class: "row head" }, ["run", "agent", "ver", "status", "created", "steps", "cost", "user"].map((t) => el("span", { text: t })));
  const spacer = el("div", { id: "runs-spacer" });
  const scroll = el("div", { id: "runs-scroll" }, head, spacer);
  v.append(el("h1", { text: "Runs" }), bar, scroll);

  const params = new URLSearchParams({ order: "newest", limit: String(PAGE) });
  for (const [n] of FILTERS) if (q.get(n)) params.set(n, q.get(n));
  const runs = [], byID = new Map();
  let sel = 0;
  // Only the visible window (plus a margin) is in the DOM; moving the
  // selection inside it changes two classes, and a new window is built
  // once per animation frame.
  const rowEls = new Map();
  let win = { first: -1, last: -1, len: -1 }, shown = -1, queued = false;
  const mark = () => {
    if (shown !== sel) {
      const a = rowEls.get(shown), b = rowEls.get(sel);
      if (a) a.classList.remove("sel");
      if (b) b.classList.add("sel");
      shown = sel;
    }
  };
  const draw = (force) => {
    const first = Math.max(0, Math.floor(scroll.scrollTop / ROW) - 10);
    const last = Math.min(runs.length, first + Math.ceil(scroll.clientHeight / ROW) + 20);
    if (!force && first === win.first && last === win.last && runs.length === win.len) { mark(); return; }
    spacer.style.height = (runs.length * ROW) + "px";
    rowEls.clear();
    const rows = [];
    for (let i = first; i < last; i++) {
      const r = runs[i];
      const row = el("div", { class: "row" + (i === sel ? " sel" : ""), "data-run": r.id, onclick: () => { location.hash = "#/run/" + r.id; } },
        el("span", { class: "mono", text: r.id }), el("span", { text: r.agent }), el("span", { text: r.agent_version }),
        el("span", { class: "st-" + r.status, text: r.status }), el("span", { class: "mono", text: time(r.created_at) }),
        el("span", { text: r.usage.steps }), el("span", { text: r.usage.cost_known ? money(r.usage.cost_micros, r.usage.currency) : "?" }),
        el("span", { text: r.user }));
      row.style.top = (i * ROW) + "px"; // within the spacer, which starts below the header
      rowEls.set(i, row);
      rows.push(row);
    }
    spacer.replaceChildren(...rows);
    win = { first, last, len: runs.length };
    shown = sel;
    count.textContent = runs.length + " runs";
  };
  scroll.addEventListener("scroll", () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; draw(false); });
  });
  const move = (d) => {
    if (!runs.length) return;
    sel = Math.max(0, Math.min(runs.length - 1, sel + d));
    const top = sel * ROW;
    if (top < scroll.scrollTop) scroll.scrollTop = top;
    else if (top + 2 * ROW > scroll.scrollTop + scroll.clientHeight) scroll.scrollTop = top + 2 * ROW - scroll.clientHeight;
    // The window follows the selection now, not on the scroll event's next
    // frame: key presses faster than frames (a held key, or events sent in
    // one task) would otherwise move the selection out of the drawn rows.
    draw(false);
  };
  S.keys = { j: () => move(1), k: () => move(-1), Enter: () => runs[sel] && (location.hash = "#/run/" + runs[sel].id) };
  const gen = S.timers; // this view's generation
  for (let off = 0; off < MAX_RUNS; off += PAGE) {
    params.set("offset", String(off));
    const page = await api("GET", "/v1/runs?" + params + "&render=safe");
    if (gen !== S.timers) return; // the view changed
    for (const r of page.runs) { byID.set(r.id, r); runs.push(r); }
    draw(true);
    if (page.runs.length < PAGE) break;
  }
  status(runs.length + " runs loaded");
  // Live status: the newest page is read again every 3 s and merged.
  S.timers.push(setInterval(async () => {
    params.set("offset", "0");
    let page;
    try { page = await api("GET", "/v1/runs?" + params + "&render=safe"); } catch (e) { return; }
    const fresh = [];
    for (const r of page.runs) {
      const old = byID.get(r.id);
      if (old) Object.assign(old, r); else { byID.set(r.id, r); fresh.push(r); }
    }
    if (fresh.length) { runs.unshift(...fresh); sel += fresh.length; }
    draw(true);
    status("live · " + new Date().toLocaleTimeString());
  }, 3000));
}

// ---------- a run's timeline ----------
function summary(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "run_started": return `${p.agent} v${p.agent_version} · model ${p.model_alias} · user ${p.user}` + (p.replay ? ` · replay of ${p.replay.of} from step ${p.replay.from_step} (${p.replay.mode})` : "") + "\ntask: " + (p.task || "");
    case "step_started": return `usage so far: ${p.input_tokens} input tokens · ${money(p.cost_micros)} · ${p.elapsed_ms} ms`;
    case "model_call": {
      const u = (p.response && p.response.usage) || {};
      const calls = ((p.response && p.response.content) || []).filter((c) => c.type === "tool_use").map((c) => c.name);
      const text = ((p.response && p.response.content) || []).filter((c) => c.type === "text").map((c) => c.text).join("");
      return `${p.model || p.alias} · in ${u.input_tokens || 0} (cache read ${u.cache_read_tokens || 0}, write ${u.cache_creation_tokens || 0}) · out ${u.output_tokens || 0} · ${p.cost_known ? money(p.cost_micros, p.currency) : "cost ?"} · ${p.latency_ms} ms` +
        (p.replayed_from ? ` · served from the recording (seq ${p.replayed_from})` : "") + (p.error ? "\nerror: " + p.error : "") +
        (calls.length ? "\ncalls: " + calls.join(", ") : "") + (text ? "\n" + text : "");
    }
    case "tool_attempt": {
      const d = p.decision || {};
      return `${p.tool} · tier ${p.tier || 1} · side effects ${p.side_effects || "none"} · ${d.allowed ? "allowed" : "refused"} by ${d.control || "?"}` + (d.rule ? ` (${d.rule})` : "") + (d.reason ? "\n" + d.reason : "") + "\nargs: " + contentText(p.args);
    }
    case "tool_result": {
      const sb = p.sandbox;
      return `${p.tool} · ${p.status} · ${p.latency_ms} ms · ${p.bytes} bytes` + (p.truncated ? " (truncated)" : "") + (p.replayed ? ` · replayed: ${p.replayed}` : "") + (p.redactions ? ` · ${p.redactions} redactions` : "") +
        (sb ? `\nsandbox ${sb.executor} tier ${sb.tier} · ${sb.lifecycle} · provision ${sb.provision_ms} ms · wall ${sb.wall_ms} ms · ${sb.outcome} exit ${sb.exit_code}` + (sb.unclean ? " · " + sb.unclean : "") : "") +
        "\n" + contentText(p.output);
    }
    case "approval_requested": return `${p.description}\nasks ${p.group}` + (p.groups && p.groups.length > 1 ? ` (needs ${p.groups.join(", ")})` : "") + ` · expires ${time(p.expires_at)}` + ((p.warnings || []).length ? "\n⚠ " + p.warnings.join("\n⚠ ") : "");
    case "approval_decided": return `${p.outcome} by ${p.decider || "timer"}` + (p.comment ? ` · “${p.comment}”` : "") + (p.edited_args ? `\nfrom ${p.previous_args || "?"}\nto   ${p.edited_args}` : "");
    case "taint": return `tainted by ${p.source || "tool_output"}` + (p.tool ? ` (${p.tool})` : "") + (p.detail ? " · " + p.detail : "");
    case "loop_note": return `${p.reason}: ${p.text}`;
    case "budget_exceeded": return `budget ${p.bound}: ${p.value} of ${p.limit}`;
    case "signal": return `${p.kind}`;
    case "replay_diverged": return `diverged at step ${p.step} call ${p.index}: ${p.reason}`;
    case "compaction": return `compacted ${p.compacted_messages} messages, kept ${p.kept_messages}`;
    case "sandbox_teardown": return (p.sandboxes || []).map((s) => `${s.id} by ${s.by}: ${s.reason}`).join("\n");
    case "run_completed": case "run_failed": return `${p.status}` + (p.reason ? " · " + p.reason : "") + (p.result ? "\n" + p.result : "");
    default: return "";
  }
}
function contentText(c) {
  if (!c) return "";
  if (c.blob) return `[${c.size} bytes, blob ${c.blob.slice(0, 12)}…] ` + (c.preview || "");
  return c.text || "";
}
function blobsOf(v, out) {
  if (v && typeof v === "object") {
    if (typeof v.blob === "string" && /^[0-9a-f]{64}$/.test(v.blob)) out.push(v.blob);
    for (const x of Object.values(v)) blobsOf(x, out);
  }
  return out;
}

// timeline renders events into box and returns a function that appends more.
function timeline(box, runID, onSelect) {
  const rows = [];
  let sel = -1;
  const select = (i) => {
    if (sel >= 0 && rows[sel]) rows[sel].classList.remove("sel");
    sel = Math.max(0, Math.min(rows.length - 1, i));
    if (!rows[sel]) return;
    rows[sel].classList.add("sel");
    rows[sel].scrollIntoView({ block: "nearest" });
    if (onSelect) onSelect(rows[sel].ev);
  };
  const add = (evs) => {
    const frag = document.createDocumentFragment();
    for (const ev of evs) {
      const i = rows.length;
      const row = el("div", { class: "tl k-" + ev.type, "data-seq": ev.seq, "data-type": ev.type, onclick: () => select(i) },
        el("span", { class: "mono muted", text: "#" + ev.seq }), el("span", { class: "muted", text: "s" + ev.step }),
        el("span", { class: "kind", text: ev.type }), el("span", { class: "body", text: summary(ev) }));
      row.ev = ev;
      rows.push(row);
      frag.append(row);
    }
    box.append(frag);
  };
  return { add, select, move: (d) => select(sel + d), get selected() { return rows[sel] && rows[sel].ev; } };
}

async function allEvents(runID, after) {
  const out = [];
  for (;;) {
    const page = await api("GET", `/v1/runs/${encodeURIComponent(runID)}/events?render=safe&limit=5000&after=${after}`);
    out.push(...page.events);
    if (page.events.length < 5000) return { events: out, status: page.status };
    after = page.events[page.events.length - 1].seq;
  }
}

// follow keeps a timeline current while its run executes: the stream says
// when there is more, and the new events are read as safe JSON.
function follow(runID, last, onEvents, onStatus) {
  let busy = false, again = false;
  const pull = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        const { events, status: st } = await allEvents(runID, last);
        if (events.length) { last = events[events.length - 1].seq; onEvents(events); }
        onStatus(st);
      } while (again);
    } catch (e) { status(e.message); }
    busy = false;
  };
  const es = new EventSource(`/v1/runs/${encodeURIComponent(runID)}/events?after=${last}`, { withCredentials: true });
  const types = ["run.started", "step.started", "step.model_call", "step.compacted", "step.tool_call", "step.tool_result", "step.loop_note",
    "approval.required", "approval.decided", "run.signal", "run.tainted", "run.budget_exceeded", "replay.diverged", "sandbox.teardown",
    "run.completed", "run.failed", "run.cancelled", "run.waiting", "log.event"];
  for (const t of types) es.addEventListener(t, pull);
  es.addEventListener("stream.end", () => { es.close(); pull(); });
  es.onerror = () => { if (es.readyState === EventSource.CLOSED) pull(); };
  return es;
}

async function viewRun(v, runID) {
  const run = await api("GET", `/v1/runs/${encodeURIComponent(runID)}?render=safe`);
  const head = el("div", { id: "run-head" });
  const drawHead = (r) => head.replaceChildren(
    el("h1", {}, "Run ", el("span", { class: "mono", text: r.id })),
    el("div", {}, el("span", { class: "badge", text: r.agent + " v" + r.agent_version }), el("span", { id: "run-status", class: "badge st-" + r.status, text: r.status }),
      el("span", { class: "badge", text: r.usage.steps + " steps" }), el("span", { class: "badge", text: r.usage.input_tokens + " in / " + r.usage.output_tokens + " out" }),
      el("span", { class: "badge", text: r.usage.cost_known ? money(r.usage.cost_micros, r.usage.currency) : "cost ?" }),
      (r.output_flags || []).map((f) => el("span", { class: "badge bad", text: "neutralised: " + f })),
      r.parent_run_id ? el("a", { href: "#/diff/" + r.id, text: "diff with original " + r.parent_run_id }) : null),
    r.output ? el("pre", { class: "payload", id: "run-output", text: r.output }) : null);
  drawHead(run);
  const box = el("div", { id: "timeline" });
  const detail = el("div", { id: "detail" }, el("p", { class: "muted", text: "Select an event (j/k) to see its payload, its blobs and, for a model call, the prompt as sent." }));
  const tl = timeline(box, runID, (ev) => showDetail(detail, runID, ev));
  v.append(head, replayForm(run), el("div", { class: "split" }, box, detail));
  const { events } = await allEvents(runID, 0);
  tl.add(events);
  S.keys = { j: () => tl.move(1), k: () => tl.move(-1) };
  status(events.length + " events");
  if (!terminal(run.status)) {
    const last = events.length ? events[events.length - 1].seq : 0;
    S.es = follow(runID, last, (evs) => { tl.add(evs); status("live · " + evs.length + " new events"); }, async (st) => {
      const r = await api("GET", `/v1/runs/${encodeURIComponent(runID)}?render=safe`);
      drawHead(r);
    });
    $("status").classList.add("live");
  }
}

async function showDetail(box, runID, ev) {
  const kids = [el("h2", { text: `#${ev.seq} ${ev.type} (step ${ev.step})` }), el("div", { class: "muted mono", text: "hash " + ev.hash })];
  kids.push(el("pre", { class: "payload", id: "payload", text: JSON.stringify(ev.payload, null, 2) }));
  const actions = el("div", { class: "actions" });
  if (ev.type === "model_call") {
    actions.append(el("button", { id: "show-prompt", text: "Prompt as sent", onclick: async () => {
      const p = await api("GET", `/v1/runs/${encodeURIComponent(runID)}/prompt?render=safe&seq=${ev.seq}`);
      const out = el("div", { id: "prompt" }, el("div", { class: p.verified ? "badge ok" : "badge bad", text: p.verified ? "hash matches the recorded prompt_hash" : "hash differs from the recording" }),
        el("div", { class: "muted", text: "tools: " + p.tools.join(", ") }), el("pre", { class: "payload", text: "system:\n" + p.system }));
      for (const m of p.messages) {
        out.append(el("pre", { class: "payload", text: m.role + ":\n" + m.parts.map((x) => x.type === "text" ? x.text : x.type + " " + (x.name || x.id || "") + " " + (x.input ? JSON.stringify(x.input) : x.text || "")).join("\n") }));
      }
      box.append(out);
    } }));
  }
  for (const h of new Set(blobsOf(ev.payload, []))) {
    actions.append(el("button", { class: "blob", text: "Load blob " + h.slice(0, 12) + "…", onclick: async () => {
      const text = await api("GET", `/v1/runs/${encodeURIComponent(runID)}/blobs/${h}?render=safe`);
      box.append(el("pre", { class: "payload blob-text", text: typeof text === "string" ? text : JSON.stringify(text, null, 2) }));
    } }));
  }
  kids.push(actions);
  box.replaceChildren(...kids);
}

function replayForm(run) {
  if (!terminal(run.status)) return el("div");
  const f = el("form", { class: "actions", id: "replay-form" },
    el("strong", { text: "Replay" }), "from step", el("input", { id: "r-step", type: "number", min: "1", value: "1", style: null }),
    el("select", { id: "r-mode" }, el("option", { value: "live", text: "live model" }), el("option", { value: "recorded", text: "recorded model" })),
    el("input", { id: "r-model", placeholder: "model alias" }), el("input", { id: "r-version", placeholder: "agent version" }),
    el("input", { id: "r-instructions", placeholder: "instructions (patch)" }), el("button", { type: "submit", id: "r-go", text: "Start replay" }),
    el("span", { class: "error", id: "r-error" }));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { from_step: Number($("r-step").value) || 1, mode: $("r-mode").value };
    if ($("r-model").value.trim()) body.model_alias = $("r-model").value.trim();
    if ($("r-version").value.trim()) body.version = /^\d+$/.test($("r-version").value.trim()) ? Number($("r-version").value.trim()) : $("r-version").value.trim();
    if ($("r-instructions").value.trim()) body.instructions = $("r-instructions").value.trim();
    try {
      const r = await api("POST", `/v1/runs/${encodeURIComponent(run.id)}:replay`, body);
      location.hash = "#/diff/" + r.id;
    } catch (e) { $("r-error").textContent = e.message; }
  });
  return f;
}

// ---------- replay diff ----------
async function viewDiff(v, replayID) {
  const rep = await api("GET", `/v1/runs/${encodeURIComponent(replayID)}?render=safe`);
  if (!rep.parent_run_id) throw new Error("run " + replayID + " is not a replay");
  const orig = await api("GET", `/v1/runs/${encodeURIComponent(rep.parent_run_id)}?render=safe`);
  const colA = el("div", { id: "diff-original" }), colB = el("div", { id: "diff-replay" });
  const hdr = (r, label) => el("h2", {}, label + " ", el("a", { href: "#/run/" + r.id, class: "mono", text: r.id }), " ", el("span", { class: "badge st-" + r.status, "data-status": "1", text: r.status }));
  const hB = hdr(rep, "replay");
  v.append(el("h1", { text: "Replay beside its original" }), el("div", { id: "divergence", class: "muted" }), el("div", { class: "split" }, el("div", {}, hdr(orig, "original"), colA), el("div", {}, hB, colB)));
  const A = timeline(colA, orig.id), B = timeline(colB, rep.id);
  const a = await allEvents(orig.id, 0), b = await allEvents(rep.id, 0);
  A.add(a.events); B.add(b.events);
  const mark = (evs) => {
    const d = evs.find((e) => e.type === "replay_diverged");
    if (d) $("divergence").textContent = "First divergence: " + summary(d);
  };
  mark(b.events);
  S.keys = { j: () => B.move(1), k: () => B.move(-1) };
  if (!terminal(rep.status)) {
    S.es = follow(rep.id, b.events.length ? b.events[b.events.length - 1].seq : 0, (evs) => { B.add(evs); mark(evs); }, (st) => {
      const s = hB.querySelector("[data-status]"); s.textContent = st; s.className = "badge st-" + st;
    });
  }
}

// ---------- approvals inbox ----------
async function refreshInboxCount() {
  try { const l = await api("GET", "/v1/approvals?decidable=true&render=safe"); $("inbox-count").textContent = l.approvals.length ? "(" + l.approvals.length + ")" : ""; } catch (e) { /* shown elsewhere */ }
}
async function viewApprovals(v) {
  v.append(el("h1", { text: "Approvals for your groups" }));
  const list = el("div", { id: "approvals" });
  v.append(list);
  let cards = [], sel = 0;
  const load = async () => {
    const l = await api("GET", "/v1/approvals?decidable=true&render=safe");
    $("inbox-count").textContent = l.approvals.length ? "(" + l.approvals.length + ")" : "";
    cards = l.approvals.map(card);
    list.replaceChildren(...(cards.length ? cards : [el("p", { class: "muted", id: "inbox-empty", text: "Nothing waits for you." })]));
    sel = Math.min(sel, Math.max(0, cards.length - 1));
    if (cards[sel]) cards[sel].classList.add("sel");
  };
  const decide = async (a, decision, extra, errBox) => {
    try {
      await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}:decide`, Object.assign({ decision }, extra));
      status(`${decision} sent for ${a.tool} (run ${a.run_id})`);
      await load();
    } catch (e) { errBox.textContent = e.message; }
  };
  const card = (a) => {
    const args = a.args ? JSON.stringify(a.args, null, 2) : (a.args_preview || "");
    const ta = el("textarea", { class: "edit-args", text: args });
    const comment = el("input", { class: "comment", placeholder: "comment (shown to the model)" });
    const err = el("div", { class: "error" });
    const c = el("div", { class: "card", "data-approval": a.id },
      el("div", { class: "what" }, el("strong", { text: a.description })),
      el("div", { class: "muted" }, `${a.tool} · asks ${a.group} · requested by ${a.requester} · expires ${time(a.expires_at)} · `, el("a", { href: "#/run/" + a.run_id, text: "run " + a.run_id })),
      (a.warnings || []).map((w) => el("div", { class: "error", text: "⚠ " + w })),
      el("pre", { class: "payload", text: args }),
      el("div", { class: "actions" },
        el("button", { class: "primary approve", text: "Approve", onclick: () => decide(a, "approve", comment.value ? { comment: comment.value } : {}, err) }),
        el("button", { class: "danger reject", text: "Reject", onclick: () => decide(a, "reject", comment.value ? { comment: comment.value } : {}, err) }),
        comment),
      el("details", {}, el("summary", { text: "Edit the arguments" }), ta,
        el("button", { class: "edit", text: "Approve with these arguments", onclick: () => {
          let parsed;
          try { parsed = JSON.parse(ta.value); } catch (e) { err.textContent = "The arguments are not valid JSON: " + e.message; return; }
          decide(a, "edit", Object.assign({ args: parsed }, comment.value ? { comment: comment.value } : {}), err);
        } })),
      err);
    return c;
  };
  const move = (d) => { if (!cards.length) return; cards[sel].classList.remove("sel"); sel = Math.max(0, Math.min(cards.length - 1, sel + d)); cards[sel].classList.add("sel"); cards[sel].scrollIntoView({ block: "nearest" }); };
  S.keys = { j: () => move(1), k: () => move(-1) };
  await load();
  S.timers.push(setInterval(() => load().catch(() => {}), 5000));
}

// ---------- versions side by side ----------
async function viewMetrics(v, q) {
  const agents = (await api("GET", "/v1/agents")).agents;
  const agentSel = el("select", { id: "m-agent", "data-filter": "1" }, agents.map((a) => el("option", { value: a.name, text: a.name, selected: a.name === q.get("agent") })));
  const va = el("input", { id: "m-a", placeholder: "version A", value: q.get("a") || "" });
  const vb = el("input", { id: "m-b", placeholder: "version B", value: q.get("b") || "" });
  const form = el("form", { class: "filters", id: "metrics-form" }, agentSel, va, vb, el("button", { type: "submit", text: "Compare" }));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = `#/metrics?agent=${encodeURIComponent(agentSel.value)}&a=${encodeURIComponent(va.value)}&b=${encodeURIComponent(vb.value)}`; });
  v.append(el("h1", { text: "Agent versions, online metrics" }), form);
  const agent = q.get("agent") || (agents[0] && agents[0].name);
  if (!agent) return;
  const vs = [q.get("a"), q.get("b")].filter((x) => x && /^\d+$/.test(x));
  const m = await api("GET", `/v1/agents/${encodeURIComponent(agent)}/metrics` + (vs.length ? "?versions=" + vs.join(",") : ""));
  const rows = [
    ["runs read", (x) => x.runs], ["ended", (x) => x.ended], ["task success", (x) => pct(x.task_success)],
    ["cost per successful task", (x) => x.cost_known ? money(x.cost_per_success_micros, x.currency) : "unknown"],
    ["steps p50", (x) => x.steps_p50], ["steps p95", (x) => x.steps_p95],
    ["human-override rate", (x) => `${pct(x.override_rate)} (${x.overridden}/${x.decisions})`],
    ["tool error rate", (x) => `${pct(x.tool_error_rate)} (${x.tool_errors}/${x.tool_results})`],
    ["stopped by budgets", (x) => `${pct(x.budget_stop_rate)} (${x.stopped_by_budget})`],
    ["stopped by loop detection", (x) => `${pct(x.loop_stop_rate)} (${x.stopped_by_loop})`],
  ];
  v.append(el("table", { class: "metrics", id: "metrics" },
    el("tr", {}, el("th", { text: agent }), m.versions.map((x) => el("th", { text: "v" + x.version }))),
    rows.map(([label, f]) => el("tr", {}, el("td", { text: label }), m.versions.map((x) => el("td", { text: f(x) }))))));
  v.append(el("p", { class: "muted", text: "Task success counts runs that ended completed; cost per successful task divides the cost of every ended run by them." }));
}

document.addEventListener("DOMContentLoaded", boot);
