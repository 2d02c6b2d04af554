// ui_paint.js - the web UI's size and first paint on loopback.
//
//   node tests/bench/ui_paint.js BINARY [RUNS]
//
// Starts the gateway in a fresh home on a free port, then loads the page in
// headless chromium (playwright-core) RUNS times (default 20), each in a new
// browser context (nothing cached), and prints as `name: value` lines:
//   ui_assets_bytes / ui_assets_gzip_bytes  every file of gateway/ui/assets as
//       served without and with gzip;
//   ui_first_paint_ms_*      the sign-in page (no cookie), a new browser context
//       each time: first-contentful-paint after navigation start;
//   ui_reload_first_paint_ms_* the same page loaded again in its tab;
//   ui_document_response_ms_*  request to last byte of the page itself;
//   ui_signed_in_paint_ms_*  the Chat page signed in: first-contentful-paint and
//       the time until the page shows it is connected.
'use strict';

const {spawn, execFileSync} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const http = require('http');
const root = path.join(__dirname, '..', '..');
const {chromium} = require(path.join(root, 'tests', 'fakes', 'node_modules', 'playwright-core'));

const bin = path.resolve(process.argv[2]);
const runs = Number(process.argv[3] || 20);

function freePort() {
  return new Promise((ok) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

function get(port, p, headers) {
  return new Promise((ok, fail) => http.get({host: '127.0.0.1', port, path: p, headers}, (res) => {
    let n = 0;
    res.on('data', (c) => { n += c.length; });
    res.on('end', () => ok({status: res.statusCode, bytes: n}));
  }).on('error', fail));
}

function stats(name, v) {
  v.sort((a, b) => a - b);
  const q = (f) => v[Math.min(v.length - 1, Math.floor(f * v.length))];
  console.log(`${name}_median: ${q(0.5).toFixed(1)}`);
  console.log(`${name}_p90: ${q(0.9).toFixed(1)}`);
  console.log(`${name}_max: ${v[v.length - 1].toFixed(1)}`);
}

(async () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'sbui-'));
  const env = {...process.env, SWITCHBOARD_HOME: home};
  execFileSync(bin, ['init'], {env, stdio: 'ignore'});
  const port = await freePort();
  const gw = spawn(bin, ['gateway', '--port', String(port)], {env, stdio: ['ignore', 'ignore', 'ignore']});
  const origin = 'http://127.0.0.1:' + port;
  for (let i = 0; i < 200; i++) {
    try { if ((await get(port, '/readyz')).status === 200) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 25));
  }
  try {
    // sizes, as served
    let raw = 0, gz = 0;
    const dir = path.join(root, 'gateway', 'ui', 'assets');
    const walk = (d) => fs.readdirSync(d, {withFileTypes: true}).flatMap((e) => e.isDirectory() ? walk(path.join(d, e.name)) : [path.join(d, e.name)]);
    for (const f of walk(dir)) {
      const p = '/ui/' + path.relative(dir, f);
      raw += (await get(port, p, {Host: '127.0.0.1:' + port})).bytes;
      gz += (await get(port, p, {Host: '127.0.0.1:' + port, 'Accept-Encoding': 'gzip'})).bytes;
    }
    console.log('ui_assets_bytes: ' + raw);
    console.log('ui_assets_gzip_bytes: ' + gz);

    const browser = await chromium.launch({executablePath: '/usr/bin/chromium', headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync']});
    const fcp = async (page) => page.evaluate(() => new Promise((ok) => {
      const e = performance.getEntriesByName('first-contentful-paint')[0];
      if (e) return ok(e.startTime);
      new PerformanceObserver((l) => ok(l.getEntries()[0].startTime)).observe({type: 'paint', buffered: true});
    }));
    // one warm-up load (chromium's own start-up is not the page's)
    { const c = await browser.newContext(); const p = await c.newPage(); await p.goto(origin + '/'); await c.close(); }
    const cold = [], doc = [], again = [];
    for (let i = 0; i < runs; i++) {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(origin + '/');
      await page.waitForSelector('.login');
      cold.push(await fcp(page));
      doc.push(await page.evaluate(() => { const n = performance.getEntriesByType('navigation')[0]; return n.responseEnd - n.requestStart; }));
      // the same tab loading it again (files revalidated: 304)
      await page.reload();
      await page.waitForSelector('.login');
      again.push(await fcp(page));
      await ctx.close();
    }
    stats('ui_first_paint_ms', cold);
    stats('ui_reload_first_paint_ms', again);
    stats('ui_document_response_ms', doc);
    const token = fs.readFileSync(path.join(home, 'gateway.token'), 'utf8').trim();
    const warm = [], ready = [];
    for (let i = 0; i < runs; i++) {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(origin + '/ui/icon.svg');
      await page.evaluate(async (t) => {
        await fetch('/auth/login', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token: t})});
      }, token);
      const t0 = Date.now();
      await page.goto(origin + '/#/chat');
      await page.waitForFunction(() => document.getElementById('conn').textContent === 'connected');
      const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0].startTime);
      ready.push(Date.now() - t0 - nav);
      warm.push(await fcp(page));
      await ctx.close();
    }
    stats('ui_signed_in_paint_ms', warm);
    stats('ui_signed_in_connected_ms', ready);
    await browser.close();
  } finally {
    gw.kill('SIGTERM');
    await new Promise((r) => gw.on('exit', r));
    fs.rmSync(home, {recursive: true, force: true});
  }
})().catch((e) => { console.error(e); process.exit(1); });
