#!/usr/bin/env node
// slack_official_clients.js - proves fake_slack.js faithful to Slack by driving
// it with Slack's own clients: @slack/web-api (auth.test, chat.postMessage,
// 429 + Retry-After, ok:false errors) and @slack/socket-mode (connections.open
// with the app token, hello, envelope + ack, refresh_requested reconnect, an
// unacked envelope redelivered after a dropped socket). It also checks the
// request signer the gateway tests use against Slack's published vector and
// @slack/bolt's verifier.
//
// Usage: node slack_official_clients.js <ignored>
// Prints "PORT 0" (for the test harness), then one "ok <check>" line per check,
// then "ALL OK"; any failure prints "FAIL <why>" and exits 1.
'use strict';

const crypto = require('crypto');
const {WebClient, LogLevel} = require('@slack/web-api');
const {SocketModeClient} = require('@slack/socket-mode');
const {isValidSlackRequest} = require('@slack/bolt');
const fake = require('./fake_slack');

const quiet = {debug() {}, info() {}, warn() {}, error() {}, setLevel() {}, getLevel() { return LogLevel.ERROR; }, setName() {}};

function check(cond, what) {
	if (!cond) throw new Error(what);
	process.stdout.write(`ok ${what}\n`);
}

function sign(secret, ts, body) {
	return 'v0=' + crypto.createHmac('sha256', secret).update(`v0:${ts}:${body}`).digest('hex');
}

async function ctl(port, path, body) {
	const r = await fetch(`http://127.0.0.1:${port}${path}`, {method: body ? 'POST' : 'GET',
		headers: {'Content-Type': 'application/json'}, body: body ? JSON.stringify(body) : undefined});
	return r.json();
}

function waitFor(pred, ms, what) {
	const t0 = Date.now();
	return new Promise((resolve, reject) => {
		const tick = async () => {
			try {
				if (await pred()) return resolve();
			} catch (e) { return reject(e); }
			if (Date.now() - t0 > ms) return reject(new Error(`timed out: ${what}`));
			setTimeout(tick, 50);
		};
		tick();
	});
}

async function signer() {
	// Slack's published example (api.slack.com, verifying requests).
	const body = 'token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c';
	const secret = '8f742231b10e8888abcd99yyyzzz85a5';
	const sig = sign(secret, '1531420618', body);
	check(sig === 'v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503',
		'the signer reproduces Slack\'s published vector');
	const ts = Math.floor(Date.now() / 1000);
	const ev = JSON.stringify({type: 'event_callback', event: {type: 'message', text: 'hi'}});
	check(isValidSlackRequest({signingSecret: 'abcdefgh12345678', body: ev,
		headers: {'x-slack-signature': sign('abcdefgh12345678', ts, ev), 'x-slack-request-timestamp': ts}}),
		'@slack/bolt accepts a signature made by the signer');
	check(!isValidSlackRequest({signingSecret: 'abcdefgh12345678', body: ev,
		headers: {'x-slack-signature': sign('wrong-secret', ts, ev), 'x-slack-request-timestamp': ts}}),
		'@slack/bolt refuses a signature made with another secret');
}

async function webApi(f) {
	const base = `http://127.0.0.1:${f.port}/api/`;
	const web = new WebClient('xoxb-test-token', {slackApiUrl: base, logger: quiet,
		retryConfig: {retries: 2, factor: 1, minTimeout: 10, maxTimeout: 50}});
	const who = await web.auth.test();
	check(who.ok && who.user_id === 'UBOT' && who.bot_id === 'BBOT' && who.team_id === 'T0TEST',
		'auth.test answers the bot identity');
	const r = await web.chat.postMessage({channel: 'C1', text: 'hello', thread_ts: '1700000000.000100'});
	const st = await ctl(f.port, '/_test/state');
	const p = st.posts[st.posts.length - 1];
	check(r.ok && r.ts && r.channel === 'C1' && r.message.bot_id === 'BBOT',
		'chat.postMessage answers ok, channel, ts and message');
	check(p.text === 'hello' && p.thread_ts === '1700000000.000100' && p.ts === r.ts &&
		p.content_type.startsWith('application/x-www-form-urlencoded'),
		'the fake recorded the official client\'s form post with thread_ts');

	await ctl(f.port, '/_test/script', {method: 'chat.postMessage', responses: [{status: 429, retry_after: 1}]});
	let limited = 0;
	web.on('rate_limited', () => limited++);
	const t0 = Date.now();
	const r2 = await web.chat.postMessage({channel: 'C1', text: 'after a limit'});
	check(r2.ok && limited === 1 && Date.now() - t0 >= 900,
		'a 429 with Retry-After: 1 makes the official client wait and retry');

	await ctl(f.port, '/_test/script', {method: 'chat.postMessage', responses: [{error: 'is_archived'}]});
	let err = null;
	try { await web.chat.postMessage({channel: 'C1', text: 'x'}); } catch (e) { err = e; }
	check(err && err.data && err.data.error === 'is_archived', 'a scripted ok:false error reaches the client');
	err = null;
	try { await web.chat.postMessage({channel: 'CNOTFOUND', text: 'x'}); } catch (e) { err = e; }
	check(err && err.data && err.data.error === 'channel_not_found', 'channel_not_found is an API error');
	err = null;
	try { await new WebClient('xapp-1-nope', {slackApiUrl: base, logger: quiet}).auth.test(); } catch (e) { err = e; }
	check(err && err.data && err.data.error === 'invalid_auth', 'an app token cannot call bot methods');
}

async function socketMode(f) {
	const before = (await ctl(f.port, '/_test/state')).opens;
	const client = new SocketModeClient({appToken: 'xapp-1-A0TEST-1-secret', logger: quiet,
		clientOptions: {slackApiUrl: `http://127.0.0.1:${f.port}/api/`}, clientPingTimeout: 5000});
	const seen = [];
	let ackNext = true;
	client.on('message', async ({event, ack, envelope_id, retry_num}) => {
		seen.push({text: event.text, envelope_id, retry_num});
		if (ackNext) await ack();
	});
	let connected = 0;
	client.on('connected', () => connected++);
	await client.start();
	await waitFor(() => connected >= 1, 5000, 'hello');
	let st = await ctl(f.port, '/_test/state');
	check(st.opens === before + 1 && st.live === 1, 'the client opened one socket with apps.connections.open');

	const payload = (text) => ({type: 'event_callback', team_id: 'T0TEST', event_id: `Ev${text}`,
		event: {type: 'message', channel: 'D1', channel_type: 'im', user: 'U1', text, ts: '1.1'}});
	const e1 = await ctl(f.port, '/_test/envelope', {payload: payload('one')});
	await waitFor(async () => (await ctl(f.port, '/_test/state')).acks.includes(e1.envelope_id), 5000, 'ack');
	check(seen[0].text === 'one', 'an events_api envelope reaches the client and is acked by envelope_id');

	await ctl(f.port, '/_test/disconnect', {reason: 'refresh_requested'});
	await waitFor(async () => (await ctl(f.port, '/_test/state')).opens === before + 2 && connected >= 2,
		15000, 'reconnect');
	check(true, 'refresh_requested makes the client reconnect with a fresh apps.connections.open');

	ackNext = false;
	const e2 = await ctl(f.port, '/_test/envelope', {payload: payload('two')});
	await waitFor(() => seen.some((s) => s.envelope_id === e2.envelope_id), 5000, 'delivery');
	ackNext = true;
	await ctl(f.port, '/_test/drop');
	await waitFor(async () => (await ctl(f.port, '/_test/state')).acks.includes(e2.envelope_id), 20000,
		'redelivery');
	const again = seen.filter((s) => s.envelope_id === e2.envelope_id);
	check(again.length === 2 && again[1].retry_num === 1,
		'an envelope left unacked by a dropped socket comes again with retry_attempt 1');
	st = await ctl(f.port, '/_test/state');
	check(st.peak === 1, 'the official client never held two sockets at once');
	await client.disconnect();
}

(async () => {
	process.stdout.write('PORT 0\n');
	const f = await fake.start(0);
	try {
		await signer();
		await webApi(f);
		await socketMode(f);
		process.stdout.write('ALL OK\n');
		await f.close();
		process.exit(0);
	} catch (e) {
		process.stdout.write(`FAIL ${e && e.stack ? e.stack : e}\n`);
		process.exit(1);
	}
})();
