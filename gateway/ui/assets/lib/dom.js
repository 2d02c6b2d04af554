// Small helpers to build the page: elements, formatting, and a page base
// class. No framework: every page is a custom element in light DOM.

/** h('button', {type: 'button', onclick: f}, 'Send') -> an element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces el's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

export function fmtAgo(ms) {
  if (!ms) return '–';
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < -5) return 'in ' + fmtDuration(-s * 1000);
  if (s < 60) return s + ' s ago';
  return fmtDuration(s * 1000) + ' ago';
}

export function fmtDuration(ms) {
  if (ms === undefined || ms === null) return '–';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return hrs + ' h ' + (m % 60) + ' min';
  return Math.floor(hrs / 24) + ' d ' + (hrs % 24) + ' h';
}

export function fmtBytes(n) {
  if (!n && n !== 0) return '–';
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + ' MiB';
  return (n / (1 << 30)).toFixed(2) + ' GiB';
}

export function short(id, n = 10) {
  return id ? String(id).slice(0, n) : '–';
}

export function clip(text, n = 400) {
  const s = typeof text === 'string' ? text : JSON.stringify(text);
  return s.length > n ? s.slice(0, n) + '…' : s;
}

/** A labelled form field. */
export function field(label, control, hint) {
  const id = control.id || ('f-' + Math.random().toString(36).slice(2, 9));
  control.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), control,
    hint ? h('small', {class: 'hint'}, hint) : null);
}

/** A status line that screen readers announce. */
export function notice(kind, text) {
  return h('p', {class: 'notice ' + kind, role: kind === 'error' ? 'alert' : 'status'}, text);
}

/** Query parameters of the current hash route (#/page?a=1). */
export function routeParams() {
  const q = location.hash.split('?')[1] || '';
  return Object.fromEntries(new URLSearchParams(q));
}

export function routeTo(page, params) {
  const q = params ? '?' + new URLSearchParams(params).toString() : '';
  location.hash = '#/' + page + q;
}

/**
 * A page: a custom element that gets the gateway connection, renders itself
 * and re-reads what it shows after a reconnect. Subclasses implement
 * render() and may subscribe to gateway events with this.listen().
 */
export class Page extends HTMLElement {
  connectedCallback() {
    this.gw = window.switchboard;
    this.offs = [];
    this.listen('reconnected', () => this.refresh());
    this.render();
  }
  disconnectedCallback() {
    for (const off of this.offs) off();
    this.offs = [];
    if (this.timer) clearInterval(this.timer);
  }
  listen(name, fn) {
    this.offs.push(this.gw.on(name, fn));
  }
  every(ms, fn) {
    this.timer = setInterval(fn, ms);
  }
  refresh() {
    this.render();
  }
  /** Runs a call and shows its error in place of target. */
  async call(method, params, target) {
    try {
      return await this.gw.call(method, params);
    } catch (e) {
      if (target) target.replaceChildren(notice('error', e.message));
      throw e;
    }
  }
}
