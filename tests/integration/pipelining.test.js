'use strict';
// pipelining: one request must never take the server down. Raw sockets on loopback:
//  - bytes after a POST body in the same write (curl's CRLF after a body, a second request
//    pipelined behind the first: POST + POST, POST + GET, two Triton POSTs, a stream + POST) used
//    to make libwebsockets replay a second body-completion for a request whose body was freed
//    (SIGSEGV); two malformed-JSON POSTs, or a GET with Content-Length: 0 and a POST, in one write
//    made its service thread spin at 100% forever. Now: a CRLF between requests is ignored (the
//    connection stays usable); a request pipelined behind one being answered is refused by closing
//    the connection after that answer (RFC 9112 9.3.2: the client retries it), never replayed;
//    every case answers its first request whole, and /healthz answers within a second after each;
//  - HTTP/1.0 gets its stream without chunked coding, ended by the close;
//  - deadlines: a request whose head or body does not arrive within --request-timeout gets 408 in
//    its API's JSON error shape (code request_timeout) and the close;
//  - slow bodies cannot lock others out: with every socket of --max-connections held by a body
//    trickling a byte every 2 s, new clients are served, each closing the oldest unfinished
//    request (told 503 too_many_connections);
//  - a burst of 1,000 clients at the default --max-connections 256 (500 /v1 POSTs, 500 /ws
//    upgrades, all at once; 300 under IFL_TEST_QUICK): every POST gets 200 or 503 with Retry-After and every upgrade opens or
//    closes with 1013: none is closed without a word.
const net = require('net');
const L = require('./lib');

const MAX_TOKENS = 2;
const post = (path, body, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}` +
  `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const completion = (more = '') => post('/v1/completions',
  `{"model":"iterative","prompt":"Hi","max_tokens":${MAX_TOKENS}${more}}`);
const triton = () => post('/v2/models/iterative-gpt2/generate',
  `{"text_input":"Hi","parameters":{"max_tokens":${MAX_TOKENS}}}`);

// Sends `raw` in one write on a fresh socket; reads until the server closes (or timeoutMs). The
// responses are split by their Content-Length or chunked framing.
function exchange(port, raw, { timeoutMs = 10000, then = null } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = (how) => {
      if (done) return;
      done = true;
      clearTimeout(t);
      sock.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      resolve({ how, text, responses: splitResponses(text) });
    };
    const t = setTimeout(() => finish('timeout'), timeoutMs);
    sock.on('connect', () => sock.write(raw));
    sock.on('data', (c) => {
      chunks.push(c);
      if (then) {
        const rs = splitResponses(Buffer.concat(chunks).toString('latin1'));
        if (rs.length >= then.after && !then.sent) {
          then.sent = true;
          sock.write(then.raw);
        }
      }
    });
    sock.on('end', () => finish('closed'));
    sock.on('close', () => finish('closed'));
    sock.on('error', (e) => (chunks.length ? finish('reset') : reject(e)));
  });
}

function splitResponses(text) {
  const out = [];
  let at = 0;
  for (;;) {
    const he = text.indexOf('\r\n\r\n', at);
    if (he < 0) return out;
    const head = text.slice(at, he);
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
    if (!m) return out;
    let end;
    const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    if (cl) {
      end = he + 4 + Number(cl[1]);
      if (text.length < end) return out;
    } else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      const last = text.indexOf('\r\n0\r\n\r\n', he);
      if (last < 0) return out;
      end = last + 7;
    } else {
      end = text.length; // (ended by the close)
    }
    out.push({ status: Number(m[1]), head, body: text.slice(he + 4, end) });
    at = end;
  }
}

async function healthzFast(srv, what) {
  srv.assertAlive();
  const t0 = L.now();
  const r = await L.httpRequest(srv.port, '/healthz', { timeoutMs: 1000 });
  L.eq(r.status, 200, `${what}: /healthz after it`);
  return L.now() - t0;
}

async function pipelined(srv) {
  const m0 = await L.fetchMetrics(srv.port);
  const closed0 = m0.maybe('inflight_sockets_closed_total', { reason: 'pipelined' }) || 0;
  // curl's CRLF after the body: ignored; the connection stays usable for the next request
  const crlf = await exchange(srv.port, `${completion()}\r\n`, {
    then: { after: 1, raw: 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' } });
  L.eq(crlf.responses.map((r) => r.status).join(','), '200,200', 'POST + CRLF, then GET: the statuses');
  L.check(JSON.parse(crlf.responses[0].body).choices[0].text !== undefined, 'POST + CRLF: a completion');
  L.log(`ok  POST with a CRLF after its body: 200, and the same connection then served a GET (${(await healthzFast(srv, "CRLF")).toFixed(1)} ms)`);

  const cases = [
    ['POST + POST', completion() + completion(), 200],
    ['POST + GET', `${completion()}GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`, 200],
    ['two Triton POSTs', triton() + triton(), 200],
    ['a stream + POST', completion(',"stream":true') + completion(), 200],
    ['two malformed-JSON POSTs', post('/v1/completions', '{bad') + post('/v1/completions', '{bad'), 400],
  ];
  let refused = 0;
  for (const [what, raw, status] of cases) {
    const r = await exchange(srv.port, raw);
    L.check(r.how !== 'timeout', () => `${what}: the connection was neither answered and closed within 10 s: ${r.text.slice(0, 300)}`);
    L.check(r.responses.length === 1, () => `${what}: ${r.responses.length} responses (want the first only, then the close): ${r.text.slice(0, 400)}`);
    L.eq(r.responses[0].status, status, `${what}: the first request's status`);
    if (status === 200 && /stream/.test(what))
      L.check(/data: \[DONE\]/.test(r.responses[0].body), `${what}: the stream did not end with [DONE]`);
    refused++;
    L.log(`ok  ${what} in one write: ${status} for the first, then the connection closed (${r.how}); /healthz ${(await healthzFast(srv, what)).toFixed(1)} ms`);
  }
  // a GET with Content-Length: 0 and a POST: the GET answered; the POST answered in order or
  // refused by the close, depending on whether it came in before the GET's answer was out
  const g = await exchange(srv.port, `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n${completion()}`, { timeoutMs: 3000 });
  L.eq(g.responses[0] && g.responses[0].status, 200, 'GET with Content-Length: 0 + POST: the GET');
  L.check(g.responses.length === 1 || g.responses[1].status === 200, () => `GET + POST: ${g.text.slice(0, 300)}`);
  if (g.responses.length === 1) refused++;
  L.log(`ok  GET with Content-Length: 0 + POST in one write: ${g.responses.map((r) => r.status).join(', ')} (${g.how}); /healthz ${(await healthzFast(srv, 'GET + POST')).toFixed(1)} ms`);
  const m1 = await L.fetchMetrics(srv.port);
  L.eq(m1.get('inflight_sockets_closed_total', { reason: 'pipelined' }) - closed0, refused,
    'inflight_sockets_closed_total{reason="pipelined"} against the connections closed for a pipelined request');
}

async function http10(srv) {
  const raw = completion(',"stream":true').replace('HTTP/1.1', 'HTTP/1.0');
  const r = await exchange(srv.port, raw);
  L.eq(r.how, 'closed', 'HTTP/1.0 stream: ended by the close');
  L.check(/^HTTP\/1\.[01] 200/.test(r.text), () => `HTTP/1.0 stream: ${r.text.slice(0, 200)}`);
  const head = r.text.slice(0, r.text.indexOf('\r\n\r\n'));
  L.check(!/transfer-encoding/i.test(head), () => `HTTP/1.0 got chunked coding: ${head}`);
  const body = r.text.slice(head.length + 4);
  L.check(/^data: \{/.test(body) && /data: \[DONE\]\n\n$/.test(body), () => `HTTP/1.0 stream body: ${JSON.stringify(body.slice(0, 300))}`);
  L.log('ok  HTTP/1.0 stream: events without chunked coding, ended by the close');
}

async function deadline(bin, vocab, model) {
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--request-timeout', '2']);
  const cases = [
    ['a head that never ends', 'GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ', 'openai'],
    ['a body that stops half-way', completion().slice(0, -10), 'openai'],
    ['a Triton body that stops half-way', triton().slice(0, -5), 'triton'],
  ];
  for (const [what, raw, shape] of cases) {
    const t0 = L.now();
    const r = await exchange(srv.port, raw, { timeoutMs: 8000 });
    const ms = L.now() - t0;
    L.eq(r.responses.length && r.responses[0].status, 408, `${what}: status`);
    const j = JSON.parse(r.responses[0].body);
    const msg = shape === 'openai' ? j.error.message : j.error;
    if (shape === 'openai') L.eq(j.error.code, 'request_timeout', `${what}: code`);
    L.check(/--request-timeout/.test(msg), `${what}: message ${msg}`);
    L.check(ms >= 1900 && ms < 6000, `${what}: answered after ${ms.toFixed(0)} ms (deadline 2 s)`);
    L.log(`ok  ${what}: 408 after ${ms.toFixed(0)} ms: ${msg}`);
  }
  const m = await L.fetchMetrics(srv.port);
  L.eq(m.get('inflight_sockets_closed_total', { reason: 'deadline' }), cases.length, 'inflight_sockets_closed_total{reason="deadline"}');
  L.eq(m.get('inflight_errors_total', { code: 'request_timeout' }), cases.length, 'inflight_errors_total{code="request_timeout"}');
  await srv.stop();
}

// 16 sockets each trickling a body a byte every 2 s hold --max-connections 16; fresh clients must
// still be served.
async function slowBodies(bin, vocab, model) {
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--max-connections', '16']);
  const slow = [];
  const slowEnds = [];
  for (let i = 0; i < 16; i++) {
    const s = net.connect(srv.port, '127.0.0.1');
    let got = '';
    s.on('data', (c) => (got += c.toString('latin1')));
    s.on('error', () => {});
    slowEnds.push(new Promise((resolve) => s.on('close', () => resolve(got))));
    s.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
    slow.push(s);
  }
  const timer = setInterval(() => slow.forEach((s) => s.writable && s.write(' ')), 2000);
  await L.sleep(1200); // (a socket accepted within the last second is not closed to make room)
  const lat = [];
  for (let i = 0; i < 10; i++) {
    const t0 = L.now();
    const r = await L.httpRequest(srv.port, '/healthz', { timeoutMs: 2000 });
    lat.push(L.now() - t0);
    L.eq(r.status, 200, `probe ${i} with 16 slow bodies holding the limit`);
  }
  const g = await L.httpRequest(srv.port, '/v1/completions', { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: `{"model":"iterative","prompt":"Hi","max_tokens":${MAX_TOKENS}}`, timeoutMs: 5000 });
  L.eq(g.status, 200, 'a POST with 16 slow bodies holding the limit');
  clearInterval(timer);
  slow.forEach((s) => s.destroy());
  const ends = await Promise.all(slowEnds);
  const told = ends.filter((t) => /^HTTP\/1\.1 503[^]*"code":"too_many_connections"/.test(t)).length;
  const m = await L.fetchMetrics(srv.port);
  const evicted = m.get('inflight_sockets_closed_total', { reason: 'silent_evicted' });
  // (each probe's room is made once: after its answer the room is the next probe's)
  L.check(evicted >= 1, 'no slow body was closed to make room');
  L.eq(told, evicted, 'slow clients told 503 too_many_connections, against the sockets closed to make room');
  L.log(`ok  16 slow bodies holding --max-connections 16: 10 /healthz probes answered 200 (slowest ${Math.max(...lat).toFixed(1)} ms) ` +
    `and a POST 200; ${told} slow clients closed to make room, each told 503`);
  await srv.stop();
}

async function burst(srv) {
  const N = L.QUICK ? 150 : 500; // (IFL_TEST_QUICK: the sanitizer stages)
  const posts = [];
  const upgrades = [];
  for (let i = 0; i < N; i++) {
    posts.push(exchange(srv.port, completion().replace(/"max_tokens":\d+/, '"max_tokens":1'), { timeoutMs: 60000 })
      .catch((e) => ({ how: `error ${e.code}`, responses: [] })));
    upgrades.push(new Promise((resolve) => {
      const ws = new L.WebSocket(srv.wsUrl);
      let opened = false;
      ws.on('open', () => {
        opened = true;
        setTimeout(() => ws.close(), 200);
      });
      ws.on('unexpected-response', (req, res) => resolve(`http ${res.statusCode}`));
      ws.on('close', (code) => resolve(opened ? 'opened' : `closed ${code}`));
      ws.on('error', (e) => resolve(opened ? 'opened' : `error ${e.message}`));
    }));
  }
  const pr = await Promise.all(posts);
  const ur = await Promise.all(upgrades);
  const count = (xs) => xs.reduce((m, x) => m.set(x, (m.get(x) || 0) + 1), new Map());
  const postOutcome = pr.map((r) => (r.responses.length ? `${r.responses[0].status}` : `no answer (${r.how})`));
  const pc = count(postOutcome), uc = count(ur);
  L.log(`burst of ${N} POSTs and ${N} upgrades: POSTs ${JSON.stringify([...pc])}, upgrades ${JSON.stringify([...uc])}`);
  for (const [k, n] of pc) L.check(k === '200' || k === '503', `${n} POSTs: ${k}`);
  for (const r of pr.filter((x) => x.responses.length && x.responses[0].status === 503))
    L.check(/\r\nretry-after: 1(\r\n|$)/i.test(r.responses[0].head), `a 503 without Retry-After: ${r.responses[0].head}`);
  for (const [k, n] of uc) L.check(k === 'opened' || k === 'closed 1013', `${n} upgrades: ${k}`);
}

L.main('pipelining', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log']);
  await pipelined(srv);
  await http10(srv);
  await burst(srv);
  await healthzFast(srv, 'the burst');
  await srv.stop();
  await deadline(bin, vocab, model);
  await slowBodies(bin, vocab, model);
});
