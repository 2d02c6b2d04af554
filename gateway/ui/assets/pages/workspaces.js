// Workspaces: each agent's files with their git log, a file at a version,
// and a diff view between two versions (or a version and the files on
// disk). Methods: agents.list, workspace.files, workspace.log,
// workspace.file, workspace.diff.

import {h, fill, notice, fmtTime, short, Page, routeParams, routeTo} from '../lib/dom.js';

class WorkspacesPage extends Page {
  async render() {
    const p = routeParams();
    this.agentSel = h('select', {id: 'ws-agent', onchange: () => routeTo('workspaces', {agent: this.agentSel.value})});
    this.view = h('div', {'aria-live': 'polite'});
    fill(this, h('h1', {}, 'Workspaces'),
      h('div', {class: 'toolbar'}, h('div', {class: 'field'}, h('label', {for: 'ws-agent'}, 'Agent'), this.agentSel)), this.view);
    let agents;
    try {
      agents = await this.call('agents.list', {}, this.view);
    } catch { return; }
    const agent = p.agent || agents.defaultId || (agents.agents[0] || {}).id;
    fill(this.agentSel, agents.agents.map((a) => h('option', {value: a.id}, a.id)));
    this.agentSel.value = agent;
    this.agent = agent;
    if (p.from) return this.diff(p.from, p.to || 'HEAD', p.path);
    if (p.commit) return this.commit(p.commit);
    if (p.file) return this.file(p.file, p.rev);
    return this.overview();
  }

  async overview() {
    const files = h('div'), log = h('div');
    fill(this.view, h('div', {class: 'split'},
      h('section', {'aria-labelledby': 'ws-files'}, h('h2', {id: 'ws-files'}, 'Files at HEAD'), files),
      h('section', {'aria-labelledby': 'ws-log'}, h('h2', {id: 'ws-log'}, 'History'),
        h('p', {}, h('a', {href: this.href({from: 'HEAD', to: 'WORKTREE'})}, 'Uncommitted changes (HEAD → files on disk)')), log)));
    try {
      const f = await this.gw.call('workspace.files', {agentId: this.agent});
      fill(files, h('ul', {class: 'plain files'}, f.files.map((x) => h('li', {},
        h('a', {href: this.href({file: x.path})}, x.path), h('span', {class: 'muted'}, ' ' + x.size + ' B')))));
    } catch (e) {
      fill(files, notice(e.code === 'NOT_FOUND' ? 'warn' : 'error', e.message));
    }
    this.logInto(log, null);
  }

  href(params) {
    return '#/workspaces?' + new URLSearchParams({agent: this.agent, ...params}).toString();
  }

  async logInto(el, path) {
    try {
      const r = await this.gw.call('workspace.log', path ? {agentId: this.agent, path, limit: 100} : {agentId: this.agent, limit: 100});
      fill(el, r.commits.length ? h('ol', {class: 'plain commits'}, r.commits.map((c) => h('li', {},
        h('a', {href: this.href({commit: c.id}), class: 'commit-id', title: c.id}, short(c.id, 10)), ' ',
        h('span', {}, c.summary), h('div', {class: 'muted'}, c.author + ' · ' + fmtTime(c.time)))))
        : h('p', {class: 'empty'}, 'No commit yet.'));
    } catch (e) {
      fill(el, notice(e.code === 'NOT_FOUND' ? 'warn' : 'error', e.message));
    }
  }

  async commit(id) {
    const out = h('div');
    fill(this.view, h('p', {}, h('a', {href: this.href({})}, '← Files and history')), out);
    try {
      const log = await this.gw.call('workspace.log', {agentId: this.agent, limit: 1000});
      const c = log.commits.find((x) => x.id.startsWith(id));
      if (!c) {
        fill(out, notice('warn', 'That commit is not in this workspace\'s history.'));
        return;
      }
      fill(out, h('h2', {}, 'Commit ', h('code', {class: 'commit-id'}, c.id)),
        h('pre', {class: 'message'}, c.message), h('p', {class: 'muted'}, c.author + ' <' + c.email + '> · ' + fmtTime(c.time)));
      if (c.parents.length) this.diffInto(out, c.parents[0], c.id);
      else out.append(h('p', {class: 'muted'}, 'The first commit.'));
    } catch (e) {
      fill(out, notice('error', e.message));
    }
  }

  async file(path, rev) {
    const body = h('div'), log = h('div');
    fill(this.view, h('p', {}, h('a', {href: this.href({})}, '← Files and history')),
      h('h2', {}, h('code', {}, path), rev ? ' at ' + short(rev) : ''), body, h('h3', {}, 'History of this file'), log);
    try {
      const f = await this.gw.call('workspace.file', {agentId: this.agent, path, rev: rev || 'HEAD'});
      fill(body, f.tooLarge ? h('p', {class: 'muted'}, 'A file of ' + f.size + ' bytes: too large to show here.')
        : f.binary ? h('p', {class: 'muted'}, 'A binary file of ' + f.size + ' bytes.')
        : h('pre', {class: 'file'}, f.text, f.truncated ? '\n[… cut]' : ''));
    } catch (e) {
      fill(body, notice('error', e.message));
    }
    this.logInto(log, path);
  }

  async diff(from, to, path) {
    const out = h('div');
    const a = h('input', {id: 'd-from', value: from, size: 12}), b = h('input', {id: 'd-to', value: to, size: 12});
    fill(this.view, h('p', {}, h('a', {href: this.href({})}, '← Files and history')),
      h('form', {class: 'toolbar', onsubmit: (e) => { e.preventDefault(); routeTo('workspaces', {agent: this.agent, from: a.value, to: b.value}); }},
        h('div', {class: 'field'}, h('label', {for: 'd-from'}, 'From'), a),
        h('div', {class: 'field'}, h('label', {for: 'd-to'}, 'To (a commit, HEAD or WORKTREE)'), b),
        h('button', {type: 'submit'}, 'Show the diff')), out);
    this.diffInto(out, from, to, path);
  }

  async diffInto(out, from, to, path) {
    const box = h('div', {class: 'diff'}, h('p', {class: 'muted'}, 'Loading the diff…'));
    out.append(box);
    try {
      const d = await this.gw.call('workspace.diff', path ? {agentId: this.agent, from, to, path} : {agentId: this.agent, from, to});
      const total = d.filesTotal === undefined ? d.files.length : d.filesTotal;
      fill(box, h('p', {}, 'From ', h('code', {class: 'commit-id'}, short(d.from, 12)), ' to ', h('code', {class: 'commit-id'}, d.to === 'WORKTREE' ? 'the files on disk' : short(d.to, 12)),
        ': ', total, ' files changed', total > d.files.length ? ' (' + d.files.length + ' listed)' : '', d.truncated ? ' (cut: too long to show whole)' : ''),
      d.files.map((f) => h('details', {open: true, class: 'file-diff'},
        h('summary', {}, h('span', {class: 'pill'}, f.status), ' ', f.path,
          f.additions === undefined ? null : [h('span', {class: 'adds'}, ' +' + f.additions), h('span', {class: 'dels'}, ' −' + f.deletions)]),
        f.tooLarge ? h('p', {class: 'muted'}, 'too large to show here')
          : f.binary ? h('p', {class: 'muted'}, 'binary')
          : f.patch === undefined ? h('p', {class: 'muted'}, 'not shown (the diff is cut)') : patch(f.patch))));
    } catch (e) {
      fill(box, notice(e.code === 'NOT_FOUND' ? 'warn' : 'error', e.message));
    }
  }
}

function patch(text) {
  return h('pre', {class: 'patch'}, text.split('\n').map((line) => h('span', {
    class: line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : ''}, line + '\n')));
}

customElements.define('sb-workspaces', WorkspacesPage);
