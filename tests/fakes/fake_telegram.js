#!/usr/bin/env node
// fake_telegram.js - a small Bot API server for what telegram-test-api does not
// do: long polls that block and confirm by offset, 409 conflicts, 429 with
// parameters.retry_after, sendChatAction, message length and HTML entity
// validation ("can't parse entities"), and stalled polls. Node built-ins only.
//
// Usage: node fake_telegram.js <port|0> <token>[,<token>...]
// Prints "PORT <n>" first; exits when stdin closes or on SIGTERM.
//
// Bot API (POST JSON or GET query), at /bot<token>/<method>:
//   getMe, getUpdates, sendMessage, sendChatAction, setWebhook, deleteWebhook.
//   A wrong token gets 401 as Telegram answers it.
// Control API, for the test:
//   POST /_ctl/update   an Update without update_id (or with one); queued, id returned
//   POST /_ctl/set      {conflict, fail429, retryAfter, parseErrors, stall, failSend5xx}
//   GET  /_ctl/state    {confirmed, pending, nextUpdateId, sent, actions, polls, webhook}
'use strict';

const http = require('http');

const port = Number(process.argv[2] || 0);
// One or more bot tokens, comma-separated; the first bot is @sb_test_bot.
const tokens = (process.argv[3] || '123456:TEST-token').split(',');
const botOf = (tok) => ({id: Number(tok.split(':')[0]), username: tok === tokens[0] ? 'sb_test_bot' : `sb_bot_${tokens.indexOf(tok)}`});

const st = {
	updates: [],
	nextUpdateId: 1000,
	nextMessageId: 500,
	confirmed: 0,
	sent: [],
	actions: [],
	polls: [],
	webhook: null,
	conflict: false,
	fail429: 0,
	retryAfter: 1,
	parseErrors: 0,
	stall: 0,
	failSend5xx: 0,
};
let waiting = null; // the poll being held: {res, timer}

function json(res, status, obj) {
	const buf = Buffer.from(JSON.stringify(obj));
	res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': buf.length});
	res.end(buf);
}

function fail(res, code, description, parameters) {
	const o = {ok: false, error_code: code, description};
	if (parameters) o.parameters = parameters;
	json(res, code, o);
}

function utf16Len(s) {
	return s.length; // JS strings are UTF-16
}

// Telegram's HTML: known tags, entities limited to the named four and numeric.
function htmlError(text) {
	const tags = ['b', 'strong', 'i', 'em', 'u', 'ins', 's', 'strike', 'del', 'span', 'tg-spoiler',
		'a', 'code', 'pre', 'blockquote', 'tg-emoji'];
	const stack = [];
	for (let i = 0; i < text.length; i++) {
		const c = text[i];
		if (c === '&') {
			const m = /^&(lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);/.exec(text.slice(i));
			if (!m) return `can't parse entities: unsupported entity at byte offset ${i}`;
			i += m[0].length - 1;
		} else if (c === '<') {
			const m = /^<(\/?)([a-z-]+)((?:\s+[a-z-]+="[^"<>]*")*)\s*>/.exec(text.slice(i));
			if (!m || !tags.includes(m[2]))
				return `can't parse entities: unsupported start tag at byte offset ${i}`;
			if (m[1]) {
				if (stack.pop() !== m[2])
					return `can't parse entities: unmatched end tag at byte offset ${i}`;
			} else {
				stack.push(m[2]);
			}
			i += m[0].length - 1;
		} else if (c === '>') {
			return `can't parse entities: character '>' is reserved at byte offset ${i}`;
		}
	}
	if (stack.length) return `can't parse entities: can't find end tag corresponding to start tag "${stack.pop()}"`;
	return null;
}

function visibleText(text, mode) {
	if (mode !== 'HTML') return text;
	return text.replace(/<[^>]*>/g, '').replace(/&lt;/g, '<').replace(/&gt;/g, '>')
		.replace(/&quot;/g, '"').replace(/&#([0-9]+);/g, (_, n) => String.fromCodePoint(Number(n)))
		.replace(/&amp;/g, '&');
}

function pending() {
	return st.updates.filter((u) => u.update_id >= st.confirmed);
}

function answerPoll() {
	if (!waiting) return;
	const w = waiting;
	waiting = null;
	clearTimeout(w.timer);
	json(w.res, 200, {ok: true, result: pending().slice(0, w.limit)});
}

function getUpdates(res, p) {
	const offset = Number(p.offset || 0);
	const timeout = Number(p.timeout || 0);
	st.polls.push({offset, timeout, at: Date.now(), allowed_updates: p.allowed_updates || null});
	if (st.webhook)
		return fail(res, 409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first");
	if (st.conflict)
		return fail(res, 409, 'Conflict: terminated by other getUpdates request; make sure that only one bot instance is running');
	if (waiting) {
		// A newer poll ends the older one, as Telegram does.
		const w = waiting;
		waiting = null;
		clearTimeout(w.timer);
		fail(w.res, 409, 'Conflict: terminated by other getUpdates request; make sure that only one bot instance is running');
	}
	if (offset > st.confirmed) {
		st.confirmed = offset;
		st.updates = st.updates.filter((u) => u.update_id >= st.confirmed);
	}
	if (st.stall > 0) {
		st.stall--;
		return; // never answered; the client's watchdog has to give up
	}
	const limit = Math.min(Math.max(Number(p.limit || 100), 1), 100);
	if (pending().length || timeout <= 0)
		return json(res, 200, {ok: true, result: pending().slice(0, limit)});
	waiting = {res, limit, timer: setTimeout(() => answerPoll(), timeout * 1000)};
	res.on('close', () => {
		if (waiting && waiting.res === res) {
			clearTimeout(waiting.timer);
			waiting = null;
		}
	});
}

function sendMessage(res, p, bot) {
	const rec = {bot: bot.id, at: Date.now(), chat_id: p.chat_id, text: p.text, parse_mode: p.parse_mode || null,
		message_thread_id: p.message_thread_id || null, reply_parameters: p.reply_parameters || null};
	if (st.failSend5xx > 0) {
		st.failSend5xx--;
		rec.outcome = 502;
		st.sent.push(rec);
		return fail(res, 502, 'Bad Gateway');
	}
	if (st.fail429 > 0) {
		st.fail429--;
		rec.outcome = 429;
		st.sent.push(rec);
		return fail(res, 429, `Too Many Requests: retry after ${st.retryAfter}`, {retry_after: st.retryAfter});
	}
	if (p.chat_id === undefined || p.chat_id === null) {
		rec.outcome = 400;
		st.sent.push(rec);
		return fail(res, 400, 'Bad Request: chat_id is empty');
	}
	if (typeof p.text !== 'string' || !p.text.length) {
		rec.outcome = 400;
		st.sent.push(rec);
		return fail(res, 400, 'Bad Request: message text is empty');
	}
	if (p.parse_mode === 'HTML') {
		let err = htmlError(p.text);
		if (!err && st.parseErrors > 0) {
			st.parseErrors--;
			err = "can't parse entities: forced by the test";
		}
		if (err) {
			rec.outcome = 400;
			rec.error = err;
			st.sent.push(rec);
			return fail(res, 400, `Bad Request: ${err}`);
		}
	}
	const visible = visibleText(p.text, p.parse_mode);
	if (utf16Len(visible) > 4096) {
		rec.outcome = 400;
		st.sent.push(rec);
		return fail(res, 400, 'Bad Request: message is too long');
	}
	const id = st.nextMessageId++;
	rec.outcome = 200;
	rec.message_id = id;
	rec.visible = visible;
	st.sent.push(rec);
	const chatId = Number(p.chat_id);
	json(res, 200, {ok: true, result: {message_id: id, date: Math.floor(Date.now() / 1000),
		chat: {id: chatId, type: chatId < 0 ? 'supergroup' : 'private'},
		from: {id: bot.id, is_bot: true, first_name: 'SB', username: bot.username}, text: visible}});
}

function api(res, method, p, bot) {
	switch (method.toLowerCase()) {
	case 'getme':
		return json(res, 200, {ok: true, result: {id: bot.id, is_bot: true, first_name: 'SB', username: bot.username}});
	case 'getupdates':
		return getUpdates(res, p);
	case 'sendmessage':
		return sendMessage(res, p, bot);
	case 'sendchataction':
		st.actions.push({bot: bot.id, at: Date.now(), chat_id: p.chat_id, action: p.action, message_thread_id: p.message_thread_id || null});
		return json(res, 200, {ok: true, result: true});
	case 'setwebhook':
		st.webhook = p.url ? {url: p.url, secret_token: p.secret_token || null, allowed_updates: p.allowed_updates || null} : null;
		return json(res, 200, {ok: true, result: true, description: 'Webhook was set'});
	case 'deletewebhook':
		st.webhook = null;
		return json(res, 200, {ok: true, result: true, description: 'Webhook was deleted'});
	default:
		return fail(res, 404, 'Not Found: method not found');
	}
}

function control(req, res, path, p) {
	if (path === '/_ctl/update') {
		const u = Object.assign({}, p);
		if (typeof u.update_id !== 'number') u.update_id = st.nextUpdateId++;
		else st.nextUpdateId = Math.max(st.nextUpdateId, u.update_id + 1);
		if (u.message && typeof u.message.message_id !== 'number') u.message.message_id = st.nextMessageId++;
		st.updates.push(u);
		setImmediate(answerPoll);
		return json(res, 200, {ok: true, update_id: u.update_id});
	}
	if (path === '/_ctl/set') {
		for (const k of ['conflict', 'fail429', 'retryAfter', 'parseErrors', 'stall', 'failSend5xx'])
			if (k in p) st[k] = p[k];
		if (p.deleteWebhook) st.webhook = null;
		return json(res, 200, {ok: true});
	}
	if (path === '/_ctl/state')
		return json(res, 200, {confirmed: st.confirmed, pending: pending().length, nextUpdateId: st.nextUpdateId,
			sent: st.sent, actions: st.actions, polls: st.polls, webhook: st.webhook, waiting: !!waiting});
	return json(res, 404, {error: 'no such control route'});
}

const server = http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		const url = new URL(req.url, 'http://127.0.0.1');
		let p = Object.fromEntries(url.searchParams);
		const raw = Buffer.concat(chunks).toString('utf8');
		if (raw.length) {
			try {
				p = Object.assign(p, JSON.parse(raw));
			} catch (e) {
				return fail(res, 400, 'Bad Request: invalid JSON');
			}
		}
		if (url.pathname.startsWith('/_ctl/')) return control(req, res, url.pathname, p);
		const m = /^\/bot([^/]+)\/([A-Za-z]+)$/.exec(url.pathname);
		if (!m) return fail(res, 404, 'Not Found');
		if (!tokens.includes(m[1])) return fail(res, 401, 'Unauthorized');
		return api(res, m[2], p, botOf(m[1]));
	});
});

server.listen(port, '127.0.0.1', () => {
	process.stdout.write(`PORT ${server.address().port}\n`);
});
const stop = () => {
	server.close();
	process.exit(0);
};
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
process.on('SIGTERM', stop);
