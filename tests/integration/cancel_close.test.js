'use strict';
// cancel_close:
//  (a) cancel: a running request (both policies) cancelled after a few tokens ends with done
//      {finish_reason: cancelled}, with at most 2 tokens generated after the server read the cancel
//      (measured with a ping sent right behind the cancel: frames queued before the pong were queued
//      before the cancel was handled; the tokens after the client sent it, and the time to the done,
//      are logged: they depend on how fast this machine is); a waiting request is cancelled at once
//      (no started, no tokens); cancelling an unknown or finished id is an error unknown_id.
//  (b) close frees KV: a client with 4 long requests (2 iterative, 2 static: running, or the second
//      waiting behind the first's batch) is terminated abruptly
//      (TCP reset, no close frame). The server must cancel them: KV blocks and running counts back to
//      what the one other stream uses within a short time (at most STEP_BOUND steps of each policy
//      containing the closed requests start after the server handled the close: the step frames of
//      a subscriber, whose start times are the server's clock, against the closed_at the server
//      stamped on the connection's session in its request log, --db), the step frame after them
//      shows the KV back at the other stream's level, requests_total{cancelled} grows by 2 per
//      policy, and the other client's stream, running all along, completes with all its tokens.
const L = require('./lib');
const D = require('../db/dblib');

const STEP_BOUND = 2; // steps (per policy) holding the closed requests that may start after the close
// IFL_TEST_QUICK (the sanitizer stages: ThreadSanitizer without BLAS takes ~0.5 s a token row of the
// 4-layer model on a busy 2-core machine): the default 2-layer model and a shorter parallel stream
const MODEL = L.QUICK ? ['--n-ctx', '512'] : ['--n-layer', '4', '--n-embd', '256', '--n-head', '4', '--n-ctx', '512'];
const P_TOKENS = L.QUICK ? 160 : 480;
const METRICS_BOUND_MS = 15000; // a timeout (ASan on a busy 2-core machine: 1.8 s seen); the step count is the check

async function cancelRunning(srv, policy) {
  const c = await L.Client.open(srv.port, { name: `cancel-${policy}` });
  const id = `long-${policy}`;
  c.send({ type: 'generate', id, prompt: 'A very long story about cancellation', model: policy,
    max_tokens: 400, seed: 3, ignore_eos: true });
  await c.waitFor((f) => f.msg.type === 'token' && f.msg.id === id && f.msg.index >= 4, 120000, 'token 4');
  // setImmediate: every frame node had already read is handled before the cancel goes out
  const sent = await new Promise((resolve) => setImmediate(() => {
    const toks = c.framesFor(id).filter((f) => f.msg.type === 'token');
    const lastIndex = toks[toks.length - 1].msg.index;
    const at = L.now();
    c.send({ type: 'cancel', id });
    c.send({ type: 'ping', id: 'after-cancel' });
    resolve({ lastIndex, at, nFrames: c.frames.length });
  }));
  const done = await c.waitEnd(id, 60000);
  const doneFrame = c.framesFor(id).find((f) => f.msg.type === 'done');
  const pong = await c.waitFor((f) => f.msg.type === 'pong' && f.msg.id === 'after-cancel', 30000, 'pong');
  const r = L.checkRequestFrames(c.framesFor(id), id, { model: policy, finish: 'cancelled' });
  const afterSent = r.tokens.filter((t) => t.index > sent.lastIndex).length;
  const toks = c.framesFor(id).filter((f) => f.msg.type === 'token');
  const afterPong = toks.filter((f) => f.seq > pong.seq).length;
  const latency = doneFrame.t - sent.at;
  L.log(`cancel ${policy}: cancel sent after token ${sent.lastIndex}; done(${done.finish_reason}) ` +
    `${latency.toFixed(1)} ms later with completion_tokens ${done.usage.completion_tokens}; tokens received ` +
    `after the cancel was sent: ${afterSent}; tokens queued after the server handled it (after the pong): ${afterPong}`);
  L.eq(done.finish_reason, 'cancelled', `${id} finish_reason`);
  L.check(afterPong <= 2, `${policy}: ${afterPong} tokens were generated after the server handled the cancel (at most 2: the step in flight)`);
  L.check(r.tokens.length < 400, `${policy}: the request ran to its end`);

  // the id is no longer in flight: cancelling again is unknown_id
  c.send({ type: 'cancel', id });
  const e = await c.waitFor((f) => f.msg.type === 'error' && f.msg.id === id, 30000, 'unknown_id error');
  L.eq(e.msg.code, 'unknown_id', 'second cancel of a finished request');
  c.assertNoViolations();
  c.close();
  await c.closed;
  return { afterSent, afterPong, latency };
}

L.main('cancel_close', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3(); // the close time the server stamped is read from its request log
  const model = L.makeModel(bin, vocab, MODEL, 'cancel-model');
  const db = `${L.tmpDir('cancel-db')}/log.db`;
  const srv = await L.startServer(bin, vocab, model, ['--kv-mem-mb', '64', '--no-request-log', '--db', db]);
  const m0 = await L.fetchMetrics(srv.port);

  // ---- (a) cancel ----
  await cancelRunning(srv, 'iterative');
  await cancelRunning(srv, 'static');

  {
    const c = await L.Client.open(srv.port, { name: 'cancel-misc' });
    // unknown id
    c.send({ type: 'cancel', id: 'never-sent' });
    const e = await c.waitFor((f) => f.msg.type === 'error', 30000, 'error for an unknown id');
    L.eq(e.msg.code, 'unknown_id', 'cancel of an unknown id: code');
    L.eq(e.msg.id, 'never-sent', 'cancel of an unknown id: error id');
    L.log(`cancel unknown id -> ${JSON.stringify(e.msg)}`);
    // a waiting request (static: a batch is running, the second one queues) is cancelled at once
    c.send({ type: 'generate', id: 'run', prompt: 'First in line', model: 'static', max_tokens: 480, seed: 1, ignore_eos: true });
    await c.waitFor((f) => f.msg.type === 'token' && f.msg.id === 'run', 60000, 'the running request');
    c.send({ type: 'generate', id: 'wait', prompt: 'Second in line', model: 'static', max_tokens: 50, seed: 2, ignore_eos: true });
    await c.waitFor((f) => f.msg.type === 'queued' && f.msg.id === 'wait', 30000, 'queued of the waiting request');
    const t = L.now();
    c.send({ type: 'cancel', id: 'wait' });
    const d = await c.waitEnd('wait', 30000);
    const ms = L.now() - t;
    const types = c.framesFor('wait').map((f) => f.msg.type);
    L.log(`cancel waiting (static): frames ${types.join(',')}, done ${ms.toFixed(1)} ms after the cancel: ${JSON.stringify(d)}`);
    L.eq(d.type, 'done', 'waiting request ends with done');
    L.eq(d.finish_reason, 'cancelled', 'waiting request finish_reason');
    L.eq(d.usage.completion_tokens, 0, 'waiting request completion_tokens');
    L.check(!types.includes('started') && !types.includes('token'), `the waiting request was started: ${types}`);
    L.check(types.slice(0, -1).every((x) => x === 'queued'), `waiting request frames ${types}`);
    const run = c.framesFor('run');
    L.check(!run.some((f) => f.msg.type === 'done'), 'the running request ended before the waiting one was cancelled: the test says nothing');
    c.send({ type: 'cancel', id: 'run' });
    const d2 = await c.waitEnd('run', 60000);
    L.eq(d2.finish_reason, 'cancelled', 'running static request cancelled');
    c.assertNoViolations();
    c.close();
    await c.closed;
  }

  // ---- (b) an abrupt close frees the KV within a step ----
  const m1 = await L.fetchMetrics(srv.port);
  const sub = await L.Client.open(srv.port, { name: 'subscriber' });
  sub.send({ type: 'subscribe', topic: 'steps' });
  await sub.waitFor((f) => f.msg.type === 'subscribed', 30000, 'subscribed');
  const startS = (await L.fetchMetrics(srv.port)).get('inflight_start_time_seconds');

  const p = await L.Client.open(srv.port, { name: 'parallel' });
  p.send({ type: 'generate', id: 'p', prompt: 'Meanwhile', model: 'iterative', max_tokens: P_TOKENS, seed: 9, ignore_eos: true });
  const pStarted = (await p.waitFor((f) => f.msg.type === 'started', 60000, 'P started')).msg;
  await p.waitFor((f) => f.msg.type === 'token' && f.msg.index >= 3, 60000, 'P token 3');
  // P's KV alone, from the step frames that hold only P
  const onlyP = await sub.waitFor((f) => f.msg.type === 'step' && f.msg.model === 'iterative' &&
    f.msg.seqs.length === 1 && f.msg.seqs[0][0] === pStarted.rid && f.msg.seqs[0][1] === 0, 60000, 'a step with P alone');
  const kvP = onlyP.msg.kv_used;
  L.log(`P (rid ${pStarted.rid}) alone holds ${kvP} KV blocks (iterative)`);

  const x = await L.Client.open(srv.port, { name: 'to-be-closed' });
  const xs = [['x0', 'iterative'], ['x1', 'static'], ['x2', 'iterative'], ['x3', 'static']];
  for (const [id, pol] of xs)
    x.send({ type: 'generate', id, prompt: `Closing request ${id}`, model: pol, max_tokens: 200, seed: 20, ignore_eos: true });
  // x0, x1, x2 run (x1 alone in a static batch); x3 waits for x1's static batch to end
  for (const id of ['x0', 'x1', 'x2'])
    await x.waitFor((f) => f.msg.type === 'token' && f.msg.id === id && f.msg.index >= 2, 120000, `${id} token 2`);
  await x.waitFor((f) => f.msg.type === 'queued' && f.msg.id === 'x3', 120000, 'x3 queued');
  // x3 joined x1's batch if both were queued before the static batcher admitted x1
  const x3Started = x.framesFor('x3').some((f) => f.msg.type === 'started');
  if (x3Started)
    await x.waitFor((f) => f.msg.type === 'token' && f.msg.id === 'x3' && f.msg.index >= 2, 120000, 'x3 token 2');
  L.log(`x3 ${x3Started ? 'runs in x1\'s static batch' : 'waits behind x1\'s static batch'}`);
  const rids = { iterative: new Set(), static: new Set() };
  for (const [id, pol] of xs) rids[pol].add(x.framesFor(id).find((f) => f.msg.type === 'queued').msg.rid);
  const mBefore = await L.fetchMetrics(srv.port);
  const kvBefore = { iterative: mBefore.get('inflight_kv_blocks_used', { policy: 'iterative' }),
    static: mBefore.get('inflight_kv_blocks_used', { policy: 'static' }) };
  L.log(`before the close: kv_blocks_used ${JSON.stringify(kvBefore)}, running ` +
    `${mBefore.get('inflight_requests_running', { policy: 'iterative' })}/${mBefore.get('inflight_requests_running', { policy: 'static' })}, ` +
    `static waiting ${mBefore.get('inflight_requests_waiting', { policy: 'static' })}; ` +
    `closed rids ${JSON.stringify({ iterative: [...rids.iterative], static: [...rids.static] })}`);
  L.check(kvBefore.iterative > kvP && kvBefore.static > 0, 'the requests to close hold no KV: nothing to check');

  const closeWall = Date.now();
  const closeMono = L.now();
  x.terminate();
  let polls = 0;
  await L.until(async () => {
    polls++;
    const m = await L.fetchMetrics(srv.port);
    const ok = m.get('inflight_kv_blocks_used', { policy: 'iterative' }) === kvP &&
      m.get('inflight_kv_blocks_used', { policy: 'static' }) === 0 &&
      m.get('inflight_requests_running', { policy: 'iterative' }) === 1 &&
      m.get('inflight_requests_running', { policy: 'static' }) === 0 &&
      m.get('inflight_requests_waiting', { policy: 'static' }) === 0;
    return ok && m;
  }, METRICS_BOUND_MS, `KV blocks back to P's ${kvP} (iterative) and 0 (static), running 1/0, static waiting 0`, 5);
  const freedMs = L.now() - closeMono;
  const pDoneYet = p.framesFor('p').some((f) => f.msg.type === 'done');
  L.check(!pDoneYet, 'P finished before the KV check: the check is meaningless (model too fast?)');
  L.log(`after the close: KV back to ${kvP}/0 and running 1/0, waiting 0 within ${freedMs.toFixed(1)} ms (${polls} polls of /metrics)`);

  // when the server handled the close: the closed_at it stamped on the session (Unix ms, written by
  // the request log's thread: waited for), before it cancelled the connection's requests
  await D.waitDrained(srv.port);
  const sess = D.q(db, `SELECT closed_at, close_reason FROM sessions WHERE session = ${D.sqlStr(x.hello.session)}`);
  L.check(sess.length === 1 && typeof sess[0].closed_at === 'number', `the closed connection's session row: ${JSON.stringify(sess)}`);
  const closedAt = sess[0].closed_at;
  L.log(`the server closed session ${x.hello.session} at ${closedAt.toFixed(3)} (${(closedAt - closeWall).toFixed(1)} ms after the ` +
    `client's terminate by the two clocks), close_reason ${JSON.stringify(sess[0].close_reason)}`);
  // the step frames: how many steps holding the closed requests started after the server's close
  // (a step's start on the server's clock: inflight_start_time_seconds + t_ms)
  // P still runs: wait for an iterative step without the closed requests that started after the close
  await sub.waitFor((f) => f.msg.type === 'step' && f.msg.model === 'iterative' && startS * 1000 + f.msg.t_ms > closedAt &&
    !f.msg.seqs.some(([rid]) => rids.iterative.has(rid)), 60000, 'an iterative step after the close without the closed requests');
  await sub.ping(); // all step frames up to now are in
  const steps = sub.frames.filter((f) => f.msg.type === 'step').map((f) => f.msg);
  for (const pol of ['iterative', 'static']) {
    const mine = steps.filter((s) => s.model === pol);
    const holds = (s) => s.seqs.some(([rid]) => rids[pol].has(rid));
    const after = mine.filter((s) => startS * 1000 + s.t_ms > closedAt && holds(s));
    const afterClient = mine.filter((s) => startS * 1000 + s.t_ms > closeWall && holds(s)).length;
    let lastHold = -1;
    mine.forEach((s, i) => {
      if (holds(s)) lastHold = i;
    });
    const next = mine[lastHold + 1];
    const dropped = steps.reduce((a, s) => a + s.dropped, 0);
    L.log(`${pol}: ${after.length} step(s) holding the closed requests started after the server's close ` +
      `(${afterClient} after the client's terminate, information) ` +
      `(steps ${after.map((s) => s.step).join(',') || '-'}); last such step ${mine[lastHold] && mine[lastHold].step} ` +
      `kv_used ${mine[lastHold] && mine[lastHold].kv_used}; next step ${next ? `${next.step}: kv_used ${next.kv_used}, seqs ${JSON.stringify(next.seqs)}` : 'none'}` +
      `; step frames dropped: ${dropped}`);
    L.eq(dropped, 0, 'step frames dropped for the subscriber (the step count would be unreliable)');
    L.check(after.length <= STEP_BOUND, `${pol}: ${after.length} steps holding the closed requests started after the close (bound ${STEP_BOUND})`);
    if (pol === 'iterative') L.check(next, 'no iterative step after the closed requests');
    if (next) {
      L.eq(next.kv_used, pol === 'iterative' ? kvP : 0, `${pol}: kv_used of the first step after the closed requests`);
      L.check(!holds(next), 'next step');
    }
  }

  const pEnd = await p.waitEnd('p', 300000);
  const pr = L.checkRequestFrames(p.framesFor('p'), 'p', { model: 'iterative', n: P_TOKENS, finish: 'length' });
  L.log(`P completed: ${pr.tokens.length} tokens, finish ${pEnd.finish_reason}`);
  p.assertNoViolations();
  sub.assertNoViolations();

  const m2 = await L.until(async () => {
    const m = await L.fetchMetrics(srv.port);
    return m.get('inflight_kv_blocks_used', { policy: 'iterative' }) === 0 && m;
  }, 10000, 'iterative KV back to 0 after P');
  for (const pol of ['iterative', 'static']) {
    const d = m2.get('inflight_requests_total', { policy: pol, finish_reason: 'cancelled' }) -
      m1.get('inflight_requests_total', { policy: pol, finish_reason: 'cancelled' });
    L.eq(d, 2, `requests_total{${pol},cancelled} increase from the closed connection`);
    L.eq(m2.get('inflight_kv_blocks_used', { policy: pol }), 0, `kv_blocks_used{${pol}} at the end`);
    L.eq(m2.get('inflight_requests_running', { policy: pol }), 0, `requests_running{${pol}} at the end`);
    L.eq(m2.get('inflight_requests_waiting', { policy: pol }), 0, `requests_waiting{${pol}} at the end`);
  }
  const totalCancelled = ['iterative', 'static'].reduce((a, pol) =>
    a + m2.get('inflight_requests_total', { policy: pol, finish_reason: 'cancelled' }) -
    m0.get('inflight_requests_total', { policy: pol, finish_reason: 'cancelled' }), 0);
  L.eq(totalCancelled, 2 + 2 + 4, 'requests_total{cancelled} over the whole test (2 running, 1 waiting + 1 running static, 4 closed)');
  L.eq(m2.get('inflight_connections_open'), 2, 'connections_open (subscriber and P)');
  L.log(`requests_total{cancelled} +2 per policy from the close, +${totalCancelled} in all; KV 0, running 0`);
  sub.close();
  p.close();
  await Promise.all([sub.closed, p.closed]);
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
