// Channels: every channel account with its state and last error; the
// pairing requests of unknown senders (approve, deny); the senders approved
// by pairing (revoke); and control-plane devices (approve, revoke).
// Methods: channels.status, pairing.list|approve|deny|approved|revoke,
// devices.list|approve|revoke.

import {h, fill, notice, fmtTime, fmtAgo, short, Page} from '../lib/dom.js';

const SHOWN = new Set(['accountId', 'running']);

class ChannelsPage extends Page {
  render() {
    this.accounts = h('div', {class: 'cards'});
    this.pairing = h('div');
    this.approved = h('div');
    this.devices = h('div');
    this.msg = h('div', {'aria-live': 'polite'});
    fill(this, h('h1', {}, 'Channels'), this.msg,
      h('section', {'aria-labelledby': 'ch-acc'}, h('h2', {id: 'ch-acc'}, 'Accounts'), this.accounts),
      h('section', {'aria-labelledby': 'ch-pair'}, h('h2', {id: 'ch-pair'}, 'Pairing requests'),
        h('p', {class: 'muted'}, 'An unknown sender on a channel with dm_policy: pairing gets an 8-character code; approving it lets that sender through.'),
        this.pairing),
      h('section', {'aria-labelledby': 'ch-ok'}, h('h2', {id: 'ch-ok'}, 'Approved senders'), this.approved),
      h('section', {'aria-labelledby': 'ch-dev'}, h('h2', {id: 'ch-dev'}, 'Control-plane devices'), this.devices));
    this.load();
    if (!this.timer) this.every(5000, () => this.loadLists());
  }

  async load() {
    try {
      const st = await this.call('channels.status', {}, this.accounts);
      const cards = [];
      for (const name of st.channelOrder) {
        const ch = st.channels[name];
        if (!ch.available) continue;
        if (!ch.accounts.length) {
          cards.push(h('article', {class: 'card'}, h('h3', {}, name), h('p', {class: 'muted'}, 'no account configured')));
          continue;
        }
        for (const a of ch.accounts) {
          const err = a.lastError || a.error;
          const extra = Object.entries(a).filter(([k, v]) => !SHOWN.has(k) && k !== 'lastError' && k !== 'error' && typeof v !== 'object');
          cards.push(h('article', {class: 'card account' + (err ? ' has-error' : '')},
            h('h3', {}, name, ' · ', a.accountId),
            h('p', {}, h('span', {class: 'pill ' + (a.running ? 'ok' : 'bad')}, a.state || (a.running ? 'running' : 'stopped'))),
            err ? notice('error', 'Last error: ' + (typeof err === 'string' ? err : JSON.stringify(err))) : null,
            extra.length ? h('dl', {class: 'kv'}, extra.map(([k, v]) => [h('dt', {}, k), h('dd', {}, typeof v === 'number' && v > 1e12 ? fmtTime(v) : String(v))])) : null));
        }
      }
      fill(this.accounts, cards.length ? cards : h('p', {class: 'empty'}, 'No channel is configured.'));
    } catch { /* shown */ }
    this.loadLists();
  }

  async loadLists() {
    if (!this.gw.can('operator.admin')) {
      fill(this.pairing, notice('warn', 'Pairing and devices need the operator.admin scope.'));
      return;
    }
    try {
      const p = await this.gw.call('pairing.list', {});
      fill(this.pairing, p.pending.length ? table(['Channel', 'Account', 'Sender', 'Code', 'Asked', ''],
        p.pending.map((r) => [r.channel, r.account, r.senderId, h('code', {}, r.code), fmtAgo(r.createdAt),
          h('span', {class: 'actions'},
            this.act('Approve', 'primary', 'pairing.approve', {channel: r.channel, code: r.code}, r.senderId),
            this.act('Deny', 'danger', 'pairing.deny', {channel: r.channel, code: r.code}, r.senderId))]))
        : h('p', {class: 'empty'}, 'No pairing request is waiting.'));
      const a = await this.gw.call('pairing.approved', {});
      fill(this.approved, a.approved.length ? table(['Channel', 'Account', 'Sender', 'Approved', ''],
        a.approved.map((r) => [r.channel, r.account, r.senderId, fmtTime(r.approvedAt),
          this.act('Revoke', 'danger', 'pairing.revoke', {channel: r.channel, account: r.account, senderId: r.senderId}, r.senderId)]))
        : h('p', {class: 'empty'}, 'No sender has been approved by pairing.'));
      const d = await this.gw.call('devices.list', {});
      const rows = [...d.pending, ...d.paired];
      fill(this.devices, rows.length ? table(['Device', 'State', 'Client', 'Scopes', 'Address', 'Seen', ''],
        rows.map((r) => [h('code', {title: r.deviceId}, short(r.deviceId, 16)), r.state, (r.clientId || '–') + (r.platform ? ' · ' + r.platform : ''),
          (r.scopes || []).join(', '), r.remoteAddr || '–', fmtAgo(r.lastSeenAt),
          r.state === 'approved'
            ? this.act('Revoke', 'danger', 'devices.revoke', {deviceId: r.deviceId}, short(r.deviceId, 16))
            : h('span', {class: 'actions'}, this.act('Approve', 'primary', 'devices.approve', {deviceId: r.deviceId}, short(r.deviceId, 16)),
              this.act('Reject', 'danger', 'devices.revoke', {deviceId: r.deviceId}, short(r.deviceId, 16)))]))
        : h('p', {class: 'empty'}, 'No device has asked to connect.'));
    } catch (e) {
      fill(this.msg, notice('error', e.message));
    }
  }

  act(label, cls, method, params, what) {
    return h('button', {type: 'button', class: cls, 'aria-label': label + ' ' + what, onclick: async (e) => {
      e.currentTarget.disabled = true;
      try {
        await this.gw.call(method, params);
        fill(this.msg, notice('ok', label + ': done for ' + what));
      } catch (err) {
        fill(this.msg, notice('error', err.message));
      }
      this.loadLists();
    }}, label);
  }
}

export function table(head, rows) {
  return h('div', {class: 'table-wrap'}, h('table', {},
    h('thead', {}, h('tr', {}, head.map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

customElements.define('sb-channels', ChannelsPage);
