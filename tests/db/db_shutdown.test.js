'use strict';
// db_shutdown: SIGTERM while the history thread is busy. The request log holds N_REQUESTS rows
// (inserted with the sqlite3 shell into a file `inflight db migrate` created: long completions, so
// that a page of 500 takes the history thread a while); `inflight serve --db FILE --history all`
// answers N_CLIENTS concurrent HTTP clients, each in a loop, half of them GET /api/history?limit=500
// and half GET /api/requests/ID, so that history jobs are queued and running when SIGTERM arrives.
// The server must exit 0, with nothing from a sanitizer on stderr, ROUNDS times in a row.
//
// What this catches: at the stop, a history answer pushed to the event queue after the lws context
// is gone wakes it with lws_cancel_service on freed memory (the history thread must stop before
// the context goes). That use after free is inside libwebsockets, which is not instrumented, so
// AddressSanitizer cannot see it: the server runs with tests/db/lws_guard.c preloaded, which wraps
// lws_context_destroy and lws_cancel_service and aborts (the server dies with a message on stderr)
// when lws_cancel_service is called on a context that is freed or being freed by another thread.
// Every answer received before the SIGTERM must be 200 with the expected content; after it, 200,
// 503 or a closed connection.
//
// usage: node db_shutdown.test.js INFLIGHT VOCAB_DIR LWS_GUARD_SO
const fs = require('fs');
const path = require('path');
const D = require('./dblib');

const N_REQUESTS = D.QUICK ? 2000 : 4000;
const COMPLETION_CHARS = 4000; // per row: a page is 1 MiB of JSON to build (the cap: ~205 rows)
const N_CLIENTS = 48;
const ROUNDS = D.QUICK ? 3 : 5;
const LIST = '/api/history?limit=500';
const SANITIZER = /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer|runtime error:|lws_guard:/;

// The log's file: the schema by `inflight db migrate`, the rows by the sqlite3 shell.
function buildDb(bin, vocab, db) {
  const m = D.inflightDb(bin, vocab, ['migrate', '--db', db]);
  D.check(m.status === 0, `inflight db migrate --db ${db}: status ${m.status}: ${m.out}`);
  const t0 = Date.now() - 3600e3;
  // a completion with characters JSON must escape (quote, backslash, newline) and UTF-8
  const unit = 'Tok "quoted" \\ and\nnew é ';
  const reps = Math.ceil(COMPLETION_CHARS / unit.length);
  D.exec(db, `BEGIN;
    INSERT INTO sessions (id, session, user_key, remote_addr, user_agent, connected_at, closed_at, close_reason)
      VALUES (1, '00000000000000d5', NULL, '127.0.0.1', 'db_shutdown', ${t0}, ${t0 + 3000e3}, 'client 1000');
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N_REQUESTS})
    INSERT INTO requests (id, session_id, client_id, policy, prompt, params, prompt_tokens, completion_tokens,
        completion, finish_reason, queued_at, admitted_at, first_token_at, finished_at, queue_ms, ttft_ms, total_ms, tokens_per_s)
      SELECT i, 1, 'r' || i, CASE i % 2 WHEN 0 THEN 'iterative' ELSE 'static' END, 'Prompt number ' || i,
        '{"max_tokens":64,"temperature":0.8,"top_k":40,"top_p":0.95,"seed":' || i || ',"stop":[],"ignore_eos":true}',
        4, 64, replace(hex(zeroblob(${reps})), '00', ${D.sqlStr(unit)}), 'length',
        ${t0} + i * 100, ${t0} + i * 100 + 0.5, ${t0} + i * 100 + 2, ${t0} + i * 100 + 40, 0.5, 2, 40, 1600
      FROM n;
    INSERT INTO request_tokens (request_id, n_tokens, offsets_us) SELECT id, 64, randomblob(256) FROM requests;
    COMMIT;`, { timeoutMs: 120000 });
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), N_REQUESTS, 'requests rows inserted');
  return fs.statSync(db).size;
}

// One client: requests back to back until stop; records what came back before and after `stopAt`.
function hammer(port, i, st) {
  return (async () => {
    for (let k = 0; !st.stop; k++) {
      const list = i % 2 === 0;
      const id = 1 + ((i * 7919 + k * 104729) % N_REQUESTS);
      const url = list ? LIST : `/api/requests/${id}`;
      const sentAfterStop = st.stopAt !== null;
      let r;
      try {
        r = await D.httpRequest(port, url, { timeoutMs: 60000 });
      } catch (e) {
        if (st.stopAt !== null) {
          st.after.errors++;
          return; // the server is going away
        }
        throw new D.TestFailure(`client ${i}: GET ${url} before the SIGTERM: ${e.message}`);
      }
      const body = r.body.toString('utf8');
      if (st.stopAt === null && !sentAfterStop) {
        D.eq(r.status, 200, `client ${i}: GET ${url} status before the SIGTERM (${body.slice(0, 200)})`);
        if (list) D.check(body.startsWith('{"scope":"all","requests":[{') && /"next_before":\d+\}$/.test(body),
          () => `client ${i}: GET ${LIST}: not a full page: ${body.slice(0, 200)} ... ${body.slice(-100)}`);
        else D.check(body.includes(`"client_id":"r${id}"`), () => `client ${i}: GET ${url}: ${body.slice(0, 300)}`);
        st.before[list ? 'list' : 'one']++;
      } else {
        D.check(r.status === 200 || r.status === 503, `client ${i}: GET ${url} status ${r.status} at the stop: ${body.slice(0, 200)}`);
        st.after[r.status]++;
      }
    }
  })();
}

async function round(bin, vocab, model, db, guard, n) {
  const env = { ...D.childEnv(vocab), LD_PRELOAD: guard,
    // the guard is preloaded ahead of the ASan runtime: let ASan accept that order
    ASAN_OPTIONS: [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':') };
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--history', 'all', '--no-request-log'], { env });
  const st = { stop: false, stopAt: null, before: { list: 0, one: 0 }, after: { 200: 0, 503: 0, errors: 0 } };
  // one page first: the history answers (and how long a page takes here, for the record)
  const t0 = D.now();
  const first = await D.httpRequest(srv.port, LIST, { timeoutMs: 120000 });
  const pageMs = D.now() - t0;
  D.eq(first.status, 200, `round ${n}: GET ${LIST} status`);
  const page = JSON.parse(first.body.toString('utf8'));
  D.check(page.requests.length > 0 && page.requests.length < 500 && page.next_before !== null,
    () => `round ${n}: a page of ${LIST}: ${page.requests.length} rows, next_before ${page.next_before} (want the 1 MiB cap to apply)`);
  D.eq(page.requests[0].id, N_REQUESTS, `round ${n}: the newest request first`);
  const clients = Array.from({ length: N_CLIENTS }, (_, i) => hammer(srv.port, i, st));
  const all = Promise.all(clients).catch((e) => {
    st.failure = e;
  });
  // every client has had answers: the history thread's queue is full of jobs from now on
  await D.until(() => st.failure || st.before.list + st.before.one >= 2 * N_CLIENTS, 120000,
    `round ${n}: ${2 * N_CLIENTS} answers`);
  if (st.failure) throw st.failure;
  st.stopAt = D.now();
  const ex = await D.killServer(srv, 'SIGTERM', 60000);
  const stopMs = D.now() - st.stopAt;
  st.stop = true;
  await D.withTimeout(all, 120000, `round ${n}: the clients to finish`);
  if (st.failure) throw st.failure;
  const report = srv.stderr.split('\n').filter((l) => SANITIZER.test(l));
  D.check(ex.code === 0 && report.length === 0, () => `round ${n}: the server exited with code ${ex.code} signal ${ex.signal} ` +
    `after SIGTERM with history jobs in flight${report.length ? ` and reported:\n  ${report.slice(0, 8).join('\n  ')}` : ''}` +
    `\n-- server stderr (tail) --\n${D.tail(srv.stderr, 6000)}`);
  D.check(/inflight serve: stopped/.test(srv.stdout), `round ${n}: no "stopped" line: ${srv.stdout}`);
  D.log(`round ${n}: a page (1 MiB) took ${pageMs.toFixed(0)} ms; ${st.before.list} pages + ${st.before.one} single requests ` +
    `answered 200 before the SIGTERM; at the stop ${st.after[200]} x 200, ${st.after[503]} x 503, ${st.after.errors} connections closed; ` +
    `exit 0 ${stopMs.toFixed(0)} ms after the SIGTERM, no sanitizer or lws_guard report`);
}

// Paging through every row with limit=500: each answer stops once it passes 1 MiB (500 rows of
// these completions were ~2 MB here, 30 MB with longer ones, held per slow client), and the pages
// chain through next_before to every row once, newest first.
async function pageThrough(bin, vocab, model, db) {
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--history', 'all', '--no-request-log']);
  const seen = [];
  let before = null, pages = 0, biggest = 0, fewest = Infinity;
  for (;;) {
    const r = await D.httpRequest(srv.port, `/api/history?limit=500${before ? `&before=${before}` : ''}`);
    D.eq(r.status, 200, `history page ${pages + 1}: status`);
    const page = JSON.parse(r.body);
    const last = page.requests[page.requests.length - 1];
    const lastBytes = Buffer.byteLength(JSON.stringify(last));
    D.check(r.body.length - lastBytes < (1 << 20), `history page ${pages + 1}: ${r.body.length} bytes before its last row`);
    biggest = Math.max(biggest, r.body.length);
    if (page.next_before !== null) fewest = Math.min(fewest, page.requests.length);
    for (const q of page.requests) seen.push(q.id);
    pages++;
    if (page.next_before === null) break;
    D.eq(page.next_before, last.id, `history page ${pages}: next_before`);
    before = page.next_before;
  }
  D.eq(seen.length, N_REQUESTS, 'rows over all pages');
  D.check(seen.every((id, i) => i === 0 || id < seen[i - 1]), 'ids strictly decreasing over the pages');
  D.check(fewest < 500, `a full page held ${fewest} rows: the byte cap never applied`);
  D.log(`paging with limit=500: ${pages} pages of at most ${biggest} bytes (${fewest} rows on a full page), ${seen.length} rows once each`);
  await srv.stop();
}

D.main('db_shutdown', async () => {
  const { bin, vocab } = D.parseArgs();
  const guard = process.argv[4] ? path.resolve(process.argv[4]) : '';
  D.check(guard && fs.existsSync(guard), `usage: node db_shutdown.test.js INFLIGHT VOCAB_DIR LWS_GUARD_SO (tests/db/lws_guard.c built; got ${JSON.stringify(guard)})`);
  D.requireSqlite3();
  const model = D.makeModel(bin, vocab, [], 'dbshut-model');
  const dir = D.tmpDir('dbshut');
  const db = `${dir}/log.db`;
  const t0 = D.now();
  const bytes = buildDb(bin, vocab, db);
  D.log(`request log: ${N_REQUESTS} requests of ${COMPLETION_CHARS}-character completions, ${(bytes / 1e6).toFixed(1)} MB, ` +
    `built in ${(D.now() - t0).toFixed(0)} ms; ${N_CLIENTS} clients, ${ROUNDS} rounds; guard ${guard}`);
  await pageThrough(bin, vocab, model, db);
  for (let n = 1; n <= ROUNDS; n++) await round(bin, vocab, model, db, guard, n);
  const ic = D.integrityCheck(db);
  D.check(ic.ok, `PRAGMA integrity_check: ${ic.out}`);
  D.log(`${ROUNDS} stops with history jobs in flight: exit 0 each time, nothing reported`);
});
