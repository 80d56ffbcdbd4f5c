'use strict';
// load: 64 concurrent WebSocket clients x 4 requests each (all 4 sent at once per client), max_tokens
// 32, ignore_eos, policies alternating iterative/static, each request with its own seed and one of a
// few prompts (IFL_TEST_QUICK, the sanitizer stages: 8 clients x 4 requests x 8 tokens, whose
// ThreadSanitizer build without BLAS takes ~0.2 s a token row on a busy 2-core machine). Every request must get its frames in the documented order (queued..,
// started, token 0..31, exactly one done with finish_reason length and completion_tokens 32, nothing
// after), and its text must equal `inflight generate` with the same prompt and seed; requests with
// the same (prompt, seed) must agree whatever their policy.
const L = require('./lib');

const N_CLIENTS = L.QUICK ? 8 : 64; // IFL_TEST_QUICK (sanitizer or valgrind runs) only; the normal build runs 64 x 4 x 32
const PER_CLIENT = 4;
const N_TOKENS = L.QUICK ? 8 : 32;
const PROMPTS = [
  'Hello world',
  'The quick brown fox',
  'In a hole in the ground there lived a hobbit.',
  'Programming in C++ is like',
  'Once upon a time, in a land far away,',
];
// distinct (prompt, seed) pairs; odd, so every pair runs under both policies (at least 2 x N_PAIRS requests)
const N_PAIRS = L.QUICK ? 15 : 25;

function pairOf(k) {
  const p = k % N_PAIRS;
  return { pair: p, prompt: PROMPTS[p % PROMPTS.length], seed: 1000 + 7 * p };
}

L.main('load', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'load-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log']);

  const clients = await Promise.all(Array.from({ length: N_CLIENTS }, (_, i) =>
    L.Client.open(srv.port, { name: `c${i}` })));
  L.log(`${clients.length} clients connected`);
  const m0 = await L.fetchMetrics(srv.port);

  const reqs = []; // {client, id, policy, prompt, seed, pair}
  const t0 = L.now();
  clients.forEach((c, ci) => {
    for (let r = 0; r < PER_CLIENT; r++) {
      const k = ci * PER_CLIENT + r;
      const { pair, prompt, seed } = pairOf(k);
      const policy = k % 2 === 0 ? 'iterative' : 'static';
      const id = `r${k}`;
      reqs.push({ client: c, id, policy, prompt, seed, pair });
      c.send({ type: 'generate', id, prompt, model: policy, max_tokens: N_TOKENS, seed, ignore_eos: true });
    }
  });
  await Promise.all(reqs.map((r) => r.client.waitEnd(r.id, 300000)));
  const wallMs = L.now() - t0;
  // a moment for anything (wrongly) sent after a done to arrive
  await Promise.all(clients.map((c) => c.ping()));
  srv.assertAlive();

  let totalTokens = 0;
  const textsByPair = new Map();
  const ttfts = [];
  for (const r of reqs) {
    const frames = r.client.framesFor(r.id);
    const res = L.checkRequestFrames(frames, r.id, { model: r.policy, seed: r.seed, n: N_TOKENS, finish: 'length' });
    // each request's frames are contiguous in arrival order of its own connection only in their
    // relative order; check they are strictly increasing (nothing reordered)
    for (let i = 1; i < frames.length; i++)
      L.check(frames[i].seq > frames[i - 1].seq, `${r.id}: frames out of arrival order`);
    totalTokens += res.tokens.length;
    r.text = res.text;
    ttfts.push(res.done.timing.ttft_ms);
    if (!textsByPair.has(r.pair)) textsByPair.set(r.pair, []);
    textsByPair.get(r.pair).push(r);
  }
  for (const c of clients) {
    c.assertNoViolations();
    // every frame of the connection belongs to one of its requests, or is hello / pong
    const ids = new Set(reqs.filter((r) => r.client === c).map((r) => r.id));
    for (const f of c.frames) {
      const t = f.msg.type;
      if (t === 'hello' || t === 'pong') continue;
      L.check(ids.has(f.msg.id), `${c.name}: frame for an unknown id: ${JSON.stringify(f.msg)}`);
      L.check(t !== 'error', `${c.name}: error frame: ${JSON.stringify(f.msg)}`);
    }
    const counted = [...ids].reduce((a, id) => a + c.framesFor(id).length, 0);
    const other = c.frames.filter((f) => f.msg.type === 'hello' || f.msg.type === 'pong').length;
    L.eq(counted + other, c.frames.length, `${c.name}: frames accounted for`);
  }
  L.eq(totalTokens, N_CLIENTS * PER_CLIENT * N_TOKENS, 'total token frames');
  L.log(`${reqs.length} requests, ${totalTokens} tokens in ${wallMs.toFixed(0)} ms ` +
    `(${(totalTokens / (wallMs / 1000)).toFixed(0)} tokens/s); ttft_ms p50 ${L.percentile(ttfts, 50)} ` +
    `p95 ${L.percentile(ttfts, 95)} max ${Math.max(...ttfts)}`);

  // same (prompt, seed) => same text, whatever the policy or batch
  let policiesMixed = 0;
  for (const [pair, rs] of textsByPair) {
    const pols = new Set(rs.map((r) => r.policy));
    if (pols.size === 2) policiesMixed++;
    for (const r of rs)
      L.check(r.text === rs[0].text, () => `pair ${pair} (${JSON.stringify(rs[0].prompt)}, seed ${rs[0].seed}): ` +
        `${r.id} (${r.policy}) text ${JSON.stringify(r.text)} != ${rs[0].id} (${rs[0].policy}) ${JSON.stringify(rs[0].text)}`);
  }
  L.eq(policiesMixed, N_PAIRS, 'pairs seen under both policies');
  L.log(`${textsByPair.size} distinct (prompt, seed) pairs, each identical across its ` +
    `${Math.min(...[...textsByPair.values()].map((x) => x.length))}..${Math.max(...[...textsByPair.values()].map((x) => x.length))} requests and both policies`);

  // against `inflight generate`
  let checked = 0;
  for (const [pair, rs] of textsByPair) {
    const ref = await L.generateRef(bin, vocab, model, rs[0].prompt, N_TOKENS, rs[0].seed);
    L.check(ref === rs[0].text, () => `pair ${pair}: server text ${JSON.stringify(rs[0].text)} != ` +
      `inflight generate --prompt ${JSON.stringify(rs[0].prompt)} --seed ${rs[0].seed}: ${JSON.stringify(ref)}`);
    if (checked < 3) L.log(`  generate --prompt ${JSON.stringify(rs[0].prompt)} --seed ${rs[0].seed} -> ${JSON.stringify(ref.slice(0, 60))}...`);
    checked++;
  }
  L.log(`${checked} (prompt, seed) pairs match inflight generate`);

  // server-side accounting
  const m1 = await L.fetchMetrics(srv.port);
  for (const pol of ['iterative', 'static']) {
    const n = reqs.filter((r) => r.policy === pol).length;
    const d = m1.get('inflight_requests_total', { policy: pol, finish_reason: 'length' }) -
      m0.get('inflight_requests_total', { policy: pol, finish_reason: 'length' });
    L.eq(d, n, `requests_total{${pol},length} increase`);
    const dt = m1.get('inflight_generated_tokens_total', { policy: pol }) - m0.get('inflight_generated_tokens_total', { policy: pol });
    L.eq(dt, n * N_TOKENS, `generated_tokens_total{${pol}} increase`);
    L.eq(m1.get('inflight_kv_blocks_used', { policy: pol }), 0, `kv_blocks_used{${pol}} after the load`);
    L.eq(m1.get('inflight_requests_running', { policy: pol }), 0, `requests_running{${pol}} after the load`);
  }
  L.log(`metrics agree: requests_total/generated_tokens_total per policy, KV and running back to 0`);

  for (const c of clients) c.close();
  await Promise.all(clients.map((c) => L.withTimeout(c.closed, 10000, `${c.name} to close`)));
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
