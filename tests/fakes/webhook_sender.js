#!/usr/bin/env node
// webhook_sender.js - an independent webhook sender for the gateway's tests.
//
// Usage: node webhook_sender.js <port|0>
// Listens on 127.0.0.1 for commands and prints "PORT <n>" as the first stdout
// line. Exits when stdin closes or on SIGTERM. Signatures come from the
// reference libraries, not from the gateway's code: npm `standardwebhooks`
// (Standard Webhooks) and `@octokit/webhooks-methods` (GitHub).
//
// Commands (JSON bodies):
//   POST /sign {scheme, secret, body, id?, timestamp?}
//        -> {headers}: the signature headers the library makes
//   POST /send {url, scheme: standard|github|bearer|none, secret, body, id?,
//               skew?: seconds added to the timestamp, method?,
//               extra_signatures?: [strings put before the real v1 entry],
//               signature?: replaces the signature header,
//               omit?: [header names to leave out], headers?: {name: value}}
//        -> {status, headers, body}: one request, the gateway's answer
//   POST /run  {port_file, path, secret, n, concurrency, prefix, interval_ms?}
//        starts a sender that delivers n messages (ids <prefix><i>, text
//        "crash message <i>", conversation "conv-<i>") with
//        Standard Webhooks signatures to http://127.0.0.1:<port in port_file><path>
//        and retries each until it is answered 2xx, re-signing every attempt
//        with the time of that attempt, as real senders do. The port is read
//        again before every attempt (the gateway's port changes on restart;
//        0 or no file means "down, wait"). Each worker waits interval_ms after
//        a message is acknowledged before it takes the next.
//   GET  /status -> {done, total, acked, attempts, errors, ids: {id: {attempts,
//        acked_status, body}}}
'use strict';

const fs = require('fs');
const http = require('http');
const {Webhook} = require('standardwebhooks');

let octokit = null;
async function github() {
	if (!octokit)
		octokit = await import('@octokit/webhooks-methods');
	return octokit;
}

async function signHeaders(scheme, secret, body, id, timestamp) {
	const headers = {};
	if (scheme === 'standard') {
		const wh = new Webhook(secret);
		headers['webhook-id'] = id;
		headers['webhook-timestamp'] = String(timestamp);
		headers['webhook-signature'] = wh.sign(id, new Date(timestamp * 1000), body);
	} else if (scheme === 'github') {
		const gh = await github();
		headers['X-Hub-Signature-256'] = await gh.sign(secret, body);
		headers['X-GitHub-Delivery'] = id;
		headers['X-GitHub-Event'] = 'issues';
	} else if (scheme === 'bearer') {
		headers['Authorization'] = `Bearer ${secret}`;
	}
	return headers;
}

function request(url, method, headers, body, timeoutMs) {
	return new Promise((resolve) => {
		const req = http.request(url, {method, headers, timeout: timeoutMs || 30000}, (res) => {
			const chunks = [];
			res.on('data', (c) => chunks.push(c));
			res.on('end', () => resolve({status: res.statusCode, headers: res.headers,
				body: Buffer.concat(chunks).toString('utf8')}));
			res.on('error', (e) => resolve({status: 0, error: String(e.message || e)}));
		});
		req.on('timeout', () => req.destroy(new Error('timeout')));
		req.on('error', (e) => resolve({status: 0, error: String(e.message || e)}));
		req.end(body);
	});
}

async function sendOne(o) {
	const now = Math.floor(Date.now() / 1000) + (o.skew || 0);
	const id = o.id || `msg_${Date.now()}_${Math.random().toString(36).slice(2)}`;
	const headers = Object.assign({'Content-Type': 'application/json'},
		await signHeaders(o.scheme, o.secret, o.body, id, now));
	if (o.scheme === 'standard' && o.extra_signatures)
		headers['webhook-signature'] =
			o.extra_signatures.concat([headers['webhook-signature']]).join(' ');
	if (o.signature !== undefined) {
		const name = o.scheme === 'github' ? 'X-Hub-Signature-256' : 'webhook-signature';
		headers[name] = o.signature;
	}
	for (const name of o.omit || [])
		for (const k of Object.keys(headers))
			if (k.toLowerCase() === name.toLowerCase())
				delete headers[k];
	Object.assign(headers, o.headers || {});
	headers['Content-Length'] = Buffer.byteLength(o.body);
	return request(o.url, o.method || 'POST', headers, o.body, o.timeout_ms);
}

// ---- the retrying sender (/run) ----

let run = null;

function readPort(file) {
	try {
		const n = Number(fs.readFileSync(file, 'utf8').trim());
		return n > 0 ? n : 0;
	} catch (e) {
		return 0;
	}
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function deliverUntilAcked(r, i) {
	const id = `${r.prefix}${i}`;
	const body = JSON.stringify({text: `crash message ${i}`, sender: `sender-${i}`,
		conversation: `conv-${i}`});
	const st = {attempts: 0, acked_status: 0, body: null};
	r.ids[id] = st;
	for (;;) {
		const port = readPort(r.port_file);
		if (port) {
			st.attempts++;
			r.attempts++;
			const res = await sendOne({url: `http://127.0.0.1:${port}${r.path}`,
				scheme: 'standard', secret: r.secret, body, id, timeout_ms: 10000});
			if (res.status >= 200 && res.status < 300) {
				st.acked_status = res.status;
				st.body = res.body;
				r.acked++;
				return;
			}
			if (!res.status)
				r.errors++;
		}
		await sleep(50 + Math.floor(Math.random() * 100));
	}
}

async function startRun(o) {
	const r = {port_file: o.port_file, path: o.path, secret: o.secret, prefix: o.prefix || 'm',
		interval_ms: o.interval_ms || 0, total: o.n, acked: 0, attempts: 0, errors: 0,
		ids: {}, done: false};
	run = r;
	let next = 0;
	const worker = async () => {
		while (next < r.total) {
			const i = next++;
			await deliverUntilAcked(r, i);
			if (r.interval_ms)
				await sleep(r.interval_ms);
		}
	};
	const workers = [];
	for (let k = 0; k < (o.concurrency || 1); k++)
		workers.push(worker());
	Promise.all(workers).then(() => { r.done = true; });
}

// ---- control server ----

function json(res, status, obj) {
	const buf = Buffer.from(JSON.stringify(obj));
	res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': buf.length});
	res.end(buf);
}

const server = http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', async () => {
		let o = {};
		try {
			o = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
		} catch (e) {
			return json(res, 400, {error: 'bad JSON'});
		}
		try {
			if (req.url === '/sign')
				return json(res, 200, {headers: await signHeaders(o.scheme, o.secret,
					o.body, o.id, o.timestamp)});
			if (req.url === '/send')
				return json(res, 200, await sendOne(o));
			if (req.url === '/run') {
				startRun(o);
				return json(res, 200, {ok: true});
			}
			if (req.url === '/status')
				return json(res, 200, run || {done: false, total: 0});
			json(res, 404, {error: 'no such command'});
		} catch (e) {
			json(res, 500, {error: String(e.stack || e)});
		}
	});
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
	process.stdout.write(`PORT ${server.address().port}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
