#!/usr/bin/env node
// ws_swarm.js - many WebSocket control-plane clients at once, for the load
// test (tests/integration/test_load.c) and the benchmark. Written against
// docs/protocol.md with the npm `ws` package (from tests/fakes).
//
//   node ws_swarm.js 0 '<options as JSON>'
// Options: url, token, clients (default 1000), batch (connections opened at
// a time, default 100), timeoutMs (default 60000).
// Prints "PORT n" (its status page; the harness's peer protocol), then opens every client:
// challenge -> connect with the token -> hello-ok -> one `health` request,
// and keeps them all open. Prints one JSON line {clients, hello, health,
// failures, first_failure}. On a line "close" on stdin it closes them all,
// waits for every close and prints {closed}. Exits when stdin ends.
'use strict';

const http = require('http');
const path = require('path');
const readline = require('readline');
const WebSocket = require(path.join(__dirname, '../fakes/node_modules/ws'));

const opt = JSON.parse(process.argv[3] || process.argv[2] || '{}');
const n = opt.clients || 1000;
const batch = opt.batch || 100;
const timeoutMs = opt.timeoutMs || 60000;
const socks = [];
let hello = 0;
let health = 0;
let failures = 0;
let firstFailure = null;

// The harness's peer protocol wants "PORT n" first: a status page.
const status = http.createServer((req, res) => {
	res.writeHead(200, {'Content-Type': 'application/json'});
	res.end(JSON.stringify({clients: n, hello, health, failures}));
});
status.listen(0, '127.0.0.1', () => process.stdout.write(`PORT ${status.address().port}\n`));

function client(i) {
	return new Promise((resolve) => {
		const ws = new WebSocket(opt.url, {perMessageDeflate: false});
		let done = false;
		const finish = (what) => {
			if (done)
				return;
			done = true;
			if (what !== 'ok') {
				failures++;
				if (!firstFailure)
					firstFailure = `client ${i}: ${what}`;
			}
			resolve();
		};
		const timer = setTimeout(() => finish('timeout'), timeoutMs);
		ws.on('error', (e) => finish('error ' + e.message));
		ws.on('close', (code) => finish('closed ' + code));
		ws.on('message', (data) => {
			let f;
			try {
				f = JSON.parse(data.toString());
			} catch (e) {
				return finish('not JSON');
			}
			if (f.type === 'event' && f.event === 'connect.challenge') {
				ws.send(JSON.stringify({type: 'req', id: 'c', method: 'connect', params: {
					minProtocol: 3, maxProtocol: 4, role: 'operator',
					client: {id: 'swarm', version: '1', platform: 'linux', mode: 'test'},
					auth: {token: opt.token}}}));
			} else if (f.type === 'res' && f.id === 'c') {
				if (!f.ok)
					return finish('connect refused ' + JSON.stringify(f.error));
				hello++;
				ws.send(JSON.stringify({type: 'req', id: 'h', method: 'health', params: {}}));
			} else if (f.type === 'res' && f.id === 'h') {
				if (!f.ok)
					return finish('health refused ' + JSON.stringify(f.error));
				health++;
				clearTimeout(timer);
				finish('ok');
			}
		});
		socks.push(ws);
	});
}

async function main() {
	await new Promise((resolve) => status.listening ? resolve() : status.on('listening', resolve));
	for (let i = 0; i < n; i += batch) {
		const ps = [];
		for (let k = i; k < Math.min(n, i + batch); k++)
			ps.push(client(k));
		await Promise.all(ps);
	}
	process.stdout.write(JSON.stringify({clients: n, hello, health, failures,
		first_failure: firstFailure}) + '\n');
}

const rl = readline.createInterface({input: process.stdin});
rl.on('line', async (line) => {
	if (line.trim() !== 'close')
		return;
	await Promise.all(socks.map((ws) => new Promise((resolve) => {
		if (ws.readyState === WebSocket.CLOSED)
			return resolve();
		ws.on('close', resolve);
		ws.close(1000);
	})));
	process.stdout.write(JSON.stringify({closed: socks.length}) + '\n');
});
rl.on('close', () => process.exit(0));
main();
