// execution.js: one execution: its timeline (every event of its stream, its
// owner, each handoff from one owner to another marked), input and result,
// cancel, why it waits (explain, when the server has it), and its state as
// of any earlier event (a slider over its events; GET …?as_of=position).
// Live from /feeds/executions (filtered by its action).
import { api, optional, feed, h, setText, fmtTime, tag, errorBox, may, throttle } from './core.js';

const ENDED = new Set(['completed', 'failed', 'timed_out', 'cancelled', 'rejected']);

export function render(main, id) {
  const enc = encodeURIComponent(id);
  let stopped = false, f = null, events = [], live = true, state = null;
  const title = h('h1', {}, 'Execution ', h('code', {}, id));
  const status = h('span', { id: 'x-status' });
  const cancelBtn = h('button', { id: 'x-cancel', class: 'danger', hidden: true, onclick: cancel }, 'cancel');
  const msg = h('p', { class: 'error' });
  const facts = h('dl', { class: 'kv', id: 'x-facts' });
  const input = h('pre', { id: 'x-input' });
  const result = h('pre', { id: 'x-result' });
  const slider = h('input', { type: 'range', id: 'x-slider', min: 0, max: 0, value: 0 });
  const asOf = h('span', { id: 'x-asof', class: 'muted' }, 'live');
  const liveBtn = h('button', { id: 'x-live', onclick: () => { live = true; slider.value = slider.max; moved(); } }, 'live');
  const rows = h('tbody', { id: 'x-events' });
  const explainPanel = h('div', { class: 'panel', id: 'x-explain', hidden: true });

  main.append(title, h('div', { class: 'bar' }, status, cancelBtn), msg,
    h('div', { class: 'cols' },
      h('div', {}, h('h2', {}, 'State'), facts, explainPanel),
      h('div', {}, h('h2', {}, 'Input'), input, h('h2', {}, 'Result'), result)),
    h('h2', {}, 'Timeline'),
    h('div', { class: 'pager' }, 'as of', slider, asOf, liveBtn),
    h('table', {}, h('thead', {}, h('tr', {},
      h('th', { class: 'num' }, 'version'), h('th', { class: 'num' }, 'position'), h('th', {}, 'time'), h('th', {}, 'event'),
      h('th', {}, 'owner'), h('th', { class: 'num' }, 'attempt'), h('th', {}, 'worker'))), rows));

  function showState(x, label) {
    state = x;
    status.replaceChildren(tag(x.status), ' ', h('span', { class: 'muted' }, label));
    const kv = [['action', h('a', { href: '#/queue/' + encodeURIComponent(x.action) }, x.action)], ['status', x.status], ['attempt', x.attempt],
      ['worker', x.worker || '—'], ['key', x.concurrency_key || '—'], ['parent', x.parent ? h('a', { href: '#/execution/' + encodeURIComponent(x.parent) }, x.parent) : '—'],
      ['requested', fmtTime(x.requested_at)], ['scheduled', fmtTime(x.scheduled_at)], ['running', fmtTime(x.running_at)], ['ended', fmtTime(x.ended_at)],
      ['error', x.error || '—'], ['as of position', x.position]];
    facts.replaceChildren(...kv.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { 'data-k': k }, v)]));
    input.textContent = x.input ? JSON.stringify(x.input, null, 2) : '—';
    result.textContent = x.result ? JSON.stringify(x.result, null, 2) : '—';
    cancelBtn.hidden = !may('cancel') || ENDED.has(x.status) || !live;
  }

  function drawEvents() {
    let prevOwner = null;
    rows.replaceChildren(...events.map((e, i) => {
      const d = e.data || {};
      const handoff = prevOwner !== null && e.owner !== prevOwner;
      const tr = h('tr', { 'data-type': e.type, class: handoff ? 'handoff' : '' },
        h('td', { class: 'num' }, e.version), h('td', { class: 'num' }, e.position), h('td', {}, fmtTime(e.time)),
        h('td', {}, e.type), h('td', { title: handoff ? 'handoff: ' + prevOwner + ' → ' + e.owner : '' }, (handoff ? '⇄ ' : '') + e.owner),
        h('td', { class: 'num' }, d.attempt ?? ''), h('td', {}, d.worker || ''));
      prevOwner = e.owner;
      return tr;
    }));
    slider.max = String(Math.max(0, events.length - 1));
    if (live) slider.value = slider.max;
    mark();
  }

  function mark() {
    const at = +slider.value;
    rows.childNodes.forEach((tr, i) => { tr.classList.toggle('future', i > at); tr.classList.toggle('at', i === at && !live); });
  }

  const asOfLoad = throttle(async () => {
    const e = events[+slider.value];
    if (!e) return;
    try {
      const x = await api('/api/v1/executions/' + enc + '?as_of=' + e.position);
      if (!stopped && !live) showState(x, 'as of position ' + e.position + ' (' + e.type + ')');
    } catch (err) { setText(msg, err.message); }
  }, 150);

  // Dragging marks the events; letting go reads the state as of the event
  // (a fold of the log up to it: not something to ask on every pixel).
  function moving() {
    live = +slider.value === events.length - 1;
    setText(asOf, live ? 'live' : 'position ' + events[+slider.value].position);
    mark();
  }
  function moved() {
    moving();
    if (live) refresh(); else asOfLoad();
  }
  slider.addEventListener('input', moving);
  slider.addEventListener('change', moved);

  async function refresh() {
    try {
      const [x, evs] = await Promise.all([api('/api/v1/executions/' + enc), allEvents()]);
      if (stopped) return;
      events = evs;
      drawEvents();
      if (live) showState(x, 'now');
      explain(x);
      return x;
    } catch (e) { if (!stopped) main.append(errorBox(e)); }
  }
  const refreshSoon = throttle(refresh, 300);

  // allEvents reads the execution's stream page by page: a page ends at
  // 1,000 events or about 1 MiB (docs/api.md), so a short page whose last
  // event does not end the execution may have more behind it.
  async function allEvents() {
    let out = [], from = 0;
    for (;;) {
      const page = await api('/api/v1/executions/' + enc + '/events?limit=1000&from=' + from);
      const evs = page.events || [];
      out = out.concat(evs);
      const last = evs[evs.length - 1];
      if (!evs.length || (evs.length < 1000 && ENDED.has(last.type.replace('execution.', '')))) return out;
      from = page.next;
    }
  }

  async function explain(x) {
    if (ENDED.has(x.status)) { explainPanel.hidden = true; return; }
    try {
      const w = await optional('/api/v1/executions/' + enc + '/explain');
      if (w === undefined || stopped) return;
      explainPanel.hidden = false;
      const place = w.queue_place ?? w.position; // position: a server before queue_place
      explainPanel.replaceChildren(h('h2', {}, 'Why it waits'),
        h('p', {}, place ? ('number ' + place + ' in its queue, ' + w.ahead + ' ahead') : '',
          ' ', (w.waiting_for || []).length ? 'waiting for: ' + w.waiting_for.join(', ') : 'not waiting'));
    } catch (e) { explainPanel.hidden = true; }
  }

  async function cancel() {
    cancelBtn.disabled = true;
    try { await api('/api/v1/executions/' + enc + '/cancel', { method: 'POST' }); } catch (e) { setText(msg, e.message); }
    cancelBtn.disabled = false;
  }

  (async () => {
    const x = await refresh();
    if (!x || stopped) return;
    f = feed('/api/v1/feeds/executions', { action: x.action, from: x.position }, ['execution'], (type, st) => {
      if (st && st.id === id && live) refreshSoon();
    });
  })();

  return () => { stopped = true; if (f) f.stop(); };
}
