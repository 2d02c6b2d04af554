#!/usr/bin/env node
// mcp_sdk_http.js - an MCP server built with the official SDK
// (@modelcontextprotocol/sdk), over streamable HTTP, for the MCP client's
// tests: a second, independent implementation of the server side, and one
// that sends a notification outside any request (on the GET stream).
//
// Usage: node mcp_sdk_http.js <port|0>
// Listens on 127.0.0.1 at /mcp; prints "PORT <n>" as the first stdout line.
// Exits when stdin closes or on SIGTERM.
//
// Tools (one server per session):
//   hello {name}   "hello <name>"
//   grow           answers "growing", then (a moment later, so the
//                  notification is not part of the call's answer) adds the
//                  tool "grown_later" and says the list changed
//   grown_later    "grown"
// GET /__sessions  how many sessions were opened, how many DELETEd.
'use strict';

const http = require('http');
const {randomUUID} = require('crypto');
const {z} = require('zod');
const {McpServer} = require('@modelcontextprotocol/sdk/server/mcp.js');
const {StreamableHTTPServerTransport} = require('@modelcontextprotocol/sdk/server/streamableHttp.js');

const transports = {};
let opened = 0;
let deleted = 0;

function newServer() {
	const server = new McpServer({name: 'sdk-peer', version: '1.0.0'});
	server.registerTool('hello', {description: 'Greets.', inputSchema: {name: z.string()}}, async ({name}) => ({
		content: [{type: 'text', text: 'hello ' + name}],
	}));
	server.registerTool('grow', {description: 'Adds a tool later.'}, async () => {
		setTimeout(() => {
			server.registerTool('grown_later', {description: 'Came later.'}, async () => ({
				content: [{type: 'text', text: 'grown'}],
			}));
		}, 200);
		return {content: [{type: 'text', text: 'growing'}]};
	});
	return server;
}

function readBody(req) {
	return new Promise((resolve) => {
		let data = '';
		req.on('data', (c) => (data += c));
		req.on('end', () => resolve(data ? JSON.parse(data) : undefined));
	});
}

const srv = http.createServer(async (req, res) => {
	if (req.url === '/__sessions') {
		res.writeHead(200, {'content-type': 'application/json'});
		return res.end(JSON.stringify({opened, deleted}));
	}
	if (!req.url.startsWith('/mcp')) {
		res.writeHead(404);
		return res.end();
	}
	const sid = req.headers['mcp-session-id'];
	if (req.method === 'POST') {
		const body = await readBody(req);
		let t = sid && transports[sid];
		if (!t) {
			if (sid || !body || body.method !== 'initialize') {
				res.writeHead(sid ? 404 : 400);
				return res.end();
			}
			t = new StreamableHTTPServerTransport({
				sessionIdGenerator: () => randomUUID(),
				onsessioninitialized: (id) => {
					transports[id] = t;
					opened++;
				},
			});
			t.onclose = () => {
				if (t.sessionId) delete transports[t.sessionId];
			};
			await newServer().connect(t);
		}
		return t.handleRequest(req, res, body);
	}
	const t = sid && transports[sid];
	if (!t) {
		res.writeHead(404);
		return res.end();
	}
	if (req.method === 'DELETE') deleted++;
	return t.handleRequest(req, res);
});

srv.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
	process.stdout.write('PORT ' + srv.address().port + '\n');
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
