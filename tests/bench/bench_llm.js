#!/usr/bin/env node
// bench_llm.js - a stateless scripted model server (OpenAI Chat Completions,
// streaming and not) for benchmarks and the soak, where fake_llm.js's
// one-step-per-request scripts and its request log would grow with the run.
//
//   node bench_llm.js [PORT|0] [--tool NAME] [--args JSON] [--delay-ms N]
//
// Listens on 127.0.0.1 and prints "PORT <n>" first. Every conversation gets
// the same two-call script, decided from the request alone:
//   - no tool result in the conversation yet: one call of tool NAME (default
//     `ls`) with arguments JSON (default {"path": "."});
//   - a tool result in it: the text "done: <last user text>".
// A conversation whose tools do not include NAME gets the text answer at once.
// GET /__stats answers {requests, busy_ms} (busy_ms: summed time from a
// request's arrival to the end of its answer, the provider's share of a
// round trip); POST /__stats/reset zeroes them. Exits when stdin closes or on
// SIGTERM.
'use strict';

const http = require('http');
const {performance} = require('perf_hooks');

let port = 0;
let tool = 'ls';
let toolArgs = JSON.stringify({path: '.'});
let delayMs = 0;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
	if (argv[i] === '--tool') tool = argv[++i];
	else if (argv[i] === '--args') toolArgs = argv[++i];
	else if (argv[i] === '--delay-ms') delayMs = Number(argv[++i]);
	else port = Number(argv[i]);
}

let requests = 0;
let busyMs = 0;
let seq = 0;

function textOf(content) {
	if (typeof content === 'string') return content;
	if (Array.isArray(content))
		return content.filter((b) => b && b.type === 'text' && typeof b.text === 'string')
			.map((b) => b.text).join('\n');
	return '';
}

function lastUserText(messages) {
	for (let i = messages.length - 1; i >= 0; i--)
		if (messages[i] && messages[i].role === 'user') {
			const t = textOf(messages[i].content);
			if (t) return t;
		}
	return '';
}

function hasTool(body) {
	return Array.isArray(body.tools) &&
		body.tools.some((t) => t && t.function && t.function.name === tool);
}

function answer(body, res, done) {
	const msgs = Array.isArray(body.messages) ? body.messages : [];
	// Each conversation is new: once any tool result is in it, answer.
	const callTool = !msgs.some((m) => m && m.role === 'tool') && hasTool(body);
	const id = `call_${++seq}`;
	const text = callTool ? null : 'done: ' + lastUserText(msgs).slice(-200);
	const base = {id: 'chatcmpl-bench', created: 1700000000, model: body.model};
	const usage = {prompt_tokens: 20, completion_tokens: 9, total_tokens: 29};
	const finish = callTool ? 'tool_calls' : 'stop';
	if (body.stream === true) {
		const chunk = (delta, fin) => 'data: ' + JSON.stringify(Object.assign({
			object: 'chat.completion.chunk'}, base,
		{choices: [{index: 0, delta, finish_reason: fin || null}]})) + '\n\n';
		let out = chunk({role: 'assistant', content: ''});
		if (callTool) {
			out += chunk({tool_calls: [{index: 0, id, type: 'function',
				function: {name: tool, arguments: ''}}]});
			out += chunk({tool_calls: [{index: 0, function: {arguments: toolArgs}}]});
		} else {
			out += chunk({content: text});
		}
		out += chunk({}, finish);
		if (body.stream_options && body.stream_options.include_usage)
			out += 'data: ' + JSON.stringify(Object.assign({object: 'chat.completion.chunk'}, base,
				{choices: [], usage})) + '\n\n';
		out += 'data: [DONE]\n\n';
		res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache'});
		res.end(out, done);
		return;
	}
	const message = {role: 'assistant', content: text};
	if (callTool)
		message.tool_calls = [{id, type: 'function', function: {name: tool, arguments: toolArgs}}];
	const buf = Buffer.from(JSON.stringify(Object.assign({object: 'chat.completion'}, base,
		{choices: [{index: 0, message, finish_reason: finish}], usage})));
	res.writeHead(200, {'Content-Type': 'application/json', 'Content-Length': buf.length});
	res.end(buf, done);
}

function sendJSON(res, status, obj) {
	const buf = Buffer.from(JSON.stringify(obj));
	res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': buf.length});
	res.end(buf);
}

const server = http.createServer((req, res) => {
	const t0 = performance.now();
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		const path = req.url.split('?')[0];
		if (req.method === 'GET' && path === '/__stats')
			return sendJSON(res, 200, {requests, busy_ms: busyMs});
		if (req.method === 'POST' && path === '/__stats/reset') {
			requests = 0;
			busyMs = 0;
			return sendJSON(res, 200, {ok: true});
		}
		if (req.method === 'GET' && /\/models$/.test(path))
			return sendJSON(res, 200, {object: 'list', data: [{id: 'bench', object: 'model'}]});
		if (req.method !== 'POST' || !/\/chat\/completions$/.test(path))
			return sendJSON(res, 404, {error: {message: 'not found'}});
		let body;
		try {
			body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
		} catch (e) {
			return sendJSON(res, 400, {error: {message: 'bench_llm: the body is not JSON'}});
		}
		const go = () => answer(body, res, () => {
			requests++;
			busyMs += performance.now() - t0;
		});
		if (delayMs > 0) setTimeout(go, delayMs);
		else go();
	});
});
server.keepAliveTimeout = 60000;
server.on('clientError', (err, socket) => socket.destroy());
server.listen(port, '127.0.0.1', () => process.stdout.write(`PORT ${server.address().port}\n`));
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
