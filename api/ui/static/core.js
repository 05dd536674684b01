// core.js: the API client (bearer token from session storage), the live
// feeds (Server-Sent Events that resume after the last id they saw), and
// small DOM helpers. No library: the browser has all of it.

const TOKEN_KEY = 'turnstile.token';

export const session = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  role: null,        // admin, client, reader, worker
  anonymous: false,  // no token configured on the server
  onUnauthorized: null,
};

export function setToken(t) {
  session.token = t;
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
}

// may tells whether the signed-in role may do a thing; the server checks anyway.
export function may(what) {
  const r = session.role;
  if (what === 'cancel') return r === 'admin' || r === 'client';
  if (what === 'pause') return r === 'admin';
  return true;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || ('HTTP ' + status));
    this.status = status;
    this.problem = problem || {};
  }
  // routeMissing: this server has no such route (yet): hide what needs it.
  get routeMissing() {
    return this.status === 404 && /^no route for/.test(this.problem.detail || '');
  }
}

function headers(extra) {
  const h = Object.assign({ 'Accept': 'application/json' }, extra || {});
  if (session.token) h['Authorization'] = 'Bearer ' + session.token;
  return h;
}

// api calls a route and answers its JSON body; a problem throws ApiError.
export async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', headers: headers() };
  // Every write says JSON, a body-less one too (the server refuses a
  // write of any other type).
  if (init.method !== 'GET') init.headers['Content-Type'] = 'application/json';
  if (opts.body !== undefined) init.body = JSON.stringify(opts.body);
  const res = await fetch(path, init);
  let body = null;
  const text = await res.text();
  if (text) { try { body = JSON.parse(text); } catch (e) { body = { detail: text }; } }
  if (!res.ok) {
    const err = new ApiError(res.status, body);
    if (res.status === 401 && session.onUnauthorized && !opts.quiet) session.onUnauthorized(err);
    throw err;
  }
  return body;
}

// allWorkers answers GET /api/v1/workers with every page followed (the
// server pages by id; lost or stopped workers drop out an hour after their
// last heartbeat): {workers, unserved_runners}.
export async function allWorkers() {
  let after = '';
  const out = { workers: [], unserved_runners: [] };
  for (let i = 0; i < 100; i++) {
    const page = await api('/api/v1/workers?limit=1000' + (after ? '&after=' + encodeURIComponent(after) : ''));
    out.workers.push(...(page.workers || []));
    out.unserved_runners = page.unserved_runners || [];
    if (!page.next || page.next === after) break;
    after = page.next;
  }
  return out;
}

// optional calls a route that may not exist on this server yet: it answers
// undefined when the route is missing.
export async function optional(path, opts) {
  try { return await api(path, opts); } catch (e) {
    if (e instanceof ApiError && e.routeMissing) return undefined;
    throw e;
  }
}

// ---- live feeds ----

// feedStatus counts the open feeds and the reconnects, for the header badge
// (and for tests: #conn's data-reconnects).
const feedStatus = { open: new Set(), down: new Set(), reconnects: 0 };
function showStatus() {
  const el = document.getElementById('conn');
  if (!el) return;
  const down = feedStatus.down.size > 0;
  el.className = 'conn ' + (down ? 'down' : (feedStatus.open.size ? 'live' : ''));
  el.textContent = down ? 'reconnecting…' : (feedStatus.open.size ? 'live' : 'idle');
  el.dataset.reconnects = String(feedStatus.reconnects);
}

let ticketRoute = null; // null: not tried; false: this server has none

// ticket gets a short-lived read-only feed ticket (POST /api/v1/feeds/ticket),
// or null when the server has no such route.
async function ticket() {
  if (ticketRoute === false) return null;
  try {
    const t = await api('/api/v1/feeds/ticket', { method: 'POST', quiet: true });
    ticketRoute = true;
    return t && t.ticket;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) throw e;
    // No such route (or one this page does not understand): the bearer
    // header through fetch() works on any server.
    ticketRoute = false;
    return null;
  }
}

// Feed follows one SSE feed: onEvent(type, data, id) for every message.
// It starts at `from` (a log position) or now, and after any drop it
// reconnects and resumes after the last id it received (Last-Event-ID), so
// no message is lost or repeated, without reloading the page. Without a
// token it uses EventSource; with one it uses a feed ticket when the server
// issues them, else fetch() with the bearer header and a stream reader.
export class Feed {
  constructor(path, params, onEvent) {
    this.path = path;
    this.params = params || {};
    this.onEvent = onEvent;
    this.lastId = null;
    this.stopped = false;
    this.es = null;
    this.abort = null;
    this.retryMs = 1000;
    this.key = Symbol(path);
  }

  start() { this.connect(); return this; }

  stop() {
    this.stopped = true;
    if (this.es) this.es.close();
    if (this.abort) this.abort.abort();
    feedStatus.open.delete(this.key);
    feedStatus.down.delete(this.key);
    showStatus();
  }

  url(extra) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(this.params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    if (this.lastId !== null) q.set('from', String(BigInt(this.lastId) + 1n));
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    const s = q.toString();
    return this.path + (s ? '?' + s : '');
  }

  up() { feedStatus.open.add(this.key); feedStatus.down.delete(this.key); showStatus(); }
  down() {
    feedStatus.open.delete(this.key);
    if (!feedStatus.down.has(this.key)) feedStatus.reconnects++;
    feedStatus.down.add(this.key);
    showStatus();
  }

  deliver(type, data, id) {
    if (id !== undefined && id !== null && id !== '') this.lastId = id;
    let v = data;
    try { v = JSON.parse(data); } catch (e) { /* keep the text */ }
    this.onEvent(type || 'message', v, id);
  }

  retry() {
    if (this.stopped) return;
    this.down();
    setTimeout(() => this.connect(), this.retryMs);
  }

  async connect() {
    if (this.stopped) return;
    if (!session.token || session.anonymous) return this.viaEventSource({});
    let t = null;
    try { t = await ticket(); } catch (e) { return this.retry(); }
    if (t) return this.viaEventSource({ ticket: t });
    return this.viaFetch();
  }

  // viaEventSource: the browser resends Last-Event-ID on its own reconnects;
  // when it gives up (a non-200 answer, e.g. an expired ticket) we start
  // again after the last id we saw.
  viaEventSource(extra) {
    const es = new EventSource(this.url(extra));
    this.es = es;
    const types = this.types || ['message'];
    const handler = (ev) => this.deliver(ev.type, ev.data, ev.lastEventId);
    for (const t of types) es.addEventListener(t, handler);
    es.onopen = () => this.up();
    es.onerror = () => {
      if (this.stopped) return;
      this.down();
      if (es.readyState === EventSource.CLOSED) { es.close(); setTimeout(() => this.connect(), this.retryMs); }
    };
  }

  // viaFetch reads the SSE stream with fetch() so it can send the bearer
  // header; on any end it reconnects with Last-Event-ID.
  async viaFetch() {
    const ctl = new AbortController();
    this.abort = ctl;
    const h = headers({ 'Accept': 'text/event-stream' });
    if (this.lastId !== null) h['Last-Event-ID'] = String(this.lastId);
    let res;
    try {
      res = await fetch(this.url(), { headers: h, signal: ctl.signal, cache: 'no-store' });
    } catch (e) { return this.retry(); }
    if (res.status === 401 && session.onUnauthorized) { session.onUnauthorized(new ApiError(401, null)); return this.retry(); }
    if (!res.ok || !res.body) return this.retry();
    this.up();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '', type = '', data = [], id = null;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (data.length) this.deliver(type, data.join('\n'), id);
            type = ''; data = []; id = null;
            continue;
          }
          if (line.startsWith(':')) continue;
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? '' : line.slice(c + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'data') data.push(val);
          else if (field === 'event') type = val;
          else if (field === 'id') id = val;
          else if (field === 'retry' && /^\d+$/.test(val)) this.retryMs = Math.min(+val, 10000);
        }
      }
    } catch (e) { /* dropped */ }
    this.retry();
  }
}

// feed starts a Feed of the named event types.
export function feed(path, params, types, onEvent) {
  const f = new Feed(path, params, onEvent);
  f.types = types;
  return f.start();
}

// ---- DOM ----

// h builds an element: h('td', {class: 'num'}, 'text', child…). Text is
// always set as text, never parsed as HTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function setText(el, v) {
  const s = String(v);
  if (el.textContent !== s) el.textContent = s;
}

// throttle runs fn at most once per ms, always once after the last call.
export function throttle(fn, ms) {
  let timer = null, again = false;
  const run = () => {
    timer = null;
    if (again) { again = false; fn(); timer = setTimeout(run, ms); }
  };
  return () => {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(run, ms);
  };
}

const SVG = 'http://www.w3.org/2000/svg';

// sparkline draws values as an inline SVG polyline (no chart library: one
// line is all the page needs).
export function sparkline(values, big) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', big ? 'spark big' : 'spark');
  svg.setAttribute('viewBox', '0 0 100 20');
  svg.setAttribute('preserveAspectRatio', 'none');
  const pl = document.createElementNS(SVG, 'polyline');
  svg.append(pl);
  drawSpark(svg, values);
  return svg;
}

export function drawSpark(svg, values) {
  const pl = svg.firstChild;
  if (!values.length) { pl.setAttribute('points', ''); return; }
  const max = Math.max(1, ...values);
  const n = values.length;
  const pts = values.map((v, i) => ((n === 1 ? 100 : (i * 100) / (n - 1)).toFixed(1) + ',' + (19 - (v / max) * 18).toFixed(1)));
  pl.setAttribute('points', pts.join(' '));
  svg.setAttribute('data-max', String(max));
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1000) return ms.toFixed(0) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return (ms / 60000).toFixed(1) + ' min';
}

export function fmtAge(t) {
  if (!t) return '—';
  const s = (Date.now() - new Date(t).getTime()) / 1000;
  if (s < 1) return 'now';
  if (s < 90) return s.toFixed(0) + ' s ago';
  if (s < 5400) return (s / 60).toFixed(0) + ' min ago';
  return (s / 3600).toFixed(1) + ' h ago';
}

export function fmtTime(t) {
  if (!t) return '—';
  const d = new Date(t);
  return d.toISOString().replace('T', ' ').replace('Z', '');
}

export function tag(text) { return h('span', { class: 'tag ' + text }, text); }

export function errorBox(e) {
  return h('p', { class: 'error' }, e instanceof Error ? e.message : String(e));
}
