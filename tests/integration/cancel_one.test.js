'use strict';
// cancel_one: a cancel cancels one request, whatever session it shares.
//  (a) OpenAI's `user`: two streamed /v1/completions with the same `user` (one session in the
//      batchers) on two connections; one client aborts its stream after a few chunks (the
//      connection closes). Its request ends cancelled; the other, running all along, streams all
//      its tokens and ends with finish_reason "length" and usage.completion_tokens max_tokens.
//      /metrics counts exactly one request cancelled.
//  (b) /ws: two connections with the same user key (?user=); one is terminated mid-stream. The
//      other's request runs to its length with all its tokens.
//  (c) /ws's cancel message: of two requests in flight on one connection, the one cancelled ends
//      cancelled, the other runs to its length.
const http = require('http');
const L = require('./lib');

const N = 200; // tokens of the request that must survive (long enough to run past the abort)
const MODEL = L.QUICK ? ['--n-ctx', '512'] : ['--n-layer', '4', '--n-embd', '256', '--n-head', '4', '--n-ctx', '512'];
const USER_KEY = 'cancel-one-shared-user-0001';

// A streamed completion on a connection of its own. Returns { chunks, usage, done (a promise:
// resolves when the stream ended with [DONE], fails on an error), abort() (closes the socket) }.
function streamCompletion(port, name, body) {
  const s = { chunks: [], usage: null, sawDone: false, aborted: false, req: null };
  let ended;
  s.done = new Promise((resolve, reject) => {
    ended = resolve;
    const data = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
    s.req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new L.TestFailure(`${name}: HTTP ${res.statusCode}`));
        return;
      }
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (t) => {
        buf += t;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ')) continue;
          const payload = ev.slice(6);
          if (payload === '[DONE]') {
            s.sawDone = true;
            continue;
          }
          const ch = JSON.parse(payload);
          if (ch.usage) s.usage = ch.usage;
          if (ch.choices && ch.choices.length) s.chunks.push(ch);
        }
      });
      res.on('end', () => (s.sawDone ? resolve(s) : reject(new L.TestFailure(`${name}: the stream ended without [DONE]`))));
      res.on('error', (e) => (s.aborted ? resolve(s) : reject(e)));
    });
    s.req.on('error', (e) => (s.aborted ? resolve(s) : reject(new L.TestFailure(`${name}: ${e.message}`))));
    s.req.end(data);
  });
  s.abort = () => {
    s.aborted = true;
    s.req.destroy();
    ended(s); // whatever the socket reports after this, the stream is over for the client
  };
  return s;
}

const cancelledCount = async (port) => (await L.fetchMetrics(port)).maybe('inflight_requests_total',
  { policy: 'iterative', finish_reason: 'cancelled' }) || 0;

async function checkSharedUser(srv) {
  const before = await cancelledCount(srv.port);
  const body = (seed, max_tokens) => ({ model: 'iterative', prompt: 'Two clients, one user', max_tokens, seed,
    ignore_eos: true, user: 'shared-user' });
  const keep = streamCompletion(srv.port, 'keep', body(1, N));
  const gone = streamCompletion(srv.port, 'gone', body(2, N));
  await L.until(() => keep.chunks.length >= 3 && gone.chunks.length >= 3, 120000, 'three chunks of both streams');
  L.check(!keep.sawDone, 'the surviving stream ended before the abort: the test says nothing');
  const keptAtAbort = keep.chunks.length;
  gone.abort();
  await gone.done;
  await L.until(async () => (await cancelledCount(srv.port)) >= before + 1, 30000, 'the aborted request counted cancelled');
  await keep.done;
  const text = keep.chunks.filter((ch) => ch.choices[0].finish_reason === null);
  const last = keep.chunks[keep.chunks.length - 1].choices[0];
  L.log(`user "shared-user": aborted one stream after ${gone.chunks.length} chunks (the other had ${keptAtAbort}); ` +
    `the other streamed ${text.length} token chunks, finish_reason ${last.finish_reason}, usage ${JSON.stringify(keep.usage)}`);
  L.eq(last.finish_reason, 'length', 'finish_reason of the stream that stayed');
  L.eq(text.length, N, 'token chunks of the stream that stayed');
  L.check(keep.usage, 'no usage chunk in the stream that stayed');
  L.eq(keep.usage.completion_tokens, N, 'usage.completion_tokens of the stream that stayed');
  L.eq(await cancelledCount(srv.port), before + 1, 'requests_total{iterative,cancelled} increase (the aborted one only)');
}

async function checkWsSharedUser(srv) {
  const path = `/ws?user=${USER_KEY}`;
  const keep = await L.Client.open(srv.port, { name: 'ws-keep', path });
  const gone = await L.Client.open(srv.port, { name: 'ws-gone', path });
  const gen = (seed) => ({ type: 'generate', id: 'r', prompt: 'Two sockets, one user', model: 'iterative',
    max_tokens: N, seed, ignore_eos: true });
  keep.send(gen(3));
  gone.send(gen(4));
  await keep.waitFor((f) => f.msg.type === 'token' && f.msg.index >= 2, 120000, 'ws-keep token 2');
  await gone.waitFor((f) => f.msg.type === 'token' && f.msg.index >= 2, 120000, 'ws-gone token 2');
  L.check(!keep.framesFor('r').some((f) => f.msg.type === 'done'), 'ws-keep finished before the close: the test says nothing');
  gone.terminate();
  await gone.closed;
  const end = await keep.waitEnd('r', 300000);
  const r = L.checkRequestFrames(keep.framesFor('r'), 'r', { model: 'iterative', n: N, finish: 'length' });
  L.log(`/ws user key: one connection terminated mid-stream; the other's request: ${r.tokens.length} tokens, ` +
    `finish ${end.finish_reason}`);
  L.eq(end.finish_reason, 'length', 'ws-keep finish_reason');
  keep.assertNoViolations();
  keep.close();
  await keep.closed;
}

async function checkWsCancelOne(srv) {
  const c = await L.Client.open(srv.port, { name: 'ws-two' });
  for (const [id, seed] of [['stay', 5], ['cut', 6]])
    c.send({ type: 'generate', id, prompt: 'One socket, two requests', model: 'iterative', max_tokens: N, seed, ignore_eos: true });
  for (const id of ['stay', 'cut'])
    await c.waitFor((f) => f.msg.type === 'token' && f.msg.id === id && f.msg.index >= 2, 120000, `${id} token 2`);
  c.send({ type: 'cancel', id: 'cut' });
  const cut = await c.waitEnd('cut', 60000);
  L.eq(cut.finish_reason, 'cancelled', 'the cancelled request');
  L.check(!c.framesFor('stay').some((f) => f.msg.type === 'done'), 'stay finished before the cancel: the test says nothing');
  const stay = await c.waitEnd('stay', 300000);
  const r = L.checkRequestFrames(c.framesFor('stay'), 'stay', { model: 'iterative', n: N, finish: 'length' });
  L.log(`/ws cancel of one of two requests: the other ran to ${r.tokens.length} tokens, finish ${stay.finish_reason}`);
  c.assertNoViolations();
  c.close();
  await c.closed;
}

L.main('cancel_one', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, MODEL, 'cancel-one-model');
  const srv = await L.startServer(bin, vocab, model, ['--kv-mem-mb', '64', '--no-request-log']);
  await checkSharedUser(srv);
  await checkWsSharedUser(srv);
  await checkWsCancelOne(srv);
  await srv.stop();
  L.log('server stopped cleanly (exit 0)');
});
