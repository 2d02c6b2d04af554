// ui_hostile.js - the web UI under attack, in a real browser: Debian's
// chromium, headless, driven by playwright-core, against a gateway that
// tests/integration/test_ui.c started on 127.0.0.1 and filled with hostile
// values through its real channels (a webhook sender's id, name, text and
// conversation, a pairing request, a device asking to pair, tool output, a
// pending approval, the workspace's file names, contents and commits, the
// log).
//
//   node ui_hostile.js '<options as JSON>'
//
// Options: url, code (a fresh one-time code), token (the gateway token, to
// check it is nowhere), profile (a fresh --user-data-dir), shots, expect
// {session, text, reply, sender, pending, device, command, file, fileText,
// commit, untracked, logged}: hostile strings that must show as text where they
// belong; commitId, the commit that added the hostile file.
//
// Checked from the person's side: nothing planted runs (no dialog, no CSP
// violation, no element or handler made from it), it shows as text; the
// CSP blocks inline script, handlers, javascript: URLs, eval, data: and
// foreign scripts and foreign connections; nothing but a non-extractable
// key is stored; the session cookie, which the browser also sends to any
// other port of 127.0.0.1, opens nothing there; sign-out forgets the key.
// Prints one JSON line and exits 0 when every check passed, 1 otherwise.
'use strict';

const path = require('path');
const http = require('http');
const fs = require('fs');
const {chromium} = require(path.join(__dirname, '..', 'fakes', 'node_modules', 'playwright-core'));
const WebSocket = require(path.join(__dirname, '..', 'fakes', 'node_modules', 'ws'));

const opt = JSON.parse(process.argv[2] || '{}');
const results = {steps: []};
let step = 'start';

function done(fail) {
  if (fail) results.fail = String(fail && fail.stack ? fail.stack : fail);
  results.step = step;
  process.stdout.write(JSON.stringify(results) + '\n');
  process.exit(fail ? 1 : 0);
}

setTimeout(() => done('timeout'), opt.timeoutMs || 150000).unref();

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
}

// What a planted value could have made of the page: elements that run or
// load things, event-handler attributes, javascript: links. The page's own
// charts (in .spark) are the only svg it makes, and it makes no img in
// #main (the brand icon is in the header).
function injected() {
  const bad = [];
  for (const el of document.querySelectorAll('#main *')) {
    const tag = el.localName;
    if (['script', 'iframe', 'object', 'embed', 'img', 'image', 'frame', 'base', 'meta', 'link',
      'style'].includes(tag) || (tag === 'svg' && !el.closest('.spark')))
      bad.push(el.outerHTML.slice(0, 120));
    for (const a of el.attributes)
      if (/^on/i.test(a.name) || /^\s*javascript:/i.test(a.value)) bad.push(tag + ' ' + a.name + '=' + a.value.slice(0, 60));
  }
  return bad;
}

// One of the page's views: open it, let it load, and check that nothing
// planted ran or became markup; returns the view's text.
async function view(page, route, ready, settle) {
  await page.goto(opt.url + '/#/' + route);
  await page.waitForSelector(ready, {timeout: 15000});
  await page.waitForTimeout(settle || 400);
  const v = await page.evaluate(() => window.__violations.slice());
  check(v.length === 0, route + ': CSP violations (something tried to run): ' + v.join(' | '));
  const bad = await page.evaluate(injected);
  check(bad.length === 0, route + ': markup made from data: ' + bad.join(' | '));
  return page.evaluate(() => document.getElementById('main').innerText);
}

(async () => {
  const ctx = await chromium.launchPersistentContext(opt.profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1280, height: 900},
  });
  const dialogs = [], errors = [];
  const watch = (p) => {
    p.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    p.on('pageerror', (e) => errors.push(e.message));
  };
  ctx.on('page', watch);
  // CSP violations are reported to the page: record them from the start
  await ctx.addInitScript(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__violations.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || '')));
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  watch(page);

  // 1. Sign in with the one-time code.
  step = 'sign in';
  await page.goto(opt.url + '/#code=' + opt.code);
  await page.waitForSelector('#nav:not([hidden])', {timeout: 15000});
  await page.waitForFunction(() => document.getElementById('conn').textContent === 'connected');
  check(!page.url().includes(opt.code), 'the code is out of the address');
  results.steps.push(step);

  // 2. Every view that shows what others can influence.
  step = 'hostile values render as text';
  const enc = encodeURIComponent;
  let text = await view(page, 'chat?agent=main&session=' + enc(opt.expect.session), '.chat-log .msg.assistant', 1500);
  // On a loaded machine the history may still be arriving: wait for the
  // sender's text (a page that never shows it still fails, after 15 s).
  if (!text.includes(opt.expect.text)) {
    await page.waitForFunction((t) => document.getElementById('main').innerText.includes(t),
                               opt.expect.text, {timeout: 15000}).catch(() => {});
    text = await page.evaluate(() => document.getElementById('main').innerText);
  }
  check(text.includes(opt.expect.text), 'chat shows the sender\'s text as text');
  check(text.includes(opt.expect.reply), 'chat shows the agent\'s reply as text');
  await page.locator('.chat-log details.tool').first().locator('summary').click();
  text = await page.evaluate(() => document.getElementById('main').innerText);
  check(text.includes(opt.expect.fileText), 'the tool output shows as text');
  check((await page.evaluate(injected)).length === 0, 'an opened tool card made no markup');
  text = await view(page, 'sessions', 'table');
  check(text.includes(opt.expect.session), 'the session key is listed as text');
  text = await view(page, 'sessions?key=' + enc(opt.expect.session), 'article.turn', 800);
  check(text.includes(opt.expect.text) && text.includes(opt.expect.senderLabel), 'the transcript shows sender and text as text');
  text = await view(page, 'channels', '#ch-pair', 1200);
  check(text.includes(opt.expect.pending), 'the pairing request\'s sender shows as text');
  check(text.includes(opt.expect.sender), 'the approved sender shows as text');
  check(text.includes(opt.expect.device), 'the waiting device\'s client id shows as text');
  // approving it puts the hostile sender id in the log (for the log tail)
  await page.locator('tr', {hasText: opt.expect.pending}).getByRole('button', {name: /^Approve/}).click();
  await page.waitForSelector('.notice.ok', {timeout: 10000});
  check((await page.evaluate(injected)).length === 0, 'the answer made no markup');
  text = await view(page, 'approvals', 'article.approval', 800);
  check(text.includes(opt.expect.command), 'the waiting command shows as text');
  await page.locator('article.approval').first().getByRole('button', {name: /^Deny/}).click();
  await page.waitForSelector('.resolved li', {timeout: 10000});
  check((await page.evaluate(injected)).length === 0, 'the resolved list made no markup');
  text = await view(page, 'workspaces', '.files a', 800);
  check(text.includes(opt.expect.file) && text.includes(opt.expect.commit), 'file names and commits show as text');
  text = await view(page, 'workspaces?agent=main&file=' + enc(opt.expect.file), 'pre.file');
  check(text.includes(opt.expect.fileText), 'the file shows as text');
  text = await view(page, 'workspaces?agent=main&commit=' + opt.expect.commitId, '.file-diff', 800);
  check(text.includes(opt.expect.commit) && text.includes('<script>alert("body")</script>'), 'the commit message shows as text');
  text = await view(page, 'workspaces?agent=main&from=HEAD~1&to=HEAD', '.file-diff', 800);
  check(text.includes(opt.expect.fileText), 'the diff shows the contents as text');
  text = await view(page, 'workspaces?agent=main&from=HEAD&to=WORKTREE', '.diff p', 800);
  check(text.includes(opt.expect.untracked), 'an uncommitted file shows as text');
  text = await view(page, 'health', '.logs', 2500);
  check(text.includes(opt.expect.logged), 'the log tail shows the logged value as text');
  check(dialogs.length === 0, 'no dialog opened: ' + dialogs.join(' | '));
  results.steps.push(step);

  // 3. The policy holds against what would run if something did get in.
  step = 'the CSP blocks script that is not the page\'s';
  const csp = await page.evaluate(async () => {
    // leave the evaluation's own task first: code run directly by the
    // devtools protocol may compile strings whatever the policy says
    await new Promise((r) => setTimeout(r, 0));
    const o = {};
    window.__ran = [];
    const s = document.createElement('script');
    s.textContent = 'window.__ran.push("inline")';
    document.body.append(s);
    const d = document.createElement('div');
    d.innerHTML = '<img src="/ui/icon.svg" onload="window.__ran.push(\'handler\')">';
    document.body.append(d);
    const a = document.createElement('a');
    a.href = 'javascript:window.__ran.push("url")';
    document.body.append(a);
    a.click();
    const ds = document.createElement('script');
    ds.src = 'data:text/javascript,window.__ran.push("data")';
    document.body.append(ds);
    const fs = document.createElement('script');
    fs.src = 'http://127.0.0.2:9/x.js';
    document.body.append(fs);
    setTimeout('window.__ran.push("timer")', 0);
    try { new Function('window.__ran.push("function")')(); } catch (e) { o.fn = e.name; }
    try { window.eval('window.__ran.push("eval")'); } catch (e) { o.eval = e.name; }
    try { await fetch('http://127.0.0.2:9/'); o.fetch = 'allowed'; } catch (e) { o.fetch = 'blocked'; }
    await new Promise((r) => setTimeout(r, 400));
    o.ran = window.__ran.slice();
    o.violations = window.__violations.map((v) => v.split(' ')[0]);
    for (const n of [d, a, s, ds, fs]) n.remove();
    window.__violations.length = 0;
    return o;
  });
  check(csp.ran.length === 0, 'nothing ran: ' + csp.ran.join(','));
  check(csp.fn === 'EvalError' && csp.eval === 'EvalError', 'new Function and eval are refused: ' + csp.fn + ' ' + csp.eval);
  check(csp.fetch === 'blocked', 'a foreign connection is refused');
  for (const d of ['script-src-elem', 'script-src-attr', 'script-src', 'connect-src'])
    check(csp.violations.includes(d), 'the browser reports ' + d + ': ' + csp.violations.join(','));
  results.steps.push(step);

  // 4. What the browser keeps: a non-extractable key, no token, no code.
  step = 'only a non-extractable key is stored';
  const kept = await page.evaluate(async () => {
    const db = await new Promise((ok, ko) => { const r = indexedDB.open('switchboard'); r.onsuccess = () => ok(r.result); r.onerror = () => ko(r.error); });
    const all = await new Promise((ok) => { const r = db.transaction('keys').objectStore('keys').getAll(); r.onsuccess = () => ok(r.result); });
    db.close();
    const out = {n: all.length, storage: JSON.stringify(localStorage) + JSON.stringify(sessionStorage), cookie: document.cookie, values: []};
    for (const v of all) {
      out.values.push(JSON.stringify(v));
      out.extractable = v.privateKey.extractable;
      try { await crypto.subtle.exportKey('pkcs8', v.privateKey); out.exported = true; } catch { out.exported = false; }
    }
    return out;
  });
  check(kept.n === 1 && kept.extractable === false && kept.exported === false, 'one key, not extractable: ' + JSON.stringify(kept));
  check(kept.storage === '{}{}', 'nothing in localStorage or sessionStorage');
  check(!kept.cookie.includes('sb_session'), 'the page cannot read the cookie');
  check(!kept.values.join('').includes(opt.token) && !kept.values.join('').includes(opt.code), 'no token or code stored');
  results.steps.push(step);

  // 5. Another program on another port of 127.0.0.1 gets the cookie (a
  // browser sends it to every port) but cannot use it.
  step = 'a cookie read on another port opens nothing';
  const seen = [];
  const thief = http.createServer((req, res) => {
    seen.push(req.headers.cookie || '');
    res.writeHead(200, {'Content-Type': 'text/html'});
    res.end('<!doctype html><title>cats</title><img src="/pixel.png">');
  });
  await new Promise((ok) => thief.listen(0, '127.0.0.1', ok));
  const lure = http.createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html'});
    res.end('<!doctype html><a id="go" href="http://127.0.0.1:' + thief.address().port + '/">cats</a>');
  });
  await new Promise((ok) => lure.listen(0, '127.0.0.2', ok));
  const other = await ctx.newPage();
  await other.goto('http://127.0.0.2:' + lure.address().port + '/');
  await other.click('#go');
  await other.waitForLoadState('load');
  for (let i = 0; i < 100 && !seen.some((c) => c.includes('sb_session_')); i++) await other.waitForTimeout(50);
  await other.close();
  thief.close();
  lure.close();
  const stolen = seen.find((c) => c.includes('sb_session_'));
  check(stolen, 'the browser sent the cookie to the other port (what this step is about): ' + JSON.stringify(seen));
  results.stolen = stolen;
  const tryCookie = (headers) => new Promise((ok) => {
    const ws = new WebSocket(opt.url.replace(/^http/, 'ws') + '/ws', {headers});
    ws.on('message', (m) => {
      const f = JSON.parse(m.toString());
      if (f.event === 'connect.challenge')
        ws.send(JSON.stringify({type: 'req', id: 'c', method: 'connect', params: {minProtocol: 3, maxProtocol: 4,
          client: {id: 'thief', mode: 'cli'}, auth: {webSignature: 'A'.repeat(86)}}}));
      else if (f.id === 'c') ok(f.ok ? 'in' : f.error.code);
    });
    ws.on('close', () => ok('closed'));
    ws.on('error', () => ok('error'));
  });
  check(await tryCookie({Cookie: stolen}) === 'UNAUTHORIZED', 'the stolen cookie from a script');
  check(await tryCookie({Cookie: stolen, Origin: opt.url}) === 'UNAUTHORIZED', 'the stolen cookie with a forged Origin');
  // the page itself is still signed in
  await view(page, 'health', '.spark');
  check(await page.textContent('#conn') === 'connected', 'the page is still connected');
  results.steps.push(step);

  // 6. Sign-out forgets the session and its key.
  step = 'sign out';
  await page.click('#signout');
  await page.waitForSelector('.login input', {timeout: 10000});
  const after = await page.evaluate(async () => {
    const db = await new Promise((ok) => { const r = indexedDB.open('switchboard'); r.onsuccess = () => ok(r.result); });
    const n = await new Promise((ok) => { const r = db.transaction('keys').objectStore('keys').count(); r.onsuccess = () => ok(r.result); });
    db.close();
    return n;
  });
  check(after === 0, 'no key is left after sign-out');
  await page.reload();
  await page.waitForSelector('.login input', {timeout: 10000});
  results.steps.push(step);

  check(dialogs.length === 0, 'no dialog opened: ' + dialogs.join(' | '));
  check(errors.length === 0, 'no script error: ' + errors.join(' | '));
  await ctx.close();
  done(null);
})().catch(done);
