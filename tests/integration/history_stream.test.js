'use strict';
// history_stream: GET /api/history is streamed with bounded memory per connection
// (docs/protocol.md). The request log holds N_ROWS rows with 4,000-character completions (a page of
// limit=500 stops at the 1 MiB cap, ~200 rows) and, oldest, LONG_ROWS rows longer than a chunk.
//   1. N_SLOW raw sockets ask for a full page (and then GET /healthz on the same connection) and
//      do not read: once the server's writes have stopped, /metrics' inflight_history_buffered_bytes
//      must be at most N_SLOW chunks (HISTORY_CHUNK_BYTES, 64 KiB; far below N_SLOW x 1 MiB) and
//      above 0 (the clients did stall the server). Then they read: each gets the whole page,
//      chunked, byte for byte the page a plain GET got, valid JSON, then the /healthz answer
//      (the chunked framing ends where it should and the connection stays usable).
//   2. N_DROP more stall and then close: the gauge goes back to 0, the server stays up.
//   3. HEAD of the page: the GET's status and its length as Content-Length, no body.
//   4. Paging through every row with limit=500 and limit=7: every row once, newest first, each page
//      under 1 MiB before its last row, next_before chaining; the long rows included.
// With IFL_HISTORY_REF_BIN=/path/to/another/inflight (e.g. a build from before the streaming), every
// page of step 4 and some /api/requests/ID answers must also be byte for byte that binary's.
//
// usage: node history_stream.test.js INFLIGHT VOCAB_DIR
const fs = require('fs');
const net = require('net');
const D = require('../db/dblib');

const N_ROWS = 1200;
const COMPLETION_CHARS = 4000; // ~4.6 KB of JSON a row: the 1 MiB cap ends a page of 500
const LONG_ROWS = 3; // the oldest rows: 100,000 characters, longer than a chunk
const LONG_CHARS = 100000;
const N_SLOW = 10;
const N_DROP = 4;
const CHUNK = 64 << 10; // HISTORY_CHUNK_BYTES (server/history.h)
const PAGE = '/api/history?limit=500';

// The log's file: the schema by `inflight db migrate`, the rows by the sqlite3 shell.
function buildDb(bin, vocab, db) {
  const m = D.inflightDb(bin, vocab, ['migrate', '--db', db]);
  D.check(m.status === 0, `inflight db migrate --db ${db}: status ${m.status}: ${m.out}`);
  const t0 = Date.now() - 3600e3;
  // characters JSON must escape (quote, backslash, newline) and UTF-8
  const unit = 'Tok "quoted" \\ and\nnew é ';
  const reps = (chars) => Math.ceil(chars / unit.length);
  D.exec(db, `BEGIN;
    INSERT INTO sessions (id, session, user_key, remote_addr, user_agent, connected_at, closed_at, close_reason)
      VALUES (1, '00000000000000e7', NULL, '127.0.0.1', 'history_stream', ${t0}, ${t0 + 3000e3}, 'client 1000');
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N_ROWS})
    INSERT INTO requests (id, session_id, client_id, policy, prompt, params, prompt_tokens, completion_tokens,
        completion, finish_reason, queued_at, admitted_at, first_token_at, finished_at, queue_ms, ttft_ms, total_ms, tokens_per_s)
      SELECT i, 1, 'r' || i, CASE i % 2 WHEN 0 THEN 'iterative' ELSE 'static' END, 'Prompt number ' || i,
        '{"max_tokens":64,"temperature":0.8,"top_k":40,"top_p":0.95,"seed":' || i || ',"stop":[],"ignore_eos":true}',
        4, 64, replace(hex(zeroblob(CASE WHEN i <= ${LONG_ROWS} THEN ${reps(LONG_CHARS)} ELSE ${reps(COMPLETION_CHARS)} END)),
          '00', ${D.sqlStr(unit)}), 'length',
        ${t0} + i * 100.25, ${t0} + i * 100 + 0.5, ${t0} + i * 100 + 2, ${t0} + i * 100 + 40, 0.5, 2, 40, 1600
      FROM n;
    UPDATE requests SET queued_at = (SELECT queued_at FROM requests WHERE id = 600) WHERE id BETWEEN 590 AND 610;
    INSERT INTO request_tokens (request_id, n_tokens, offsets_us) SELECT id, 64, randomblob(256) FROM requests;
    COMMIT;`, { timeoutMs: 120000 });
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), N_ROWS, 'requests rows inserted');
  return fs.statSync(db).size;
}

// Decodes one HTTP/1.1 response at the start of buf (Content-Length or chunked); null while
// incomplete. Returns {status, headers (text), body (Buffer), chunks, rest (Buffer after it)}.
function parseResponse(buf) {
  const he = buf.indexOf('\r\n\r\n');
  if (he < 0) return null;
  const head = buf.subarray(0, he).toString('latin1');
  const status = Number((/^HTTP\/1\.1 (\d{3})/.exec(head) || [])[1]);
  let at = he + 4;
  const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
    const n = cl ? Number(cl[1]) : 0;
    if (buf.length < at + n) return null;
    return { status, head, body: buf.subarray(at, at + n), chunks: 0, rest: buf.subarray(at + n) };
  }
  D.check(!cl, () => `a chunked answer with a Content-Length: ${head}`);
  const parts = [];
  for (;;) {
    const le = buf.indexOf('\r\n', at);
    if (le < 0) return null;
    const line = buf.subarray(at, le).toString('latin1');
    D.check(/^[0-9a-f]+$/.test(line), () => `a chunk size line ${JSON.stringify(line.slice(0, 40))}`);
    const n = parseInt(line, 16);
    at = le + 2;
    if (n === 0) {
      if (buf.length < at + 2) return null;
      D.check(buf.subarray(at, at + 2).toString('latin1') === '\r\n', 'the blank line after the last chunk');
      return { status, head, body: Buffer.concat(parts), chunks: parts.length, rest: buf.subarray(at + 2) };
    }
    if (buf.length < at + n + 2) return null;
    D.check(buf.subarray(at + n, at + n + 2).toString('latin1') === '\r\n', 'CRLF after a chunk');
    parts.push(buf.subarray(at, at + n));
    at += n + 2;
  }
}

// A client that sends GET path and GET /healthz on one connection and reads nothing until told.
function stalledClient(port, p) {
  const c = { sock: net.connect(port, '127.0.0.1'), chunks: [], closed: false };
  c.sock.pause();
  c.sock.on('connect', () => c.sock.write(`GET ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n` +
    'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'));
  c.sock.on('data', (d) => c.chunks.push(d));
  c.sock.on('close', () => {
    c.closed = true;
  });
  c.sock.on('error', () => {});
  // reads everything: resolves with the page's answer and the /healthz answer after it
  c.readAll = (timeoutMs) => D.until(() => {
    const buf = Buffer.concat(c.chunks);
    const a = parseResponse(buf);
    const b = a && parseResponse(a.rest);
    if (b) return { page: a, next: b };
    D.check(!c.closed, () => `the connection closed after ${buf.length} bytes: ${buf.subarray(0, 200).toString('latin1')}`);
    return null;
  }, timeoutMs, 'a stalled client to read its whole page and the /healthz answer');
  return c;
}

async function gauge(port) {
  const v = (await D.fetchMetrics(port)).maybe('inflight_history_buffered_bytes');
  D.check(v !== undefined, '/metrics has no inflight_history_buffered_bytes');
  return v;
}

// Waits until the gauge has held one value for `stableMs` (the stalled writes have stopped).
async function settledGauge(port, stableMs) {
  let last = -1, since = D.now();
  return D.until(async () => {
    const v = await gauge(port);
    if (v !== last) {
      last = v;
      since = D.now();
      return null;
    }
    return D.now() - since >= stableMs ? { v } : null;
  }, 60000, 'inflight_history_buffered_bytes to settle', 100);
}

async function stalledPages(srv, ref) {
  const clients = Array.from({ length: N_SLOW }, () => stalledClient(srv.port, PAGE));
  const { v: held } = await settledGauge(srv.port, 1500);
  const bound = N_SLOW * (CHUNK + 1024);
  D.check(held > 0, `inflight_history_buffered_bytes ${held} with ${N_SLOW} stalled clients: they did not stall the answers`);
  D.check(held <= bound, `inflight_history_buffered_bytes ${held} with ${N_SLOW} stalled clients: over ${bound} ` +
    `(${N_SLOW} chunks of ${CHUNK}); a whole page each would be ${N_SLOW * ref.length}`);
  D.log(`${N_SLOW} clients stalled on a ${ref.length}-byte page: the server holds ${held} bytes of history answers ` +
    `(${(held / N_SLOW / 1024).toFixed(1)} KiB a client; bound ${bound}, whole pages ${N_SLOW * ref.length})`);
  for (const c of clients) c.sock.resume();
  let chunks = 0;
  for (const [i, c] of clients.entries()) {
    const { page, next } = await c.readAll(120000);
    D.eq(page.status, 200, `stalled client ${i}: status`);
    D.check(page.body.equals(ref), () => `stalled client ${i}: ${page.body.length} bytes, not the page a plain GET got ` +
      `(${ref.length}): ${page.body.subarray(-120).toString()}`);
    JSON.parse(page.body.toString('utf8'));
    D.check(next.status === 200 && next.body.toString() === 'ok\n', () => `stalled client ${i}: after the page ` +
      `${next.status} ${JSON.stringify(next.body.toString().slice(0, 80))}, not /healthz's ok`);
    chunks = page.chunks;
    c.sock.destroy();
  }
  const after = await settledGauge(srv.port, 300);
  D.eq(after.v, 0, 'inflight_history_buffered_bytes once every page is read');
  D.log(`then each read the whole page (${chunks} HTTP chunks), identical to the plain GET's, valid JSON, ` +
    `and /healthz after it on the same connection; the gauge back to 0`);
}

async function droppedClients(srv) {
  const clients = Array.from({ length: N_DROP }, () => stalledClient(srv.port, PAGE));
  const { v: held } = await settledGauge(srv.port, 1000);
  for (const c of clients) c.sock.destroy();
  const after = await settledGauge(srv.port, 500);
  D.eq(after.v, 0, `inflight_history_buffered_bytes after ${N_DROP} stalled clients closed`);
  const r = await D.httpRequest(srv.port, '/healthz');
  D.eq(r.status, 200, '/healthz after the closes');
  D.log(`${N_DROP} clients stalled (${held} bytes held) and closed: the gauge back to 0, the server up`);
}

// HEAD of the page, then GET /healthz on the same connection: the GET's status and length
// (Content-Length), no body: the next bytes are the /healthz answer.
async function checkHead(port, ref) {
  const sock = net.connect(port, '127.0.0.1');
  const got = [];
  sock.on('connect', () => sock.write(`HEAD ${PAGE} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n` +
    'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'));
  sock.on('data', (d) => got.push(d));
  sock.on('error', () => {});
  const text = await D.until(() => {
    const t = Buffer.concat(got).toString('latin1');
    return /\r\n\r\nok\n$/.test(t) ? t : null;
  }, 60000, `HEAD ${PAGE} and GET /healthz to be answered`);
  sock.destroy();
  const he = text.indexOf('\r\n\r\n');
  const head = text.slice(0, he);
  D.check(/^HTTP\/1\.1 200 /.test(head), () => `HEAD ${PAGE}: ${head}`);
  const cl = Number((/\r\ncontent-length:\s*(\d+)/i.exec(head) || [])[1]);
  D.eq(cl, ref.length, `HEAD ${PAGE} Content-Length`);
  D.check(/^HTTP\/1\.1 200 /.test(text.slice(he + 4)), () => `after HEAD ${PAGE}, not the /healthz answer: ` +
    `${JSON.stringify(text.slice(he + 4, he + 200))}`);
  D.log(`HEAD ${PAGE}: 200, Content-Length ${cl} (the GET's length), no body, then /healthz`);
}

// Every page of limit `limit`; returns the answers' bodies.
async function pageThrough(port, limit) {
  const seen = [], bodies = [];
  let before = null, biggest = 0, fewest = Infinity;
  for (;;) {
    const p = `/api/history?limit=${limit}${before ? `&before=${before}` : ''}`;
    const r = await D.httpRequest(port, p, { timeoutMs: 120000 });
    D.eq(r.status, 200, `${p}: status`);
    bodies.push({ p, body: r.body });
    const page = JSON.parse(r.body.toString('utf8'));
    const last = page.requests[page.requests.length - 1];
    const lastBytes = Buffer.byteLength(JSON.stringify(last));
    D.check(r.body.length - lastBytes < (1 << 20), `${p}: ${r.body.length} bytes before its last row`);
    biggest = Math.max(biggest, r.body.length);
    if (page.next_before !== null) fewest = Math.min(fewest, page.requests.length);
    for (const q of page.requests) seen.push(q.id);
    if (page.next_before === null) break;
    D.eq(page.next_before, last.id, `${p}: next_before`);
    before = page.next_before;
  }
  D.eq(seen.length, N_ROWS, `limit=${limit}: rows over all pages`);
  D.eq(new Set(seen).size, N_ROWS, `limit=${limit}: distinct rows over all pages`);
  D.eq(seen[0], N_ROWS, `limit=${limit}: the newest first`);
  D.log(`paging with limit=${limit}: ${bodies.length} pages of at most ${biggest} bytes (${fewest} rows on a full page), ` +
    `${seen.length} rows once each`);
  return bodies;
}

// The same answers from another binary (IFL_HISTORY_REF_BIN): byte for byte.
async function compareWithRef(refBin, vocab, model, db, pages) {
  const ref = await D.startServer(refBin, vocab, model, ['--db', db, '--history', 'all', '--no-request-log']);
  let bytes = 0;
  for (const { p, body } of pages) {
    const r = await D.httpRequest(ref.port, p, { timeoutMs: 120000 });
    D.check(r.status === 200 && r.body.equals(body), () => `${p}: ${refBin} answers ${r.status}, ${r.body.length} bytes; ` +
      `this one ${body.length} bytes`);
    bytes += body.length;
  }
  await ref.stop();
  D.log(`IFL_HISTORY_REF_BIN ${refBin}: the same ${pages.length} answers byte for byte (${bytes} bytes)`);
}

D.main('history_stream', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const model = D.makeModel(bin, vocab, [], 'hstream-model');
  const db = `${D.tmpDir('hstream')}/log.db`;
  const size = buildDb(bin, vocab, db);
  D.log(`request log: ${N_ROWS} requests (${COMPLETION_CHARS}-character completions, the oldest ${LONG_ROWS} ` +
    `${LONG_CHARS}), ${(size / 1e6).toFixed(1)} MB`);
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--history', 'all', '--no-request-log']);
  D.eq(await gauge(srv.port), 0, 'inflight_history_buffered_bytes at the start');
  const first = await D.httpRequest(srv.port, PAGE, { timeoutMs: 120000 });
  D.eq(first.status, 200, `GET ${PAGE}: status`);
  const ref = first.body;
  const page = JSON.parse(ref.toString('utf8'));
  D.check(page.requests.length < 500 && page.next_before !== null && ref.length > (1 << 20) - 8192,
    () => `GET ${PAGE}: ${page.requests.length} rows, ${ref.length} bytes, next_before ${page.next_before}: want the 1 MiB cap`);
  D.log(`GET ${PAGE}: ${ref.length} bytes, ${page.requests.length} rows, next_before ${page.next_before}, ` +
    `transfer-encoding ${first.headers['transfer-encoding'] || 'none'}`);
  await stalledPages(srv, ref);
  await droppedClients(srv);
  await checkHead(srv.port, ref);
  const pages = [...await pageThrough(srv.port, 500), ...await pageThrough(srv.port, 7)];
  const ones = [];
  for (const id of [1, 2, 600, N_ROWS]) {
    const p = `/api/requests/${id}`;
    const r = await D.httpRequest(srv.port, p);
    D.eq(r.status, 200, `${p}: status`);
    D.eq(JSON.parse(r.body.toString('utf8')).request.id, id, `${p}: id`);
    ones.push({ p, body: r.body });
  }
  D.eq(await gauge(srv.port), 0, 'inflight_history_buffered_bytes at the end');
  await srv.stop();
  const refBin = process.env.IFL_HISTORY_REF_BIN;
  if (refBin) await compareWithRef(refBin, vocab, model, db, [...pages, ...ones, { p: PAGE, body: ref }]);
});
