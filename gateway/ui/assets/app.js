// The web UI's entry point: signs in (one-time code, pasted token, or a
// paired device), connects to the control plane, and shows one page per
// hash route (#/chat, #/sessions, ...). docs/ui.md describes it.

import {Gateway, GatewayError, loadDevice, createDevice, forgetDevice,
  createSessionKey, storeSessionKey, forgetSessionKey} from './lib/gateway.js';
import {h, fill, field, notice} from './lib/dom.js';

const PAGES = {
  chat: ['Chat', './pages/chat.js', 'sb-chat'],
  sessions: ['Sessions', './pages/sessions.js', 'sb-sessions'],
  channels: ['Channels', './pages/channels.js', 'sb-channels'],
  approvals: ['Approvals', './pages/approvals.js', 'sb-approvals'],
  schedules: ['Schedules', './pages/schedules.js', 'sb-schedules'],
  workspaces: ['Workspaces', './pages/workspaces.js', 'sb-workspaces'],
  health: ['Health', './pages/health.js', 'sb-health'],
};

const main = document.getElementById('main');
const conn = document.getElementById('conn');
const nav = document.getElementById('nav');
const signout = document.getElementById('signout');
const wsUrl = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws';

// Signs in with a code or the token: a fresh key for the session, whose
// public half the gateway keeps; the page signs each connection with it.
async function signIn(credential) {
  const key = await createSessionKey();
  const r = await auth('/auth/login', {...credential, key: key.publicKey});
  await storeSessionKey(key);
  return r;
}

async function auth(path, body) {
  const r = await fetch(path, {
    method: body ? 'POST' : 'GET',
    headers: body ? {'Content-Type': 'application/json'} : {},
    body: body ? JSON.stringify(body) : undefined,
    credentials: 'same-origin',
    cache: 'no-store',
  });
  let j = {};
  try { j = await r.json(); } catch { /* not JSON */ }
  if (!r.ok) throw new Error(j.error || ('the gateway answered ' + r.status));
  return j;
}

function setConn(text, kind) {
  conn.textContent = text;
  conn.className = 'conn ' + (kind || '');
}

// ---- signing in ----

function loginView(message) {
  const token = h('input', {type: 'password', autocomplete: 'off', spellcheck: 'false', required: true});
  const status = h('div', {'aria-live': 'polite'});
  const form = h('form', {class: 'card login', onsubmit: async (e) => {
    e.preventDefault();
    status.replaceChildren(notice('info', 'Signing in…'));
    try {
      await signIn({token: token.value.trim()});
      token.value = '';
      start();
    } catch (err) {
      status.replaceChildren(notice('error', err.message));
    }
  }},
  h('h1', {}, 'Sign in to this gateway'),
  message ? notice('error', message) : null,
  h('p', {}, 'Run ', h('code', {}, 'switchboard dashboard'), ' on the gateway\'s machine: it opens this page signed in, with a code that works once.'),
  h('p', {}, 'Or paste the gateway token (', h('code', {}, '$SWITCHBOARD_HOME/gateway.token'), '). The page exchanges it for a session cookie and does not keep it.'),
  field('Gateway token', token),
  h('button', {type: 'submit', class: 'primary'}, 'Sign in'),
  status,
  h('hr'),
  h('h2', {}, 'Or pair this browser'),
  h('p', {}, 'The browser makes its own key (which it cannot give away) and asks to be approved as a device; approve it with ', h('code', {}, 'switchboard devices approve ID'), ' or from a signed-in browser\'s Channels page.'),
  h('button', {type: 'button', onclick: () => pairDevice()}, 'Pair this browser'));
  fill(main, form);
  nav.hidden = true;
  signout.hidden = true;
  setConn('signed out');
  token.focus();
}

async function pairDevice(existing) {
  let dev = existing;
  const status = h('div', {class: 'card', 'aria-live': 'polite'});
  fill(main, status);
  try {
    if (!dev) dev = await createDevice();
  } catch (e) {
    status.replaceChildren(notice('error', e.message), h('button', {type: 'button', onclick: () => loginView()}, 'Back'));
    return;
  }
  const gw = new Gateway(wsUrl);
  gw.device = dev;
  try {
    await gw.open();
    enter(gw);
  } catch (e) {
    if (e.code === 'NOT_PAIRED') {
      status.replaceChildren(h('h1', {}, 'Waiting for approval'),
        h('p', {}, 'This browser asked to be approved as a device. On the gateway\'s machine run:'),
        h('pre', {class: 'cmd'}, 'switchboard devices approve ' + dev.id),
        h('p', {}, 'This page tries again every few seconds.'),
        h('button', {type: 'button', onclick: async () => { await forgetDevice(); loginView(); }}, 'Cancel and forget this device'));
      setTimeout(() => { if (main.contains(status)) pairDevice(dev); }, 3000);
    } else {
      status.replaceChildren(notice('error', e.message),
        h('button', {type: 'button', onclick: async () => { await forgetDevice(); loginView(); }}, 'Forget this device'),
        h('button', {type: 'button', onclick: () => loginView()}, 'Back'));
    }
  }
}

// ---- the signed-in page ----

let current = null;

function enter(gw) {
  window.switchboard = gw;
  current = gw;
  nav.hidden = false;
  signout.hidden = false;
  setConn('connected', 'ok');
  gw.on('state', (s) => {
    if (s.state === 'connected') setConn('connected', 'ok');
    else if (s.state === 'disconnected') setConn('reconnecting…', 'warn');
    else if (s.state === 'refused') loginView(s.error ? s.error.message : 'signed out');
  });
  gw.on('shutdown', () => setConn('the gateway is stopping', 'warn'));
  watchApprovals(gw);
  window.addEventListener('hashchange', route);
  route();
}

async function watchApprovals(gw) {
  const badge = document.getElementById('approvals-badge');
  const pending = new Set();
  const show = () => {
    badge.hidden = pending.size === 0;
    badge.textContent = String(pending.size);
    badge.setAttribute('aria-label', pending.size + ' waiting');
  };
  if (!gw.can('operator.admin')) return;
  const load = async () => {
    try {
      const r = await gw.call('approvals.list');
      pending.clear();
      for (const a of r.approvals) pending.add(a.id);
      show();
    } catch { /* shown on the page itself */ }
  };
  gw.on('approval.requested', (a) => { pending.add(a.id); show(); });
  gw.on('approval.resolved', (a) => { pending.delete(a.id); show(); });
  gw.on('reconnected', load);
  load();
}

async function route() {
  const name = (location.hash.match(/^#\/([a-z]+)/) || [])[1] || 'chat';
  const page = PAGES[name] || PAGES.chat;
  for (const a of nav.querySelectorAll('a')) {
    if (a.getAttribute('href') === '#/' + name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  nav.classList.remove('open');
  document.querySelector('.menu-toggle').setAttribute('aria-expanded', 'false');
  document.title = page[0] + ' · Switchboard';
  const existing = main.firstElementChild;
  if (existing && existing.localName === page[2]) {
    existing.refresh();
    return;
  }
  try {
    await import(page[1]);
  } catch (e) {
    fill(main, notice('error', 'cannot load the page: ' + e.message));
    return;
  }
  fill(main, document.createElement(page[2]));
  main.focus({preventScroll: true});
}

document.querySelector('.menu-toggle').addEventListener('click', (e) => {
  const open = nav.classList.toggle('open');
  e.currentTarget.setAttribute('aria-expanded', String(open));
});

signout.addEventListener('click', async () => {
  if (current) current.close();
  current = null;
  try { await auth('/auth/logout', {}); } catch { /* signed out anyway */ }
  await forgetSessionKey();
  await forgetDevice();
  loginView();
});

async function start() {
  // A one-time code from `switchboard dashboard` comes after the '#': take
  // it out of the address at once, then trade it for a session cookie.
  const m = location.hash.match(/^#code=([A-Za-z0-9_-]+)/);
  if (m) {
    history.replaceState(null, '', location.pathname + location.search + '#/chat');
    try {
      await signIn({code: m[1]});
    } catch (e) {
      loginView(e.message);
      return;
    }
  }
  let session;
  try {
    session = await auth('/auth/session');
  } catch (e) {
    fill(main, notice('error', e.message));
    return;
  }
  if (session.signedIn) {
    const gw = new Gateway(wsUrl);
    try {
      await gw.open();
      enter(gw);
    } catch (e) {
      loginView(e instanceof GatewayError ? e.message : String(e));
    }
    return;
  }
  const dev = await loadDevice();
  if (dev) {
    pairDevice(dev);
    return;
  }
  loginView();
}

start();
