#!/usr/bin/env node
// fake_llm.js - a scripted model server speaking both the OpenAI Chat
// Completions API and the Anthropic Messages API, streaming and not
// (Node built-ins only).
//
// Usage: node fake_llm.js <port|0> [--script FILE]
// Listens on 127.0.0.1; prints "PORT <n>" as the first stdout line. Exits when
// stdin closes (so a crashed test never leaves it behind) or on SIGTERM.
//
// Routes:
//   POST /v1/chat/completions   OpenAI (provider base_url http://127.0.0.1:P/v1)
//   POST /v1/messages           Anthropic (provider base_url http://127.0.0.1:P)
//   POST /__script              replaces the script with the JSON list in the body
//   GET  /__requests            every API request received: [{method, path,
//                               headers, body}] (body parsed when it is JSON)
//   POST /__reset               forgets the requests and the script (and the
//                               server answers below)
//   GET  /__meta_requests       the requests to the routes below
//   POST /__server              {models, props, show}: the bodies of
//                               GET /v1/models, GET /props and POST /api/show
//                               (a model server's metadata; absent: 404 for
//                               /props and /api/show, an empty list for
//                               /v1/models); "status" overrides the codes
//
// The script is a list of steps. Each API request consumes one: the first
// unconsumed step whose "match" substring appears in the text of the last
// user message that has text, else the next unconsumed step without "match".
// A step:
//   text            the answer's text (streamed in small deltas)
//   tool_calls      [{name, input, id?, raw_input?}] (ids default to call_<n> /
//                   toolu_<n>, n counting from 1 since the script was loaded;
//                   raw_input: the input's JSON text as sent, valid or not)
//   stop            "max_tokens" (answer cut by the output limit), "end_turn",
//                   "tool_use", or the API's own word
//   usage           {input, output, cache_read, cache_write} (defaults 20, 9,
//                   6, 2). OpenAI: prompt_tokens = input, cached_tokens =
//                   cache_read. Anthropic: the cache fields only when the
//                   request had cache_control, input_tokens then excluding them
//   fault           "429" (Retry-After: retry_after, default 1), "500", "529",
//                   "slow" (answers after delay_ms, default 10000),
//                   "malformed" (invalid JSON), "truncated" (the answer stops
//                   half-way, the connection closes cleanly), "reset" (the
//                   connection is destroyed half-way), "prompt_too_long",
//                   "auth" (401, echoing the key it got), "bad_request",
//                   "stream_error" (an error event in the middle of a stream;
//                   500 when not streaming)
//   delay_ms        wait before answering
//   chunk_delay_ms  pause between stream writes (default 0: the next event loop turn)
//   chunk_bytes     write the raw SSE bytes in writes of this many bytes (each
//                   write is one HTTP chunk, which curl hands on separately)
//   delta_chars     code points per text delta (default 4)
//   omit_ids        OpenAI: tool calls carry no id (as some local servers do)
//   usage "auto"    usage counted from the request instead of fixed numbers:
//                   input = the request's tokens (gpt-tokenizer, o200k, over
//                   the system prompt, messages and tools as JSON text),
//                   cache_read = the tokens of the longest prefix that the
//                   previous request of the same API shared with this one
//                   (a prompt cache), output = the answer's tokens
//   no_stream       answer with one JSON body even when asked to stream
// Requests are checked lightly (tool results must answer the tool calls just
// before them, ...); a malformed one gets a 400 whose message starts with
// "fake_llm:".
'use strict';

const http = require('http');
const fs = require('fs');

const MAX_BODY = 64 * 1024 * 1024;

let steps = [];
let requests = [];
let idCounter = 0;
let server = {};
let metaRequests = [];

function loadScript(list) {
	if (!Array.isArray(list)) throw new Error('the script must be a JSON list of steps');
	steps = list.map((s) => ({step: s || {}, used: false}));
	idCounter = 0;
}

function userText(messages) {
	if (!Array.isArray(messages)) return '';
	for (let i = messages.length - 1; i >= 0; i--) {
		const m = messages[i];
		if (!m || m.role !== 'user') continue;
		let text = '';
		if (typeof m.content === 'string') text = m.content;
		else if (Array.isArray(m.content))
			text = m.content.filter((b) => b && b.type === 'text' && typeof b.text === 'string')
				.map((b) => b.text).join('\n');
		if (text) return text;
	}
	return '';
}

function pickStep(body) {
	const text = userText(body && body.messages);
	let e = steps.find((x) => !x.used && typeof x.step.match === 'string' &&
		text.includes(x.step.match));
	if (!e) e = steps.find((x) => !x.used && typeof x.step.match !== 'string');
	if (!e) return null;
	e.used = true;
	return e.step;
}

// ---- request checks ---------------------------------------------------------

function checkOpenAI(b) {
	if (!b || typeof b !== 'object') return 'the body is not a JSON object';
	if (typeof b.model !== 'string' || !b.model) return 'model is required';
	if (!Array.isArray(b.messages) || !b.messages.length) return 'messages must be a non-empty list';
	let pending = null; // tool_call ids still to be answered
	for (const [i, m] of b.messages.entries()) {
		if (!m || typeof m.role !== 'string') return `messages[${i}] has no role`;
		if (m.role === 'tool') {
			if (!pending || !pending.has(m.tool_call_id))
				return `messages[${i}]: tool message for unknown tool_call_id ${m.tool_call_id}`;
			if (typeof m.content !== 'string') return `messages[${i}]: tool content must be a string`;
			pending.delete(m.tool_call_id);
			continue;
		}
		if (pending && pending.size) return `messages[${i}]: tool calls ${[...pending]} unanswered`;
		pending = null;
		if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
			pending = new Set();
			for (const tc of m.tool_calls) {
				if (!tc || typeof tc.id !== 'string' || tc.type !== 'function' || !tc.function ||
					typeof tc.function.arguments !== 'string')
					return `messages[${i}]: malformed tool call`;
				try {
					JSON.parse(tc.function.arguments);
				} catch (e) {
					return `messages[${i}]: tool call arguments are not JSON`;
				}
				pending.add(tc.id);
			}
		} else if (m.role === 'system' && i !== 0) {
			return `messages[${i}]: system message not first`;
		}
	}
	if (pending && pending.size) return `tool calls ${[...pending]} unanswered`;
	if (b.tools !== undefined) {
		if (!Array.isArray(b.tools)) return 'tools must be a list';
		for (const t of b.tools)
			if (!t || t.type !== 'function' || !t.function || typeof t.function.name !== 'string')
				return 'malformed tool';
	}
	return null;
}

function checkAnthropic(b) {
	if (!b || typeof b !== 'object') return 'the body is not a JSON object';
	if (typeof b.model !== 'string' || !b.model) return 'model is required';
	if (!Number.isInteger(b.max_tokens) || b.max_tokens < 1) return 'max_tokens is required';
	if (!Array.isArray(b.messages) || !b.messages.length) return 'messages must be a non-empty list';
	if (b.messages[0].role !== 'user') return 'the first message must be a user message';
	let calls = new Set();
	for (const [i, m] of b.messages.entries()) {
		if (!m || (m.role !== 'user' && m.role !== 'assistant')) return `messages[${i}]: bad role`;
		const blocks = typeof m.content === 'string' ? [{type: 'text', text: m.content}] : m.content;
		if (!Array.isArray(blocks)) return `messages[${i}]: content must be a string or a list`;
		const answered = new Set();
		const next = new Set();
		for (const blk of blocks) {
			if (!blk || typeof blk.type !== 'string') return `messages[${i}]: block without type`;
			if (blk.type === 'text' && (typeof blk.text !== 'string' || !blk.text))
				return `messages[${i}]: text content blocks must be non-empty`;
			if (blk.type === 'tool_use') {
				if (m.role !== 'assistant') return `messages[${i}]: tool_use in a user message`;
				if (typeof blk.id !== 'string' || typeof blk.name !== 'string' ||
					!blk.input || typeof blk.input !== 'object' || Array.isArray(blk.input))
					return `messages[${i}]: malformed tool_use`;
				next.add(blk.id);
			}
			if (blk.type === 'tool_result') {
				if (m.role !== 'user') return `messages[${i}]: tool_result in an assistant message`;
				if (!calls.has(blk.tool_use_id))
					return `messages[${i}]: tool_result for unknown tool_use_id ${blk.tool_use_id}`;
				answered.add(blk.tool_use_id);
			}
		}
		for (const id of calls)
			if (!answered.has(id)) return `messages[${i}]: tool_use ${id} has no tool_result`;
		calls = next;
	}
	if (b.tools !== undefined) {
		if (!Array.isArray(b.tools)) return 'tools must be a list';
		for (const t of b.tools)
			if (!t || typeof t.name !== 'string' || !t.input_schema) return 'malformed tool';
	}
	return null;
}

// ---- answers ----------------------------------------------------------------

function splitChars(s, n) {
	const cps = Array.from(s);
	const out = [];
	for (let i = 0; i < cps.length; i += n) out.push(cps.slice(i, i + n).join(''));
	return out;
}

function splitInto(s, parts) {
	const cps = Array.from(s);
	const size = Math.max(1, Math.ceil(cps.length / parts));
	return splitChars(s, size);
}

let encoder = null;
const lastPrompt = {};

function tokenCount(text) {
	if (!encoder) encoder = require('gpt-tokenizer/encoding/o200k_base');
	return text ? encoder.encode(text).length : 0;
}

function promptText(api, body) {
	return (api === 'anthropic' && typeof body.system === 'string' ? body.system : '') +
		JSON.stringify(body.tools || []) + JSON.stringify(body.messages || []);
}

// usage "auto": counted from the request (see the top of the file).
function autoUsage(api, body, step) {
	const text = promptText(api, body);
	const prev = lastPrompt[api] || '';
	let k = 0;
	while (k < text.length && k < prev.length && text.charCodeAt(k) === prev.charCodeAt(k)) k++;
	lastPrompt[api] = text;
	const input = tokenCount(text);
	const cacheRead = Math.min(input, k ? tokenCount(text.slice(0, k)) : 0);
	const calls = (step.tool_calls || []).map((tc) => JSON.stringify(tc.input || {})).join('');
	return {input, output: Math.max(1, tokenCount((step.text || '') + calls)),
		cache_read: cacheRead, cache_write: api === 'anthropic' ? input - cacheRead : 0};
}

function usageOf(step) {
	if (step.usage === 'auto') return step.auto_usage;
	return Object.assign({input: 20, output: 9, cache_read: 6, cache_write: 2}, step.usage || {});
}

function toolCalls(step, prefix) {
	return (step.tool_calls || []).map((tc) => ({
		id: step.omit_ids && prefix === 'call_' ? undefined : tc.id || `${prefix}${++idCounter}`,
		name: tc.name,
		input: tc.input === undefined ? {} : tc.input,
		raw: typeof tc.raw_input === 'string' ? tc.raw_input : null,
	}));
}

function stopOf(api, step, calls) {
	const map = api === 'openai'
		? {max_tokens: 'length', end_turn: 'stop', tool_use: 'tool_calls'}
		: {length: 'max_tokens', stop: 'end_turn', tool_calls: 'tool_use'};
	if (step.stop) return map[step.stop] || step.stop;
	if (api === 'openai') return calls.length ? 'tool_calls' : 'stop';
	return calls.length ? 'tool_use' : 'end_turn';
}

function openaiUsage(u) {
	return {
		prompt_tokens: u.input,
		completion_tokens: u.output,
		total_tokens: u.input + u.output,
		prompt_tokens_details: {cached_tokens: u.cache_read},
	};
}

function anthropicUsage(u, cached) {
	if (!cached)
		return {input_tokens: u.input, output_tokens: u.output, cache_read_input_tokens: 0,
			cache_creation_input_tokens: 0};
	return {
		input_tokens: u.input - u.cache_read - u.cache_write,
		output_tokens: u.output,
		cache_read_input_tokens: u.cache_read,
		cache_creation_input_tokens: u.cache_write,
	};
}

function openaiAnswer(body, step) {
	const calls = toolCalls(step, 'call_');
	const message = {role: 'assistant', content: step.text || (calls.length ? null : '')};
	if (calls.length)
		message.tool_calls = calls.map((c) => ({
			id: c.id, type: 'function',
			function: {name: c.name, arguments: c.raw !== null ? c.raw : JSON.stringify(c.input)},
		}));
	return {
		id: 'chatcmpl-fake', object: 'chat.completion', created: 1700000000, model: body.model,
		choices: [{index: 0, message, finish_reason: stopOf('openai', step, calls)}],
		usage: openaiUsage(usageOf(step)),
	};
}

function anthropicAnswer(body, step, cached) {
	const calls = toolCalls(step, 'toolu_');
	const content = [];
	if (step.text) content.push({type: 'text', text: step.text});
	for (const c of calls)
		content.push({type: 'tool_use', id: c.id, name: c.name, input: c.raw !== null ? c.raw : c.input});
	return {
		id: 'msg_fake', type: 'message', role: 'assistant', model: body.model, content,
		stop_reason: stopOf('anthropic', step, calls), stop_sequence: null,
		usage: anthropicUsage(usageOf(step), cached),
	};
}

// The SSE events of an answer, as strings. cut: stop after this many text
// deltas (truncated, stream_error, malformed, reset).
function openaiEvents(body, step) {
	const calls = toolCalls(step, 'call_');
	const base = {id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 1700000000,
		model: body.model};
	const chunk = (delta, finish) => 'data: ' + JSON.stringify(Object.assign({}, base, {
		choices: [{index: 0, delta, finish_reason: finish || null}],
	})) + '\n\n';
	const ev = [': fake_llm keep-alive\n\n', chunk({role: 'assistant', content: ''})];
	for (const piece of splitChars(step.text || '', step.delta_chars || 4))
		ev.push(chunk({content: piece}));
	const pieces = calls.map((c) => splitInto(c.raw !== null ? c.raw : JSON.stringify(c.input), 3));
	calls.forEach((c, i) => ev.push(chunk({tool_calls: [{index: i, id: c.id, type: 'function',
		function: {name: c.name, arguments: ''}}]})));
	// Argument pieces of several calls interleave: assembled by index.
	for (let k = 0; pieces.some((p) => k < p.length); k++)
		pieces.forEach((p, i) => {
			if (k < p.length) ev.push(chunk({tool_calls: [{index: i, function: {arguments: p[k]}}]}));
		});
	ev.push(chunk({}, stopOf('openai', step, calls)));
	if (body.stream_options && body.stream_options.include_usage)
		ev.push('data: ' + JSON.stringify(Object.assign({}, base, {choices: [],
			usage: openaiUsage(usageOf(step))})) + '\n\n');
	ev.push('data: [DONE]\n\n');
	return ev;
}

function anthropicEvents(body, step, cached) {
	const calls = toolCalls(step, 'toolu_');
	const sse = (type, data) => `event: ${type}\ndata: ${JSON.stringify(Object.assign({type}, data))}\n\n`;
	const u = anthropicUsage(usageOf(step), cached);
	const ev = [sse('message_start', {message: {id: 'msg_fake', type: 'message', role: 'assistant',
		content: [], model: body.model, stop_reason: null, stop_sequence: null,
		usage: Object.assign({}, u, {output_tokens: 1})}})];
	ev.push(sse('ping', {}));
	let index = 0;
	if (step.text) {
		ev.push(sse('content_block_start', {index, content_block: {type: 'text', text: ''}}));
		for (const piece of splitChars(step.text, step.delta_chars || 4))
			ev.push(sse('content_block_delta', {index, delta: {type: 'text_delta', text: piece}}));
		ev.push(sse('content_block_stop', {index}));
		index++;
	}
	for (const c of calls) {
		ev.push(sse('content_block_start', {index,
			content_block: {type: 'tool_use', id: c.id, name: c.name, input: {}}}));
		for (const piece of splitInto(c.raw !== null ? c.raw : JSON.stringify(c.input), 3))
			ev.push(sse('content_block_delta', {index,
				delta: {type: 'input_json_delta', partial_json: piece}}));
		ev.push(sse('content_block_stop', {index}));
		index++;
	}
	ev.push(sse('message_delta', {delta: {stop_reason: stopOf('anthropic', step, calls),
		stop_sequence: null}, usage: {output_tokens: u.output_tokens}}));
	ev.push(sse('message_stop', {}));
	return ev;
}

// ---- faults ----------------------------------------------------------------

function errorBody(api, status, type, message, code) {
	if (api === 'openai')
		return {error: {message, type, param: null, code: code === undefined ? null : code}};
	return {type: 'error', error: {type, message}};
}

function sendJSON(res, status, obj, headers) {
	const buf = Buffer.from(JSON.stringify(obj));
	res.writeHead(status, Object.assign({'Content-Type': 'application/json',
		'Content-Length': buf.length}, headers || {}));
	res.end(buf);
}

function faultError(api, step, req) {
	const key = api === 'openai'
		? (req.headers.authorization || '').replace(/^Bearer /, '')
		: req.headers['x-api-key'] || '';
	switch (step.fault) {
	case '429':
		return [429, api === 'openai'
			? errorBody(api, 429, 'requests', 'Rate limit reached for requests', 'rate_limit_exceeded')
			: errorBody(api, 429, 'rate_limit_error', 'Number of requests has exceeded your rate limit'),
		{'Retry-After': String(step.retry_after === undefined ? 1 : step.retry_after)}];
	case '500':
	case 'stream_error':
		return [500, api === 'openai'
			? errorBody(api, 500, 'server_error', 'The server had an error while processing your request')
			: errorBody(api, 500, 'api_error', 'Internal server error')];
	case '529':
		return [529, api === 'openai'
			? errorBody(api, 529, 'server_error', 'Overloaded')
			: errorBody(api, 529, 'overloaded_error', 'Overloaded')];
	case 'prompt_too_long':
		return [400, api === 'openai'
			? errorBody(api, 400, 'invalid_request_error', "This model's maximum context length is " +
				'128000 tokens. However, your messages resulted in 131072 tokens.',
				'context_length_exceeded')
			: errorBody(api, 400, 'invalid_request_error', 'prompt is too long: 210000 tokens > ' +
				'200000 maximum')];
	case 'auth':
		return [401, api === 'openai'
			? errorBody(api, 401, 'invalid_request_error', `Incorrect API key provided: ${key}.`,
				'invalid_api_key')
			: errorBody(api, 401, 'authentication_error', `invalid x-api-key: ${key}`)];
	case 'bad_request':
		return [400, errorBody(api, 400, 'invalid_request_error', 'fake_llm: bad request (scripted)')];
	}
	return null;
}

// ---- serving ----------------------------------------------------------------

function writeStream(res, events, step, after) {
	res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache'});
	const n = step.chunk_bytes | 0;
	const pause = step.chunk_delay_ms | 0;
	let pieces = events;
	if (n > 0) {
		const all = Buffer.from(events.join(''));
		pieces = [];
		for (let i = 0; i < all.length; i += n) pieces.push(all.subarray(i, i + n));
	}
	let i = 0;
	const next = () => {
		if (res.destroyed) return;
		if (i === pieces.length) return after ? after() : res.end();
		res.write(pieces[i++]);
		if (pause > 0) setTimeout(next, pause);
		else setImmediate(next);
	};
	next();
}

function answer(api, req, res, body) {
	const check = api === 'openai' ? checkOpenAI(body) : checkAnthropic(body);
	if (check)
		return sendJSON(res, 400, errorBody(api, 400, 'invalid_request_error', 'fake_llm: ' + check));
	const step = pickStep(body);
	if (!step)
		return sendJSON(res, 400, errorBody(api, 400, 'invalid_request_error',
			'fake_llm: no script step left for this request'));
	const stream = body.stream === true && !step.no_stream;
	if (step.usage === 'auto') step.auto_usage = autoUsage(api, body, step);
	const cached = JSON.stringify(body.messages).includes('"cache_control"');
	let delay = step.delay_ms | 0;
	if (step.fault === 'slow' && step.delay_ms === undefined) delay = 10000;

	const go = () => {
		if (res.destroyed) return;
		const err = step.fault === 'stream_error' && stream ? null : faultError(api, step, req);
		if (err) return sendJSON(res, err[0], err[1], err[2]);

		if (!stream) {
			const full = JSON.stringify(api === 'openai' ? openaiAnswer(body, step)
				: anthropicAnswer(body, step, cached));
			if (step.fault === 'malformed') return sendJSON200Raw(res, full.slice(0, -1) + ',}');
			if (step.fault === 'truncated') {
				res.writeHead(200, {'Content-Type': 'application/json'});
				return res.end(full.slice(0, full.length >> 1));
			}
			if (step.fault === 'reset') {
				res.writeHead(200, {'Content-Type': 'application/json',
					'Content-Length': Buffer.byteLength(full)});
				res.write(full.slice(0, full.length >> 1));
				return setTimeout(() => req.socket.destroy(), 20);
			}
			return sendJSON200Raw(res, full);
		}

		let events = api === 'openai' ? openaiEvents(body, step) : anthropicEvents(body, step, cached);
		const cut = Math.min(4, events.length - 2);
		let after = null;
		switch (step.fault) {
		case 'malformed':
			events = events.slice(0, cut).concat([api === 'openai'
				? 'data: {"choices": [{"index": 0, "delta": {"content": oops}}]}\n\n'
				: 'event: content_block_delta\ndata: {"type": "content_block_delta", oops}\n\n'])
				.concat(events.slice(cut));
			break;
		case 'truncated':
			events = events.slice(0, cut);
			break;
		case 'reset':
			events = events.slice(0, cut);
			after = () => setTimeout(() => req.socket.destroy(), 20);
			break;
		case 'stream_error':
			events = events.slice(0, cut).concat([api === 'openai'
				? 'data: ' + JSON.stringify(errorBody(api, 500, 'server_error',
					'The server had an error while processing your request')) + '\n\n'
				: 'event: error\ndata: ' + JSON.stringify(errorBody(api, 529, 'overloaded_error',
					'Overloaded')) + '\n\n']);
			break;
		}
		writeStream(res, events, step, after);
	};
	if (delay > 0) {
		const t = setTimeout(go, delay);
		res.on('close', () => clearTimeout(t));
	} else {
		go();
	}
}

function sendJSON200Raw(res, text) {
	const buf = Buffer.from(text);
	res.writeHead(200, {'Content-Type': 'application/json', 'Content-Length': buf.length});
	res.end(buf);
}

function route(req, res, path, raw) {
	if (req.method === 'GET' && path === '/__requests') return sendJSON(res, 200, requests);
	if (req.method === 'GET' && path === '/__meta_requests') return sendJSON(res, 200, metaRequests);
	if (req.method === 'POST' && path === '/__reset') {
		requests = [];
		steps = [];
		idCounter = 0;
		server = {};
		metaRequests = [];
		return sendJSON(res, 200, {ok: true});
	}
	if (req.method === 'POST' && path === '/__server') {
		try {
			server = JSON.parse(raw.toString('utf8')) || {};
		} catch (e) {
			return sendJSON(res, 400, {error: String(e.message || e)});
		}
		return sendJSON(res, 200, {ok: true});
	}
	const meta = {'GET /v1/models': 'models', 'GET /props': 'props', 'POST /api/show': 'show'};
	const what = meta[`${req.method} ${path}`];
	if (what) {
		metaRequests.push({method: req.method, path, headers: req.headers,
			body: raw.length ? raw.toString('utf8') : null});
		const status = (server.status && server.status[what]) || (server[what] ? 200 : 404);
		if (server[what] === undefined && what === 'models')
			return sendJSON(res, status === 404 ? 200 : status, {object: 'list', data: []});
		return sendJSON(res, status, server[what] === undefined ? {error: 'not found'} : server[what]);
	}
	if (req.method === 'POST' && path === '/__script') {
		try {
			loadScript(JSON.parse(raw.toString('utf8')));
		} catch (e) {
			return sendJSON(res, 400, {error: String(e.message || e)});
		}
		return sendJSON(res, 200, {ok: true, steps: steps.length});
	}
	const api = path === '/v1/chat/completions' ? 'openai' : path === '/v1/messages' ? 'anthropic' : null;
	if (!api || req.method !== 'POST') return sendJSON(res, 404, {error: 'not found'});

	let body;
	try {
		body = JSON.parse(raw.toString('utf8'));
	} catch (e) {
		body = raw.toString('utf8');
	}
	requests.push({method: req.method, path, headers: req.headers, body});
	if (typeof body !== 'object' || body === null)
		return sendJSON(res, 400, errorBody(api, 400, 'invalid_request_error',
			'fake_llm: the body is not JSON'));
	return answer(api, req, res, body);
}

const httpServer = http.createServer((req, res) => {
	const chunks = [];
	let size = 0;
	req.on('data', (c) => {
		size += c.length;
		if (size > MAX_BODY) req.socket.destroy();
		else chunks.push(c);
	});
	req.on('end', () => {
		let path;
		try {
			path = new URL(req.url, 'http://127.0.0.1').pathname;
		} catch (e) {
			return sendJSON(res, 400, {error: 'bad url'});
		}
		route(req, res, path, Buffer.concat(chunks));
	});
});
httpServer.on('clientError', (err, socket) => socket.destroy());

const argv = process.argv.slice(2);
let port = 0;
for (let i = 0; i < argv.length; i++) {
	if (argv[i] === '--script') {
		loadScript(JSON.parse(fs.readFileSync(argv[++i], 'utf8')));
	} else {
		port = Number(argv[i]);
	}
}

httpServer.listen(port, '127.0.0.1', () => {
	process.stdout.write(`PORT ${httpServer.address().port}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
