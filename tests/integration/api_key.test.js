'use strict';
// api_key: `inflight serve --api-key-file F` (and --api-key): /v1, the /v2 generate endpoints and
// /ws need "Authorization: Bearer KEY" (/ws also ?api_key=KEY, for the page); without it, or with
// a wrong one, /v1 answers 401 in OpenAI's shape (code unauthorized, WWW-Authenticate: Bearer, the
// official client's AuthenticationError), /v2 generate 401 {"error"}, /ws closes with 1008 before
// any hello. The page, /healthz, /readyz, /metrics and Triton's probes and metadata stay open;
// /metrics counts the refusals (errors_total{code="unauthorized"}). Bad keys on the command line
// (too short, a missing or empty file) are usage errors naming the option.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const L = require('./lib');

const KEY = 'sk-test-0123456789abcdef';

function post(port, urlPath, body, headers = {}) {
  return L.httpRequest(port, urlPath, { method: 'POST', body,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } });
}

async function wsRefused(port, urlPath, headers) {
  const c = await L.Client.connect(port, { name: `ws ${urlPath}`, path: urlPath, wsOptions: { headers } });
  const info = await L.withTimeout(c.closed, 10000, `${urlPath}: the close`);
  L.eq(info.code, 1008, `${urlPath} ${JSON.stringify(headers)}: close code`);
  L.check(/API key/.test(info.reason), `${urlPath}: close reason ${JSON.stringify(info.reason)}`);
  L.check(!c.frames.some((f) => f.msg.type === 'hello'), `${urlPath}: a hello before the close`);
  return info.reason;
}

L.main('api_key', async () => {
  const { bin, vocab } = L.parseArgs();
  const dir = L.tmpDir('apikey');
  const model = L.makeModel(bin, vocab);
  const keyFile = path.join(dir, 'key');
  fs.writeFileSync(keyFile, `${KEY}\n`);

  // command-line errors
  const bad = [
    [['--api-key', 'short'], /--api-key: an API key is 8 to 256 printable ASCII characters/],
    [['--api-key-file', path.join(dir, 'missing')], /--api-key-file: .*missing/],
    [['--api-key-file', (fs.writeFileSync(path.join(dir, 'empty'), '\n'), path.join(dir, 'empty'))], /--api-key-file .*empty: an API key is/],
  ];
  for (const [args, re] of bad) {
    const r = spawnSync(bin, ['serve', '--model', model, '--port', '0', ...args], { encoding: 'utf8', timeout: 30000, env: L.childEnv(vocab) });
    L.eq(r.status, 2, `serve ${args.join(' ')}: exit status`);
    L.check(re.test(r.stderr), `serve ${args.join(' ')}: stderr ${JSON.stringify(r.stderr.slice(0, 300))} does not match ${re}`);
  }

  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--api-key-file', keyFile]);
  const port = srv.port;
  for (const p of ['/', '/healthz', '/readyz', '/metrics', '/v2', '/v2/health/ready', '/v2/models/iterative-gpt2']) {
    const r = await L.httpRequest(port, p);
    L.eq(r.status, 200, `GET ${p} without a key`);
  }
  const body = JSON.stringify({ model: 'iterative', prompt: 'Hello', max_tokens: 2 });
  const cases = [[{}, 'none'], [{ authorization: 'Bearer wrong-key-000' }, 'wrong'], [{ authorization: KEY }, 'no Bearer']];
  for (const [h, what] of cases) {
    const m = await L.httpRequest(port, '/v1/models', { headers: h });
    L.eq(m.status, 401, `GET /v1/models, key ${what}`);
    L.eq(m.headers['www-authenticate'], 'Bearer', 'WWW-Authenticate');
    const e = JSON.parse(m.body.toString('utf8')).error;
    L.eq(e.code, 'unauthorized', '401 code');
    L.eq(e.type, 'authentication_error', '401 type');
    const c = await post(port, '/v1/completions', body, h);
    L.eq(c.status, 401, `POST /v1/completions, key ${what}`);
    const t = await post(port, '/v2/models/simple-gpt2/generate', JSON.stringify({ text_input: 'Hi', max_tokens: 2 }), h);
    L.eq(t.status, 401, `POST /v2 generate, key ${what}`);
    L.check(typeof JSON.parse(t.body.toString('utf8')).error === 'string', 'Triton 401 body {"error": "..."}');
  }
  const auth = { authorization: `Bearer ${KEY}` };
  L.eq((await L.httpRequest(port, '/v1/models', { headers: auth })).status, 200, 'GET /v1/models with the key');
  L.eq((await post(port, '/v1/completions', body, auth)).status, 200, 'POST /v1/completions with the key');
  L.eq((await post(port, '/v2/models/simple-gpt2/generate', JSON.stringify({ text_input: 'Hi', max_tokens: 2 }), auth)).status, 200,
    'POST /v2 generate with the key');

  let OpenAI = require(path.join(L.REPO, 'node_modules', 'openai'));
  OpenAI = OpenAI.default || OpenAI.OpenAI || OpenAI;
  let err = null;
  try {
    await new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'wrong-key-000', maxRetries: 0 }).completions.create({ model: 'iterative', prompt: 'Hi', max_tokens: 2 });
  } catch (e) {
    err = e;
  }
  L.check(err && err.constructor.name === 'AuthenticationError' && err.status === 401, `the client's error for a wrong key: ${err && err.constructor.name}`);
  const ok = await new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: KEY, maxRetries: 0 }).completions.create({ model: 'iterative', prompt: 'Hi', max_tokens: 2 });
  L.eq(ok.usage.completion_tokens, 2, 'the client with the key');

  const reasons = [];
  reasons.push(await wsRefused(port, '/ws', {}));
  reasons.push(await wsRefused(port, '/ws?api_key=wrong-key-000', {}));
  reasons.push(await wsRefused(port, '/ws', { authorization: 'Bearer wrong-key-000' }));
  for (const [p, h] of [['/ws', auth], [`/ws?api_key=${KEY}`, {}], [`/ws?user=${'u'.repeat(20)}&api_key=${KEY}`, {}]]) {
    const c = await L.Client.open(port, { name: `ws ${p}`, path: p, wsOptions: { headers: h } });
    const r = await c.request({ id: 'k', prompt: 'Hello', max_tokens: 2 });
    L.check(r.done, `${p}: the request with the key`);
    c.close();
  }
  const m = await L.fetchMetrics(port);
  L.eq(m.get('inflight_errors_total', { code: 'unauthorized' }), 9 + 1 + 3, 'errors_total{code="unauthorized"} (9 HTTP 401s, the client, 3 WebSockets)');
  L.log(`open without a key: the page, probes, metrics; 401 for /v1 and /v2 generate (no key, wrong, no Bearer), the client's AuthenticationError; /ws closed 1008 (${reasons[0]}); with the key all served`);
  await srv.stop();
});
