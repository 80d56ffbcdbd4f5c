'use strict';
// db_load: the 64-client load (64 clients x 4 requests x 32 tokens, ignore_eos, policies alternating
// iterative/static; 8 clients x 4 x 8 tokens with IFL_TEST_QUICK) against `inflight serve --db`, plus one more
// connection that gets two requests refused (duplicate_id, and a prompt + max_tokens over the
// context). Half the load clients close their connection themselves; the other half are still
// connected when the server gets SIGTERM, as is one more with two LATE_TOKENS-token requests (one
// per policy) running at that moment. What the server does at a stop (server.c begin_stop /
// close_phase): it waits for the running requests until they finish or --grace ends, then cancels
// what still runs, closes the connections with 1001, flushes the log and exits 0. Both outcomes are
// checked, neither by how fast this machine is:
//  (a) this server runs with --grace 600 (far more than any build needs for the late requests):
//      its stop line counts the 2 late requests in flight, they finish with finish_reason length
//      and all their tokens, the server says "all requests finished", and they are logged as such;
//  (b) a second, small server (its own database) runs with --grace 0: two requests of LONG_TOKENS
//      (one per policy, far more than can run between their first token and the SIGTERM) end with
//      done(cancelled) and fewer tokens than asked, the server says "grace period over: cancelled
//      what still ran", closes the connection with 1001, exits 0, and the database holds them with
//      finish_reason cancelled, their streamed tokens and text, the session closed "server 1001".
// Then the database of (a), read with the sqlite3 shell, must hold:
//  - sessions: exactly one row per connection, with the session id of its hello, closed_at and
//    close_reason set ("client 1000" / "server 1001 ..." as the connection ended), user_key the
//    SHA-256 (hex) of the key for the clients that connected with ?user=KEY (every 8th), else NULL;
//  - requests: exactly one row per generate message (256 + the extra connection's 3 + the 2 late
//    ones, complete with finish_reason length), matched by
//    (session, client_id): policy, prompt, params (seed, max_tokens), prompt_tokens as in started,
//    completion_tokens = token frames streamed, completion = the token texts concatenated,
//    finish_reason length, no error_code;
//    timings: queued_at <= admitted_at <= first_token_at <= finished_at, ttft_ms = first_token_at -
//    queued_at, queue_ms = admitted_at - queued_at, total_ms = finished_at - queued_at (0.01 ms),
//    and the done frame's timing agrees with the row;
//  - request_tokens: n_tokens N_TOKENS, a 4*N_TOKENS-byte blob of strictly increasing uint32 offsets, the first
//    ~ ttft_ms*1000 and the last ~ total_ms*1000 (see TOKEN_SLACK_MS);
//  - the refused requests: error_code as in the error frame, finish_reason NULL, no timings, no
//    request_tokens row;
//  - steps: present for both policies, at most one per policy every 100 ms (consecutive rows of a
//    policy >= 100 ms apart), so at most ~10 per second of the server's life;
//  - `PRAGMA integrity_check` ok, and `inflight db status` says up to date.
// Before the stop, /metrics must account for every record (written totals, nothing dropped, no
// write error).
const crypto = require('crypto');
const D = require('./dblib');

const N_CLIENTS = D.QUICK ? 8 : 64;
const PER_CLIENT = 4;
const N_TOKENS = D.QUICK ? 8 : 32;
const DUP_TOKENS = D.QUICK ? 32 : 200; // the first "dup": still in flight when its duplicate arrives
const TIME_EPS_MS = 0.01; // derived figures vs timestamps
// The token offsets are stamped by the server when the batcher hands it a token, right after the
// batcher stamped first_token_at (first token) and before it stamps finished_at (after the last):
// so ttft_ms <= first offset and last offset <= total_ms, always; and the difference is a few
// microseconds unless the thread is preempted between the two stamps (on a loaded 2-core machine,
// 10 ms has been seen). Hence: within TOKEN_SLACK_MS for most requests (TOKEN_SLACK_SHARE), within
// TOKEN_HARD_MS for every one (a wrong base or unit is off by queue_ms or 1000x).
const TOKEN_SLACK_MS = 3;
const TOKEN_SLACK_SHARE = 0.9;
const TOKEN_HARD_MS = 50;
const LATE_TOKENS = D.QUICK ? 32 : 200;
// (a): a grace no build needs (the late requests take seconds even under ThreadSanitizer); the
// test's own wait for the exit is bounded by its deadline, not by this
const LONG_GRACE_S = 600;
// (b): --grace 0 and requests far longer than the moment between their first token and the SIGTERM
const LONG_TOKENS = 1000;
const PROMPTS = ['Hello world', 'The quick brown fox', 'In a hole in the ground there lived a hobbit.',
  'Programming in C++ is like', 'Once upon a time, in a land far away,'];

// The server's stdout at a stop (server.c begin_stop, close_phase): how many requests it counted in
// flight at the signal, the grace it gave them, and what it decided when the stop went on.
function checkStopLines(srv, inFlight, graceS, cancelled, what) {
  const stopping = /stopping: no new requests; (\d+) in flight may finish within ([\d.]+) s/.exec(srv.stdout);
  D.check(stopping, () => `${what}: no "stopping: ... in flight may finish within ... s" line on stdout:\n${srv.stdout}`);
  D.eq(Number(stopping[1]), inFlight, `${what}: requests in flight at the SIGTERM (server's count)`);
  D.eq(Number(stopping[2]), graceS, `${what}: the grace the server gave them (s)`);
  const want = cancelled ? 'grace period over: cancelled what still ran' : 'all requests finished';
  const closing = /inflight serve: (.*); closing (\d+) connection\(s\)/.exec(srv.stdout);
  D.check(closing, () => `${what}: no "...; closing N connection(s)" line on stdout:\n${srv.stdout}`);
  D.eq(closing[1], want, `${what}: the server's decision at the end of the grace`);
  D.check(/inflight serve: stopped/.test(srv.stdout), () => `${what}: no "stopped" line on stdout:\n${srv.stdout}`);
  D.log(`${what}: stdout "${stopping[0]}" / "${closing[0]}"`);
}

// (b) --grace 0: whatever runs at the SIGTERM is cancelled, logged as cancelled, the connection
// closed with 1001, exit 0. Requests of LONG_TOKENS on a model with the context for them: they are
// still running when the signal comes on any machine (asserted through the server's own count).
async function graceTooShort(bin, vocab, dir) {
  const model = D.makeModel(bin, vocab, ['--n-ctx', '1024'], 'dbload-grace0-model');
  const db = `${dir}/grace0.db`;
  const tStart = Date.now();
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log', '--grace', '0']);
  const c = await D.Client.open(srv.port, { name: 'grace0' });
  const rs = ['iterative', 'static'].map((policy, i) => ({ id: `cut-${policy}`, policy, seed: 91 + i }));
  for (const r of rs)
    c.send({ type: 'generate', id: r.id, prompt: 'Cut short by the stop', model: r.policy, max_tokens: LONG_TOKENS, seed: r.seed, ignore_eos: true });
  await Promise.all(rs.map((r) => c.waitFor((f) => f.msg.type === 'token' && f.msg.id === r.id, 120000, `${r.id}'s first token`)));
  const stopAt = D.now();
  const ex = await D.killServer(srv, 'SIGTERM', 120000);
  const tStop = Date.now();
  D.check(ex.code === 0, () => `(b) --grace 0: the server exited with ${ex.code} (signal ${ex.signal}) after SIGTERM\n${D.tail(srv.stderr, 4000)}`);
  D.log(`(b) --grace 0: SIGTERM, exit 0 after ${(D.now() - stopAt).toFixed(0)} ms`);
  checkStopLines(srv, rs.length, 0, true, '(b) --grace 0');
  await D.withTimeout(c.closed, 10000, 'the grace0 connection to be closed by the server');
  D.eq(c.closeInfo.code, 1001, '(b) --grace 0: close code at the server\'s stop');
  c.assertNoViolations();
  for (const r of rs) {
    const res = D.checkRequestFrames(c.framesFor(r.id), r.id, { model: r.policy, seed: r.seed, finish: 'cancelled' });
    r.text = res.text;
    r.tokens = res.tokens.length;
    D.check(r.tokens >= 1 && r.tokens < LONG_TOKENS, `(b) ${r.id}: ${r.tokens} tokens streamed (at least 1, fewer than the ${LONG_TOKENS} asked)`);
  }
  D.check(!/could not be written/.test(srv.stderr), () => `(b) records lost at exit: ${srv.stderr}`);
  const ic = D.integrityCheck(db);
  D.check(ic.ok, `(b) PRAGMA integrity_check: ${ic.out}`);
  const sess = D.q(db, `SELECT * FROM sessions WHERE session = ${D.sqlStr(c.hello.session)}`);
  D.eq(sess.length, 1, '(b) sessions rows of the grace0 connection');
  D.check(/^server 1001/.test(sess[0].close_reason || ''), `(b) close_reason ${JSON.stringify(sess[0].close_reason)}`);
  D.check(sess[0].closed_at >= tStart - 1000 && sess[0].closed_at <= tStop + 1000, `(b) closed_at ${sess[0].closed_at} outside the run`);
  const rows = D.q(db, 'SELECT r.*, s.session AS session_hex, t.n_tokens FROM requests r JOIN sessions s ON s.id = r.session_id ' +
    'LEFT JOIN request_tokens t ON t.request_id = r.id ORDER BY r.id');
  D.eq(rows.length, rs.length, '(b) requests rows');
  for (const r of rs) {
    const hit = rows.filter((row) => row.session_hex === c.hello.session && row.client_id === r.id);
    D.eq(hit.length, 1, `(b) rows for ${r.id}`);
    const row = hit[0];
    D.eq(row.policy, r.policy, `(b) ${r.id} policy`);
    D.eq(row.finish_reason, 'cancelled', `(b) ${r.id} finish_reason (cancelled at the end of --grace 0)`);
    D.eq(row.error_code, null, `(b) ${r.id} error_code`);
    D.eq(row.completion_tokens, r.tokens, `(b) ${r.id} completion_tokens vs token frames streamed`);
    D.eq(row.completion, r.text, `(b) ${r.id} completion vs the streamed token texts`);
    D.eq(row.n_tokens, r.tokens, `(b) ${r.id} request_tokens.n_tokens`);
    D.eq(JSON.parse(row.params).max_tokens, LONG_TOKENS, `(b) ${r.id} params.max_tokens`);
    D.check(typeof row.finished_at === 'number' && row.finished_at <= tStop + 1000, `(b) ${r.id} finished_at ${row.finished_at}`);
  }
  D.log(`(b) --grace 0: ${rs.map((r) => `${r.id} cancelled after ${r.tokens} of ${LONG_TOKENS} tokens`).join(', ')}; ` +
    `logged with finish_reason cancelled; connection closed 1001 (${JSON.stringify(sess[0].close_reason)})`);
}

D.main('db_load', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const model = D.makeModel(bin, vocab, [], 'dbload-model');
  const dir = D.tmpDir('dbload');
  const db = `${dir}/log.db`;
  const tStart = Date.now();
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log', '--grace', String(LONG_GRACE_S)]);
  D.check(/applied \d+ migration/.test(srv.stderr), () => `no "applied N migration(s)" line on a new file; stderr: ${srv.stderr}`);

  // every 8th client presents a user key: its session row keeps the key's SHA-256, no other does
  const keyOf = (i) => (i % 8 === 0 ? `dbload-user-${String(i).padStart(3, '0')}-${'k'.repeat(8)}` : null);
  const clients = await Promise.all(Array.from({ length: N_CLIENTS }, (_, i) => D.Client.open(srv.port,
    { name: `c${i}`, path: keyOf(i) ? `/ws?user=${keyOf(i)}` : '/ws' })));
  clients.forEach((c, i) => D.eq(c.hello.user_key, !!keyOf(i), `${c.name} hello.user_key`));
  D.log(`${clients.length} clients connected`);

  const reqs = [];
  const t0 = D.now();
  clients.forEach((c, ci) => {
    for (let r = 0; r < PER_CLIENT; r++) {
      const k = ci * PER_CLIENT + r;
      const policy = k % 2 === 0 ? 'iterative' : 'static';
      const prompt = PROMPTS[k % PROMPTS.length];
      const seed = 5000 + k;
      const id = `r${k}`;
      reqs.push({ client: c, id, policy, prompt, seed });
      c.send({ type: 'generate', id, prompt, model: policy, max_tokens: N_TOKENS, seed, ignore_eos: true });
    }
  });

  // the refusals, on their own connection
  const x = await D.Client.open(srv.port, { name: 'refused' });
  x.send({ type: 'generate', id: 'dup', prompt: 'A long one to stay in flight', max_tokens: DUP_TOKENS, seed: 1, ignore_eos: true });
  x.send({ type: 'generate', id: 'dup', prompt: 'The duplicate', max_tokens: 5, seed: 2, ignore_eos: true });
  const dupErr = await x.waitFor((f) => f.msg.type === 'error' && f.msg.id === 'dup', 30000, 'the duplicate_id error');
  D.eq(dupErr.msg.code, 'duplicate_id', 'code of the second "dup"');
  // the longest max_tokens allowed (max_context - 1) with a 2-token prompt: over the context
  x.send({ type: 'generate', id: 'toolong', prompt: 'Hello world', max_tokens: x.hello.limits.max_tokens, seed: 3 });
  const longEnd = await x.waitEnd('toolong', 30000);
  D.eq(longEnd.type, 'error', 'prompt + max_tokens over the context: refused');
  const dupDone = await x.waitFor((f) => f.msg.type === 'done' && f.msg.id === 'dup', 300000, 'the done of the first "dup"');
  D.log(`refused: duplicate_id (${JSON.stringify(dupErr.msg.message)}), ${longEnd.code} (${JSON.stringify(longEnd.message)})`);

  await Promise.all(reqs.map((r) => r.client.waitEnd(r.id, 300000)));
  const wallMs = D.now() - t0;
  srv.assertAlive();
  for (const r of reqs) {
    const res = D.checkRequestFrames(r.client.framesFor(r.id), r.id, { model: r.policy, seed: r.seed, n: N_TOKENS, finish: 'length' });
    r.text = res.text;
    r.tokens = res.tokens.length;
    r.done = res.done;
    r.started = res.started;
    r.session = r.client.hello.session;
  }
  D.log(`${reqs.length} requests x ${N_TOKENS} tokens streamed in ${wallMs.toFixed(0)} ms`);

  // the log accounts for everything once drained (the session closes come later)
  const nReqRows = reqs.length + 3 + 2; // the load, the extra connection's 3, the 2 late ones
  const m = await D.waitDrained(srv.port);
  D.log(`/metrics after the load: ${D.fmtMetrics(m)}`);
  D.eq(m.written.request, reqs.length + 3, 'inflight_db_records_written_total{kind="request"}');
  D.eq(m.written.session_open, N_CLIENTS + 1, 'inflight_db_records_written_total{kind="session_open"}');
  D.eq(m.droppedFull + m.droppedRejected, 0, 'inflight_db_records_dropped_total');
  D.eq(m.errors, 0, 'inflight_db_write_errors_total');
  D.check(m.tx >= 1 && m.tx < m.written.request + m.written.step + m.written.session_open,
    `inflight_db_transactions_total ${m.tx}: batched (fewer transactions than records)`);

  // half the clients (and the extra one) close themselves; the rest meet the SIGTERM
  const selfClosing = clients.filter((_, i) => i % 2 === 0).concat([x]);
  for (const c of selfClosing) c.close();
  await Promise.all(selfClosing.map((c) => D.withTimeout(c.closed, 10000, `${c.name} to close`)));
  // two long requests still running at the SIGTERM: they finish within --grace and are logged
  const late = await D.Client.open(srv.port, { name: 'late' });
  const lateReqs = ['iterative', 'static'].map((policy, i) => ({ id: `late-${policy}`, policy, seed: 77 + i }));
  for (const lr of lateReqs)
    late.send({ type: 'generate', id: lr.id, prompt: 'Still running at the stop', model: lr.policy, max_tokens: LATE_TOKENS, seed: lr.seed, ignore_eos: true });
  await Promise.all(lateReqs.map((lr) => late.waitFor((f) => f.msg.type === 'token' && f.msg.id === lr.id, 60000, `${lr.id}'s first token`)));
  const stopAt = D.now();
  // (a) --grace 600: the server waits for them however slow this build is (the wait below is a
  // timeout for a hung server, bounded by the test's deadline)
  const r = await D.killServer(srv, 'SIGTERM', 600000);
  const tStop = Date.now();
  D.check(r.code === 0, () => `the server exited with ${r.code} (signal ${r.signal}) after SIGTERM\n${D.tail(srv.stderr, 4000)}`);
  D.log(`SIGTERM: exit 0 after ${(D.now() - stopAt).toFixed(0)} ms`);
  checkStopLines(srv, 2, LONG_GRACE_S, false, '(a) --grace 600');
  for (const lr of lateReqs) {
    const res = D.checkRequestFrames(late.framesFor(lr.id), lr.id, { model: lr.policy, n: LATE_TOKENS, finish: 'length' });
    lr.text = res.text;
    lr.tokens = res.tokens.length;
    const first = late.framesFor(lr.id).find((f) => f.msg.type === 'token');
    D.check(first.t < stopAt, `${lr.id}: not running at the SIGTERM`);
  }
  const stayed = clients.filter((_, i) => i % 2 === 1).concat([late]);
  await Promise.all(stayed.map((c) => D.withTimeout(c.closed, 10000, `${c.name} to be closed by the server`)));
  for (const c of stayed) D.eq(c.closeInfo.code, 1001, `${c.name}: close code at the server's stop`);
  for (const c of clients.concat([x, late])) c.assertNoViolations();
  D.check(!/could not be written/.test(srv.stderr), () => `records lost at exit: ${srv.stderr}`);

  // ---- the database ----
  const ic = D.integrityCheck(db);
  D.check(ic.ok, `PRAGMA integrity_check: ${ic.out}`);
  const sessions = D.q(db, 'SELECT * FROM sessions ORDER BY id');
  const allConns = clients.concat([x, late]);
  D.eq(sessions.length, allConns.length, 'sessions rows (one per connection)');
  const sessByHex = new Map(sessions.map((s) => [s.session, s]));
  D.eq(sessByHex.size, sessions.length, 'distinct session ids in sessions');
  for (const c of allConns) {
    const s = sessByHex.get(c.hello.session);
    D.check(s, `${c.name}: no sessions row for session ${c.hello.session}`);
    D.check(typeof s.close_reason === 'string' && s.close_reason.length > 0, `${c.name}: close_reason ${JSON.stringify(s.close_reason)}`);
    D.check(typeof s.closed_at === 'number' && s.closed_at >= s.connected_at, `${c.name}: closed_at ${s.closed_at} vs connected_at ${s.connected_at}`);
    D.check(s.connected_at >= tStart - 1000 && s.closed_at <= tStop + 1000, `${c.name}: session times outside the run`);
    const ci = clients.indexOf(c);
    const key = ci >= 0 ? keyOf(ci) : null;
    D.eq(s.user_key, key ? crypto.createHash('sha256').update(key).digest('hex') : null, `${c.name}: user_key (SHA-256 of the key)`);
    D.eq(s.remote_addr, '127.0.0.1', `${c.name}: remote_addr`);
    const selfClosed = selfClosing.includes(c);
    D.check(selfClosed ? /^client 1000/.test(s.close_reason) : /^server 1001/.test(s.close_reason),
      `${c.name} (${selfClosed ? 'closed by the client' : 'closed at the stop'}): close_reason ${JSON.stringify(s.close_reason)}`);
  }
  D.log(`sessions: ${sessions.length} rows, one per connection; close_reason e.g. ${JSON.stringify(sessByHex.get(clients[0].hello.session).close_reason)} / ` +
    `${JSON.stringify(sessByHex.get(clients[1].hello.session).close_reason)}`);

  const rows = D.q(db, 'SELECT r.*, s.session AS session_hex, t.n_tokens, hex(t.offsets_us) AS offsets_hex, ' +
    'length(t.offsets_us) AS blob_len FROM requests r JOIN sessions s ON s.id = r.session_id ' +
    'LEFT JOIN request_tokens t ON t.request_id = r.id ORDER BY r.id');
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), nReqRows, 'requests rows (every one joined to a session)');
  D.eq(rows.length, nReqRows, 'requests rows');
  const byKey = new Map();
  for (const row of rows) {
    const k = `${row.session_hex}/${row.client_id}`;
    if (!byKey.has(k)) byKey.set(k, []);
    byKey.get(k).push(row);
  }
  let maxTtftDiff = 0;
  let maxLastDiff = 0;
  let outsideSlack = 0;
  for (const rq of reqs) {
    const hits = byKey.get(`${rq.session}/${rq.id}`) || [];
    D.eq(hits.length, 1, `rows for ${rq.session}/${rq.id}`);
    const row = hits[0];
    const w = `${rq.client.name}/${rq.id} (row ${row.id})`;
    D.eq(row.policy, rq.policy, `${w} policy`);
    D.eq(row.prompt, rq.prompt, `${w} prompt`);
    const params = JSON.parse(row.params);
    D.eq(params.seed, rq.seed, `${w} params.seed`);
    D.eq(params.max_tokens, N_TOKENS, `${w} params.max_tokens`);
    D.eq(params.ignore_eos, true, `${w} params.ignore_eos`);
    D.eq(row.prompt_tokens, rq.started.prompt_tokens, `${w} prompt_tokens`);
    D.eq(row.completion_tokens, rq.tokens, `${w} completion_tokens vs token frames streamed`);
    D.eq(row.completion, rq.text, `${w} completion vs the streamed token texts`);
    D.eq(row.finish_reason, 'length', `${w} finish_reason`);
    D.eq(row.error_code, null, `${w} error_code`);
    const { queued_at: qa, admitted_at: aa, first_token_at: fa, finished_at: za } = row;
    for (const [n, v] of Object.entries({ admitted_at: aa, first_token_at: fa, finished_at: za }))
      D.check(typeof v === 'number', `${w} ${n} is ${JSON.stringify(v)}`);
    D.check(qa <= aa && aa <= fa && fa <= za, `${w}: not queued_at <= admitted_at <= first_token_at <= finished_at: ${qa} ${aa} ${fa} ${za}`);
    const s = sessByHex.get(rq.session);
    D.check(qa >= s.connected_at && za <= s.closed_at, `${w}: request outside its session's life`);
    D.check(Math.abs(row.ttft_ms - (fa - qa)) <= TIME_EPS_MS, `${w}: ttft_ms ${row.ttft_ms} != first_token_at - queued_at ${fa - qa}`);
    D.check(Math.abs(row.queue_ms - (aa - qa)) <= TIME_EPS_MS, `${w}: queue_ms ${row.queue_ms} != admitted_at - queued_at ${aa - qa}`);
    D.check(Math.abs(row.total_ms - (za - qa)) <= TIME_EPS_MS, `${w}: total_ms ${row.total_ms} != finished_at - queued_at ${za - qa}`);
    D.check(typeof row.tokens_per_s === 'number' && row.tokens_per_s > 0, `${w}: tokens_per_s ${row.tokens_per_s}`);
    const t = rq.done.timing;
    for (const k of ['queue_ms', 'ttft_ms', 'total_ms'])
      D.check(Math.abs(t[k] - row[k]) <= TIME_EPS_MS, `${w}: done.timing.${k} ${t[k]} vs the row's ${row[k]}`);
    D.eq(row.n_tokens, N_TOKENS, `${w} request_tokens.n_tokens`);
    D.eq(row.blob_len, 4 * N_TOKENS, `${w} request_tokens.offsets_us bytes`);
    const { offsets } = D.offsetsFromHex(row.offsets_hex);
    for (let i = 1; i < offsets.length; i++)
      D.check(offsets[i] > offsets[i - 1], `${w}: offsets not increasing at ${i}: ${offsets.slice(Math.max(0, i - 2), i + 2)}`);
    const lastDiff = Math.abs(offsets[offsets.length - 1] / 1000 - row.total_ms);
    const firstDiff = Math.abs(offsets[0] / 1000 - row.ttft_ms);
    maxLastDiff = Math.max(maxLastDiff, lastDiff);
    maxTtftDiff = Math.max(maxTtftDiff, firstDiff);
    D.check(offsets[offsets.length - 1] / 1000 <= row.total_ms + 0.002, `${w}: last token offset ${offsets[offsets.length - 1]} us after total_ms ${row.total_ms}`);
    D.check(offsets[0] / 1000 >= row.ttft_ms - 0.002, `${w}: first token offset ${offsets[0]} us before ttft_ms ${row.ttft_ms}`);
    D.check(lastDiff <= TOKEN_HARD_MS, `${w}: last token offset ${offsets[offsets.length - 1]} us vs total_ms ${row.total_ms}`);
    D.check(firstDiff <= TOKEN_HARD_MS, `${w}: first token offset ${offsets[0]} us vs ttft_ms ${row.ttft_ms}`);
    if (lastDiff > TOKEN_SLACK_MS || firstDiff > TOKEN_SLACK_MS) outsideSlack++;
  }
  D.check(outsideSlack <= (1 - TOKEN_SLACK_SHARE) * reqs.length, `${outsideSlack} of ${reqs.length} requests have a token offset ` +
    `more than ${TOKEN_SLACK_MS} ms from ttft_ms / total_ms (max ${maxTtftDiff.toFixed(3)} / ${maxLastDiff.toFixed(3)} ms)`);
  D.log(`requests: ${reqs.length} load rows match their streams (text, tokens, params); timings consistent; ` +
    `token offsets: |first - ttft| max ${maxTtftDiff.toFixed(3)} ms, |last - total| max ${maxLastDiff.toFixed(3)} ms, ` +
    `${outsideSlack} requests over ${TOKEN_SLACK_MS} ms`);

  // the extra connection: the long "dup" (done), the duplicate and the over-long one (refused)
  const xr = byKey.get(`${x.hello.session}/dup`) || [];
  D.eq(xr.length, 2, `rows for ${x.hello.session}/dup (the first one and the refused duplicate)`);
  const ok = xr.find((r2) => r2.finish_reason !== null);
  const dup = xr.find((r2) => r2.finish_reason === null);
  D.check(ok && dup, () => `"dup" rows: ${JSON.stringify(xr)}`);
  D.eq(ok.finish_reason, dupDone.msg.finish_reason, 'the first "dup" finish_reason');
  D.eq(ok.completion_tokens, dupDone.msg.usage.completion_tokens, 'the first "dup" completion_tokens');
  const long = (byKey.get(`${x.hello.session}/toolong`) || [])[0];
  D.check(long, 'no row for the refused "toolong"');
  for (const [row, code, prompt] of [[dup, 'duplicate_id', 'The duplicate'], [long, longEnd.code, 'Hello world']]) {
    const w = `refused ${row.client_id} (${code})`;
    D.eq(row.error_code, code, `${w} error_code`);
    D.eq(row.finish_reason, null, `${w} finish_reason`);
    D.eq(row.prompt, prompt, `${w} prompt`);
    D.eq(row.completion_tokens, 0, `${w} completion_tokens`);
    for (const k of ['admitted_at', 'first_token_at', 'finished_at', 'queue_ms', 'ttft_ms', 'total_ms'])
      D.eq(row[k], null, `${w} ${k}`);
    D.check(typeof row.queued_at === 'number', `${w} queued_at ${row.queued_at}`);
    D.eq(row.n_tokens, null, `${w}: request_tokens row`);
  }
  for (const lr of lateReqs) {
    const hit = byKey.get(`${late.hello.session}/${lr.id}`) || [];
    D.eq(hit.length, 1, `rows for ${lr.id}`);
    D.eq(hit[0].finish_reason, 'length', `${lr.id} finish_reason (finished within --grace)`);
    D.eq(hit[0].completion_tokens, lr.tokens, `${lr.id} completion_tokens`);
    D.eq(hit[0].completion, lr.text, `${lr.id} completion`);
    D.eq(hit[0].n_tokens, lr.tokens, `${lr.id} request_tokens.n_tokens`);
    D.check(hit[0].finished_at <= tStop, `${lr.id} finished_at after the exit`);
  }
  D.log(`requests running at the SIGTERM: finished (${LATE_TOKENS} tokens each) and logged before the exit`);
  D.log(`refused requests logged: duplicate_id and ${longEnd.code}, with no finish_reason and no timings`);

  // steps: sampled, at most one per policy every 100 ms
  const lifeS = (tStop - tStart) / 1000;
  const steps = D.q(db, 'SELECT policy, at, step, batch_size, step_ms FROM steps ORDER BY policy, at');
  const counts = {};
  for (const pol of ['iterative', 'static']) {
    const ps = steps.filter((s) => s.policy === pol);
    counts[pol] = ps.length;
    D.check(ps.length >= 1, `no steps rows for ${pol}`);
    const bound = Math.ceil(lifeS * 10) + 1;
    D.check(ps.length <= bound, `${ps.length} steps rows for ${pol} in a ${lifeS.toFixed(2)} s life (at most ${bound})`);
    for (let i = 1; i < ps.length; i++)
      D.check(ps[i].at - ps[i - 1].at >= 100 - 0.01, `${pol}: steps rows ${(ps[i].at - ps[i - 1].at).toFixed(2)} ms apart (at ${ps[i].at})`);
    for (const s of ps) {
      D.check(s.batch_size >= 1 && s.step_ms >= 0, `${pol} step ${s.step}: batch_size ${s.batch_size} step_ms ${s.step_ms}`);
      D.check(s.at >= tStart - 1000 && s.at <= tStop + 1000, `${pol} step ${s.step} at ${s.at}: outside the run`);
    }
  }
  D.eq(steps.length, counts.iterative + counts.static, 'steps rows of other policies');
  D.log(`steps: ${counts.iterative} iterative + ${counts.static} static rows over a ${lifeS.toFixed(2)} s server life, >= 100 ms apart per policy`);

  const st = D.inflightDb(bin, vocab, ['status', '--db', db]);
  D.eq(st.status, 0, `inflight db status exit status (${st.out})`);
  D.check(/up to date/.test(st.out), `inflight db status does not say up to date:\n${st.out}`);
  D.check(new RegExp(`requests\\s+${nReqRows} rows`).test(st.out), `inflight db status does not count ${nReqRows} requests:\n${st.out}`);
  D.log(`inflight db status:\n${st.out}`);

  await graceTooShort(bin, vocab, dir);
});
