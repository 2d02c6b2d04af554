#!/usr/bin/env node
// telegram_emulator.js - runs the npm package telegram-test-api (an independent
// emulator of the Bot API plus a "client" API through which a test plays the
// user) on 127.0.0.1.
//
// Usage: node telegram_emulator.js <port|0>
// Prints "PORT <n>" as the first stdout line. Exits when stdin closes or on
// SIGTERM. The package ships no launcher of its own, hence this file.
'use strict';

const net = require('net');
const TelegramServer = require('telegram-test-api');

function freePort() {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.on('error', reject);
		s.listen(0, '127.0.0.1', () => {
			const p = s.address().port;
			s.close(() => resolve(p));
		});
	});
}

// A webhook that fails is an unhandled rejection inside the package; keep
// the process alive (the update is lost, as the package does not retry).
process.on('unhandledRejection', (e) => console.error('emulator:', e && e.message));

(async () => {
	const want = Number(process.argv[2] || 0);
	const port = want > 0 ? want : await freePort();
	const server = new TelegramServer({port, host: '127.0.0.1', storeTimeout: 600});
	await server.start();
	process.stdout.write(`PORT ${port}\n`);
	const stop = () => server.stop().then(() => process.exit(0), () => process.exit(0));
	process.stdin.on('end', stop);
	process.stdin.on('close', stop);
	process.stdin.resume();
	process.on('SIGTERM', stop);
})().catch((e) => {
	console.error('emulator failed to start:', e);
	process.exit(1);
});
