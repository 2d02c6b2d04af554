// Health: version, uptime, memory, message rate, run latency and queue
// depth as small live charts (from the counters behind /metrics, read with
// metrics.get every 2 s), the configuration file's validation, the last
// reload, and a live tail of the gateway's log. Methods: status,
// metrics.get, config.status, logs.tail.

import {h, fill, notice, fmtDuration, fmtBytes, fmtTime, Page} from '../lib/dom.js';

const POINTS = 90; // 3 minutes at one sample every 2 s

/** A small SVG line chart of the last POINTS values. */
class Spark {
  constructor(label, unit) {
    this.values = [];
    this.unit = unit;
    this.now = h('strong', {}, '–');
    this.svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    this.svg.setAttribute('viewBox', '0 0 ' + POINTS + ' 30');
    this.svg.setAttribute('preserveAspectRatio', 'none');
    this.svg.setAttribute('role', 'img');
    this.svg.setAttribute('aria-label', label);
    this.path = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    this.svg.append(this.path);
    this.el = h('figure', {class: 'spark'}, h('figcaption', {}, label, ' ', this.now), this.svg);
  }
  push(v) {
    this.values.push(v);
    if (this.values.length > POINTS) this.values.shift();
    const max = Math.max(1e-9, ...this.values);
    this.path.setAttribute('points', this.values.map((x, i) => (i + POINTS - this.values.length) + ',' + (29 - (x / max) * 28).toFixed(2)).join(' '));
    this.now.textContent = this.unit(v);
    this.svg.setAttribute('aria-label', this.el.querySelector('figcaption').firstChild.textContent + ' now ' + this.unit(v));
  }
}

class HealthPage extends Page {
  render() {
    this.facts = h('dl', {class: 'kv'});
    this.cfg = h('div');
    this.logs = h('pre', {class: 'logs', tabindex: '0', 'aria-label': 'Log tail'});
    this.follow = h('input', {type: 'checkbox', id: 'log-follow', checked: true});
    this.charts = {
      rate: new Spark('Messages accepted /s', (v) => v.toFixed(2)),
      latency: new Spark('Run duration (avg)', (v) => fmtDuration(v * 1000)),
      commit: new Spark('Store commit (avg)', (v) => (v * 1000).toFixed(2) + ' ms'),
      queue: new Spark('Queue depth (inbox + store)', (v) => String(v)),
      rss: new Spark('Memory (RSS)', (v) => fmtBytes(v)),
    };
    fill(this, h('h1', {}, 'Health'),
      h('section', {class: 'card'}, this.facts),
      h('section', {class: 'charts', 'aria-label': 'Live charts'}, Object.values(this.charts).map((c) => c.el)),
      h('section', {'aria-labelledby': 'h-cfg'}, h('h2', {id: 'h-cfg'}, 'Configuration'), this.cfg),
      h('section', {'aria-labelledby': 'h-log'}, h('h2', {id: 'h-log'}, 'Log'),
        h('label', {class: 'inline'}, this.follow, ' follow'), this.logs));
    this.last = null;
    this.logSeq = 0;
    this.tick();
    this.loadConfig();
    if (!this.timer) this.every(2000, () => this.tick());
  }

  async tick() {
    try {
      const [st, m] = await Promise.all([this.gw.call('status', {}), this.gw.call('metrics.get', {})]);
      fill(this.facts,
        h('dt', {}, 'Version'), h('dd', {}, st.version),
        h('dt', {}, 'State'), h('dd', {}, h('span', {class: 'pill ' + (st.state === 'ready' ? 'ok' : 'warn')}, st.state)),
        h('dt', {}, 'Uptime'), h('dd', {}, fmtDuration(st.uptimeMs)),
        h('dt', {}, 'Process'), h('dd', {}, 'pid ' + st.pid + ' · ' + fmtBytes(m.rssBytes)),
        h('dt', {}, 'Runs'), h('dd', {}, st.runs.active + ' active · ' + st.runs.waiting + ' waiting · ' + m.runSeconds.count + ' done'),
        h('dt', {}, 'Messages'), h('dd', {}, m.ingestAccepted + ' accepted · ' + m.ingestDuplicates + ' duplicates · ' + m.ingestRejected + ' rejected'),
        h('dt', {}, 'Replies'), h('dd', {}, m.outboxSent + ' sent · ' + m.outboxRetried + ' retried · ' + m.outboxFailed + ' failed'),
        h('dt', {}, 'Connections'), h('dd', {}, st.connections.control + ' control · ' + m.httpConnections + ' HTTP'),
        h('dt', {}, 'Last reload'), h('dd', {}, m.lastReload ? fmtTime(m.lastReload.at) + ' · ' + (m.lastReload.ok ? 'applied' : 'rejected') : 'none since start'));
      if (this.last) {
        const dt = Math.max(0.001, (m.ts - this.last.ts) / 1000);
        this.charts.rate.push((m.ingestAccepted - this.last.ingestAccepted) / dt);
        const rn = m.runSeconds.count - this.last.runSeconds.count;
        this.charts.latency.push(rn ? (m.runSeconds.sum - this.last.runSeconds.sum) / rn : 0);
        const cn = m.storeCommitSeconds.count - this.last.storeCommitSeconds.count;
        this.charts.commit.push(cn ? (m.storeCommitSeconds.sum - this.last.storeCommitSeconds.sum) / cn : 0);
      }
      this.charts.queue.push(m.inboxDepth + m.storeQueueDepth);
      this.charts.rss.push(m.rssBytes);
      this.last = m;
      if (this.gw.can('operator.admin')) await this.tail();
    } catch (e) {
      fill(this.facts, notice('error', e.message));
    }
  }

  async tail() {
    const r = await this.gw.call('logs.tail', {after: this.logSeq, limit: 200});
    if (r.lines.length) {
      const atEnd = this.logs.scrollTop + this.logs.clientHeight >= this.logs.scrollHeight - 4;
      for (const l of r.lines) this.logs.append(h('span', {class: /level=(warn|error)|"level":"(warn|error)"/.test(l.line) ? 'warn' : ''}, l.line + '\n'));
      while (this.logs.childNodes.length > 1000) this.logs.firstChild.remove();
      if (this.follow.checked && atEnd) this.logs.scrollTop = this.logs.scrollHeight;
    }
    this.logSeq = r.last;
  }

  async loadConfig() {
    if (!this.gw.can('operator.admin')) return;
    try {
      const c = await this.gw.call('config.status', {});
      fill(this.cfg, c.valid ? notice('ok', 'The file on disk (' + c.path + ') is valid.')
        : [notice('error', 'The file on disk (' + c.path + ') does not validate; the gateway keeps running the last good one.'),
          h('ul', {class: 'plain mono'}, c.errors.map((e) => h('li', {}, (e.file || c.path) + ':' + e.line + ':' + e.col + ': ' + (e.key || '') + ': ' + e.message + (e.hint ? ' (' + e.hint + ')' : ''))))]);
    } catch (e) {
      fill(this.cfg, notice('error', e.message));
    }
  }
}

customElements.define('sb-health', HealthPage);
