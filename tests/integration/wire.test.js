'use strict';
// wire: what the wire guard (server/wire_guard.c, wire_recv.c) answers for libwebsockets 4.1.6,
// which would close these connections without a word, or accept what RFC 6455 forbids. Raw sockets:
//  - request heads at each limit are served (200): 16,384 bytes with one big header, with 58 tiny
//    unknown headers, with 58 known ones and 24 query parameters; a request target of 8,192 bytes;
//  - one byte or one line past them: 431 (head size, 61 header lines), 414 (target), 400 (25
//    parameters), each naming the limit, with "connection: close" and the socket ended;
//  - malformed heads: %00 anywhere in the target (/ws%00, /index.html%00, /%00, a query), a raw
//    control character in the request line, a NUL in a header, a CR without LF, a Content-Length
//    that is not a number, two different ones: 400 naming what and where;
//  - on one kept-alive connection: GET, a POST whose JSON body holds blank lines and "%00" (a body
//    is skipped by its length, not read as a head), GET again, then an oversized head: 200, 200,
//    200, 431;
//  - WebSocket: masked frames work; an unmasked frame (alone, after a masked one in the same
//    segment, with a 16-bit length, as a continuation) gets close 1002 naming it and the end of
//    the connection;
//  - inflight_wire_refused_total counts each refusal by reason, and the server still serves.
const L = require('./lib');

function headTo(total, { target = '/healthz', lines = [] } = {}) {
  const base = `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${lines.join('')}`;
  const fixed = base.length + 'X-Pad: \r\n\r\n'.length;
  return `${base}X-Pad: ${'a'.repeat(total - fixed)}\r\n\r\n`;
}

function params(n) {
  return Array.from({ length: n }, (_, i) => `a${i}=1`).join('&');
}

const repeat = (n, f) => Array.from({ length: n }, (_, i) => f(i));

// A refusal's body is a JSON error in the API's shape (OpenAI's under /v1/, {"error": message}
// elsewhere): its message is what bodyRe matches.
function refusalMessage(what, text) {
  const body = text.slice(text.indexOf('\r\n\r\n') + 4);
  L.check(/\r\ncontent-type: application\/json\r\n/i.test(text), () => `${what}: not JSON: ${text.slice(0, 300)}`);
  let j;
  try {
    j = JSON.parse(body);
  } catch (e) {
    L.fail(`${what}: the body is not JSON: ${JSON.stringify(body)}`);
  }
  const msg = typeof j.error === 'string' ? j.error : j.error && j.error.message;
  L.check(typeof msg === 'string', () => `${what}: no error message in ${body}`);
  return msg;
}

async function expectStatus(port, what, raw, status, bodyRe) {
  const r = await L.rawHttp(port, raw, 10000);
  L.eq(r.status, status, `${what}: status`);
  if (bodyRe) {
    const body = refusalMessage(what, r.text);
    L.check(bodyRe.test(body), () => `${what}: body ${JSON.stringify(body)} does not match ${bodyRe}`);
    L.check(/\r\nconnection: close\r\n/i.test(r.text), `${what}: no "connection: close"`);
  }
  L.log(`ok  ${what}: ${status}${bodyRe ? ` ${JSON.stringify(r.text.slice(r.text.indexOf('\r\n\r\n') + 4).trim())}` : ''}`);
}

async function limits(port) {
  const ok = [
    ['a 16,384-byte head (one big header)', headTo(16384)],
    ['a 16,384-byte head with 58 tiny unknown headers', headTo(16384, { lines: repeat(58, (i) => `X${i}:\r\n`) })],
    ['a 16,384-byte head with 58 known headers and 24 parameters',
      headTo(16384, { target: `/healthz?${params(24)}`, lines: repeat(58, (i) => `Accept: ${i}\r\n`) })],
    ['an 8,192-byte request target', `GET /healthz?${'a'.repeat(8192 - 9)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`],
  ];
  for (const [what, raw] of ok) {
    L.eq(Buffer.byteLength(raw) <= 16384 + 8192, true, `${what}: size`);
    await expectStatus(port, what, raw, 200);
  }
  const over = [
    ['a 16,385-byte head', headTo(16385), 431, /^request head over 16384 bytes$/, 'head_too_large'],
    ['a 16,385-byte head with 58 tiny headers', headTo(16385, { lines: repeat(58, (i) => `X${i}:\r\n`) }), 431,
      /^request head over 16384 bytes$/, 'head_too_large'],
    ['61 header lines', `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n${'Accept: v\r\n'.repeat(60)}\r\n`, 431,
      /^more than 60 header lines$/, 'too_many_headers'],
    ['an 8,193-byte request target', `GET /healthz?${'a'.repeat(8192 - 8)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`, 414,
      /^request target over 8192 bytes$/, 'target_too_long'],
    ['25 query parameters', `GET /healthz?${params(25)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`, 400,
      /^more than 24 query parameters$/, 'bad_head'],
  ];
  for (const [what, raw, status, re] of over) await expectStatus(port, what, raw, status, re);
  return over.map((o) => o[4]);
}

async function malformed(port) {
  const get = (target, hdrs = '') => `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${hdrs}\r\n`;
  const bad = [
    ['/ws%00 (an upgrade)', `GET /ws%00 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n', /^%00 \(a NUL\) in the request target at byte 7$/],
    ['/index.html%00', get('/index.html%00'), /^%00 \(a NUL\) in the request target at byte 15$/],
    ['/%00', get('/%00'), /^%00 \(a NUL\) in the request target at byte 5$/],
    ['%00 in a query', get('/api/history?user=a%00b'), /^%00 \(a NUL\) in the request target at byte 23$/],
    ['a control character in the path', get('/he\x01lthz'), /^control character 0x01 in the request line at byte 7$/],
    ['a NUL in a header', get('/healthz', 'X-A: a\x00b\r\n'), /^control character 0x00 in the request headers at byte 46$/],
    ['a CR without LF', get('/healthz', 'X-A: a\rb\r\n'), /^a CR not followed by LF at byte 46 of the request head$/],
    ['Content-Length "12x"', `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12x\r\n\r\n`,
      /^Content-Length "12x" is not a length$/],
    ['two different Content-Lengths', `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n` +
      'Content-Length: 3\r\n\r\n{}', /^two different Content-Length values$/],
  ];
  for (const [what, raw, re] of bad) await expectStatus(port, what, raw, 400, re);
  return bad.length;
}

// Responses on one connection, read in order: resolves with their statuses once `n` have come.
function keptAlive(port, requests, n) {
  const net = require('net');
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = '';
    const statuses = [];
    const t = setTimeout(() => {
      sock.destroy();
      reject(new L.TestFailure(`kept-alive: ${statuses.length} of ${n} answers after 30 s: ${JSON.stringify(statuses)}`));
    }, 30000);
    let next = 0;
    const send = () => {
      if (next < requests.length) sock.write(requests[next++]);
    };
    sock.on('connect', send);
    sock.on('data', (c) => {
      buf += c.toString('latin1');
      for (;;) {
        const he = buf.indexOf('\r\n\r\n');
        if (he < 0) return;
        const head = buf.slice(0, he);
        const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        const len = cl ? Number(cl[1]) : 0;
        if (buf.length < he + 4 + len) return;
        statuses.push(Number(/^HTTP\/1\.1 (\d{3})/.exec(head)[1]));
        buf = buf.slice(he + 4 + len);
        if (statuses.length === n) {
          clearTimeout(t);
          sock.destroy();
          resolve(statuses);
          return;
        }
        send();
      }
    });
    sock.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
  });
}

async function keepAlive(port) {
  const body = '{"model":"iterative-gpt2",\r\n\r\n"prompt":"GET /%00 HTTP/1.1",\r\n\r\n"max_tokens":1}';
  const reqs = [
    'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
    `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
    headTo(20000),
  ];
  const st = await keptAlive(port, reqs, 4);
  L.eq(JSON.stringify(st), JSON.stringify([200, 200, 200, 431]), 'the kept-alive connection\'s answers');
  L.log(`ok  one kept-alive connection: GET, POST with blank lines and %00 in its body, GET, oversized head: ${st.join(', ')}`);
}

async function unmasked(port) {
  const cases = [
    ['an unmasked text frame', (r) => r.sendText('{"type":"ping"}', { mask: false }), 1],
    ['a masked ping then an unmasked one in the same segment', (r) => r.sock.write(Buffer.concat([
      L.encodeFrame(1, Buffer.from('{"type":"ping"}')), L.encodeFrame(1, Buffer.from('{"type":"ping"}'), { mask: false })])), 1],
    ['an unmasked frame with a 16-bit length', (r) => r.sendFrame(1, Buffer.alloc(300, 0x20), { mask: false }), 1],
    ['an unmasked continuation', (r) => {
      r.sendFrame(1, Buffer.from('{"type":'), { fin: false });
      r.sendFrame(0, Buffer.from('"ping"}'), { mask: false });
    }, 0],
  ];
  for (const [what, send, opcode] of cases) {
    const r = await L.RawWs.connect(port);
    await r.waitFor((s) => s.messages.find((m) => m.type === 'hello'), 15000, 'hello');
    r.sendText('{"type":"ping"}'); // masked: answered
    await r.waitFor((s) => s.messages.find((m) => m.type === 'pong'), 15000, `${what}: pong to a masked ping`);
    const pongs = r.messages.filter((m) => m.type === 'pong').length;
    send(r);
    const cf = await r.waitClose(15000);
    L.check(cf, `${what}: the connection ended without a close frame`);
    L.eq(cf.code, 1002, `${what}: close code`);
    L.eq(cf.reason, `an unmasked frame (opcode ${opcode}): a client must mask`, `${what}: close reason`);
    L.log(`ok  ${what}: close ${cf.code} ${JSON.stringify(cf.reason)}, socket ended; pongs ${pongs} -> ${r.messages.filter((m) => m.type === 'pong').length}`);
    r.destroy();
  }
  return cases.length;
}

L.main('wire', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'wire-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log']);
  const reasons = await limits(srv.port);
  const nBad = await malformed(srv.port);
  await keepAlive(srv.port);
  const nUnmasked = await unmasked(srv.port);
  const want = { head_too_large: 0, too_many_headers: 0, target_too_long: 0, bad_head: nBad, unmasked_frame: nUnmasked };
  for (const r of reasons) want[r]++;
  want.head_too_large++; // the kept-alive connection's last request
  const m = await L.fetchMetrics(srv.port);
  for (const [reason, n] of Object.entries(want))
    L.eq(m.get('inflight_wire_refused_total', { reason }), n, `inflight_wire_refused_total{reason="${reason}"}`);
  L.log(`ok  inflight_wire_refused_total: ${JSON.stringify(want)}`);
  const c = await L.Client.connect(srv.port, { name: 'after' });
  const r = await c.request({ id: 'after', prompt: 'still serving', max_tokens: 4, ignore_eos: true });
  L.check(r.done && !r.error, () => `a request after all that: ${JSON.stringify(r.error)}`);
  L.eq(r.tokens.length, 4, 'a request after all that: tokens');
  c.close();
  L.log('ok  the server still serves: 4 tokens streamed after every refusal');
});
