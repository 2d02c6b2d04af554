// Schedules: heartbeats and cron jobs with their next run, last result and
// history; run now; enable or disable a job. Methods: status (scheduler),
// cron.list, cron.runs, cron.run, cron.enable, heartbeat.run.

import {h, fill, notice, fmtTime, fmtAgo, fmtDuration, clip, Page} from '../lib/dom.js';
import {table} from './channels.js';

function when(job) {
  if (job.cron) return 'cron ' + job.cron + (job.tz ? ' (' + job.tz + ')' : '');
  if (job.every) return 'every ' + fmtDuration(job.every);
  if (job.at) return 'at ' + job.at;
  return '–';
}

function statusPill(s) {
  if (!s) return h('span', {class: 'pill'}, 'never ran');
  return h('span', {class: 'pill ' + (s === 'ok' ? 'ok' : s === 'error' ? 'bad' : 'warn')}, s);
}

class SchedulesPage extends Page {
  render() {
    this.msg = h('div', {'aria-live': 'polite'});
    this.hb = h('div');
    this.jobs = h('div');
    this.runs = h('div');
    fill(this, h('h1', {}, 'Schedules'), this.msg,
      h('section', {'aria-labelledby': 'sc-hb'}, h('h2', {id: 'sc-hb'}, 'Heartbeats'),
        h('p', {class: 'muted'}, 'Set per agent in the configuration (agents[].heartbeat); an empty HEARTBEAT.md skips the run.'), this.hb),
      h('section', {'aria-labelledby': 'sc-cron'}, h('h2', {id: 'sc-cron'}, 'Cron jobs'), this.jobs),
      h('section', {'aria-labelledby': 'sc-runs'}, h('h2', {id: 'sc-runs'}, 'History'), this.runs));
    this.load();
    if (!this.timer) this.every(5000, () => this.load(true));
  }

  async load(quiet) {
    try {
      const st = await this.gw.call('status', {});
      const hbs = (st.scheduler && st.scheduler.heartbeats) || [];
      fill(this.hb, hbs.length ? table(['Agent', 'Every', 'Next', 'Last', 'Result', ''], hbs.map((b) => [
        b.agentId, b.enabled ? fmtDuration(b.everyMs) : 'off', b.enabled ? fmtAgo(b.nextDue) : '–', fmtAgo(b.lastAt),
        h('span', {}, statusPill(b.lastStatus), b.lastDetail ? ' ' + clip(b.lastDetail, 80) : ''),
        b.enabled ? this.act('Run now', 'heartbeat.run', {agentId: b.agentId}, 'heartbeat of ' + b.agentId) : '']))
        : h('p', {class: 'empty'}, 'No agent has a heartbeat.'));
      const cl = await this.gw.call('cron.list', {});
      fill(this.jobs, cl.jobs.length ? table(['Job', 'Schedule', 'Agent', 'Next run', 'Last run', 'Result', 'Enabled', ''], cl.jobs.map((j) => {
        const s = j.state || {};
        const toggle = h('input', {type: 'checkbox', checked: j.enabled !== false, disabled: j.source === 'config',
          'aria-label': 'Enabled: ' + j.id, title: j.source === 'config' ? 'declared in the configuration file: change it there' : '',
          onchange: async () => {
            try {
              await this.gw.call('cron.enable', {id: j.id, enabled: toggle.checked});
              fill(this.msg, notice('ok', j.id + (toggle.checked ? ' enabled' : ' disabled')));
            } catch (e) {
              toggle.checked = !toggle.checked;
              fill(this.msg, notice('error', e.message));
            }
            this.load(true);
          }});
        return [h('button', {type: 'button', class: 'link', onclick: () => this.history(j.id)}, j.id), when(j), j.agent || 'default',
          s.done ? 'done' : fmtTime(s.nextRunMs), fmtTime(s.lastRunMs),
          h('span', {}, statusPill(s.lastStatus), s.lastError ? ' ' + clip(s.lastError, 80) : ''), toggle,
          this.act('Run now', 'cron.run', {id: j.id}, j.id)];
      })) : h('p', {class: 'empty'}, 'No cron job. Add one with `switchboard cron add` or in the configuration.'));
      if (!quiet) this.history(null);
    } catch (e) {
      fill(this.msg, notice('error', e.message));
    }
  }

  async history(id) {
    try {
      const r = await this.gw.call('cron.runs', id ? {id, limit: 50} : {limit: 50});
      fill(this.runs, h('p', {class: 'muted'}, id ? 'Runs of ' + id + ' ' : 'Recent runs of every job ',
        id ? h('button', {type: 'button', class: 'link', onclick: () => this.history(null)}, '(show all)') : null),
      r.runs.length ? table(['Job', 'Due', 'Took', 'Result', 'Detail', 'Session'], r.runs.map((x) => [x.jobId, fmtTime(x.scheduledAt),
        x.finishedAt ? fmtDuration(x.finishedAt - x.startedAt) : '…', statusPill(x.status), clip(x.detail || '', 120),
        x.sessionKey ? h('a', {href: '#/sessions?key=' + encodeURIComponent(x.sessionKey)}, x.sessionKey) : '–']))
        : h('p', {class: 'empty'}, 'No run yet.'));
    } catch (e) {
      fill(this.runs, notice('error', e.message));
    }
  }

  act(label, method, params, what) {
    return h('button', {type: 'button', 'aria-label': label + ': ' + what, onclick: async (e) => {
      e.currentTarget.disabled = true;
      try {
        await this.gw.call(method, params);
        fill(this.msg, notice('ok', 'Started ' + what + '.'));
      } catch (err) {
        fill(this.msg, notice('error', err.message));
      }
      setTimeout(() => this.load(), 800);
    }}, label);
  }
}

customElements.define('sb-schedules', SchedulesPage);
