// log.js: the log: its head position, a live tail of its events (the last
// KEEP in the page, newest first, from /feeds/events) and a button that runs
// the audit of the whole log (GET /api/v1/audit) and shows its verdict.
import { api, feed, h, setText, fmtTime, errorBox } from './core.js';

const KEEP = 200;
const BACK = 50; // events shown from before the page opened

export function render(main) {
  let stopped = false, f = null, paused = false, count = 0;
  const head = h('b', { id: 'l-head' }, '—');
  const seen = h('b', { id: 'l-seen' }, '0');
  const rows = h('tbody', { id: 'l-rows' });
  const pauseBtn = h('button', { id: 'l-pause', onclick: () => { paused = !paused; pauseBtn.textContent = paused ? 'resume tail' : 'pause tail'; } }, 'pause tail');
  const auditBtn = h('button', { id: 'l-audit', onclick: audit }, 'run audit');
  const verdict = h('div', { id: 'l-verdict' });
  main.append(h('h1', {}, 'Log'),
    h('div', { class: 'bar' }, h('div', { class: 'figure' }, head, h('span', {}, 'head position')),
      h('div', { class: 'figure' }, seen, h('span', {}, 'events seen here')), pauseBtn, auditBtn),
    verdict,
    h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {},
      h('th', { class: 'num' }, 'position'), h('th', {}, 'time'), h('th', {}, 'type'), h('th', {}, 'stream'), h('th', {}, 'owner'))), rows)));

  function add(e) {
    count++;
    setText(seen, count);
    setText(head, e.position);
    if (paused) return;
    const m = /^execution-(.+)$/.exec(e.stream);
    const stream = m ? h('a', { href: '#/execution/' + encodeURIComponent(m[1]) }, e.stream) : e.stream;
    rows.prepend(h('tr', { 'data-type': e.type, 'data-position': e.position },
      h('td', { class: 'num' }, e.position), h('td', {}, fmtTime(e.time)), h('td', {}, e.type), h('td', {}, stream), h('td', {}, e.owner)));
    while (rows.childNodes.length > KEEP) rows.lastChild.remove();
  }

  async function audit() {
    auditBtn.disabled = true;
    verdict.replaceChildren(h('p', { class: 'muted' }, 'auditing the whole log…'));
    try {
      const v = await api('/api/v1/audit');
      if (stopped) return;
      verdict.replaceChildren(
        h('p', { class: 'verdict ' + (v.ok ? 'ok' : 'bad'), id: 'l-verdict-text' },
          v.ok ? 'OK: every event follows the handoff rule, FIFO order and the concurrency limits' : v.violations.length + ' VIOLATIONS'),
        h('p', { class: 'muted' }, v.events + ' events, ' + v.executions + ' executions (' + v.ended + ' ended, ' + v.open + ' open), ' + v.grants +
          ' grants, in ' + v.seconds.toFixed(2) + ' s; by status: ' + Object.entries(v.by_status || {}).map(([k, n]) => k + ' ' + n).join(', ')),
        v.violations.length ? h('table', {}, h('tbody', {}, ...v.violations.slice(0, 100).map((x) => h('tr', {},
          h('td', { class: 'num' }, x.position), h('td', {}, x.stream), h('td', {}, x.type), h('td', {}, x.rule), h('td', {}, x.detail))))) : '');
    } catch (e) { verdict.replaceChildren(errorBox(e)); }
    auditBtn.disabled = false;
  }

  (async () => {
    try {
      const r = await fetch('/readyz').then((x) => x.json());
      if (stopped) return;
      const h0 = Number(r.head || 0);
      setText(head, h0);
      f = feed('/api/v1/feeds/events', { from: Math.max(0, h0 - BACK) }, ['event'], (type, e) => add(e));
    } catch (e) { main.append(errorBox(e)); }
  })();
  return () => { stopped = true; if (f) f.stop(); };
}
