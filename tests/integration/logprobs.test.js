'use strict';
// logprobs: scoring and several samples (issue 49) through the official `openai` npm client (its
// own HTTP and SSE parsing) against the same server's /ws:
//  - completions `logprobs: 3` and chat `logprobs: true, top_logprobs: 3`, whole and streamed, read
//    without error; each token's logprob and its top list's values equal /ws's token frames for the
//    same seed and prompt (the same digits: one formatter), text_offset counts the text before;
//  - n = 4 at temperature 1: 4 choices, index 0..3, each reproducible (the same request twice gives
//    the same texts), not all alike (seed 42 shows it), choice 0 what n = 1 draws; streamed, each
//    chunk's index puts its text with the same choice; /ws's n = 2 gives per-choice token and done
//    frames and a last done summing the usage;
//  - lm-evaluation-harness's request: echo + logprobs 1 + max_tokens 0 with a batch of token-id
//    prompts: one choice per prompt in order, token_logprobs[0] and top_logprobs[0] null, as many
//    entries as prompt tokens, text the prompt's; with max_tokens 1 one more entry each;
//  - bad input gets a 400 naming the field: logprobs 21, n 17, max_tokens 0 without echo,
//    top_logprobs without logprobs (chat), an empty prompt list, a nested list with a non-integer.
const L = require('./lib');

const OpenAI = L.requireOpenAI();

async function collect(stream) {
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

const desc = (a) => a.slice().sort((x, y) => y - x);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// A completions logprobs object (whole, or the concatenation of a stream's) against /ws's frames.
function checkCmplLogprobs(lp, ref, text, where) {
  L.eq(lp.tokens.length, ref.tokens.length, `${where}: entries`);
  for (const [i, f] of ref.tokens.entries()) {
    L.eq(lp.token_logprobs[i], f.msg.logprob, `${where}: token_logprobs[${i}] vs /ws`);
    L.check(same(desc(Object.values(lp.top_logprobs[i])), f.msg.top.map((p) => p[1])),
      () => `${where}: top_logprobs[${i}] ${JSON.stringify(lp.top_logprobs[i])} vs /ws ${JSON.stringify(f.msg.top)}`);
    const best = Object.keys(lp.top_logprobs[i]).reduce((a, b) => (lp.top_logprobs[i][a] >= lp.top_logprobs[i][b] ? a : b));
    L.eq(lp.top_logprobs[i][best], f.msg.top[0][1], `${where}: the best of top_logprobs[${i}]`);
    L.eq(lp.text_offset[i], [...ref.tokens.slice(0, i).map((t) => t.msg.text).join('')].length, `${where}: text_offset[${i}]`);
  }
  L.eq(text, ref.text, `${where}: text vs /ws`);
}

async function checkCompletions(client, c) {
  const p = { max_tokens: 8, seed: 5, temperature: 0.9, ignore_eos: true };
  const prompt = 'The quick brown fox';
  const ref = await c.request({ id: 'lp-ws', prompt, logprobs: 3, ...p });
  L.check(ref.done, () => `/ws logprobs: no done (${JSON.stringify(ref.error)})`);
  L.check(ref.tokens.every((f) => typeof f.msg.logprob === 'number' && f.msg.top.length === 3),
    '/ws token frames carry logprob and top (3)');
  const plain = await c.request({ id: 'lp-ws-off', prompt, ...p });
  L.check(plain.tokens.every((f) => !('logprob' in f.msg) && !('top' in f.msg) && !('choice' in f.msg)), '/ws without logprobs: frames as before');
  L.eq(plain.text, ref.text, '/ws: logprobs change no token');
  const r = await client.completions.create({ model: 'iterative', prompt, logprobs: 3, ...p });
  checkCmplLogprobs(r.choices[0].logprobs, ref, r.choices[0].text, 'completions');
  const chunks = await collect(await client.completions.create({ model: 'iterative', prompt, logprobs: 3, ...p, stream: true }));
  const body = chunks.filter((ch) => ch.choices.length && ch.choices[0].logprobs);
  const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (const ch of body) for (const k of Object.keys(joined)) joined[k].push(...ch.choices[0].logprobs[k]);
  checkCmplLogprobs(joined, ref, chunks.map((ch) => (ch.choices[0] ? ch.choices[0].text : '')).join(''), 'completions stream');
  L.log(`completions logprobs 3: ${ref.tokens.length} entries = /ws's, whole and streamed`);
}

async function checkChat(client, c) {
  const messages = [{ role: 'user', content: 'Tell me a story' }];
  const p = { max_tokens: 6, seed: 9, temperature: 0.8, ignore_eos: true };
  const ref = await c.request({ id: 'lp-chat', messages, logprobs: 2, ...p });
  L.check(ref.done, '/ws chat reference');
  const check = (content, where) => {
    L.eq(content.length, ref.tokens.length, `${where}: content entries`);
    for (const [i, f] of ref.tokens.entries()) {
      L.eq(content[i].logprob, f.msg.logprob, `${where}: content[${i}].logprob vs /ws`);
      L.check(same(content[i].top_logprobs.map((t) => t.logprob), f.msg.top.map((x) => x[1])), `${where}: content[${i}].top_logprobs vs /ws`);
      L.check(Array.isArray(content[i].bytes) && content[i].bytes.every((b) => b >= 0 && b < 256), `${where}: bytes`);
    }
  };
  const r = await client.chat.completions.create({ model: 'iterative', messages, logprobs: true, top_logprobs: 2, ...p });
  check(r.choices[0].logprobs.content, 'chat');
  const chunks = await collect(await client.chat.completions.create({ model: 'iterative', messages, logprobs: true, top_logprobs: 2, ...p, stream: true }));
  check(chunks.flatMap((ch) => (ch.choices[0] && ch.choices[0].logprobs ? ch.choices[0].logprobs.content : [])), 'chat stream');
  const none = await client.chat.completions.create({ model: 'iterative', messages, ...p });
  L.check(!('logprobs' in none.choices[0]) || none.choices[0].logprobs === null, 'chat without logprobs: none');
  L.log(`chat logprobs + top_logprobs 2: ${ref.tokens.length} entries = /ws's, whole and streamed`);
}

async function checkChoices(client, c) {
  const req = { model: 'iterative', prompt: 'Once upon a time', max_tokens: 8, temperature: 1, seed: 42, ignore_eos: true, n: 4 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  L.eq(a.choices.length, 4, 'n = 4: choices');
  L.check(same(a.choices.map((ch) => ch.index), [0, 1, 2, 3]), 'n = 4: indices in order');
  L.check(same(a.choices.map((ch) => ch.text), b.choices.map((ch) => ch.text)), 'n = 4: the same request twice, the same choices');
  L.check(new Set(a.choices.map((ch) => ch.text)).size > 1, () => `n = 4 at temperature 1: all choices alike ${JSON.stringify(a.choices.map((ch) => ch.text))}`);
  L.eq(a.usage.completion_tokens, 32, 'n = 4: completion tokens summed');
  const one = await client.completions.create({ ...req, n: 1 });
  L.eq(one.choices[0].text, a.choices[0].text, 'choice 0 is what n = 1 draws');
  const chunks = await collect(await client.completions.create({ ...req, stream: true }));
  const texts = ['', '', '', ''];
  for (const ch of chunks) for (const x of ch.choices) texts[x.index] += x.text;
  L.check(same(texts, a.choices.map((ch) => ch.text)), () => `n = 4 streamed: ${JSON.stringify(texts)}`);
  // /ws: per-choice frames, a done per choice, then the request's done
  const from = c.frames.length;
  c.send({ type: 'generate', id: 'ws-n2', prompt: 'Once upon a time', max_tokens: 5, temperature: 1, seed: 42, ignore_eos: true, n: 2 });
  await c.waitFor((f) => f.msg.id === 'ws-n2' && f.msg.type === 'done' && !('choice' in f.msg), 120000, '/ws n = 2: the last done', from);
  const fr = c.frames.slice(from).map((f) => f.msg).filter((m) => m.id === 'ws-n2');
  const toks = fr.filter((m) => m.type === 'token');
  L.eq(toks.length, 10, '/ws n = 2: token frames');
  L.check(toks.every((m) => m.choice === 0 || m.choice === 1), '/ws n = 2: each token frame names its choice');
  const dones = fr.filter((m) => m.type === 'done');
  L.eq(dones.length, 3, '/ws n = 2: a done per choice and the last');
  L.eq(dones[2].usage.completion_tokens, 10, '/ws n = 2: the last done sums the choices');
  L.eq(toks.filter((m) => m.choice === 0).map((m) => m.text).join(''), a.choices[0].text.slice(0, toks.filter((m) => m.choice === 0).map((m) => m.text).join('').length),
    '/ws n = 2: choice 0 starts as the HTTP choice 0');
  L.log(`n = 4: 4 distinct reproducible choices (${JSON.stringify(a.choices.map((ch) => ch.text))}), streamed by index; /ws n = 2 frames`);
}

async function checkEcho(client, vocabDir) {
  const enc = require(vocabDir);
  const texts = ['Hello there, general', 'The sky is blue', 'A'];
  const prompts = texts.map((t) => enc.encode(t));
  for (const maxTokens of [0, 1]) {
    const r = await client.completions.create({ model: 'iterative', prompt: prompts, temperature: 0, max_tokens: maxTokens, logprobs: 1, seed: 1234, echo: true });
    L.eq(r.choices.length, prompts.length, `echo max_tokens ${maxTokens}: one choice per prompt`);
    for (const [i, ch] of r.choices.entries()) {
      const lp = ch.logprobs;
      L.eq(ch.index, i, `echo: choice ${i} index`);
      L.eq(lp.tokens.length, prompts[i].length + maxTokens, `echo max_tokens ${maxTokens}: prompt ${i} entries`);
      L.eq(lp.token_logprobs[0], null, 'token_logprobs[0] is null');
      L.eq(lp.top_logprobs[0], null, 'top_logprobs[0] is null');
      L.check(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0), 'the later positions are scored');
      L.check(ch.text.startsWith(texts[i]), () => `echo: text ${JSON.stringify(ch.text)} starts with the prompt`);
      L.eq(lp.text_offset[0], 0, 'text_offset[0]');
      // lm-evaluation-harness's greedy check reads the best key of each dict
      for (let k = 1; k < lp.tokens.length; k++) {
        const top = lp.top_logprobs[k];
        L.eq(Object.keys(top).length, 1, 'logprobs 1: one best token');
        L.check(Object.values(top)[0] >= lp.token_logprobs[k], 'the best is at least the token');
      }
    }
    L.eq(r.usage.prompt_tokens, prompts.reduce((s, p) => s + p.length, 0), 'usage: each prompt once');
    L.eq(r.usage.completion_tokens, maxTokens * prompts.length, 'usage: completion tokens summed');
  }
  const plain = await client.completions.create({ model: 'iterative', prompt: 'Echo me', max_tokens: 3, seed: 3, echo: true });
  L.check(plain.choices[0].text.startsWith('Echo me') && plain.choices[0].logprobs === null, 'echo without logprobs: the prompt first, no logprobs');
  L.log('echo + logprobs 1 with a batch of 3 token-id prompts: max_tokens 0 and 1, one choice each, [0] null');
}

async function checkErrors(client) {
  const cases = [
    ['completions', { prompt: 'Hi', logprobs: 21 }, 'out_of_range', 'logprobs'],
    ['completions', { prompt: 'Hi', n: 17 }, 'out_of_range', 'n'],
    ['completions', { prompt: 'Hi', max_tokens: 0 }, 'out_of_range', 'max_tokens'],
    ['chat', { messages: [{ role: 'user', content: 'Hi' }], top_logprobs: 3 }, 'invalid_request', 'top_logprobs'],
    ['completions', { prompt: [] }, 'out_of_range', 'prompt'],
    ['completions', { prompt: [[15496, 'x']] }, 'wrong_type', 'prompt'],
  ];
  for (const [api, body, code, param] of cases) {
    let err = null;
    try {
      if (api === 'chat') await client.chat.completions.create({ model: 'iterative', ...body });
      else await client.completions.create({ model: 'iterative', ...body });
    } catch (e) {
      err = e;
    }
    L.check(err, `${JSON.stringify(body)}: no error`);
    L.eq(err.status, 400, `${JSON.stringify(body)}: status`);
    L.eq(err.code, code, `${JSON.stringify(body)}: code`);
    L.eq(err.param, param, `${JSON.stringify(body)}: param`);
    L.check(err.message.includes(param), () => `${JSON.stringify(body)}: the message names ${param}: ${err.message}`);
  }
  L.log(`bad input: ${cases.length} requests refused with 400 naming the field`);
}

L.main('logprobs', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-embd', '128', '--n-head', '4'], 'lp-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log']);
  const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
  const c = await L.Client.open(srv.port, { name: 'lp-ref' });
  await checkErrors(client);
  await checkCompletions(client, c);
  await checkChat(client, c);
  await checkEcho(client, vocab);
  await checkChoices(client, c);
  c.close();
  srv.assertAlive();
  await srv.stop();
});
