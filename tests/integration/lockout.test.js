'use strict';
// lockout: one client must not lock others out (engine/batcher_share.c), with the default limits
// (max_queue 256, max_batch 64, 64 requests in flight per connection, the request log on). Five
// greedy WebSocket connections keep 64 requests each in flight: every done or refusal is followed
// by a new request after at most 20 ms, whatever retry_after_ms said. Meanwhile a newcomer comes
// once a second, each time on a fresh connection with one request: it must be queued and served
// every time, never queue_full. Before the shares, all 35 of 35 such newcomers got queue_full: the
// 256 places went to the five. The greedy ones must see queue_full naming their share or the
// places kept for newcomers, with a retry_after_ms, and each must still be served. The verdicts
// are what the server decided (frames), not how long anything took; times are printed only: the
// waits below wait for the server's answers (a limit of minutes only stops a hang). Under ASan the
// sizes are the quick ones (CMake sets IFL_TEST_QUICK): a round of 64 requests of 48 tokens takes ~37 s there.
// The request log keeps a budget of refusals per client address and for all clients
// (server/reqlog.h): the rest are counted in inflight_request_log_refusals_skipped_total.
const path = require('path');
const L = require('./lib');
const D = require('../db/dblib');

const GREEDY = 5;
const PER_CONN = 64;
const NEWCOMERS = L.QUICK ? 4 : 10;
const GREEDY_TOKENS = L.QUICK ? 8 : 48;
const NEW_TOKENS = 8;

L.main('lockout', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3();
  const dir = L.tmpDir('lockout');
  const db = path.join(dir, 'log.db');
  const t0All = L.now();
  const model = L.makeModel(bin, vocab);
  const srv = await L.startServer(bin, vocab, model, ['--db', db]);

  const greedy = [];
  let stopping = false;
  for (let g = 0; g < GREEDY; g++) {
    const c = await L.Client.open(srv.port, { name: `greedy${g}` });
    // answered: how many of its first PER_CONN requests were queued or refused
    const st = { c, sent: 0, done: 0, full: 0, answered: new Set(), fullReasons: new Set(), retryMin: Infinity, retryMax: 0, other: [] };
    const first = (id) => Number(id.slice(id.indexOf('-') + 1)) < PER_CONN;
    const sendOne = () => {
      if (stopping) return;
      const id = `g${g}-${st.sent++}`;
      c.send({ type: 'generate', id, prompt: 'Hello world', max_tokens: GREEDY_TOKENS, ignore_eos: true, seed: st.sent });
    };
    c.onFrame = (f) => {
      const m = f.msg;
      if ((m.type === 'queued' || m.type === 'error') && typeof m.id === 'string' && first(m.id)) st.answered.add(m.id);
      if (m.type === 'done') {
        st.done++;
        sendOne();
      } else if (m.type === 'error') {
        if (m.code === 'queue_full') {
          st.full++;
          const why = /its share while/.test(m.message) ? 'share' : /keeps its last/.test(m.message) ? 'kept places'
            : /queue is full/.test(m.message) ? 'full' : `? ${m.message}`;
          st.fullReasons.add(why);
          if (typeof m.retry_after_ms === 'number') {
            st.retryMin = Math.min(st.retryMin, m.retry_after_ms);
            st.retryMax = Math.max(st.retryMax, m.retry_after_ms);
          } else {
            st.other.push(`queue_full without retry_after_ms: ${JSON.stringify(m)}`);
          }
          setTimeout(sendOne, Math.min(20, m.retry_after_ms || 20));
        } else {
          st.other.push(JSON.stringify(m));
        }
      }
    };
    for (let i = 0; i < PER_CONN; i++) sendOne();
    greedy.push(st);
  }
  // the five have filled what they may: the server answered each of their first requests (the
  // first ones to connect may all be queued: the shares count the sessions waiting at arrival)
  await L.until(() => greedy.every((s) => s.answered.size === PER_CONN), 30000,
    `each greedy connection's first ${PER_CONN} requests to be queued or refused`);
  const m0 = await L.fetchMetrics(srv.port);
  const waiting0 = m0.get('inflight_requests_waiting', { policy: 'iterative' });
  L.log(`five greedy connections: ${waiting0} requests waiting, refusals so far ` +
    `${greedy.map((s) => s.full).join(', ')}`);

  const served = [];
  for (let n = 0; n < NEWCOMERS; n++) {
    const t0 = L.now();
    const c = await L.Client.open(srv.port, { name: `newcomer${n}` });
    const r = await c.request({ id: 'only', prompt: 'A newcomer asks', max_tokens: NEW_TOKENS, ignore_eos: true }, 300000);
    L.check(!r.error, () => `newcomer ${n} was refused: ${JSON.stringify(r.error)}`);
    L.eq(r.done && r.done.finish_reason, 'length', `newcomer ${n}: finish_reason`);
    L.eq(r.tokens.length, NEW_TOKENS, `newcomer ${n}: tokens`);
    const queued = r.frames.find((f) => f.msg.type === 'queued');
    const started = r.frames.find((f) => f.msg.type === 'started');
    served.push({ pos: queued ? queued.msg.position : null, startMs: started ? started.t - t0 : null, ms: L.now() - t0 });
    c.close();
    await c.closed;
    const wait = 1000 - (L.now() - t0);
    if (wait > 0) await L.sleep(wait);
  }
  // each greedy one has had a request served and one refused (a connection that got all its first
  // requests queued is refused once one of them is done: its next request is over its share)
  await L.until(() => greedy.every((s) => s.done > 0 && s.full > 0), 300000,
    'each greedy connection to have a request done and one refused');
  stopping = true;
  L.log(`${NEWCOMERS} of ${NEWCOMERS} newcomers served, none refused; queued at position ` +
    `${served.map((s) => s.pos).join(', ')}; started after ${served.map((s) => Math.round(s.startMs)).join(', ')} ms ` +
    '(information)');

  for (const [g, s] of greedy.entries()) {
    L.check(s.other.length === 0, () => `greedy${g}: unexpected frames: ${s.other.slice(0, 3).join('\n')}`);
    L.check(s.done > 0, () => `greedy${g}: none of its requests finished`);
    L.check(!Array.from(s.fullReasons).some((r) => r.startsWith('?')), () => `greedy${g}: queue_full for ${Array.from(s.fullReasons)}`);
    L.check(s.retryMin >= 50 && s.retryMax <= 30000, () => `greedy${g}: retry_after_ms from ${s.retryMin} to ${s.retryMax}`);
    L.log(`greedy${g}: ${s.done} done, ${s.full} queue_full (${Array.from(s.fullReasons).join(', ')}), ` +
      `retry_after_ms ${s.retryMin}-${s.retryMax}`);
  }
  for (const s of greedy) s.c.close();
  await Promise.all(greedy.map((s) => s.c.closed));
  srv.assertAlive();
  const m1 = await L.fetchMetrics(srv.port);
  const skipped = m1.get('inflight_request_log_refusals_skipped_total');
  // the server's own count: a refusal of a request sent just before a greedy client closed can
  // reach the server, and the log, after the client stopped reading frames
  const refusedByServer = m1.get('inflight_errors_total', { code: 'queue_full' });
  const elapsedS = (L.now() - t0All) / 1000;
  await srv.stop(60000);
  const refusals = greedy.reduce((a, s) => a + s.full, 0);
  const logged = Number(D.scalar(db, "SELECT count(*) FROM requests WHERE error_code = 'queue_full'"));
  const bound = GREEDY * (32 + 4 * elapsedS);
  L.check(logged <= bound, () => `${logged} queue_full rows for ${refusals} refusals in ${elapsedS.toFixed(1)} s: ` +
    `over the budget of ${bound.toFixed(0)}`);
  L.check(refusals <= refusedByServer, () => `the clients saw ${refusals} queue_full, the server counted ${refusedByServer}`);
  L.eq(logged + skipped, refusedByServer, 'queue_full rows + refusals not logged, against the server\'s queue_full count');
  const ic = D.integrityCheck(db);
  L.check(ic.ok, () => `integrity_check: ${ic.out}`);
  L.log(`request log: ${logged} of ${refusedByServer} refusals kept (the clients saw ${refusals}) (budget ${bound.toFixed(0)} over ${elapsedS.toFixed(1)} s), ` +
    `${skipped} counted in inflight_request_log_refusals_skipped_total`);
}, { deadlineS: 600 });
