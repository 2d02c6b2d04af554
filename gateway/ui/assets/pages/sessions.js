// Sessions: list and search; a transcript viewer where each turn shows its
// provenance: the workspace commit and file hashes its prompt was built
// from, the model that answered, tokens and cache hits, compactions; and a
// link to the diff between the workspace versions of two turns.
// Methods: sessions.list, sessions.transcript.

import {h, fill, notice, fmtTime, fmtAgo, short, clip, Page, routeParams, routeTo} from '../lib/dom.js';
import {table} from './channels.js';

class SessionsPage extends Page {
  render() {
    const p = routeParams();
    if (p.key) return this.renderTranscript(p.key, p.id);
    this.search = h('input', {type: 'search', placeholder: 'agent:main:…', oninput: () => this.draw()});
    this.out = h('div', {'aria-live': 'polite'});
    fill(this, h('h1', {}, 'Sessions'),
      h('div', {class: 'toolbar'}, h('div', {class: 'field grow'}, h('label', {for: 'sess-q'}, 'Search sessions'), Object.assign(this.search, {id: 'sess-q'}))),
      this.out);
    this.load();
  }

  async load() {
    try {
      const r = await this.call('sessions.list', {limit: 1000}, this.out);
      this.sessions = r.sessions;
      this.draw();
    } catch { /* shown */ }
  }

  draw() {
    const q = this.search.value.trim().toLowerCase();
    const rows = (this.sessions || []).filter((s) => !q || s.key.toLowerCase().includes(q) || s.agentId.includes(q));
    fill(this.out, rows.length ? table(['Session', 'Agent', 'Kind', 'Updated'], rows.map((s) => [
      h('a', {href: '#/sessions?key=' + encodeURIComponent(s.key)}, s.key), s.agentId, s.kind, fmtAgo(s.updatedAt)]))
      : h('p', {class: 'empty'}, q ? 'No session matches.' : 'No session yet.'));
  }

  async renderTranscript(key, sid) {
    const out = h('div', {'aria-live': 'polite'}, h('p', {class: 'muted'}, 'Loading…'));
    fill(this, h('p', {}, h('a', {href: '#/sessions'}, '← All sessions')),
      h('h1', {}, 'Transcript'), h('p', {}, h('code', {}, key), ' · ',
        h('a', {href: '#/chat?agent=' + encodeURIComponent(key.split(':')[1]) + '&session=' + encodeURIComponent(key)}, 'open in Chat')), out);
    let t;
    try {
      t = await this.gw.call('sessions.transcript', sid ? {sessionKey: key, sessionId: sid} : {sessionKey: key});
    } catch (e) {
      fill(out, notice(e.code === 'NOT_FOUND' ? 'warn' : 'error', e.message));
      return;
    }
    const turns = groupTurns(t.entries);
    this.pick = [];
    const compare = h('div', {class: 'compare', 'aria-live': 'polite'});
    const onPick = (turn, box) => {
      if (box.checked) this.pick.push(turn); else this.pick = this.pick.filter((x) => x !== turn);
      while (this.pick.length > 2) { const old = this.pick.shift(); old.box.checked = false; }
      const [a, b] = this.pick;
      fill(compare, a && b && a.ws && b.ws
        ? h('a', {class: 'button', href: diffHref(t.agentId, a.ws.commit, b.ws.commit)}, 'Diff the workspace between turns ' + a.n + ' and ' + b.n)
        : h('span', {class: 'muted'}, 'Tick two turns to diff their workspace versions.'));
    };
    fill(out,
      h('p', {class: 'muted'}, 'Transcript ', h('code', {}, t.sessionId), ', ', t.total, ' entries', t.truncated ? ' (the oldest are not shown)' : '', '.'),
      compare,
      turns.map((turn, i) => this.turnView(t.agentId, turn, turns[i - 1], onPick)));
    onPick(null, {checked: false});
  }

  turnView(agent, turn, prev, onPick) {
    const ws = turn.ws;
    const box = h('input', {type: 'checkbox', 'aria-label': 'Pick turn ' + turn.n + ' to compare', onchange: () => onPick(turn, box)});
    turn.box = box;
    const prov = [];
    if (ws) {
      prov.push(h('dt', {}, 'Workspace'), h('dd', {class: 'commit'},
        ws.commit === 'none' ? 'not a git repository' : h('a', {href: commitHref(agent, ws.commit), class: 'commit-id', title: ws.commit}, short(ws.commit, 12)),
        ws.dirty ? h('span', {class: 'pill warn', title: 'a bootstrap file differed from the commit'}, 'dirty') : null,
        ' · hash ', h('code', {title: ws.hash}, short(ws.hash, 12)),
        prev && prev.ws && prev.ws.commit !== ws.commit && ws.commit !== 'none' && prev.ws.commit !== 'none'
          ? [' · ', h('a', {href: diffHref(agent, prev.ws.commit, ws.commit)}, 'diff from the previous turn')] : null));
      if (ws.files) prov.push(h('dt', {}, 'Files'), h('dd', {}, h('details', {}, h('summary', {}, Object.keys(ws.files).length + ' files'),
        h('ul', {class: 'plain mono'}, Object.entries(ws.files).map(([f, hs]) => h('li', {}, f, ' ', h('code', {title: hs}, short(hs, 16))))))));
    }
    if (turn.models.size) prov.push(h('dt', {}, 'Model'), h('dd', {}, [...turn.models].join(', ')));
    const u = turn.usage;
    if (u) prov.push(h('dt', {}, 'Tokens'), h('dd', {}, (u.input_tokens || 0) + ' in · ' + (u.output_tokens || 0) + ' out · cache ' +
      (u.cache_read_tokens || 0) + ' read / ' + (u.cache_write_tokens || 0) + ' written'));
    if (turn.end) prov.push(h('dt', {}, 'Ended'), h('dd', {}, turn.end.end + (turn.end.detail ? ': ' + turn.end.detail : '') +
      ' · ' + (turn.end.model_calls || 0) + ' model calls, ' + (turn.end.tool_calls || 0) + ' tool calls'));
    for (const c of turn.compactions)
      prov.push(h('dt', {}, 'Compaction'), h('dd', {}, c.type === 'compaction'
        ? 'level ' + c.level + ': ' + (c.reason || '') + (c.tokens_before ? ' (' + c.tokens_before + ' → ' + c.tokens_after + ' tokens)' : '')
        : 'failed (level ' + c.level + '): ' + (c.error || '')));
    return h('article', {class: 'card turn', dataset: {turn: String(turn.n)}},
      h('header', {class: 'turn-head'}, h('h2', {}, 'Turn ', turn.n), h('span', {class: 'muted'}, fmtTime(turn.ts)), h('label', {class: 'pick'}, box, ' compare')),
      turn.items.map((it) => it.kind === 'text'
        ? h('div', {class: 'msg ' + it.role}, h('div', {class: 'who'}, it.role === 'user' ? 'User' : 'Agent'), h('div', {class: 'text'}, it.text))
        : h('details', {class: 'tool' + (it.error ? ' error' : '')}, h('summary', {}, h('span', {class: 'tool-name'}, it.name), ' ',
          h('code', {class: 'args'}, clip(JSON.stringify(it.input), 100)), it.seconds !== undefined ? h('span', {class: 'dur'}, (it.seconds * 1000).toFixed(0) + ' ms') : null),
          h('pre', {}, JSON.stringify(it.input, null, 2)), h('pre', {class: 'result'}, it.result === undefined ? '' : clip(it.result, 4000)))),
      h('dl', {class: 'kv provenance', 'aria-label': 'Provenance of turn ' + turn.n}, prov));
  }
}

function commitHref(agent, commit) {
  return '#/workspaces?' + new URLSearchParams({agent, commit}).toString();
}

function diffHref(agent, from, to) {
  return '#/workspaces?' + new URLSearchParams({agent, from, to}).toString();
}

/** Cuts a transcript's entries into turns. */
export function groupTurns(entries) {
  const turns = [];
  let cur = null;
  const tools = new Map();
  const start = (ts) => {
    cur = {n: turns.length + 1, ts: Date.parse(ts), ws: null, items: [], models: new Set(), usage: null, end: null, compactions: []};
    turns.push(cur);
  };
  for (const e of entries) {
    if (e.type === 'session') continue;
    if (e.type === 'event' && e.event === 'workspace') {
      if (!cur || cur.end || cur.ws || cur.items.some((i) => i.role === 'assistant' || i.kind === 'tool')) start(e.ts);
      cur.ws = e.workspace;
      continue;
    }
    if (e.type === 'message' && e.message.role === 'user' && (e.message.content || []).some((b) => b.type === 'text') &&
        (!cur || cur.end)) start(e.ts);
    if (!cur) start(e.ts);
    if (e.type === 'compaction' || (e.type === 'event' && e.event === 'compaction_failed')) {
      cur.compactions.push(e);
      continue;
    }
    if (e.type === 'event' && e.event === 'turn_end') {
      cur.end = e;
      cur.usage = e.usage || cur.usage;
      continue;
    }
    if (e.type === 'event' && e.event === 'tool_end') {
      const t = tools.get(e.tool_use_id);
      if (t) t.seconds = e.seconds;
      continue;
    }
    if (e.type !== 'message') continue;
    const m = e.message;
    if (m.role === 'assistant' && e.model) cur.models.add(e.model);
    if (m.role === 'assistant' && e.workspace && !cur.ws) cur.ws = e.workspace;
    for (const b of m.content || []) {
      if (b.type === 'text' && b.text) cur.items.push({kind: 'text', role: m.role, text: b.text});
      else if (b.type === 'tool_use') {
        const t = {kind: 'tool', name: b.name, input: b.input};
        tools.set(b.id, t);
        cur.items.push(t);
      } else if (b.type === 'tool_result') {
        const t = tools.get(b.tool_use_id);
        if (t) { t.result = typeof b.content === 'string' ? b.content : JSON.stringify(b.content); t.error = b.is_error; }
      }
    }
  }
  return turns;
}

customElements.define('sb-sessions', SessionsPage);
