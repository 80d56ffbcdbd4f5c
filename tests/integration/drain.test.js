'use strict';
// drain: SIGTERM with only HTTP answers in flight (no WebSocket open). The stop waits for them as
// it does for WebSockets (server.c: the close phase ends once no HTTP connection has an answer
// still to write, or after 3.5 s): an OpenAI stream, an OpenAI JSON answer and a Triton stream,
// each started before the signal, arrive whole: every token, the finish, the usage chunk,
// `data: [DONE]` and the chunked terminator (node's http parser reports a cut stream as an
// 'aborted' response); the server says how many HTTP answers it finished and exits 0.
// Before the fix the context was destroyed as soon as no WebSocket was left: the stream lost its
// last events ("transfer closed with outstanding read data remaining").
const http = require('http');
const L = require('./lib');

const TOKENS = 64;

// POST path with body; resolves {status, body, aborted, complete} once the response ends.
function post(port, path, body, onFirstData) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      let aborted = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (!text && onFirstData) onFirstData();
        text += d;
      });
      res.on('aborted', () => { aborted = true; });
      res.on('close', () => resolve({ status: res.statusCode, body: text, aborted, complete: res.complete }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

L.main('drain', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'drain-model');
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--grace', '60']);
  let started = 0;
  const first = () => { started++; };
  const p = { max_tokens: TOKENS, ignore_eos: true, seed: 1 };
  const answers = [
    post(srv.port, '/v1/completions', { model: 'iterative-gpt2', prompt: 'drain stream', stream: true,
      stream_options: { include_usage: true }, ...p }, first),
    post(srv.port, '/v1/completions', { model: 'iterative-gpt2', prompt: 'drain json', ...p }),
    post(srv.port, '/v2/models/iterative-gpt2/generate_stream', { text_input: 'drain triton', max_tokens: TOKENS,
      parameters: { ignore_eos: true } }, first),
  ];
  await L.until(async () => started === 2, 30000, 'both streams to start');
  srv.proc.kill('SIGTERM');
  const [oa, js, tr] = await Promise.all(answers);
  const exit = await L.withTimeout(srv.exitPromise, 30000, 'the server to exit');

  L.check(!oa.aborted && oa.complete, 'the OpenAI stream was cut');
  const events = oa.body.split('\n\n').filter((e) => e.startsWith('data: '));
  L.eq(events[events.length - 1], 'data: [DONE]', 'the OpenAI stream\'s last event');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  const text = chunks.filter((c) => c.choices && c.choices.length && c.choices[0].text).length;
  const usage = chunks.find((c) => c.usage);
  L.check(usage && usage.usage.completion_tokens === TOKENS, () => `the OpenAI stream's usage: ${JSON.stringify(usage)}`);
  L.check(chunks.some((c) => c.choices && c.choices[0] && c.choices[0].finish_reason === 'length'), 'no finish_reason in the OpenAI stream');

  L.check(!js.aborted && js.complete && js.status === 200, () => `the OpenAI JSON answer: ${js.status} ${js.body.slice(0, 200)}`);
  L.eq(JSON.parse(js.body).usage.completion_tokens, TOKENS, 'the OpenAI JSON answer\'s tokens');

  L.check(!tr.aborted && tr.complete, 'the Triton stream was cut');
  const trEvents = tr.body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
  L.eq(trEvents.filter((e) => typeof e.text_output === 'string').length, TOKENS + 1, 'Triton events (tokens and the final one)');

  const closing = /all requests finished; closing (\d+) connection\(s\), (\d+) HTTP answer\(s\) to finish/.exec(srv.stdout);
  L.check(closing, () => `no "closing ... HTTP answer(s)" line:\n${srv.stdout}`);
  L.check(/inflight serve: stopped/.test(srv.stdout), 'no "stopped" line');
  L.eq(exit.code, 0, 'the server\'s exit code');
  L.log(`SIGTERM with 2 streams and a JSON answer in flight, no WebSocket: OpenAI stream ${text} text chunks + usage ` +
    `(${usage.usage.completion_tokens} tokens) + [DONE], JSON ${TOKENS} tokens, Triton ${trEvents.length} events; ` +
    `"${closing[0]}"; exit 0`);
});
