'use strict';
// origin: which pages may drive the server and which Host names it answers (server/origin.c).
// A WebSocket upgrade from another page's Origin is closed with 1008 before any hello or message;
// the same origin (the page this server served), no Origin (curl, the SDKs) and the origins of
// --allowed-origins get through. POSTs to the generation APIs from a foreign Origin get 403 in the
// API's shape. Bound to loopback, a Host other than localhost / 127.0.0.1 / [::1] (what a
// DNS-rebinding page sends) gets 403 on every path, /metrics and /api/history included, unless
// --allowed-hosts names it. /metrics counts the refusals (errors_total{code="forbidden"}).
// Refused upgrades are counted (inflight_connections_refused_total), not logged as sessions. And
// what a connection costs after a large message: its receive buffer is freed once the message is
// handled (inflight_ws_receive_buffer_bytes), 4 KiB kept for small ones.
const path = require('path');
const L = require('./lib');
const D = require('../db/dblib');

async function wsOutcome(port, headers) {
  const c = await L.Client.connect(port, { name: `ws ${JSON.stringify(headers)}`, wsOptions: { headers } });
  const first = await L.withTimeout(Promise.race([
    c.closed.then((info) => ({ closed: info })),
    c.waitFor((f) => f.msg.type === 'hello', 10000, 'hello').then((f) => ({ hello: f.msg })),
  ]), 15000, 'the upgrade outcome');
  if (first.hello) {
    c.send({ type: 'generate', id: 'o', prompt: 'Hello', max_tokens: 2 });
    const end = await c.waitEnd('o');
    L.check(end.type === 'done', () => `${JSON.stringify(headers)}: ${JSON.stringify(end)}`);
    c.close();
    await c.closed;
    return 'served';
  }
  L.check(!c.frames.some((f) => f.msg.type === 'hello'), 'a hello before the close');
  return `closed ${first.closed.code} ${first.closed.reason}`;
}

function post(port, urlPath, headers) {
  const body = JSON.stringify(urlPath.startsWith('/v1/') ? { model: 'iterative', prompt: 'Hi', max_tokens: 1 }
    : { text_input: 'Hi', max_tokens: 1 });
  return L.httpRequest(port, urlPath, { method: 'POST', body,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } });
}

L.main('origin', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab);

  // bad lists are usage errors naming the option
  for (const [args, re] of [
    [['--allowed-origins', 'ftp://x.example'], /--allowed-origins: 'ftp:\/\/x.example' is not an origin/],
    [['--allowed-origins', 'http://x.example/path'], /is not an origin/],
    [['--allowed-origins', ','], /--allowed-origins: the list is empty/],
    [['--allowed-hosts', ' , '], /--allowed-hosts: the list is empty/],
  ]) {
    const r = require('child_process').spawnSync(bin, ['serve', '--model', model, ...args], { encoding: 'utf8' });
    L.eq(r.status, 2, `serve ${args.join(' ')}: exit status`);
    L.check(re.test(r.stderr), () => `serve ${args.join(' ')}: ${r.stderr}`);
  }

  D.requireSqlite3();
  const db = path.join(L.tmpDir('origin-db'), 'log.db');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--db', db]);
  const self = `127.0.0.1:${srv.port}`;
  const cases = [
    [{}, 'served'],
    [{ Origin: `http://${self}` }, 'served'],
    [{ Origin: `http://localhost:${srv.port}`, Host: `localhost:${srv.port}` }, 'served'],
    [{ Origin: 'http://evil.example' }, /^closed 1008 origin http:\/\/evil.example is not allowed/],
    [{ Origin: `https://${self}` }, 'served'], // the same host behind a TLS-terminating proxy
    [{ Origin: 'null' }, /^closed 1008 origin null/],
    [{ Origin: `http://${self}.evil.example` }, /^closed 1008/],
    [{ Host: 'attacker.example', Origin: 'http://attacker.example' }, /^closed 1008 Host attacker.example is not a name of this server/],
    [{ Host: `127.0.0.1.evil.example:${srv.port}` }, /^closed 1008 Host/],
  ];
  let refused = 0, served = 0;
  for (const [headers, want] of cases) {
    const got = await wsOutcome(srv.port, headers);
    L.check(typeof want === 'string' ? got === want : want.test(got), () => `upgrade ${JSON.stringify(headers)}: ${got}`);
    if (got !== 'served') refused++;
    else served++;
    L.log(`upgrade ${JSON.stringify(headers)} -> ${got}`);
  }

  const wsRefused = refused;

  // HTTP: the Host check on every path; the Origin check on the generation POSTs
  for (const p of ['/metrics', '/api/history', '/', '/healthz']) {
    const r = await L.httpRequest(srv.port, p, { headers: { Host: 'attacker.example' } });
    L.eq(r.status, 403, `GET ${p} with Host attacker.example`);
    L.check(!/inflight_/.test(r.body.toString()), `GET ${p}: the body leaks metrics`);
    refused++;
    const ok = await L.httpRequest(srv.port, p, { headers: { Host: `localhost:${srv.port}` } });
    L.check(ok.status !== 403, `GET ${p} with Host localhost: ${ok.status}`);
  }
  const o1 = await post(srv.port, '/v1/completions', { Origin: 'http://evil.example' });
  L.eq(o1.status, 403, 'POST /v1/completions from a foreign Origin');
  L.eq(JSON.parse(o1.body).error.code, 'forbidden', 'its OpenAI-shaped error code');
  const o2 = await post(srv.port, '/v2/models/iterative-gpt2/generate', { Origin: 'http://evil.example' });
  L.eq(o2.status, 403, 'POST /v2/.../generate from a foreign Origin');
  L.check(/not allowed/.test(JSON.parse(o2.body).error), `its Triton-shaped error: ${o2.body}`);
  refused += 2;
  const o3 = await post(srv.port, '/v1/completions', { Origin: `http://${self}` });
  L.eq(o3.status, 200, 'POST /v1/completions from the same origin');
  const o4 = await post(srv.port, '/v1/completions', {});
  L.eq(o4.status, 200, 'POST /v1/completions with no Origin');
  const m = await L.fetchMetrics(srv.port);
  L.eq(m.get('inflight_connections_refused_total'), wsRefused, 'connections_refused_total (the refused upgrades)');
  L.eq(m.get('inflight_errors_total', { code: 'forbidden' }), refused, 'errors_total{code="forbidden"}');
  L.log(`HTTP: Host attacker.example -> 403 on 4 paths; foreign-Origin POSTs -> 403 (OpenAI code forbidden, Triton {"error"}); same origin and none -> 200; ${refused} refusals counted`);
  srv.assertAlive();
  await srv.stop();
  // sessions: the served upgrades and the two served POSTs' connections, none of the refused
  L.eq(D.scalar(db, 'SELECT count(*) FROM sessions'), served + 2, 'sessions in the log');
  L.log(`the log holds ${served + 2} sessions: ${served} served upgrades and 2 POST connections; the ${wsRefused} refused upgrades are only counted`);

  // --allowed-origins and --allowed-hosts widen the checks
  const srv2 = await L.startServer(bin, vocab, model, ['--no-request-log',
    '--allowed-origins', 'http://chat.example:8080,https://app.example', '--allowed-hosts', 'inflight.internal']);
  for (const [headers, want] of [
    [{ Origin: 'http://chat.example:8080' }, 'served'],
    [{ Origin: 'https://app.example:443' }, 'served'], // the default port is the same origin
    [{ Origin: 'http://app.example' }, /^closed 1008 origin/],
    [{ Origin: 'http://chat.example' }, /^closed 1008 origin/],
    [{ Host: `inflight.internal:${srv2.port}` }, 'served'],
    [{ Host: 'other.internal' }, /^closed 1008 Host/],
  ]) {
    const got = await wsOutcome(srv2.port, headers);
    L.check(typeof want === 'string' ? got === want : want.test(got), () => `--allowed-*: upgrade ${JSON.stringify(headers)}: ${got}`);
    L.log(`--allowed-origins/--allowed-hosts: upgrade ${JSON.stringify(headers)} -> ${got}`);
  }
  const h = await L.httpRequest(srv2.port, '/metrics', { headers: { Host: 'inflight.internal' } });
  L.eq(h.status, 200, 'GET /metrics with an --allowed-hosts name');

  // a 60,000-byte message, then a small one, on one connection: the buffer the large one needed
  // (64 KiB) is not kept
  const rxBytes = async () => (await L.fetchMetrics(srv2.port)).get('inflight_ws_receive_buffer_bytes');
  await L.until(async () => (await rxBytes()) === 0, 10000, 'receive buffers at 0 with every connection closed');
  const big = await L.Client.open(srv2.port, { name: 'big message' });
  const msg = JSON.stringify({ type: 'generate', id: 'big', prompt: 'Hello', max_tokens: 1 });
  big.send(msg.slice(0, -1) + ' '.repeat(60000 - msg.length) + '}');
  L.eq((await big.waitEnd('big')).type, 'done', 'the 60,000-byte message');
  const afterBig = await rxBytes();
  big.send({ type: 'generate', id: 'small', prompt: 'Hello', max_tokens: 1 });
  L.eq((await big.waitEnd('small')).type, 'done', 'the small message');
  const afterSmall = await rxBytes();
  L.eq(afterBig, 0, 'receive buffer bytes after the 60,000-byte message');
  L.eq(afterSmall, 4096, 'receive buffer bytes after a small message');
  big.close();
  await big.closed;
  await L.until(async () => (await rxBytes()) === 0, 10000, 'receive buffers back to 0 after the close');
  L.log(`receive buffer: ${afterBig} bytes held after a 60,000-byte message (64 KiB needed), ${afterSmall} after a small one, 0 after the close`);
  srv2.assertAlive();
  await srv2.stop();
});
