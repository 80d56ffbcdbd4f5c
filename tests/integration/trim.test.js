'use strict';
// trim: conversations longer than the context, and over-long plain prompts (docs/protocol.md
// "Long conversations"), on a model with a 64-token context:
//  - a 16-turn conversation over /ws (a system message, then user turns, each sent with every
//    earlier turn and reply, max_tokens 8, seeded sampling): every turn answers; started and done
//    agree on trimmed_messages / trimmed_tokens; prompt_tokens is exactly what /tokenize counts for
//    the kept messages (the first trimmed_messages non-system ones left out) and trimmed_tokens the
//    difference from the whole conversation; the system message is never left out; the cut only
//    moves forward, in steps (several trims, fewer than the turns), and a turn whose cut did not
//    move finds the turn before's prompt in the prefix cache;
//  - the same conversation through OpenAI's chat completions with the official `openai` client
//    (streamed and not): the same text, prompt_tokens and trimmed counts for every turn;
//  - refusals naming what would fix them: `truncate: false` (/ws and /v1), a newest turn that does
//    not fit alone (naming messages[i]), a plain prompt over the context (naming
//    truncate_prompt_tokens), truncate_prompt_tokens beside messages;
//  - truncate_prompt_tokens on /v1/completions and /ws: the prompt's last N tokens, the same seeded
//    text as those N tokens sent as ids, trimmed_tokens the rest;
//  - /metrics' inflight_trimmed_requests_total and _tokens_total count every admitted trim;
//  - `serve --trim off`: hello's default truncate false, the long conversation refused, accepted
//    with truncate: true and then the same text as on the first server;
//  - the request log (--db) and GET /api/history?conversation=: each turn's row carries the
//    messages as sent, its trimmed counts, and as prompt the text the model was given.
const path = require('path');
const D = require('../db/dblib');
const L = require('./lib');

const OpenAI = L.requireOpenAI();

const N_CTX = 64;
const MAX = 8;
const BLOCK = 16;
const TURNS = 16;
const KEY = 'trim-test-key-0001';
const CONV = 'c-trim_long';
const SYSTEM = 'Answer briefly.';
const USER = ['Tell me about the sea.', 'And the sky?', 'Why is it blue?', 'What about at night?',
  'Name a star.', 'How far is it?'];

// chat_template.c's rendering, written again: the kept conversation's text
function render(messages) {
  const label = { system: 'System', developer: 'System', user: 'User', assistant: 'Assistant' };
  return messages.map((m) => `${label[m.role]}:${m.content.startsWith(' ') ? '' : ' '}${m.content}\n`).join('') + 'Assistant:';
}

// messages without their first n non-system ones
function kept(messages, n) {
  const out = [];
  for (const m of messages) {
    if (m.role !== 'system' && n > 0) n--;
    else out.push(m);
  }
  return out;
}

async function tokenCount(port, body) {
  const r = await L.httpRequest(port, '/tokenize', { method: 'POST', body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' } });
  L.eq(r.status, 200, `/tokenize ${r.body}`);
  return JSON.parse(r.body);
}

// The conversation over /ws: each turn's messages as sent, reply and counts.
async function wsConversation(srv, c) {
  const messages = [{ role: 'system', content: SYSTEM }];
  const out = [];
  for (let i = 0; i < TURNS; i++) {
    messages.push({ role: 'user', content: USER[i % USER.length] });
    const id = `t${i}`;
    const r = await c.request({ id, conversation: CONV, messages: messages.slice(), max_tokens: MAX, seed: 100 + i, temperature: 0.9 });
    L.check(r.done && r.done.finish_reason !== 'error', () => `${id}: no done (${JSON.stringify(r.error)})`);
    const f = L.checkRequestFrames(r.frames, id, {});
    const u = r.done.usage;
    L.eq(f.started.trimmed_messages, u.trimmed_messages, `${id}: started and done trimmed_messages`);
    L.eq(f.started.trimmed_tokens, u.trimmed_tokens, `${id}: started and done trimmed_tokens`);
    L.eq(f.started.prompt_tokens, u.prompt_tokens, `${id}: prompt_tokens`);
    L.check(u.prompt_tokens + MAX <= N_CTX, () => `${id}: ${u.prompt_tokens} + ${MAX} over ${N_CTX}`);
    const whole = await tokenCount(srv.port, { messages, add_generation_prompt: true });
    const k = kept(messages, u.trimmed_messages);
    const part = await tokenCount(srv.port, { messages: k, add_generation_prompt: true });
    L.eq(u.prompt_tokens, part.count, `${id}: prompt_tokens are the kept messages' tokens`);
    L.eq(u.trimmed_tokens, whole.count - part.count, `${id}: trimmed_tokens are the rest`);
    L.check(k[0].role === 'system' && (k.length === 1 || k[1].role === 'user'),
      () => `${id}: the kept part begins with the system message and a user turn: ${JSON.stringify(k.slice(0, 2))}`);
    out.push({ messages: messages.slice(), text: r.text, seed: 100 + i, prompt: u.prompt_tokens,
      cached: u.cached_tokens, trimmedMessages: u.trimmed_messages, trimmedTokens: u.trimmed_tokens });
    messages.push({ role: 'assistant', content: r.text });
  }
  // the cut moves forward, in steps; a turn whose cut did not move finds the turn before's prompt
  let moves = 0;
  for (let i = 1; i < out.length; i++) {
    const a = out[i - 1], b = out[i];
    // the cut in messages of b's list: a's cut, or further (a's list is b's without 2 messages)
    L.check(b.trimmedMessages >= a.trimmedMessages, () => `turn ${i}: the cut went back`);
    if (b.trimmedMessages !== a.trimmedMessages) {
      moves++;
      continue;
    }
    L.check(b.cached >= Math.floor(a.prompt / BLOCK) * BLOCK,
      () => `turn ${i}: cut unchanged, ${b.cached} cached, the turn before had ${a.prompt} prompt tokens`);
  }
  L.check(moves >= 3 && moves <= TURNS / 2, () => `the cut moved ${moves} times in ${TURNS} turns`);
  L.log(`/ws: ${TURNS} turns answered; prompts ${out.map((x) => x.prompt).join('/')}; left out ` +
    `${out.map((x) => x.trimmedMessages).join('/')} messages; cached ${out.map((x) => x.cached).join('/')}; the cut moved ${moves} times`);
  return out;
}

async function openaiTurns(base, turns) {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
  for (const [i, t] of turns.entries()) {
    const stream = i % 2 === 1;
    const req = { model: 'iterative-gpt2', messages: t.messages, max_tokens: MAX, seed: t.seed, temperature: 0.9 };
    let text = '';
    let usage = null;
    if (stream) {
      for await (const ch of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
        if (ch.choices.length) text += ch.choices[0].delta.content || '';
        if (ch.usage) usage = ch.usage;
      }
    } else {
      const r = await client.chat.completions.create(req);
      text = r.choices[0].message.content;
      usage = r.usage;
    }
    L.eq(text, t.text, `/v1 turn ${i} (stream ${stream}): the same seeded text as /ws`);
    L.eq(usage.prompt_tokens, t.prompt, `/v1 turn ${i}: prompt_tokens`);
    L.eq(usage.trimmed_messages, t.trimmedMessages, `/v1 turn ${i}: usage.trimmed_messages`);
    L.eq(usage.trimmed_tokens, t.trimmedTokens, `/v1 turn ${i}: usage.trimmed_tokens`);
  }
  L.log(`/v1/chat/completions (openai client): the same text and counts for all ${turns.length} turns`);
  return client;
}

async function checkRefusals(srv, c, client, last) {
  const r1 = await c.request({ id: 'no-trim', messages: last.messages, max_tokens: MAX, truncate: false });
  L.check(r1.error && r1.error.code === 'prompt_too_long' && /truncate true/.test(r1.error.message),
    () => `truncate false: ${JSON.stringify(r1.error || r1.done)}`);
  let e = null;
  try {
    await client.chat.completions.create({ model: 'iterative-gpt2', messages: last.messages, max_tokens: MAX, truncate: false });
  } catch (x) {
    e = x;
  }
  L.check(e && e.status === 400 && /truncate true/.test(e.message), () => `/v1 truncate false: ${e}`);
  const big = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' },
    { role: 'assistant', content: ' ok' }, { role: 'user', content: 'word '.repeat(70) }];
  const r2 = await c.request({ id: 'too-big', messages: big, max_tokens: MAX });
  L.check(r2.error && r2.error.code === 'prompt_too_long' && /messages\[3\]/.test(r2.error.message),
    () => `the newest turn alone over the context: ${JSON.stringify(r2.error || r2.done)}`);
  const long = 'one two three four five six seven eight nine ten '.repeat(8);
  const r3 = await c.request({ id: 'long-prompt', prompt: long, max_tokens: MAX });
  L.check(r3.error && r3.error.code === 'prompt_too_long' && r3.error.message.includes(`truncate_prompt_tokens ${N_CTX - MAX}`),
    () => `an over-long prompt: ${JSON.stringify(r3.error || r3.done)}`);
  const r4 = await c.request({ id: 'both', messages: big.slice(0, 2), truncate_prompt_tokens: 10 });
  L.check(r4.error && r4.error.code === 'invalid_message', () => `truncate_prompt_tokens with messages: ${JSON.stringify(r4.error || r4.done)}`);
  L.log(`refused: truncate false (${r1.error.message}); the newest turn alone (${r2.error.message}); a long prompt (${r3.error.message})`);
  // truncate_prompt_tokens: the last N tokens, as ids give them
  const N = 20;
  const all = await tokenCount(srv.port, { prompt: long });
  const a = await client.completions.create({ model: 'iterative-gpt2', prompt: long, max_tokens: MAX, seed: 5, truncate_prompt_tokens: N });
  const b = await client.completions.create({ model: 'iterative-gpt2', prompt: all.tokens.slice(-N), max_tokens: MAX, seed: 5 });
  L.eq(a.choices[0].text, b.choices[0].text, 'truncate_prompt_tokens: the text of the last N tokens');
  L.eq(a.usage.prompt_tokens, N, 'truncate_prompt_tokens: prompt_tokens');
  L.eq(a.usage.trimmed_tokens, all.count - N, 'truncate_prompt_tokens: trimmed_tokens');
  const w = await c.request({ id: 'tpt', prompt: long, max_tokens: MAX, seed: 5, truncate_prompt_tokens: N });
  L.check(w.done, () => `/ws truncate_prompt_tokens: ${JSON.stringify(w.error)}`);
  L.eq(w.text, a.choices[0].text, '/ws truncate_prompt_tokens: the same text');
  L.eq(w.done.usage.trimmed_tokens, all.count - N, '/ws truncate_prompt_tokens: trimmed_tokens');
  L.log(`truncate_prompt_tokens ${N}: ${all.count - N} of ${all.count} tokens left out, the same text as the last ${N} ids`);
  return all.count - N;
}

async function checkHistory(port, turns) {
  const rows = await L.until(async () => {
    const r = await L.httpRequest(port, `/api/history?user=${KEY}&conversation=${CONV}&limit=100`);
    L.eq(r.status, 200, 'history of the conversation');
    const got = JSON.parse(r.body).requests;
    return got.length >= turns.length && got;
  }, 10000, 'every turn in the request log');
  L.eq(rows.length, turns.length, 'one row per turn');
  rows.reverse();
  for (const [i, row] of rows.entries()) {
    const t = turns[i];
    L.eq(JSON.stringify(row.messages), JSON.stringify(t.messages), `history row ${i}: messages as sent`);
    L.eq(row.trimmed_messages, t.trimmedMessages, `history row ${i}: trimmed_messages`);
    L.eq(row.trimmed_tokens, t.trimmedTokens, `history row ${i}: trimmed_tokens`);
    L.eq(row.prompt, render(kept(t.messages, t.trimmedMessages)), `history row ${i}: the prompt the model was given`);
    L.eq(row.completion, t.text, `history row ${i}: completion`);
  }
  const one = JSON.parse((await L.httpRequest(port, `/api/requests/${rows[rows.length - 1].id}?user=${KEY}`)).body).request;
  L.eq(one.trimmed_messages, turns[turns.length - 1].trimmedMessages, '/api/requests/ID: trimmed_messages');
  L.eq(one.params.truncate, true, '/api/requests/ID: params.truncate');
  L.log(`/api/history?conversation=${CONV}: ${rows.length} rows with their messages, trims and kept prompts`);
}

L.main('trim', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-embd', '64', '--n-head', '2', '--n-ctx', String(N_CTX)], 'trim-model');
  const db = path.join(L.tmpDir('trim-db'), 'log.db');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--db', db, '--max-tokens', String(MAX)]);
  const c = await L.Client.open(srv.port, { name: 'user', path: `/ws?user=${KEY}` });
  L.eq(c.hello.defaults.truncate, true, 'hello: defaults.truncate');
  const turns = await wsConversation(srv, c);
  const client = await openaiTurns(srv.base, turns);
  const cut = await checkRefusals(srv, c, client, turns[turns.length - 1]);
  await checkHistory(srv.port, turns);
  // /metrics: every admitted trim counted once (the /ws and /v1 turns, the two cut prompts)
  const m = await L.fetchMetrics(srv.port);
  const trimmedTurns = turns.filter((t) => t.trimmedMessages > 0);
  const pol = { policy: 'iterative' };
  L.eq(m.get('inflight_trimmed_requests_total', pol), 2 * trimmedTurns.length + 2, 'inflight_trimmed_requests_total');
  L.eq(m.get('inflight_trimmed_tokens_total', pol), 2 * trimmedTurns.reduce((n, t) => n + t.trimmedTokens, 0) + 2 * cut,
    'inflight_trimmed_tokens_total');
  // --trim off
  const off = await L.startServer(bin, vocab, model, ['--no-request-log', '--trim', 'off', '--max-tokens', String(MAX)]);
  const c2 = await L.Client.open(off.port, { name: 'trim-off' });
  L.eq(c2.hello.defaults.truncate, false, '--trim off: hello defaults.truncate');
  const last = turns[turns.length - 1];
  const r1 = await c2.request({ id: 'off-1', messages: last.messages, max_tokens: MAX, seed: last.seed, temperature: 0.9 });
  L.check(r1.error && r1.error.code === 'prompt_too_long', () => `--trim off: ${JSON.stringify(r1.error || r1.done)}`);
  const r2 = await c2.request({ id: 'off-2', messages: last.messages, max_tokens: MAX, seed: last.seed, temperature: 0.9, truncate: true });
  L.check(r2.done, () => `--trim off with truncate true: ${JSON.stringify(r2.error)}`);
  L.eq(r2.text, last.text, '--trim off with truncate true: the same text');
  L.eq(r2.done.usage.trimmed_messages, last.trimmedMessages, '--trim off with truncate true: the same cut');
  L.log('--trim off: refused, then the same text and cut with truncate: true');
  c.close();
  c2.close();
  srv.assertAlive();
  await srv.stop();
  await off.stop();
  const rows = D.q(db, `SELECT messages, trimmed_messages AS m, trimmed_tokens AS t FROM requests WHERE conversation = '${CONV}' ORDER BY queued_at`);
  L.eq(rows.length, TURNS, 'the log: one row per turn');
  L.eq(rows.filter((r) => r.m > 0).length, turns.filter((t) => t.trimmedMessages > 0).length, 'the log: the trimmed turns');
  const plain = D.q(db, "SELECT count(*) AS n FROM requests WHERE messages IS NULL AND trimmed_tokens > 0")[0];
  L.eq(plain.n, 2, 'the log: the two plain prompts cut by truncate_prompt_tokens (/v1 and /ws)');
  L.log(`the log: ${rows.length} rows of the conversation, ${rows.filter((r) => r.m > 0).length} with turns left out`);
});
