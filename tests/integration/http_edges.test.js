'use strict';
// http_edges: the edges of the HTTP surface an attack found, over raw sockets on loopback:
//  - a header longer than the server's buffer for it is 431 in the API's error shape (OpenAI's
//    under /v1, Triton's {"error"} under /v2, {"error"} elsewhere), never read as absent: a legal
//    251-character Host plus its port on every kind of path (it used to pass the DNS-rebinding check
//    as "no Host"), a long Origin on a POST, a long Authorization with --api-key, a long
//    Content-Type (a shorter one that is still refused is named in the 415); a WebSocket upgrade
//    with such a Host is closed 1008;
//  - with --api-key every route that shows or changes data needs the key: the route table is read
//    from server/http.c (ROUTES) and walked with no key, a wrong key and the key, so a route added
//    later without the check fails here unless it is in OPEN below (routes that show no data);
//    /api/history with --history all does not show a prompt without the key;
//  - an unknown path under /v1 or /v2 is 404 in its API's shape for every method; a known path with
//    another method is 405 with Allow, in the API's shape; Triton's versioned generate path
//    (/v2/models/M/versions/1/generate) is served, another version 404;
//  - a JSON body (HTTP or /ws) with two members of the same name, at any depth, is refused naming
//    the key; a 64 KiB object of 5,000 keys is answered at once.
// Each part runs even when an earlier one failed; the failures are listed at the end.
const fs = require('fs');
const path = require('path');
const L = require('./lib');

const KEY = 'sk-edges-0123456789abcdef';
const failures = [];

async function part(name, fn) {
  try {
    await fn();
    L.log(`ok  ${name}`);
  } catch (e) {
    if (!(e instanceof L.TestFailure)) throw e;
    failures.push(`${name}: ${e.message}`);
    L.log(`FAILED ${name}: ${e.message}`);
  }
}

// One request on its own connection: headers as given (Host 127.0.0.1 unless set), the body with its
// Content-Length. Resolves with {status, headers, body, json}.
async function raw(port, method, target, headers = {}, body = null) {
  let h = `${method} ${target} HTTP/1.1\r\n`;
  if (!Object.keys(headers).some((k) => k.toLowerCase() === 'host')) h += 'Host: 127.0.0.1\r\n';
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  if (body !== null) h += `Content-Length: ${Buffer.byteLength(body)}\r\n`;
  const r = await L.rawHttp(port, `${h}Connection: close\r\n\r\n${body || ''}`, 15000);
  const he = r.buf.indexOf('\r\n\r\n');
  const hdrs = {};
  for (const line of r.text.slice(0, he).split('\r\n').slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) hdrs[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const text = he >= 0 ? r.buf.slice(he + 4).toString('utf8') : '';
  let json = null;
  try {
    json = JSON.parse(text);
  } catch (e) {
    /* not JSON */
  }
  return { status: r.status, headers: hdrs, body: text, json };
}

// The API whose error shape a path gets.
function shapeOf(p) {
  if (p.startsWith('/v1/') || ['/tokenize', '/detokenize', '/tokenizer_info'].includes(p)) return 'openai';
  if (p === '/v2' || p.startsWith('/v2/')) return 'triton';
  return 'plain';
}

// The error's message, after checking the answer has the shape of p's API.
function errorOf(r, p, what) {
  const j = r.json;
  L.check(j && typeof j === 'object', () => `${what}: the ${r.status} body is not JSON: ${JSON.stringify(r.body.slice(0, 200))}`);
  if (shapeOf(p) === 'openai') {
    L.check(j.error && typeof j.error.message === 'string' && typeof j.error.code === 'string' &&
      typeof j.error.type === 'string', () => `${what}: not OpenAI's error shape: ${r.body.slice(0, 200)}`);
    return j.error.message;
  }
  L.check(typeof j.error === 'string', () => `${what}: not the {"error": "..."} shape: ${r.body.slice(0, 200)}`);
  return j.error;
}

function expect(r, status, p, what, re) {
  L.eq(r.status, status, `${what}: status (body ${JSON.stringify(r.body.slice(0, 160))})`);
  const msg = errorOf(r, p, what);
  if (status === 431 && shapeOf(p) === 'openai') L.eq(r.json.error.code, 'header_too_large', `${what}: code`);
  if (re) L.check(re.test(msg), () => `${what}: the message ${JSON.stringify(msg)} does not match ${re}`);
  return msg;
}

function genBody(p) {
  if (p === '/v1/completions') return JSON.stringify({ model: 'iterative', prompt: 'Hi', max_tokens: 1 });
  if (p === '/v1/chat/completions')
    return JSON.stringify({ model: 'iterative', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 });
  if (p.startsWith('/v2/')) return JSON.stringify({ text_input: 'Hi', max_tokens: 1 });
  return '{}';
}

const JSON_CT = { 'Content-Type': 'application/json' };

// ---- 1. headers longer than their buffer ---------------------------------------------------------

function longHost(port) {
  const labels = ['a'.repeat(63), 'b'.repeat(63), 'c'.repeat(63), 'd'.repeat(59)];
  const name = labels.join('.');
  L.eq(name.length, 251, 'the host name length');
  return `${name}:${port}`;
}

async function longHeaders(port) {
  const host = longHost(port);
  const cases = [['GET', '/metrics'], ['GET', '/api/history'], ['GET', '/v1/models'], ['GET', '/'],
    ['GET', '/healthz'], ['GET', '/v2/health/ready'], ['HEAD', '/metrics'], ['POST', '/v1/completions'],
    ['POST', '/v2/models/iterative-gpt2/generate']];
  for (const [m, p] of cases) {
    const r = await raw(port, m, p, { Host: host, ...JSON_CT }, m === 'POST' ? genBody(p) : null);
    if (m === 'HEAD') {
      L.eq(r.status, 431, `HEAD ${p} with a ${host.length}-byte Host: status`);
      continue;
    }
    expect(r, 431, p, `${m} ${p} with a ${host.length}-byte Host`, /Host/);
  }
  // at the buffer's edge: a 255-byte Host that is not ours is 403, one byte more 431
  const h255 = `${'e'.repeat(63)}.${'f'.repeat(63)}.${'g'.repeat(63)}.${'h'.repeat(63)}`;
  L.eq(h255.length, 255, 'the 255-byte host');
  expect(await raw(port, 'GET', '/metrics', { Host: h255 }), 403, '/metrics', 'a 255-byte foreign Host', /Host/);
  expect(await raw(port, 'GET', '/metrics', { Host: `${h255}x` }), 431, '/metrics', 'a 256-byte Host', /Host/);
  const origin = `http://${'o'.repeat(300)}.example`;
  expect(await raw(port, 'POST', '/v1/completions', { Origin: origin, ...JSON_CT }, genBody('/v1/completions')),
    431, '/v1/completions', `POST with a ${origin.length}-byte Origin`, /Origin/);
  expect(await raw(port, 'POST', '/v2/models/simple-gpt2/generate', { Origin: origin, ...JSON_CT },
    genBody('/v2/models/simple-gpt2/generate')), 431, '/v2/x', `Triton POST with a ${origin.length}-byte Origin`, /Origin/);
  L.log(`ok  a ${host.length}-byte Host: 431 on ${cases.length} requests in each API's shape; 255 bytes 403, 256 431; a long Origin 431`);
}

async function longHostUpgrade(port) {
  const c = await L.Client.connect(port, { name: 'ws long Host', wsOptions: { headers: { Host: longHost(port) } } });
  const first = await L.withTimeout(Promise.race([
    c.closed.then((info) => ({ closed: info })),
    c.waitFor((f) => f.msg.type === 'hello', 10000, 'hello').then(() => ({ hello: true })),
  ]), 15000, 'the upgrade outcome');
  L.check(!first.hello, 'a WebSocket upgrade with a 257-byte Host got its hello (treated as no Host)');
  L.eq(first.closed.code, 1008, 'the close code of an upgrade with a 257-byte Host');
  L.check(/Host/.test(first.closed.reason), () => `the close reason ${JSON.stringify(first.closed.reason)} does not name the Host`);
  L.log(`ok  a WebSocket upgrade with a long Host: closed 1008 ${JSON.stringify(first.closed.reason)}`);
}

async function longContentType(port) {
  for (const p of ['/v1/completions', '/v2/models/iterative-gpt2/generate']) {
    const ct200 = `application/x-${'y'.repeat(186)}`;
    const msg = expect(await raw(port, 'POST', p, { 'Content-Type': ct200 }, genBody(p)), 415, p,
      `POST ${p} with a 200-byte Content-Type`);
    L.check(msg.includes(ct200.slice(0, 40)), () => `the 415 message does not show the Content-Type sent: ${JSON.stringify(msg)}`);
    expect(await raw(port, 'POST', p, { 'Content-Type': `application/json; x=${'z'.repeat(300)}` }, genBody(p)), 431, p,
      `POST ${p} with a 320-byte Content-Type`, /Content-Type/);
  }
}

async function longAuthorization(port) {
  const auth = { Authorization: `Bearer ${'k'.repeat(600)}`, ...JSON_CT };
  for (const [m, p] of [['GET', '/v1/models'], ['POST', '/v1/completions'], ['POST', '/v2/models/simple-gpt2/generate'],
    ['GET', '/api/history']])
    expect(await raw(port, m, p, auth, m === 'POST' ? genBody(p) : null), 431, p, `${m} ${p} with a 607-byte Authorization`,
      /Authorization/);
}

// ---- 2. the API key on every route that shows or changes data -------------------------------------

// Routes that may answer without the key: they show no prompt, completion or request.
// /v2 and /v2/** are Triton's probes and metadata (the models' names and limits); /** the page's files.
const OPEN = new Set(['/healthz', '/readyz', '/metrics', '/ws', '/v2', '/v2/**', '/**']);

function readRoutes() {
  const src = fs.readFileSync(path.join(L.REPO, 'server', 'http.c'), 'utf8');
  const start = src.indexOf('ROUTES[] = {');
  L.check(start >= 0, 'server/http.c has no route table (static const http_route ROUTES[] = {...})');
  const table = src.slice(start, src.indexOf('};', start));
  const re = /\{"([^"]+)",\s*([A-Z_ |]+),\s*(KEY_\w+),\s*(SHAPE_\w+),/g;
  const routes = [];
  for (let m; (m = re.exec(table));)
    routes.push({ pattern: m[1], key: m[3],
      methods: m[2].split('|').flatMap((s) => (s.trim() === 'M_ANY' ? ['GET', 'POST'] : [s.trim().replace(/^M_/, '')])) });
  L.check(routes.length >= 10, `only ${routes.length} routes read from server/http.c`);
  return routes;
}

// A path the pattern matches: '*' one segment (a model, version 1, request 1), '**' the rest.
function samplePath(pattern) {
  const segs = pattern.split('/');
  return segs.map((s, i) => {
    if (s === '**') return 'no-such-thing';
    if (s !== '*') return s;
    return { models: 'iterative-gpt2', versions: '1', requests: '1' }[segs[i - 1]] || 'x';
  }).join('/');
}

async function walkRoutes(port) {
  const routes = readRoutes();
  const seen = [];
  for (const r of routes) {
    L.check(r.key !== 'KEY_NO' || OPEN.has(r.pattern),
      `route ${r.pattern} answers without the API key: if it shows no data, add it to OPEN in tests/integration/http_edges.test.js`);
    const p = samplePath(r.pattern);
    for (const m of r.methods.filter((x) => ['GET', 'HEAD', 'POST'].includes(x))) {
      const body = m === 'POST' ? genBody(p) : null;
      const what = `${m} ${p} (route ${r.pattern}, ${r.key})`;
      const none = await raw(port, m, p, JSON_CT, body);
      const wrong = await raw(port, m, p, { Authorization: 'Bearer wrong-key-0000', ...JSON_CT }, body);
      const good = await raw(port, m, p, { Authorization: `Bearer ${KEY}`, ...JSON_CT }, body);
      if (r.key === 'KEY_NO') {
        L.check(none.status !== 401, `${what}: 401 without the key on an open route`);
      } else {
        L.eq(none.status, 401, `${what} without the key`);
        L.eq(wrong.status, 401, `${what} with a wrong key`);
        if (m !== 'HEAD') errorOf(none, p, `${what} without the key`);
        L.check(![401, 403, 431].includes(good.status) && good.status < 500, `${what} with the key: ${good.status} ${good.body.slice(0, 200)}`);
        if (r.key === 'KEY_URL') {
          const q = await raw(port, m, `${p}?api_key=${KEY}`, JSON_CT, body);
          L.check(q.status !== 401, `${what} with ?api_key=: ${q.status}`);
        }
      }
      seen.push(`${m} ${r.pattern} ${none.status}/${good.status}`);
    }
  }
  L.log(`ok  ${routes.length} routes walked (no key / key): ${seen.join(', ')}`);
}

async function historyNeedsKey(port) {
  const auth = { Authorization: `Bearer ${KEY}`, ...JSON_CT };
  const secret = 'the secret prompt 4242';
  const g = await raw(port, 'POST', '/v1/completions', auth, JSON.stringify({ model: 'iterative', prompt: secret, max_tokens: 2 }));
  L.eq(g.status, 200, 'a completion with the key');
  await L.until(async () => (await raw(port, 'GET', '/api/history', auth)).body.includes(secret), 30000,
    'the completion in /api/history (with the key)');
  for (const p of ['/api/history', '/api/history?limit=5', '/api/requests/1']) {
    const r = await raw(port, 'GET', p, {});
    L.check(!r.body.includes(secret), `GET ${p} without the key shows the prompt: ${r.status} ${r.body.slice(0, 200)}`);
    expect(r, 401, p, `GET ${p} without the key`);
  }
  L.eq((await raw(port, 'GET', `/api/requests/1?api_key=${KEY}`, {})).status, 200, 'GET /api/requests/1?api_key=KEY');
}

// ---- 3. 404 and 405 in each API's shape ------------------------------------------------------------

async function notFoundShapes(port) {
  const b = (p) => genBody(p);
  const c404 = [['POST', '/v1/foo'], ['PUT', '/v1/foo'], ['DELETE', '/v1/models/x/y'], ['GET', '/v1/foo'],
    ['POST', '/v2/foo'], ['DELETE', '/v2/repository/index'], ['POST', '/v2/models/iterative-gpt2/config'],
    ['POST', '/v2/models/gpt2'], ['POST', '/v2/models/iterative-gpt2/versions/2/generate'],
    ['POST', '/v2/models/iterative-gpt2/versions/1/generat']];
  for (const [m, p] of c404)
    expect(await raw(port, m, p, JSON_CT, m === 'GET' ? null : b(p)), 404, p, `${m} ${p}`);
  const c405 = [['POST', '/v1/models', 'GET, HEAD'], ['DELETE', '/v1/models/iterative', 'GET, HEAD'],
    ['GET', '/v1/completions', 'POST'], ['PUT', '/v1/chat/completions', 'POST'], ['POST', '/v2/health/ready', 'GET, HEAD'],
    ['POST', '/v2/models/iterative-gpt2', 'GET, HEAD'], ['PUT', '/v2/models/simple-gpt2/ready', 'GET, HEAD'],
    ['GET', '/v2/models/iterative-gpt2/generate', 'POST'], ['GET', '/v2/models/iterative-gpt2/versions/1/generate_stream', 'POST']];
  for (const [m, p, allow] of c405) {
    const r = await raw(port, m, p, JSON_CT, m === 'GET' ? null : b(p));
    expect(r, 405, p, `${m} ${p}`);
    L.eq(r.headers.allow, allow, `${m} ${p}: Allow`);
  }
  const v = await raw(port, 'POST', '/v2/models/iterative-gpt2/versions/1/generate', JSON_CT,
    JSON.stringify({ text_input: 'Hi', max_tokens: 2 }));
  L.eq(v.status, 200, `POST /v2/models/iterative-gpt2/versions/1/generate (${v.body.slice(0, 160)})`);
  L.eq(v.json.model_version, '1', 'the versioned generate: model_version');
  const s = await raw(port, 'POST', '/v2/models/simple-gpt2/versions/1/generate_stream', JSON_CT,
    JSON.stringify({ text_input: 'Hi', max_tokens: 2 }));
  L.eq(s.status, 200, 'POST /v2/models/simple-gpt2/versions/1/generate_stream');
  L.check(/^data: /m.test(s.body), () => `the versioned generate_stream is not a stream: ${s.body.slice(0, 160)}`);
  L.log(`ok  ${c404.length} unknown paths 404 and ${c405.length} wrong methods 405 in their API's shape; the versioned generate served`);
}

// ---- 4. duplicate JSON keys -----------------------------------------------------------------------

async function duplicateKeys(port) {
  const cases = [
    ['/v1/completions', '{"model":"iterative","prompt":"Hi","max_tokens":2,"max_tokens":3}', 'max_tokens'],
    ['/v1/chat/completions', '{"model":"iterative","messages":[{"role":"user","content":"a","content":"b"}]}', 'content'],
    ['/v2/models/iterative-gpt2/generate', '{"text_input":"Hi","text_input":"Ho"}', 'text_input'],
    ['/v1/completions', '{"model":"iterative","prompt":"Hi","stream_options":{"a":{"b":1,"b":2}}}', 'b'],
  ];
  for (const [p, body, key] of cases)
    expect(await raw(port, 'POST', p, JSON_CT, body), 400, p, `POST ${p} ${body}`, new RegExp(`duplicate key "${key}"`));
  const c = await L.Client.open(port, { name: 'dup' });
  c.send('{"type":"generate","id":"d1","messages":[{"role":"user","content":"a","role":"user"}],"max_tokens":2}');
  const e = await c.waitEnd('d1', 30000);
  L.eq(e.type, 'error', '/ws: a generate with a duplicate key');
  L.check(/duplicate key "role"/.test(e.message), () => `/ws: the error ${JSON.stringify(e.message)} does not name "role"`);
  c.send('{"type":"generate","id":"d2","prompt":"a","prompt":"b","max_tokens":2}');
  const e2 = await c.waitEnd('d2', 30000);
  L.eq(e2.code, 'invalid_message', '/ws: a top-level duplicate: code');
  L.check(/duplicate key "prompt"/.test(e2.message), () => `/ws: the error ${JSON.stringify(e2.message)} does not name "prompt"`);
  c.close();
  // 5,000 keys in 64 KiB: at top level and nested, the duplicate last
  const keys = Array.from({ length: 5000 }, (_, i) => `"k_${String(i).padStart(4, '0')}":1`);
  const big = [`{${keys.join(',')},"k_0000":2}`,
    `{"model":"iterative","prompt":"Hi","stream_options":{${keys.join(',')},"k_4999":2}}`];
  for (const body of big) {
    L.check(body.length < 65536, `the big body is ${body.length} bytes`);
    const t0 = Date.now();
    const r = await raw(port, 'POST', '/v1/completions', JSON_CT, body);
    const ms = Date.now() - t0;
    expect(r, 400, '/v1/completions', `a ${body.length}-byte body of 5,000 keys`, /duplicate key "k_(0000|4999)"/);
    L.check(ms < 3000, `a body of 5,000 keys took ${ms} ms`);
    L.log(`ok  ${body.length} bytes, 5,000 keys: 400 in ${ms} ms`);
  }
}

L.main('http_edges', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab);
  const dir = L.tmpDir('edges');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log']);
  await part('1. long headers are 431', () => longHeaders(srv.port));
  await part('1. a WebSocket upgrade with a long Host', () => longHostUpgrade(srv.port));
  await part('5. a long Content-Type', () => longContentType(srv.port));
  await part('3. 404 and 405 in the API shape', () => notFoundShapes(srv.port));
  await part('4. duplicate JSON keys', () => duplicateKeys(srv.port));
  srv.assertAlive();
  await srv.stop();

  const keyFile = path.join(dir, 'key');
  fs.writeFileSync(keyFile, `${KEY}\n`);
  const ks = await L.startServer(bin, vocab, model, ['--no-request-log', '--api-key-file', keyFile,
    '--db', path.join(dir, 'log.db'), '--history', 'all']);
  await part('2. /api/history needs the key', () => historyNeedsKey(ks.port));
  await part('2. the route table walked with and without the key', () => walkRoutes(ks.port));
  await part('1. a long Authorization is 431', () => longAuthorization(ks.port));
  ks.assertAlive();
  await ks.stop();
  L.check(failures.length === 0, () => `${failures.length} part(s) failed:\n  ${failures.join('\n  ')}`);
});
