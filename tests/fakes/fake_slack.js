#!/usr/bin/env node
// fake_slack.js - a loopback test double of Slack's Web API and Socket Mode.
//
// Usage: node fake_slack.js <port|0> [--tls CERT KEY]
// Listens on 127.0.0.1; prints "PORT <n>" first. Exits when stdin closes or on
// SIGTERM. Also usable as a module: require('./fake_slack').start(port, tls) gives
// a promise of {port, server, state, close()}. With --tls (PEM files) the
// Socket Mode URLs are wss:// on a second, TLS listener, as Slack's are.
//
// Web API: POST /api/<method> with "Authorization: Bearer <token>", form or
// JSON body; every answer is HTTP 200 {"ok":...} except scripted 429s.
//   auth.test               xoxb- token -> {ok, user_id: UBOT, bot_id: BBOT, team_id: T0TEST}
//   apps.connections.open   xapp- token -> {ok, url: ws://127.0.0.1:<port>/link/?ticket=<n>}
//   chat.postMessage        xoxb- token, channel + text -> {ok, channel, ts, message};
//                           channel "CNOTFOUND" -> ok:false channel_not_found; no text -> no_text
// Socket Mode: GET /link/?ticket=<n> upgrades to a WebSocket; the fake sends
// "hello", delivers envelopes, and records acks ({"envelope_id"}). An envelope
// that was not acked when its socket closed is delivered again on the next
// socket (retry_attempt + 1), as Slack does.
//
// Test control (JSON):
//   POST /_test/script   {method, responses: [{status, retry_after, error}]}: the next
//                        calls of method get these answers, in order
//   POST /_test/envelope {payload, type?, envelope_id?}: deliver now (or queue until a
//                        socket is open); -> {envelope_id}
//   POST /_test/disconnect {reason}: send a disconnect frame on every socket
//   POST /_test/drop     destroy every socket at once (no close frame)
//   POST /_test/mute     {on: bool}: stop answering pings and sending frames (a dead link)
//   POST /_test/link_host {host}: the host name put in Socket Mode URLs from now on
//                        (default 127.0.0.1; "localhost" makes the client look it up)
//   GET  /_test/state    {posts, acks, calls, opens, live, peak, pending, hellos}
'use strict';

const fs = require('fs');
const http = require('http');
const https = require('https');
const {WebSocketServer} = require('ws');

const BOT = {user_id: 'UBOT', bot_id: 'BBOT', team_id: 'T0TEST', team: 'Test', user: 'switchboard'};

function newState() {
	return {
		posts: [],     // {channel, text, thread_ts, ts, content_type}
		acks: [],      // envelope ids in ack order
		calls: {},     // method -> count
		opens: 0,      // apps.connections.open answered ok
		live: 0,       // open sockets now
		peak: 0,       // most sockets open at once
		hellos: 0,
		pending: [],   // envelopes not yet acked: {envelope_id, type, payload, retry_attempt}
		scripts: {},   // method -> [responses]
		seq: 0,
		muted: false,
		linkHost: '127.0.0.1',
	};
}

function parseBody(req, raw) {
	const ct = (req.headers['content-type'] || '').toLowerCase();
	if (ct.startsWith('application/json')) {
		try { return JSON.parse(raw || '{}'); } catch (e) { return null; }
	}
	const out = {};
	for (const [k, v] of new URLSearchParams(raw)) out[k] = v;
	return out;
}

function bearer(req) {
	const h = req.headers.authorization || '';
	return h.startsWith('Bearer ') ? h.slice(7).trim() : '';
}

function start(port, tls) {
	const st = newState();
	const sockets = new Set();
	let server, tlsServer = null;

	const json = (res, status, obj, headers) => {
		const b = Buffer.from(JSON.stringify(obj));
		res.writeHead(status, Object.assign({'Content-Type': 'application/json; charset=utf-8',
			'Content-Length': b.length}, headers || {}));
		res.end(b);
	};

	const sendEnvelope = (ws, env) => {
		if (ws.readyState === 1 && !st.muted)
			ws.send(JSON.stringify({envelope_id: env.envelope_id, type: env.type,
				accepts_response_payload: false, retry_attempt: env.retry_attempt,
				retry_reason: env.retry_attempt ? 'timeout' : '', payload: env.payload}));
	};
	const liveSocket = () => [...sockets].find((s) => s.readyState === 1 && s.helloed);

	const api = (req, res, method, raw) => {
		st.calls[method] = (st.calls[method] || 0) + 1;
		const tok = bearer(req);
		const body = parseBody(req, raw);
		const script = st.scripts[method];
		if (script && script.length) {
			const r = script.shift();
			if (r.status === 429)
				return json(res, 429, {ok: false, error: 'ratelimited'},
					{'Retry-After': String(r.retry_after || 1)});
			if (r.status && r.status !== 200) return json(res, r.status, {ok: false, error: 'http'});
			if (r.error) return json(res, 200, {ok: false, error: r.error});
		}
		if (body === null) return json(res, 200, {ok: false, error: 'invalid_json'});
		if (method === 'apps.connections.open') {
			if (!tok.startsWith('xapp-')) return json(res, 200, {ok: false, error: 'not_allowed_token_type'});
			st.opens++;
			const link = tlsServer ? `wss://${st.linkHost}:${tlsServer.address().port}`
				: `ws://${st.linkHost}:${server.address().port}`;
			return json(res, 200, {ok: true, url: `${link}/link/?ticket=${st.opens}&app_id=A0TEST`});
		}
		if (!tok.startsWith('xoxb-')) return json(res, 200, {ok: false, error: 'invalid_auth'});
		if (method === 'auth.test')
			return json(res, 200, Object.assign({ok: true, url: 'https://test.slack.com/'}, BOT));
		if (method === 'chat.postMessage') {
			if (!body.channel) return json(res, 200, {ok: false, error: 'channel_not_found'});
			if (body.channel === 'CNOTFOUND') return json(res, 200, {ok: false, error: 'channel_not_found'});
			if (!body.text && !body.blocks) return json(res, 200, {ok: false, error: 'no_text'});
			st.seq++;
			const ts = `${1800000000 + st.seq}.${String(st.seq).padStart(6, '0')}`;
			const post = {channel: body.channel, text: body.text, ts,
				content_type: req.headers['content-type'] || ''};
			if (body.thread_ts) post.thread_ts = body.thread_ts;
			st.posts.push(post);
			return json(res, 200, {ok: true, channel: body.channel, ts,
				message: {type: 'message', text: body.text, user: BOT.user_id, bot_id: BOT.bot_id, ts}});
		}
		return json(res, 200, {ok: false, error: 'unknown_method'});
	};

	const control = (req, res, path, raw) => {
		let b = {};
		try { b = raw ? JSON.parse(raw) : {}; } catch (e) { return json(res, 400, {error: 'json'}); }
		if (path === '/_test/state')
			return json(res, 200, {posts: st.posts, acks: st.acks, calls: st.calls, opens: st.opens,
				live: st.live, peak: st.peak, pending: st.pending.length, hellos: st.hellos,
				tls_errors: st.tls_errors || 0});
		if (path === '/_test/script') {
			st.scripts[b.method] = (st.scripts[b.method] || []).concat(b.responses || []);
			return json(res, 200, {ok: true});
		}
		if (path === '/_test/envelope') {
			const env = {envelope_id: b.envelope_id || `env-${++st.seq}`, type: b.type || 'events_api',
				payload: b.payload, retry_attempt: 0};
			st.pending.push(env);
			const ws = liveSocket();
			if (ws) { ws.sent.add(env.envelope_id); sendEnvelope(ws, env); }
			return json(res, 200, {envelope_id: env.envelope_id, delivered: !!ws});
		}
		if (path === '/_test/disconnect') {
			for (const ws of sockets)
				if (ws.readyState === 1)
					ws.send(JSON.stringify({type: 'disconnect', reason: b.reason || 'refresh_requested',
						debug_info: {host: 'fake'}}));
			return json(res, 200, {ok: true});
		}
		if (path === '/_test/drop') {
			for (const ws of sockets) ws.terminate();
			return json(res, 200, {ok: true});
		}
		if (path === '/_test/mute') {
			st.muted = !!b.on;
			return json(res, 200, {ok: true});
		}
		if (path === '/_test/link_host') {
			st.linkHost = String(b.host || '127.0.0.1');
			return json(res, 200, {ok: true});
		}
		return json(res, 404, {error: 'no such control'});
	};

	server = http.createServer((req, res) => {
		const chunks = [];
		req.on('data', (c) => chunks.push(c));
		req.on('end', () => {
			const raw = Buffer.concat(chunks).toString('utf8');
			const url = new URL(req.url, 'http://x');
			if (url.pathname.startsWith('/_test/')) return control(req, res, url.pathname, raw);
			if (req.method === 'POST' && url.pathname.startsWith('/api/'))
				return api(req, res, url.pathname.slice(5), raw);
			json(res, 404, {ok: false, error: 'unknown_method'});
		});
	});

	const wss = new WebSocketServer({noServer: true, autoPong: false});
	if (tls) {
		tlsServer = https.createServer({cert: fs.readFileSync(tls.cert), key: fs.readFileSync(tls.key)});
		tlsServer.on('tlsClientError', (e) => { st.tls_errors = (st.tls_errors || 0) + 1; });
	}
	const onUpgrade = (req, socket, head) => {
		const url = new URL(req.url, 'http://x');
		if (url.pathname !== '/link/' || !url.searchParams.get('ticket')) {
			socket.destroy();
			return;
		}
		wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws));
	};
	server.on('upgrade', onUpgrade);
	if (tlsServer) tlsServer.on('upgrade', onUpgrade);
	wss.on('connection', (ws) => {
		ws.sent = new Set();
		sockets.add(ws);
		st.live++;
		st.peak = Math.max(st.peak, st.live);
		// Pongs by hand, so that a muted fake looks like a dead link.
		ws.on('ping', (d) => { if (!st.muted) ws.pong(d); });
		ws.on('message', (data) => {
			let m;
			try { m = JSON.parse(data.toString('utf8')); } catch (e) { return; }
			if (m && m.envelope_id) {
				st.acks.push(m.envelope_id);
				st.pending = st.pending.filter((e) => e.envelope_id !== m.envelope_id);
			}
		});
		ws.on('close', () => {
			sockets.delete(ws);
			st.live--;
			for (const e of st.pending) if (ws.sent.has(e.envelope_id)) e.retry_attempt++;
		});
		if (st.muted) return;
		ws.send(JSON.stringify({type: 'hello', num_connections: st.live,
			connection_info: {app_id: 'A0TEST'},
			debug_info: {host: 'fake', build_number: 1, approximate_connection_time: 3600}}));
		ws.helloed = true;
		st.hellos++;
		// What earlier sockets left unacked comes again here.
		for (const e of st.pending) { ws.sent.add(e.envelope_id); sendEnvelope(ws, e); }
	});
	const listenTls = () => new Promise((r) => (tlsServer ? tlsServer.listen(0, '127.0.0.1', r) : r()));
	return listenTls().then(() => new Promise((resolve) => {
		server.listen(port, '127.0.0.1', () => resolve({
			port: server.address().port, server, state: st,
			close: () => new Promise((r) => {
				for (const ws of sockets) ws.terminate();
				wss.close();
				if (tlsServer) tlsServer.close();
				server.close(() => r());
			}),
		}));
	}));
}

module.exports = {start};

if (require.main === module) {
	const i = process.argv.indexOf('--tls');
	const tls = i > 0 ? {cert: process.argv[i + 1], key: process.argv[i + 2]} : null;
	start(Number(process.argv[2] || 0), tls).then((f) => {
		process.stdout.write(`PORT ${f.port}\n`);
		process.stdin.resume();
		process.stdin.on('end', () => process.exit(0));
		process.on('SIGTERM', () => process.exit(0));
	});
}
