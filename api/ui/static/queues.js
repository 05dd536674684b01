// queues.js: every action's queue, live from /feeds/queue-stats. Rows are
// updated in place, at most once per animation frame and only those on
// screen; they are a CSS grid of rows that the browser lays out one by one
// and skips off screen (content-visibility), not a table whose every change
// lays out all of it, so 1,000 actions stay smooth; completions per second come from the change of total_completed
// between samples taken every SAMPLE_MS, kept for the last minutes.
import { api, feed, h, setText, sparkline, drawSpark, fmtMs, errorBox } from './core.js';

const SAMPLE_MS = 2000;
const KEEP = 150;        // samples: 5 minutes
const RATE_OVER = 5;     // samples the rate is measured over (10 s)

export function render(main) {
  const figures = {
    actions: h('b', { id: 'q-actions' }, '0'), waiting: h('b', { id: 'q-waiting' }, '0'),
    active: h('b', { id: 'q-active' }, '0'), rate: h('b', { id: 'q-rate' }, '0'), position: h('b', { id: 'q-position' }, '—'),
  };
  const total = { samples: [], spark: sparkline([], true) };
  const filter = h('input', { type: 'search', id: 'q-filter', placeholder: 'filter actions' });
  const tbody = h('div', { id: 'q-rows', role: 'rowgroup' });
  main.append(
    h('h1', {}, 'Queues'),
    h('div', { class: 'bar' },
      fig(figures.actions, 'actions'), fig(figures.waiting, 'waiting'), fig(figures.active, 'running'),
      fig(figures.rate, 'completions/s'), h('div', { class: 'figure' }, total.spark, h('span', {}, 'completions/s, last 5 min')),
      fig(figures.position, 'log position'), filter),
    h('div', { class: 'grid', id: 'q-table', role: 'table' }, h('div', { class: 'row head', role: 'row' },
      th('action'), th('waiting', 'num'), th('active / limit', 'num'), th('state'), th('wait p50', 'num'), th('wait p95', 'num'),
      th('completions/s', 'num'), th('last 5 min'), th('completed', 'num'), th('failed', 'num'), th('cancelled', 'num')),
    tbody));

  const rows = new Map(); // action → {stats, el, cells, samples, visible, stale}
  const dirty = new Set();
  const sums = { waiting: 0, active: 0 };
  let frame = 0, stopped = false, f = null, position = 0;
  // Only rows on screen are drawn; the others are marked stale and drawn
  // when they scroll into view, so the work per frame stays a screenful.
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const r = e.target.row;
      r.visible = e.isIntersecting;
      if (r.visible && r.stale) { dirty.add(r); schedule(); }
    }
  });

  function row(st) {
    let r = rows.get(st.action);
    if (r) return r;
    const cells = {};
    for (const k of ['len', 'active', 'state', 'p50', 'p95', 'rate', 'spark', 'completed', 'failed', 'cancelled']) cells[k] = h('div', { role: 'cell', class: k === 'state' || k === 'spark' ? k : 'num ' + k });
    const spark = sparkline([]);
    cells.spark.append(spark);
    const el = h('div', { class: 'row', role: 'row', 'data-action': st.action },
      h('div', { role: 'cell', class: 'name' }, h('a', { href: '#/queue/' + encodeURIComponent(st.action) }, st.action)),
      cells.len, cells.active, cells.state, cells.p50, cells.p95, cells.rate, cells.spark, cells.completed, cells.failed, cells.cancelled);
    r = { stats: { queue_length: 0, active_count: 0 }, el, cells, spark, samples: [], visible: false, stale: true };
    el.row = r;
    rows.set(st.action, r);
    tbody.append(el);
    seen.observe(el);
    applyFilter(r, st.action);
    return r;
  }

  function update(st) {
    const r = row(st);
    sums.waiting += st.queue_length - r.stats.queue_length;
    sums.active += st.active_count - r.stats.active_count;
    r.stats = st;
    if (st.position > position) position = st.position;
    dirty.add(r);
    schedule();
  }

  // A frame when shown; a hidden tab gets no frames, so a timer there.
  function schedule() {
    if (!frame) frame = document.hidden ? setTimeout(flush, 250) : requestAnimationFrame(flush);
  }

  function flush() {
    frame = 0;
    for (const r of dirty) {
      if (!r.visible && !document.hidden) { r.stale = true; continue; } // a hidden tab has no viewport to go by
      r.stale = false;
      const s = r.stats, c = r.cells;
      setText(c.len, s.queue_length);
      setText(c.active, s.active_count + ' / ' + s.max_concurrent);
      setText(c.state, s.paused ? 'paused' : 'active');
      r.el.classList.toggle('paused', !!s.paused);
      setText(c.p50, fmtMs(s.wait_p50_ms));
      setText(c.p95, fmtMs(s.wait_p95_ms));
      setText(c.completed, s.total_completed);
      setText(c.failed, (s.total_failed || 0) + (s.total_timed_out || 0));
      setText(c.cancelled, s.total_cancelled);
      setText(c.rate, rateOf(r.samples).toFixed(1));
      drawSpark(r.spark, deltas(r.samples));
    }
    dirty.clear();
    setText(figures.actions, rows.size);
    setText(figures.waiting, sums.waiting);
    setText(figures.active, sums.active);
    setText(figures.position, position);
  }

  function rateOf(samples) {
    const n = samples.length;
    if (n < 2) return 0;
    const back = Math.min(RATE_OVER, n - 1);
    return (samples[n - 1] - samples[n - 1 - back]) / (back * SAMPLE_MS / 1000);
  }

  function deltas(samples) {
    const out = [];
    for (let i = 1; i < samples.length; i++) out.push((samples[i] - samples[i - 1]) / (SAMPLE_MS / 1000));
    return out;
  }

  function sample() {
    let sum = 0;
    for (const r of rows.values()) {
      const done = r.stats.total_completed || 0;
      sum += done;
      r.samples.push(done);
      if (r.samples.length > KEEP) r.samples.shift();
      dirty.add(r); // its rate and line moved
    }
    total.samples.push(sum);
    if (total.samples.length > KEEP) total.samples.shift();
    setText(figures.rate, rateOf(total.samples).toFixed(1));
    drawSpark(total.spark, deltas(total.samples));
    schedule();
  }

  function applyFilter(r, action) {
    const q = filter.value.trim();
    r.el.hidden = q !== '' && !action.includes(q);
  }
  filter.addEventListener('input', () => { for (const [a, r] of rows) applyFilter(r, a); });

  const timer = setInterval(sample, SAMPLE_MS);
  (async () => {
    try {
      const list = await api('/api/v1/queue-stats');
      if (stopped) return;
      performance.mark('queues:stats');
      for (const st of list.queue_stats) update(st);
      position = list.position;
      sample();
      f = feed('/api/v1/feeds/queue-stats', { from: list.position }, ['queue-stats'], (type, st) => update(st));
    } catch (e) { main.append(errorBox(e)); }
  })();

  return () => { stopped = true; clearInterval(timer); if (f) f.stop(); seen.disconnect(); if (frame) { cancelAnimationFrame(frame); clearTimeout(frame); } };
}

function th(label, cls) { return h('div', { role: 'columnheader', class: cls || '' }, label); }

function fig(b, label) { return h('div', { class: 'figure' }, b, h('span', {}, label)); }
