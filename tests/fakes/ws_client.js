// ws_client.js - an independent client of Switchboard's WebSocket control
// plane, for tests/integration/test_control.c. It is written against
// docs/protocol.md with the npm `ws` package and Node's own Ed25519, not
// with any of Switchboard's C code.
//
//   node ws_client.js '<options as JSON>'
//
// Options: url, scenario (below), token, scopes (array; omitted = all),
// minProtocol/maxProtocol, sessionKey, message, idempotencyKey, keyfile
// (a PEM private key; created when missing), sigVersion (2 or 3),
// deviceToken, attempts, timeoutMs, answer and scope (approver), origin and
// cookie (sent with the upgrade, as a browser's page would), webKey (the
// 32-byte Ed25519 seed, hex, of a web session's key: the connect carries
// auth.webSignature of "switchboard-web-v1|<nonce>"; webNonce signs that
// nonce instead of the challenge's), clientId and platform (the connect's
// client.id and client.platform).
//
// It prints one JSON line with what happened and exits 0; a client-side
// failure (timeout, unexpected frame) is reported in that line as "fail".
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const WebSocket = require('ws');

const opt = JSON.parse(process.argv[2] || '{}');
const timeoutMs = opt.timeoutMs || 20000;
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

function out(result) {
	process.stdout.write(JSON.stringify(result) + '\n');
	process.exit(0);
}

setTimeout(() => out({ fail: 'timeout' }), timeoutMs).unref();

// The web session's proof: the Ed25519 signature, by the key the page
// registered at sign-in, of "switchboard-web-v1|<the challenge's nonce>".
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
function webSignature(nonce) {
	const key = crypto.createPrivateKey({ key: Buffer.concat([PKCS8_ED25519,
		Buffer.from(opt.webKey, 'hex')]), format: 'der', type: 'pkcs8' });
	return b64url(crypto.sign(null, Buffer.from('switchboard-web-v1|' + (opt.webNonce || nonce)),
		key));
}

function b64url(buf) {
	return buf.toString('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// The device identity: an Ed25519 key kept in opt.keyfile.
function loadDevice() {
	let key;
	if (opt.keyfile && fs.existsSync(opt.keyfile)) {
		key = crypto.createPrivateKey(fs.readFileSync(opt.keyfile));
	} else {
		key = crypto.generateKeyPairSync('ed25519').privateKey;
		if (opt.keyfile)
			fs.writeFileSync(opt.keyfile, key.export({ type: 'pkcs8', format: 'pem' }),
			                 { mode: 0o600 });
	}
	const spki = crypto.createPublicKey(key).export({ type: 'spki', format: 'der' });
	const raw = spki.subarray(SPKI_PREFIX.length);
	return {
		key,
		raw,
		id: crypto.createHash('sha256').update(raw).digest('hex'),
	};
}

// A connection: frames in order, requests by id, events by name.
function open(url) {
	// A browser's upgrade carries its page's Origin and the session cookie.
	const headers = {};
	if (opt.origin)
		headers.Origin = opt.origin;
	if (opt.cookie)
		headers.Cookie = opt.cookie;
	const ws = new WebSocket(url || opt.url, { headers });
	const c = { ws, frames: [], events: [], waiters: [], closed: null, nextId: 1 };
	ws.on('message', (data, isBinary) => {
		const f = JSON.parse(data.toString());
		c.frames.push(f);
		if (f.type === 'event')
			c.events.push(f);
		c.waiters = c.waiters.filter((w) => !w(f));
	});
	ws.on('close', (code, reason) => {
		c.closed = { code, reason: reason.toString() };
		c.waiters = c.waiters.filter((w) => !w(null));
	});
	ws.on('error', (e) => {
		c.error = e.message;
	});
	return c;
}

// Resolves with the first frame (or close, as null) for which pred is true.
function next(c, pred) {
	return new Promise((resolve) => {
		for (const f of c.frames.slice(c.seen || 0))
			if (pred(f)) {
				resolve(f);
				return;
			}
		if (c.closed) {
			resolve(null);
			return;
		}
		c.waiters.push((f) => {
			if (f === null || pred(f)) {
				resolve(f);
				return true;
			}
			return false;
		});
	});
}

function closed(c) {
	return new Promise((resolve) => {
		if (c.closed)
			return resolve(c.closed);
		c.ws.on('close', () => resolve(c.closed));
	});
}

function send(c, method, params, id) {
	const rid = id || 'r' + c.nextId++;
	c.ws.send(JSON.stringify({ type: 'req', id: rid, method, params }));
	return rid;
}

function res(c, id) {
	return next(c, (f) => f.type === 'res' && f.id === id);
}

async function challenge(c) {
	const f = await next(c, (f) => f.type === 'event' && f.event === 'connect.challenge');
	if (!f)
		out({ fail: 'no challenge', closed: c.closed, error: c.error });
	return f;
}

let lastConnect = null; // the params of the last connect() sent

// connect with the options' token/scopes (override with extra).
async function connect(c, extra) {
	const ch = await challenge(c);
	const o = Object.assign({}, opt, extra || {});
	const params = {
		minProtocol: o.minProtocol || 3,
		maxProtocol: o.maxProtocol || 4,
		client: { id: o.clientId || 'ws-client', version: '1.0.0', platform: o.platform || 'linux',
			mode: 'test' },
		role: 'operator',
		caps: [],
		auth: {},
		device: o.tolerateDevice ? { id: 'x', extra: true } : undefined,
	};
	if (o.scopes)
		params.scopes = o.scopes;
	if (o.token)
		params.auth.token = o.token;
	if (o.deviceToken)
		params.auth.deviceToken = o.deviceToken;
	if (o.webKey)
		params.auth.webSignature = webSignature(ch.payload.nonce);
	if (o.withDevice) {
		const dev = loadDevice();
		const signedAt = ch.payload.ts;
		const scopes = (params.scopes || []).join(',');
		const token = params.auth.token || params.auth.deviceToken || '';
		let payload = ['v2', dev.id, params.client.id, params.client.mode, params.role, scopes,
			String(signedAt), token, ch.payload.nonce];
		if (o.sigVersion === 3) {
			payload[0] = 'v3';
			payload = payload.concat([params.client.platform, '']);
		}
		if (o.badSignature)
			payload[8] = 'not-the-nonce';
		params.device = {
			id: dev.id,
			publicKey: b64url(dev.raw),
			signature: b64url(crypto.sign(null, Buffer.from(payload.join('|')), dev.key)),
			signedAt,
			nonce: ch.payload.nonce,
		};
	}
	lastConnect = params;
	const id = send(c, 'connect', params, 'connect-1');
	return { challenge: ch, res: await res(c, id) };
}

async function scenario() {
	const c = open();
	switch (opt.scenario) {
	case 'status': {
		// connect with whatever the options carry (a cookie, an origin);
		// what came back, or how the connection closed
		const f = await next(c, (f) => f.type === 'event' && f.event === 'connect.challenge');
		if (!f) {
			const cl = await closed(c);
			return { closeCode: cl.code, closeReason: cl.reason };
		}
		const auth = opt.token ? { token: opt.token } : {};
		if (opt.webKey)
			auth.webSignature = webSignature(f.payload.nonce);
		const id = send(c, 'connect', { minProtocol: 3, maxProtocol: 4, role: 'operator',
			client: { id: 'ws-client', version: '1.0.0', platform: 'linux', mode: 'test' },
			auth }, 'connect-1');
		const hello = await res(c, id);
		if (!hello || !hello.ok) {
			const cl = await closed(c);
			return { hello, closeCode: cl.code, closeReason: cl.reason };
		}
		const status = await res(c, send(c, 'status', {}));
		c.ws.close(1000);
		return { hello, status };
	}
	case 'handshake': {
		const r = await connect(c);
		if (!r.res || !r.res.ok)
			return { hello: r.res, closed: await closed(c) };
		const health = await res(c, send(c, 'health', {}));
		const status = await res(c, send(c, 'status', {}));
		const tick = opt.waitTick ? await next(c, (f) => f.type === 'event' &&
			f.event === 'tick') : null;
		c.ws.close(1000);
		return { challenge: r.challenge, hello: r.res, health, status, tick };
	}
	case 'chat': {
		const r = await connect(c);
		const id = send(c, 'chat.send', {
			sessionKey: opt.sessionKey || 'main',
			message: opt.message,
			idempotencyKey: opt.idempotencyKey,
		});
		const sent = await res(c, id);
		if (!sent || !sent.ok)
			return { hello: r.res, sent };
		const fin = await next(c, (f) => f.type === 'event' && f.event === 'chat' &&
			f.payload.runId === opt.idempotencyKey && f.payload.state !== 'delta');
		const chats = c.events.filter((f) => f.event === 'chat');
		const agents = c.events.filter((f) => f.event === 'agent');
		const seqs = c.events.map((f) => f.seq);
		const again = await res(c, send(c, 'chat.send', {
			sessionKey: opt.sessionKey || 'main',
			message: opt.message,
			idempotencyKey: opt.idempotencyKey,
		}));
		c.ws.close(1000);
		return {
			hello: r.res,
			sent,
			deltas: chats.filter((f) => f.payload.state === 'delta').map((f) => f.payload),
			final: fin && fin.payload,
			assistantDeltas: agents.filter((f) => f.payload.stream === 'assistant')
				.map((f) => f.payload.data.delta),
			seqs,
			seqsIncreasing: seqs.every((s, i) => s === i + 1),
			again,
		};
	}
	case 'agent': {
		await connect(c);
		const id = send(c, 'agent', {
			message: opt.message,
			sessionKey: opt.sessionKey,
			idempotencyKey: opt.idempotencyKey,
			deliver: false,
		});
		const first = await res(c, id);
		const second = await next(c, (f) => f.type === 'res' && f.id === id && f !== first);
		const agents = c.events.filter((f) => f.event === 'agent' &&
			f.payload.runId === opt.idempotencyKey);
		c.ws.close(1000);
		return {
			first,
			second,
			streams: agents.map((f) => f.payload.stream + ':' +
				(f.payload.data.phase || '')),
			text: agents.filter((f) => f.payload.stream === 'assistant')
				.map((f) => f.payload.data.delta).join(''),
		};
	}
	case 'history': {
		await connect(c);
		const h = await res(c, send(c, 'chat.history',
			{ sessionKey: opt.sessionKey || 'main', limit: opt.limit || 50 }));
		c.ws.close(1000);
		return { history: h };
	}
	case 'call': {
		// connect, then one method call with opt.params; the close that
		// may follow is reported too.
		const r = await connect(c);
		if (!r.res || !r.res.ok)
			return { hello: r.res, closed: await closed(c) };
		const reply = await res(c, send(c, opt.method, opt.params || {}));
		c.ws.close(1000);
		return { hello: r.res, reply, closed: await closed(c) };
	}
	case 'connect': {
		// connect only; reports the answer and, when refused, the close.
		const r = await connect(c, { withDevice: opt.withDevice });
		if (r.res && r.res.ok) {
			c.ws.close(1000);
			return { hello: r.res };
		}
		return { hello: r.res, closed: await closed(c) };
	}
	case 'hold': {
		// connect like 'status', then stay until the gateway closes the
		// connection (or timeoutMs): how and after how long
		const f = await next(c, (f) => f.type === 'event' && f.event === 'connect.challenge');
		if (!f)
			return { closed: await closed(c) };
		const auth = opt.webKey ? { webSignature: webSignature(f.payload.nonce) } : {};
		const hello = await res(c, send(c, 'connect', { minProtocol: 3, maxProtocol: 4,
			client: { id: 'ws-client', version: '1.0.0', platform: 'linux', mode: 'test' },
			auth }, 'connect-1'));
		const t0 = Date.now();
		const cl = await closed(c);
		return { hello, closeCode: cl.code, closeReason: cl.reason, heldMs: Date.now() - t0 };
	}
	case 'device-replay': {
		// a signed device connect captured on one connection and sent again
		// on another (as is, and without its nonce field): both refused
		const first = await connect(c, { withDevice: true });
		c.ws.close(1000);
		const captured = lastConnect;
		const out = { first: first.res, replays: [] };
		for (const strip of [false, true]) {
			const c2 = open();
			await challenge(c2);
			const params = JSON.parse(JSON.stringify(captured));
			if (strip)
				delete params.device.nonce;
			const r = await res(c2, send(c2, 'connect', params, 'connect-1'));
			out.replays.push({ hello: r, closed: await closed(c2) });
		}
		return out;
	}
	case 'before-connect': {
		await challenge(c);
		const reply = await res(c, send(c, 'health', {}));
		return { reply, closed: await closed(c) };
	}
	case 'oversize': {
		await challenge(c);
		c.ws.send(JSON.stringify({ type: 'req', id: 'big', method: 'connect',
			params: { pad: 'x'.repeat(opt.bytes || 70 * 1024) } }));
		return { closed: await closed(c) };
	}
	case 'garbage': {
		await challenge(c);
		c.ws.send('this is not json');
		return { closed: await closed(c) };
	}
	case 'lockout': {
		// attempts with a bad token, then one with the good one.
		c.ws.close();
		const results = [];
		for (let i = 0; i < opt.attempts; i++) {
			const k = open();
			const r = await connect(k, { token: 'wrong-token-' + i });
			results.push(r.res && r.res.error && r.res.error.code);
			await closed(k);
		}
		const k = open();
		const last = await connect(k, { token: opt.token });
		if (last.res && last.res.ok)
			k.ws.close(1000);
		await closed(k);
		return { results, last: last.res, closed: k.closed };
	}
	case 'idle': {
		// says nothing after the challenge: the gateway gives up.
		await challenge(c);
		return { closed: await closed(c) };
	}
	case 'slow': {
		// stops reading, then asks for far more than the gateway may queue
		// for it: it is dropped.
		await connect(c);
		c.ws._socket.pause();
		const req = JSON.stringify({ type: 'req', id: 'x', method: 'config.get', params: {} });
		for (let i = 0; i < (opt.requests || 20000); i++)
			c.ws.send(req);
		await new Promise((r) => setTimeout(r, opt.pauseMs || 3000));
		c.ws._socket.resume();
		return { closed: await closed(c), frames: c.frames.length };
	}
	case 'await-shutdown': {
		// follows a session until the gateway goes away.
		await connect(c);
		await res(c, send(c, 'sessions.subscribe', { sessionKey: '*' }));
		process.stderr.write('READY\n');
		const ev = await next(c, (f) => f.type === 'event' && f.event === 'shutdown');
		return { shutdown: ev, closed: await closed(c) };
	}
	case 'approver': {
		// an operator client: answers the first pending tool approval
		// (from approvals.list, or the approval.requested event) with
		// opt.answer ('approve' or 'deny') and opt.scope, then waits for
		// its approval.resolved event.
		const r = await connect(c);
		if (!r.res || !r.res.ok)
			return { hello: r.res };
		process.stderr.write('READY\n');
		let requested = null;
		const ev = next(c, (f) => f.type === 'event' && f.event === 'approval.requested');
		for (;;) {
			const l = await res(c, send(c, 'approvals.list', {}));
			if (l && l.ok && l.payload.approvals.length) {
				requested = { payload: l.payload.approvals[0], fromList: true };
				break;
			}
			const got = await Promise.race([ev, new Promise((ok) => setTimeout(ok, 200))]);
			if (got) {
				requested = got;
				break;
			}
		}
		const id = requested.payload.id;
		const answer = await res(c, send(c, 'approvals.' + (opt.answer || 'approve'),
			{ id, scope: opt.scope }));
		const resolved = await next(c, (f) => f.type === 'event' &&
			f.event === 'approval.resolved' && f.payload.id === id);
		const after = await res(c, send(c, 'approvals.list', {}));
		c.ws.close(1000);
		return { requested: requested.payload, answer, resolved: resolved.payload,
			after: after.payload };
	}
	default:
		return { fail: 'unknown scenario ' + opt.scenario };
	}
}

scenario().then(out, (e) => out({ fail: String(e && e.stack || e) }));
