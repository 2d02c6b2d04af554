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
//
// Environment:
//   LLM_PORT   use the OpenAI-compatible model server bench_llm.js on this port
//              (provider api openai-chat) instead of the in-process scripted
//              provider; the figures then include the provider's own time,
//              which is subtracted for webhook_cN_gateway_overhead_ms
//   IDLE       seconds to stay idle after start before reading idle memory
//              (default 0: no idle figure)
//   PREFIX     prefix of every figure's name (default "webhook_")
//   SOAK       soak mode: send this many messages at the first level, sample
//              memory every SAMPLE_SECONDS (default 10), and compare the last
//              sample with the one after WARMUP messages (default 5% of SOAK);
//              exit 1 when RSS grew by MAX_GROWTH percent (default 2) or more
// After each level the gateway's RSS and private memory (smaps_rollup) are
// printed as <prefix>cN_after_rss_kib / _private_kib.
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
const LLM_PORT = process.env.LLM_PORT ? Number(process.env.LLM_PORT) : 0;
const IDLE = Number(process.env.IDLE || 0);
const PREFIX = process.env.PREFIX === undefined ? 'webhook_' : process.env.PREFIX;
const SOAK = Number(process.env.SOAK || 0);
const SAMPLE_SECONDS = Number(process.env.SAMPLE_SECONDS || 10);
const WARMUP = Number(process.env.WARMUP || Math.floor(SOAK / 20));
const MAX_GROWTH = Number(process.env.MAX_GROWTH || 2);
let gwPid = 0;
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

// {rss, pss, priv} in KiB from /proc/PID/smaps_rollup.
function memory(pid) {
	const text = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
	const field = (name) => {
		const m = text.match(new RegExp('^' + name + ':\\s+(\\d+) kB', 'm'));
		return m ? Number(m[1]) : NaN;
	};
	return {rss: field('Rss'), pss: field('Pss'),
		priv: field('Private_Clean') + field('Private_Dirty')};
}

function cpuSeconds(pid) {
	const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
	return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in USER_HZ (100)
}

function llmStats() {
	return new Promise((resolve) => {
		if (!LLM_PORT)
			return resolve({requests: 0, busy_ms: 0});
		http.get({host: '127.0.0.1', port: LLM_PORT, path: '/__stats'}, (res) => {
			const c = [];
			res.on('data', (d) => c.push(d));
			res.on('end', () => resolve(JSON.parse(Buffer.concat(c).toString())));
		}).on('error', () => resolve({requests: 0, busy_ms: 0}));
	});
}

function printMemory(name) {
	const m = memory(gwPid);
	console.log(`${PREFIX}${name}_rss_kib: ${m.rss}`);
	console.log(`${PREFIX}${name}_private_kib: ${m.priv}`);
	return m;
}

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
	const s0 = await llmStats();
	for (let k = 0; k < c; k++)
		ws.push(worker(k));
	await Promise.all(ws);
	const secs = (performance.now() - t0) / 1000;
	const s1 = await llmStats();
	lat.sort((a, b) => a - b);
	ack.sort((a, b) => a - b);
	const f = (x) => x.toFixed(2);
	const mean = lat.reduce((a, b) => a + b, 0) / (lat.length || 1);
	const provider = (s1.busy_ms - s0.busy_ms) / (lat.length || 1);
	const P = PREFIX;
	console.log(`${P}c${c}_messages: ${lat.length}`);
	console.log(`${P}c${c}_throughput_msgs_per_s: ${(lat.length / secs).toFixed(1)}`);
	console.log(`${P}c${c}_latency_p50_ms: ${f(pct(lat, 50))}`);
	console.log(`${P}c${c}_latency_p99_ms: ${f(pct(lat, 99))}`);
	console.log(`${P}c${c}_latency_mean_ms: ${f(mean)}`);
	console.log(`${P}c${c}_ack_p50_ms: ${f(pct(ack, 50))}`);
	console.log(`${P}c${c}_ack_p99_ms: ${f(pct(ack, 99))}`);
	console.log(`${P}c${c}_provider_calls_per_msg: ${((s1.requests - s0.requests) / (lat.length || 1)).toFixed(2)}`);
	console.log(`${P}c${c}_provider_ms_per_msg: ${f(provider)}`);
	console.log(`${P}c${c}_gateway_overhead_ms: ${f(mean - provider)}`);
	printMemory(`c${c}_after`);
}

// Soak: n messages at c senders; memory every SAMPLE_SECONDS.
async function soak(port, c, n) {
	let next = 0;
	let done = 0;
	let warm = null;
	let last = null;
	let peak = 0;
	const t0 = performance.now();
	const cpu0 = cpuSeconds(gwPid);
	let stop = false;
	const sampler = (async () => {
		while (!stop) {
			await sleep(SAMPLE_SECONDS * 1000);
			if (stop)
				break;
			const m = memory(gwPid);
			peak = Math.max(peak, m.rss);
			if (done >= WARMUP && !warm) {
				warm = {m, done};
				console.log(`soak_warm_rss_kib: ${m.rss} (after ${done} messages)`);
			}
			last = {m, done};
			const secs = (performance.now() - t0) / 1000;
			console.log(`soak_progress: ${done} messages, ${(done / secs).toFixed(0)} msg/s, ` +
				`rss ${m.rss} KiB, private ${m.priv} KiB`);
		}
	})();
	const worker = async (k) => {
		while (next < n) {
			next++;
			await roundTrip(port, `soak-s${k}`);
			done++;
		}
	};
	const ws = [];
	for (let k = 0; k < c; k++)
		ws.push(worker(k));
	await Promise.all(ws);
	stop = true;
	const secs = (performance.now() - t0) / 1000;
	const end = memory(gwPid);
	if (!warm)
		warm = {m: end, done};
	const growth = 100 * (end.rss - warm.m.rss) / warm.m.rss;
	console.log(`soak_messages: ${done}`);
	console.log(`soak_seconds: ${secs.toFixed(0)}`);
	console.log(`soak_throughput_msgs_per_s: ${(done / secs).toFixed(1)}`);
	console.log(`soak_gateway_cpu_seconds: ${(cpuSeconds(gwPid) - cpu0).toFixed(1)}`);
	console.log(`soak_rss_after_warmup_kib: ${warm.m.rss}`);
	console.log(`soak_rss_end_kib: ${end.rss}`);
	console.log(`soak_private_end_kib: ${end.priv}`);
	console.log(`soak_rss_peak_kib: ${Math.max(peak, end.rss)}`);
	console.log(`soak_rss_growth_after_warmup_pct: ${growth.toFixed(2)}`);
	await sleep(1000);
	return growth;
}

async function main() {
	const rcv = await receiver();
	const port = await freePort();
	fs.writeFileSync(path.join(home, 'bench-script.yaml'),
		'steps:\n' +
		'  - match: "/./"\n' +
		'    tool_calls: [{name: ls, input: {path: "."}}]\n' +
		'  - text: "done: {{user_text}}"\n');
	const provider = LLM_PORT
		? `  - {id: s, api: openai-chat, base_url: "http://127.0.0.1:${LLM_PORT}/v1", api_key: bench}\n`
		: '  - {id: s, api: scripted, script: bench-script.yaml}\n';
	fs.writeFileSync(path.join(home, 'switchboard.yaml'),
		'gateway: {bind: 127.0.0.1}\n' +
		'log: {level: warn}\n' +
		'providers:\n' + provider +
		'agents:\n' +
		'  - {id: main, default: true, model: s/bench, queue_mode: followup}\n' +
		'channels:\n' +
		'  webchat: {dm_policy: open, allow_from: ["*"]}\n' +
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
	gwPid = gw.pid;
	gw.on('exit', (code, sig) => { exited = sig ? 128 : code; });
	for (let i = 0; i < 500 && (await get(port, '/readyz')) !== 200; i++) {
		if (exited !== null)
			throw new Error('the gateway exited; see ' + path.join(home, 'gateway.log'));
		await sleep(10);
	}
	if (IDLE > 0) {
		await sleep(IDLE * 1000);
		printMemory('idle');
	}
	let failed = false;
	if (SOAK > 0) {
		failed = (await soak(port, levels[0], SOAK)) >= MAX_GROWTH;
	} else {
		// Warm up: sessions, transcripts, the HTTP client's connections.
		for (const c of levels)
			for (let k = 0; k < c; k++)
				await roundTrip(port, `bench-c${c}-s${k}`);
		for (const c of levels)
			await level(port, c, perLevel);
	}
	console.log(`${PREFIX}invalid_callbacks: ${invalid}`);
	console.log(`${PREFIX}duplicate_callbacks: ${duplicateReplies}`);
	gw.kill('SIGTERM');
	while (exited === null)
		await sleep(20);
	rcv.close();
	agent.destroy();
	if (exited !== 0)
		throw new Error(`the gateway exited with ${exited}`);
	if (failed)
		throw new Error(`RSS grew by ${MAX_GROWTH}% or more after warm-up`);
	if (invalid || duplicateReplies)
		throw new Error('invalid or duplicate callbacks');
}

main().catch((e) => {
	console.error('bench_webhooks:', e.message || e);
	process.exit(1);
});
