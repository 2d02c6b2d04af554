// Approvals: tool calls waiting for the operator, live. Approve once, for
// the session or for the agent, or deny. Methods: approvals.list,
// approvals.approve, approvals.deny; events: approval.requested,
// approval.resolved.

import {h, fill, notice, fmtTime, fmtAgo, Page} from '../lib/dom.js';

class ApprovalsPage extends Page {
  render() {
    this.list = h('div', {class: 'cards', 'aria-live': 'polite'});
    this.done = h('ul', {class: 'plain resolved'});
    fill(this, h('h1', {}, 'Approvals'),
      h('p', {class: 'muted'}, 'Tool calls the permission rules send to the operator wait here until they are answered or time out (security.approval_timeout).'),
      this.list, h('h2', {}, 'Answered here'), this.done);
    this.items = new Map();
    this.offs.forEach((off) => off());
    this.offs = [];
    this.listen('reconnected', () => this.refresh());
    this.listen('approval.requested', (a) => { this.items.set(a.id, a); this.draw(); });
    this.listen('approval.resolved', (a) => {
      this.items.delete(a.id);
      this.done.prepend(h('li', {}, fmtTime(Date.now()), ' · ', h('strong', {}, a.decision), ' · ', a.tool, ': ', a.summary, a.by ? ' (by ' + a.by + ')' : ''));
      this.draw();
    });
    this.load();
  }

  async load() {
    if (!this.gw.can('operator.admin')) {
      fill(this.list, notice('warn', 'Answering approvals needs the operator.admin scope.'));
      return;
    }
    try {
      const r = await this.call('approvals.list', {}, this.list);
      this.items = new Map(r.approvals.map((a) => [a.id, a]));
      this.draw();
    } catch { /* shown */ }
  }

  draw() {
    if (!this.items.size) {
      fill(this.list, h('p', {class: 'empty'}, 'Nothing is waiting for approval.'));
      return;
    }
    fill(this.list, [...this.items.values()].map((a) => this.card(a)));
  }

  card(a) {
    const out = h('div', {'aria-live': 'polite'});
    const answer = async (method, scope, btn) => {
      for (const b of btn.parentElement.querySelectorAll('button')) b.disabled = true;
      try {
        const r = await this.gw.call(method, scope ? {id: a.id, scope} : {id: a.id});
        out.replaceChildren(notice('ok', r.decision));
      } catch (e) {
        out.replaceChildren(notice('error', e.message));
        for (const b of btn.parentElement.querySelectorAll('button')) b.disabled = false;
      }
    };
    const btn = (label, method, scope, cls) => {
      const b = h('button', {type: 'button', class: cls || '', 'aria-label': label + ': ' + a.tool + ' ' + a.summary,
        onclick: () => answer(method, scope, b)}, label);
      return b;
    };
    return h('article', {class: 'card approval', dataset: {id: a.id}},
      h('h2', {}, a.tool, ' ', h('code', {}, a.summary)),
      h('dl', {class: 'kv'},
        h('dt', {}, 'Agent'), h('dd', {}, a.agentId),
        h('dt', {}, 'Session'), h('dd', {}, h('a', {href: '#/chat?agent=' + encodeURIComponent(a.agentId) + '&session=' + encodeURIComponent(a.sessionKey)}, a.sessionKey)),
        h('dt', {}, 'Asked by'), h('dd', {}, (a.channel || 'the gateway') + (a.sender ? ' · ' + a.sender : '')),
        h('dt', {}, 'Scope'), h('dd', {}, h('code', {}, a.scope)),
        h('dt', {}, 'Waiting'), h('dd', {}, fmtAgo(a.createdAt), ' · expires ', fmtTime(a.expiresAt))),
      h('div', {class: 'actions'},
        btn('Approve once', 'approvals.approve', 'once', 'primary'),
        btn('Approve for the session', 'approvals.approve', 'session'),
        btn('Approve for the agent', 'approvals.approve', 'agent'),
        btn('Deny', 'approvals.deny', null, 'danger')),
      out);
  }
}

customElements.define('sb-approvals', ApprovalsPage);
