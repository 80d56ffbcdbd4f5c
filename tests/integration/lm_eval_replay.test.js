'use strict';
// lm_eval_replay: the request lm-evaluation-harness's `local-completions` model sends for every
// loglikelihood task (lm_eval/models/openai_completions.py), replayed byte for byte against a
// random f32 model and checked against the independent float64 reference (tests/reference):
//   POST /v1/completions {"model": M, "prompt": [[ids...], ...], "temperature": 0,
//                         "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true}
// For each choice (sorted by index, one per prompt): token_logprobs[0] and top_logprobs[0] are
// null; every later prompt position's logprob is within 1e-4 of the reference's log-softmax; its
// one-entry top dict holds the reference's best logprob (within 1e-4) and, where the reference's
// best is the prompt's token with a clear margin, that token's own string and exact value; then
// lm-eval's own arithmetic (the continuation's summed logprob over token_logprobs[ctxlen:-1], and
// is_greedy: each continuation token's logprob equals its dict's max) agrees with the reference:
// the sum within 1e-4 per token, is_greedy true for a continuation that is the reference's greedy
// one and false for one that is not.
const path = require('path');
const { spawnSync } = require('child_process');
const L = require('./lib');

const TOL = 1e-4;
const MIN_MARGIN = 1e-3; // top-2 logit gap below which f32 and f64 may pick different best tokens

function reference(req) {
  const py = '/usr/bin/python3';
  const r = spawnSync(py, [path.join(L.REPO, 'tests', 'reference', 'score_ref.py')],
    { input: JSON.stringify(req), encoding: 'utf8', timeout: 600000, maxBuffer: 256 << 20 });
  if (r.status !== 0) L.fail(`score_ref.py failed (status ${r.status}): ${r.stderr || r.error}`);
  return JSON.parse(r.stdout);
}

// A reproducible stream of token ids (not Math.random: the test must fail the same way twice).
function ids(n, seed) {
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(x % 50000);
  }
  return out;
}

async function post(port, body) {
  const r = await L.httpRequest(port, '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    timeoutMs: 300000,
  });
  const text = r.body.toString('utf8');
  L.check(r.status === 200, () => `POST /v1/completions: ${r.status} ${text.slice(0, 400)}`);
  return JSON.parse(text);
}

// lm-eval's parse_logprobs for one choice: the continuation's summed logprob and is_greedy.
function lmEvalParse(choice, ctxlen) {
  const lps = choice.logprobs.token_logprobs.slice(ctxlen, -1);
  const tops = choice.logprobs.top_logprobs.slice(ctxlen, -1);
  let isGreedy = true;
  for (let i = 0; i < lps.length; i++)
    if (lps[i] !== Math.max(...Object.values(tops[i]))) {
      isGreedy = false;
      break;
    }
  return { sum: lps.reduce((a, b) => a + b, 0), isGreedy };
}

function checkChoice(choice, prompt, ref, what) {
  const lp = choice.logprobs;
  L.check(lp && Array.isArray(lp.token_logprobs), () => `${what}: no logprobs: ${JSON.stringify(choice).slice(0, 300)}`);
  // the prompt's positions, then the one generated token
  L.eq(lp.token_logprobs.length, prompt.length + 1, `${what}: token_logprobs entries`);
  L.eq(lp.tokens.length, prompt.length + 1, `${what}: tokens entries`);
  L.eq(lp.top_logprobs.length, prompt.length + 1, `${what}: top_logprobs entries`);
  L.check(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null,
    `${what}: position 0 must be null (nothing predicts it)`);
  let worst = 0;
  for (let j = 1; j < prompt.length; j++) {
    const r = ref[j - 1];
    const got = lp.token_logprobs[j];
    const d = Math.abs(got - r.lp);
    worst = Math.max(worst, d);
    L.check(d <= TOL, () => `${what}: position ${j}: logprob ${got}, reference ${r.lp} (|d| ${d})`);
    const keys = Object.keys(lp.top_logprobs[j]);
    L.eq(keys.length, 1, `${what}: position ${j}: entries in the top dict (logprobs 1)`);
    const best = lp.top_logprobs[j][keys[0]];
    L.check(Math.abs(best - r.best_lp) <= TOL,
      () => `${what}: position ${j}: best logprob ${best}, reference ${r.best_lp}`);
    if (r.best === prompt[j] && r.margin > MIN_MARGIN) {
      L.eq(keys[0], lp.tokens[j], `${what}: position ${j}: the best token's key`);
      L.eq(best, got, `${what}: position ${j}: the best entry's value and the token's`);
    }
  }
  return worst;
}

L.main('lm_eval_replay', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--dtype', 'f32', '--n-layer', '2', '--n-embd', '128',
    '--n-head', '4', '--n-ctx', '256']);
  const srv = await L.startServer(bin, vocab, model, ['--weights', 'f32', '--no-request-log']);
  const models = JSON.parse((await L.httpRequest(srv.port, '/v1/models')).body.toString('utf8'));
  const name = models.data[0].id;

  // contexts, and continuations: the reference's greedy ones (is_greedy true) and random ones
  const contexts = [ids(7, 1), ids(20, 2), ids(45, 3), ids(3, 4)];
  const g = reference({ model, greedy: contexts.map((c) => ({ ids: c, n: 4 })) }).greedy;
  const cases = [];
  contexts.forEach((c, i) => {
    if (g[i].margins.every((m) => m > MIN_MARGIN))
      cases.push({ ctx: c, cont: g[i].ids, greedy: true });
    cases.push({ ctx: c, cont: ids(3, 100 + i), greedy: false });
  });
  L.check(cases.some((k) => k.greedy), 'no context had a greedy continuation with clear margins');
  const prompts = cases.map((k) => k.ctx.concat(k.cont));
  const ref = reference({ model, score: prompts }).score;

  // exactly lm-eval's body (its key order too)
  const body = { model: name, prompt: prompts, temperature: 0, max_tokens: 1, logprobs: 1,
    seed: 1234, echo: true };
  const out = await post(srv.port, body);
  L.eq(out.choices.length, prompts.length, 'choices (one per prompt)');
  const choices = out.choices.slice().sort((a, b) => a.index - b.index);
  let worst = 0;
  choices.forEach((ch, i) => {
    L.eq(ch.index, i, 'choice indices');
    worst = Math.max(worst, checkChoice(ch, prompts[i], ref[i], `prompt ${i}`));
    const ctxlen = cases[i].ctx.length;
    const got = lmEvalParse(ch, ctxlen);
    const want = ref[i].slice(ctxlen - 1).reduce((a, r) => a + r.lp, 0);
    L.check(Math.abs(got.sum - want) <= TOL * cases[i].cont.length,
      () => `prompt ${i}: continuation logprob ${got.sum}, reference ${want}`);
    L.eq(got.isGreedy, cases[i].greedy, `prompt ${i}: is_greedy as lm-eval computes it`);
  });
  L.eq(out.usage.prompt_tokens, prompts.reduce((a, p) => a + p.length, 0), 'usage.prompt_tokens');
  L.log(`ok  ${prompts.length} prompts (${prompts.map((p) => p.length).join(', ')} tokens): ` +
    `worst |logprob - float64| ${worst.toExponential(2)}; lm-eval's sums and is_greedy agree ` +
    `(${cases.filter((k) => k.greedy).length} greedy continuations)`);
});
