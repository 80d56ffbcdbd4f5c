'use strict';
// sampling_controls: the sampling controls of docs/protocol.md ("How one token is chosen") end to
// end, on a random model with the real vocabulary:
//  - every control on (logit_bias, repetition/presence/frequency penalties, min_p, top_k, top_p,
//    min_tokens, stop_token_ids) with a seed: /ws alone, then the same request inside a batch of
//    32 different ones, /v1/completions through the official openai client, and /v2's generate
//    give the same tokens (the controls depend only on the request's own tokens);
//  - each control does what it says, greedy (temperature 0), against a reference run without it:
//    logit_bias +100 makes its token every token, -100 keeps a token the reference drew out;
//    stop_token_ids ends at the first drawn one (finish "stop", counted, no text of its own);
//    min_tokens keeps that stop id (and end-of-text) away until its count; repetition_penalty and
//    frequency_penalty change a run whose reference repeats a token; presence_penalty likewise;
//  - the request log keeps each control (params of the history API's request).
const path = require('path');
const L = require('./lib');

const MODEL = ['--n-ctx', '256'];
const PROMPT = 'The sea is wide and the sky is high';
const ALL_ON = {
  max_tokens: 24, seed: 4242, temperature: 0.9, top_k: 60, top_p: 0.9, min_p: 0.02, presence_penalty: 0.6,
  frequency_penalty: 0.4, repetition_penalty: 1.3, logit_bias: { 13: -100, 262: 2.5, 11: 1.5 }, min_tokens: 6,
  stop_token_ids: [50000], ignore_eos: true,
};

const OpenAI = L.requireOpenAI();

async function ws(c, id, params) {
  const r = await c.request({ id, prompt: PROMPT, model: 'iterative', ...params });
  L.check(r.done, () => `${id}: no done: ${JSON.stringify(r.error)}`);
  return { ids: r.tokens.map((f) => f.msg.token), text: r.text, done: r.done };
}

// The same request alone, in a batch of 32, through the openai client and through /v2.
async function checkEverywhere(srv, c) {
  const alone = await ws(c, 'alone', ALL_ON);
  L.check(alone.ids.length >= ALL_ON.min_tokens, 'fewer tokens than min_tokens');
  const others = [];
  for (let i = 0; i < 31; i++) {
    others.push(c.request({ id: `o${i}`, prompt: `Another prompt number ${i}`, model: 'iterative', max_tokens: 24,
      seed: i, temperature: 1, ...(i % 2 ? ALL_ON : {}), ...(i % 3 ? {} : { logit_bias: { [100 + i]: 3 } }) }));
  }
  const inBatch = c.request({ id: 'batched', prompt: PROMPT, model: 'iterative', ...ALL_ON });
  const [b] = await Promise.all([inBatch, ...others]);
  L.eq(JSON.stringify(b.tokens.map((f) => f.msg.token)), JSON.stringify(alone.ids), 'every control on: in a batch of 32 vs alone');
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${srv.port}/v1`, apiKey: 'none', maxRetries: 0 });
  const oa = await client.completions.create({ model: 'iterative', prompt: PROMPT, ...ALL_ON });
  L.eq(oa.choices[0].text, alone.text, 'every control on: /v1 (openai client) vs /ws');
  L.eq(oa.usage.completion_tokens, alone.ids.length, '/v1 completion tokens');
  const v2 = await L.httpRequest(srv.port, '/v2/models/iterative-gpt2/generate', { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text_input: PROMPT, parameters: ALL_ON }) });
  L.eq(v2.status, 200, '/v2 status');
  L.eq(JSON.parse(v2.body).text_output, alone.text, 'every control on: /v2 vs /ws');
  L.log(`every control on: ${alone.ids.length} tokens, the same alone, in a batch of 32, on /v1 (openai client) and /v2`);
  return alone;
}

const GREEDY = { max_tokens: 16, temperature: 0, ignore_eos: true };

function mostRepeated(ids) {
  const n = new Map();
  for (const t of ids) n.set(t, (n.get(t) || 0) + 1);
  return [...n.entries()].sort((a, b) => b[1] - a[1])[0];
}

async function checkEach(c) {
  const ref = await ws(c, 'ref', GREEDY);
  // logit_bias: +100 on a token the reference never drew makes it every token; -100 bans one
  const absent = [...Array(400).keys()].map((i) => 1000 + i).find((t) => !ref.ids.includes(t));
  const forced = await ws(c, 'forced', { ...GREEDY, logit_bias: { [absent]: 100 } });
  L.check(forced.ids.every((t) => t === absent), () => `logit_bias +100 on ${absent}: drew ${forced.ids}`);
  const banned = await ws(c, 'banned', { ...GREEDY, logit_bias: { [ref.ids[0]]: -100 } });
  L.check(!banned.ids.includes(ref.ids[0]), () => `logit_bias -100 on ${ref.ids[0]}: drew ${banned.ids}`);
  // stop_token_ids: the reference's token at index 3 ends the request where it is first drawn
  const stopId = ref.ids[3], at = ref.ids.indexOf(stopId);
  const stopped = await ws(c, 'stopped', { ...GREEDY, stop_token_ids: [stopId] });
  L.eq(stopped.done.finish_reason, 'stop', 'stop_token_ids: finish_reason');
  L.eq(JSON.stringify(stopped.ids), JSON.stringify(ref.ids.slice(0, at + 1)), 'stop_token_ids: tokens up to the stop id');
  L.eq(stopped.done.usage.completion_tokens, at + 1, 'stop_token_ids: the stop id counts');
  // min_tokens: the same stop id kept away until min_tokens tokens were generated
  const first = ref.ids[0];
  const held = await ws(c, 'held', { ...GREEDY, stop_token_ids: [first], min_tokens: 5 });
  L.check(!held.ids.slice(0, 5).includes(first), () => `min_tokens 5: the stop id ${first} drawn early: ${held.ids}`);
  L.check(held.ids.length >= 5, () => `min_tokens 5: only ${held.ids.length} tokens`);
  // the penalties change a run whose reference repeats a token
  const [rep, count] = mostRepeated(ref.ids);
  const changed = [];
  for (const [name, v] of [['repetition_penalty', 3], ['frequency_penalty', 2], ['presence_penalty', 2]]) {
    const r = await ws(c, name, { ...GREEDY, [name]: v });
    L.check(count < 2 || JSON.stringify(r.ids) !== JSON.stringify(ref.ids), () => `${name} ${v}: the same tokens as without it`);
    changed.push(`${name}: ${r.ids.filter((t) => t === rep).length} x ${rep}`);
  }
  L.log(`greedy reference repeats ${rep} ${count} times; bias +100 forced ${absent}, -100 banned ${ref.ids[0]}; ` +
    `stop id ${stopId} ended at index ${at}; min_tokens 5 held stop id ${first} off; ${changed.join(', ')}`);
}

async function checkLogged(srv, c) {
  const r = await ws(c, 'logged', ALL_ON);
  L.check(r.done, 'logged request');
  await L.until(async () => {
    const h = await L.httpRequest(srv.port, '/api/history?limit=5');
    return h.status === 200 && JSON.parse(h.body).requests.some((q) => q.client_id === 'logged');
  }, 30000, 'the logged request in the history');
  const list = JSON.parse((await L.httpRequest(srv.port, '/api/history?limit=5')).body).requests;
  const row = list.find((q) => q.client_id === 'logged');
  const one = JSON.parse((await L.httpRequest(srv.port, `/api/requests/${row.id}`)).body).request;
  for (const [k, v] of Object.entries(ALL_ON)) {
    L.eq(JSON.stringify(one.params[k]), JSON.stringify(v), `the log's params.${k}`);
  }
  L.log(`the request log keeps every control: ${JSON.stringify(one.params)}`);
}

L.main('sampling_controls', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, MODEL, 'controls-model');
  const db = path.join(L.tmpDir('controls-db'), 'log.db');
  const srv = await L.startServer(bin, vocab, model, ['--kv-mem-mb', '64', '--no-request-log', '--db', db, '--history', 'all']);
  const c = await L.Client.open(srv.port, { name: 'controls' });
  await checkEverywhere(srv, c);
  await checkEach(c);
  await checkLogged(srv, c);
  c.assertNoViolations();
  c.close();
  await c.closed;
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
