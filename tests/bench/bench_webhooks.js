#!/usr/bin/env node
// bench_webhooks.js - webhook -> scripted agent (one tool call) -> signed callback.
//
//   node bench_webhooks.js BINARY HOME [MESSAGES_PER_LEVEL] [LEVELS]
//
// HOME must have been made by `switchboard init`. The script writes a
// configuration with one callback-mode hook and a scripted provider whose
// every turn calls the `ls` tool once and then answers, starts
// `BINARY gateway` on a free loopback port, and runs closed-loop senders: each
// signs a message with npm `standardwebhooks`, POSTs it, and waits until the
// reply arrives at the in-process callback receiver (which verifies its
// signature with the same library) before it sends the next. Each message is
// its own conversation, so a new session: the figures do not grow with one
// session's history (bench_turn measures that). Latency is send -> verified
// callback; throughput is completed round trips per second over the level.
// Prints `name: value` lines. LEVELS defaults to "1,8".
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const {spawn} = require('child_process');
const {performance} = require('perf_hooks');
const {Webhook} = require(path.join(__dirname, '../fakes/node_modules/standardwebhooks'));

const [bin, home, perLevelArg, levelsArg] = process.argv.slice(2);
if (!bin || !home) {
	console.error('usage: bench_webhooks.js BINARY HOME [MESSAGES_PER_LEVEL] [LEVELS]');
	process.exit(2);
}
const perLevel = Number(perLevelArg || 400);
const levels = (levelsArg || '1,8').split(',').map(Number);
const HOOK_SECRET = 'whsec_' + Buffer.from('bench-hook-secret-0123456789abcdef').toString('base64');
const CB_SECRET = 'whsec_' + Buffer.from('bench-callback-secret-0123456789ab').toString('base64');
const hookSigner = new Webhook(HOOK_SECRET);
const cbVerifier = new Webhook(CB_SECRET);
const agent = new http.Agent({keepAlive: true, maxSockets: 64});

const waiting = new Map(); // event id -> resolve
let invalid = 0;
let duplicateReplies = 0;
const seenReplies = new Set();

function receiver() {
	const server = http.createServer((req, res) => {
		const chunks = [];
		req.on('data', (c) => chunks.push(c));
		req.on('end', () => {
			const body = Buffer.concat(chunks).toString('utf8');
			let payload;
			try {
				payload = cbVerifier.verify(body, req.headers);
			} catch (e) {
				invalid++;
				res.writeHead(401);
				return res.end();
			}
			res.writeHead(200, {'Content-Length': 0});
			res.end();
			const id = req.headers['webhook-id'];
			if (seenReplies.has(id)) {
				duplicateReplies++;
				return;
			}
			seenReplies.add(id);
			const done = waiting.get(payload.event_id);
			if (done) {
				waiting.delete(payload.event_id);
				done(performance.now());
			}
		});
	});
	return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function freePort() {
	return new Promise((resolve) => {
		const s = http.createServer();
		s.listen(0, '127.0.0.1', () => {
			const p = s.address().port;
			s.close(() => resolve(p));
		});
	});
}

function post(port, urlPath, headers, body) {
	return new Promise((resolve, reject) => {
		const req = http.request({host: '127.0.0.1', port, path: urlPath, method: 'POST', headers,
			agent}, (res) => {
			res.resume();
			res.on('end', () => resolve(res.statusCode));
		});
		req.on('error', reject);
		req.end(body);
	});
}

function get(port, urlPath) {
	return new Promise((resolve) => {
		const req = http.get({host: '127.0.0.1', port, path: urlPath}, (res) => {
			res.resume();
			res.on('end', () => resolve(res.statusCode));
		});
		req.on('error', () => resolve(0));
	});
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let seq = 0;
async function roundTrip(port, sender) {
	const id = `bench_${process.pid}_${++seq}`;
	const conversation = `${sender}-m${seq}`;
	const body = JSON.stringify({text: `bench message ${seq}`, sender, conversation});
	const reply = new Promise((resolve) => waiting.set(id, resolve));
	const t0 = performance.now();
	const ts = Math.floor(Date.now() / 1000);
	const headers = {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body),
		'webhook-id': id, 'webhook-timestamp': String(ts),
		'webhook-signature': hookSigner.sign(id, new Date(ts * 1000), body)};
	const status = await post(port, '/hooks/bench', headers, body);
	if (status !== 202)
		throw new Error(`the gateway answered ${status}`);
	const tAck = performance.now();
	const t1 = await reply;
	return {total: t1 - t0, ack: tAck - t0};
}

function pct(sorted, p) {
	if (!sorted.length)
		return NaN;
	const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
	return sorted[i];
}

async function level(port, c, n) {
	const lat = [];
	const ack = [];
	let next = 0;
	const t0 = performance.now();
	const worker = async (k) => {
		while (next < n) {
			next++;
			const r = await roundTrip(port, `bench-c${c}-s${k}`);
			lat.push(r.total);
			ack.push(r.ack);
		}
	};
	const ws = [];
	for (let k = 0; k < c; k++)
		ws.push(worker(k));
	await Promise.all(ws);
	const secs = (performance.now() - t0) / 1000;
	lat.sort((a, b) => a - b);
	ack.sort((a, b) => a - b);
	const f = (x) => x.toFixed(2);
	console.log(`webhook_c${c}_messages: ${lat.length}`);
	console.log(`webhook_c${c}_throughput_msgs_per_s: ${(lat.length / secs).toFixed(1)}`);
	console.log(`webhook_c${c}_latency_p50_ms: ${f(pct(lat, 50))}`);
	console.log(`webhook_c${c}_latency_p99_ms: ${f(pct(lat, 99))}`);
	console.log(`webhook_c${c}_ack_p50_ms: ${f(pct(ack, 50))}`);
	console.log(`webhook_c${c}_ack_p99_ms: ${f(pct(ack, 99))}`);
}

async function main() {
	const rcv = await receiver();
	const port = await freePort();
	fs.writeFileSync(path.join(home, 'bench-script.yaml'),
		'steps:\n' +
		'  - match: "/./"\n' +
		'    tool_calls: [{name: ls, input: {path: "."}}]\n' +
		'  - text: "done: {{user_text}}"\n');
	fs.writeFileSync(path.join(home, 'switchboard.yaml'),
		'gateway: {bind: 127.0.0.1}\n' +
		'log: {level: warn}\n' +
		'providers:\n' +
		'  - {id: s, api: scripted, script: bench-script.yaml}\n' +
		'agents:\n' +
		'  - {id: main, default: true, model: s/bench, queue_mode: followup}\n' +
		'channels:\n' +
		'  webhook:\n' +
		'    dm_policy: open\n' +
		'    allow_from: ["*"]\n' +
		'    group_policy: open\n' +
		'    hooks:\n' +
		'      - name: bench\n' +
		`        secret: "${HOOK_SECRET}"\n` +
		'        mode: callback\n' +
		`        callback_url: http://127.0.0.1:${rcv.address().port}/replies\n` +
		`        callback_secret: "${CB_SECRET}"\n`, {mode: 0o600});
	const log = fs.openSync(path.join(home, 'gateway.log'), 'a');
	const gw = spawn(bin, ['gateway', '--port', String(port)],
		{env: Object.assign({}, process.env, {SWITCHBOARD_HOME: home}),
			stdio: ['ignore', log, log]});
	let exited = null;
	gw.on('exit', (code, sig) => { exited = sig ? 128 : code; });
	for (let i = 0; i < 500 && (await get(port, '/readyz')) !== 200; i++) {
		if (exited !== null)
			throw new Error('the gateway exited; see ' + path.join(home, 'gateway.log'));
		await sleep(10);
	}
	// Warm up: sessions, transcripts, the HTTP client's connections.
	for (const c of levels)
		for (let k = 0; k < c; k++)
			await roundTrip(port, `bench-c${c}-s${k}`);
	for (const c of levels)
		await level(port, c, perLevel);
	console.log(`webhook_invalid_callbacks: ${invalid}`);
	console.log(`webhook_duplicate_callbacks: ${duplicateReplies}`);
	gw.kill('SIGTERM');
	while (exited === null)
		await sleep(20);
	rcv.close();
	agent.destroy();
	if (exited !== 0)
		throw new Error(`the gateway exited with ${exited}`);
}

main().catch((e) => {
	console.error('bench_webhooks:', e.message || e);
	process.exit(1);
});
