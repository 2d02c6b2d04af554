// ui_browser.js - the web UI in a real browser: Debian's chromium, headless,
// driven by playwright-core (from tests/fakes/node_modules), against a
// gateway that tests/integration/test_ui.c started on 127.0.0.1.
//
//   node ui_browser.js '<options as JSON>'
//
// Options: url (http://127.0.0.1:PORT), code (a fresh one-time code), commit
// (the workspace commit the agent answers with), pairing {channel, code,
// sender}, shots (the screenshot directory), profile (a fresh
// --user-data-dir).
//
// Everything is checked from the person's side: what the page shows, what
// the browser can reach. It prints one JSON line and exits 0 when every
// check passed, 1 (with "fail" and the step) otherwise.
'use strict';

const path = require('path');
const http = require('http');
const fs = require('fs');
const {chromium} = require(path.join(__dirname, '..', 'fakes', 'node_modules', 'playwright-core'));

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

async function shot(page, name) {
  await page.screenshot({path: path.join(opt.shots, name + '.png'), fullPage: true});
}

// Every control on the page has a name a screen reader can say, and the
// page fits the viewport's width (no sideways scrolling).
async function checkPage(page, name, width) {
  const unnamed = await page.evaluate(() => {
    const bad = [];
    for (const el of document.querySelectorAll('button, input, select, textarea, a[href]')) {
      if (el.closest('[hidden]') || el.type === 'hidden') continue;
      const labelled = el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') ||
        (el.id && document.querySelector('label[for="' + CSS.escape(el.id) + '"]')) || el.closest('label') ||
        (el.textContent || '').trim() || el.getAttribute('title') || el.getAttribute('alt');
      if (!labelled) bad.push(el.outerHTML.slice(0, 120));
    }
    return bad;
  });
  check(unnamed.length === 0, name + ': controls without a label: ' + unnamed.join(' | '));
  if (width) {
    const sw = await page.evaluate(() => document.documentElement.scrollWidth);
    check(sw <= width + 1, name + ' at ' + width + ' px is ' + sw + ' px wide');
  }
}

async function goPage(page, route, ready) {
  await page.goto(opt.url + '/#/' + route);
  await page.waitForSelector(ready, {timeout: 15000});
}

(async () => {
  fs.mkdirSync(opt.shots, {recursive: true});
  const ctx = await chromium.launchPersistentContext(opt.profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1280, height: 860},
  });
  const errors = [];
  ctx.on('page', (p) => p.on('pageerror', (e) => errors.push(e.message)));
  const page = ctx.pages()[0] || await ctx.newPage();
  page.on('pageerror', (e) => errors.push(e.message));

  // 1. Sign in with the one-time code from `switchboard dashboard`.
  step = 'sign in with a one-time code';
  await page.goto(opt.url + '/#code=' + opt.code);
  await page.waitForSelector('#nav:not([hidden])', {timeout: 15000});
  await page.waitForFunction(() => document.getElementById('conn').textContent === 'connected');
  check(!page.url().includes(opt.code), 'the code is taken out of the address');
  const cookies = await ctx.cookies(opt.url);
  const session = cookies.find((c) => c.name.startsWith('sb_session_'));
  check(session && session.httpOnly && session.sameSite === 'Strict', 'an HttpOnly, SameSite=Strict session cookie');
  check(await page.evaluate(() => !document.cookie.includes('sb_session')), 'the page cannot read the cookie');
  check(await page.evaluate(() => JSON.stringify(localStorage).length <= 2 && JSON.stringify(sessionStorage).length <= 2),
    'nothing in localStorage or sessionStorage');
  results.steps.push(step);

  // 2. The same code again is refused (in a fresh browser profile-less page
  // it would be the only way in; here the page says so).
  step = 'a replayed one-time code is refused';
  const replay = await ctx.newPage();
  await replay.goto(opt.url + '/#code=' + opt.code);
  await replay.waitForSelector('.login .notice.error', {timeout: 15000});
  const replayText = await replay.textContent('.login .notice.error');
  check(/not valid|used already/.test(replayText), 'the page says the code is used: ' + replayText);
  await replay.close();
  // and the exchange itself answers 401 (with a key, as the page sends)
  const someKey = require('crypto').generateKeyPairSync('ed25519').publicKey
    .export({type: 'spki', format: 'der'}).subarray(12).toString('base64url');
  const again = await fetch(opt.url + '/auth/login', {method: 'POST', headers: {'Content-Type': 'application/json',
    Origin: opt.url}, body: JSON.stringify({code: opt.code, key: someKey})});
  check(again.status === 401, 'replay answered ' + again.status);
  results.steps.push(step);

  // 3. A page from another origin cannot use the gateway.
  step = 'a wrong origin is refused';
  const evil = http.createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html'});
    res.end('<!doctype html><title>other</title><script>' +
      'window.result = new Promise((ok) => { const ws = new WebSocket(' + JSON.stringify(opt.url.replace('http', 'ws') + '/ws') + ');' +
      'let got = []; ws.onmessage = (m) => got.push(m.data); ws.onclose = (e) => ok({code: e.code, reason: e.reason, got}); });' +
      '</script>');
  });
  await new Promise((ok) => evil.listen(0, '127.0.0.1', ok));
  const evilUrl = 'http://127.0.0.1:' + evil.address().port;
  const ep = await ctx.newPage();
  await ep.goto(evilUrl + '/');
  const r = await ep.evaluate(() => window.result);
  check(r.code === 1008 && /origin/.test(r.reason) && r.got.length === 0,
    'the upgrade from ' + evilUrl + ' closed with ' + JSON.stringify(r));
  const login = await fetch(opt.url + '/auth/login', {method: 'POST', headers: {'Content-Type': 'application/json',
    Origin: evilUrl}, body: JSON.stringify({token: 'x'})});
  check(login.status === 403, 'sign-in from another origin answered ' + login.status);
  // a name that was pointed at 127.0.0.1 (DNS rebinding) gets no page
  const u = new URL(opt.url);
  const rebound = await new Promise((ok, fail) => http.get({host: u.hostname, port: u.port, path: '/',
    headers: {Host: 'attacker.example:' + u.port}}, (res) => { res.resume(); ok(res.statusCode); }).on('error', fail));
  check(rebound === 403, 'the page under a foreign Host answered ' + rebound);
  await ep.close();
  evil.close();
  results.steps.push(step);

  // 4. Chat: the streamed reply and a tool call as it runs.
  step = 'chat with a streamed reply and a tool call';
  await goPage(page, 'chat', '.chat-log');
  await page.waitForFunction(() => document.querySelector('#main select') && document.querySelector('#main select').options.length > 0);
  await page.evaluate(() => {
    window.__states = [];
    window.switchboard.on('chat', (e) => window.__states.push(e.state));
  });
  await page.getByLabel('Message').fill('hello there');
  await page.getByLabel('Message').press('Enter');
  const tool = page.locator('.chat-log details.tool').filter({hasText: 'ls'}).last();
  await tool.waitFor({timeout: 20000});
  await page.waitForFunction(() => window.__states.includes('final'), null, {timeout: 20000});
  const states = await page.evaluate(() => window.__states);
  check(states.includes('delta'), 'deltas streamed before the end: ' + states.join(','));
  await page.waitForFunction(() => [...document.querySelectorAll('.chat-log .msg.assistant .text')].some((t) => t.textContent.includes('Here are the files')));
  check(await tool.locator('.res-state').textContent() === 'ok', 'the tool call ended ok');
  check(/ms|s$/.test(await tool.locator('.dur').textContent()), 'the tool call shows its duration');
  const preview = await tool.locator('.preview').textContent();
  check(preview.startsWith('→ ') && preview.length > 10, 'the tool result preview is shown: ' + preview);
  check((await tool.locator('pre.result').textContent()).includes('AGENTS.md'), 'the tool result is shown');
  await tool.locator('summary').click();
  await shot(page, 'chat');
  await checkPage(page, 'chat');
  results.steps.push(step);

  // 5. An approval: the run waits, the operator approves on the Approvals
  // page (a second tab), and the chat sees the run finish.
  step = 'approve a pending approval and see the run finish';
  const ops = await ctx.newPage();
  await goPage(ops, 'approvals', '.cards');
  await page.getByLabel('Message').fill('make a file');
  await page.getByLabel('Message').press('Enter');
  const card = ops.locator('article.approval').first();
  await card.waitFor({timeout: 20000});
  check((await card.textContent()).includes('touch made.txt'), 'the approval shows the command');
  await page.waitForSelector('.chat-status a[href="#/approvals"]', {timeout: 10000});
  await ops.waitForFunction(() => document.getElementById('approvals-badge').textContent === '1');
  await shot(ops, 'approvals');
  await checkPage(ops, 'approvals');
  await card.getByRole('button', {name: /^Approve once/}).click();
  await ops.waitForSelector('.resolved li', {timeout: 10000});
  await page.waitForFunction(() => [...document.querySelectorAll('.chat-log .msg.assistant .text')].some((t) => t.textContent.includes('made it')), null, {timeout: 20000});
  await ops.close();
  results.steps.push(step);

  // 6. Pairing: approve a sender's code on the Channels page.
  step = 'approve a pairing code';
  await goPage(page, 'channels', '#ch-pair');
  const row = page.locator('tr', {hasText: opt.pairing.code});
  await row.waitFor({timeout: 15000});
  await shot(page, 'channels');
  await checkPage(page, 'channels');
  await row.getByRole('button', {name: /^Approve/}).click();
  await page.waitForSelector('.notice.ok', {timeout: 10000});
  await page.locator('tr', {hasText: opt.pairing.sender}).filter({hasText: 'Revoke'}).waitFor({timeout: 10000});
  check(await page.locator('tr', {hasText: opt.pairing.code}).count() === 0, 'the request left the pending list');
  results.steps.push(step);

  // 7. A transcript shows the commit that answered.
  step = 'open a transcript and see the commit that answered';
  await goPage(page, 'sessions', 'table');
  await page.getByRole('link', {name: 'agent:main:main'}).click();
  await page.waitForSelector('article.turn', {timeout: 15000});
  const commits = await page.$$eval('article.turn .commit-id', (els) => els.map((e) => e.getAttribute('title')));
  check(commits.length >= 2 && commits.every((c) => c === opt.commit), 'each turn names commit ' + opt.commit + ': ' + commits.join(','));
  const prov = await page.textContent('article.turn .provenance');
  check(/scripted/.test(prov) && /in · \d+ out · cache/.test(prov), 'the model and tokens are shown: ' + prov);
  await shot(page, 'sessions');
  await checkPage(page, 'sessions');
  // the commit link leads to the commit in the workspace's history
  await page.locator('article.turn .commit-id').first().click();
  await page.waitForSelector('#main h2 code.commit-id', {timeout: 15000});
  check((await page.textContent('#main h2 code.commit-id')) === opt.commit, 'the commit page shows the commit');
  results.steps.push(step);

  // 8. The other pages render what the gateway says.
  step = 'workspaces, schedules and health';
  await goPage(page, 'workspaces', '.files a');
  check((await page.textContent('.files')).includes('AGENTS.md'), 'the files are listed');
  await page.waitForSelector('.commits li');
  await shot(page, 'workspaces');
  await checkPage(page, 'workspaces');
  await page.goto(opt.url + '/#/workspaces?agent=main&from=HEAD&to=WORKTREE');
  // the box says 'Loading the diff…' until the answer is in: wait for the answer, not the placeholder
  await page.waitForFunction(() => { const d = document.querySelector('.diff'); return d && !d.textContent.includes('Loading the diff'); }, null, {timeout: 15000});
  check((await page.textContent('.diff')).includes('made.txt'), 'the uncommitted file shows in the diff');
  await shot(page, 'workspaces-diff');
  await goPage(page, 'schedules', '#sc-cron');
  await page.waitForSelector('#sc-cron ~ div table, #sc-cron ~ div .empty');
  check((await page.textContent('#main')).includes('nightly'), 'the cron job is listed');
  await shot(page, 'schedules');
  await checkPage(page, 'schedules');
  await goPage(page, 'health', '.spark');
  await page.waitForFunction(() => document.querySelector('.logs').textContent.includes('web session started'), null, {timeout: 15000});
  await page.waitForFunction(() => document.querySelectorAll('.spark polyline[points*=","]').length >= 3, null, {timeout: 15000});
  check((await page.textContent('#main')).includes('is valid'), 'the config validation is shown');
  await shot(page, 'health');
  await checkPage(page, 'health');
  results.steps.push(step);

  // 9. 375 px wide, and the keyboard.
  step = 'a layout that works at 375 px';
  await page.setViewportSize({width: 375, height: 800});
  for (const [route, ready] of [['chat', '.chat-log .msg'], ['sessions', 'table'], ['channels', '#ch-acc'],
    ['approvals', '.cards'], ['schedules', '#sc-cron'], ['workspaces', '.files a'], ['health', '.spark']]) {
    await goPage(page, route, ready);
    await checkPage(page, route, 375);
    await shot(page, 'mobile-' + route);
  }
  // the menu opens with the keyboard
  await page.focus('.menu-toggle');
  await page.keyboard.press('Enter');
  check(await page.isVisible('#nav a[href="#/sessions"]'), 'the menu opens with Enter');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.getAttribute('href')) === '#/chat', 'Tab moves into the menu');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.chat-log');
  results.steps.push(step);

  check(errors.length === 0, 'no script error on any page: ' + errors.join(' | '));
  await ctx.close();
  done(null);
})().catch(done);
