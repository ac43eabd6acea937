"use strict";
// agentd's web page: a chat over /v1/chat/completions and agent sessions over /v1/sessions. Same origin only
// (every URL is relative); the API key, when the server has one, lives in this tab's sessionStorage.

const $ = (id) => document.getElementById(id);
const KEY = "agentd.apiKey";

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = sessionStorage.getItem(KEY);
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method, headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = { raw: text }; }
  if (!res.ok) {
    if (res.status === 401) askKey();
    const msg = (data && data.error && data.error.message) || res.status + " " + res.statusText;
    throw new Error(msg);
  }
  return data;
}

// Throws the API's error message for a failed response (asking for the key on a 401).
async function failUnlessOk(res) {
  if (res.ok) return;
  const err = await res.json().catch(() => ({}));
  if (res.status === 401) askKey();
  throw new Error((err.error && err.error.message) || res.status + " " + res.statusText);
}

// Reads a server-sent-event response, calling onData with each `data:` payload (parsed JSON, or the string).
async function readSse(res, onData) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      let parsed = data;
      try { parsed = JSON.parse(data); } catch (_) { /* [DONE] */ }
      onData(parsed);
    }
  }
}

function status(text) { $("status").textContent = text; }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Markdown, small and safe: everything is escaped first; then code fences, inline code, headings, lists,
// bold, italics and paragraphs. Links stay text.
function inline(s) {
  return s.replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
}

function markdown(src) {
  const out = [];
  const parts = src.split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const nl = part.indexOf("\n");
      const lang = nl >= 0 ? part.slice(0, nl).trim() : "";
      const code = nl >= 0 ? part.slice(nl + 1) : part;
      out.push('<pre><code' + (lang ? ' data-lang="' + escapeHtml(lang) + '"' : "") + ">" +
        escapeHtml(code.replace(/\n$/, "")) + "</code></pre>");
      return;
    }
    let list = null;
    let para = [];
    const flush = () => {
      if (para.length) { out.push("<p>" + para.join("<br>") + "</p>"); para = []; }
      if (list) { out.push("</" + list + ">"); list = null; }
    };
    for (const raw of part.split("\n")) {
      const line = escapeHtml(raw);
      let m;
      if (!line.trim()) { flush(); continue; }
      if ((m = line.match(/^(#{1,4})\s+(.*)$/))) {
        flush();
        const n = m[1].length + 2;
        out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">");
      } else if ((m = line.match(/^\s*(?:[-*]|(\d+)\.)\s+(.*)$/))) {
        if (para.length) { out.push("<p>" + para.join("<br>") + "</p>"); para = []; }
        const kind = m[1] ? "ol" : "ul";
        if (list !== kind) { if (list) out.push("</" + list + ">"); out.push("<" + kind + ">"); list = kind; }
        out.push("<li>" + inline(m[2]) + "</li>");
      } else {
        if (list) { out.push("</" + list + ">"); list = null; }
        para.push(inline(line));
      }
    }
    flush();
  });
  return out.join("");
}

function scrollDown(log) { log.scrollTop = log.scrollHeight; }

// ---- API key ---------------------------------------------------------------------------------------------------
function askKey() {
  const d = $("key-dialog");
  if (d.open) return;
  $("key-input").value = sessionStorage.getItem(KEY) || "";
  d.showModal();
}
$("key-button").addEventListener("click", askKey);
$("key-dialog").addEventListener("close", () => {
  if ($("key-dialog").returnValue === "save") {
    const k = $("key-input").value.trim();
    if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
    loadModels();
    refreshSessions();
  }
});

// ---- tabs ------------------------------------------------------------------------------------------------------
function show(which) {
  for (const name of ["chat", "agent"]) {
    $("view-" + name).classList.toggle("hidden", name !== which);
    $("tab-" + name).classList.toggle("active", name === which);
  }
  if (which === "agent") refreshSessions();
}
$("tab-chat").addEventListener("click", () => show("chat"));
$("tab-agent").addEventListener("click", () => show("agent"));

// ---- chat ------------------------------------------------------------------------------------------------------
const chat = { messages: [], controller: null };

async function loadModels() {
  try {
    const data = await api("GET", "/v1/models");
    const select = $("chat-model");
    select.textContent = "";
    for (const m of data.data || []) {
      const o = el("option", "", m.id);
      o.value = m.id;
      select.appendChild(o);
    }
    status((data.data || []).length + " model(s) · ready");
  } catch (e) {
    status("models: " + e.message);
  }
}

function addMessage(log, role, text) {
  const div = el("div", "msg " + role);
  if (role === "assistant") div.innerHTML = markdown(text); else div.textContent = text;
  log.appendChild(div);
  scrollDown(log);
  return div;
}

async function sendChat(text) {
  const log = $("chat-log");
  chat.messages.push({ role: "user", content: text });
  addMessage(log, "user", text);
  const bubble = addMessage(log, "assistant", "");
  bubble.classList.add("streaming");
  const system = $("chat-system").value.trim();
  const body = {
    model: $("chat-model").value || undefined,
    messages: (system ? [{ role: "system", content: system }] : []).concat(chat.messages),
    stream: true,
    stream_options: { include_usage: true },
  };
  const temperature = parseFloat($("chat-temperature").value);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  const maxTokens = parseInt($("chat-max-tokens").value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  chat.controller = new AbortController();
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  let reply = "";
  let firstToken = 0;
  let usage = null;
  let finish = "";
  const started = performance.now();
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(true), body: JSON.stringify(body), signal: chat.controller.signal,
    });
    await failUnlessOk(res);
    await readSse(res, (chunk) => {
      if (typeof chunk !== "object" || chunk === null) return;
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        const delta = (c.delta && c.delta.content) || "";
        if (delta) {
          if (!firstToken) firstToken = performance.now();
          reply += delta;
          bubble.innerHTML = markdown(reply);
          scrollDown(log);
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else addMessage(log, "error", e.message);
  } finally {
    bubble.classList.remove("streaming");
    chat.controller = null;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
  if (reply) chat.messages.push({ role: "assistant", content: reply });
  const secs = firstToken ? (performance.now() - firstToken) / 1000 : 0;
  const parts = [];
  if (usage) {
    parts.push(usage.prompt_tokens + " prompt + " + usage.completion_tokens + " completion tokens");
    if (secs > 0 && usage.completion_tokens > 1) {
      parts.push(((usage.completion_tokens - 1) / secs).toFixed(1) + " tokens/s");
    }
  }
  if (firstToken) parts.push("first token " + ((firstToken - started) / 1000).toFixed(2) + " s");
  if (finish) parts.push("finish: " + finish);
  $("chat-stats").textContent = parts.join(" · ");
}

$("chat-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text || chat.controller) return;
  $("chat-input").value = "";
  sendChat(text);
});
$("chat-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
});
$("chat-stop").addEventListener("click", () => { if (chat.controller) chat.controller.abort(); });
$("chat-clear").addEventListener("click", () => {
  if (chat.controller) chat.controller.abort();
  chat.messages = [];
  $("chat-log").textContent = "";
  $("chat-stats").textContent = "";
});

// ---- agent sessions --------------------------------------------------------------------------------------------
const agent = { id: null, running: false, tools: {}, bubble: null };

function setRunning(on) {
  agent.running = on;
  $("agent-abort").disabled = !on;
  $("agent-send").disabled = !agent.id;
  $("agent-send").textContent = on ? "Steer" : "Send";
}

function messageText(m) {
  if (!m) return "";
  if (typeof m.content === "string") return m.content;
  return (m.content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}

function renderMessage(m) {
  const log = $("agent-log");
  switch (m.role) {
    case "user": addMessage(log, "user", m.content); break;
    case "assistant": {
      const text = messageText(m);
      if (text) addMessage(log, "assistant", text);
      for (const b of m.content || []) if (b.type === "tool_call") toolBox(b.id, b.name, b.arguments);
      if (m.error_message && m.stop_reason !== "aborted") addMessage(log, "error", m.error_message);
      break;
    }
    case "tool_result": finishTool(m.tool_call_id, m.content, m.is_error); break;
    case "compaction_summary": addMessage(log, "note", "(compacted) " + m.summary); break;
    case "branch_summary": addMessage(log, "note", "(branch summary) " + m.summary); break;
    case "bash_execution": addMessage(log, "note", "$ " + m.command + "\n" + m.output); break;
    default: break;
  }
}

function toolBox(id, name, args) {
  if (agent.tools[id]) return agent.tools[id];
  const d = el("details", "tool");
  const summary = el("summary", "", "● " + name + " " + briefArgs(args));
  const argsPre = el("pre", "", JSON.stringify(args, null, 2));
  const out = el("pre", "output", "");
  d.append(summary, argsPre, out);
  $("agent-log").appendChild(d);
  scrollDown($("agent-log"));
  agent.tools[id] = { box: d, summary, out, name };
  return agent.tools[id];
}

function briefArgs(args) {
  if (!args || typeof args !== "object") return "";
  const first = args.command || args.path || args.pattern || "";
  return String(first).split("\n")[0].slice(0, 80);
}

function finishTool(id, content, isError) {
  const t = agent.tools[id] || toolBox(id, "tool", {});
  t.out.textContent = content;
  t.box.classList.add(isError ? "failed" : "done");
  t.summary.textContent = (isError ? "✗ " : "✓ ") + t.summary.textContent.replace(/^[●✓✗] /, "");
}

function onAgentEvent(ev) {
  if (typeof ev !== "object" || ev === null) return;
  const log = $("agent-log");
  switch (ev.type) {
    case "agent_start": setRunning(true); break;
    case "message_start":
      if (ev.message.role === "user") renderMessage(ev.message);
      if (ev.message.role === "assistant") { agent.bubble = addMessage(log, "assistant", ""); }
      break;
    case "message_update":
      if (ev.message.role === "assistant" && agent.bubble) {
        agent.bubble.innerHTML = markdown(messageText(ev.message));
        scrollDown(log);
      }
      break;
    case "message_end":
      if (ev.message.role === "assistant") {
        if (agent.bubble && !messageText(ev.message)) agent.bubble.remove();
        else if (agent.bubble) agent.bubble.innerHTML = markdown(messageText(ev.message));
        agent.bubble = null;
        if (ev.message.error_message && ev.message.stop_reason !== "aborted") {
          addMessage(log, "error", ev.message.error_message);
        }
      }
      break;
    case "tool_execution_start": toolBox(ev.tool_call_id, ev.tool_name, ev.args); break;
    case "tool_execution_update": {
      const t = toolBox(ev.tool_call_id, ev.tool_name, {});
      t.out.textContent += ev.partial;
      break;
    }
    case "tool_execution_end": finishTool(ev.tool_call_id, ev.result.content, ev.is_error); break;
    case "approval_request": showApproval(ev); break;
    case "compaction": addMessage(log, "note", "(context compacted: " + ev.tokens_before + " → " +
      ev.tokens_after + " tokens)"); break;
    case "agent_end":
      setRunning(false);
      $("agent-approvals").textContent = "";
      if (ev.reason === "aborted") addMessage(log, "note", "(aborted)");
      else if (ev.error) addMessage(log, "error", ev.error);
      else if (ev.reason !== "completed") addMessage(log, "note", "(" + ev.reason + ")");
      loadTree();
      break;
    default: break;
  }
}

function showApproval(req) {
  const box = el("div", "approval");
  box.appendChild(el("strong", "", "Allow " + req.tool_name + " (" + (req.tags || []).join(", ") + ")?"));
  const pre = el("pre");
  for (const line of String(req.preview).split("\n")) {
    const span = el("span", line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : "", line + "\n");
    pre.appendChild(span);
  }
  box.appendChild(pre);
  const answer = async (decision) => {
    box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      await api("POST", "/v1/sessions/" + agent.id + "/approve", { id: req.id, decision });
      box.remove();
    } catch (e) { addMessage($("agent-log"), "error", "approve: " + e.message); box.remove(); }
  };
  for (const [label, decision] of [["Allow", "allow"], ["Always", "always"], ["Deny", "deny"]]) {
    const b = el("button", "small", label);
    b.type = "button";
    b.dataset.decision = decision;
    b.addEventListener("click", () => answer(decision));
    box.appendChild(b);
  }
  $("agent-approvals").appendChild(box);
}

async function promptAgent(text) {
  setRunning(true);
  try {
    const res = await fetch("/v1/sessions/" + agent.id + "/prompt", {
      method: "POST", headers: headers(true), body: JSON.stringify({ content: text }),
    });
    await failUnlessOk(res);
    await readSse(res, onAgentEvent);
  } catch (e) {
    addMessage($("agent-log"), "error", e.message);
  } finally {
    setRunning(false);
  }
}

async function openSession(info) {
  agent.id = info.id;
  agent.tools = {};
  $("agent-log").textContent = "";
  $("agent-approvals").textContent = "";
  $("agent-title").textContent = "session " + info.id + " · " + (info.workspace || "") + " · tools: " +
    (info.tools || []).join(", ");
  setRunning(info.status === "running");
  try {
    const data = await api("GET", "/v1/sessions/" + info.id + "/messages");
    for (const m of data.messages || data.data || []) renderMessage(m);
  } catch (e) { addMessage($("agent-log"), "error", e.message); }
  loadTree();
  refreshSessions();
}

async function refreshSessions() {
  const list = $("agent-sessions");
  try {
    const live = await api("GET", "/v1/sessions");
    const ws = $("agent-workspace").value.trim();
    const saved = await api("GET", "/v1/sessions/saved" + (ws ? "?workspace=" + encodeURIComponent(ws) : ""));
    list.textContent = "";
    const liveIds = new Set();
    for (const s of live.data || []) {
      liveIds.add(s.id);
      const li = el("li");
      li.appendChild(el("span", "", (s.id === agent.id ? "▶ " : "") + s.id.slice(0, 8) + " · " + s.status));
      const b = el("button", "small", "open");
      b.type = "button";
      b.addEventListener("click", () => openSession(s));
      li.appendChild(b);
      list.appendChild(li);
    }
    for (const s of saved.data || []) {
      if (liveIds.has(s.id)) continue;
      const li = el("li");
      li.appendChild(el("span", "muted", s.id.slice(0, 8) + " · " + (s.name || s.first_message || "") ));
      const b = el("button", "small", "reopen");
      b.type = "button";
      b.addEventListener("click", () => createSession({ resume: s.id }));
      li.appendChild(b);
      list.appendChild(li);
    }
    if (!list.children.length) list.appendChild(el("li", "muted", "(none yet)"));
  } catch (e) {
    list.textContent = "";
    list.appendChild(el("li", "muted", e.message));
  }
}

async function loadTree() {
  const box = $("agent-tree");
  if (!agent.id) { box.textContent = "(no session)"; return; }
  try {
    const data = await api("GET", "/v1/sessions/" + agent.id + "/entries");
    const entries = data.entries || [];
    const children = new Map();
    for (const e of entries) {
      const p = e.parentId || null;
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(e);
    }
    box.textContent = "";
    const walk = (parent, depth) => {
      for (const e of children.get(parent) || []) {
        const line = el("div");
        line.appendChild(document.createTextNode("  ".repeat(depth) + (e.id === data.leaf ? "▶ " : "· ")));
        const a = el("a", "", e.id.slice(0, 8));
        a.title = "continue from here";
        a.addEventListener("click", () => branchTo(e.id));
        line.appendChild(a);
        line.appendChild(document.createTextNode(" " + describeEntry(e)));
        box.appendChild(line);
        walk(e.id, (children.get(parent).length > 1 ? depth + 1 : depth));
      }
    };
    walk(null, 0);
    if (!entries.length) box.textContent = "(empty)";
  } catch (e) { box.textContent = e.message; }
}

function describeEntry(e) {
  if (e.type === "message") {
    const m = e.message;
    const calls = Array.isArray(m.content) ? m.content.filter((b) => b.type === "tool_call") : [];
    const text = messageText(m) || (m.role === "tool_result" ? m.tool_name : "") ||
      calls.map((c) => "→ " + c.name).join(" ");
    return m.role + ": " + String(text).split("\n")[0].slice(0, 40);
  }
  if (e.type === "label") return "label: " + (e.label || "(cleared)");
  return e.type;
}

async function branchTo(entryId) {
  if (agent.running) return;
  try {
    await api("POST", "/v1/sessions/" + agent.id + "/branch", { entry_id: entryId });
    await openSession({ id: agent.id, status: "ready", workspace: "", tools: [] });
  } catch (e) { addMessage($("agent-log"), "error", e.message); }
}

async function createSession(extra) {
  const body = Object.assign({ policy: $("agent-policy").value }, extra || {});
  const ws = $("agent-workspace").value.trim();
  if (ws) body.workspace = ws;
  if ($("agent-ask").checked) body.approvals = { write: "ask", exec: "ask", network: "ask" };
  const temperature = parseFloat($("agent-temperature").value);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  try {
    const s = await api("POST", "/v1/sessions", body);
    await openSession(s);
  } catch (e) { addMessage($("agent-log"), "error", e.message); }
}

$("agent-create").addEventListener("submit", (ev) => { ev.preventDefault(); createSession(); });
$("agent-refresh").addEventListener("click", refreshSessions);
$("agent-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("agent-input").value.trim();
  if (!text || !agent.id) return;
  $("agent-input").value = "";
  if (agent.running) {
    try {
      await api("POST", "/v1/sessions/" + agent.id + "/steer", { content: text });
      addMessage($("agent-log"), "note", "(steer queued) " + text);
    } catch (e) { addMessage($("agent-log"), "error", e.message); }
    return;
  }
  promptAgent(text);
});
$("agent-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("agent-form").requestSubmit(); }
});
$("agent-abort").addEventListener("click", async () => {
  try { await api("POST", "/v1/sessions/" + agent.id + "/abort", {}); } catch (e) {
    addMessage($("agent-log"), "error", e.message);
  }
});

// The key first when the server needs one and none is stored: no request is made that must fail.
(async () => {
  try {
    const res = await fetch("/version");
    const v = await res.json();
    status("agentd " + v.version);
    if (v.auth && !sessionStorage.getItem(KEY)) { askKey(); return; }
  } catch (e) { status("server unreachable: " + e.message); return; }
  loadModels();
})();
