'use strict';
// soak: 10,000 requests over /v1 from raw sockets, ~64 at a time, with random pipelining, slow
// bodies, early closes and bad bodies mixed in, while a well-behaved client's requests all succeed,
// the server stays responsive and drains on SIGTERM (IFL_TEST_QUICK: 2,000). A small random model,
// max_tokens 1-4, --request-timeout 3 and --min-body-rate 2000 so that slow bodies get their 408
// within seconds. The mix is planned up front from a seeded PRNG (IFL_SOAK_SEED, printed), so a
// run's sequence of exchanges is reproducible (their timing is not).
//  - the hostile mix (raw net sockets): valid POSTs (JSON and streams, some sent with Connection:
//    close, some several in turn on one keep-alive connection); pipelined pairs and triples in one
//    write (POST + POST, POST x 3, POST + CRLF then a POST after the answer, two malformed-JSON
//    POSTs, GET with Content-Length: 0 + POST, a stream + POST); slow bodies and heads trickled a
//    byte every 200 ms; early closes (half a head, half a body, a stream cut at its first byte);
//    bad bodies (invalid JSON, wrong types, other refused fields, bad UTF-8, Content-Length over
//    --max-message, a malformed head). Each exchange's outcome is classified (complete HTTP
//    responses; closed with 0 bytes; reset; cut by us) and checked: every response is well-formed
//    HTTP/1.1 (status line, headers, Content-Length or chunked framing), JSON where the API answers
//    JSON, in OpenAI's error shape with the expected code; no 5xx but 503 (and no 503 either: ~70
//    sockets never reach --max-connections 256); a valid request that is not pipelined gets 200
//    and a whole completion; of a pipelined write the first request is answered whole, a later one
//    is answered in order or dropped, and the server closes the connection within 10 s (right
//    after the answer; the p50 and max are printed); a slow request gets 408 request_timeout about --request-timeout after its first
//    byte, and the close.
//  - a well-behaved client throughout (node http, a keep-alive agent, one request at a time, every
//    8th a stream): every request 200 with a completion.
//  - a /healthz prober throughout, on a fresh connection every 20 ms, from a worker thread (its
//    timings are not delayed by this process's main loop): all answer "ok", p99 under 100 ms. The
//    model's steps are tiny here, so every probe counts. (On a 2-core machine busy with other
//    tests the p99 includes the scheduler's delays too; the assertion stays.)
//  - the server never dies; /metrics at the end agrees exactly with what the clients saw (408s and
//    deadline closes, invalid JSON, bad heads, pipelined closes), and its counters are printed;
//  - SIGTERM with well-behaved requests in flight (2 streams, 2 JSON answers, 200 tokens each) and
//    two bodies half sent: the server exits 0 within 30 s and each in-flight request ends cleanly
//    (the whole answer, its finish_reason cancelled if the grace ran out, or a whole JSON error).
// Wall time on a busy 2-core machine: ~26 s (release); the ASan/UBSan Debug build takes minutes,
// its model steps being ~20 ms a row, so the sanitizer stage leaves it out (label slow): the
// pipelining test runs there.
const http = require('http');
const { Worker } = require('worker_threads');
const L = require('./lib');
const { prng, postRaw, parseResponses, Conn } = require('./raw_http');

const SEED = (process.env.IFL_SOAK_SEED ? Number(process.env.IFL_SOAK_SEED) : 20251206) >>> 0;
// requests of the hostile mix (IFL_SOAK_REQUESTS: another number, to try things out)
const TOTAL = Number(process.env.IFL_SOAK_REQUESTS) || (L.QUICK ? 2000 : 10000);
const CONCURRENCY = 64; // hostile exchanges at once
const REQUEST_TIMEOUT_S = 3;
const MIN_BODY_RATE = 2000;
const PROBE_EVERY_MS = 20;
const HEALTHZ_P99_MS = 100;
const PROMPTS = ['Hello', 'The quick brown fox', 'Once upon a time', 'In a hole in the ground',
  'Soak \u00e9t\u00e9 \u2603', '1 2 3 4 5 6 7 8'];

// ---- requests, as bytes --------------------------------------------------------------------------

function completionBody(r, { stream = false } = {}) {
  const o = { model: r.pick(['iterative', 'iterative', 'static']), prompt: r.pick(PROMPTS),
    max_tokens: r.int(1, 4) };
  if (r.chance(0.5)) o.ignore_eos = true;
  if (r.chance(0.3)) o.seed = r.int(1, 1000);
  if (stream) o.stream = true;
  return o;
}

function json(resp, what) {
  L.check(/^application\/json\b/.test(resp.headers['content-type'] || ''),
    () => `${what}: ${resp.status} with Content-Type ${resp.headers['content-type']}`);
  try {
    return JSON.parse(resp.text);
  } catch (e) {
    return L.fail(`${what}: ${resp.status} with a body that is not JSON: ${JSON.stringify(resp.text.slice(0, 200))}`);
  }
}

// anyFinish: a request cut by the stop's grace may end with another finish_reason (cancelled)
function checkCompletion(resp, req, what, { anyFinish = false } = {}) {
  L.check(resp.status === 200, () => `${what}: status ${resp.status}: ${resp.text.slice(0, 300)}`);
  const j = json(resp, what);
  L.check(j.object === 'text_completion' && Array.isArray(j.choices) && j.choices.length === 1 &&
    typeof j.choices[0].text === 'string' && (['length', 'stop'].includes(j.choices[0].finish_reason) ||
      (anyFinish && typeof j.choices[0].finish_reason === 'string')),
  () => `${what}: not a completion: ${resp.text.slice(0, 300)}`);
  const n = j.usage && j.usage.completion_tokens;
  L.check(req.ignore_eos && !anyFinish ? n === req.max_tokens : n >= 0 && n <= req.max_tokens,
    () => `${what}: completion_tokens ${n} for max_tokens ${req.max_tokens} (ignore_eos ${!!req.ignore_eos})`);
}

function checkStream(resp, req, what, { anyFinish = false } = {}) {
  L.check(resp.status === 200, () => `${what}: status ${resp.status}: ${resp.text.slice(0, 300)}`);
  L.check(/^text\/event-stream\b/.test(resp.headers['content-type'] || ''), () => `${what}: Content-Type ${resp.headers['content-type']}`);
  const events = resp.text.split('\n\n');
  L.check(events.pop() === '', () => `${what}: the stream does not end with an empty line: ${JSON.stringify(resp.text.slice(-100))}`);
  L.check(events.length >= 2 && events[events.length - 1] === 'data: [DONE]',
    () => `${what}: the stream does not end with data: [DONE]: ${JSON.stringify(resp.text.slice(-200))}`);
  let finish = null;
  let texts = 0;
  for (const e of events.slice(0, -1)) {
    L.check(e.startsWith('data: '), () => `${what}: an event that is not data: ${JSON.stringify(e.slice(0, 100))}`);
    let j;
    try {
      j = JSON.parse(e.slice(6));
    } catch (x) {
      L.fail(`${what}: an event that is not JSON: ${JSON.stringify(e.slice(0, 200))}`);
    }
    L.check(Array.isArray(j.choices), () => `${what}: an event without choices: ${e.slice(0, 200)}`);
    if (j.choices.length && j.choices[0].finish_reason) finish = j.choices[0].finish_reason;
    if (j.choices.length && j.choices[0].text) texts++;
  }
  L.check(finish === 'length' || finish === 'stop' || (anyFinish && typeof finish === 'string'),
    () => `${what}: finish_reason ${finish} in the stream: ${JSON.stringify(resp.text.slice(-300))}`);
  L.check(texts <= req.max_tokens, () => `${what}: ${texts} text events for max_tokens ${req.max_tokens}`);
}

function checkError(resp, status, codes, what) {
  L.check(resp.status === status, () => `${what}: status ${resp.status}, want ${status}: ${resp.text.slice(0, 300)}`);
  const j = json(resp, what);
  L.check(j.error && typeof j.error.message === 'string' && typeof j.error.type === 'string' && 'code' in j.error,
    () => `${what}: not OpenAI's error shape: ${resp.text.slice(0, 300)}`);
  const want = Array.isArray(codes) ? codes : [codes];
  L.check(want.includes(j.error.code), () => `${what}: error code ${j.error.code}, want ${want.join(' or ')}: ${j.error.message}`);
  return j.error.code;
}

// ---- the plan: exchanges drawn from the seeded PRNG ----------------------------------------------

// Each kind: weight, and plan(r) -> {n: requests it sends, run(conn, stats) -> checks}.
const BAD_BODIES = [
  // [what, body (string or Buffer), status, code]
  ['invalid JSON', '{"model":"iterative","prompt":"x",', 400, 'invalid_json'],
  ['invalid JSON', '{bad', 400, 'invalid_json'],
  ['invalid JSON', '{"model":"iterative" "prompt":"x"}', 400, 'invalid_json'],
  ['wrong type', '{"model":"iterative","prompt":5,"max_tokens":2}', 400, 'wrong_type'],
  ['wrong type', '{"model":"iterative","prompt":"x","max_tokens":"2"}', 400, 'wrong_type'],
  ['wrong type', '{"model":["iterative"],"prompt":"x","max_tokens":2}', 400, 'wrong_type'],
  ['not an object', '[1,2,3]', 400, 'invalid_message'],
  ['unknown field', '{"model":"iterative","prompt":"x","max_tokens":2,"zzz":1}', 400, 'unknown_field'],
  ['no prompt', '{"model":"iterative","max_tokens":2}', 400, 'missing_field'],
  ['empty prompt', '{"model":"iterative","prompt":"","max_tokens":2}', 400, 'empty_prompt'],
  ['max_tokens out of range', '{"model":"iterative","prompt":"x","max_tokens":0}', 400, 'out_of_range'],
  ['unknown model', '{"model":"nope","prompt":"x","max_tokens":2}', 404, 'unknown_model'],
  ['bad UTF-8', Buffer.concat([Buffer.from('{"model":"iterative","prompt":"a'), Buffer.from([0xff, 0xfe, 0xc3]),
    Buffer.from('","max_tokens":2}')]), 400, 'invalid_message'],
  ['bad UTF-8', Buffer.concat([Buffer.from('{"model":"iterative","prompt":"'), Buffer.from([0xed, 0xa0, 0x80]),
    Buffer.from('","max_tokens":1}')]), 400, 'invalid_message'],
];

const BAD_HEADS = [
  'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}',
  'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\n{}',
  'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\rX-B: c\r\nContent-Length: 2\r\n\r\n{}',
  'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
];

const KINDS = {
  // a valid POST, alone on its connection (sometimes with Connection: close)
  valid: { weight: 30, plan(r) {
    const req = completionBody(r);
    const close = r.chance(0.2);
    return { n: 1, async run(c) {
      c.write(postRaw(JSON.stringify(req), { extra: close ? 'Connection: close\r\n' : '' }));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, 'a valid POST');
      checkCompletion(c.responses[0], req, 'a valid POST');
      if (close) {
        await c.waitEnd(5000);
        L.check(c.ended && c.ended !== 'destroyed', 'a valid POST with Connection: close: the server did not close');
      }
    } };
  } },
  valid_stream: { weight: 8, plan(r) {
    const req = completionBody(r, { stream: true });
    return { n: 1, async run(c) {
      c.write(postRaw(JSON.stringify(req)));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, 'a valid stream');
      checkStream(c.responses[0], req, 'a valid stream');
    } };
  } },
  // 2-3 valid POSTs one after the other on one keep-alive connection
  keepalive: { weight: 6, plan(r) {
    const reqs = Array.from({ length: r.int(2, 3) }, () => completionBody(r, { stream: r.chance(0.25) }));
    return { n: reqs.length, async run(c) {
      for (let i = 0; i < reqs.length; i++) {
        c.write(postRaw(JSON.stringify(reqs[i])));
        await c.waitResponses(i + 1, 30000);
        needResponses(c, i + 1, `keep-alive request ${i + 1}`);
        (reqs[i].stream ? checkStream : checkCompletion)(c.responses[i], reqs[i], `keep-alive request ${i + 1} of ${reqs.length}`);
      }
    } };
  } },
  pipe_post_post: { weight: 2, plan(r) {
    const reqs = [completionBody(r), completionBody(r)];
    return pipelined(reqs.length, Buffer.concat(reqs.map((q) => postRaw(JSON.stringify(q)))),
      (resp, i, what) => checkCompletion(resp, reqs[i], what));
  } },
  pipe_triple: { weight: 1.5, plan(r) {
    const reqs = [completionBody(r), completionBody(r), completionBody(r)];
    return pipelined(reqs.length, Buffer.concat(reqs.map((q) => postRaw(JSON.stringify(q)))),
      (resp, i, what) => checkCompletion(resp, reqs[i], what));
  } },
  pipe_bad_bad: { weight: 1.5, plan(r) {
    return pipelined(2, Buffer.concat([postRaw(r.pick(['{bad', '{"x":'])), postRaw(r.pick(['{bad', '{"prompt":']))]),
      (resp, i, what) => checkError(resp, 400, 'invalid_json', what));
  } },
  pipe_get_post: { weight: 1.5, plan(r) {
    const healthz = r.chance(0.5);
    const req = completionBody(r);
    const get = `GET ${healthz ? '/healthz' : '/v1/completions'} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n`;
    return pipelined(2, Buffer.concat([Buffer.from(get), postRaw(JSON.stringify(req))]), (resp, i, what) => {
      if (i === 1) checkCompletion(resp, req, what);
      else if (healthz) L.check(resp.status === 200 && resp.text.trim() === 'ok', () => `${what}: GET /healthz: ${resp.status} ${resp.text.slice(0, 100)}`);
      else checkError(resp, 405, 'invalid_request', what);
    });
  } },
  pipe_stream_post: { weight: 1.5, plan(r) {
    const reqs = [completionBody(r, { stream: true }), completionBody(r)];
    return pipelined(2, Buffer.concat(reqs.map((q) => postRaw(JSON.stringify(q)))),
      (resp, i, what) => (i === 0 ? checkStream : checkCompletion)(resp, reqs[i], what));
  } },
  // POST + CRLF in one write: the CRLF is ignored, the connection stays usable: a second POST
  // after the answer is served
  pipe_crlf: { weight: 1.5, plan(r) {
    const reqs = [completionBody(r), completionBody(r)];
    return { n: 2, async run(c) {
      c.write(Buffer.concat([postRaw(JSON.stringify(reqs[0])), Buffer.from('\r\n')]));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, 'POST + CRLF');
      checkCompletion(c.responses[0], reqs[0], 'POST + CRLF');
      c.write(postRaw(JSON.stringify(reqs[1])));
      await c.waitResponses(2, 30000);
      needResponses(c, 2, 'POST + CRLF, then a POST after the answer');
      checkCompletion(c.responses[1], reqs[1], 'POST + CRLF, then a POST after the answer');
    } };
  } },
  bad_body: { weight: 16, plan(r) {
    const [what, body, status, code] = r.pick(BAD_BODIES);
    return { n: 1, async run(c, st) {
      c.write(postRaw(body));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, what);
      st.codes[checkError(c.responses[0], status, code, what)] = (st.codes[code] || 0) + 1;
    } };
  } },
  oversize: { weight: 2, plan(r) {
    const len = r.int(65537, 1 << 20);
    return { n: 1, async run(c) {
      c.write(postRaw('{"model":"iterative","prompt":"', { length: len }));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, `Content-Length ${len}`);
      checkError(c.responses[0], 413, 'invalid_request', `Content-Length ${len}`);
      await c.waitEnd(5000);
      L.check(c.ended && c.ended !== 'destroyed', `Content-Length ${len}: not closed after the 413`);
    } };
  } },
  bad_head: { weight: 3, plan(r) {
    const raw = r.pick(BAD_HEADS);
    return { n: 1, async run(c) {
      c.write(Buffer.from(raw, 'latin1'));
      await c.waitResponses(1, 30000);
      needResponses(c, 1, 'a malformed head');
      checkError(c.responses[0], 400, 'bad_http', 'a malformed head');
    } };
  } },
  // early closes: half a head, or the head and half a body, then gone
  early_head: { weight: 4, plan(r) {
    const raw = postRaw(JSON.stringify(completionBody(r)));
    const cut = r.int(1, raw.indexOf('\r\n\r\n') + 2);
    const after = r.int(0, 30);
    return { n: 1, async run(c) {
      c.write(raw.subarray(0, cut));
      await c.wait(() => false, after);
      checkNoAnswer(c, 'half a head');
      c.destroy();
    } };
  } },
  early_body: { weight: 4, plan(r) {
    const raw = postRaw(JSON.stringify(completionBody(r)));
    const he = raw.indexOf('\r\n\r\n') + 4;
    const cut = r.int(he, raw.length - 1);
    const after = r.int(0, 30);
    return { n: 1, async run(c) {
      c.write(raw.subarray(0, cut));
      await c.wait(() => false, after);
      checkNoAnswer(c, 'half a body');
      c.destroy();
    } };
  } },
  // the client goes away at the first byte of its stream
  early_answer: { weight: 3, plan(r) {
    const req = completionBody(r, { stream: true });
    req.max_tokens = 4;
    return { n: 1, async run(c) {
      c.write(postRaw(JSON.stringify(req)));
      await c.wait(() => c.buf.length > 0, 30000);
      L.check(c.buf.length > 0 || c.ended, 'a stream: no answer in 30 s');
      L.check(/^HTTP\/1\.1 200 /.test(c.buf.toString('latin1')), () => `a stream: ${c.buf.toString('latin1').slice(0, 200)}`);
      c.destroy();
    } };
  } },
  // slow: a body (or a head) trickled a byte every 200 ms: 408 about --request-timeout after its
  // first byte, and the close
  slow_body: { weight: 0.6, plan(r) {
    const raw = postRaw(JSON.stringify({ ...completionBody(r), prompt: 'x'.repeat(r.int(100, 400)) }));
    const he = raw.indexOf('\r\n\r\n') + 4;
    return slow(raw, r.int(he, he + 20), 'a slow body');
  } },
  slow_head: { weight: 0.4, plan(r) {
    const raw = postRaw(JSON.stringify(completionBody(r)));
    return slow(raw, r.int(1, 20), 'a slow head');
  } },
};

function needResponses(c, n, what) {
  L.check(!c.error, () => `${what}: a malformed response: ${c.error}: ${JSON.stringify(c.buf.toString('latin1').slice(0, 300))}`);
  L.check(c.responses.length >= n, () => `${what}: ${c.responses.length} response(s) where ${n} were due; the connection ` +
    `${c.outcome} after ${(c.endMs || L.now() - c.t0).toFixed(0)} ms: ${JSON.stringify(c.buf.toString('latin1').slice(0, 300))}`);
}

function checkNoAnswer(c, what) {
  L.check(!c.error, () => `${what}: a malformed response: ${c.error}`);
  for (const resp of c.responses) L.check(resp.status < 500, () => `${what}: answered ${resp.status}: ${resp.text.slice(0, 200)}`);
}

// n requests in one write: the first answered whole; each later one answered in order or dropped;
// then the server closes the connection (within 10 s: a pipelined request is refused by the close)
function pipelined(n, raw, checkResp) {
  return { n, pipelined: true, async run(c, st) {
    c.write(raw);
    await c.waitResponses(1, 30000);
    needResponses(c, 1, `${n} pipelined requests`);
    await c.waitEnd(10000);
    L.check(!c.error, () => `${n} pipelined requests: a malformed response: ${c.error}`);
    L.check(c.ended && c.ended !== 'destroyed', () => `${n} pipelined requests: answered ${c.responses.length}, ` +
      `and the connection not closed after 10 s`);
    L.check(c.responses.length <= n, () => `${n} pipelined requests: ${c.responses.length} responses`);
    c.responses.forEach((resp, i) => checkResp(resp, i, `pipelined request ${i + 1} of ${n}`));
    st.pipelinedAnswered[c.responses.length] = (st.pipelinedAnswered[c.responses.length] || 0) + 1;
    st.pipelinedCloseMs.push(c.endMs);
  } };
}

function slow(raw, upfront, what) {
  return { n: 1, slow: true, async run(c, st) {
    c.write(raw.subarray(0, upfront));
    const t0 = L.now();
    let at = upfront;
    const timer = setInterval(() => {
      if (c.buf.length || c.ended || at >= raw.length - 1) return;
      c.write(raw.subarray(at, at + 1));
      at++;
    }, 200);
    try {
      await c.waitResponses(1, (REQUEST_TIMEOUT_S + 10) * 1000);
    } finally {
      clearInterval(timer);
    }
    const ms = L.now() - t0;
    needResponses(c, 1, what);
    checkError(c.responses[0], 408, 'request_timeout', what);
    L.check(ms > REQUEST_TIMEOUT_S * 1000 - 300 && ms < REQUEST_TIMEOUT_S * 1000 + 5000,
      () => `${what}: 408 after ${ms.toFixed(0)} ms (--request-timeout ${REQUEST_TIMEOUT_S})`);
    await c.waitEnd(5000);
    L.check(c.ended && c.ended !== 'destroyed', `${what}: not closed after its 408`);
    st.slowMs.push(ms);
  } };
}

function makePlan(seed, total) {
  const r = prng(seed);
  const names = Object.keys(KINDS);
  const sum = names.reduce((a, k) => a + KINDS[k].weight, 0);
  const plan = [];
  let n = 0;
  while (n < total) {
    let x = r.next() * sum;
    let kind = names[names.length - 1];
    for (const k of names) {
      x -= KINDS[k].weight;
      if (x < 0) {
        kind = k;
        break;
      }
    }
    const ex = KINDS[kind].plan(r);
    ex.kind = kind;
    ex.index = plan.length;
    plan.push(ex);
    n += ex.n;
  }
  return { plan, requests: n };
}

// ---- the well-behaved client ---------------------------------------------------------------------

// One POST over agent; resolves {status, text, complete, aborted} or {error}.
function wellRequest(port, agent, body, onFirstData) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      const chunks = [];
      let aborted = false;
      res.on('data', (d) => {
        if (!chunks.length && onFirstData) onFirstData();
        chunks.push(d);
      });
      res.on('aborted', () => {
        aborted = true;
      });
      res.on('error', () => {
        aborted = true;
      });
      res.on('close', () => resolve({ status: res.statusCode, headers: res.headers,
        text: Buffer.concat(chunks).toString('utf8'), complete: res.complete, aborted }));
    });
    req.setTimeout(30000, () => req.destroy(new Error('no answer in 30 s')));
    req.on('error', (e) => resolve({ error: e.message }));
    req.end(data);
  });
}

// the answer as a parsed response for checkCompletion / checkStream
function asResp(r) {
  return { status: r.status, headers: r.headers, text: r.text, body: Buffer.from(r.text) };
}

function checkWell(r, body, what, opts) {
  L.check(!r.error, () => `${what}: ${r.error}`);
  L.check(r.complete && !r.aborted, () => `${what}: the answer was cut (status ${r.status}, ${r.text.length} bytes)`);
  (body.stream ? checkStream : checkCompletion)(asResp(r), body, what, opts);
}

// ---- the /healthz prober, in a worker thread -----------------------------------------------------

const PROBER = `
const { parentPort, workerData } = require('worker_threads');
const http = require('http');
let stop = false;
const lat = [];
const bad = [];
parentPort.on('message', (m) => { if (m === 'stop') stop = true; });
function probe() {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
    const req = http.get({ host: '127.0.0.1', port: workerData.port, path: '/healthz', agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ ms: ms(), status: res.statusCode, body }));
      res.on('error', (e) => resolve({ ms: ms(), status: res.statusCode, error: e.message }));
    });
    req.setTimeout(5000, () => req.destroy(new Error('no answer in 5 s')));
    req.on('error', (e) => resolve({ ms: ms(), status: 0, error: e.message }));
  });
}
(async () => {
  while (!stop) {
    const r = await probe();
    lat.push(r.ms);
    if (r.status !== 200 || (r.body || '').trim() !== 'ok') bad.push(r);
    await new Promise((res) => setTimeout(res, workerData.everyMs));
  }
  parentPort.postMessage({ lat, bad });
})();
`;

function startProber(port) {
  const w = new Worker(PROBER, { eval: true, workerData: { port, everyMs: PROBE_EVERY_MS } });
  const result = new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  });
  L.onCleanup(() => w.terminate());
  return {
    async stop() {
      w.postMessage('stop');
      const r = await L.withTimeout(result, 10000, 'the /healthz prober to stop');
      await w.terminate();
      return r;
    },
  };
}

// ---- the test ------------------------------------------------------------------------------------

function tally(map, key) {
  map.set(key, (map.get(key) || 0) + 1);
}

L.main('soak', async () => {
  const tStart = L.now();
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'soak-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log',
    '--request-timeout', String(REQUEST_TIMEOUT_S), '--min-body-rate', String(MIN_BODY_RATE)]);
  const { plan, requests } = makePlan(SEED, TOTAL);
  const byKind = new Map();
  for (const ex of plan) tally(byKind, ex.kind);
  L.log(`seed ${SEED} (IFL_SOAK_SEED): ${plan.length} exchanges carrying ${requests} requests, ${CONCURRENCY} at a time: ` +
    [...byKind].map(([k, n]) => `${k} ${n}`).join(', '));
  const m0 = await L.fetchMetrics(srv.port);

  // the well-behaved client and the prober, throughout
  const prober = startProber(srv.port);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let wellStop = false;
  const well = { ok: 0, streams: 0, failures: [] };
  const wellLoop = (async () => {
    const r = prng(SEED ^ 0x5eed);
    for (let i = 0; !wellStop; i++) {
      const body = completionBody(r, { stream: i % 8 === 7 });
      const res = await wellRequest(srv.port, agent, body);
      try {
        checkWell(res, body, `well-behaved request ${i}`);
        well.ok++;
        if (body.stream) well.streams++;
      } catch (e) {
        if (!(e instanceof L.TestFailure)) throw e;
        well.failures.push(e.message);
      }
    }
  })();

  // the hostile mix
  const st = { codes: {}, pipelinedAnswered: {}, pipelinedCloseMs: [], slowMs: [] };
  const failures = [];
  const outcomes = new Map(); // outcome class -> count
  const kindOutcomes = new Map(); // kind -> Map(statuses+end -> count)
  const codesSeen = new Map(); // error code -> answers seen
  let pipelinedDropped = 0; // pipelined writes with fewer answers than requests
  let next = 0;
  let sent = 0;
  let maxAtOnce = 0;
  let atOnce = 0;
  const t0 = L.now();
  let lastLog = t0;
  const worker = async () => {
    while (next < plan.length && failures.length < 20) {
      const ex = plan[next++];
      const c = new Conn(srv.port);
      atOnce++;
      maxAtOnce = Math.max(maxAtOnce, atOnce);
      try {
        await c.connected;
        sent += ex.n;
        await ex.run(c, st);
      } catch (e) {
        if (!(e instanceof L.TestFailure)) throw e;
        failures.push(`exchange ${ex.index} (${ex.kind}): ${e.message}`);
      } finally {
        c.destroy();
        atOnce--;
      }
      // no 5xx but 503 (the connection limit), whatever the exchange; the error codes seen
      for (const resp of c.responses) {
        if (resp.status >= 500 && resp.status !== 503)
          failures.push(`exchange ${ex.index} (${ex.kind}): ${resp.status} ${resp.text.slice(0, 200)}`);
        if (resp.status >= 400) {
          let code = '?';
          try {
            code = JSON.parse(resp.text).error.code;
          } catch (e) {
            /* checked by the exchange's own checks */
          }
          tally(codesSeen, code);
        }
      }
      if (ex.pipelined && c.responses.length < ex.n) pipelinedDropped++;
      if (c.outcome.startsWith('incomplete') && failures.length < 20)
        failures.push(`exchange ${ex.index} (${ex.kind}): a broken answer: ${c.outcome}: ${JSON.stringify(c.buf.toString('latin1').slice(0, 200))}`);
      tally(outcomes, c.outcome);
      if (!kindOutcomes.has(ex.kind)) kindOutcomes.set(ex.kind, new Map());
      tally(kindOutcomes.get(ex.kind), `${c.responses.map((x) => x.status).join('+') || '-'} ${c.ended === 'destroyed' ? '(we closed)' : `(server: ${c.ended})`}`);
      if (L.now() - lastLog > 10000) {
        lastLog = L.now();
        L.log(`  ${sent} requests sent (${next} of ${plan.length} exchanges), well-behaved ${well.ok} ok`);
        srv.assertAlive();
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const mixMs = L.now() - t0;
  srv.assertAlive();
  wellStop = true;
  await L.withTimeout(wellLoop, 60000, 'the well-behaved client to finish');
  const probes = await prober.stop();
  agent.destroy();

  L.log(`hostile mix: ${sent} requests in ${plan.length} exchanges in ${(mixMs / 1000).toFixed(1)} s ` +
    `(${(sent / (mixMs / 1000)).toFixed(0)} requests/s, at most ${maxAtOnce} connections at once)`);
  L.log(`  outcome classes: ${[...outcomes].map(([k, n]) => `${k} ${n}`).join(', ')}`);
  for (const [kind, m] of kindOutcomes)
    L.log(`  ${kind.padEnd(16)} ${[...m].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} x${n}`).join(', ')}`);
  L.log(`  bad bodies by error code: ${Object.entries(st.codes).map(([k, n]) => `${k} ${n}`).join(', ')}`);
  L.log(`  pipelined writes by responses received: ${Object.entries(st.pipelinedAnswered).map(([k, n]) => `${k}: ${n}`).join(', ')}; ` +
    `closed by the server after p50 ${L.percentile(st.pipelinedCloseMs, 50).toFixed(0)} ms, max ${Math.max(...st.pipelinedCloseMs).toFixed(0)} ms`);
  L.log(`  slow requests: ${st.slowMs.length}, 408 after p50 ${L.percentile(st.slowMs, 50).toFixed(0)} ms, max ${Math.max(...st.slowMs).toFixed(0)} ms`);
  L.log(`well-behaved client: ${well.ok} requests ok (${well.streams} streams), ${well.failures.length} failed`);
  const lat = probes.lat;
  const p50 = L.percentile(lat, 50), p99 = L.percentile(lat, 99), pmax = Math.max(...lat);
  L.log(`/healthz: ${lat.length} probes, ${probes.bad.length} not "ok"; p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${pmax.toFixed(1)} ms`);

  L.check(failures.length === 0, () => `${failures.length} exchange(s) failed${failures.length >= 20 ? ' (stopped at 20)' : ''}:\n  ${failures.join('\n  ')}`);
  L.check(sent >= TOTAL, `${sent} requests sent, want ${TOTAL}`);
  L.check(well.failures.length === 0, () => `the well-behaved client: ${well.failures.length} failed:\n  ${well.failures.slice(0, 10).join('\n  ')}`);
  L.check(well.ok > 0 && well.streams > 0, `the well-behaved client: ${well.ok} requests, ${well.streams} streams`);
  L.check(probes.bad.length === 0, () => `/healthz: ${probes.bad.length} probes failed: ${JSON.stringify(probes.bad.slice(0, 5))}`);
  L.check(p99 < HEALTHZ_P99_MS, `/healthz p99 ${p99.toFixed(1)} ms during the soak (want < ${HEALTHZ_P99_MS} ms)`);
  if (TOTAL >= 2000) for (const k of Object.keys(KINDS)) L.check(byKind.get(k) > 0, `the plan has no ${k}`);

  // the server's own count
  srv.assertAlive();
  const m1 = await L.fetchMetrics(srv.port);
  const d = (name, labels) => m1.get(name, labels) - m0.get(name, labels);
  const closed = ['silent_evicted', 'refused', 'over_limit', 'pipelined', 'deadline']
    .map((reason) => [reason, d('inflight_sockets_closed_total', { reason })]);
  const wire = ['head_too_large', 'too_many_headers', 'target_too_long', 'bad_head', 'unmasked_frame']
    .map((reason) => [reason, d('inflight_wire_refused_total', { reason })]);
  const errs = ['request_timeout', 'invalid_json', 'bad_http', 'invalid_message', 'wrong_type', 'too_many_connections']
    .map((code) => [code, d('inflight_errors_total', { code })]);
  L.log(`/metrics: inflight_sockets_closed_total ${closed.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  L.log(`/metrics: inflight_wire_refused_total ${wire.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  L.log(`/metrics: inflight_errors_total ${errs.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const errOf = Object.fromEntries(errs), closedOf = Object.fromEntries(closed), wireOf = Object.fromEntries(wire);
  const seen = (code) => codesSeen.get(code) || 0;
  L.log(`seen by the clients: ${[...codesSeen].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join(', ')}; ` +
    `${pipelinedDropped} pipelined writes with requests left unanswered`);
  L.eq(errOf.request_timeout, seen('request_timeout'), 'inflight_errors_total{code="request_timeout"} against the 408s seen');
  L.eq(closedOf.deadline, seen('request_timeout'), 'inflight_sockets_closed_total{reason="deadline"} against the 408s seen');
  L.eq(errOf.bad_http, seen('bad_http'), 'inflight_errors_total{code="bad_http"} against the answers seen');
  L.eq(wireOf.bad_head, seen('bad_http'), 'inflight_wire_refused_total{reason="bad_head"} against the bad_http answers seen');
  L.eq(errOf.invalid_json, seen('invalid_json'), 'inflight_errors_total{code="invalid_json"} against the answers seen');
  L.eq(closedOf.pipelined, pipelinedDropped, 'inflight_sockets_closed_total{reason="pipelined"} against the pipelined writes left unanswered');
  L.eq(closedOf.refused + closedOf.over_limit + errOf.too_many_connections, 0, 'connections refused or answered 503 for the limit');
  L.eq(m1.get('inflight_requests_running', { policy: 'iterative' }) + m1.get('inflight_requests_running', { policy: 'static' }), 0,
    'requests running after the soak');

  // SIGTERM with well-behaved requests in flight, and two slow bodies trickling
  const finalAgent = new http.Agent({ keepAlive: true });
  let firstData = 0;
  const finals = [
    { model: 'iterative', prompt: 'drain stream one', max_tokens: 200, ignore_eos: true, stream: true },
    { model: 'static', prompt: 'drain stream two', max_tokens: 200, ignore_eos: true, stream: true },
    { model: 'iterative', prompt: 'drain json one', max_tokens: 200, ignore_eos: true },
    { model: 'static', prompt: 'drain json two', max_tokens: 200, ignore_eos: true },
  ];
  const endedAt = [];
  const sum = (m, name) => m.samples.filter((x) => x.name === name).reduce((a, x) => a + x.value, 0);
  const finished0 = sum(await L.fetchMetrics(srv.port), 'inflight_requests_total');
  const tFinals = L.now();
  const answers = finals.map((b, i) => wellRequest(srv.port, finalAgent, b, () => firstData++)
    .then((r) => { endedAt[i] = L.now(); return r; }));
  // the streams answering, and all four taken in by the batchers (running, or already finished)
  await L.until(async () => {
    if (firstData < 2) return false;
    const m = await L.fetchMetrics(srv.port);
    return sum(m, 'inflight_requests_running') + sum(m, 'inflight_requests_total') - finished0 >= 4;
  }, 30000, 'the four final requests to be taken in', 1);
  // and two bodies half sent
  const slowConns = [0, 1].map(() => {
    const c = new Conn(srv.port);
    c.write(postRaw('{"model":"iterative","prompt":"', { length: 200 }));
    return c;
  });
  await Promise.all(slowConns.map((c) => c.connected));
  await L.sleep(50);
  srv.assertAlive();
  const tStop = L.now();
  const stopped = srv.stop(30000);
  const results = await L.withTimeout(Promise.all(answers), 30000, 'the in-flight requests to end');
  await stopped;
  const stopMs = L.now() - tStop;
  finals.forEach((b, i) => {
    const r = results[i];
    L.check(!r.error && r.complete && !r.aborted, () => `in flight at SIGTERM, request ${i} (${b.stream ? 'stream' : 'JSON'}): ` +
      `${r.error || `cut after ${r.text.length} bytes`}`);
    if (r.status === 200) checkWell(r, b, `in flight at SIGTERM, request ${i}`, { anyFinish: true });
    else checkError(asResp(r), 503, 'shutting_down', `in flight at SIGTERM, request ${i}`);
  });
  for (const c of slowConns) {
    await c.waitEnd(5000);
    c.stopMs = c.t0 + c.endMs - tStop;
    L.check(!c.error, () => `a slow body at SIGTERM: a malformed response: ${c.error}`);
    L.check(c.ended && c.ended !== 'destroyed', 'a slow body at SIGTERM: its connection still open after the exit');
  }
  finalAgent.destroy();
  const inFlight = endedAt.filter((t) => t > tStop).length;
  L.check(inFlight >= 1, 'none of the four final requests was still in flight at SIGTERM (200 tokens each)');
  const finishOf = (r) => {
    const m = [...r.text.matchAll(/"finish_reason":"([a-z_]+)"/g)];
    return m.length ? m[m.length - 1][1] : (r.status !== 200 ? `${r.status}` : 'none');
  };
  L.log(`SIGTERM ${(tStop - tFinals).toFixed(0)} ms after sending 4 requests (${results.map((r, i) => `${finals[i].stream ? 'stream' : 'JSON'} ` +
    `${r.status} ${finishOf(r)} +${(endedAt[i] - tStop).toFixed(0)} ms`).join(', ')}) and 2 slow bodies (` +
    `${slowConns.map((c) => `${c.responses.map((x) => x.status).join('+') || c.outcome}, closed ${c.stopMs.toFixed(0)} ms after the signal`).join('; ')}): ` +
    `exit 0 after ${stopMs.toFixed(0)} ms; ${inFlight} of 4 answers ended after the signal`);
  L.log(`wall time ${((L.now() - tStart) / 1000).toFixed(1)} s`);
}, { deadlineS: 600 });
