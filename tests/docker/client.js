'use strict';
// tests/docker/client.js: the requests tests/docker/image.test.sh makes to the container (host
// networking, so 127.0.0.1:PORT). First one /ws generate and one streamed OpenAI completion
// (/v1/completions, stream:true), each to its end with exactly N tokens (ignore_eos). Then the
// drain: one request of each kind of DRAIN_API (both | ws | openai) with DRAIN_TOKENS tokens;
// once each has its first token it prints "IN_FLIGHT" (image.test.sh then runs docker stop, so
// they are in flight when SIGTERM comes), and each must still end with every token: the /ws one
// with its done frame, the OpenAI one with finish_reason, the usage chunk and data: [DONE].
// usage: node tests/docker/client.js PORT N DRAIN_TOKENS DRAIN_API [all | drain]
// (drain: only the requests in flight at the stop, and no /ws connection unless DRAIN_API has ws)
// The last line of stdout is a JSON summary: {requests: [{api, prompt, id, tokens,
// prompt_tokens, completion, finish}, ...]}.

const http = require('http');
const path = require('path');
const lib = require(path.join(__dirname, '..', 'integration', 'lib.js'));
const { Client, check, eq, fail, log, withTimeout, checkRequestFrames } = lib;

const port = Number(process.argv[2]);
const nTokens = Number(process.argv[3] || 16);
const drainTokens = Number(process.argv[4] || 96);
const drainApi = process.argv[5] || 'both';
const phases = process.argv[6] || 'all';

// POST /v1/completions with stream:true: the SSE events, parsed; calls onEvent for each.
function openaiStream(body, onEvent, timeoutMs = 300000) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': data.length } }, (res) => {
      let buf = '';
      const events = [];
      let sawDone = false;
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buf += chunk;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const payload = line.slice(6);
            if (payload === '[DONE]') {
              sawDone = true;
              continue;
            }
            const obj = JSON.parse(payload);
            events.push(obj);
            onEvent(obj);
          }
        }
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, events, sawDone, rest: buf }));
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(data);
  });
}


// One /ws request to its end on connection c, its frames checked; onFirst at its first token.
async function wsRequest(c, id, prompt, n, seed, onFirst) {
  if (onFirst) {
    const from = c.frames.length;
    c.waitFor((f) => f.msg.id === id && f.msg.type === 'token', 300000, `${id}'s first token`, from)
      .then(onFirst, () => {});
  }
  const r = await c.request({ id, prompt, max_tokens: n, seed, ignore_eos: true }, 300000);
  check(!r.error, () => `/ws request ${id} refused: ${JSON.stringify(r.error)}`);
  const w = checkRequestFrames(r.frames, id, { n, finish: 'length', seed });
  log(`/ws ${id}: ${w.tokens.length} token frames, finish ${w.done.finish_reason}, prompt_tokens ` +
      `${w.started.prompt_tokens}, ttft ${w.done.timing.ttft_ms.toFixed(1)} ms, ` +
      `${w.done.timing.tokens_per_s.toFixed(1)} tokens/s`);
  return { api: 'ws', id, prompt, tokens: w.tokens.length, prompt_tokens: w.started.prompt_tokens,
    completion: w.text, finish: w.done.finish_reason };
}

// One streamed OpenAI completion to its end, checked; onFirst at its first token.
async function openaiRequest(prompt, n, seed, onFirst) {
  let chunks = 0;
  let text = '';
  let ans;
  try {
    ans = await openaiStream({ model: 'iterative', prompt, max_tokens: n, seed, ignore_eos: true,
      stream: true, stream_options: { include_usage: true } }, (ev) => {
      if (ev.choices && ev.choices.length) {
        if (chunks === 0 && onFirst) onFirst();
        chunks++;
        text += ev.choices[0].text || '';
      }
    });
  } catch (e) {
    fail(`OpenAI stream "${prompt}": ${e.message} after ${chunks} chunks of ${n} tokens`);
  }
  eq(ans.status, 200, 'OpenAI stream status');
  check(/^text\/event-stream/.test(ans.headers['content-type'] || ''), () =>
    `content-type ${ans.headers['content-type']}`);
  check(ans.sawDone, () => `OpenAI stream "${prompt}" ended without data: [DONE] after ${chunks} chunks`);
  const withChoice = ans.events.filter((e) => e.choices && e.choices.length);
  const last = withChoice[withChoice.length - 1];
  eq(last && last.choices[0].finish_reason, 'length', `OpenAI "${prompt}" finish_reason`);
  const usage = ans.events.filter((e) => e.usage).map((e) => e.usage).pop();
  check(usage, 'no usage chunk (stream_options.include_usage)');
  eq(usage.completion_tokens, n, `OpenAI "${prompt}" usage.completion_tokens`);
  log(`/v1/completions "${prompt}": ${chunks} chunks, usage ${JSON.stringify(usage)}, finish ` +
      `${last.choices[0].finish_reason}, data: [DONE]`);
  return { api: 'openai', id: ans.events[0].id, prompt, tokens: usage.completion_tokens,
    prompt_tokens: usage.prompt_tokens, completion: text, finish: last.choices[0].finish_reason };
}

lib.main('docker_client', async () => {
  const out = [];
  const want = drainApi === 'both' ? ['ws', 'openai'] : [drainApi];
  let c = null;
  if (phases === 'all' || want.includes('ws')) {
    c = await Client.open(port, { name: 'ws' });
    log(`hello: model ${c.hello.model.name} (${c.hello.model.weights}), isa ${c.hello.model.isa}, ` +
        `server ${c.hello.server}`);
  }
  // ---- to their ends ---------------------------------------------------------------------------
  if (phases === 'all') {
    out.push(await wsRequest(c, 'docker-ws', 'Docker image test over the WebSocket:', nTokens, 11));
    out.push(await openaiRequest('Docker image test over the OpenAI API:', nTokens, 12));
  }
  if (c && !want.includes('ws')) {
    c.close(); // the stop then finds no WebSocket open: only the HTTP stream is in flight
    await c.closed;
    c.assertNoViolations();
    c = null;
  }

  // ---- in flight at docker stop ----------------------------------------------------------------
  let started = 0;
  const first = () => {
    if (++started === want.length) console.log('IN_FLIGHT'); // image.test.sh runs docker stop now
  };
  const drains = [];
  if (want.includes('ws'))
    drains.push(wsRequest(c, `docker-ws-drain-${phases}`, `Docker drain test over the WebSocket (${phases}):`, drainTokens, 13, first));
  if (want.includes('openai'))
    drains.push(openaiRequest(`Docker drain test over the OpenAI API (${phases}):`, drainTokens, 14, first));
  const settled = await Promise.allSettled(drains);
  const bad = settled.filter((x) => x.status === 'rejected').map((x) => x.reason.message);
  check(!bad.length, () => `in flight at docker stop, not finished (the drain):\n  ${bad.join('\n  ')}`);
  for (const x of settled) out.push(x.value);
  if (c) {
    const closed = await withTimeout(c.closed, 30000, 'the server closing /ws after the drain');
    log(`/ws closed by the server: ${closed.code} ${JSON.stringify(closed.reason)}`);
    eq(closed.code, 1001, '/ws close code after the drain');
    c.assertNoViolations();
  }
  console.log(JSON.stringify({ requests: out }));
}, { deadlineS: 600 });
