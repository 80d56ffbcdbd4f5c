'use strict';
// interleave: client A starts a long request; once A has its first token, client B sends a short
// one with the same policy. Under `iterative` B joins the running batch; under `static` B waits for
// A's batch to finish. The verdicts are the server's own record of its scheduling, the step frames
// of a third client subscribed to `steps` (each step's sequences by rid, paired with A and B through
// their started frames), never the order in which frames reach two sockets (which the server does
// not promise under load):
//  - both requests stream in the documented frame order, with all their tokens, and each ran in
//    exactly one step per token (their prompts fit one step);
//  - iterative: every step holding B while A still ran also holds A, at least one step holds both,
//    and B (fewer tokens to go) finished in an earlier step than A;
//  - static: no step holds both, and B's first step comes after A's last one.
// Each scenario needs B to have arrived while A still had more than B's tokens to go (iterative),
// or while A's batch ran (static: a step of A's with a request waiting): on a machine fast enough
// for A to be done first, the scenario is run again (ATTEMPTS times), then the test fails saying so.
// The client-side arrival order is logged, as information.
const L = require('./lib');

const A_TOKENS = 240;
const B_TOKENS = 20;
const ATTEMPTS = 3;

// The step frames of `policy` the subscriber has, and where rids a and b appear in them.
function spans(sub, policy, a, b) {
  const steps = sub.frames.filter((f) => f.msg.type === 'step' && f.msg.model === policy).map((f) => f.msg);
  const has = (s, rid) => s.seqs.some(([r]) => r === rid);
  const withA = steps.filter((s) => has(s, a));
  const withB = steps.filter((s) => has(s, b));
  const both = steps.filter((s) => has(s, a) && has(s, b));
  const first = (xs) => (xs.length ? xs[0].step : null);
  const last = (xs) => (xs.length ? xs[xs.length - 1].step : null);
  return {
    steps, withA, withB, both, aFirst: first(withA), aLast: last(withA), bFirst: first(withB), bLast: last(withB),
    dropped: steps.reduce((x, s) => x + s.dropped, 0),
  };
}

async function scenario(srv, sub, policy, round) {
  const a = await L.Client.open(srv.port, { name: `A-${policy}-${round}` });
  const b = await L.Client.open(srv.port, { name: `B-${policy}-${round}` });
  const idA = `a-${policy}-${round}`;
  const idB = `b-${policy}-${round}`;
  a.send({ type: 'generate', id: idA, prompt: 'The history of the world begins', model: policy,
    max_tokens: A_TOKENS, seed: 11 + round, ignore_eos: true });
  const firstA = await a.waitFor((f) => f.msg.type === 'token' && f.msg.id === idA, 120000, 'A first token');
  const sentB = L.now();
  b.send({ type: 'generate', id: idB, prompt: 'Meanwhile, elsewhere', model: policy,
    max_tokens: B_TOKENS, seed: 5 + round, ignore_eos: true });
  const [endA, endB] = await Promise.all([a.waitEnd(idA, 300000), b.waitEnd(idB, 300000)]);
  L.check(endA.type === 'done' && endB.type === 'done', () => `expected two done frames, got ${JSON.stringify([endA, endB])}`);
  const ra = L.checkRequestFrames(a.framesFor(idA), idA, { model: policy, n: A_TOKENS, finish: 'length' });
  const rb = L.checkRequestFrames(b.framesFor(idB), idB, { model: policy, n: B_TOKENS, finish: 'length' });
  a.assertNoViolations();
  b.assertNoViolations();

  // the step records: one step per token of each (the step frames trail the done frames a little)
  const rA = ra.started.rid;
  const rB = rb.started.rid;
  await sub.waitFor(() => {
    const sp = spans(sub, policy, rA, rB);
    return sp.withA.length >= A_TOKENS && sp.withB.length >= B_TOKENS;
  }, 60000, `${policy}: the step frames of A (rid ${rA}, ${A_TOKENS} steps) and B (rid ${rB}, ${B_TOKENS} steps)`);
  const sp = spans(sub, policy, rA, rB);
  L.eq(sp.dropped, 0, `${policy}: step frames dropped for the subscriber (the record would be incomplete)`);
  L.eq(sp.withA.length, A_TOKENS, `${policy}: steps holding A (one per token)`);
  L.eq(sp.withB.length, B_TOKENS, `${policy}: steps holding B (one per token)`);

  // information only: what the two sockets saw
  const aTok = a.framesFor(idA).filter((f) => f.msg.type === 'token');
  const bTok = b.framesFor(idB).filter((f) => f.msg.type === 'token');
  const aDone = a.framesFor(idA).find((f) => f.msg.type === 'done');
  const bWhileA = bTok.filter((f) => f.seq < aDone.seq).length;
  const aBeforeBSent = aTok.filter((f) => f.t <= sentB).length;
  // what the server decided: A's steps before B's first, A's steps with a request waiting
  const aStepsBeforeB = sp.withA.filter((s) => s.step < sp.bFirst).length;
  const aWithWaiting = sp.withA.filter((s) => s.waiting > 0).length;
  const res = { policy, rA, rB, sp, aStepsBeforeB, aWithWaiting, bTtftMs: rb.done.timing.ttft_ms };
  L.log(`${policy} round ${round}: A (rid ${rA}) in steps ${sp.aFirst}..${sp.aLast}, B (rid ${rB}) in steps ` +
    `${sp.bFirst}..${sp.bLast}; ${sp.both.length} steps hold both; A had run ${aStepsBeforeB} steps when B started; ` +
    `${aWithWaiting} of A's steps had a request waiting | sockets (information): A tokens seen when B was sent ` +
    `${aBeforeBSent}, B tokens before A's done ${bWhileA}/${B_TOKENS}, first A token #${firstA.seq}, ` +
    `B ttft ${rb.done.timing.ttft_ms} ms (queue_ms ${rb.done.timing.queue_ms})`);
  a.close();
  b.close();
  await Promise.all([a.closed, b.closed]);
  return res;
}

// Runs the scenario until B arrived in time for it to say something (at most ATTEMPTS times).
async function decided(srv, sub, policy, round0, meaningful, why) {
  for (let k = 0; k < ATTEMPTS; k++) {
    const r = await scenario(srv, sub, policy, round0 + k);
    if (meaningful(r)) return r;
    L.log(`${policy}: ${why(r)}: again`);
  }
  return L.fail(`${policy}: in ${ATTEMPTS} attempts A was done too early every time: the model is too fast for this test to say anything`);
}

L.main('interleave', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--n-layer', '4', '--n-embd', '256', '--n-head', '4', '--n-ctx', '512'],
    'interleave-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--kv-mem-mb', '64']);
  const sub = await L.Client.open(srv.port, { name: 'steps' });
  sub.send({ type: 'subscribe', topic: 'steps' });
  await sub.waitFor((f) => f.msg.type === 'subscribed', 30000, 'subscribed');

  // iterative: B joins A's running batch
  const it = await decided(srv, sub, 'iterative', 0, (r) => r.aStepsBeforeB < A_TOKENS - B_TOKENS,
    (r) => `B started after A had run ${r.aStepsBeforeB} of its ${A_TOKENS} steps (fewer than ${B_TOKENS} to go)`);
  const whileA = it.sp.withB.filter((s) => s.step <= it.sp.aLast);
  L.check(it.sp.both.length >= 1, `iterative: no step holds both A (rid ${it.rA}) and B (rid ${it.rB}): B did not join the running batch`);
  L.eq(whileA.filter((s) => !s.seqs.some(([r]) => r === it.rA)).length, 0,
    `iterative: steps holding B while A still ran, without A (${whileA.length} steps of B up to A's last step ${it.sp.aLast})`);
  L.check(it.sp.bLast < it.sp.aLast, `iterative: B's last step ${it.sp.bLast} is not before A's last step ${it.sp.aLast} ` +
    `although A had ${A_TOKENS - it.aStepsBeforeB} tokens to go when B started`);

  // static: B waits for A's batch to finish
  const st = await decided(srv, sub, 'static', ATTEMPTS, (r) => r.aWithWaiting > 0,
    () => 'no step of A had a request waiting: B arrived after A\'s batch');
  L.eq(st.sp.both.length, 0, `static: steps holding both A (rid ${st.rA}) and B (rid ${st.rB})`);
  L.check(st.sp.bFirst > st.sp.aLast, `static: B's first step ${st.sp.bFirst} is not after A's last step ${st.sp.aLast}`);

  const m = await L.fetchMetrics(srv.port);
  for (const pol of ['iterative', 'static'])
    L.eq(m.get('inflight_kv_blocks_used', { policy: pol }), 0, `kv_blocks_used{${pol}} at the end`);
  sub.assertNoViolations();
  sub.close();
  await sub.closed;
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
