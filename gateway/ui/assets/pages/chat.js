// Chat: pick an agent and a session, send, watch the reply stream with its
// tool calls as they run, abort, scroll back through the history.
// Methods: agents.list, sessions.list, sessions.transcript, sessions.subscribe,
// chat.send, chat.abort; events: chat, agent, approval.requested.

import {h, fill, field, notice, clip, fmtDuration, fmtTime, Page, routeParams, routeTo} from '../lib/dom.js';

function newKey(agent) {
  const r = crypto.getRandomValues(new Uint8Array(6));
  return 'agent:' + agent + ':web:' + [...r].map((b) => b.toString(16).padStart(2, '0')).join('');
}

function idem() {
  const r = crypto.getRandomValues(new Uint8Array(12));
  return 'ui-' + [...r].map((b) => b.toString(16).padStart(2, '0')).join('');
}

class ChatPage extends Page {
  render() {
    const p = routeParams();
    this.agent = p.agent || this.agent || '';
    this.session = p.session || this.session || '';
    this.runs = new Map();   // runId -> {bubble, textEl, tools: Map}
    this.active = null;      // the runId streaming in this session
    this.agentSel = h('select', {onchange: () => this.pickAgent(this.agentSel.value)});
    this.sessionSel = h('select', {onchange: () => this.pickSession(this.sessionSel.value)});
    this.log = h('div', {class: 'chat-log', role: 'log', 'aria-live': 'polite', 'aria-label': 'Conversation'});
    this.input = h('textarea', {rows: 3, placeholder: 'Message (Enter sends, Shift+Enter for a new line)',
      onkeydown: (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); this.send(); } }});
    this.sendBtn = h('button', {type: 'submit', class: 'primary'}, 'Send');
    this.abortBtn = h('button', {type: 'button', disabled: true, onclick: () => this.abort()}, 'Abort');
    this.status = h('div', {class: 'chat-status', 'aria-live': 'polite'});
    fill(this,
      h('div', {class: 'toolbar'},
        field('Agent', this.agentSel),
        field('Session', this.sessionSel),
        h('button', {type: 'button', onclick: () => this.pickSession(newKey(this.agent))}, 'New session')),
      this.log,
      this.status,
      h('form', {class: 'composer', onsubmit: (e) => { e.preventDefault(); this.send(); }},
        field('Message', this.input), h('div', {class: 'actions'}, this.sendBtn, this.abortBtn)));
    this.offs.forEach((off) => off());
    this.offs = [];
    this.listen('reconnected', () => this.refresh());
    this.listen('chat', (e) => this.onChat(e));
    this.listen('agent', (e) => this.onAgent(e));
    this.listen('approval.requested', (a) => {
      if (a.sessionKey === this.session)
        this.status.replaceChildren(notice('warn', 'A tool call waits for approval: '),
          h('a', {href: '#/approvals'}, a.tool + ' — ' + clip(a.summary, 80)));
    });
    this.listen('approval.resolved', (a) => {
      if (a.sessionKey === this.session) this.status.replaceChildren();
    });
    this.load();
  }

  async load() {
    let agents;
    try {
      agents = await this.call('agents.list', {}, this.log);
    } catch { return; }
    fill(this.agentSel, agents.agents.map((a) => h('option', {value: a.id}, a.id + (a.model ? ' (' + a.model + ')' : ''))));
    if (!this.agent || !agents.agents.some((a) => a.id === this.agent)) this.agent = agents.defaultId || (agents.agents[0] || {}).id || '';
    this.agentSel.value = this.agent;
    await this.loadSessions();
  }

  async loadSessions() {
    let list = {sessions: []};
    try {
      list = await this.gw.call('sessions.list', {agentId: this.agent, limit: 100});
    } catch (e) {
      this.log.replaceChildren(notice('error', e.message));
    }
    const main = 'agent:' + this.agent + ':main';
    if (!this.session || !this.session.startsWith('agent:' + this.agent + ':')) this.session = main;
    const keys = [...new Set([main, this.session, ...list.sessions.map((s) => s.key)])];
    fill(this.sessionSel, keys.map((k) => h('option', {value: k}, k)));
    this.sessionSel.value = this.session;
    await this.loadHistory();
  }

  pickAgent(a) {
    this.agent = a;
    this.session = '';
    this.loadSessions();
  }

  pickSession(k) {
    this.session = k;
    routeTo('chat', {agent: this.agent, session: k});
  }

  async loadHistory() {
    this.runs.clear();
    this.active = null;
    this.setBusy(false);
    this.log.replaceChildren(h('p', {class: 'muted'}, 'Loading the history…'));
    try {
      await this.gw.call('sessions.subscribe', {sessionKey: this.session});
    } catch (e) {
      this.log.replaceChildren(notice('error', e.message));
      return;
    }
    let t = null;
    try {
      t = await this.gw.call('sessions.transcript', {sessionKey: this.session, limit: 2000});
    } catch (e) {
      if (e.code !== 'NOT_FOUND') {
        this.log.replaceChildren(notice('error', e.message));
        return;
      }
    }
    this.log.replaceChildren();
    if (!t || !t.entries.length) {
      this.log.append(h('p', {class: 'muted'}, 'No messages yet in ' + this.session + '.'));
      return;
    }
    if (t.truncated) this.log.append(h('p', {class: 'muted'}, 'Older entries are not shown (' + t.total + ' in all).'));
    const tools = new Map();
    for (const e of t.entries) {
      if (e.type === 'event' && e.event === 'tool_end') {
        const card = tools.get(e.tool_use_id);
        if (card) card.querySelector('.dur').textContent = fmtDuration(e.seconds * 1000);
      }
      if (e.type !== 'message') continue;
      const m = e.message;
      const texts = (m.content || []).filter((b) => b.type === 'text').map((b) => b.text).join('');
      if (m.role === 'user') {
        for (const b of m.content || []) {
          if (b.type !== 'tool_result') continue;
          const card = tools.get(b.tool_use_id);
          if (card) setResult(card, b.content, b.is_error);
        }
        if (texts) this.log.append(bubble('user', texts, e.ts));
      } else {
        const bub = texts ? bubble('assistant', texts, e.ts, e.model) : null;
        if (bub) this.log.append(bub);
        for (const b of m.content || []) {
          if (b.type !== 'tool_use') continue;
          const card = toolCard(b.name, b.input, b.id);
          tools.set(b.id, card);
          this.log.append(card);
        }
      }
    }
    this.log.scrollTop = this.log.scrollHeight;
  }

  setBusy(busy) {
    this.abortBtn.disabled = !busy;
    this.sendBtn.disabled = busy;
  }

  async send() {
    const text = this.input.value.trim();
    if (!text) return;
    const key = idem();
    this.log.querySelector('.muted:only-child')?.remove();
    this.log.append(bubble('user', text, Date.now()));
    this.input.value = '';
    this.setBusy(true);
    this.status.replaceChildren(h('span', {class: 'spinner', 'aria-hidden': 'true'}), ' sending…');
    try {
      const r = await this.gw.call('chat.send', {sessionKey: this.session, message: text, idempotencyKey: key});
      this.active = r.runId;
      this.status.replaceChildren(h('span', {class: 'spinner', 'aria-hidden': 'true'}), ' the agent is working…');
    } catch (e) {
      this.setBusy(false);
      this.status.replaceChildren(notice('error', e.message));
    }
  }

  async abort() {
    try {
      await this.gw.call('chat.abort', {sessionKey: this.session});
    } catch (e) {
      this.status.replaceChildren(notice('error', e.message));
    }
  }

  // One streaming run: a bubble whose tool calls are listed above its text
  // (the chat events carry the whole text so far; it is replaced, not
  // appended).
  run(runId) {
    let r = this.runs.get(runId);
    if (!r) {
      const b = bubble('assistant', '', Date.now());
      b.classList.add('streaming');
      const tools = h('div', {class: 'tools'});
      b.insertBefore(tools, b.querySelector('.text'));
      r = {bubble: b, text: b.querySelector('.text'), tools, cards: new Map()};
      this.runs.set(runId, r);
      this.log.querySelector('.muted:only-child')?.remove();
      this.log.append(b);
    }
    return r;
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }

  onChat(e) {
    if (e.sessionKey !== this.session) return;
    const r = this.run(e.runId);
    const text = e.message && e.message.content && e.message.content[0] ? e.message.content[0].text : '';
    if (text) r.text.textContent = text;
    if (e.state !== 'delta') {
      r.bubble.classList.remove('streaming');
      r.bubble.dataset.state = e.state;
      r.bubble.querySelector('.meta').textContent = e.state === 'final' ? fmtTime(Date.now())
        : e.state + (e.errorMessage ? ': ' + e.errorMessage : '');
      this.setBusy(false);
      this.status.replaceChildren(e.state === 'final' ? ''
        : notice(e.state === 'aborted' ? 'warn' : 'error', 'The run ended: ' + (e.errorMessage || e.stopReason || e.state)));
      this.runs.delete(e.runId);
    }
    this.scroll();
  }

  onAgent(e) {
    if (e.sessionKey !== this.session) return;
    if (e.stream === 'lifecycle' && e.data.phase === 'start') {
      this.setBusy(true);
      this.run(e.runId);
    }
    if (e.stream !== 'tool') return;
    const r = this.run(e.runId);
    if (e.data.phase === 'start') {
      const card = toolCard(e.data.name, e.data.args, e.data.toolCallId, true);
      card.dataset.started = e.ts;
      r.cards.set(e.data.toolCallId, card);
      r.tools.append(card);
    } else {
      const card = r.cards.get(e.data.toolCallId);
      if (!card) return;
      setResult(card, e.data.result, e.data.isError);
      card.querySelector('.dur').textContent = fmtDuration(e.ts - Number(card.dataset.started || e.ts));
    }
    this.scroll();
  }
}

function bubble(role, text, ts, model) {
  return h('div', {class: 'msg ' + role},
    h('div', {class: 'who'}, role === 'user' ? 'You' : 'Agent'),
    h('div', {class: 'text'}, text),
    h('div', {class: 'meta'}, (ts ? fmtTime(typeof ts === 'string' ? Date.parse(ts) : ts) : '') + (model ? ' · ' + model : '')));
}

function toolCard(name, args, id, running) {
  return h('details', {class: 'tool' + (running ? ' running' : ''), dataset: {call: id || ''}},
    h('summary', {}, h('span', {class: 'tool-name'}, name), ' ',
      h('code', {class: 'args'}, clip(args === undefined ? '' : JSON.stringify(args), 120)),
      h('span', {class: 'dur'}, running ? 'running…' : ''),
      h('span', {class: 'res-state'})),
    h('div', {class: 'tool-body'},
      h('div', {class: 'label'}, 'Arguments'), h('pre', {}, JSON.stringify(args, null, 2)),
      h('div', {class: 'label'}, 'Result'), h('pre', {class: 'result'}, running ? '…' : '')));
}

function setResult(card, result, isError) {
  const text = typeof result === 'string' ? result : JSON.stringify(result, null, 2);
  card.querySelector('.result').textContent = clip(text, 4000);
  card.querySelector('.res-state').textContent = isError ? 'error' : 'ok';
  card.classList.toggle('error', !!isError);
  card.classList.remove('running');
  const summary = card.querySelector('summary');
  let prev = summary.querySelector('.preview');
  if (!prev) { prev = h('span', {class: 'preview'}); summary.append(prev); }
  // the preview skips the gateway's untrusted-output label line
  prev.textContent = '→ ' + clip(text.replace(/^\[Untrusted tool output[^\]]*\]\s*/, '').replace(/\s+/g, ' '), 100);
}

customElements.define('sb-chat', ChatPage);
