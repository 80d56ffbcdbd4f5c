'use strict';
// interleave: client A starts a long request; once A has its first token, client B sends a short
// one with the same policy. Under `iterative` B joins the running batch, so B's tokens arrive while
// A is still streaming (some A token arrives after B's first token). Under `static` B waits for A's
// batch to finish: B's first token arrives only after A's done. Arrival order is one counter shared
// by both clients (lib.js SEQ), so no clock is compared.
const L = require('./lib');

const A_TOKENS = 240;
const B_TOKENS = 20;

async function scenario(srv, policy, round) {
  const a = await L.Client.open(srv.port, { name: `A-${policy}` });
  const b = await L.Client.open(srv.port, { name: `B-${policy}` });
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

  const aTok = a.framesFor(idA).filter((f) => f.msg.type === 'token');
  const bTok = b.framesFor(idB).filter((f) => f.msg.type === 'token');
  const aDone = a.framesFor(idA).find((f) => f.msg.type === 'done');
  const bDone = b.framesFor(idB).find((f) => f.msg.type === 'done');
  const bFirst = bTok[0];
  const aAfterBFirst = aTok.filter((f) => f.seq > bFirst.seq).length;
  const aBeforeBSent = aTok.filter((f) => f.t <= sentB).length;
  const bWhileA = bTok.filter((f) => f.seq < aDone.seq).length;
  const res = {
    policy, aAfterBFirst, aBeforeBSent, bWhileA,
    bTtftMs: (bFirst.t - sentB).toFixed(1),
    aTotalMs: (aDone.t - firstA.t).toFixed(1),
    serverBQueueMs: rb.done.timing.queue_ms,
    order: `A first token #${firstA.seq}, B first token #${bFirst.seq}, B done #${bDone.seq}, A done #${aDone.seq}`,
  };
  L.log(`${policy} round ${round}: ${res.order}; A tokens after B's first: ${aAfterBFirst}; ` +
    `B tokens before A's done: ${bWhileA}/${B_TOKENS}; A tokens seen when B was sent: ${aBeforeBSent}; ` +
    `B ttft ${res.bTtftMs} ms (server queue_ms ${res.serverBQueueMs}); A streamed for ${res.aTotalMs} ms`);
  a.close();
  b.close();
  await Promise.all([a.closed, b.closed]);
  return res;
}

L.main('interleave', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--n-layer', '4', '--n-embd', '256', '--n-head', '4', '--n-ctx', '512'],
    'interleave-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--kv-mem-mb', '64']);

  // iterative: B interleaves with A
  const it = await scenario(srv, 'iterative', 0);
  L.check(it.aBeforeBSent < A_TOKENS - 10, `iterative: A was nearly done (${it.aBeforeBSent} tokens) ` +
    `before B was sent: the model is too fast for this test to say anything`);
  L.check(it.aAfterBFirst > 0, `iterative: no token of A arrived after B's first token (${it.order}): ` +
    `B did not join the running batch`);
  L.check(it.bWhileA === B_TOKENS, `iterative: only ${it.bWhileA} of B's ${B_TOKENS} tokens arrived ` +
    `before A's done although A had ${A_TOKENS - it.aBeforeBSent} tokens to go when B was sent`);

  // static: B waits for A's batch to finish
  const st = await scenario(srv, 'static', 1);
  L.check(st.aBeforeBSent < A_TOKENS - 10, `static: A was nearly done (${st.aBeforeBSent} tokens) before ` +
    `B was sent: the model is too fast for this test to say anything`);
  L.eq(st.aAfterBFirst, 0, `static: A tokens arriving after B's first token (${st.order})`);
  L.eq(st.bWhileA, 0, `static: B tokens arriving before A's done`);

  const m = await L.fetchMetrics(srv.port);
  for (const pol of ['iterative', 'static'])
    L.eq(m.get('inflight_kv_blocks_used', { policy: pol }), 0, `kv_blocks_used{${pol}} at the end`);
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
