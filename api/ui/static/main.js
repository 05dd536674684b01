// main.js: sign-in, the header and the hash router. Each page is a module
// whose render(main, arg) draws it and answers a function that stops its
// feeds and timers.
import { api, session, setToken, ApiError, h } from './core.js';
import * as queues from './queues.js';
import * as queue from './queue.js';
import * as execution from './execution.js';
import * as workers from './workers.js';
import * as log from './log.js';
import * as schedules from './schedules.js';

const pages = { queues, queue, execution, workers, schedules, log };
let stopPage = null;

function route() {
  const [, name = 'queues', ...rest] = (location.hash || '#/queues').split('/');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : '';
  return { name: pages[name] ? name : 'queues', arg };
}

function show() {
  if (stopPage) { stopPage(); stopPage = null; }
  const { name, arg } = route();
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === name || (name === 'queue' && a.dataset.nav === 'queues'));
  const main = document.getElementById('main');
  main.replaceChildren();
  main.dataset.page = name;
  stopPage = pages[name].render(main, arg) || null;
}

// whoami learns the role of the token in session storage; on 401 it asks
// for a token.
async function whoami() {
  try {
    const me = await api('/api/v1/whoami', { quiet: true });
    session.role = me.role;
    session.anonymous = !!me.anonymous;
  } catch (e) {
    if (e instanceof ApiError && e.routeMissing) { session.role = 'admin'; return true; } // an older server: let it decide
    if (e instanceof ApiError && e.status === 401) return false;
    throw e;
  }
  return true;
}

function showWho() {
  const who = document.getElementById('who');
  who.textContent = session.anonymous ? 'anonymous (loopback)' : ('role: ' + session.role);
  who.dataset.role = session.role || '';
  document.getElementById('signout').hidden = session.anonymous || !session.token;
}

function askToken(message) {
  const dlg = document.getElementById('login');
  document.getElementById('login-error').textContent = message || '';
  if (!dlg.open) dlg.showModal();
  document.getElementById('login-token').focus();
}

async function signedIn() {
  if (stopPage) { stopPage(); stopPage = null; }
  showWho();
  show();
}

async function start() {
  session.onUnauthorized = () => { setToken(''); askToken('The token was refused; give another.'); };
  document.getElementById('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setToken(document.getElementById('login-token').value.trim());
    let ok = false;
    try { ok = await whoami(); } catch (e) { document.getElementById('login-error').textContent = e.message; return; }
    if (!ok) { setToken(''); askToken('That token is not valid.'); return; }
    document.getElementById('login').close();
    document.getElementById('login-token').value = '';
    signedIn();
  });
  document.getElementById('signout').addEventListener('click', () => {
    setToken('');
    location.hash = '#/queues';
    location.reload();
  });
  window.addEventListener('hashchange', show);
  boot();
}

async function boot() {
  let ok = false;
  try { ok = await whoami(); } catch (e) {
    document.getElementById('main').replaceChildren(h('p', { class: 'error' }, 'The server does not answer: ' + e.message));
    setTimeout(boot, 2000);
    return;
  }
  if (!ok) { setToken(''); askToken(); return; }
  signedIn();
}

start();
