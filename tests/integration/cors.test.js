'use strict';
// cors: CORS on /v1, /v2 and the tokenizer endpoints (server/http.c), in raw HTTP, on a server with
// --allowed-origins and --api-key:
//  - an OPTIONS preflight from an allowed origin is 204 with Access-Control-Allow-Origin (that
//    origin), -Allow-Methods (the route's), -Allow-Headers (Authorization, Content-Type), -Max-Age
//    and Vary: Origin, without the API key (a browser sends none in a preflight);
//  - answers to an allowed origin carry Access-Control-Allow-Origin and Vary: Origin: JSON answers,
//    streams, and errors (401 without the key, 400 for a bad body, 404);
//  - another origin gets no Access-Control-* header: its preflight and POSTs 403 as before, its
//    GETs answered without one; a request without Origin gets none; OPTIONS elsewhere stays 405.
const L = require('./lib');

const KEY = 'sk-cors-0123456789abcdef';
const GOOD = 'http://app.example:3000';
const BAD = 'http://evil.example';

function request(port, method, urlPath, { origin, key = true, body, headers = '' } = {}) {
  const b = body === undefined ? '' : (typeof body === 'string' ? body : JSON.stringify(body));
  const raw = `${method} ${urlPath} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
    (origin ? `Origin: ${origin}\r\n` : '') + (key ? `Authorization: Bearer ${KEY}\r\n` : '') +
    (body === undefined ? '' : `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n`) +
    `${headers}Connection: close\r\n\r\n${b}`;
  return L.rawHttp(port, raw, 20000).then((r) => {
    const head = r.text.slice(0, r.text.indexOf('\r\n\r\n'));
    const h = {};
    for (const line of head.split('\r\n').slice(1)) {
      const i = line.indexOf(':');
      h[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    return { status: r.status, h, text: r.text };
  });
}

function allowed(r, what, status) {
  L.eq(r.status, status, `${what}: status (${r.text.slice(0, 300)})`);
  L.eq(r.h['access-control-allow-origin'], GOOD, `${what}: Access-Control-Allow-Origin`);
  L.check(/(^|,\s*)Origin(\s*,|$)/i.test(r.h.vary || ''), `${what}: Vary ${JSON.stringify(r.h.vary)}`);
}

function noCors(r, what, status) {
  L.eq(r.status, status, `${what}: status (${r.text.slice(0, 300)})`);
  const cors = Object.keys(r.h).filter((k) => k.startsWith('access-control-'));
  L.eq(cors.join(','), '', `${what}: Access-Control-* headers`);
}

const PREFLIGHT = 'Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n';

async function preflights(port) {
  const cases = [['/v1/chat/completions', 'POST'], ['/v1/completions', 'POST'], ['/v1/models', 'GET'],
    ['/v2/models/iterative-gpt2/generate_stream', 'POST'], ['/tokenize', 'POST'], ['/tokenizer_info', 'GET']];
  for (const [p, m] of cases) {
    const r = await request(port, 'OPTIONS', p, { origin: GOOD, key: false, headers: PREFLIGHT });
    allowed(r, `preflight ${p}`, 204);
    const methods = (r.h['access-control-allow-methods'] || '').split(/,\s*/);
    L.check(methods.includes(m), `preflight ${p}: Allow-Methods ${JSON.stringify(methods)} lacks ${m}`);
    const hdrs = (r.h['access-control-allow-headers'] || '').toLowerCase().split(/,\s*/);
    L.check(hdrs.includes('authorization') && hdrs.includes('content-type'), `preflight ${p}: Allow-Headers ${JSON.stringify(hdrs)}`);
    L.check(Number(r.h['access-control-max-age']) > 0, `preflight ${p}: Max-Age ${r.h['access-control-max-age']}`);
    noCors(await request(port, 'OPTIONS', p, { origin: BAD, key: false, headers: PREFLIGHT }), `preflight ${p} from ${BAD}`, 403);
  }
  const r = await request(port, 'OPTIONS', '/metrics', { origin: GOOD, key: false, headers: PREFLIGHT });
  noCors(r, 'OPTIONS /metrics (not a CORS route)', 405);
  L.log(`ok  preflights: 204 for ${GOOD} (${cases.length} routes), 403 without CORS headers for ${BAD}, 405 elsewhere`);
}

async function answers(port) {
  const comp = { model: 'iterative', prompt: 'Hello', max_tokens: 2 };
  allowed(await request(port, 'POST', '/v1/completions', { origin: GOOD, body: comp }), 'POST /v1/completions', 200);
  const st = await request(port, 'POST', '/v1/completions', { origin: GOOD, body: { ...comp, stream: true } });
  allowed(st, 'a /v1 stream', 200);
  L.check(/text\/event-stream/.test(st.h['content-type']) && st.text.includes('[DONE]'), `a /v1 stream: ${st.text.slice(0, 300)}`);
  allowed(await request(port, 'POST', '/v2/models/iterative-gpt2/generate_stream', { origin: GOOD, body: { text_input: 'Hi', max_tokens: 2 } }),
    'a /v2 stream', 200);
  allowed(await request(port, 'POST', '/v2/models/simple-gpt2/generate', { origin: GOOD, body: { text_input: 'Hi', max_tokens: 2 } }),
    'POST /v2 generate', 200);
  allowed(await request(port, 'GET', '/v1/models', { origin: GOOD }), 'GET /v1/models', 200);
  allowed(await request(port, 'GET', '/v2', { origin: GOOD, key: false }), 'GET /v2', 200);
  allowed(await request(port, 'POST', '/tokenize', { origin: GOOD, body: { prompt: 'Hi' } }), 'POST /tokenize', 200);
  allowed(await request(port, 'GET', '/tokenizer_info', { origin: GOOD }), 'GET /tokenizer_info', 200);
  // errors
  allowed(await request(port, 'POST', '/v1/completions', { origin: GOOD, key: false, body: comp }), '401 without the key', 401);
  allowed(await request(port, 'POST', '/v1/completions', { origin: GOOD, body: { ...comp, max_tokens: 'x' } }), '400 for a bad field', 400);
  allowed(await request(port, 'GET', '/v1/nothing', { origin: GOOD }), '404 under /v1', 404);
  allowed(await request(port, 'POST', '/detokenize', { origin: GOOD, body: { tokens: [99999] } }), '400 from /detokenize', 400);
  // other origins, and none
  noCors(await request(port, 'POST', '/v1/completions', { origin: BAD, body: comp }), `POST from ${BAD}`, 403);
  noCors(await request(port, 'POST', '/tokenize', { origin: BAD, body: { prompt: 'Hi' } }), `POST /tokenize from ${BAD}`, 403);
  noCors(await request(port, 'GET', '/v1/models', { origin: BAD }), `GET /v1/models from ${BAD}`, 200);
  noCors(await request(port, 'POST', '/v1/completions', { body: comp }), 'POST without Origin', 200);
  noCors(await request(port, 'GET', '/metrics', { origin: GOOD }), 'GET /metrics (not a CORS route)', 200);
  L.log('ok  answers, streams and errors to the allowed origin carry CORS headers; others none');
}

L.main('cors', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--api-key', KEY, '--allowed-origins', GOOD]);
  await preflights(srv.port);
  await answers(srv.port);
});
