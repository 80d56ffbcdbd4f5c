#!/usr/bin/env node
// cors.test.js: CORS (docs/http-api.md, server/http.c) in headless Chromium. `inflight serve` runs
// with --api-key and --allowed-origins naming one local origin; this test serves one small page
// from that origin and from a second one not in the list (node's http, two more loopback ports).
// The page's script calls the server with fetch, as any web app would: a streamed POST
// /v1/completions read with response.body.getReader() to its [DONE], the same call without
// stream, and GET /tokenizer_info, each with Authorization (so each needs a preflight). On the
// allowed origin all three succeed (8 tokens, finish_reason "length", the stream and the JSON
// answer alike) with no console error; on the other origin each fetch rejects (TypeError: Failed
// to fetch), Chromium says the CORS policy blocked it, and /metrics counts the server's 403s for
// the preflights (inflight_errors_total{code="forbidden"}, one per call).
//
// usage: node tests/browser/cors.test.js INFLIGHT_BINARY VOCAB_DIR
// Exit status: 0 passed, 1 failed, 77 skipped (no Chromium; $CHROMIUM overrides /usr/bin/chromium;
// under CI=true no Chromium is a failure).
'use strict';

const http = require('http');
const L = require('../integration/lib');
const { chromiumOrExit, launch } = require('./browser');

const KEY = 'sk-browser-cors-0123456789';
const MAX_TOKENS = 8;
const N_CTX = 256;   // the model's context: /tokenizer_info's model_max_length
const CALLS = ['stream', 'plain', 'info'];

const { bin, vocab } = L.parseArgs();
const chromium = chromiumOrExit(L.log);

// ------------------------------------------------------------------ the page

// The page's script (served as its source, run in the browser): the three calls to the server
// named by ?api=, with ?key= as the API key; what each gave goes to window.result[call]:
// {ok: true, ...what it read} or {ok: false, error: "TypeError: Failed to fetch"}.
function pageScript() {
  const q = new URLSearchParams(location.search);
  const api = q.get('api');
  const headers = { 'Content-Type': 'application/json', Authorization: 'Bearer ' + q.get('key') };
  const body = (stream) => JSON.stringify({ model: 'iterative-gpt2', prompt: 'Hello', max_tokens: Number(q.get('n')),
    ignore_eos: true, stream, stream_options: stream ? { include_usage: true } : undefined });

  async function stream() {
    const r = await fetch(api + '/v1/completions', { method: 'POST', headers, body: body(true) });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    const out = { status: r.status, type: r.headers.get('content-type'), text: '', chunks: 0, done: false };
    let buf = '';
    while (!out.done) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let end;
      while (!out.done && (end = buf.indexOf('\n\n')) >= 0) {
        const data = buf.slice(0, end).replace(/^data: /, '');
        buf = buf.slice(end + 2);
        if (data === '[DONE]') {
          out.done = true;
          break;
        }
        const ev = JSON.parse(data);
        if (ev.usage) out.tokens = ev.usage.completion_tokens;
        for (const c of ev.choices || []) {
          out.chunks++;
          out.text += c.text;
          if (c.finish_reason) out.finish = c.finish_reason;
        }
      }
    }
    return out;
  }
  async function plain() {
    const r = await fetch(api + '/v1/completions', { method: 'POST', headers, body: body(false) });
    const j = await r.json();
    return { status: r.status, text: j.choices[0].text, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens };
  }
  async function info() {
    const r = await fetch(api + '/tokenizer_info', { headers: { Authorization: headers.Authorization } });
    return { status: r.status, info: await r.json() };
  }

  (async () => {
    const result = {};
    for (const [name, call] of Object.entries({ stream, plain, info })) {
      try {
        result[name] = { ok: true, ...(await call()) };
      } catch (e) {
        result[name] = { ok: false, error: `${e.name}: ${e.message}` };
      }
    }
    window.result = result;
  })();
}

const PAGE = '<!doctype html><meta charset="utf-8"><title>a web app on another origin</title>' +
  '<script src="/app.js"></script>';

// A static site on a free loopback port: the page at /, its script at /app.js. Resolves to its origin.
function startSite() {
  const site = http.createServer((req, res) => {
    const path = req.url.split('?')[0];
    if (path === '/') res.writeHead(200, { 'Content-Type': 'text/html' }).end(PAGE);
    else if (path === '/app.js') res.writeHead(200, { 'Content-Type': 'text/javascript' }).end(`(${pageScript})();\n`);
    else res.writeHead(path === '/favicon.ico' ? 204 : 404).end();
  });
  L.onCleanup(() => site.close());
  return new Promise((resolve, reject) => {
    site.on('error', reject);
    site.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${site.address().port}`));
  });
}

// Opens the page on `origin` against the server; resolves to window.result and the console's errors.
async function runPage(browser, origin, srv) {
  const ctx = await browser.newContext();
  try {
    const page = await ctx.newPage();
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
    const q = new URLSearchParams({ api: srv.base, key: KEY, n: String(MAX_TOKENS) });
    await page.goto(`${origin}/?${q}`);
    await page.waitForFunction(() => window.result, null, { timeout: 120000 });
    const result = await page.evaluate(() => window.result);
    L.log(`page on ${origin}: ${JSON.stringify(result).slice(0, 600)}`);
    return { result, errors };
  } finally {
    await ctx.close();
  }
}

const forbidden = async (port) => (await L.fetchMetrics(port)).maybe('inflight_errors_total', { code: 'forbidden' }) || 0;

// ------------------------------------------------------------------ the checks

function checkAllowed(origin, { result, errors }) {
  for (const name of CALLS)
    L.check(result[name] && result[name].ok && result[name].status === 200,
      `allowed origin ${origin}: the ${name} call: ${JSON.stringify(result[name])}`);
  const { stream, plain, info } = result;
  L.check(stream.done && /^text\/event-stream/.test(stream.type), `the stream: ended with [DONE], ${stream.type}`);
  L.eq(stream.tokens, MAX_TOKENS, 'the stream: usage.completion_tokens');
  L.eq(stream.finish, 'length', 'the stream: finish_reason');
  L.check(stream.chunks > 1 && stream.text.length > 0, `the stream: ${stream.chunks} chunks, text ${JSON.stringify(stream.text)}`);
  L.eq(plain.tokens, MAX_TOKENS, 'the call without stream: usage.completion_tokens');
  L.eq(plain.finish, 'length', 'the call without stream: finish_reason');
  L.check(plain.text.length > 0, 'the call without stream: an empty text');
  L.check(info.info.vocab_size > 0 && info.info.model_max_length === N_CTX,
    `GET /tokenizer_info: ${JSON.stringify(info.info).slice(0, 200)}`);
  L.eq(errors.join('\n'), '', `allowed origin ${origin}: console errors`);
  L.log(`ok  allowed origin ${origin}: a stream of ${stream.chunks} chunks to [DONE] and a JSON answer, ` +
    `${MAX_TOKENS} tokens each (finish_reason length), and /tokenizer_info`);
}

function checkRefused(origin, { result, errors }) {
  for (const name of CALLS)
    L.check(result[name] && !result[name].ok && result[name].error === 'TypeError: Failed to fetch',
      `origin ${origin}, not allowed: the ${name} call must fail to fetch: ${JSON.stringify(result[name])}`);
  const blocked = errors.filter((e) => e.includes(`from origin '${origin}' has been blocked by CORS policy`));
  L.check(blocked.length >= CALLS.length,
    `origin ${origin}, not allowed: Chromium says CORS blocked each call (${blocked.length} of ${CALLS.length}): ` +
    JSON.stringify(errors));
  L.log(`ok  origin ${origin}, not allowed: each fetch rejected (TypeError: Failed to fetch); Chromium: ${blocked[0]}`);
}

L.main('browser_cors', async () => {
  const allowed = await startSite();
  const other = await startSite();
  const model = L.makeModel(bin, vocab, ['--n-layer', '2', '--n-head', '4', '--n-embd', '64', '--n-ctx', String(N_CTX)]);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--api-key', KEY, '--allowed-origins', allowed]);
  L.log(`server ${srv.base} (--allowed-origins ${allowed}); pages on ${allowed} and ${other}`);
  const browser = await launch(chromium);
  L.onCleanup(() => browser.close().catch(() => {}));
  try {
    L.log(`browser: Chromium ${browser.version()}`);
    const f0 = await forbidden(srv.port);
    checkAllowed(allowed, await runPage(browser, allowed, srv));
    const f1 = await forbidden(srv.port);
    L.eq(f1 - f0, 0, `errors_total{code="forbidden"} after the allowed origin's calls`);
    checkRefused(other, await runPage(browser, other, srv));
    const f2 = await forbidden(srv.port);
    L.eq(f2 - f1, CALLS.length, `errors_total{code="forbidden"} after the other origin's calls (a 403 for each preflight)`);
    L.log(`ok  /metrics: ${f2 - f1} forbidden (the other origin's preflights), none for the allowed origin`);
  } finally {
    await browser.close();
  }
}, { deadlineS: 300 });
