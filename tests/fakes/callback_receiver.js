#!/usr/bin/env node
// callback_receiver.js - a webhook receiver for the gateway's callback replies.
//
// Usage: node callback_receiver.js <port|0> <whsec_secret>
// Listens on 127.0.0.1 and prints "PORT <n>" as the first stdout line. Exits
// when stdin closes (so a crashed test never leaves it behind) or on SIGTERM.
//
// Every POST to any path other than /__* is a delivery. It is verified with the
// reference Standard Webhooks library (npm `standardwebhooks`, not our code);
// a delivery that fails verification is answered 401 and counted as invalid.
// Each verified delivery is recorded with its webhook-id, its body and the time
// it arrived, then answered per the failure rule (below) or 200.
//
// Control routes:
//   POST /__fail     {"first": n, "status": s, "retry_after": secs?}: the first n
//                    attempts of every webhook-id are answered s (default 500)
//   POST /__delay    {"ms": n}: wait n ms before answering each delivery (widens
//                    the window in which a gateway crash cuts a delivery)
//   POST /__reset    forget everything (deliveries, the failure rule, the delay)
//   GET  /__received {"deliveries": [{id, attempt, status, at, body}],
//                     "unique": ids answered 2xx once or more,
//                     "duplicates": {id: times a 2xx id arrived again},
//                     "invalid": n}
'use strict';

const http = require('http');
const {Webhook} = require('standardwebhooks');

const secret = process.argv[3];
if (!secret) {
	console.error('usage: callback_receiver.js <port|0> <whsec_secret>');
	process.exit(2);
}
const wh = new Webhook(secret);

let deliveries = [];
let attempts = new Map(); // webhook-id -> attempts seen
let acked = new Map();    // webhook-id -> 2xx answers given
let invalid = 0;
let failRule = {first: 0, status: 500, retryAfter: null};
let delayMs = 0;

function json(res, status, obj, headers) {
	const buf = Buffer.from(JSON.stringify(obj));
	res.writeHead(status, Object.assign({'Content-Type': 'application/json',
		'Content-Length': buf.length}, headers || {}));
	res.end(buf);
}

function received() {
	const duplicates = {};
	for (const [id, n] of acked)
		if (n > 1)
			duplicates[id] = n - 1;
	return {deliveries, unique: acked.size, duplicates, invalid};
}

function deliver(req, res, body) {
	let payload;
	try {
		payload = wh.verify(body, req.headers);
	} catch (e) {
		invalid++;
		return json(res, 401, {error: String(e.message || e)});
	}
	const id = req.headers['webhook-id'];
	const attempt = (attempts.get(id) || 0) + 1;
	attempts.set(id, attempt);
	let status = 200;
	let headers = {};
	if (attempt <= failRule.first) {
		status = failRule.status;
		if (failRule.retryAfter !== null)
			headers['Retry-After'] = String(failRule.retryAfter);
	} else {
		acked.set(id, (acked.get(id) || 0) + 1);
	}
	deliveries.push({id, attempt, status, at: Date.now(), body: payload});
	if (delayMs)
		setTimeout(() => json(res, status, {ok: status < 300}, headers), delayMs);
	else
		json(res, status, {ok: status < 300}, headers);
}

const server = http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		const body = Buffer.concat(chunks).toString('utf8');
		const url = new URL(req.url, 'http://127.0.0.1');
		if (url.pathname === '/__received')
			return json(res, 200, received());
		if (url.pathname === '/__reset') {
			deliveries = [];
			attempts = new Map();
			acked = new Map();
			invalid = 0;
			failRule = {first: 0, status: 500, retryAfter: null};
			delayMs = 0;
			return json(res, 200, {ok: true});
		}
		if (url.pathname === '/__delay') {
			delayMs = Number(JSON.parse(body || '{}').ms) || 0;
			return json(res, 200, {ok: true});
		}
		if (url.pathname === '/__fail') {
			const o = JSON.parse(body || '{}');
			failRule = {first: o.first || 0, status: o.status || 500,
				retryAfter: o.retry_after === undefined ? null : o.retry_after};
			return json(res, 200, {ok: true});
		}
		if (req.method !== 'POST')
			return json(res, 405, {error: 'POST only'});
		deliver(req, res, body);
	});
});

server.keepAliveTimeout = 5000;
server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
	process.stdout.write(`PORT ${server.address().port}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
