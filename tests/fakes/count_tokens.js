#!/usr/bin/env node
// count_tokens.js - counts the tokens of a file with real tokenizers
// (gpt-tokenizer: o200k_base and cl100k_base), for the tests of the token
// estimates. Usage: node count_tokens.js FILE; prints "o200k N cl100k M".
'use strict';

const fs = require('fs');
const o200k = require('gpt-tokenizer/encoding/o200k_base');
const cl100k = require('gpt-tokenizer/encoding/cl100k_base');

const text = fs.readFileSync(process.argv[2], 'utf8');
process.stdout.write(`o200k ${o200k.encode(text).length} cl100k ${cl100k.encode(text).length}\n`);
