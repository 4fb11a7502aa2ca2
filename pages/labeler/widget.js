/* The Annotate page's labelling widget (a Streamlit v2 component, no build step, no network).

   It owns the sentence's token chips, the cursor, the span selection, the labels, the
   suggestions' shading and the keys.  Every key is applied and painted here at once; what it
   changes is an event {seq, sid, op, ...} appended to a queue that is kept in
   sessionStorage (a reload or a dropped connection loses nothing typed) and sent to the
   server, in order, until the server acknowledges it (data.ack[client] = the last seq it
   applied).  The server applies each event exactly once (by annotator, client id and seq)
   or refuses it (data.refused): a refused event leaves the queue, so the screen - the
   server's labels with the queue's events replayed over them - no longer shows it, and its
   reason is shown in one line.  The next sentence of the queue comes with the data
   (data.next): Next paints it at once.  Every text is set as textContent (never HTML or
   Markdown): a label like B-![t](http://host/x) is shown as written and fetches nothing. */

const W = window.__gpslWidget || (window.__gpslWidget = {
  data: null, root: null, send: null, scope: null, q: null, cache: {}, view: null,
  sel: 0, anchor: null, selSid: null, undo: [], reason: "", shownRefusals: {},
  filter: null, ready: false, lastSend: 0, sends: 0, painted: 0,
});

const STORE_PREFIX = "gpsl-widget:";

function load(scope) {
  let q = null;
  try { q = JSON.parse(sessionStorage.getItem(STORE_PREFIX + scope) || "null"); }
  catch (err) { q = null; }
  if (!q || typeof q !== "object" || !Array.isArray(q.pending)) {
    q = {client: Math.random().toString(36).slice(2) + Date.now().toString(36), seq: 0,
         pending: []};
  }
  return q;
}

function save() {
  try { sessionStorage.setItem(STORE_PREFIX + W.scope, JSON.stringify(W.q)); }
  catch (err) { /* storage full or off: the queue still lives in memory */ }
}

function sendQueue(force) {
  if (!W.send || !W.q) return;
  if (!force && !W.q.pending.length && W.sends) return;
  W.sends += 1;
  W.lastSend = Date.now();
  W.cursorSent = currentSid() + ":" + W.sel;
  W.send("events", {client: W.q.client, events: W.q.pending.slice(0, 200), sends: W.sends,
                    cursor: {sid: currentSid(), t: W.sel}});
}

/* The cursor reaches the server (its token's history beside the sentence) 400 ms after it
   stopped moving, unless a label's message takes it along first. */
function cursorMoved() {
  clearTimeout(W.cursorTimer);
  W.cursorTimer = setTimeout(function () {
    if (W.data && W.cursorSent !== currentSid() + ":" + W.sel) sendQueue(true);
  }, 400);
}

// ---------------------------------------------------------------- the model of the sentence
function sentence(sid) {
  if (W.data && W.data.sid === sid) return W.data;
  return W.cache[sid] || null;
}

/* The sentence on screen: the server's, or the one a queued Next/Skip moved to. */
function currentSid() {
  let sid = W.data ? W.data.sid : null;
  for (const ev of W.q.pending) {
    if ((ev.op === "next" || ev.op === "skip") && ev.sid === sid && ev.to && W.cache[ev.to]) {
      sid = ev.to;
    }
  }
  return sid;
}

/* The tokens of `sid` as shown: the server's state with the queued events replayed. */
function tokens(sid) {
  const s = sentence(sid);
  if (!s) return [];
  const toks = s.tokens.map(function (t) { return Object.assign({}, t); });
  for (const ev of W.q.pending) {
    if (ev.sid !== sid || !ev.ch) continue;
    for (const key of Object.keys(ev.ch)) {
      const t = toks[Number(key)];
      if (!t) continue;
      const lab = ev.ch[key];
      t.l = lab; t.o = lab; t.m = lab; t.s = lab === null ? null : (ev.src || "human");
      if (lab === null) { t.l = null; t.o = null; }
    }
  }
  return toks;
}

/* Where the cursor goes after a label: the next token unlabeled in the annotator's own
   copy to the right of the labeled ones, else the first unlabeled one from the left; when
   every token is labeled it stays where it is (so no key lands on a label by surprise). */
function advance(toks, lo, hi) {
  for (let t = hi + 1; t < toks.length; t++) if (toks[t].o === null) return t;
  for (let t = 0; t < lo; t++) if (toks[t].o === null) return t;
  return hi;
}

function span() {
  if (W.anchor === null || W.anchor === W.sel) return null;
  return [Math.min(W.anchor, W.sel), Math.max(W.anchor, W.sel)];
}

function spanLabels(kind, n) {
  const tpl = (W.data.spans || {})[kind];
  if (kind === "O" || !tpl) return Array(n).fill("O");
  if (n === 1) return [tpl[0]];
  const out = [tpl[1]];
  for (let i = 1; i < n - 1; i++) out.push(tpl[2]);
  out.push(tpl[3]);
  return out;
}

// ---------------------------------------------------------------- events
/* Label changes are sent 100 ms after the last one (a burst is one message, one rerun of
   the server, not one per key); moves between sentences at once. */
function queue(ev) {
  W.q.seq += 1;
  ev.seq = W.q.seq;
  ev.at = Date.now();  // when it happened: the server times each step by it
  W.q.pending.push(ev);
  save();
  clearTimeout(W.timer);
  if (ev.op === "set" || ev.op === "undo") W.timer = setTimeout(function () { sendQueue(true); }, 100);
  else sendQueue(true);
}

function setLabels(changes, src) {
  const sid = currentSid();
  const before = tokens(sid);
  const prev = {};
  for (const key of Object.keys(changes)) prev[key] = before[Number(key)].m;
  queue({sid: sid, op: "set", ch: changes, src: src || "human"});
  W.undo.push({seq: W.q.seq, sid: sid, prev: prev});
  W.reason = "";
}

function labelSelection(what, arg) {
  const sid = currentSid();
  const toks = tokens(sid);
  if (!toks.length) return;
  const sp = span();
  const lo = sp ? sp[0] : W.sel, hi = sp ? sp[1] : W.sel;
  const changes = {};
  if (what === "type") {
    spanLabels(arg, hi - lo + 1).forEach(function (lab, i) { changes[lo + i] = lab; });
  } else if (what === "clear") {
    for (let t = lo; t <= hi; t++) if (toks[t].m !== null && toks[t].m !== undefined) {
      changes[t] = null;
    }
    if (!Object.keys(changes).length) { W.reason = "Nothing of yours to clear here."; return; }
  } else {
    for (let t = lo; t <= hi; t++) changes[t] = arg;
  }
  setLabels(changes);
  W.anchor = null;
  if (what !== "clear") W.sel = advance(tokens(sid), lo, hi);
}

function undo() {
  const last = W.undo.pop();
  const sid = currentSid();
  if (last && last.sid === sid) {  // revert it here at once; the server reverts the same
    queue({sid: sid, op: "undo", ch: last.prev, src: "human", of: last.seq});
    const first = Object.keys(last.prev).map(Number).sort(function (a, b) { return a - b; })[0];
    if (first !== undefined) { W.sel = first; W.anchor = null; }
    W.reason = "Undid your last change.";
  } else {  // a step of an earlier page: the server finds it and shows its sentence
    if (last) W.undo.push(last);
    queue({sid: sid, op: "undo"});
    W.reason = "Undoing your last change…";
  }
}

function navigate(op) {
  const sid = currentSid();
  const nxt = W.data && W.data.sid === sid ? W.data.next : null;
  if ((op === "next" || op === "skip") && nxt && nxt.sid !== sid) {
    W.cache[nxt.sid] = nxt;
    queue({sid: sid, op: op, to: nxt.sid});
  } else {
    queue({sid: sid, op: op});
  }
  W.reason = "";
  W.undo = [];
}

// ---------------------------------------------------------------- keys and clicks
function alive() { return !!(W.root && W.root.isConnected); }

function editable(el) {
  if (!el) return false;
  const tag = (el.tagName || "").toLowerCase();
  return tag === "input" || tag === "textarea" || tag === "select" || el.isContentEditable;
}

function move(step, extend) {
  const n = tokens(currentSid()).length;
  if (!n) return;
  if (extend) { if (W.anchor === null) W.anchor = W.sel; }
  else W.anchor = null;
  W.sel = Math.min(Math.max(0, W.sel + step), n - 1);
}

function digit(key) {
  const d = W.data;
  if (d.scheme) {
    const c = d.types.find(function (x) { return x.k === key; });
    if (c) labelSelection("type", c.v);
  } else {
    const c = d.labels.find(function (x) { return x.k === key; });
    if (c) labelSelection("label", c.v);
  }
}

function matches() {
  const q = (W.filter ? W.filter.text : "").toLowerCase();
  const scored = [];
  (W.data.options || []).forEach(function (opt, i) {
    const v = opt.value.toLowerCase();
    const at = v.indexOf(q);
    if (at < 0) return;
    scored.push({opt: opt, rank: v === q ? 0 : at === 0 ? 1 : 2, i: i});
  });
  scored.sort(function (a, b) { return a.rank - b.rank || a.i - b.i; });
  return scored.map(function (s) { return s.opt; });
}

function typeAhead(e) {
  const found = matches();
  if (e.key === "Escape") W.filter = null;
  else if (e.key === "Enter") {
    const opt = found[W.filter.index];
    W.filter = null;
    if (opt) labelSelection(opt.kind === "type" ? "type" : "label", opt.value);
  } else if (e.key === "Backspace") { W.filter.text = W.filter.text.slice(0, -1); W.filter.index = 0; }
  else if (e.key === "ArrowDown") W.filter.index = Math.min(found.length - 1, W.filter.index + 1);
  else if (e.key === "ArrowUp") W.filter.index = Math.max(0, W.filter.index - 1);
  else if (e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) {
    W.filter.text += e.key; W.filter.index = 0;
  } else return;
  e.preventDefault();
  e.stopPropagation();
  paint();
}

function onKey(e) {
  if (!alive() || !W.data || !W.data.sid) return;
  if (W.filter) { typeAhead(e); return; }
  if (e.ctrlKey || e.metaKey || e.altKey || editable(e.target)) return;
  const m = /^(?:Digit|Numpad)([0-9])$/.exec(e.code || "");
  const key = m ? m[1] : (e.key || "");
  let handled = true;
  if (/^[0-9]$/.test(key)) { if (!e.repeat) digit(key); }
  else if (key === "ArrowLeft" || key === "ArrowRight") move(key === "ArrowLeft" ? -1 : 1, e.shiftKey);
  else if (key === "Escape") W.anchor = null;
  else if (key === "/") W.filter = {text: "", index: 0};
  else if (e.repeat) handled = /^[axnpsu]$/i.test(key);
  else if (/^[xX]$/.test(key)) labelSelection("clear");
  else if (/^[uU]$/.test(key)) undo();
  else if (/^[nN]$/.test(key)) navigate("next");
  else if (/^[pP]$/.test(key)) navigate("prev");
  else if (/^[sS]$/.test(key)) navigate("skip");
  else if (/^[aA]$/.test(key)) navigate("accept");
  else handled = false;
  if (!handled) return;
  e.preventDefault();
  e.stopPropagation();
  paint();
  cursorMoved();
}

function onClick(e) {
  const el = e.target && e.target.closest ? e.target.closest("[data-act]") : null;
  if (!el || !W.root || !W.root.contains(el) || el.disabled) return;
  e.preventDefault();
  el.blur();  // no focus look: the outline is the cursor's alone
  const act = el.getAttribute("data-act"), arg = el.getAttribute("data-arg");
  if (act === "tok") {
    const t = Number(arg);
    if (e.shiftKey) { if (W.anchor === null) W.anchor = W.sel; }
    else W.anchor = null;
    W.sel = t;
  } else if (act === "label") labelSelection("label", arg);
  else if (act === "type") labelSelection("type", arg);
  else if (act === "clear") labelSelection("clear");
  else if (act === "undo") undo();
  else navigate(act);  // next, prev, skip, accept
  paint();
  cursorMoved();
}

// ---------------------------------------------------------------- the server's answer
function receive(d) {
  W.data = d;
  if (d.next) W.cache[d.next.sid] = d.next;
  const ack = Number((d.ack || {})[W.q.client] || 0);
  const before = W.q.pending.length;
  W.refusedEvents = {};
  for (const ev of W.q.pending) if (ev.seq <= ack) W.refusedEvents[ev.seq] = ev;
  W.q.pending = W.q.pending.filter(function (ev) { return ev.seq > ack; });
  if (W.q.pending.length !== before) save();
  for (const r of d.refused || []) {
    if (r.client !== W.q.client || W.shownRefusals[r.seq]) continue;
    W.shownRefusals[r.seq] = true;
    W.reason = "Not saved: " + r.why;
    W.undo = W.undo.filter(function (u) { return u.seq !== r.seq; });
    const ev = W.refusedEvents && W.refusedEvents[r.seq];
    if (ev && ev.ch && ev.sid === currentSid()) {  // the cursor back where the key was
      W.sel = Math.min.apply(null, Object.keys(ev.ch).map(Number)); W.anchor = null;
    }
  }
  if (d.note && d.note.client === W.q.client && !W.shownRefusals["n" + d.note.seq]) {
    W.shownRefusals["n" + d.note.seq] = true;
    W.reason = d.note.text;
    if (d.note.sel !== null && d.note.sel !== undefined && d.note.sid === d.sid) {
      W.sel = d.note.sel; W.selSid = d.sid; W.anchor = null;
    }
  }
}

// ---------------------------------------------------------------- painting
function el(tag, cls, text) {
  const x = document.createElement(tag);
  if (cls) x.className = cls;
  if (text !== undefined && text !== null) x.textContent = String(text);
  return x;
}

function button(cls, act, arg, text, title) {
  const b = el("button", cls, text);
  b.type = "button";
  b.setAttribute("data-act", act);
  if (arg !== null && arg !== undefined) b.setAttribute("data-arg", String(arg));
  if (title) b.title = title;  // a plain attribute: never Markdown, never HTML
  return b;
}

function shade(c) { return c === null || c === undefined ? 0 : Math.min(0.85, 1.2 * Math.max(0, 1 - c)); }

function paint() {
  if (!W.root || !W.data) return;
  const d = W.data;
  const sid = currentSid();
  const s = sentence(sid);
  const root = W.root;
  root.textContent = "";
  if (!s) return;
  const toks = tokens(sid);
  if (W.selSid !== sid) {
    W.selSid = sid; W.sel = s.opening || 0; W.anchor = null; W.undo = W.undo.filter(function (u) { return u.sid === sid; });
  }
  W.sel = Math.min(Math.max(0, W.sel), toks.length - 1);
  const sp = span();
  const lo = sp ? sp[0] : W.sel, hi = sp ? sp[1] : W.sel;
  const colors = d.colors || {};
  const mine = toks.filter(function (t) { return t.m !== null && t.m !== undefined; }).length;
  const labeled = toks.filter(function (t) { return t.o !== null && t.o !== undefined; }).length;

  const head = el("div", "gw-head");
  head.setAttribute("data-testid", "gpslWidgetHead");
  head.textContent = s.where + " · " + labeled + " of " + toks.length + " tokens labeled" +
    (mine === labeled ? " by you" : " (" + mine + " by you)");
  root.appendChild(head);

  const chips = el("div", "gw-chips");
  toks.forEach(function (t, i) {
    const b = button("gw-chip", "tok", i, null, null);
    b.setAttribute("data-t", String(i));
    b.appendChild(el("span", "gw-text", t.x));
    if (t.l !== null && t.l !== undefined) {
      const code = el("code", "gw-label", t.l);
      code.style.background = colors[t.l] || "#64748b";
      b.appendChild(code);
      if (t.s === "accepted") b.appendChild(el("span", "gw-acc", "✓"));
      b.style.borderColor = colors[t.l] || "#64748b";
      b.classList.add("gw-labeled");
    } else if (t.g !== null && t.g !== undefined) {
      b.appendChild(el("em", "gw-sugg", t.g + "?"));
      b.classList.add("gw-suggested");
    }
    const a = t.l === null || t.l === undefined ? shade(t.c) : 0;
    if (a > 0) b.style.background = "rgba(245,158,11," + a.toFixed(2) + ")";
    if (i >= lo && i <= hi) { b.classList.add("gw-cursor"); b.setAttribute("aria-current", "true"); }
    if (i === s.opening && d.model) b.classList.add("gw-query");
    if (t.f) b.classList.add("gw-flagged");
    const tip = [t.x];
    if (t.l) tip.push((t.s === "accepted" ? "accepted suggestion: " : "label: ") + t.l);
    if (t.top && t.top.length) tip.push("model: " + t.top.map(function (p) { return p[0] + " " + p[1].toFixed(2); }).join(", "));
    b.title = tip.join("\n");
    chips.appendChild(b);
  });
  root.appendChild(chips);

  const cur = toks[W.sel];
  let detail;
  if (sp) {
    detail = toks.slice(lo, hi + 1).map(function (t) { return t.x; }).join(" ") + " · tokens " +
      (lo + 1) + "–" + (hi + 1) + " of " + toks.length + " · " +
      (d.scheme ? "pick the entity type below (keys 1 … 9, 0 = O)" : "pick a label for every token");
  } else {
    detail = cur.x + " · token " + (W.sel + 1) + " of " + toks.length;
    if (cur.m !== null && cur.m !== undefined) detail += " · " + (cur.s === "accepted" ? "your accepted suggestion " : "your label ") + cur.m;
    else if (cur.o) detail += " · the file's label " + cur.o;
    else if (cur.l) detail += " · " + (cur.w || "someone") + "'s label " + cur.l;
    else detail += " · unlabeled";
    if (cur.top && cur.top.length) detail += " · model: " + cur.top.map(function (p) { return p[0] + " " + p[1].toFixed(2); }).join(", ");
  }
  const det = el("div", "gw-detail", detail);
  det.setAttribute("data-testid", "gpslWidgetDetail");
  root.appendChild(det);

  if (d.scheme) {
    const row = el("div", "gw-row");
    row.appendChild(el("span", "gw-cap", sp ? "Span as" : "Entity"));
    d.types.forEach(function (c) {
      const b = button("gw-btn gw-type", "type", c.v, c.v === "O" ? "O (outside)" : c.v,
                       c.v === "O" ? "Label every selected token O." : "Label the selection as one " + c.v + " entity in one step.");
      if (c.k) b.appendChild(el("span", "gw-key", c.k));
      row.appendChild(b);
    });
    root.appendChild(row);
  }
  const labs = el("div", "gw-row");
  d.labels.forEach(function (c) {
    const b = button("gw-btn gw-lab", "label", c.v, c.v, c.k ? null : "Type / and part of the label to set it from the keyboard.");
    b.style.borderLeft = "6px solid " + (colors[c.v] || "#64748b");
    if (c.k) b.appendChild(el("span", "gw-key", c.k));
    if (!sp && cur.m === c.v) b.classList.add("gw-primary");
    labs.appendChild(b);
  });
  const clr = button("gw-btn", "clear", null, "Clear my label", "Withdraw your own label (X); it is not a vote for “no label”.");
  labs.appendChild(clr);
  root.appendChild(labs);

  const acts = el("div", "gw-row gw-actions");
  acts.appendChild(button("gw-btn", "prev", null, "← Previous", "Previous sentence (P)"));
  acts.appendChild(button("gw-btn gw-primary", "next", null, "Next →", "Next sentence (N)"));
  acts.appendChild(button("gw-btn", "skip", null, "Skip", "Move this sentence to the end of your queue (S)."));
  acts.appendChild(button("gw-btn", "undo", null, "Undo", "Revert your last key press (U); a span or an accept is one."));
  const acc = button("gw-btn", "accept", null, "Accept " + (sid === d.sid ? d.n_accept : "") + " suggestions",
                     "Label the unlabeled tokens whose suggestion reaches the threshold (A).");
  if (!d.model || (sid === d.sid && !d.n_accept)) acc.disabled = true;
  acts.appendChild(acc);
  const waiting = W.q.pending.length;
  const st = el("span", "gw-sync", waiting ? waiting + " change" + (waiting > 1 ? "s" : "") + " waiting for the server" : "all saved");
  st.setAttribute("data-testid", "gpslWidgetSync");
  acts.appendChild(st);
  root.appendChild(acts);

  const why = el("div", "gw-reason", W.reason || "");
  why.setAttribute("data-testid", "gpslWidgetReason");
  why.setAttribute("role", "status");
  root.appendChild(why);

  if (W.filter) {
    const box = el("div", "gw-typeahead");
    box.setAttribute("data-testid", "gpslTypeAhead");
    const found = matches();
    if (W.filter.index >= found.length) W.filter.index = Math.max(0, found.length - 1);
    box.appendChild(el("div", "gw-ta-head", "Label: " + W.filter.text + "▐"));
    found.slice(0, 8).forEach(function (opt, k) {
      box.appendChild(el("div", k === W.filter.index ? "gw-ta-row gw-ta-on" : "gw-ta-row", opt.text || opt.value));
    });
    box.appendChild(el("div", "gw-ta-foot", found.length ? "Enter: set · ↑↓: choose · Esc: cancel" : "no label matches · Esc: cancel"));
    root.appendChild(box);
  }
  W.painted += 1;
}

// ---------------------------------------------------------------- mount
function ensureListeners() {
  if (W.listening) return;
  W.listening = true;
  document.addEventListener("keydown", onKey, true);
  document.addEventListener("click", onClick, true);
  document.addEventListener("mousedown", function (e) {  // Shift+click: no text selection
    if (e.shiftKey && e.target && e.target.closest && e.target.closest(".gw-chip")) e.preventDefault();
  }, true);
  setInterval(function () {  // re-send what the server has not acknowledged
    if (alive() && W.q && W.q.pending.length && Date.now() - W.lastSend > 1500) sendQueue(true);
  }, 500);
  const style = document.createElement("style");  // the button fallback is not needed now
  style.textContent = ".st-key-fallback { display: none !important; }";
  document.head.appendChild(style);
}

export default function (component) {
  const {data, parentElement, setStateValue} = component;
  if (!data) return undefined;
  let root = parentElement.querySelector(".gw");
  if (!root) {
    root = document.createElement("div");
    root.className = "gw";
    root.setAttribute("data-testid", "gpslWidget");
    parentElement.appendChild(root);
  }
  W.root = root;
  W.send = setStateValue;
  if (W.scope !== data.scope) {
    W.scope = data.scope;
    W.q = load(data.scope);
    W.undo = []; W.selSid = null; W.reason = ""; W.sends = 0;
  }
  ensureListeners();
  receive(data);
  paint();
  if (!W.ready) { W.ready = true; }
  if (W.q.pending.length || !data.live) sendQueue(true);  // hello, or what a reload kept
  return undefined;
}
