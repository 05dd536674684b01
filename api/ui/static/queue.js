// queue.js: one action's queue. Its waiters are read a page at a time
// (GET …/waiters?offset=&limit=), so a queue of 100,000 puts PAGE rows in
// the page, never all; the page refreshes (at most once a second) when the
// action's statistics feed says the queue changed.
import { api, allWorkers, optional, feed, h, setText, fmtMs, fmtAge, fmtTime, tag, errorBox, may, throttle, ApiError } from './core.js';

const PAGE = 50;

export function render(main, ref) {
  const enc = encodeURIComponent(ref);
  let offset = 0, total = 0, stats = null, stopped = false, f = null, explainRoute = true, lastExplain = 0;
  const fig = {};
  for (const k of ['len', 'active', 'state', 'p50', 'p95', 'position']) fig[k] = h('b', { id: 'qq-' + k }, '—');
  const pauseBtn = h('button', { id: 'qq-pause', hidden: !may('pause'), onclick: () => act('pause') }, 'pause');
  const resumeBtn = h('button', { id: 'qq-resume', hidden: !may('pause'), onclick: () => act('resume') }, 'resume');
  const info = h('span', { id: 'qq-range', class: 'muted' });
  const pageInput = h('input', { type: 'number', min: 1, value: 1, class: 'pageno', id: 'qq-page', onchange: () => go((Math.max(1, +pageInput.value) - 1) * PAGE) });
  const waitBody = h('tbody', { id: 'qq-waiters' });
  const activeBody = h('tbody', { id: 'qq-active-rows' });
  const policy = h('pre', { id: 'qq-policy' });
  const msg = h('p', { class: 'error', id: 'qq-error' });

  main.append(
    h('h1', {}, h('a', { href: '#/queues' }, 'Queues'), ' / ', ref),
    h('div', { class: 'bar' },
      figure(fig.len, 'waiting'), figure(fig.active, 'active / limit'), figure(fig.state, 'state'),
      figure(fig.p50, 'wait p50'), figure(fig.p95, 'wait p95'), figure(fig.position, 'as of position'), pauseBtn, resumeBtn),
    msg,
    h('h2', {}, 'Waiting, first to be granted first'),
    h('div', { class: 'pager' },
      h('button', { onclick: () => go(0) }, '« first'), h('button', { id: 'qq-prev', onclick: () => go(offset - PAGE) }, '‹ prev'),
      'page', pageInput, h('button', { id: 'qq-next', onclick: () => go(offset + PAGE) }, 'next ›'),
      h('button', { onclick: () => go(Math.floor(Math.max(0, total - 1) / PAGE) * PAGE) }, 'last »'), info),
    h('table', {}, h('thead', {}, h('tr', {},
      h('th', { class: 'num' }, '#'), h('th', {}, 'execution'), h('th', {}, 'priority'), h('th', {}, 'key'),
      h('th', {}, 'waiting since'), h('th', {}, 'why it waits'), h('th', {}))), waitBody),
    h('div', { class: 'cols' },
      h('div', {}, h('h2', {}, 'Running'), h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'execution'), h('th', {}, 'worker'))), activeBody)),
      h('div', {}, h('h2', {}, 'Policy'), policy)));

  function showStats(s) {
    stats = s;
    setText(fig.len, s.queue_length);
    setText(fig.active, s.active_count + ' / ' + s.max_concurrent);
    setText(fig.state, s.paused ? 'paused' : 'active');
    setText(fig.p50, fmtMs(s.wait_p50_ms));
    setText(fig.p95, fmtMs(s.wait_p95_ms));
    setText(fig.position, s.position);
    if (may('pause')) { pauseBtn.hidden = !!s.paused; resumeBtn.hidden = !s.paused; }
  }

  async function act(what) {
    try { await api('/api/v1/actions/' + enc + '/' + what, { method: 'POST' }); setText(msg, ''); } catch (e) { setText(msg, e.message); }
  }

  function go(o) {
    offset = Math.max(0, Math.min(o, Math.floor(Math.max(0, total - 1) / PAGE) * PAGE));
    load();
  }

  async function load() {
    try {
      const [page, ws] = await Promise.all([
        api('/api/v1/actions/' + enc + '/waiters?offset=' + offset + '&limit=' + PAGE),
        allWorkers().catch(() => ({ workers: [] })),
      ]);
      if (stopped) return;
      total = page.total;
      if (offset > 0 && offset >= total) { go(total - 1); return; }
      drawWaiters(page);
      drawActive(page.active, ws.workers || []);
    } catch (e) { if (!stopped) setText(msg, e.message); }
  }
  const reload = throttle(load, 1000);

  function drawWaiters(page) {
    setText(info, total === 0 ? 'no one waits' : (offset + 1) + '–' + (offset + page.waiting.length) + ' of ' + total);
    pageInput.value = String(Math.floor(offset / PAGE) + 1);
    pageInput.max = String(Math.max(1, Math.ceil(total / PAGE)));
    const rows = page.waiting.map((w, i) => {
      const why = h('td', { class: 'why' }, guess(page));
      const cancel = may('cancel') ? h('button', { class: 'danger cancel', 'data-id': w.id, onclick: (ev) => cancelOne(w.id, ev.target) }, 'cancel') : '';
      const tr = h('tr', { 'data-id': w.id },
        h('td', { class: 'num' }, offset + i + 1),
        h('td', {}, h('a', { href: '#/execution/' + encodeURIComponent(w.id) }, w.id)),
        h('td', {}, w.priority ?? '—'), h('td', {}, w.concurrency_key || ''),
        h('td', { title: fmtTime(w.enqueued_at) }, fmtAge(w.enqueued_at)), why, h('td', {}, cancel));
      tr.why = why;
      return tr;
    });
    waitBody.replaceChildren(...rows);
    explain(rows);
  }

  // guess is why a waiter waits as the statistics tell; explain (when the
  // server has it) gives the exact reasons.
  function guess(page) {
    if (page.paused) return 'paused';
    if (stats && stats.active_count >= stats.max_concurrent) return 'slot';
    return 'being granted';
  }

  async function explain(rows) {
    if (!explainRoute || Date.now() - lastExplain < 5000) return;
    lastExplain = Date.now();
    for (const tr of rows.slice(0, 20)) {
      try {
        const x = await api('/api/v1/executions/' + encodeURIComponent(tr.dataset.id) + '/explain');
        if (stopped) return;
        setText(tr.why, (x.waiting_for || []).join(', ') || x.status);
      } catch (e) {
        if (e instanceof ApiError && e.routeMissing) { explainRoute = false; return; }
      }
    }
  }

  function drawActive(active, workers) {
    const byExec = new Map();
    for (const w of workers) for (const x of w.executions || []) byExec.set(x, w.id);
    activeBody.replaceChildren(...active.slice(0, 200).map((id) => h('tr', { 'data-id': id },
      h('td', {}, h('a', { href: '#/execution/' + encodeURIComponent(id) }, id)), h('td', {}, byExec.get(id) || '—'))));
  }

  async function cancelOne(id, btn) {
    btn.disabled = true;
    try { await api('/api/v1/executions/' + encodeURIComponent(id) + '/cancel', { method: 'POST' }); btn.textContent = 'cancelling'; reload(); } catch (e) { setText(msg, e.message); btn.disabled = false; }
  }

  (async () => {
    try {
      const [action, s] = await Promise.all([api('/api/v1/actions/' + enc), api('/api/v1/actions/' + enc + '/queue-stats')]);
      if (stopped) return;
      policy.textContent = JSON.stringify(action, null, 2);
      showStats(s);
      await load();
      if (stopped) return;
      f = feed('/api/v1/feeds/queue-stats', { action: ref, from: s.position }, ['queue-stats'], (type, st) => { showStats(st); reload(); });
    } catch (e) { main.append(errorBox(e)); }
  })();

  return () => { stopped = true; if (f) f.stop(); };
}

function figure(b, label) { return h('div', { class: 'figure' }, b, h('span', {}, label)); }
