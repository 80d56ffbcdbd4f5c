'use strict';
// openai: the OpenAI-compatible API (server/http_openai.c) driven by the official `openai` npm
// package (its own HTTP and SSE parsing, not ours), against the same server's /ws:
//  - models.list() has the served model's name, iterative-gpt2, simple-gpt2, iterative, static;
//  - completions.create, not streamed and streamed (stream_options.include_usage): the text equals
//    /ws's for the same prompt, seed and parameters (top_k and ignore_eos passed as vLLM's
//    extensions), finish_reason length, usage exact (prompt tokens as /ws counted them);
//  - chat.completions.create, both ways: the reply equals /ws's text for the documented template
//    ("User: ...\nAssistant:", stop "\nUser:"), the first delta carries the role;
//  - errors come back as the client's APIError subclasses with status, code and param (bad range,
//    unknown model, n = 17 out of range, unknown field), and the server keeps serving;
//  - OpenAI's documented fields with neutral values pass unchanged and change nothing; other
//    values of them are unsupported_field, unknown fields unknown_field, each naming the field;
//  - a stream aborted with an AbortController after three chunks: the request is counted
//    cancelled on /metrics and running requests and KV blocks in use return to 0;
//  - a full queue (--max-batch 1 --max-queue 1, one running and one waiting): 429 queue_full with
//    Retry-After (the batcher's suggested wait, in whole seconds), the client's RateLimitError;
//  - the request log (--db) has a row per finished request with the API it came through (ws,
//    openai, and one triton request), as many per API and finish reason as /metrics'
//    inflight_api_requests_total counted (and the one refused by the request layer, a token id
//    out of range, with its code), and per API the log's tokens, first tokens and ended requests
//    equal inflight_api_generated_tokens_total and the _count of the API's time-to-first-token and
//    duration histograms; a session is a connection (keep-alive requests share it)
//    and ends when the connection closes.
const http = require('http');
const path = require('path');
const D = require('../db/dblib');
const L = require('./lib');

const OpenAI = L.requireOpenAI();

async function wsRef(c, id, params) {
  const r = await c.request({ id, ...params });
  L.check(r.done, () => `/ws ${id}: no done (${JSON.stringify(r.error)})`);
  return r;
}

async function collect(stream) {
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

async function checkCompletions(client, c, served) {
  const out = [];
  const cases = [
    { model: served, policy: 'iterative', prompt: 'The quick brown fox', p: { max_tokens: 20, seed: 7, temperature: 0.9, top_p: 0.95 }, ext: { top_k: 40, ignore_eos: true } },
    { model: 'simple-gpt2', policy: 'static', prompt: 'Hello, how are you?', p: { max_tokens: 12, seed: 3, temperature: 0.7 }, ext: { ignore_eos: true } },
  ];
  for (const [i, k] of cases.entries()) {
    const ref = await wsRef(c, `cmp-${i}`, { prompt: k.prompt, model: k.policy, ...k.p, ...k.ext });
    const r = await client.completions.create({ model: k.model, prompt: k.prompt, ...k.p, ...k.ext });
    L.eq(r.object, 'text_completion', 'completion object');
    L.eq(r.model, k.model, 'completion model');
    L.check(/^cmpl-[0-9a-f]{16}$/.test(r.id), `completion id ${r.id}`);
    L.eq(r.choices.length, 1, 'choices');
    L.eq(r.choices[0].text, ref.text, `completion ${i}: text vs /ws`);
    L.eq(r.choices[0].finish_reason, 'length', 'finish_reason');
    L.eq(JSON.stringify(r.usage), JSON.stringify({ prompt_tokens: ref.done.usage.prompt_tokens, completion_tokens: k.p.max_tokens,
      total_tokens: ref.done.usage.prompt_tokens + k.p.max_tokens,
      prompt_tokens_details: { cached_tokens: ref.done.usage.cached_tokens },
      trimmed_messages: 0, trimmed_tokens: 0 }), 'usage');
    const chunks = await collect(await client.completions.create({ model: k.model, prompt: k.prompt, ...k.p, ...k.ext,
      stream: true, stream_options: { include_usage: true } }));
    const usage = chunks[chunks.length - 1];
    const body = chunks.slice(0, -1);
    L.eq(usage.choices.length, 0, 'the usage chunk has no choices');
    L.eq(usage.usage.completion_tokens, k.p.max_tokens, 'stream usage completion_tokens');
    L.eq(usage.usage.prompt_tokens, ref.done.usage.prompt_tokens, 'stream usage prompt_tokens');
    L.eq(body.length, k.p.max_tokens + 1, 'stream chunks (one per token and the finish)');
    L.eq(body.map((ch) => ch.choices[0].text).join(''), ref.text, `completion ${i} stream: text vs /ws`);
    L.eq(body[body.length - 1].choices[0].finish_reason, 'length', 'stream finish_reason');
    L.check(body.slice(0, -1).every((ch) => ch.choices[0].finish_reason === null), 'finish_reason null until the end');
    out.push(`${k.model}: ${k.p.max_tokens} tokens = /ws (whole and streamed, usage ${usage.usage.prompt_tokens}+${usage.usage.completion_tokens})`);
  }
  // the prompt as token ids (the JavaScript reference encoder's): the same completion
  const enc = require(path.join(L.REPO, 'node_modules', 'gpt-3-encoder'));
  const k = cases[0];
  const ids = enc.encode(k.prompt);
  const byText = await client.completions.create({ model: k.model, prompt: k.prompt, ...k.p, ...k.ext });
  const byIds = await client.completions.create({ model: k.model, prompt: ids, ...k.p, ...k.ext });
  L.eq(byIds.choices[0].text, byText.choices[0].text, 'the prompt as token ids: the same completion');
  L.eq(byIds.usage.prompt_tokens, ids.length, 'the prompt as token ids: prompt_tokens');
  out.push(`prompt as ${ids.length} token ids = as text`);
  L.log(`completions: ${out.join('; ')}`);
}

async function checkChat(client, c) {
  const messages = [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: 'Tell me about the sea.' }];
  const prompt = 'System: You are brief.\nUser: Tell me about the sea.\nAssistant:';
  const p = { max_tokens: 16, seed: 21, temperature: 0.8 };
  const ref = await wsRef(c, 'chat-ref', { prompt, model: 'iterative', ...p, stop: ['\nUser:'], ignore_eos: true });
  const r = await client.chat.completions.create({ model: 'iterative-gpt2', messages, ...p, ignore_eos: true });
  L.eq(r.object, 'chat.completion', 'chat object');
  L.eq(r.choices[0].message.role, 'assistant', 'chat role');
  L.eq(r.choices[0].message.content, ref.text, 'chat reply vs /ws with the template');
  const wantFinish = ref.done.finish_reason === 'length' ? 'length' : 'stop';
  L.eq(r.choices[0].finish_reason, wantFinish, 'chat finish_reason');
  L.eq(r.usage.prompt_tokens, ref.done.usage.prompt_tokens, 'chat usage prompt_tokens');
  L.eq(r.usage.completion_tokens, ref.done.usage.completion_tokens, 'chat usage completion_tokens');
  const chunks = await collect(await client.chat.completions.create({ model: 'iterative-gpt2', messages, ...p, ignore_eos: true, stream: true }));
  L.eq(chunks[0].choices[0].delta.role, 'assistant', 'the first delta carries the role');
  L.check(chunks.every((ch) => ch.object === 'chat.completion.chunk'), 'chunk objects');
  L.eq(chunks.map((ch) => ch.choices[0].delta.content || '').join(''), ref.text, 'chat stream vs /ws');
  L.eq(chunks[chunks.length - 1].choices[0].finish_reason, wantFinish, 'chat stream finish_reason');
  L.log(`chat: the reply (${ref.done.usage.completion_tokens} tokens, finish ${wantFinish}) = /ws with the template, whole and in ${chunks.length} chunks`);
}

async function checkErrors(client) {
  const cases = [
    [{ model: 'iterative', prompt: 'Hi', temperature: 9 }, 400, 'BadRequestError', 'out_of_range', 'temperature'],
    [{ model: 'gpt-4', prompt: 'Hi' }, 404, 'NotFoundError', 'unknown_model', 'model'],
    [{ model: 'iterative', prompt: 'Hi', n: 17 }, 400, 'BadRequestError', 'out_of_range', 'n'],
    [{ model: 'iterative', prompt: 'Hi', logit_bias: { 50257: 1 } }, 400, 'BadRequestError', 'out_of_range', 'logit_bias'],
    [{ model: 'iterative', prompt: 'Hi', frequency_penalty: 2.5 }, 400, 'BadRequestError', 'out_of_range', 'frequency_penalty'],
    [{ model: 'iterative', prompt: 'Hi', max_tokens: 4, min_tokens: 5 }, 400, 'BadRequestError', 'out_of_range', 'min_tokens'],
    [{ model: 'iterative', prompt: 'Hi', max_tokenz: 4 }, 400, 'BadRequestError', 'unknown_field', 'max_tokenz'],
    [{ model: 'iterative', prompt: '' }, 400, 'BadRequestError', 'empty_prompt', 'prompt'],
    [{ model: 'iterative', prompt: 'Hi', stop: ['a', 'b', 'c', 'd', 'e'] }, 400, 'BadRequestError', 'out_of_range', 'stop'],
    [{ model: 'iterative', prompt: [15496, 999999] }, 400, 'BadRequestError', 'out_of_range', null],
    [{ model: 'iterative', prompt: [['Hi']] }, 400, 'BadRequestError', 'wrong_type', 'prompt'],
    [{ model: 'iterative', prompt: [] }, 400, 'BadRequestError', 'out_of_range', 'prompt'],
  ];
  const seen = [];
  for (const [body, status, cls, code, param] of cases) {
    let err = null;
    try {
      await client.completions.create(body);
    } catch (e) {
      err = e;
    }
    L.check(err, `${JSON.stringify(body)}: no error`);
    L.eq(err.status, status, `${JSON.stringify(body)}: status`);
    L.eq(err.constructor.name, cls, `${JSON.stringify(body)}: error class`);
    L.eq(err.code, code, `${JSON.stringify(body)}: code`);
    L.eq(err.param, param, `${JSON.stringify(body)}: param`);
    seen.push(`${status} ${code}(${param})`);
  }
  const ok = await client.completions.create({ model: 'iterative', prompt: 'Still there?', max_tokens: 2 });
  L.eq(ok.choices[0].finish_reason === 'length' || ok.choices[0].finish_reason === 'stop', true, 'a request after the errors');
  L.log(`errors through the client: ${seen.join(', ')}; then served`);
}

// OpenAI's manners (issue 48): the documented fields this server does not implement pass with
// their neutral values, as generated clients send them, and change nothing (the same tokens as
// without them); another value of one is unsupported_field naming it; an unknown field stays
// unknown_field.
async function checkManners(client) {
  const base = { model: 'iterative', prompt: 'The sea', max_tokens: 6, seed: 11, temperature: 0.9 };
  const ref = await client.completions.create(base);
  const cmplNeutral = { n: 1, best_of: 1, logprobs: null, echo: false, suffix: null, store: false, metadata: { a: 'b' },
    service_tier: 'auto', presence_penalty: 0, frequency_penalty: 0, stop: null, stream: false };
  const r = await client.completions.create({ ...base, ...cmplNeutral });
  L.eq(r.choices[0].text, ref.choices[0].text, 'completions: the neutral fields change nothing');
  const chatBase = { model: 'iterative', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, seed: 11 };
  const cref = await client.chat.completions.create(chatBase);
  const chatNeutral = { n: 1, logprobs: false, top_logprobs: 0, response_format: { type: 'text' }, tools: [],
    tool_choice: 'none', parallel_tool_calls: true, store: false, metadata: {}, service_tier: 'default',
    modalities: ['text'], max_completion_tokens: null };
  const cr = await client.chat.completions.create({ ...chatBase, ...chatNeutral });
  L.eq(cr.choices[0].message.content, cref.choices[0].message.content, 'chat: the neutral fields change nothing');
  const refused = [
    ['completions', { best_of: 3 }, 'best_of'], ['completions', { suffix: 'x' }, 'suffix'],
    ['chat', { response_format: { type: 'json_object' } }, 'response_format'],
    ['chat', { tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'], ['chat', { tool_choice: 'auto' }, 'tool_choice'],
    ['chat', { prompt: 'x' }, 'prompt'],
    ['completions', { messages: [] }, 'messages'], ['chat', { frobnicate: 1 }, 'frobnicate'],
  ];
  const seen = [];
  for (const [api, extra, field] of refused) {
    let err = null;
    try {
      if (api === 'chat') await client.chat.completions.create({ ...chatBase, ...extra });
      else await client.completions.create({ ...base, ...extra });
    } catch (e) {
      err = e;
    }
    const unknown = ['prompt', 'messages', 'frobnicate'].includes(field);
    L.check(err, `${api} ${JSON.stringify(extra)}: no error`);
    L.eq(err.status, 400, `${api} ${JSON.stringify(extra)}: status`);
    L.eq(err.code, unknown ? 'unknown_field' : 'unsupported_field', `${api} ${JSON.stringify(extra)}: code`);
    L.eq(err.param, field, `${api} ${JSON.stringify(extra)}: param`);
    L.check(unknown ? /has no field/.test(err.message) : /not supported by this server/.test(err.message),
      () => `${api} ${JSON.stringify(extra)}: message ${err.message}`);
    seen.push(`${field}:${err.code}`);
  }
  L.log(`manners: ${Object.keys(cmplNeutral).length} neutral completions fields and ${Object.keys(chatNeutral).length} chat fields accepted, same tokens; refused: ${seen.join(' ')}`);
}

async function checkAbort(client, srv) {
  const m0 = await L.fetchMetrics(srv.port);
  const before = m0.maybe('inflight_requests_total', { policy: 'iterative', finish_reason: 'cancelled' }) || 0;
  const ac = new AbortController();
  const stream = await client.completions.create({ model: 'iterative', prompt: 'Once', max_tokens: 255, ignore_eos: true, stream: true },
    { signal: ac.signal });
  let n = 0;
  try {
    for await (const ch of stream) {
      L.check(ch.choices[0].finish_reason === null, 'the stream finished before the abort');
      if (++n === 3) {
        ac.abort(); // the client closes the connection; chunks already read may still come
        break;
      }
    }
  } catch (e) {
    L.check(e.name === 'AbortError' || /abort/i.test(e.message), `the stream failed otherwise: ${e.message}`);
  }
  L.eq(n, 3, 'chunks read before the abort');
  await L.until(async () => (await L.fetchMetrics(srv.port)).maybe('inflight_requests_total',
    { policy: 'iterative', finish_reason: 'cancelled' }) === before + 1, 30000, 'the aborted request counted cancelled');
  await L.until(async () => {
    const m = await L.fetchMetrics(srv.port);
    return m.samples.filter((s) => s.name === 'inflight_requests_running').every((s) => s.value === 0) &&
      m.samples.filter((s) => s.name === 'inflight_kv_blocks_used').every((s) => s.value === 0);
  }, 30000, 'running requests and KV blocks in use back to 0');
  L.log(`AbortController after ${n} chunks: the request counted cancelled; running requests and KV blocks in use back to 0`);
}

function tritonOnce(port) {
  const body = JSON.stringify({ text_input: 'Hello', max_tokens: 3 });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v2/models/simple-gpt2/generate', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// The log's rows by API and finish reason against /metrics' counts (taken before the stop).
function checkLog(db, metrics) {
  const rows = D.q(db, 'SELECT api, finish_reason, count(*) AS n FROM requests WHERE finish_reason IS NOT NULL ' +
    'GROUP BY api, finish_reason ORDER BY api, finish_reason');
  // refused by the request layer (after parsing): logged with their code, no finish
  const refused = D.q(db, 'SELECT api, error_code FROM requests WHERE finish_reason IS NULL');
  L.eq(JSON.stringify(refused), JSON.stringify([{ api: 'openai', error_code: 'out_of_range' }, { api: 'ws', error_code: 'prompt_too_long' }]),
    'refused rows (the token id out of range, the long prompt)');
  // a refused request keeps the first 256 bytes of its prompt (cut at a character), the whole
  // length in prompt_bytes: refusals cost the sender nothing and must not grow the file by a prompt
  const long = D.q(db, `SELECT length(CAST(prompt AS BLOB)) AS kept, prompt_bytes AS bytes, prompt FROM requests WHERE client_id = 'long-refused'`);
  L.eq(long.length, 1, 'the long refused request: rows');
  L.eq(long[0].kept, 254, 'its prompt bytes kept (256 would cut a 3-byte character)');
  L.eq(long[0].bytes, LONG_PROMPT_BYTES, 'its prompt_bytes');
  L.eq(long[0].prompt, LONG_PROMPT.slice(0, 2 + 84), 'its prompt: the start, whole characters');
  const bad = D.q(db, 'SELECT count(*) AS n FROM requests WHERE finish_reason IS NOT NULL AND prompt_bytes != length(CAST(prompt AS BLOB))');
  L.eq(bad[0].n, 0, 'finished requests whose prompt_bytes is not their prompt\'s length');
  L.log(`the refused ${LONG_PROMPT_BYTES}-byte prompt: ${long[0].kept} bytes kept, prompt_bytes ${long[0].bytes}; finished rows keep their whole prompt`);
  const want = metrics.samples.filter((x) => x.name === 'inflight_api_requests_total' && x.value > 0)
    .map((x) => ({ api: x.labels.api, finish_reason: x.labels.finish_reason, n: x.value }))
    .sort((a, b) => (a.api + a.finish_reason < b.api + b.finish_reason ? -1 : 1));
  L.eq(JSON.stringify(rows), JSON.stringify(want), 'requests by api and finish_reason: the log vs /metrics');
  for (const api of ['ws', 'openai', 'triton'])
    L.check(rows.some((r) => r.api === api), `no ${api} row in the log`);
  // tokens, first tokens and ends by API: the log's sums against the labelled series
  const byApi = D.q(db, 'SELECT api, sum(completion_tokens) AS tokens, count(ttft_ms) AS first, ' +
    'count(finish_reason) AS ended FROM requests GROUP BY api ORDER BY api');
  for (const r of byApi) {
    L.eq(metrics.maybe('inflight_api_generated_tokens_total', { api: r.api }), r.tokens, `${r.api}: generated tokens, /metrics vs the log`);
    L.eq(metrics.maybe('inflight_api_time_to_first_token_seconds_count', { api: r.api }), r.first, `${r.api}: first tokens, /metrics vs the log`);
    L.eq(metrics.maybe('inflight_api_request_duration_seconds_count', { api: r.api }), r.ended, `${r.api}: ended requests, /metrics vs the log`);
  }
  L.log(`by API (log = /metrics): ${byApi.map((r) => `${r.api} ${r.tokens} tokens, ${r.first} first tokens, ${r.ended} ended`).join('; ')}`);
  // a session is the connection: the client's keep-alive requests share one; Triton's (its own
  // connection) has its own; every HTTP session is closed as its connection closed
  const oai = D.q(db, "SELECT count(*) AS n, count(DISTINCT session_id) AS s FROM requests WHERE api = 'openai'")[0];
  L.check(oai.s < oai.n, `the client's ${oai.n} keep-alive requests are in ${oai.s} sessions: none shared`);
  const tri = D.q(db, "SELECT count(*) AS n FROM requests WHERE session_id = (SELECT session_id FROM requests WHERE api = 'triton')")[0];
  L.eq(tri.n, 1, "requests in the Triton request's session");
  const reasons = D.q(db, "SELECT DISTINCT s.close_reason AS r FROM sessions s JOIN requests q ON q.session_id = s.id WHERE q.api != 'ws'");
  L.eq(JSON.stringify(reasons), JSON.stringify([{ r: 'HTTP connection closed' }]), 'the HTTP sessions close reasons');
  L.log(`request log: ${rows.map((r) => `${r.api}/${r.finish_reason} ${r.n}`).join(', ')} = /metrics; ${oai.n} openai requests in ${oai.s} sessions (connections), all closed`);
}

// A full queue: with --max-batch 1 --max-queue 1, A runs, B waits, C is refused 429 with
// Retry-After, as the client's RateLimitError.
async function checkQueueFull(bin, vocab, model, OpenAIClass) {
  // --top-k past the vocabulary: the default is lowered to it, loudly, so hello never advertises a
  // top_k a client would be refused for sending back
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--max-batch', '1', '--max-queue', '1', '--top-k', '60000']);
  {
    const w = await L.Client.open(srv.port, { name: 'top-k' });
    L.eq(w.hello.defaults.top_k, w.hello.model.vocab_size, 'hello defaults.top_k after --top-k 60000');
    L.check(/--top-k 60000 is past the vocabulary/.test(srv.stderr), () => `no warning for --top-k 60000: ${srv.stderr.slice(-500)}`);
    w.send({ type: 'generate', id: 'k', prompt: 'x', max_tokens: 1, top_k: w.hello.defaults.top_k });
    const end = await w.waitEnd('k');
    L.check(end.type === 'done', () => `top_k as hello advertises it: ${JSON.stringify(end)}`);
    w.close();
    await w.closed;
    L.log(`--top-k 60000: hello's default top_k is the vocabulary, ${w.hello.defaults.top_k}, and a request sending it back runs`);
  }
  const client = new OpenAIClass({ baseURL: `${srv.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  const ac = new AbortController();
  const opened = async (prompt) => {
    const st = await client.completions.create({ model: 'iterative', prompt, max_tokens: 255, ignore_eos: true, stream: true }, { signal: ac.signal });
    return st;
  };
  const a = await opened('A');
  const itA = a[Symbol.asyncIterator]();
  await itA.next(); // A has its first token: it runs
  await opened('B'); // its 200 came once it was submitted: it waits
  const body = JSON.stringify({ model: 'iterative', prompt: 'C', max_tokens: 2 });
  const r = await L.httpRequest(srv.port, '/v1/completions', { method: 'POST', body,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
  L.eq(r.status, 429, 'C with A running and B waiting');
  const retryAfter = r.headers['retry-after'];
  L.check(/^[1-9][0-9]*$/.test(retryAfter || '') && Number(retryAfter) <= 30, `Retry-After ${retryAfter}: whole seconds, 1 to 30`);
  const rbody = JSON.parse(r.body.toString('utf8'));
  L.eq(rbody.error.code, 'queue_full', '429 code');
  L.check(/queue is full \(1 waiting\); try again in \d+ ms/.test(rbody.error.message), `429 message: ${rbody.error.message}`);
  let err = null;
  try {
    await client.completions.create({ model: 'iterative', prompt: 'D', max_tokens: 2 });
  } catch (e) {
    err = e;
  }
  L.check(err && err.constructor.name === 'RateLimitError' && err.status === 429, `the client's error for a full queue: ${err && err.constructor.name}`);
  ac.abort();
  await srv.stop();
  L.log(`a full queue: 429 queue_full with Retry-After: ${retryAfter} ("${rbody.error.message}"), the client's RateLimitError`);
}

// HEAD of the history endpoints, whose answers come from the history thread, then a GET on the
// same kept-alive connection: the HEAD answer must carry the GET's headers (Content-Length of its
// body) and no body, or the client reads that body as the start of the next response.
// hello names the model by its directory's name, not its filesystem path; /api/requests/ID answers
// a request that is not the key's exactly as an id that does not exist (404, same body)
async function checkNoDisclosure(port, hello, served) {
  L.eq(hello.model.name, served, 'hello model.name');
  L.check(!('path' in hello.model), () => `hello gives the model's path: ${JSON.stringify(hello.model)}`);
  const user = 'user=disclosure-check-0001';
  const other = await L.httpRequest(port, `/api/requests/1?${user}`); // row 1: not this key's
  const none = await L.httpRequest(port, `/api/requests/987654321?${user}`);
  L.eq(other.status, 404, 'a request that is not yours: status');
  L.eq(other.body.toString(), none.body.toString(), 'not yours vs no such id: body');
  L.log(`hello model.name ${hello.model.name} (no path); not yours and no such id: both ${none.status} ${none.body}`);
}

// 'xy' then 1,000 three-byte characters: longer than the model's context, so refused; 256 bytes
// would end inside the 85th
const LONG_PROMPT = 'xy' + '\u20ac'.repeat(1000);
const LONG_PROMPT_BYTES = Buffer.byteLength(LONG_PROMPT);

async function refuseLongPrompt(c) {
  c.send({ type: 'generate', id: 'long-refused', prompt: LONG_PROMPT, max_tokens: 1 });
  const e = await c.waitEnd('long-refused');
  L.check(e.type === 'error' && e.code === 'prompt_too_long', () => `the long prompt: ${JSON.stringify(e)}`);
}

async function checkHistoryHead(port) {
  const net = require('net');
  for (const p of ['/api/history?user=head-check-user-0001', '/api/requests/1?user=head-check-user-0001']) {
    const get = await L.httpRequest(port, p);
    const text = await new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1');
      let got = '';
      const t = setTimeout(() => { sock.destroy(); resolve(got); }, 10000);
      sock.on('connect', () => sock.write(`HEAD ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n` +
        'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'));
      sock.on('data', (d) => {
        got += d.toString('latin1');
        if (/\r\n\r\nok\n$/.test(got)) { clearTimeout(t); sock.destroy(); resolve(got); }
      });
      sock.on('error', reject);
    });
    const he = text.indexOf('\r\n\r\n');
    L.check(he > 0, `HEAD ${p}: no answer (${JSON.stringify(text.slice(0, 200))})`);
    const head = text.slice(0, he);
    const status = Number((/^HTTP\/1\.1 (\d{3})/.exec(head) || [])[1]);
    L.eq(status, get.status, `HEAD ${p} status`);
    L.eq(Number((/\r\ncontent-length:\s*(\d+)/i.exec(head) || [])[1]), get.body.length, `HEAD ${p} Content-Length`);
    const rest = text.slice(he + 4);
    L.check(/^HTTP\/1\.1 200 /.test(rest) && rest.endsWith('\r\n\r\nok\n'),
      () => `after HEAD ${p}, the next bytes must be the /healthz answer, got ${JSON.stringify(rest.slice(0, 120))}`);
    L.log(`HEAD ${p}: ${status}, Content-Length ${get.body.length}, no body; the next answer on the connection intact`);
  }
}

L.main('openai', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-embd', '128', '--n-head', '4'], 'oai-model');
  const served = path.basename(model);
  const db = path.join(L.tmpDir('oai-db'), 'log.db');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--db', db]);
  const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  L.eq(ids.join(','), [served, 'iterative-gpt2', 'simple-gpt2', 'iterative', 'static'].join(','), 'models.list() ids');
  L.log(`models.list(): ${ids.join(', ')}`);
  const c = await L.Client.open(srv.port, { name: 'ws-ref' });
  await checkCompletions(client, c, served);
  await checkChat(client, c);
  await checkErrors(client);
  await checkManners(client);
  await checkAbort(client, srv);
  L.eq(await tritonOnce(srv.port), 200, 'a Triton request');
  await checkHistoryHead(srv.port);
  await checkNoDisclosure(srv.port, c.hello, served);
  await refuseLongPrompt(c);
  c.close();
  srv.assertAlive();
  await L.until(async () => (await L.fetchMetrics(srv.port)).maybe('inflight_api_requests_total', { api: 'triton', finish_reason: 'length' }) === 1,
    10000, 'the Triton request counted');
  const metrics = await L.fetchMetrics(srv.port);
  await srv.stop();
  checkLog(db, metrics);
  await checkQueueFull(bin, vocab, model, OpenAI);
  L.log('server stopped cleanly (exit 0)');
});
