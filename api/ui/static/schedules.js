// schedules.js: the cron schedules, each with its recent ticks (the
// execution each tick requested and its status, or none when the log holds
// no execution for it). An admin can pause and resume a schedule. Refreshed
// when the queues change (their feed: a tick is a request) and every few
// seconds for the ticks that come due.
import { api, feed, h, fmtTime, tag, errorBox, throttle, may } from './core.js';

export function render(main) {
  let stopped = false;
  const body = h('tbody', { id: 's-rows' });
  const summary = h('p', { id: 's-summary', class: 'muted' });
  const msg = h('div', {});
  main.append(h('h1', {}, 'Schedules'), summary, msg,
    h('table', {}, h('thead', {}, h('tr', {},
      h('th', {}, 'schedule'), h('th', {}, 'action'), h('th', {}, 'cron'), h('th', {}, 'timezone'),
      h('th', {}, 'state'), h('th', {}, 'last tick'), h('th', {}, 'recent ticks'), h('th', {}, ''))), body));

  async function act(ref, what) {
    try { await api('/api/v1/schedules/' + encodeURIComponent(ref) + '/' + what, { method: 'POST' }); msg.replaceChildren(); load(); } catch (e) { msg.replaceChildren(errorBox(e)); }
  }

  function ticks(s) {
    return (s.ticks || []).map((k) => k.status
      ? h('a', { class: 'tick', href: '#/execution/' + encodeURIComponent(k.execution), title: fmtTime(k.at), 'data-status': k.status }, tag(k.status))
      : h('span', { class: 'tick muted', title: fmtTime(k.at) + ': no execution in the log' }, 'missed'));
  }

  async function load() {
    try {
      const list = (await api('/api/v1/schedules')).schedules || [];
      // each schedule's recent ticks come with the schedule itself
      const full = await Promise.all(list.map((s) => api('/api/v1/schedules/' + encodeURIComponent(s.ref)).catch(() => s)));
      if (stopped) return;
      summary.textContent = full.length ? full.length + ' schedules, ' + full.filter((s) => !s.paused).length + ' active' : 'No schedules: define one with POST /api/v1/schedules (docs/policies.md).';
      body.replaceChildren(...full.map((s) => h('tr', { 'data-ref': s.ref, class: s.paused ? 'paused' : '' },
        h('td', {}, s.ref), h('td', {}, h('a', { href: '#/queue/' + encodeURIComponent(s.action) }, s.action)),
        h('td', {}, h('code', {}, s.cron)), h('td', {}, s.timezone || 'UTC'),
        h('td', { class: 'state' }, s.paused ? 'paused' : 'active'),
        h('td', { class: 'last', title: s.last_tick ? fmtTime(s.last_tick) : '' }, s.last_tick ? fmtTime(s.last_tick) : '—'),
        h('td', { class: 'ticks' }, ...ticks(s)),
        h('td', {}, may('pause')
          ? h('button', { class: s.paused ? 'resume' : 'pause', onclick: () => act(s.ref, s.paused ? 'resume' : 'pause') }, s.paused ? 'resume' : 'pause')
          : ''))));
      msg.replaceChildren();
    } catch (e) { if (!stopped) msg.replaceChildren(errorBox(e)); }
  }
  const reload = throttle(load, 1000);
  const timer = setInterval(load, 5000);
  load();
  const f = feed('/api/v1/feeds/queue-stats', {}, ['queue-stats'], reload);
  return () => { stopped = true; clearInterval(timer); f.stop(); };
}
