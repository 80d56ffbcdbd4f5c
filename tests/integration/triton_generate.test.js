'use strict';
// triton_generate: Triton's generate extension (server/http_gen.c) on both models.
//  - POST /v2/models/{iterative-gpt2,simple-gpt2}/generate answers one JSON object
//    {model_name, model_version "1", text_output, finish_reason, prompt_tokens, completion_tokens};
//    its text equals what /ws gives for the same prompt, seed and parameters, with the sampling
//    fields at the top level or under "parameters", and the token counts are exact;
//  - .../generate_stream is text/event-stream, sent chunked: one `data:` object per token whose
//    text_outputs concatenate to the same text, then a last event with finish_reason;
//  - several requests on one keep-alive connection (the same client socket) all answer;
//  - bad requests get the right status and {"error"} naming what was wrong (bad JSON, not an
//    object, wrong types, out of range, unknown and doubled fields, empty prompt, not UTF-8, a body
//    over --max-message 413, no Content-Length 411, wrong Content-Type 415, GET 405 with
//    Allow: POST, unknown model 404), and the server keeps serving;
//  - a client that leaves in the middle of a stream has its request cancelled: /metrics counts it
//    finish_reason="cancelled", and its running requests and KV blocks in use return to 0.
const http = require('http');
const L = require('./lib');

const MAX_MESSAGE = 4096;

function post(port, path, body, { headers = {}, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const data = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': data.length, ...headers } }, (res) => {
      const localPort = res.socket && res.socket.localPort;
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'),
        localPort }));
      res.on('error', reject);
    });
    req.setTimeout(120000, () => req.destroy(new Error(`POST ${path}: timeout`)));
    req.on('error', reject);
    req.end(data);
  });
}

function parseJson(r, what) {
  L.check(/^application\/json/.test(r.headers['content-type'] || ''), `${what}: Content-Type ${r.headers['content-type']}`);
  try {
    return JSON.parse(r.text);
  } catch (e) {
    return L.fail(`${what}: not JSON: ${JSON.stringify(r.text.slice(0, 200))}`);
  }
}

// The events of an SSE body: every block "data: <json>" separated by a blank line.
function sseEvents(r, what) {
  L.check(/^text\/event-stream/.test(r.headers['content-type'] || ''), `${what}: Content-Type ${r.headers['content-type']}`);
  L.eq(r.headers['transfer-encoding'], 'chunked', `${what}: Transfer-Encoding`);
  L.check(r.text.endsWith('\n\n'), `${what}: the stream does not end with a blank line`);
  return r.text.slice(0, -2).split('\n\n').map((block, i) => {
    L.check(block.startsWith('data: ') && !block.includes('\n'), `${what}: event ${i} is not one data line: ${JSON.stringify(block.slice(0, 100))}`);
    return JSON.parse(block.slice(6));
  });
}

async function wsText(c, id, params) {
  const r = await c.request({ id, ...params });
  L.check(r.done, () => `/ws ${id}: no done (${JSON.stringify(r.error)})`);
  return r;
}

async function checkSameText(srv, c) {
  const cases = [
    { model: 'iterative-gpt2', policy: 'iterative', prompt: 'The quick brown fox', p: { max_tokens: 24, seed: 7, temperature: 0.9, top_k: 40, top_p: 0.95, ignore_eos: true } },
    { model: 'simple-gpt2', policy: 'static', prompt: 'Hello, how are you?', p: { max_tokens: 16, seed: 11, temperature: 0.7, ignore_eos: true } },
    { model: 'iterative-gpt2', policy: 'iterative', prompt: 'Once upon a time', p: { max_tokens: 12, temperature: 0, ignore_eos: true } },
  ];
  const out = [];
  for (const [i, k] of cases.entries()) {
    const ref = await wsText(c, `ref-${i}`, { prompt: k.prompt, model: k.policy, ...k.p });
    const url = `/v2/models/${k.model}/generate`;
    // the sampling fields at the top level, then under "parameters"
    for (const body of [{ text_input: k.prompt, ...k.p }, { text_input: k.prompt, id: `req-${i}`, parameters: k.p }]) {
      const r = await post(srv.port, url, body);
      const j = parseJson(r, `POST ${url}`);
      L.eq(r.status, 200, `POST ${url} status (${r.text.slice(0, 200)})`);
      const want = { model_name: k.model, model_version: '1', ...(body.id ? { id: body.id } : {}), text_output: ref.text,
        finish_reason: 'length', prompt_tokens: ref.done.usage.prompt_tokens, completion_tokens: k.p.max_tokens };
      L.eq(JSON.stringify(j), JSON.stringify(want), `POST ${url} ${JSON.stringify(body)}`);
    }
    const st = await post(srv.port, `/v2/models/${k.model}/generate_stream`, { text_input: k.prompt, parameters: k.p });
    L.eq(st.status, 200, `generate_stream ${k.model} status`);
    const evs = sseEvents(st, `generate_stream ${k.model}`);
    const last = evs[evs.length - 1];
    L.eq(evs.length, k.p.max_tokens + 1, `generate_stream ${k.model}: events (one per token and the last)`);
    for (const e of evs.slice(0, -1))
      L.eq(Object.keys(e).join(','), 'model_name,model_version,text_output', `generate_stream ${k.model}: a token event's fields`);
    L.eq(evs.slice(0, -1).map((e) => e.text_output).join(''), ref.text, `generate_stream ${k.model}: the text`);
    L.eq(last.text_output, '', 'the last event has no text');
    L.eq(last.finish_reason, 'length', 'the last event finish_reason');
    L.eq(last.completion_tokens, k.p.max_tokens, 'the last event completion_tokens');
    out.push(`${k.model} seed ${k.p.seed === undefined ? '-' : k.p.seed}: ${k.p.max_tokens} tokens equal to /ws (generate, generate with parameters, stream of ${evs.length} events)`);
  }
  L.log(out.join('; '));
}

async function checkKeepAlive(srv) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const ports = [];
  for (const [i, path] of ['generate', 'generate_stream', 'generate', 'generate_stream'].entries()) {
    const r = await post(srv.port, `/v2/models/iterative-gpt2/${path}`, { text_input: 'Hello', max_tokens: 3, seed: i }, { agent });
    L.eq(r.status, 200, `keep-alive request ${i} (${path})`);
    ports.push(r.localPort);
  }
  const bad = await post(srv.port, '/v2/models/iterative-gpt2/generate', { text_input: 'Hello', max_tokens: -1 }, { agent });
  L.eq(bad.status, 400, 'keep-alive: a bad request');
  const after = await post(srv.port, '/v2/models/simple-gpt2/generate', { text_input: 'Hello', max_tokens: 2 }, { agent });
  L.eq(after.status, 200, 'keep-alive: a request after the bad one');
  ports.push(bad.localPort, after.localPort);
  agent.destroy();
  L.check(ports.every((p) => p === ports[0]), `keep-alive: the requests went over ${new Set(ports).size} connections: ${ports}`);
  L.log(`keep-alive: 6 requests (4 answers, a 400, an answer) on one connection (client port ${ports[0]})`);
}

async function checkErrors(srv) {
  const url = '/v2/models/iterative-gpt2/generate';
  const cases = [
    ['{"text_input": "Hello"', 400, /not valid JSON/],
    ['[1, 2]', 400, /must be a JSON object, not an array/],
    ['{"max_tokens": 4}', 400, /needs a 'text_input'/],
    ['{"text_input": ""}', 400, /'text_input' is empty/],
    ['{"text_input": 5}', 400, /'text_input' must be a string, not a number/],
    ['{"text_input": "Hi", "max_tokens": 0}', 400, /'max_tokens' is 0: must be between 1 and/],
    ['{"text_input": "Hi", "max_tokens": 2.5}', 400, /'max_tokens' is 2.5: must be an integer/],
    ['{"text_input": "Hi", "temperature": "hot"}', 400, /'temperature' must be a number, not a string/],
    ['{"text_input": "Hi", "top_p": 0}', 400, /'top_p' is 0/],
    ['{"text_input": "Hi", "stop": "x"}', 400, /'stop' must be an array of strings/],
    ['{"text_input": "Hi", "ignore_eos": 1}', 400, /'ignore_eos' must be a boolean/],
    ['{"text_input": "Hi", "bad_words": ""}', 400, /no field 'bad_words'/],
    ['{"text_input": "Hi", "parameters": {"stream": true}}', 400, /'parameters' has no field 'stream'/],
    ['{"text_input": "Hi", "parameters": 3}', 400, /'parameters' must be an object, not a number/],
    ['{"text_input": "Hi", "seed": 1, "parameters": {"seed": 2}}', 400, /'seed' is given both at the top level and under 'parameters'/],
    ['{"text_input": "Hi", "id": 7}', 400, /'id' must be a string/],
    ['{"text_input": "Hi\\u0000"}', 400, /U\+0000/],
    [Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), 400, /not valid UTF-8/],
    [`{"text_input": "${'a'.repeat(MAX_MESSAGE)}"}`, 413, /at most 4096 \(--max-message\)/],
  ];
  const seen = [];
  for (const [body, status, re] of cases) {
    const r = await post(srv.port, url, body);
    const j = parseJson(r, `POST ${String(body).slice(0, 60)}`);
    L.eq(r.status, status, `POST ${String(body).slice(0, 60)}: status (${r.text.slice(0, 200)})`);
    L.check(typeof j.error === 'string' && re.test(j.error), `POST ${String(body).slice(0, 60)}: error ${JSON.stringify(j.error)} does not match ${re}`);
    seen.push(status);
  }
  const ct = await post(srv.port, url, '{"text_input":"Hi"}', { headers: { 'content-type': 'text/plain' } });
  L.eq(ct.status, 415, 'Content-Type text/plain');
  L.check(/application\/json/.test(parseJson(ct, '415').error), '415 names application/json');
  const form = await post(srv.port, url, '{"text_input":"Hi","max_tokens":2}', { headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  L.eq(form.status, 200, "curl -d's Content-Type (application/x-www-form-urlencoded) is accepted");
  const chunked = await L.rawHttp(srv.port, `POST ${url} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n0\r\n\r\n`);
  L.eq(chunked.status, 411, 'a chunked body (no Content-Length)');
  L.check(/Content-Length is required/.test(chunked.text), '411 says a Content-Length is required');
  const get = await L.httpRequest(srv.port, url);
  L.eq(get.status, 405, `GET ${url}`);
  L.eq(get.headers.allow, 'POST', `GET ${url}: Allow`);
  const unknown = await post(srv.port, '/v2/models/gpt2/generate', { text_input: 'Hi' });
  L.eq(unknown.status, 404, 'unknown model');
  L.check(/unknown model 'gpt2'/.test(parseJson(unknown, '404').error), 'unknown model: the error names it');
  const ok = await post(srv.port, url, { text_input: 'Still here?', max_tokens: 3 });
  L.eq(ok.status, 200, 'a request after the bad ones');
  L.log(`bad requests: ${cases.length} bodies (${seen.filter((s) => s === 400).length} x 400, ${seen.filter((s) => s === 413).length} x 413), 415, 411, 405, 404; then 200`);
}

async function metricValue(port, name) {
  const m = await L.fetchMetrics(port);
  const v = m.samples.filter((s) => s.name === name).reduce((x, s) => x + s.value, 0);
  return v;
}

async function checkClientLeaves(srv) {
  const cancelledBefore = (await L.fetchMetrics(srv.port)).maybe('inflight_requests_total',
    { policy: 'iterative', finish_reason: 'cancelled' }) || 0;
  const body = JSON.stringify({ text_input: 'Hello', max_tokens: 255, ignore_eos: true, seed: 3 });
  const got = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, path: '/v2/models/iterative-gpt2/generate_stream', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.on('data', (c) => {
        text += c;
        if ((text.match(/\n\n/g) || []).length >= 3) {
          req.destroy(); // gone after three tokens
          resolve(text);
        }
      });
      res.on('error', () => {});
    });
    req.on('error', () => {});
    req.end(body);
    setTimeout(() => reject(new Error('no three events within 60 s')), 60000).unref();
  });
  L.check(!/finish_reason/.test(got), 'the stream ended before the client left');
  await L.until(async () => (await L.fetchMetrics(srv.port)).maybe('inflight_requests_total',
    { policy: 'iterative', finish_reason: 'cancelled' }) === cancelledBefore + 1, 30000, 'the request counted cancelled');
  await L.until(async () => (await metricValue(srv.port, 'inflight_requests_running')) === 0 &&
    (await metricValue(srv.port, 'inflight_kv_blocks_used')) === 0, 30000, 'running requests and KV blocks in use back to 0');
  L.log('a client that left after three events: its request counted cancelled (inflight_requests_total); running requests and KV blocks in use back to 0');
}

L.main('triton_generate', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-embd', '128', '--n-head', '4']);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--max-message', String(MAX_MESSAGE)]);
  const c = await L.Client.open(srv.port, { name: 'ws-ref' });
  await checkSameText(srv, c);
  await checkKeepAlive(srv);
  await checkErrors(srv);
  await checkClientLeaves(srv);
  c.close();
  srv.assertAlive();
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
