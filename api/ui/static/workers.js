// workers.js: the workers (incarnation, runners, slots in use, last
// heartbeat; lost ones struck through). Refreshed when the queues change
// (their feed) and every few seconds for the heartbeats' ages.
import { allWorkers, feed, h, fmtAge, fmtTime, tag, errorBox, throttle } from './core.js';

export function render(main) {
  let stopped = false;
  const body = h('tbody', { id: 'w-rows' });
  const summary = h('p', { id: 'w-summary', class: 'muted' });
  const msg = h('div', {});
  main.append(h('h1', {}, 'Workers'), summary, msg,
    h('table', {}, h('thead', {}, h('tr', {},
      h('th', {}, 'worker'), h('th', {}, 'status'), h('th', {}, 'incarnation'), h('th', {}, 'runners'),
      h('th', { class: 'num' }, 'slots in use'), h('th', {}, 'last heartbeat'), h('th', {}, 'executions'))), body));

  async function load() {
    try {
      const ws = (await allWorkers()).workers;
      if (stopped) return;
      ws.sort((a, b) => (a.status === 'lost') - (b.status === 'lost') || a.id.localeCompare(b.id));
      const alive = ws.filter((w) => w.status !== 'lost').length;
      summary.textContent = ws.length + ' workers, ' + alive + ' not lost, ' + ws.reduce((n, w) => n + (w.in_flight || 0), 0) + ' executions in flight' +
        ' (workers lost or stopped over an hour ago are not shown)';
      body.replaceChildren(...ws.map((w) => h('tr', { 'data-id': w.id, class: w.status === 'lost' ? 'lost' : '' },
        h('td', {}, w.id), h('td', {}, tag(w.status)), h('td', {}, w.incarnation || '—'), h('td', {}, (w.runners || []).join(', ') || 'all built-in'),
        h('td', { class: 'num' }, w.in_flight + ' / ' + w.slots), h('td', { title: fmtTime(w.last_heartbeat) }, fmtAge(w.last_heartbeat)),
        h('td', {}, ...(w.executions || []).slice(0, 5).flatMap((x) => [h('a', { href: '#/execution/' + encodeURIComponent(x) }, x.slice(0, 8)), ' ']),
          (w.executions || []).length > 5 ? '…' : ''))));
      msg.replaceChildren();
    } catch (e) { if (!stopped) msg.replaceChildren(errorBox(e)); }
  }
  const reload = throttle(load, 1000);
  const timer = setInterval(load, 5000);
  load();
  const f = feed('/api/v1/feeds/queue-stats', {}, ['queue-stats'], reload);
  return () => { stopped = true; clearInterval(timer); f.stop(); };
}
