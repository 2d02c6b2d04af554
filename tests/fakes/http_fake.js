#!/usr/bin/env node
// http_fake.js - a scripted HTTP/1.1 peer for the httpc tests (Node built-ins only).
//
// Usage: node http_fake.js <port|0>
// Listens on 127.0.0.1; prints "PORT <n>" as the first stdout line. Exits when
// stdin closes (so a crashed test never leaves it behind) or on SIGTERM.
//
// Routes:
//   GET  /hello             200 "hello"
//   POST /echo[?delay=ms]   200 JSON {method, headers, body} (any method is echoed)
//   GET  /status/<n>        status n, body "status <n>"
//   GET  /slow/<ms>         waits ms, then 200 "slept <ms>"
//   GET  /big/<bytes>       200 with that many 'x' bytes
//   GET  /retry-after/<s>   429 with "Retry-After: <s>"
//   GET  /stream            chunked SSE: "data: 1\n\n" .. "data: 5\n\n" "data: [DONE]\n\n"
//   GET  /reset             headers + part of the body, then the socket is destroyed
//   GET  /early-hints       103 (Link header), then 200 "final" with "X-Final: yes"
//   GET  /stats             {"inflight":n,"peak":m} (requests being handled right now)
//   GET  /stats/reset       {"inflight":n}; peak restarts from n (this request not counted)
'use strict';

const http = require('http');

const MAX_BIG = 64 * 1024 * 1024;
const MAX_SLOW = 60 * 1000;

let inflight = 0;
let peak = 0;

function send(res, status, body, headers) {
	const buf = Buffer.from(body);
	res.writeHead(status, Object.assign({'Content-Length': buf.length}, headers || {}));
	res.end(buf);
}

function intArg(s, max) {
	if (!/^[0-9]+$/.test(s || '')) return -1;
	const n = Number(s);
	return n <= max ? n : -1;
}

function route(req, res, url, body) {
	const parts = url.pathname.split('/').filter(Boolean);
	const head = parts[0] || '';

	if (url.pathname === '/hello') return send(res, 200, 'hello', {'Content-Type': 'text/plain'});

	if (url.pathname === '/echo') {
		const reply = () => send(res, 200, JSON.stringify({
			method: req.method,
			headers: req.headers,
			body: body.toString('utf8'),
		}), {'Content-Type': 'application/json'});
		const delay = intArg(url.searchParams.get('delay') || '0', MAX_SLOW);
		return delay > 0 ? setTimeout(reply, delay) : reply();
	}

	if (head === 'status' && parts.length === 2) {
		const n = intArg(parts[1], 599);
		if (n < 200) return send(res, 400, 'bad status');
		if (n === 204 || n === 304) {
			res.writeHead(n);
			return res.end();
		}
		return send(res, n, `status ${n}`);
	}

	if (head === 'slow' && parts.length === 2) {
		const ms = intArg(parts[1], MAX_SLOW);
		if (ms < 0) return send(res, 400, 'bad delay');
		const t = setTimeout(() => send(res, 200, `slept ${ms}`), ms);
		res.on('close', () => clearTimeout(t));
		return;
	}

	if (head === 'big' && parts.length === 2) {
		const n = intArg(parts[1], MAX_BIG);
		if (n < 0) return send(res, 400, 'bad size');
		return send(res, 200, Buffer.alloc(n, 'x'));
	}

	if (head === 'retry-after' && parts.length === 2) {
		return send(res, 429, 'slow down', {'Retry-After': parts[1]});
	}

	if (url.pathname === '/stream') {
		// No Content-Length: Node uses chunked transfer encoding.
		res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache'});
		const events = ['data: 1\n\n', 'data: 2\n\n', 'data: 3\n\n', 'data: 4\n\n', 'data: 5\n\n',
			'data: [DONE]\n\n'];
		let i = 0;
		const next = () => {
			if (res.destroyed) return;
			if (i === events.length) return res.end();
			res.write(events[i++]);
			setTimeout(next, 30);
		};
		return next();
	}

	if (url.pathname === '/reset') {
		res.writeHead(200, {'Content-Length': '1000', 'Content-Type': 'text/plain'});
		res.write('partial body');
		setTimeout(() => req.socket.destroy(), 50);
		return;
	}

	if (url.pathname === '/early-hints') {
		// A 103 with its own header first; clients keep only the 200's.
		res.writeEarlyHints({link: '</style.css>; rel=preload; as=style'});
		return setTimeout(() => send(res, 200, 'final', {'X-Final': 'yes'}), 20);
	}

	if (url.pathname === '/stats') {
		// This request counts itself; report the others.
		return send(res, 200, JSON.stringify({inflight: inflight - 1, peak}),
			{'Content-Type': 'application/json'});
	}
	if (url.pathname === '/stats/reset') {
		peak = inflight - 1;
		return send(res, 200, JSON.stringify({inflight: inflight - 1}),
			{'Content-Type': 'application/json'});
	}

	return send(res, 404, 'not found');
}

const server = http.createServer((req, res) => {
	inflight++;
	if (inflight > peak) peak = inflight;
	let counted = true;
	const finished = () => {
		if (counted) {
			counted = false;
			inflight--;
		}
	};
	res.on('finish', finished);
	res.on('close', finished);

	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		let url;
		try {
			url = new URL(req.url, 'http://127.0.0.1');
		} catch (e) {
			return send(res, 400, 'bad url');
		}
		route(req, res, url, Buffer.concat(chunks));
	});
});

server.on('clientError', (err, socket) => socket.destroy());

const port = Number(process.argv[2] || 0);
server.listen(port, '127.0.0.1', () => {
	process.stdout.write(`PORT ${server.address().port}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
