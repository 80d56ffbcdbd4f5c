'use strict';
// conversation: multi-turn chat over /ws (generate with `messages` and `conversation`) and the
// prefix cache seen from outside, on two servers with the same weights, one with
// --prefix-cache on (the default) and one with --prefix-cache off:
//  - a three-turn conversation (a system prompt, then user turns, each sent with every earlier
//    turn and reply): the replies are the same text on both servers (greedy); with the cache on
//    turns 2 and 3 report cached_tokens in started and done (whole 16-token blocks, fewer than the
//    prompt), the cache-off server 0 everywhere;
//  - the step frame of a cached turn's first run carries [rid, 1, cached] with the same number;
//  - another connection (another user) sharing the system prompt finds it cached, on both
//    policies;
//  - OpenAI's chat completions through the official `openai` client: usage.prompt_tokens_details
//    .cached_tokens, streamed and not, equal on the cache-off server's text;
//  - /metrics' prefix-cache series add up against the request log: hit tokens = the rows' cached
//    tokens, computed + cached = their prompt tokens, lookups = the iterative requests;
//  - bad input: prompt and messages together, a bad conversation id, a bad role are refused with
//    their codes and the server keeps serving;
//  - the request log (--db): the conversation's three rows carry its id and the cached tokens;
//    GET /api/history?conversation= gives exactly them (400 for a bad id).
const path = require('path');
const D = require('../db/dblib');
const L = require('./lib');

const OpenAI = L.requireOpenAI();

const KEY = 'conversation-test-key-0001';
const CONV = 'c-test_3turns';
const SYSTEM = 'You are a helpful assistant who answers questions about the weather, the sea, ' +
  'the mountains and the cities of the world in short, plain sentences.';
const TURNS = ['Tell me about the sea.', 'And what about the mountains?', 'Which city is nearest?'];
const BLOCK = 16;

async function turn(c, id, messages, extra = {}) {
  const r = await c.request({ id, messages, conversation: CONV, max_tokens: 12, temperature: 0, ...extra });
  L.check(r.done, () => `${id}: no done (${JSON.stringify(r.error)})`);
  const f = L.checkRequestFrames(r.frames, id, {});
  const cached = r.done.usage.cached_tokens;
  L.eq(f.started.cached_tokens, cached, `${id}: started.cached_tokens = done.usage.cached_tokens`);
  L.check(Number.isInteger(cached) && cached >= 0 && cached % BLOCK === 0 && cached <= r.done.usage.prompt_tokens - 1,
    () => `${id}: cached_tokens ${cached} of ${r.done.usage.prompt_tokens}: whole blocks, never the last token`);
  return { text: r.text, cached, prompt: r.done.usage.prompt_tokens, rid: f.started.rid };
}

// The three turns on one server: their replies and cached tokens.
async function conversation(c, tag) {
  const messages = [{ role: 'system', content: SYSTEM }];
  const out = [];
  for (const [i, t] of TURNS.entries()) {
    messages.push({ role: 'user', content: t });
    const r = await turn(c, `${tag}-t${i + 1}`, messages.slice());
    messages.push({ role: 'assistant', content: r.text });
    out.push(r);
  }
  return out;
}

async function checkRefusals(c) {
  const cases = [
    [{ prompt: 'x', messages: [{ role: 'user', content: 'hi' }] }, 'invalid_message'],
    [{ prompt: 'x', conversation: 'no spaces allowed' }, 'out_of_range'],
    [{ messages: [{ role: 'robot', content: 'hi' }] }, 'out_of_range'],
    [{ messages: [] }, 'wrong_type'],
  ];
  for (const [i, [p, code]] of cases.entries()) {
    const r = await c.request({ id: `bad-${i}`, ...p });
    L.check(r.error && r.error.code === code, () => `bad-${i}: expected ${code}, got ${JSON.stringify(r.error || r.done)}`);
  }
  L.log(`refused with their codes: ${cases.map((x) => x[1]).join(', ')}`);
}

async function chatCompletion(base, stream) {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
  const req = {
    model: 'iterative-gpt2', max_tokens: 8, temperature: 0,
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Is it raining?' }],
  };
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { text: r.choices[0].message.content, usage: r.usage };
  }
  const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const ch of s) {
    if (ch.choices.length) text += ch.choices[0].delta.content || '';
    if (ch.usage) usage = ch.usage;
  }
  return { text, usage };
}

async function checkHistory(port, on) {
  // the log writer commits in rounds (every 200 ms by default): wait for the round that holds the third turn
  const rows = await L.until(async () => {
    const r = await L.httpRequest(port, `/api/history?user=${KEY}&conversation=${CONV}`);
    L.eq(r.status, 200, 'history of the conversation');
    const got = JSON.parse(r.body).requests;
    return got.length >= 3 && got;
  }, 10000, 'the three turns in the request log');
  L.eq(rows.length, 3, 'the conversation has three requests');
  rows.reverse(); // newest first
  for (const [i, row] of rows.entries()) {
    L.eq(row.conversation, CONV, `history row ${i}: conversation`);
    L.eq(row.cached_tokens, on[i].cached, `history row ${i}: cached_tokens`);
    L.eq(row.completion, on[i].text, `history row ${i}: completion`);
  }
  const bad = await L.httpRequest(port, `/api/history?user=${KEY}&conversation=a%20b`);
  L.eq(bad.status, 400, 'a bad conversation id');
  L.log(`/api/history?conversation=${CONV}: the three turns, cached ${rows.map((x) => x.cached_tokens).join('/')}`);
}

L.main('conversation', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-embd', '128', '--n-head', '4'], 'conv-model');
  const db = path.join(L.tmpDir('conv-db'), 'log.db');
  const on = await L.startServer(bin, vocab, model, ['--no-request-log', '--db', db]);
  const off = await L.startServer(bin, vocab, model, ['--no-request-log', '--prefix-cache', 'off']);
  const sub = await L.Client.open(on.port, { name: 'steps' });
  sub.send({ type: 'subscribe', topic: 'steps' });
  await sub.waitFor((f) => f.msg.type === 'subscribed', 30000, 'subscribed');
  const c = await L.Client.open(on.port, { name: 'user-a', path: `/ws?user=${KEY}` });
  const cOff = await L.Client.open(off.port, { name: 'user-a-off' });
  const a = await conversation(c, 'on');
  const b = await conversation(cOff, 'off');
  for (let i = 0; i < 3; i++) {
    L.eq(a[i].text, b[i].text, `turn ${i + 1}: the same reply with the cache on and off`);
    L.eq(b[i].cached, 0, `turn ${i + 1}: nothing cached with --prefix-cache off`);
  }
  L.eq(a[0].cached, 0, 'turn 1 on a fresh server: nothing cached');
  for (let i = 1; i < 3; i++)
    L.check(a[i].cached >= a[i - 1].prompt - BLOCK, () => `turn ${i + 1}: ${a[i].cached} cached, the turn before had ${a[i - 1].prompt} prompt tokens`);
  L.log(`three turns: prompts ${a.map((x) => x.prompt).join('/')}, cached ${a.map((x) => x.cached).join('/')}; the same replies with the cache off`);
  // the step frame of turn 2's first run
  await sub.waitFor((f) => f.msg.type === 'step' && f.msg.seqs.some((s) => s[0] === a[1].rid && s[1] === 1), 30000, 'turn 2 in a step');
  const seq = sub.frames.filter((f) => f.msg.type === 'step' && f.msg.model === 'iterative')
    .flatMap((f) => f.msg.seqs).filter((s) => s[0] === a[1].rid && s.length === 3);
  L.check(seq.length === 1 && seq[0][2] === a[1].cached, () => `turn 2's step entries with a cached count: ${JSON.stringify(seq)}`);
  // another user sharing the system prompt, on both policies
  const other = await L.Client.open(on.port, { name: 'user-b' });
  const shared = [];
  for (const model of ['iterative', 'static']) {
    const r = await other.request({ id: `b-${model}`, model, max_tokens: 4, temperature: 0, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Hello!' }] });
    L.check(r.done, () => `b-${model}: no done`);
    shared.push(r.done.usage.cached_tokens);
  }
  L.check(shared[0] >= BLOCK, () => `another user, iterative: ${shared[0]} cached of the shared system prompt`);
  L.eq(shared[1], 0, 'the static batcher had not seen the system prompt yet (its own pool)');
  const again = await other.request({ id: 'b-static-2', model: 'static', max_tokens: 4, temperature: 0, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Hi!' }] });
  L.check(again.done && again.done.usage.cached_tokens >= BLOCK, 'static: the system prompt cached the second time');
  L.log(`another user: ${shared[0]} cached (iterative), 0 then ${again.done.usage.cached_tokens} (static)`);
  // OpenAI's chat completions
  for (const stream of [false, true]) {
    const x = await chatCompletion(on.base, stream);
    const y = await chatCompletion(off.base, stream);
    L.eq(x.text, y.text, `chat completion (stream ${stream}): the same text with the cache on and off`);
    L.check(x.usage && x.usage.prompt_tokens_details && x.usage.prompt_tokens_details.cached_tokens >= BLOCK,
      () => `chat completion (stream ${stream}): usage ${JSON.stringify(x.usage)}`);
    L.eq(y.usage.prompt_tokens_details.cached_tokens, 0, `chat completion (stream ${stream}), cache off: cached_tokens`);
  }
  L.log('OpenAI chat completions: usage.prompt_tokens_details.cached_tokens reported, streamed and not');
  await checkRefusals(c);
  const frameCached = a.reduce((n, r) => n + r.cached, 0) + shared[0];
  await checkHistory(on.port, a);
  c.close();
  cOff.close();
  other.close();
  sub.close();
  on.assertAlive();
  const mAll = await L.fetchMetrics(on.port);
  await on.stop();
  await off.stop();
  const rows = D.q(db, "SELECT prompt_tokens AS p, cached_tokens AS c FROM requests WHERE policy = 'iterative' AND finish_reason IS NOT NULL");
  const sumP = rows.reduce((s, r) => s + r.p, 0), sumC = rows.reduce((s, r) => s + r.c, 0);
  const pol = { policy: 'iterative' };
  L.eq(mAll.get('inflight_prefix_cache_hit_tokens_total', pol), sumC, 'hit tokens = the log\'s cached_tokens (iterative)');
  L.eq(mAll.get('inflight_prefix_cache_lookups_total', pol), rows.length, 'lookups = the log\'s iterative requests');
  L.eq(mAll.get('inflight_prompt_tokens_computed_total', pol) + sumC, sumP, 'computed + cached = the log\'s prompt tokens');
  L.check(frameCached <= sumC, 'the frames\' cached tokens are among the log\'s');
  const conv = D.q(db, `SELECT count(*) AS n, sum(cached_tokens) AS c FROM requests WHERE conversation = '${CONV}'`)[0];
  L.eq(conv.n, 3, 'the log: three rows of the conversation');
  L.eq(conv.c, a[0].cached + a[1].cached + a[2].cached, 'the log: their cached tokens');
  const none = D.q(db, "SELECT count(*) AS n FROM requests WHERE conversation IS NULL AND finish_reason IS NOT NULL")[0];
  L.check(none.n >= 5, 'the other requests have no conversation');
  L.check(mAll.get('inflight_prefix_cache_blocks', pol) > 0, 'cached blocks on /metrics');
  L.eq(mAll.get('inflight_kv_blocks_used', pol), 0, 'KV blocks held by requests at rest');
  L.log(`the log: ${rows.length} iterative requests, ${sumC} of ${sumP} prompt tokens cached; /metrics agrees ` +
    `(${mAll.get('inflight_prefix_cache_blocks', pol)} cached blocks, ${mAll.get('inflight_prefix_cache_blocks_unused', pol)} unused)`);
});
