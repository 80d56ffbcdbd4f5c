'use strict';
// bad_input: every kind of bad client message is answered with an `error` frame carrying the
// documented code (docs/protocol.md) and the request's id when it had a readable one (else null),
// and the connection stays open: after each case a generate on the SAME connection must succeed.
// Meanwhile another client streams long requests back to back; each must complete with all its
// tokens. Then the closing cases, each on its own connection: a message over --max-message (one
// frame -> 1009; fragments adding up past the cap -> 1009 before the last fragment), a fragmented
// message under the cap (with a UTF-8 character split between fragments and a ping between them)
// answered normally, a message of exactly the cap accepted, invalid UTF-8 in a text frame -> 1007
// (several encodings), and --max-connections 3: the 4th connection is closed with 1013. The server
// must still be up and serving afterwards.
const L = require('./lib');

const MAX_MESSAGE = 4096;
const MAX_CONN = 3;
const MAX_INFLIGHT = 2;

function gen(extra) {
  return { type: 'generate', prompt: 'Hello', max_tokens: 4, seed: 1, ignore_eos: true, ...extra };
}

// [name, message (object -> JSON, string sent as is, Buffer sent as binary), code, expected id]
// expected id: a string, or null (no readable id)
function cases(limits) {
  const id65 = 'i'.repeat(65);
  return [
    ['invalid JSON (truncated)', '{"type":"generate","id":"j1",', 'invalid_json', null],
    ['invalid JSON (not JSON)', 'hello there', 'invalid_json', null],
    ['invalid JSON (bytes after the value)', '{"type":"ping"} {"type":"ping"}', 'invalid_json', null],
    ['invalid JSON (single quotes)', "{'type':'ping'}", 'invalid_json', null],
    ['invalid JSON (lone surrogate escape)', '{"type":"generate","id":"s1","prompt":"\\ud800"}', 'invalid_json', null],
    ['not an object: array', '[{"type":"ping"}]', 'invalid_message', null],
    ['not an object: number', '42', 'invalid_message', null],
    ['not an object: string', '"generate"', 'invalid_message', null],
    ['not an object: null', 'null', 'invalid_message', null],
    ['not an object: true', 'true', 'invalid_message', null],
    ['missing type', { id: 'm1', prompt: 'x' }, 'missing_field', 'm1'],
    ['missing type (empty object)', {}, 'missing_field', null],
    ['type not a string (number)', { type: 5, id: 'm2' }, 'wrong_type', 'm2'],
    ['type not a string (null)', { type: null, id: 'm2b' }, 'wrong_type', 'm2b'],
    ['unknown type', { type: 'generat', id: 'm3', prompt: 'x' }, 'unknown_type', 'm3'],
    ['unknown type (case)', { type: 'Generate', id: 'm3b', prompt: 'x' }, 'unknown_type', 'm3b'],
    ['unknown field (typo max_token)', gen({ id: 'm4', max_token: 5 }), 'unknown_field', 'm4'],
    ['unknown field on cancel', { type: 'cancel', id: 'm4b', reason: 'x' }, 'unknown_field', 'm4b'],
    ['unknown field on ping', { type: 'ping', foo: 1 }, 'unknown_field', null],
    ['duplicate field', '{"type":"generate","id":"m5","prompt":"a","prompt":"b","max_tokens":2}', 'invalid_message', 'm5'],
    ['missing id', { type: 'generate', prompt: 'x' }, 'missing_field', null],
    ['id wrong type (number)', { type: 'generate', id: 7, prompt: 'x' }, 'wrong_type', null],
    ['id wrong type (object)', { type: 'generate', id: { a: 1 }, prompt: 'x' }, 'wrong_type', null],
    ['id empty', gen({ id: '' }), 'out_of_range', null],
    ['id too long (65 bytes)', gen({ id: id65 }), 'out_of_range', null],
    ['missing prompt', { type: 'generate', id: 'p1' }, 'missing_field', 'p1'],
    ['prompt wrong type (number)', gen({ id: 'p2', prompt: 5 }), 'wrong_type', 'p2'],
    ['prompt wrong type (array)', gen({ id: 'p2b', prompt: ['a'] }), 'wrong_type', 'p2b'],
    ['prompt wrong type (null)', gen({ id: 'p2c', prompt: null }), 'wrong_type', 'p2c'],
    ['empty prompt', gen({ id: 'p3', prompt: '' }), 'empty_prompt', 'p3'],
    ['prompt longer than the context', gen({ id: 'p4', prompt: ' a'.repeat(limits.max_context + 20), max_tokens: 1 }), 'prompt_too_long', 'p4'],
    ['prompt + max_tokens over the context', gen({ id: 'p5', prompt: ' a'.repeat(200), max_tokens: 100 }), 'prompt_too_long', 'p5'],
    ['unknown model', gen({ id: 'o1', model: 'dynamic' }), 'unknown_model', 'o1'],
    ['model wrong type', gen({ id: 'o2', model: 1 }), 'wrong_type', 'o2'],
    ['max_tokens 0', gen({ id: 't1', max_tokens: 0 }), 'out_of_range', 't1'],
    ['max_tokens negative', gen({ id: 't2', max_tokens: -5 }), 'out_of_range', 't2'],
    ['max_tokens 1.5', gen({ id: 't3', max_tokens: 1.5 }), 'wrong_type', 't3'],
    ['max_tokens "32"', gen({ id: 't4', max_tokens: '32' }), 'wrong_type', 't4'],
    ['max_tokens over limits.max_tokens', gen({ id: 't5', max_tokens: limits.max_tokens + 1 }), 'out_of_range', 't5'],
    ['max_tokens 1e300', '{"type":"generate","id":"t6","prompt":"Hello","max_tokens":1e300}', 'out_of_range', 't6'],
    ['max_tokens null', gen({ id: 't7', max_tokens: null }), 'wrong_type', 't7'],
    ['temperature -1', gen({ id: 'k1', temperature: -1 }), 'out_of_range', 'k1'],
    ['temperature 3', gen({ id: 'k2', temperature: 3 }), 'out_of_range', 'k2'],
    ['temperature "hot"', gen({ id: 'k3', temperature: 'hot' }), 'wrong_type', 'k3'],
    ['top_k -1', gen({ id: 'k4', top_k: -1 }), 'out_of_range', 'k4'],
    ['top_k over the vocabulary', gen({ id: 'k5', top_k: 50258 }), 'out_of_range', 'k5'],
    ['top_k 2.5', gen({ id: 'k6', top_k: 2.5 }), 'wrong_type', 'k6'],
    ['top_p 0', gen({ id: 'k7', top_p: 0 }), 'out_of_range', 'k7'],
    ['top_p 1.5', gen({ id: 'k8', top_p: 1.5 }), 'out_of_range', 'k8'],
    ['top_p negative', gen({ id: 'k9', top_p: -0.5 }), 'out_of_range', 'k9'],
    ['seed negative', gen({ id: 'e1', seed: -1 }), 'out_of_range', 'e1'],
    ['seed 2^53', '{"type":"generate","id":"e2","prompt":"Hello","seed":9007199254740992}', 'out_of_range', 'e2'],
    ['seed 1.5', gen({ id: 'e3', seed: 1.5 }), 'wrong_type', 'e3'],
    ['seed "7"', gen({ id: 'e4', seed: '7' }), 'wrong_type', 'e4'],
    ['stop not an array', gen({ id: 'x1', stop: '\n' }), 'wrong_type', 'x1'],
    ['stop with a non-string', gen({ id: 'x2', stop: ['a', 5] }), 'wrong_type', 'x2'],
    ['stop with 5 strings', gen({ id: 'x3', stop: ['a', 'b', 'c', 'd', 'e'] }), 'out_of_range', 'x3'],
    ['stop with an empty string', gen({ id: 'x4', stop: [''] }), 'out_of_range', 'x4'],
    ['stop with a 65-byte string', gen({ id: 'x5', stop: ['s'.repeat(65)] }), 'out_of_range', 'x5'],
    ['stop with a 65-byte string (multibyte)', gen({ id: 'x6', stop: ['é'.repeat(32) + 'x'] }), 'out_of_range', 'x6'],
    ['ignore_eos 1', gen({ id: 'g1', ignore_eos: 1 }), 'wrong_type', 'g1'],
    ['ignore_eos "true"', gen({ id: 'g2', ignore_eos: 'true' }), 'wrong_type', 'g2'],
    ['cancel unknown id', { type: 'cancel', id: 'nope' }, 'unknown_id', 'nope'],
    ['cancel without id', { type: 'cancel' }, 'missing_field', null],
    ['subscribe unknown topic', { type: 'subscribe', topic: 'tokens' }, 'unknown_topic', null],
    ['subscribe without topic', { type: 'subscribe' }, 'missing_field', null],
    ['subscribe topic wrong type', { type: 'subscribe', topic: 1 }, 'wrong_type', null],
    ['ping id wrong type', { type: 'ping', id: 5 }, 'wrong_type', null],
    ['binary frame', Buffer.from('{"type":"ping","id":"bin"}'), 'binary_frame', null],
    ['binary frame (garbage)', Buffer.from([0, 1, 2, 255, 254]), 'binary_frame', null],
  ];
}

// One short generate on connection c that must succeed: the connection is still usable.
let okCount = 0;
async function assertUsable(c, why) {
  const id = `ok-${++okCount}`;
  const r = await c.request({ id, prompt: 'Still there?', max_tokens: 3, seed: okCount, ignore_eos: true }, 60000);
  L.check(r.done && r.done.finish_reason === 'length' && r.tokens.length === 3,
    () => `after ${why}: the follow-up generate on the same connection failed: ${JSON.stringify(r.error || r.done)}`);
}

// Long streams back to back on their own connection until stop() is called; every one must end
// with length and all its tokens.
function backgroundStreamer(port) {
  const st = { n: 0, tokens: 0, stop: false, error: null, client: null, maxGapMs: 0 };
  st.promise = (async () => {
    const c = await L.Client.open(port, { name: 'background' });
    st.client = c;
    while (!st.stop) {
      const id = `bg-${st.n}`;
      const r = await c.request({ id, prompt: 'A long, long stream', max_tokens: 200, seed: 100 + st.n, ignore_eos: true }, 300000);
      const res = L.checkRequestFrames(r.frames, id, { n: 200, finish: 'length' });
      for (let i = 1; i < r.tokens.length; i++) st.maxGapMs = Math.max(st.maxGapMs, r.tokens[i].t - r.tokens[i - 1].t);
      st.n++;
      st.tokens += res.tokens.length;
    }
    c.assertNoViolations();
  })().catch((e) => {
    st.error = e;
  });
  return st;
}

async function expectClose(port, what, action, wantCode) {
  const c = await L.Client.connect(port, { name: what });
  action(c);
  const info = await L.withTimeout(c.closed, 15000, `${what}: the server to close the connection`);
  L.log(`${what}: closed with ${info.code} ${JSON.stringify(info.reason)}`);
  L.eq(info.code, wantCode, `${what}: close code`);
  return info;
}

async function rawExpectClose(port, what, action, wantCode) {
  const r = await L.RawWs.connect(port);
  await r.waitFor((s) => s.messages.find((m) => m.type === 'hello'), 15000, 'hello');
  action(r);
  const cf = await r.waitClose(15000);
  L.log(`${what}: close frame ${cf ? `${cf.code} ${JSON.stringify(cf.reason)}` : 'none'}, socket ended`);
  L.check(cf, `${what}: the socket ended without a close frame`);
  L.eq(cf.code, wantCode, `${what}: close code`);
  r.destroy();
}

async function connectionsOpen(port, n) {
  await L.until(async () => (await L.fetchMetrics(port)).get('inflight_connections_open') === n, 10000,
    `connections_open to be ${n}`);
}

L.main('bad_input', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'bad-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--max-message', String(MAX_MESSAGE),
    '--max-connections', String(MAX_CONN), '--max-inflight', String(MAX_INFLIGHT)]);

  const bg = backgroundStreamer(srv.port);
  await L.until(() => bg.client || bg.error, 30000, 'the background client');
  const c = await L.Client.open(srv.port, { name: 'main' });
  const limits = c.hello.limits;
  L.eq(limits.max_message_bytes, MAX_MESSAGE, 'hello limits.max_message_bytes');
  L.eq(limits.max_requests_in_flight, MAX_INFLIGHT, 'hello limits.max_requests_in_flight');
  L.log(`hello limits: ${JSON.stringify(limits)}`);
  await assertUsable(c, 'connecting');

  // ---- error frames, connection kept ----
  const seenCodes = new Map();
  for (const [name, msg, code, wantId] of cases(limits)) {
    const from = c.frames.length;
    if (Buffer.isBuffer(msg)) c.ws.send(msg, { binary: true });
    else c.send(typeof msg === 'string' ? msg : JSON.stringify(msg));
    const e = await c.waitFor((f) => f.msg.type === 'error' || f.msg.type === 'done' || f.msg.type === 'started' || f.msg.type === 'pong' || f.msg.type === 'subscribed',
      30000, `the answer to "${name}"`, from);
    L.check(e.msg.type === 'error', () => `"${name}": expected an error ${code}, got ${JSON.stringify(e.msg)}`);
    L.check(e.msg.code === code, () => `"${name}": expected code ${code}, got ${JSON.stringify(e.msg)}`);
    L.check(typeof e.msg.message === 'string' && e.msg.message.length > 0, () => `"${name}": error without a message`);
    L.check(e.msg.id === wantId, () => `"${name}": error id ${JSON.stringify(e.msg.id)}, expected ${JSON.stringify(wantId)}`);
    seenCodes.set(code, (seenCodes.get(code) || 0) + 1);
    await assertUsable(c, name);
    L.log(`ok  ${name.padEnd(42)} -> ${code}${wantId ? ` (id ${wantId})` : ''}: ${e.msg.message}`);
  }

  // boundaries that must be accepted
  {
    const id64 = 'I'.repeat(64);
    const r = await c.request(gen({ id: id64 }));
    L.check(r.done && r.done.id === id64 && r.tokens.length === 4, () => `64-byte id refused: ${JSON.stringify(r.error)}`);
    const r2 = await c.request(gen({ id: 'stop4x64', stop: ['a'.repeat(64), 'b'.repeat(64), 'c'.repeat(64), 'd'.repeat(64)] }));
    L.check(r2.done, () => `4 stop strings of 64 bytes refused: ${JSON.stringify(r2.error)}`);
    const r3 = await c.request(gen({ id: 'lims', temperature: 2, top_k: 50257, top_p: 1, seed: 9007199254740991, max_tokens: 1 }));
    L.check(r3.done, () => `range ends (temperature 2, top_k 50257, top_p 1, seed 2^53-1) refused: ${JSON.stringify(r3.error)}`);
    L.eq(r3.frames.find((f) => f.msg.type === 'started').msg.seed, 9007199254740991, 'seed 2^53-1 reported in started');
    const r4 = await c.request(gen({ id: 'greedy', temperature: 0, top_k: 0 }));
    L.check(r4.done, () => `temperature 0 / top_k 0 refused: ${JSON.stringify(r4.error)}`);
    // context boundary: prompt tokens + max_tokens == n_ctx is accepted, one more is not
    const prompt = ' a'.repeat(100);
    const probe = await c.request(gen({ id: 'probe', prompt, max_tokens: 1 }));
    const n = probe.frames.find((f) => f.msg.type === 'started').msg.prompt_tokens;
    const fit = limits.max_context - n;
    const r5 = await c.request(gen({ id: 'fits', prompt, max_tokens: fit }), 120000);
    L.check(r5.done && r5.tokens.length === fit, () => `prompt ${n} tokens + max_tokens ${fit} = context refused: ${JSON.stringify(r5.error)}`);
    const r6 = await c.request(gen({ id: 'over', prompt, max_tokens: fit + 1 }));
    L.check(r6.error && r6.error.code === 'prompt_too_long', () => `prompt ${n} + max_tokens ${fit + 1} > context: expected prompt_too_long, got ${JSON.stringify(r6.error || r6.done)}`);
    L.log(`ok  boundaries accepted: 64-byte id, 4 stop strings of 64 bytes, temperature 2 / top_k 50257 / top_p 1 / seed 2^53-1, temperature 0 / top_k 0, prompt ${n} + max_tokens ${fit} = context (and +1 refused)`);
  }

  // duplicate id: a second generate with an id still in flight; the first one is unaffected
  {
    c.send(gen({ id: 'dup', max_tokens: 200 }));
    await c.waitFor((f) => f.msg.id === 'dup' && f.msg.type === 'started', 30000, 'dup started');
    c.send(gen({ id: 'dup', max_tokens: 3 }));
    const e = await c.waitFor((f) => f.msg.id === 'dup' && f.msg.type === 'error', 30000, 'duplicate_id error');
    L.eq(e.msg.code, 'duplicate_id', 'second generate with an id in flight');
    const end = await c.waitFor((f) => f.msg.id === 'dup' && f.msg.type === 'done', 60000, 'the first dup to finish');
    const toks = c.framesFor('dup').filter((f) => f.msg.type === 'token');
    L.eq(end.msg.finish_reason, 'length', 'the first request with the duplicated id');
    L.eq(toks.length, 200, 'tokens of the first request with the duplicated id');
    await assertUsable(c, 'duplicate_id');
    // the id is free again once done
    const again = await c.request(gen({ id: 'dup' }));
    L.check(again.done, 'an id is reusable after its done');
    L.log(`ok  duplicate id -> duplicate_id: ${e.msg.message}; the first request finished with its 200 tokens; the id is reusable after done`);
  }

  // too_many_requests: --max-inflight 2
  {
    c.send(gen({ id: 'f1', max_tokens: 200 }));
    c.send(gen({ id: 'f2', max_tokens: 200 }));
    c.send(gen({ id: 'f3', max_tokens: 3 }));
    const e = await c.waitFor((f) => f.msg.id === 'f3' && (f.msg.type === 'error' || f.msg.type === 'queued'), 30000, 'the answer to f3');
    L.check(e.msg.type === 'error' && e.msg.code === 'too_many_requests',
      () => `third request with --max-inflight ${MAX_INFLIGHT}: expected too_many_requests, got ${JSON.stringify(e.msg)}`);
    c.send({ type: 'cancel', id: 'f1' });
    c.send({ type: 'cancel', id: 'f2' });
    const d1 = await c.waitEnd('f1');
    const d2 = await c.waitEnd('f2');
    L.check(d1.type === 'done' && d2.type === 'done', 'f1/f2 end with done');
    await assertUsable(c, 'too_many_requests');
    L.log(`ok  third request in flight -> too_many_requests: ${e.msg.message}; f1/f2 ended ${d1.finish_reason}/${d2.finish_reason}`);
  }

  // a string holding U+0000 (JSON \u0000) is refused: C strings would silently cut it there
  for (const [name, msg, wantId] of [
    ['prompt', gen({ id: 'nul1', prompt: 'Hello\u0000 world, and more', max_tokens: 1 }), 'nul1'],
    ['stop string', gen({ id: 'nul2', stop: ['a\u0000b'], max_tokens: 1 }), 'nul2'],
    ['id', gen({ id: 'nul\u00003', max_tokens: 1 }), 'nul\u00003'],
  ]) {
    const from = c.frames.length;
    c.send(JSON.stringify(msg));
    const e = await c.waitFor((f) => f.msg.type === 'error', 30000, `the NUL ${name} error`, from);
    L.check(e.msg.code === 'invalid_message' && /U\+0000/.test(e.msg.message), `NUL in ${name}: ${JSON.stringify(e.msg)}`);
    L.check(e.msg.id === wantId || (name === 'id' && e.msg.id !== undefined), `NUL in ${name}: id ${JSON.stringify(e.msg.id)}`);
    L.log(`ok  U+0000 in the ${name} -> invalid_message: ${e.msg.message}`);
  }
  await assertUsable(c, 'U+0000');

  // raw control characters, which JSON forbids inside strings (a raw NUL used to cut the string:
  // "abc<NUL>def" ran as "abc", a key "max_tokens<NUL>zz" passed as max_tokens), and a NUL after
  // the value (used to be ignored): invalid_json naming the byte
  for (const [name, text] of [
    ['NUL in the prompt', '{"type":"generate","id":"raw1","prompt":"abc\u0000def"}'],
    ['NUL in a key', '{"type":"generate","id":"raw2","prompt":"x","max_tokens\u0000zz":3}'],
    ['NUL after the value', '{"type":"ping"}\u0000garbage'],
    ['raw tab in the prompt', '{"type":"generate","id":"raw3","prompt":"a\tb"}'],
  ]) {
    const at = text.search(/[\u0000-\u001f]/); // the byte offset too: these texts are ASCII
    const from = c.frames.length;
    c.send(text); // the JavaScript escapes above become the raw bytes on the wire
    const e = await c.waitFor((f) => f.msg.type === 'error' || f.msg.type === 'pong' || f.msg.type === 'queued', 30000, `the answer to ${name}`, from);
    L.check(e.msg.type === 'error' && e.msg.code === 'invalid_json' && e.msg.message.includes(`at byte ${at}`),
      () => `${name}: expected invalid_json at byte ${at}, got ${JSON.stringify(e.msg)}`);
    L.log(`ok  ${name} -> invalid_json: ${e.msg.message}`);
  }
  await assertUsable(c, 'raw control characters');
  c.assertNoViolations();
  L.check(!c.closeInfo, 'the main connection closed');
  srv.assertAlive();

  // ---- closing cases (each on a third connection) ----
  await connectionsOpen(srv.port, 2);
  // exactly the cap is accepted
  {
    const x = await L.Client.open(srv.port, { name: 'at-cap' });
    const base = JSON.stringify(gen({ id: 'cap', prompt: 'Exactly at the cap' }));
    const msg = base.slice(0, -1) + ' '.repeat(MAX_MESSAGE - base.length) + '}';
    L.eq(Buffer.byteLength(msg), MAX_MESSAGE, 'message length');
    x.send(msg);
    const end = await x.waitEnd('cap', 60000);
    L.check(end.type === 'done', () => `a message of exactly ${MAX_MESSAGE} bytes: ${JSON.stringify(end)}`);
    L.log(`ok  a message of exactly --max-message ${MAX_MESSAGE} bytes is answered (${end.finish_reason})`);
    x.close();
    await x.closed;
  }
  await connectionsOpen(srv.port, 2);
  await expectClose(srv.port, 'one frame over the cap (5000 bytes)', (x) => {
    const base = JSON.stringify(gen({ id: 'big', prompt: 'x' }));
    x.send(base.slice(0, -1) + ' '.repeat(5000 - base.length) + '}');
  }, 1009);
  await connectionsOpen(srv.port, 2);
  await expectClose(srv.port, 'fragments adding up past the cap (3 x 2000 bytes, no final fragment)', (x) => {
    const chunk = ' '.repeat(2000);
    x.ws.send('{"type":"ping"' + chunk, { fin: false });
    x.ws.send(chunk, { fin: false });
    x.ws.send(chunk, { fin: false });
  }, 1009);
  await connectionsOpen(srv.port, 2);
  // fragmented under the cap: reassembled; a UTF-8 character split between fragments; a ping
  // control frame between the fragments
  {
    const r = await L.RawWs.connect(srv.port);
    await r.waitFor((s) => s.messages.find((m) => m.type === 'hello'), 15000, 'hello');
    const whole = Buffer.from(JSON.stringify(gen({ id: 'frag', prompt: 'Héllo wörld, fragmented', max_tokens: 5 })), 'utf8');
    const cut1 = whole.indexOf(Buffer.from('é')) + 1; // inside the two bytes of é
    const cut2 = whole.indexOf(Buffer.from('ö')) + 1;
    r.sendFrame(1, whole.subarray(0, cut1), { fin: false });
    r.sendFrame(9, Buffer.from('pp'), { fin: true }); // ping between fragments
    r.sendFrame(0, whole.subarray(cut1, cut2), { fin: false });
    r.sendFrame(0, whole.subarray(cut2), { fin: true });
    await r.waitFor((s) => s.messages.find((m) => m.id === 'frag' && (m.type === 'done' || m.type === 'error')), 60000, 'the fragmented request to end');
    const end = r.messages.find((m) => m.id === 'frag' && (m.type === 'done' || m.type === 'error'));
    const started = r.messages.find((m) => m.id === 'frag' && m.type === 'started');
    const pong = r.frames.find((f) => f.opcode === 10);
    L.check(end.type === 'done' && end.usage.completion_tokens === 5, () => `fragmented message: ${JSON.stringify(end)}`);
    L.check(pong && pong.payload.toString() === 'pp', 'no pong (opcode 10) with the ping payload for a ping between fragments');
    const ref = await c.request(gen({ id: 'frag-ref', prompt: 'Héllo wörld, fragmented', max_tokens: 1 }));
    L.eq(started.prompt_tokens, ref.frames.find((f) => f.msg.type === 'started').msg.prompt_tokens, 'prompt tokens of the reassembled prompt');
    L.log(`ok  a message in 3 fragments (é and ö split between them, a ping between the first two) is answered: ${end.finish_reason}, ${end.usage.completion_tokens} tokens, prompt_tokens ${started.prompt_tokens}; pong received`);
    r.sendFrame(8, Buffer.from([0x03, 0xe8]));
    await r.waitClose(10000);
    r.destroy();
  }
  const badUtf8 = [
    ['invalid UTF-8 (0xff)', Buffer.concat([Buffer.from('{"type":"ping","id":"'), Buffer.from([0xff]), Buffer.from('"}')])],
    ['invalid UTF-8 (overlong 0xc0 0xaf)', Buffer.concat([Buffer.from('{"type":"generate","id":"u","prompt":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')])],
    ['invalid UTF-8 (surrogate 0xed 0xa0 0x80)', Buffer.concat([Buffer.from('{"type":"generate","id":"u","prompt":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')])],
    ['invalid UTF-8 (truncated at the end)', Buffer.concat([Buffer.from('{"type":"ping"}'), Buffer.from([0xe2, 0x82])])],
  ];
  for (const [what, bytes] of badUtf8) {
    await connectionsOpen(srv.port, 2);
    await rawExpectClose(srv.port, what, (r) => r.sendFrame(1, bytes), 1007);
  }
  // malformed close frames fail the connection (RFC 6455 7.1.7): answered with 1002, never an echo
  // of the bad code or reason. libwebsockets 4.1.6 itself refuses codes below 1000 and 1004-2999
  // (1005, 999, 2000 below) before our callback; the server refuses the rest (ours: counted)
  const mC = await L.fetchMetrics(srv.port);
  const badClose = [
    ['close code 5000', Buffer.from([0x13, 0x88]), true],
    ['close code 1005 (never sent)', Buffer.from([0x03, 0xed]), false],
    ['close code 999', Buffer.from([0x03, 0xe7]), false],
    ['close code 2000', Buffer.from([0x07, 0xd0]), false],
    ['a one-byte close payload', Buffer.from([0x03]), true],
    ['a close reason that is not UTF-8', Buffer.concat([Buffer.from([0x03, 0xe8]), Buffer.from([0xff, 0xfe])]), true],
  ];
  for (const [what, payload] of badClose) {
    await connectionsOpen(srv.port, 2);
    const r = await L.RawWs.connect(srv.port);
    await r.waitFor((s) => s.messages.find((m) => m.type === 'hello'), 15000, 'hello');
    r.sendFrame(8, payload);
    const cf = await r.waitClose(15000);
    L.check(!cf || cf.code === 1002, () => `${what}: the server answered with close ${JSON.stringify(cf)} (want none or 1002)`);
    L.log(`ok  ${what}: connection failed, ${cf ? `close ${cf.code} ${JSON.stringify(cf.reason)}` : 'no close frame'} (not echoed)`);
    r.destroy();
  }
  await L.until(async () => (await L.fetchMetrics(srv.port)).get('inflight_connections_closed_total', { reason: 'invalid_close_frame' }) -
    mC.get('inflight_connections_closed_total', { reason: 'invalid_close_frame' }) === badClose.filter((b) => b[2]).length,
  10000, 'the invalid close frames the server refused counted');
  // valid ones are echoed: 1000, 1001, 3000 and 4000 (registered and private use) with a UTF-8
  // reason (libwebsockets 4.1.6 answers 1012-1014, registered after RFC 6455, with 1002 itself)
  for (const code of [1000, 1001, 3000, 4000]) {
    await connectionsOpen(srv.port, 2);
    const r = await L.RawWs.connect(srv.port);
    await r.waitFor((s) => s.messages.find((m) => m.type === 'hello'), 15000, 'hello');
    r.replyClose = false;
    const p = Buffer.concat([Buffer.from([code >> 8, code & 0xff]), Buffer.from('au revoir, é')]);
    r.sendFrame(8, p);
    const cf = await r.waitClose(15000);
    L.check(cf && cf.code === code, () => `close ${code}: echo ${JSON.stringify(cf)}`);
    r.destroy();
  }
  L.log('ok  valid close frames (1000, 1001, 3000, 4000 with a UTF-8 reason) are echoed');

  // invalid UTF-8 split over fragments, on a connection with a request running: closed, request cancelled
  await connectionsOpen(srv.port, 2);
  const mU = await L.fetchMetrics(srv.port);
  await rawExpectClose(srv.port, 'invalid UTF-8 in the 2nd fragment, a request running', (r) => {
    r.sendText(JSON.stringify(gen({ id: 'run', max_tokens: 200 })));
    r.sendFrame(1, Buffer.from('{"type":"ping","id":"'), { fin: false });
    r.sendFrame(0, Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80, 0x22, 0x7d]), { fin: true });
  }, 1007);
  await L.until(async () => {
    const m = await L.fetchMetrics(srv.port);
    return m.get('inflight_requests_total', { policy: 'iterative', finish_reason: 'cancelled' }) -
      mU.get('inflight_requests_total', { policy: 'iterative', finish_reason: 'cancelled' }) === 1;
  }, 10000, 'the request of the connection closed for invalid UTF-8 to end cancelled');
  L.log('ok  the running request of the connection closed with 1007 ended cancelled');

  // --max-connections 3: main + background + one; the next is closed with 1013
  await connectionsOpen(srv.port, 2);
  {
    const third = await L.Client.open(srv.port, { name: 'third' });
    const info = await expectClose(srv.port, 'a 4th connection with --max-connections 3', () => {}, 1013);
    L.check(info.reason.length > 0, 'a 1013 close without a reason');
    await assertUsable(third, 'a refused 4th connection');
    third.close();
    await third.closed;
    await connectionsOpen(srv.port, 2);
    const again = await L.Client.open(srv.port, { name: 'third-again' });
    await assertUsable(again, 'reconnecting after the limit freed');
    again.close();
    await again.closed;
    L.log('ok  a connection is accepted again once one closed');
  }

  // ---- the server is still up ----
  const h = await L.httpRequest(srv.port, '/healthz');
  L.eq(h.status, 200, 'GET /healthz after everything');
  await assertUsable(c, 'everything');
  bg.stop = true;
  await L.withTimeout(bg.promise, 300000, 'the background streamer to finish');
  if (bg.error) throw bg.error;
  L.check(bg.n >= 1, 'the background streamer completed no stream');
  L.log(`background client: ${bg.n} streams of 200 tokens completed (${bg.tokens} tokens), max inter-token gap ${bg.maxGapMs.toFixed(1)} ms`);

  const m = await L.fetchMetrics(srv.port);
  const closed = (r) => m.get('inflight_connections_closed_total', { reason: r });
  L.log(`connections_closed_total: message_too_big ${closed('message_too_big')}, invalid_utf8 ${closed('invalid_utf8')}, ` +
    `connection_limit ${closed('connection_limit')}, slow_reader ${closed('slow_reader')}`);
  L.eq(closed('message_too_big'), 2, 'connections_closed_total{message_too_big}');
  L.eq(closed('invalid_utf8'), badUtf8.length + 1, 'connections_closed_total{invalid_utf8}');
  L.eq(closed('connection_limit'), 1, 'connections_closed_total{connection_limit}');
  L.eq(closed('slow_reader'), 0, 'connections_closed_total{slow_reader}');
  for (const [code, n] of seenCodes) {
    const v = m.maybe('inflight_errors_total', { code });
    L.check(v !== undefined && v >= n, () => `inflight_errors_total{code="${code}"} is ${v}, at least ${n} sent`);
  }
  // every request has ended (the streams' done frames are in): the KV pools drain within steps
  for (const pol of ['iterative', 'static']) {
    const t0 = Date.now();
    await L.until(async () => (await L.fetchMetrics(srv.port)).get('inflight_kv_blocks_used', { policy: pol }) === 0,
      15000, `kv_blocks_used{${pol}} back to 0`);
    L.log(`kv_blocks_used{${pol}} is 0 (${Date.now() - t0} ms after the last check)`);
  }
  c.close();
  bg.client.close();
  await Promise.all([c.closed, bg.client.closed]);
  await srv.stop();
  L.log(`${seenCodes.size} error codes checked over ${[...seenCodes.values()].reduce((a, b) => a + b, 0)} cases; server stopped cleanly (exit 0)`);
});
