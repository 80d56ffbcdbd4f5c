#!/usr/bin/env node
// js_reference.js -- JavaScript reference runner for inflight's tokenizer parity
// test: encodes every case of a corpus (tests/tokenizer/corpus.jsonl, one JSON
// string literal per line) with the npm package gpt-3-encoder@1.1.4 and prints
// the token ids of each case space-separated on one line (an empty line for an
// empty result): one output line per input line, in the same order.
//
// Usage: node tests/tokenizer/js_reference.js CORPUS.jsonl [ENCODER] > OUT.txt
//   ENCODER (optional): path of the gpt-3-encoder package directory (or of a
//   directory whose node_modules holds it).  Default: resolved from the repo
//   root (two levels above this file), then from the current directory.
// Exits non-zero, naming the file and line, if a line is not a JSON string.
// CommonJS; no dependencies besides gpt-3-encoder.
'use strict';

const fs = require('fs');
const path = require('path');

function fail(msg) {
  process.stderr.write('js_reference.js: ' + msg + '\n');
  process.exit(1);
}

function loadEncoder(arg) {
  let resolved;
  try {
    if (arg) {
      const p = path.resolve(arg);
      // Accept the package directory itself, or a directory to resolve from.
      if (fs.existsSync(path.join(p, 'package.json')) &&
          JSON.parse(fs.readFileSync(path.join(p, 'package.json'), 'utf8')).name === 'gpt-3-encoder') {
        resolved = require.resolve(p);
      } else {
        resolved = require.resolve('gpt-3-encoder', { paths: [p] });
      }
    } else {
      const repoRoot = path.resolve(__dirname, '..', '..');
      resolved = require.resolve('gpt-3-encoder', { paths: [repoRoot, process.cwd()] });
    }
  } catch (e) {
    fail('cannot find gpt-3-encoder' + (arg ? ' at ' + arg : ' (run npm install in the repo root)') +
         ': ' + e.message);
  }
  const mod = require(resolved);
  if (typeof mod.encode !== 'function') fail('module ' + resolved + ' has no encode()');
  const pkgJson = path.join(path.dirname(resolved), 'package.json');
  try {
    const v = JSON.parse(fs.readFileSync(pkgJson, 'utf8')).version;
    if (v !== '1.1.4') process.stderr.write('js_reference.js: warning: gpt-3-encoder ' + v + ', expected 1.1.4\n');
  } catch (e) { /* version check is advisory */ }
  return mod;
}

function main(argv) {
  if (argv.length < 1 || argv.length > 2 || argv[0] === '-h' || argv[0] === '--help') {
    process.stderr.write('usage: node js_reference.js CORPUS.jsonl [GPT3_ENCODER_DIR] > OUT.txt\n');
    process.exit(2);
  }
  const file = argv[0];
  const { encode } = loadEncoder(argv[1]);

  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    fail('cannot read ' + file + ': ' + e.message);
  }
  const lines = text.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop(); // final newline

  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const where = file + ':' + (i + 1);
    let s;
    try {
      s = JSON.parse(lines[i]);
    } catch (e) {
      fail(where + ': not valid JSON: ' + e.message);
    }
    if (typeof s !== 'string') fail(where + ': expected a JSON string literal, got ' + typeof s);
    const ids = encode(s);
    for (const id of ids) {
      if (!Number.isInteger(id)) fail(where + ': encode() produced a non-integer id (' + id + ')');
    }
    out.push(ids.join(' '));
  }
  out.push('');
  const data = out.join('\n');
  // Write synchronously so a large output is complete before exit.
  let off = 0;
  const buf = Buffer.from(data, 'utf8');
  while (off < buf.length) {
    try {
      off += fs.writeSync(1, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') continue;
      if (e.code === 'EPIPE') process.exit(0);
      throw e;
    }
  }
}

main(process.argv.slice(2));
