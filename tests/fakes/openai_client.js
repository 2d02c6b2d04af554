#!/usr/bin/env node
// openai_client.js - a client of Switchboard's OpenAI-compatible endpoint
// written with the official OpenAI SDK (npm "openai"), so that the tests
// check the gateway against a client not written here.
//
// Usage: node openai_client.js <base_url> <api_key> <plan>
//   base_url  e.g. http://127.0.0.1:8790/v1
//   plan      JSON: {"ops": [op, ...]}; every op runs concurrently, each
//             starting at_ms after the plan starts. Prints one JSON line: the
//             results, in op order, then exits 0 (errors are results too).
//
// An op:
//   {"op": "chat", "model": "switchboard/main", "text": "hi",
//    "messages": [...]        instead of text: the messages as sent
//    "stream": true, "include_usage": true, "user": "u",
//    "session": "name"        sent as x-switchboard-session
//    "idempotency_key": "k"   sent as Idempotency-Key
//    "api_key": "other"       a client with another key for this op
//    "max_retries": 0, "timeout_ms": 120000, "at_ms": 0,
//    "gate": "b"              start only when the line "b" arrives on stdin
//                             (the test says when; at_ms counts from then)}
//   {"op": "models"}                 GET /models (list)
//   {"op": "model", "id": "..."}     GET /models/{id}
//
// A result:
//   chat ok:    {ok: true, text, id, object, model, finish_reason, role,
//                deltas: [...] (stream), chunks (stream), usage, switchboard,
//                start_ms, end_ms}   (times relative to the plan's start)
//   models ok:  {ok: true, ids: [...], object}
//   model ok:   {ok: true, id, object, owned_by}
//   failure:    {ok: false, error: {class, status, code, type, message},
//                start_ms, end_ms}
'use strict';

const OpenAI = require('openai');
const readline = require('readline');

// Gates: ops that wait for a line on stdin. A gate still closed when stdin
// ends fails its op.
const gates = new Map();
let stdinClosed = false;

function gate(name) {
	if (stdinClosed) return Promise.reject(new Error(`gate ${name} never opened`));
	if (!gates.has(name)) {
		let open, fail;
		const p = new Promise((resolve, reject) => {
			open = resolve;
			fail = reject;
		});
		gates.set(name, {p, open, fail});
	}
	return gates.get(name).p;
}

function watchStdin() {
	const rl = readline.createInterface({input: process.stdin});
	rl.on('line', (line) => {
		const name = line.trim();
		gate(name);
		gates.get(name).open();
	});
	rl.on('close', () => {
		stdinClosed = true;
		for (const [name, g] of gates) g.fail(new Error(`gate ${name} never opened`));
	});
}

function sleep(ms) {
	return new Promise((resolve) => setTimeout(resolve, ms));
}

function describe(err) {
	return {
		class: err && err.constructor ? err.constructor.name : typeof err,
		status: err && typeof err.status === 'number' ? err.status : null,
		code: err && err.code !== undefined ? err.code : null,
		type: err && err.type !== undefined ? err.type : null,
		message: err && err.message ? String(err.message) : String(err),
	};
}

async function chat(client, op) {
	const body = {
		model: op.model,
		messages: op.messages || [{role: 'user', content: op.text}],
	};
	if (op.user !== undefined) body.user = op.user;
	const headers = {};
	if (op.session !== undefined) headers['x-switchboard-session'] = op.session;
	if (op.idempotency_key !== undefined) headers['Idempotency-Key'] = op.idempotency_key;
	const opts = {headers};
	if (!op.stream) {
		const c = await client.chat.completions.create(body, opts);
		const choice = c.choices[0];
		return {
			ok: true,
			text: choice.message.content,
			role: choice.message.role,
			finish_reason: choice.finish_reason,
			id: c.id,
			object: c.object,
			model: c.model,
			usage: c.usage,
			switchboard: c.switchboard,
		};
	}
	body.stream = true;
	if (op.include_usage) body.stream_options = {include_usage: true};
	const stream = await client.chat.completions.create(body, opts);
	const r = {ok: true, text: '', deltas: [], chunks: 0, finish_reason: null, role: null,
		ids: new Set(), object: null, model: null, usage: null};
	for await (const chunk of stream) {
		r.chunks++;
		r.ids.add(chunk.id);
		r.object = chunk.object;
		r.model = chunk.model;
		if (chunk.usage) r.usage = chunk.usage;
		const choice = chunk.choices && chunk.choices[0];
		if (!choice) continue;
		if (choice.delta && choice.delta.role) r.role = choice.delta.role;
		if (choice.delta && typeof choice.delta.content === 'string' && choice.delta.content) {
			r.deltas.push(choice.delta.content);
			r.text += choice.delta.content;
		}
		if (choice.finish_reason) r.finish_reason = choice.finish_reason;
	}
	r.ids = [...r.ids];
	r.id = r.ids[0] || null;
	return r;
}

async function runOp(baseURL, apiKey, op, t0) {
	if (op.gate !== undefined) {
		try {
			await gate(String(op.gate));
		} catch (err) {
			return {ok: false, error: {class: 'Gate', message: err.message}};
		}
	}
	await sleep(op.at_ms || 0);
	const client = new OpenAI({
		baseURL,
		apiKey: op.api_key !== undefined ? op.api_key : apiKey,
		maxRetries: op.max_retries !== undefined ? op.max_retries : 0,
		timeout: op.timeout_ms || 120000,
	});
	const start = Date.now() - t0;
	let r;
	try {
		if (op.op === 'chat') {
			r = await chat(client, op);
		} else if (op.op === 'models') {
			const ids = [];
			const page = await client.models.list();
			for await (const m of page) ids.push(m.id);
			r = {ok: true, ids, object: page.object || null};
		} else if (op.op === 'model') {
			const m = await client.models.retrieve(op.id);
			r = {ok: true, id: m.id, object: m.object, owned_by: m.owned_by};
		} else {
			r = {ok: false, error: {class: 'Plan', message: `unknown op ${op.op}`}};
		}
	} catch (err) {
		r = {ok: false, error: describe(err)};
	}
	r.start_ms = start;
	r.end_ms = Date.now() - t0;
	return r;
}

async function main() {
	const [baseURL, apiKey, planText] = process.argv.slice(2);
	if (!baseURL || apiKey === undefined || !planText) {
		process.stderr.write('usage: openai_client.js <base_url> <api_key> <plan JSON>\n');
		process.exit(2);
	}
	const plan = JSON.parse(planText);
	if (plan.ops.some((op) => op.gate !== undefined)) {
		plan.ops.forEach((op) => {
			if (op.gate !== undefined) gate(String(op.gate)).catch(() => {});
		});
		watchStdin();
	}
	const t0 = Date.now();
	const results = await Promise.all(plan.ops.map((op) => runOp(baseURL, apiKey, op, t0)));
	// Exit at once: an open stdin (gates) would keep the process alive.
	process.stdout.write(JSON.stringify(results) + '\n', () => process.exit(0));
}

main().catch((err) => {
	process.stderr.write(`openai_client: ${err && err.stack ? err.stack : err}\n`);
	process.exit(1);
});
