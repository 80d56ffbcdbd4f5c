'use strict';
// triton_generate: Triton's generate extension (server/http_gen.c) on both models.
//  - POST /v2/models/{iterative-gpt2,simple-gpt2}/generate answers one JSON object
//    {model_name, model_version "1", text_output, finish_reason, prompt_tokens, completion_tokens};
//    its text equals what /ws gives for the same prompt, seed and parameters, with the sampling
//    fields at the top level or under "parameters", and the token counts are exact;
//  - .../generate_stream is text/event-stream, sent chunked: one `data:` object per token whose
//    text_outputs concatenate to the same text, then a last event with finish_reason;
//  - the seed's demo: two streams, the second sent once the first has its first token, run
//    together on iterative-gpt2 (a step holds both, the short one ends first) and one after the
//    other on simple-gpt2 (no step holds both), by the server's step frames;
//  - curl (the tutorial's client; `curl -d` without a Content-Type, `curl -N` for the stream) gets
//    the same answers on both models, and a 400 for a bad field;
//  - several requests on one keep-alive connection (the same client socket) all answer;
//  - bad requests get the right status and {"error"} naming what was wrong (bad JSON, not an
//    object, wrong types, out of range, unknown and doubled fields, empty prompt, not UTF-8, a body
//    over --max-message 413, neither Content-Length nor chunked 411, a malformed or oversized
//    chunked body, both framings at once or another coding 400/413, wrong Content-Type 415, GET
//    405 with Allow: POST, unknown model 404), and the server keeps serving;
//  - a chunked request body (Transfer-Encoding: chunked, split into several chunks, from a raw
//    socket and from node's http client) gives the same answer as with a Content-Length, JSON and
//    streamed, with Connection: close;
//  - the request target may take 8,192 bytes (more: 414) and the head 16,384 (more: 431; the wire
//    guard's limits, tests/integration/wire.test.js), and a body sent slowly holds no other
//    request up;
//  - a client that leaves in the middle of a stream has its request cancelled: /metrics counts it
//    finish_reason="cancelled", and its running requests and KV blocks in use return to 0.
const http = require('http');
const { spawnSync } = require('child_process');
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

// The same requests through curl (Triton's tutorial's client): `curl -d` (no -H: curl sends
// application/x-www-form-urlencoded, which is taken as JSON), the same with a chunked body, and
// `curl -N` for the stream, on both model names; the answers equal the ones above.
function curl(args) {
  const r = spawnSync('curl', ['-sS', '--max-time', '120', ...args], { encoding: 'utf8', timeout: 130000 });
  L.check(r.status === 0, () => `curl ${args.join(' ')}: status ${r.status}: ${r.stderr}`);
  return r.stdout;
}

async function checkCurl(srv) {
  if (!curlPath()) {
    L.cannotCheck('no curl: the Triton endpoints are not checked with curl (scripts/setup.sh --test installs it)');
    return;
  }
  const out = [];
  for (const model of ['iterative-gpt2', 'simple-gpt2']) {
    const body = { text_input: 'The quick brown fox', max_tokens: 8, seed: 5, temperature: 0.8, ignore_eos: true };
    const ref = await post(srv.port, `/v2/models/${model}/generate`, body);
    const refJ = JSON.parse(ref.text);
    const one = JSON.parse(curl(['-d', JSON.stringify(body), `${srv.base}/v2/models/${model}/generate`]));
    L.eq(JSON.stringify(one), JSON.stringify(refJ), `curl ${model}/generate`);
    const streamed = curl(['-N', '-H', 'Content-Type: application/json', '-d', JSON.stringify(body),
      `${srv.base}/v2/models/${model}/generate_stream`]);
    const evs = sseEvents({ headers: { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' }, text: streamed },
      `curl ${model}/generate_stream`);
    L.eq(evs.length, 9, `curl ${model}/generate_stream: events`);
    L.eq(evs.slice(0, -1).map((e) => e.text_output).join(''), refJ.text_output, `curl ${model}/generate_stream: the text`);
    L.eq(evs[8].finish_reason, 'length', `curl ${model}/generate_stream: finish`);
    // curl sends the body chunked when told to (as it does for a body read from a pipe)
    const chunkedOut = spawnSync('curl', ['-sS', '--max-time', '120', '-H', 'Transfer-Encoding: chunked',
      '--data-binary', '@-', `${srv.base}/v2/models/${model}/generate`], { input: JSON.stringify(body), encoding: 'utf8', timeout: 130000 });
    L.check(chunkedOut.status === 0, () => `curl chunked: status ${chunkedOut.status}: ${chunkedOut.stderr}`);
    L.eq(JSON.stringify(JSON.parse(chunkedOut.stdout)), JSON.stringify(refJ), `curl ${model}/generate with a chunked body`);
    out.push(`${model}: generate (also with a chunked body) and generate_stream (9 events) = the node client's answer`);
  }
  const bad = curl(['-w', '\n%{http_code}', '-d', '{"text_input": "x", "max_tokens": 0}', `${srv.base}/v2/models/simple-gpt2/generate`]).split('\n');
  L.eq(bad[1], '400', 'curl: a bad max_tokens');
  L.check(/max_tokens/.test(JSON.parse(bad[0]).error), 'curl: the error names max_tokens');
  L.log(`curl: ${out.join('; ')}; a bad request 400`);
}

function curlPath() {
  const r = spawnSync('sh', ['-c', 'command -v curl'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
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

// A raw request with a chunked body: the JSON split into chunks of `size` bytes (hex sizes).
function chunkedRequest(url, json, size, extraHeaders = '') {
  const b = Buffer.from(json);
  let body = '';
  for (let i = 0; i < b.length; i += size) {
    const part = b.subarray(i, i + size);
    body += `${part.length.toString(16)}\r\n${part.toString('latin1')}\r\n`;
  }
  return `POST ${url} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extraHeaders}` +
    `Transfer-Encoding: chunked\r\n\r\n${body}0\r\n\r\n`;
}

// The body of a raw answer: after the headers, de-chunked when it is chunked.
function rawBody(r) {
  const he = r.text.indexOf('\r\n\r\n');
  let rest = r.text.slice(he + 4);
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(r.text.slice(0, he))) return rest;
  let out = '';
  for (;;) {
    const nl = rest.indexOf('\r\n');
    const n = parseInt(rest.slice(0, nl), 16);
    if (!(n > 0)) return out;
    out += rest.slice(nl + 2, nl + 2 + n);
    rest = rest.slice(nl + 2 + n + 2);
  }
}

// Chunked request bodies: the same answers as with a Content-Length, JSON and streamed, from a raw
// socket (chunks of 1, 7 and 64 bytes, an extension and a trailer) and from node's http client
// (no Content-Length: it sends chunked); the connection closes after the answer.
async function checkChunked(srv) {
  const url = '/v2/models/iterative-gpt2/generate';
  const body = JSON.stringify({ text_input: 'Chunks of a body', max_tokens: 6, seed: 11, temperature: 0.9 });
  const ref = await post(srv.port, url, body);
  L.eq(ref.status, 200, 'the Content-Length reference');
  const want = parseJson(ref, 'reference').text_output;
  for (const size of [1, 7, 64]) {
    const r = await L.rawHttp(srv.port, chunkedRequest(url, body, size), 30000);
    L.eq(r.status, 200, `chunked body in ${size}-byte chunks (${r.text.slice(0, 300)})`);
    L.check(/\r\nconnection: close\r\n/i.test(r.text), `chunked ${size}: Connection: close`);
    const j = JSON.parse(rawBody(r));
    L.eq(j.text_output, want, `chunked ${size}: the text equals the Content-Length answer's`);
  }
  const ext = chunkedRequest(url, body, 10).replace(/\r\n0\r\n\r\n$/, '\r\n0;end=1\r\nX-Trailer: yes\r\n\r\n')
    .replace(/^(.*?\r\n\r\n)([0-9a-f]+)\r\n/s, '$1$2;name=value\r\n');
  const e = await L.rawHttp(srv.port, ext, 30000);
  L.eq(e.status, 200, `chunked with an extension and a trailer (${e.text.slice(0, 300)})`);
  L.eq(JSON.parse(rawBody(e)).text_output, want, 'extension and trailer: the same text');
  // streamed, chunked both ways
  const sr = await L.rawHttp(srv.port, chunkedRequest('/v2/models/iterative-gpt2/generate_stream', body, 5), 30000);
  L.eq(sr.status, 200, 'generate_stream with a chunked body');
  const evs = sseEvents({ headers: { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' }, text: rawBody(sr) }, 'chunked stream');
  L.eq(evs.map((x) => x.text_output).join(''), want, 'chunked stream: the text');
  // node's http client: write() twice without a Content-Length is a chunked body
  const node = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, path: url, method: 'POST', agent: false,
      headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.write(body.slice(0, 9));
    setTimeout(() => { req.write(body.slice(9)); req.end(); }, 50);
  });
  L.eq(node.status, 200, `node http, chunked (${node.text.slice(0, 200)})`);
  L.eq(node.headers.connection, 'close', 'node http, chunked: Connection: close');
  L.eq(JSON.parse(node.text).text_output, want, 'node http, chunked: the text');
  L.log(`chunked bodies: 1/7/64-byte chunks, extension + trailer, streamed, node http: all "${want.slice(0, 30)}..."`);
}

// Framings refused: none (411), both, another coding, malformed, oversized; each closes.
async function badFraming(srv, url) {
  const head = `POST ${url} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n`;
  const cases = [
    [`${head}\r\n{"text_input":"Hi"}`, 411, /needs a Content-Length or Transfer-Encoding: chunked/],
    [`${head}Content-Length: 19\r\nTransfer-Encoding: chunked\r\n\r\n13\r\n{"text_input":"Hi"}\r\n0\r\n\r\n`, 400, /both Content-Length and Transfer-Encoding/],
    // (the wire guard refuses another coding before lws reads a body of unknown end)
    [`${head}Transfer-Encoding: gzip\r\n\r\n`, 400, /Transfer-Encoding \\"gzip\\": only chunked is accepted/],
    [`${head}Transfer-Encoding: chunked\r\n\r\nzz\r\n`, 400, /chunked body is malformed: a chunk does not start with its size/],
    [`${head}Transfer-Encoding: chunked\r\n\r\n${(MAX_MESSAGE + 1).toString(16)}\r\n`, 413, /chunked body passes 4096 bytes/],
  ];
  for (const [raw, status, re] of cases) {
    const r = await L.rawHttp(srv.port, raw, 30000);
    L.eq(r.status, status, `${raw.slice(head.length, head.length + 50).replace(/\r\n/g, ' ')}: status (${r.text.slice(0, 200)})`);
    L.check(re.test(rawBody(r)), `status ${status}: ${rawBody(r).slice(0, 200)} does not match ${re}`);
  }
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
  await badFraming(srv, url);
  const get = await L.httpRequest(srv.port, url);
  L.eq(get.status, 405, `GET ${url}`);
  L.eq(get.headers.allow, 'POST', `GET ${url}: Allow`);
  const unknown = await post(srv.port, '/v2/models/gpt2/generate', { text_input: 'Hi' });
  L.eq(unknown.status, 404, 'unknown model');
  L.check(/unknown model 'gpt2'/.test(parseJson(unknown, '404').error), 'unknown model: the error names it');
  const ok = await post(srv.port, url, { text_input: 'Still here?', max_tokens: 3 });
  L.eq(ok.status, 200, 'a request after the bad ones');
  L.log(`bad requests: ${cases.length} bodies (${seen.filter((s) => s === 400).length} x 400, ${seen.filter((s) => s === 413).length} x 413), 415, 5 bad framings, 405, 404; then 200`);
}

// A stream through curl -N whose first event and end can be awaited: {first, done} (done resolves
// with {status, headers, text} as post() does; the headers are checked by the other streams).
function openCurlStream(port, model, body) {
  const { spawn } = require('child_process');
  let firstResolve;
  const first = new Promise((r) => { firstResolve = r; });
  const done = new Promise((resolve, reject) => {
    const p = spawn('curl', ['-sS', '-N', '--max-time', '300', '-w', '\n%{http_code}', '-H', 'Content-Type: application/json',
      '-d', JSON.stringify(body), `http://127.0.0.1:${port}/v2/models/${model}/generate_stream`]);
    let out = '';
    p.stdout.setEncoding('utf8');
    p.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n\n')) firstResolve();
    });
    p.on('error', reject);
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`curl exited ${code}`));
      const cut = out.lastIndexOf('\n');
      return resolve({ status: Number(out.slice(cut + 1)), text: out.slice(0, cut),
        headers: { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' } });
    });
  });
  return { first, done };
}

// A stream whose first event and end can be awaited: {first, done} (done resolves with the body).
function openStream(port, model, body) {
  if (curlPath()) return openCurlStream(port, model, body);
  const data = JSON.stringify(body);
  let firstResolve;
  const first = new Promise((r) => { firstResolve = r; });
  const done = new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: `/v2/models/${model}/generate_stream`, method: 'POST',
      agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => {
        text += c;
        if (text.includes('\n\n')) firstResolve();
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
  return { first, done };
}

// The seed's demo over /v2, through curl -N (the tutorial's client): A (A_TOKENS) streams; once A's first event is in, B (B_TOKENS) is
// sent to the same model. The verdict is the server's own step record (a /ws subscriber's step
// frames): on iterative-gpt2 some step holds both and B ends first; on simple-gpt2 no step holds
// both and B starts after A's last step. Only these two requests run meanwhile: A is the rid in
// A_TOKENS steps, B the one in B_TOKENS.
async function checkInterleave(srv, sub) {
  const A_TOKENS = 200;
  const B_TOKENS = 10;
  const out = [];
  for (const [model, policy] of [['iterative-gpt2', 'iterative'], ['simple-gpt2', 'static']]) {
    const from = sub.frames.length;
    const a = openStream(srv.port, model, { text_input: 'The history of the world begins', max_tokens: A_TOKENS, seed: 1, ignore_eos: true });
    await a.first;
    const b = openStream(srv.port, model, { text_input: 'Meanwhile, elsewhere', max_tokens: B_TOKENS, seed: 2, ignore_eos: true });
    const [ra, rb] = await Promise.all([a.done, b.done]);
    L.eq(ra.status, 200, `${model}: A's status`);
    L.eq(rb.status, 200, `${model}: B's status`);
    L.eq(sseEvents(ra, `${model} A`).length, A_TOKENS + 1, `${model}: A's events`);
    L.eq(sseEvents(rb, `${model} B`).length, B_TOKENS + 1, `${model}: B's events`);
    const stepsOf = () => sub.frames.slice(from).filter((f) => f.msg.type === 'step' && f.msg.model === policy).map((f) => f.msg);
    // A and B by their step counts: A_TOKENS and B_TOKENS steps (the step frames of requests that
    // ended before, which may trail their done frames, hold a step or two)
    const counts = () => {
      const m = new Map();
      for (const st of stepsOf()) for (const [r] of st.seqs) m.set(r, (m.get(r) || 0) + 1);
      return m;
    };
    const pick = () => {
      const m = counts();
      const a = [...m].find(([, n]) => n === A_TOKENS);
      const b = [...m].find(([r, n]) => n === B_TOKENS && (!a || r !== a[0]));
      return a && b ? [a[0], b[0]] : null;
    };
    await sub.waitFor(() => pick() !== null, 60000, `${policy}: the step frames of both requests (${A_TOKENS} and ${B_TOKENS} steps)`);
    const steps = stepsOf();
    const [rA, rB] = pick();
    L.eq(steps.reduce((x, st) => x + st.dropped, 0), 0, `${policy}: step frames dropped`);
    const withA = steps.filter((st) => st.seqs.some(([r]) => r === rA));
    const withB = steps.filter((st) => st.seqs.some(([r]) => r === rB));
    const both = steps.filter((st) => withA.includes(st) && withB.includes(st));
    const aLast = withA[withA.length - 1].step;
    const bFirst = withB[0].step;
    const bLast = withB[withB.length - 1].step;
    if (policy === 'iterative') {
      L.check(both.length > 0, `iterative-gpt2: no step holds both requests (A ${withA[0].step}..${aLast}, B ${bFirst}..${bLast})`);
      L.check(bLast < aLast, `iterative-gpt2: B (steps ${bFirst}..${bLast}) did not end before A (last step ${aLast})`);
    } else {
      L.eq(both.length, 0, 'simple-gpt2: steps holding both requests');
      L.check(bFirst > aLast, `simple-gpt2: B's first step ${bFirst} is not after A's last ${aLast}`);
    }
    out.push(`${model}: A steps ${withA[0].step}..${aLast}, B ${bFirst}..${bLast}, ${both.length} steps hold both`);
  }
  L.log(`the seed's demo over /v2 (${curlPath() ? 'curl -N' : 'node http'}): ${out.join('; ')}`);
}

// Header caps (the wire guard's: a target over 8,192 bytes is 414, a head over 16,384 bytes 431)
// and a slow body that holds nothing else up.
async function checkHygiene(srv) {
  const port = srv.port;
  const get = (extra, q = '') => L.rawHttp(port, `GET /v2/health/live${q} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`);
  L.eq((await get('', `?${'a'.repeat(6000)}`)).status, 200, 'a 6000-byte query');
  L.eq((await get('', `?${'a'.repeat(9000)}`)).status, 414, 'a 9000-byte query');
  L.eq((await get(`X-Big: ${'b'.repeat(12000)}\r\n`)).status, 200, 'a 12000-byte header');
  L.eq((await get(`X-Big: ${'b'.repeat(20000)}\r\n`)).status, 431, 'a 20000-byte header');
  // slow body: A's headers and 10 bytes of its body; B is answered meanwhile; then A's rest
  const body = JSON.stringify({ text_input: 'Hello', max_tokens: 2 });
  const net = require('net');
  const a = net.connect(port, '127.0.0.1');
  let aText = '';
  a.on('data', (d) => { aText += d.toString('latin1'); });
  await new Promise((r) => a.on('connect', r));
  a.write(`POST /v2/models/simple-gpt2/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.slice(0, 10)}`);
  const b = await post(port, '/v2/models/iterative-gpt2/generate', { text_input: 'Meanwhile', max_tokens: 2 });
  L.eq(b.status, 200, 'a request answered while another body is half sent');
  L.eq(aText, '', 'the slow request was answered before its body was complete');
  a.write(body.slice(10));
  await new Promise((r) => a.on('close', r));
  L.check(/^HTTP\/1\.1 200 /.test(aText) && /"finish_reason":"length"/.test(aText), `the slow request's answer: ${aText.slice(0, 200)}`);
  L.log('header caps: a 6000-byte query and a 12000-byte header served, a 9000-byte query 414, a 20000-byte header 431; a slow body held nothing up and was then answered');
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
  c.send({ type: 'subscribe', topic: 'steps' });
  await c.waitFor((f) => f.msg.type === 'subscribed', 30000, 'subscribed');
  await checkInterleave(srv, c);
  await checkCurl(srv);
  await checkKeepAlive(srv);
  await checkErrors(srv);
  await checkChunked(srv);
  await checkHygiene(srv);
  await checkClientLeaves(srv);
  c.close();
  srv.assertAlive();
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
