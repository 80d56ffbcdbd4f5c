'use strict';
// db_retention: --retain-requests and --retain-days, applied by the server when it starts (and
// every 60 s after, which is not waited for here).
//  1. A first server run logs 50 requests: 5 sessions one after the other, 10 requests each, each
//     session closed before the next opens. Stop (SIGTERM).
//  2. Control: a restart with no retention option deletes nothing.
//  3. Restart with --retain-requests 10: within a few seconds of start-up (no request sent) only the
//     newest 10 requests remain (the highest ids, the last session's), with their request_tokens
//     rows and no others (no orphan offsets), the 4 sessions left without requests are removed,
//     steps older than the oldest request kept are gone, inflight_db_retention_deleted_total 40,
//     integrity and foreign keys ok.
//  4. A run without retention adds 3 more sessions of 5 requests. Stopped, the file is edited with
//     the sqlite3 shell to age whole sessions (every timestamp of the session and its requests
//     shifted back): two sessions by 3 days, one by 1.5 days, one left as it was. Restart with
//     --retain-days 2: the requests of the two 3-day-old sessions are deleted (and their token rows
//     and sessions), the others stay. Restart with --retain-days 1: the 1.5-day-old session goes too.
//  5. A session of a server killed with SIGKILL (closed_at never written), then a normal session;
//     restart with --retain-requests 3: the crashed session, left without requests, is removed like
//     any other orphan (only the last session remains).
const D = require('./dblib');

const DAY_MS = 86400e3;

async function startWith(bin, vocab, model, db, extra) {
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log', ...extra]);
  return srv;
}

// Sessions one after the other, each with nReq requests run one by one, closed before the next.
async function logSessions(srv, nSessions, nReq, tag) {
  const out = [];
  for (let s = 0; s < nSessions; s++) {
    const c = await D.Client.open(srv.port, { name: `${tag}${s}` });
    for (let i = 0; i < nReq; i++) {
      const r = await c.request({ id: `${tag}${s}-${i}`, prompt: 'Keep it short', max_tokens: 3, seed: i, ignore_eos: true,
        model: i % 2 ? 'static' : 'iterative' });
      D.check(r.done, `${tag}${s}-${i}: no done`);
    }
    c.close();
    await c.closed;
    out.push(c.hello.session);
  }
  await D.waitDrained(srv.port);
  // the session closes are queued when the server sees the close: wait for them to be written
  await D.until(async () => (await D.dbMetrics(srv.port)).written.session_close >= nSessions, 10000, 'the session closes to be written');
  return out;
}

function counts(db) {
  return D.q(db, 'SELECT (SELECT count(*) FROM requests) AS requests, (SELECT count(*) FROM request_tokens) AS tokens, ' +
    '(SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM steps) AS steps')[0];
}

function sessionOfRequests(db) {
  return D.q(db, 'SELECT s.session, count(r.id) AS n FROM sessions s LEFT JOIN requests r ON r.session_id = s.id GROUP BY s.id ORDER BY s.id');
}

function checkConsistent(db, what) {
  const ic = D.integrityCheck(db);
  D.check(ic.ok, `${what}: integrity_check: ${ic.out}`);
  D.eq(D.q(db, 'PRAGMA foreign_key_check').length, 0, `${what}: foreign_key_check rows`);
  D.eq(D.scalar(db, 'SELECT count(*) FROM request_tokens WHERE request_id NOT IN (SELECT id FROM requests)'), 0,
    `${what}: request_tokens rows without their request`);
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests r LEFT JOIN request_tokens t ON t.request_id = r.id WHERE t.request_id IS NULL'), 0,
    `${what}: requests without their token offsets`);
}

// Waits (at most timeoutMs after start-up, sending nothing) for the requests table to reach `want`
// rows; fails if it does not, or if it goes below.
async function waitRetention(srv, db, want, what, timeoutMs = 8000) {
  const t0 = D.now();
  let n;
  await D.until(() => {
    n = D.scalar(db, 'SELECT count(*) FROM requests');
    return n <= want;
  }, timeoutMs, `${what}: ${want} requests left`, 50).catch((e) => D.fail(`${e.message} (${n} left)`));
  D.eq(n, want, `${what}: requests left`);
  return D.now() - t0;
}

D.main('db_retention', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const dir = D.tmpDir('dbret');
  const db = `${dir}/log.db`;
  const model = D.makeModel(bin, vocab, [], 'dbret-model');

  // 1
  let srv = await startWith(bin, vocab, model, db, []);
  const first = await logSessions(srv, 5, 10, 's');
  await srv.stop();
  const c1 = counts(db);
  D.eq(c1.requests, 50, '1: requests logged');
  D.eq(c1.tokens, 50, '1: request_tokens rows');
  D.eq(c1.sessions, 5, '1: sessions');
  D.check(c1.steps >= 2, `1: steps rows ${c1.steps}`);
  D.log(`1: first run logged ${JSON.stringify(c1)}`);

  // 2: control
  srv = await startWith(bin, vocab, model, db, []);
  await D.sleep(1500);
  const m2 = await D.dbMetrics(srv.port);
  D.eq(JSON.stringify(counts(db)), JSON.stringify(c1), '2: counts after a start without retention');
  await srv.stop();
  D.log(`2: restart without retention: nothing deleted (retention_deleted_total ${m2.retentionDeleted})`);

  // 3: --retain-requests 10
  const ids = D.q(db, 'SELECT id FROM requests ORDER BY id').map((r) => r.id);
  const newest = ids.slice(-10);
  const oldestKept = D.scalar(db, `SELECT queued_at FROM requests WHERE id = ${newest[0]}`);
  srv = await startWith(bin, vocab, model, db, ['--retain-requests', '10']);
  const ms3 = await waitRetention(srv, db, 10, '3: --retain-requests 10');
  const m3 = await D.dbMetrics(srv.port);
  D.eq(m3.retentionDeleted, 40, '3: inflight_db_retention_deleted_total');
  await D.sleep(300);
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), 10, '3: requests a moment later');
  await srv.stop();
  const kept = D.q(db, 'SELECT id FROM requests ORDER BY id').map((r) => r.id);
  D.eq(JSON.stringify(kept), JSON.stringify(newest), '3: the requests kept are the newest 10');
  D.eq(D.scalar(db, 'SELECT count(*) FROM request_tokens'), 10, '3: request_tokens rows');
  D.eq(JSON.stringify(D.q(db, 'SELECT request_id FROM request_tokens ORDER BY request_id').map((r) => r.request_id)), JSON.stringify(newest),
    '3: request_tokens of the kept requests');
  const s3 = sessionOfRequests(db);
  D.eq(JSON.stringify(s3.map((s) => [s.session, s.n])), JSON.stringify([[first[4], 10]]), '3: sessions left (only the last, with its 10)');
  D.eq(D.scalar(db, `SELECT count(*) FROM steps WHERE at < ${oldestKept}`), 0, '3: steps older than the oldest request kept');
  checkConsistent(db, '3');
  const c3 = counts(db);
  D.log(`3: --retain-requests 10: 10 left ${ms3.toFixed(0)} ms after the server was ready (no request sent): ids ${kept[0]}..${kept[9]}; ` +
    `${JSON.stringify(c3)}; the 4 sessions left without requests removed; retention_deleted_total ${m3.retentionDeleted}`);

  // 4: --retain-days
  srv = await startWith(bin, vocab, model, db, []);
  const more = await logSessions(srv, 3, 5, 't');
  await srv.stop();
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), 25, '4: requests before aging');
  const age = (session, days) => {
    const d = days * DAY_MS;
    D.exec(db, `BEGIN;
      UPDATE requests SET queued_at = queued_at - ${d}, admitted_at = admitted_at - ${d}, first_token_at = first_token_at - ${d},
        finished_at = finished_at - ${d} WHERE session_id = (SELECT id FROM sessions WHERE session = ${D.sqlStr(session)});
      UPDATE sessions SET connected_at = connected_at - ${d}, closed_at = closed_at - ${d} WHERE session = ${D.sqlStr(session)};
      COMMIT;`);
  };
  age(first[4], 3);
  age(more[0], 3);
  age(more[1], 1.5);
  const before = sessionOfRequests(db);
  D.log(`4: aged: ${first[4]} and ${more[0]} by 3 days, ${more[1]} by 1.5 days, ${more[2]} not; per session: ${JSON.stringify(before.map((s) => [s.session, s.n]))}`);

  // control again: aged rows stay without the option
  srv = await startWith(bin, vocab, model, db, []);
  await D.sleep(1000);
  D.eq(D.scalar(db, 'SELECT count(*) FROM requests'), 25, '4: requests after a start without retention');
  await srv.stop();

  srv = await startWith(bin, vocab, model, db, ['--retain-days', '2']);
  const ms4 = await waitRetention(srv, db, 10, '4: --retain-days 2');
  const m4 = await D.dbMetrics(srv.port);
  D.eq(m4.retentionDeleted, 15, '4: inflight_db_retention_deleted_total (--retain-days 2)');
  await srv.stop();
  const s4 = sessionOfRequests(db);
  D.eq(JSON.stringify(s4.map((s) => [s.session, s.n])), JSON.stringify([[more[1], 5], [more[2], 5]]), '4: sessions left after --retain-days 2');
  D.eq(D.scalar(db, `SELECT count(*) FROM requests WHERE queued_at < ${Date.now() - 2 * DAY_MS}`), 0, '4: requests older than 2 days');
  checkConsistent(db, '4 (2 days)');
  D.log(`4: --retain-days 2: ${ms4.toFixed(0)} ms after ready, 15 deleted (the two 3-day-old sessions and their token rows), ` +
    `left ${JSON.stringify(s4.map((s) => [s.session, s.n]))}`);

  srv = await startWith(bin, vocab, model, db, ['--retain-days', '1']);
  const ms5 = await waitRetention(srv, db, 5, '4: --retain-days 1');
  await srv.stop();
  const s5 = sessionOfRequests(db);
  D.eq(JSON.stringify(s5.map((s) => [s.session, s.n])), JSON.stringify([[more[2], 5]]), '4: sessions left after --retain-days 1');
  checkConsistent(db, '4 (1 day)');
  D.log(`4: --retain-days 1: ${ms5.toFixed(0)} ms after ready, the 1.5-day-old session deleted; left ${JSON.stringify(counts(db))}`);

  // 5: a session of a server that died (SIGKILL) never gets its closed_at; once its requests are
  // gone it is an orphan like the others
  srv = await startWith(bin, vocab, model, db, []);
  const cx = await D.Client.open(srv.port, { name: 'crashed' });
  for (let i = 0; i < 3; i++) D.check((await cx.request({ id: `x${i}`, prompt: 'Before the crash', max_tokens: 2, seed: i })).done, `x${i}`);
  await D.waitDrained(srv.port);
  await D.killServer(srv, 'SIGKILL');
  srv = await startWith(bin, vocab, model, db, []);
  const y = await logSessions(srv, 1, 3, 'y');
  await srv.stop();
  const crashed = D.q(db, `SELECT closed_at FROM sessions WHERE session = ${D.sqlStr(cx.hello.session)}`);
  D.eq(crashed.length, 1, '5: the crashed server\'s session row');
  srv = await startWith(bin, vocab, model, db, ['--retain-requests', '3']);
  await waitRetention(srv, db, 3, '5: --retain-requests 3');
  await D.sleep(300);
  await srv.stop();
  const s6 = sessionOfRequests(db);
  checkConsistent(db, '5');
  D.log(`5: sessions after --retain-requests 3: ${JSON.stringify(s6.map((x) => [x.session, x.n]))} (crashed session ${cx.hello.session}, ` +
    `closed_at ${crashed[0].closed_at} before the restart; ${more[2]} closed normally)`);
  D.eq(JSON.stringify(s6.map((x) => [x.session, x.n])), JSON.stringify([[y[0], 3]]),
    `5: sessions left (the crashed server's session ${cx.hello.session}, left without requests, must go too)`);
});
