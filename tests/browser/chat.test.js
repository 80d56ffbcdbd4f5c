#!/usr/bin/env node
// chat.test.js: the web page end to end in headless Chromium against the real `inflight serve`:
// makes a small random model, starts the server on a free port, and drives web/ from several
// browser contexts (each its own WebSocket session): two pages submit at the same moment under the
// iterative policy and must share a scheduler step (by the server's step frames; sent again if they
// ran one after the other); the demo button under static; an error frame
// shown in its card; page-side validation; cancel; a phone-sized and a dark-mode page; and, against
// a second server started with --api-key, the page without the key (it says one is needed) and
// opened as /?api_key=KEY (it streams). The server
// logs to a SQLite file (--db): then each context's history page (history.html, same user key as
// its chat page) must list exactly that context's requests, with plots and a token timeline that
// match the history API. A conversation in its own context: Chat mode, then Continue twice on
// its card; each turn's generate frame carries every earlier turn as `messages` with one
// conversation id, turns 2 and 3 take their prefix from the server's prefix cache (cached_tokens,
// the step frame's [rid, 1, cached] and the batch view's tooltip), a reload restores the thread,
// New chat starts another, and the history page shows the three requests as one thread. Every
// page must be free of console errors, page errors, CSP violations and requests to other origins. Screenshots go to ARTIFACTS_DIR (with the server's output,
// server.log).
//
// usage: node tests/browser/chat.test.js INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR
// Exit status: 0 passed, 1 failed, 77 skipped (no Chromium; $CHROMIUM overrides /usr/bin/chromium;
// under CI=true no Chromium is a failure).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawn, spawnSync } = require('child_process');

const REPO = path.resolve(__dirname, '..', '..');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const T0 = Date.now();

function log(msg) {
  process.stdout.write(`[${((Date.now() - T0) / 1000).toFixed(1).padStart(5)} s] ${msg}\n`);
}
function ok(msg) { log('ok   ' + msg); }
function check(cond, msg) {
  if (!cond) throw new Error(msg);
  ok(msg);
}

const argv = process.argv.slice(2);
if (argv.length !== 3) {
  process.stderr.write('usage: node tests/browser/chat.test.js INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR\n');
  process.exit(1);
}
const BIN = path.resolve(argv[0]);
const VOCAB = path.resolve(argv[1]);
const ARTIFACTS = path.resolve(argv[2]);

if (!fs.existsSync(CHROMIUM)) {
  // under CI=true a missing browser is a failure: CI must run this test, not skip it
  if (/^(1|true|yes)$/i.test(process.env.CI || '')) {
    process.stderr.write(`FAIL: CI=true and no Chromium at ${CHROMIUM} (scripts/setup.sh --test installs it; ` +
      'set $CHROMIUM to use another): under CI the browser test must not skip\n');
    process.exit(1);
  }
  log(`skip: no Chromium at ${CHROMIUM} (set $CHROMIUM to use another; under CI=true this fails)`);
  process.exit(77);
}
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  process.stderr.write(`FAIL: cannot load playwright-core (${e.message}); run scripts/setup.sh (npm ci)\n`);
  process.exit(1);
}

// ------------------------------------------------------------------ the server

const cleanup = { tmp: null, server: null, browser: null };
let lastServer = null;   // for its output when the test fails

function startServer(model, db, extra = [], logName = 'server.log') {
  return new Promise((resolve, reject) => {
    const args = ['serve', '--model', model, '--port', '0', '--host', '127.0.0.1', '--web', path.join(REPO, 'web'),
      '--db', db, ...extra];
    log(`starting: ${BIN} ${args.join(' ')}`);
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const logFile = fs.createWriteStream(path.join(ARTIFACTS, logName));
    const srv = { proc, output: '', exited: null, port: 0 };
    cleanup.server = srv;
    lastServer = srv;
    let stdoutBuf = '';
    const timer = setTimeout(() => reject(new Error(
      `the server did not print 'listening on http://...' within 60 s; its output:\n${srv.output}`)), 60000);
    proc.stdout.on('data', (d) => {
      const s = d.toString();
      srv.output += s;
      logFile.write(s);
      stdoutBuf += s;
      const m = /listening on http:\/\/([0-9.]+):(\d+)/.exec(stdoutBuf);
      if (m && !srv.port) {
        srv.port = Number(m[2]);
        clearTimeout(timer);
        resolve(srv);
      }
    });
    proc.stderr.on('data', (d) => {
      srv.output += d.toString();
      logFile.write(d);
    });
    proc.on('error', (e) => { clearTimeout(timer); reject(new Error(`cannot run ${BIN}: ${e.message}`)); });
    proc.on('exit', (code, sig) => {
      srv.exited = { code, sig };
      if (!srv.port) {
        clearTimeout(timer);
        reject(new Error(`the server exited (${sig || 'status ' + code}) before listening; its output:\n${srv.output}`));
      }
    });
  });
}

function httpGet(port, p) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, timeout: 2000 }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', (e) => resolve({ status: 0, body: String(e.message) }));
    req.on('timeout', () => { req.destroy(); });
  });
}

async function waitReady(srv) {
  const until = Date.now() + 60000;
  let last = null;
  while (Date.now() < until) {
    if (srv.exited) throw new Error(`the server exited while starting; its output:\n${srv.output}`);
    last = await httpGet(srv.port, '/readyz');
    if (last.status === 200) return;
    await sleep(100);
  }
  throw new Error(`/readyz did not answer 200 within 60 s (last: ${last && last.status} ${last && last.body})`);
}

async function stopServer(srv) {
  if (!srv || srv.exited) return;
  const gone = new Promise((r) => srv.proc.once('exit', r));
  srv.proc.kill('SIGTERM');
  const t = setTimeout(() => {
    if (!srv.exited) {
      log('the server ignored SIGTERM for 5 s: SIGKILL');
      srv.proc.kill('SIGKILL');
    }
  }, 5000);
  await gone;
  clearTimeout(t);
  log(`server stopped (${srv.exited.sig ? 'signal ' + srv.exited.sig : 'exit status ' + srv.exited.code})`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------------ pages

const pages = [];   // {name, page, problems}

async function openPage(browser, base, name, contextOptions, query = '', beforeLoad = null) {
  const context = await browser.newContext(Object.assign({ viewport: { width: 1280, height: 900 } }, contextOptions || {}));
  await context.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || '(inline)'} at ${e.sourceFile}:${e.lineNumber}`);
    });
  });
  const page = await watchPage(await context.newPage(), base, name);
  if (beforeLoad) beforeLoad(page);
  await page.goto(base + '/' + query);
  await page.waitForSelector('body[data-conn="open"][data-steps="on"]', { timeout: 20000 });
  return page;
}

// Records a page's console errors, page errors, failed responses and requests to other origins.
function watchPage(page, base, name) {
  const rec = { name, page, problems: [] };
  const origin = new URL(base).origin;
  page.on('console', (m) => {
    if (m.type() === 'error') rec.problems.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => rec.problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(origin + '/') && !u.startsWith('data:')) rec.problems.push(`request to another origin: ${u}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) rec.problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  pages.push(rec);
  return page;
}

// The sampling parameters are collapsed on phones: open them as a user would.
async function openParams(page) {
  if (!(await page.$eval('#params', (d) => d.open))) await page.click('#params > summary');
}

async function setPolicy(page, model) {
  await page.click(`label[for="model-${model}"]`);
  const checked = await page.isChecked(`#model-${model}`);
  if (!checked) throw new Error(`could not select the ${model} policy`);
}

async function cardInfo(page, id) {
  return page.$eval(`.card[data-id="${id}"]`, (c) => ({
    id: c.dataset.id,
    state: c.dataset.state,
    model: c.dataset.model,
    rid: c.dataset.rid === undefined ? null : Number(c.dataset.rid),
    finish: c.dataset.finish || null,
    errorCode: c.dataset.errorCode || null,
    prompt: c.querySelector('.prompt').textContent,
    completion: c.querySelector('.completion').textContent,
    error: c.querySelector('.card-error').textContent,
    ttft: c.querySelector('.m-ttft').textContent,
    tps: c.querySelector('.m-tps').textContent,
    tokens: c.querySelector('.m-tokens').textContent,
  }));
}

async function waitFinal(page, id, ms) {
  await page.waitForFunction((cid) => {
    const c = document.querySelector(`.card[data-id="${cid}"]`);
    return c && (c.dataset.state === 'done' || c.dataset.state === 'error');
  }, id, { timeout: ms || 60000 });
  return cardInfo(page, id);
}

async function cardIds(page) {
  return page.$$eval('#cards .card', (cs) => cs.map((c) => c.dataset.id));
}

// Clicks a button at wall-clock time `at` (ms since the epoch: the pages and this process share the
// clock) and returns the id of the card it created.
function clickAt(page, selector, at) {
  return page.evaluate(([sel, t]) => new Promise((resolve) => {
    setTimeout(() => {
      document.querySelector(sel).click();
      const c = document.querySelector('#cards .card');
      resolve(c ? c.dataset.id : null);
    }, Math.max(0, t - Date.now()));
  }), [selector, at]);
}

// Where each rid appears in a page's recorded steps of one batcher.
function stepSpans(page, model, rids) {
  return page.evaluate(([m, rs]) => {
    const out = {};
    for (const r of rs) out[r] = { first: null, last: null, n: 0, prefill: 0 };
    for (const s of window.inflightSteps[m]) {
      for (const [rid, pre] of s.seqs) {
        const o = out[rid];
        if (!o) continue;
        if (o.first === null) o.first = s.step;
        o.last = s.step;
        o.n++;
        if (pre) o.prefill++;
      }
    }
    return out;
  }, [model, rids]);
}

async function screenshot(page, file) {
  await sleep(250);   // let the last animation frame draw the canvases
  const p = path.join(ARTIFACTS, file);
  await page.screenshot({ path: p, fullPage: true });
  log(`screenshot ${p}`);
}

// ------------------------------------------------------------------ the history page

const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function cardsOf(page) {
  return page.$$eval('#cards .card', (cs) => cs.map((c) => ({
    id: c.dataset.id, state: c.dataset.state, finish: c.dataset.finish || null,
    prompt: c.querySelector('.prompt').textContent, completion: c.querySelector('.completion').textContent,
  })));
}

// Every request the history API lists for a key, newest first (all pages).
async function apiHistory(port, key) {
  const all = [];
  let before = null;
  for (let i = 0; i < 100; i++) {
    const r = await httpGet(port, `/api/history?user=${key}&limit=500` + (before != null ? `&before=${before}` : ''));
    if (r.status !== 200) throw new Error(`GET /api/history: HTTP ${r.status}: ${r.body}`);
    const j = JSON.parse(r.body);
    all.push(...j.requests);
    if (j.next_before == null) return all;
    before = j.next_before;
  }
  throw new Error('GET /api/history: more than 100 pages');
}

async function historyState(page) {
  return page.evaluate(() => ({
    state: document.body.dataset.state,
    title: document.getElementById('state-title').textContent,
    text: document.getElementById('state-text').textContent,
    rows: Array.from(document.querySelectorAll('#rows tr[data-id]'), (tr) => ({
      id: Number(tr.dataset.id), kind: tr.dataset.kind, finish: tr.dataset.finish, errorCode: tr.dataset.errorCode || null,
      prompt: tr.querySelector('.cell-prompt').textContent,
    })),
    points: Object.fromEntries(['ttft', 'tps', 'timeline'].map((n) => [n, Number(document.getElementById('plot-' + n).dataset.points)])),
  }));
}

// Waits (up to 5 s) for the plots to have drawn the given numbers of points (they draw on the next
// animation frame); the caller checks what they show then.
async function drawn(page, want) {
  await page.waitForFunction((w) => Object.keys(w).every((n) =>
    Number(document.getElementById('plot-' + n).dataset.points) === w[n]), want, { timeout: 5000 }).catch(() => {});
}

// Opens history.html until it lists at least `n` rows: the log is written every ~200 ms, so the
// newest requests may take a moment to appear.
async function loadHistory(page, base, n, query) {
  const until = Date.now() + 10000;
  for (let tries = 1; ; tries++) {
    await page.goto(base + '/history.html' + (query || ''));
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 10000 });
    const h = await historyState(page);
    if (h.state === 'ready' && h.rows.length >= n) return { h, tries };
    if (h.state === 'nodb' || h.state === 'error') throw new Error(`history.html: ${h.state}: ${h.title}: ${h.text}`);
    if (Date.now() > until) throw new Error(`history.html lists ${h.rows.length} rows (state ${h.state}) after 10 s, expected ${n}`);
    await sleep(300);
  }
}

// A context's history page against its chat page's cards and the API: the same requests in the
// same order, nothing of `foreign` (other contexts' prompts), plots with one point per request
// that has the value, and a request's token timeline. Leaves the page with that request open.
async function checkHistory(chat, base, port, name, foreign) {
  const key = await chat.evaluate(() => localStorage.getItem('inflight.userKey'));
  check(/^[0-9a-f]{32}$/.test(key || ''), `${name}: user key ${String(key).slice(0, 6)}… in localStorage (32 hex characters)`);
  const cards = await cardsOf(chat);
  const done = cards.filter((c) => c.state === 'done');
  const page = watchPage(await chat.context().newPage(), base, name + ' history');
  const { h, tries } = await loadHistory(page, base, cards.length);
  const api = await apiHistory(port, key);
  check(h.rows.length >= done.length && h.rows.length === cards.length,
    `${name} history: ${h.rows.length} rows for ${cards.length} requests (${done.length} finished)` + (tries > 1 ? `, after ${tries} loads` : ''));
  check(sameList(h.rows.map((r) => r.id), api.map((r) => r.id)),
    `${name} history: the rows are the API's requests in its order (ids ${api.map((r) => r.id).join(', ')})`);
  const byClient = new Map(api.map((r) => [r.client_id, r]));
  for (const c of cards) {
    const r = byClient.get(c.id);
    if (!r) throw new Error(`${name} history: card ${c.id} (${JSON.stringify(c.prompt)}) is not in the history`);
    const row = h.rows.find((x) => x.id === r.id);
    if (row.prompt !== c.prompt || r.prompt !== c.prompt) {
      throw new Error(`${name} history: request ${r.id} (card ${c.id}) shows prompt ${JSON.stringify(row.prompt)}, the card has ${JSON.stringify(c.prompt)}`);
    }
    if (c.state === 'done' && c.finish !== 'cancelled' && r.completion !== c.completion) {
      throw new Error(`${name} history: request ${r.id}'s logged completion differs from card ${c.id}'s streamed text`);
    }
    if (c.state === 'done' && (r.finish_reason !== c.finish || row.finish !== c.finish)) {
      throw new Error(`${name} history: request ${r.id} finished ${r.finish_reason} (row: ${row.finish}), card ${c.id} says ${c.finish}`);
    }
  }
  ok(`${name} history: every card is a row with its prompt, finish reason and (when finished) completion`);
  const leaked = h.rows.filter((r) => foreign.includes(r.prompt));
  check(leaked.length === 0, `${name} history: none of the other contexts' ${foreign.length} prompts` +
    (leaked.length ? `: shows ${leaked.map((r) => JSON.stringify(r.prompt)).join(', ')}` : ''));
  const nTtft = api.filter((r) => typeof r.ttft_ms === 'number').length;
  const nTps = api.filter((r) => typeof r.tokens_per_s === 'number' && r.tokens_per_s > 0).length;
  await drawn(page, { ttft: nTtft, tps: nTps });
  h.points = (await historyState(page)).points;
  check(h.points.ttft === nTtft && h.points.tps === nTps,
    `${name} history: plots have ${h.points.ttft} TTFT and ${h.points.tps} tokens/s points for ${h.rows.length} rows ` +
    `(expected ${nTtft} and ${nTps}: the requests with a first token / with two tokens)`);

  // the hover tooltip on the newest point
  const hover = await page.evaluate(() => {
    const pl = window.inflightHistory.plots.ttft, q = pl.proj[pl.proj.length - 1];
    const r = pl.canvas.getBoundingClientRect();
    return q ? { x: r.left + q.px, y: r.top + q.py, id: q.pt.id } : null;
  });
  if (hover) {
    await page.mouse.move(hover.x, hover.y);
    const tip = await page.waitForFunction(() => {
      const t = document.querySelector('#fig-ttft .tip');
      return !t.hidden && t.textContent;
    }, null, { timeout: 3000 }).then((j) => j.jsonValue());
    check(tip.startsWith('#' + hover.id + ' ') && /TTFT/.test(tip), `${name} history: hovering a TTFT point shows "${tip.split('\n')[0]} · ${tip.split('\n')[1]}"`);
    await page.mouse.move(0, 0);
  }

  // a request's token timeline: the finished request with the most tokens
  const pick = api.filter((r) => r.finish_reason && r.finish_reason !== 'cancelled' && r.completion_tokens > 0)
    .sort((a, b) => b.completion_tokens - a.completion_tokens)[0];
  check(pick, `${name} history: a finished request to open (#${pick && pick.id}, ${pick && pick.completion_tokens} tokens)`);
  await page.click(`#rows tr[data-id="${pick.id}"]`);
  await page.waitForSelector(`#detail[data-state="ready"][data-id="${pick.id}"]`, { timeout: 10000 });
  await drawn(page, { timeline: pick.completion_tokens });
  const det = await httpGet(port, `/api/requests/${pick.id}?user=${key}`);
  check(det.status === 200, `GET /api/requests/${pick.id}: 200`);
  const d = JSON.parse(det.body).request;
  const offs = d.token_offsets_us;
  check(Array.isArray(offs) && offs.length === pick.completion_tokens && offs.every((v, i) => i === 0 || v >= offs[i - 1]),
    `request ${pick.id}: ${offs.length} token offsets, in order, ${offs[0]} .. ${offs[offs.length - 1]} us`);
  // the offset is stamped when the batcher hands the token over, right after it stamped the first
  // token: never before the TTFT, and after it by microseconds unless that thread was preempted
  // between the two (a busy machine: 10 ms seen); 50 ms catches a wrong base or unit
  const late = offs[0] / 1000 - d.ttft_ms;
  check(late >= -0.002 && late <= 50,
    `request ${pick.id}: the first token's offset ${(offs[0] / 1000).toFixed(3)} ms is its TTFT ${d.ttft_ms} ms (+${late.toFixed(3)} ms)`);
  const shown = await page.evaluate(() => ({
    points: Number(document.getElementById('plot-timeline').dataset.points),
    expanded: Array.from(document.querySelectorAll('#rows tr[aria-expanded="true"]'), (tr) => tr.dataset.id),
    prompt: document.getElementById('detail-prompt').textContent,
    completion: document.getElementById('detail-completion').textContent,
    params: document.getElementById('detail-params').textContent,
  }));
  check(shown.points === pick.completion_tokens && sameList(shown.expanded, [String(pick.id)]),
    `${name} history: row ${pick.id} opened, its timeline has ${shown.points} points for ${pick.completion_tokens} completion tokens`);
  check(shown.prompt === pick.prompt && shown.completion === pick.completion &&
      shown.params.includes(String(d.params.max_tokens)) && shown.params.includes(String(d.params.seed)),
  `${name} history: the opened request shows its whole text and parameters (max_tokens ${d.params.max_tokens}, seed ${d.params.seed})`);
  // the page scrolls the opened request into view (smoothly): let it settle, then go to the top
  await page.evaluate(() => new Promise((resolve) => {
    let last = -1, same = 0;
    const t0 = performance.now();
    const tick = () => {
      same = window.scrollY === last ? same + 1 : 0;
      last = window.scrollY;
      if (same >= 5 || performance.now() - t0 > 3000) resolve();
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }));
  await page.evaluate(() => window.scrollTo(0, 0));
  return { page, key, api };
}

// ------------------------------------------------------------------ the test

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  cleanup.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'inflight-browser-'));
  const model = path.join(cleanup.tmp, 'model');
  const mk = spawnSync(BIN, ['make-model', '--out', model, '--n-layer', '2', '--n-head', '4', '--n-embd', '64',
    '--n-ctx', '256', '--seed', '3', '--vocab', VOCAB], { encoding: 'utf8', timeout: 120000 });
  if (mk.error) throw new Error(`cannot run ${BIN} make-model: ${mk.error.message}`);
  if (mk.status !== 0) throw new Error(`make-model failed (status ${mk.status}): ${mk.stderr}`);
  ok('make-model: ' + (mk.stderr || mk.stdout).trim().split('\n').pop());

  const srv = await startServer(model, path.join(cleanup.tmp, 'log.db'));
  await waitReady(srv);
  const base = `http://127.0.0.1:${srv.port}`;
  ok(`server listening on ${base}, /readyz 200`);
  const index = await httpGet(srv.port, '/');
  check(index.status === 200 && /<title>inflight/.test(index.body), 'GET / serves web/index.html');
  if (index.headers['content-security-policy']) log(`server CSP header: ${index.headers['content-security-policy']}`);

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] });
  cleanup.browser = browser;
  log(`browser: Chromium ${browser.version()}`);

  // -------- two contexts, same moment, iterative: they must share a step
  const A = await openPage(browser, base, 'A');
  const B = await openPage(browser, base, 'B');
  const sessions = await Promise.all([A, B].map((p) => p.evaluate(() => document.body.dataset.session)));
  check(sessions[0] && sessions[1] && sessions[0] !== sessions[1], `two sessions: ${sessions.join(', ')}`);
  const hello = await A.evaluate(() => window.inflight.hello);
  const summary = await A.$eval('#model-summary', (e) => e.innerText.replace(/\s+/g, ' ').trim());
  check(/2\s*layers/.test(summary) && /64\s*wide/.test(summary), `model summary shown: "${summary}"`);

  // A's request is the longer one (A_TOKENS), so that B's, sent at the same moment, arrives while
  // A's runs even if the two pages' sends are some way apart on a busy machine; if they still ran
  // one after the other (the server's step record says so), the pair is sent again
  const prompts = ['Programming in C++ is like', 'Programming in Assembly is like'];
  const A_TOKENS = 200, B_TOKENS = 48, ATTEMPTS = 3;
  for (const [i, p] of [A, B].entries()) {
    await setPolicy(p, 'iterative');
    await p.fill('#max-tokens', String(i ? B_TOKENS : A_TOKENS));
    await p.check('#ignore-eos');
  }
  let cA, cB, both, spans;
  for (let attempt = 1; ; attempt++) {
    for (const [i, p] of [A, B].entries()) await p.fill('#prompt', prompts[i]);
    const at = Date.now() + 400;
    const [idA, idB] = await Promise.all([clickAt(A, '#send', at), clickAt(B, '#send', at)]);
    check(idA && idB, `both pages sent at the same moment (cards ${idA}, ${idB})`);
    [cA, cB] = await Promise.all([waitFinal(A, idA), waitFinal(B, idB)]);
    for (const [n, c, want] of [['A', cA, A_TOKENS], ['B', cB, B_TOKENS]]) {
      check(c.state === 'done', `page ${n}: card ${c.id} is done (state ${c.state}${c.error ? ': ' + c.error : ''})`);
      check(c.model === 'iterative' && Number.isInteger(c.rid), `page ${n}: card has data-model iterative and data-rid ${c.rid}`);
      check(c.finish === 'length', `page ${n}: finish_reason ${c.finish} (${want} tokens, ignore_eos)`);
      check(c.completion.length > 0, `page ${n}: completion is ${c.completion.length} characters: ${JSON.stringify(c.completion.slice(0, 60))}…`);
      check(/\d/.test(c.ttft) && /tok\/s/.test(c.tps), `page ${n}: TTFT ${c.ttft}, ${c.tps}, tokens ${c.tokens}`);
    }
    both = await A.evaluate(([r1, r2]) => {
      const has = (s, r) => s.seqs.some((q) => q[0] === r);
      const s = window.inflightSteps.iterative.find((st) => has(st, r1) && has(st, r2));
      return s ? { step: s.step, seqs: s.seqs, running: s.running, prefill: s.prefill_tokens, decode: s.decode_tokens } : null;
    }, [cA.rid, cB.rid]);
    spans = await stepSpans(A, 'iterative', [cA.rid, cB.rid]);
    const sa = spans[cA.rid], sb = spans[cB.rid];
    const apart = sa.n > 0 && sb.n > 0 && (sa.last < sb.first || sb.last < sa.first);
    if (both || !apart || attempt === ATTEMPTS) break;
    log(`     attempt ${attempt}: rids ${cA.rid} and ${cB.rid} ran one after the other (steps ${sa.first}..${sa.last}, ` +
      `${sb.first}..${sb.last}): the two sends were too far apart to meet; again`);
  }
  const spanText = `rid ${cA.rid} in steps ${spans[cA.rid].first}..${spans[cA.rid].last} (${spans[cA.rid].n} steps); ` +
      `rid ${cB.rid} in steps ${spans[cB.rid].first}..${spans[cB.rid].last} (${spans[cB.rid].n} steps)`;
  check(both !== null, `an iterative step holds both pages' requests (rid ${cA.rid} from A, rid ${cB.rid} from B)` +
    (both ? '' : `: ${spanText}`));
  log(`     evidence: step ${both.step}: seqs ${JSON.stringify(both.seqs)} (${both.prefill} prefill + ${both.decode} decode tokens, ${both.running} running after it)`);
  log(`     ${spanText}`);
  const seenByB = await B.evaluate((n) => window.inflightSteps.iterative.some((s) => s.step === n), both.step);
  check(seenByB, `page B also recorded step ${both.step}`);
  await A.waitForFunction((n) => Number(document.getElementById('batch-iterative').dataset.lastStep) >= n,
    both.step, { timeout: 5000 });
  const drawn = await A.$eval('#batch-iterative', (f) => f.dataset.lastStep);
  check(Number(drawn) >= both.step, `the iterative batch view has drawn up to step ${drawn}`);

  // -------- an error frame lands in its card (prompt + max_tokens beyond the context)
  const maxTokens = hello.limits.max_tokens;
  await B.fill('#max-tokens', String(maxTokens));
  await B.fill('#prompt', 'This prompt and the longest completion do not fit in the context');
  await B.click('#send');
  const idErr = (await cardIds(B))[0];
  const cErr = await waitFinal(B, idErr, 20000);
  check(cErr.state === 'error' && cErr.errorCode === 'prompt_too_long' && cErr.error.length > 0,
    `server error shown in card ${idErr}: [${cErr.errorCode}] ${cErr.error}`);
  await B.fill('#max-tokens', '48');

  // -------- validation in the page: nothing is sent while a field is invalid
  const before = (await cardIds(A)).length;
  await A.fill('#temperature', '7');
  await A.fill('#prompt', 'not sent');
  await A.click('#send');
  const tErr = await A.$eval('#temperature-err', (e) => e.textContent);
  const invalid = await A.getAttribute('#temperature', 'aria-invalid');
  check(tErr.length > 0 && invalid === 'true' && (await cardIds(A)).length === before,
    `temperature 7 refused in the page: "${tErr}"`);
  await A.fill('#temperature', '0.8');
  await A.fill('#prompt', '');
  await A.click('#send');
  const pErr = await A.$eval('#prompt-err', (e) => e.textContent);
  check(pErr.length > 0 && (await cardIds(A)).length === before, `empty prompt refused in the page: "${pErr}"`);
  await A.fill('#prompt', 'x');   // typing clears the message
  await A.fill('#prompt', '');

  await screenshot(A, 'iterative-a.png');
  await screenshot(B, 'iterative-b.png');

  // -------- the demo button under static: the second request waits for the first to drain
  await setPolicy(A, 'static');
  await A.fill('#max-tokens', '160');
  const known = new Set(await cardIds(A));
  await A.click('#demo');
  await A.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, known.size + 2, { timeout: 10000 });
  const demoIds = (await cardIds(A)).filter((id) => !known.has(id)).reverse();   // oldest first
  const demo = [];
  for (const id of demoIds) demo.push(await waitFinal(A, id));
  check(demo.length === 2 && demo[0].prompt === prompts[0] && demo[1].prompt === prompts[1],
    `demo sent the two seed prompts (${demoIds.join(', ')})`);
  for (const c of demo) {
    check(c.state === 'done' && c.model === 'static' && c.completion.length > 0,
      `demo card ${c.id}: static rid ${c.rid}, ${c.finish}, ${c.completion.length} characters`);
  }
  const sspans = await stepSpans(A, 'static', [demo[0].rid, demo[1].rid]);
  const s0 = sspans[demo[0].rid], s1 = sspans[demo[1].rid];
  log(`     static: rid ${demo[0].rid} in steps ${s0.first}..${s0.last}; rid ${demo[1].rid} in steps ${s1.first}..${s1.last}`);
  // Static never lets a request join a running batch: the second one either waited for the first
  // one's batch to drain, or (a loaded machine: the first was not admitted within the 50 ms) both
  // were taken together as one batch from the first step.
  const together = s0.first === s1.first;
  check(s0.n > 0 && s1.n > 0 && (s1.first > s0.last || together),
    together
      ? `static: rids ${demo[0].rid} and ${demo[1].rid} were admitted together as one batch (step ${s0.first}); neither joined a running batch`
      : `static: rid ${demo[1].rid} started (step ${s1.first}) only after rid ${demo[0].rid}'s batch drained (step ${s0.last})`);
  const waited = await A.evaluate(([r0]) => window.inflightSteps.static.filter((s) => s.seqs.some((q) => q[0] === r0) && s.waiting > 0).length, [demo[0].rid]);
  log(`     static: ${waited} of rid ${demo[0].rid}'s ${s0.n} steps had a request waiting` +
      (waited ? ' (the demo\'s second one, admitted only when the batch drained)'
        : ' (the second request arrived after the first had finished)'));
  await screenshot(A, 'static-demo.png');

  // -------- cancel: a request waiting behind a static batch is cancelled from its card
  await A.fill('#max-tokens', '200');
  await A.fill('#prompt', 'A long one');
  await A.click('#send');
  const idLong = (await cardIds(A))[0];
  await A.fill('#prompt', 'Cancel me');
  await A.click('#send');
  const idCancel = (await cardIds(A))[0];
  // (the button is gone if the request finished first: then don't wait the default 30 s for it)
  await A.click(`.card[data-id="${idCancel}"] .card-cancel`, { timeout: 3000 }).catch(() => {});
  const cCancel = await waitFinal(A, idCancel);
  await waitFinal(A, idLong);
  check(cCancel.state === 'done' && (cCancel.finish === 'cancelled' || cCancel.finish === 'length'),
    `cancel button: card ${idCancel} ended ${cCancel.finish}` + (cCancel.finish === 'length' ? ' (it finished before the cancel arrived)' : ''));

  // -------- a phone
  const phone = await openPage(browser, base, 'phone', {
    viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
  });
  await setPolicy(phone, 'iterative');
  check(!(await phone.$eval('#params', (d) => d.open)), 'phone: the sampling parameters start collapsed');
  await openParams(phone);
  await phone.fill('#max-tokens', '40');
  await phone.click('#params > summary');   // collapse again: the screenshot shows the batches first
  const pk = new Set(await cardIds(phone));
  await phone.click('#demo');
  await phone.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, pk.size + 2, { timeout: 10000 });
  for (const id of (await cardIds(phone)).filter((x) => !pk.has(x))) {
    const c = await waitFinal(phone, id);
    check(c.state === 'done', `phone: demo card ${id} done (${c.completion.length} characters)`);
  }
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `phone: no horizontal scrolling (overflow ${overflow}px)`);
  await screenshot(phone, 'phone.png');

  // -------- dark mode
  const dark = await openPage(browser, base, 'dark', { colorScheme: 'dark' });
  const bg = await dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const rgb = (bg.match(/\d+/g) || []).map(Number);
  check(rgb.length >= 3 && rgb[0] + rgb[1] + rgb[2] < 150, `dark mode: page background ${bg}`);
  await setPolicy(dark, 'iterative');
  await dark.fill('#max-tokens', '64');
  await dark.fill('#prompt', 'The best thing about batching is');
  await dark.click('#send');
  const idDark = (await cardIds(dark))[0];
  await setPolicy(dark, 'static');
  const dk = new Set(await cardIds(dark));
  await dark.click('#demo');
  await dark.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, dk.size + 2, { timeout: 10000 });
  for (const id of [idDark, ...(await cardIds(dark)).filter((x) => !dk.has(x))]) {
    const c = await waitFinal(dark, id);
    check(c.state === 'done', `dark: card ${id} (${c.model}) done`);
  }
  await screenshot(dark, 'dark.png');

  // -------- the history pages: each context sees its own requests, and only those
  await B.fill('#max-tokens', '24');
  await B.fill('#prompt', 'Page B keeps this prompt to itself');
  await B.click('#send');
  const idPrivate = (await cardIds(B))[0];
  check((await waitFinal(B, idPrivate)).state === 'done', `page B: card ${idPrivate} done (a prompt only B sent)`);
  const link = await A.$eval('#history-link', (a) => ({ href: a.href, visible: !!a.offsetParent }));
  check(link.visible && link.href === base + '/history.html', `the chat page links to ${link.href}`);
  const ctxPrompts = {};
  for (const [n, p] of [['A', A], ['B', B], ['phone', phone], ['dark', dark]]) {
    ctxPrompts[n] = new Set((await cardsOf(p)).map((c) => c.prompt));
  }
  const foreignTo = (n) => {
    const out = new Set();
    for (const [m, set] of Object.entries(ctxPrompts)) if (m !== n) for (const p of set) if (!ctxPrompts[n].has(p)) out.add(p);
    return [...out];
  };
  const hA = await checkHistory(A, base, srv.port, 'A', foreignTo('A'));
  await screenshot(hA.page, 'history.png');
  const hB = await checkHistory(B, base, srv.port, 'B', foreignTo('B'));
  check(hA.key !== hB.key && hB.api.some((r) => r.prompt === 'Page B keeps this prompt to itself') &&
    hB.api.some((r) => r.error_code === 'prompt_too_long'),
  'B history: its own prompt and its refused request (prompt_too_long) are there, under another key than A\'s');
  const refused = await hB.page.$$eval('#rows tr[data-kind="error"]', (trs) => trs.map((tr) => tr.dataset.errorCode));
  check(refused.includes('prompt_too_long'), `B history: the refused request is an error row (${refused.join(', ')})`);
  const hPhone = await checkHistory(phone, base, srv.port, 'phone', foreignTo('phone'));
  const pover = await hPhone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(pover <= 0, `phone history: no horizontal scrolling (overflow ${pover}px)`);
  await screenshot(hPhone.page, 'history-phone.png');
  const hDark = await checkHistory(dark, base, srv.port, 'dark', foreignTo('dark'));
  await screenshot(hDark.page, 'history-dark.png');

  // paging: two at a time with "Load older" gives the same list as the API
  const paged = hA.page;
  await loadHistory(paged, base, 2, '?limit=2');
  for (let i = 0; i < 50 && await paged.isVisible('#load-older'); i++) {
    const n = (await historyState(paged)).rows.length;
    await paged.click('#load-older');
    await paged.waitForFunction((k) => document.querySelectorAll('#rows tr[data-id]').length > k, n, { timeout: 10000 });
  }
  const all = (await historyState(paged)).rows.map((r) => r.id);
  check(sameList(all, hA.api.map((r) => r.id)), `A history, 2 a page: "Load older" ${Math.ceil(all.length / 2) - 1} times lists all ${all.length} requests in order`);

  await checkConversation(browser, base, srv.port);

  await checkApiKeyPage(browser, model);

  // -------- no console errors, page errors, CSP violations or foreign requests anywhere
  for (const rec of pages) {
    const csp = await rec.page.evaluate(() => window.__cspViolations).catch(() => []);
    for (const v of csp) rec.problems.push('CSP violation: ' + v);
    check(rec.problems.length === 0, `page ${rec.name}: no console errors, page errors or CSP violations` +
      (rec.problems.length ? ':\n  ' + rec.problems.join('\n  ') : ''));
  }
}

// ------------------------------------------------------------------ conversations

// The first turn is long enough (~40 tokens with the template) to fill two 16-token KV blocks, so
// the next turns find it in the prefix cache.
const TURNS = [
  'The prefix cache keeps the key and value blocks of every prompt it has computed, so that a ' +
    'conversation which comes back for another turn does not have to read its beginning again.',
  'Tell me more about the blocks that it keeps.',
  'And what happens to them when the pool is full?',
];
const KV_BLOCK = 16;

function parseFrame(payload) {
  try { return JSON.parse(typeof payload === 'string' ? payload : payload.toString()); } catch (e) { return null; }
}

async function threadOf(page, id) {
  return page.$eval(`.card[data-id="${id}"]`, (c) => ({
    id: c.dataset.id, conv: c.dataset.conversation, state: c.dataset.state, mode: c.dataset.mode,
    turns: Number(c.dataset.turns), restored: c.dataset.restored === '1',
    formOpen: !c.querySelector('.turn-form').hidden, canContinue: !c.querySelector('.card-continue').hidden,
    list: Array.from(c.querySelectorAll('.thread > .turn'), (t) => ({
      n: Number(t.dataset.turn), kind: t.dataset.kind, state: t.dataset.state, req: t.dataset.req,
      user: t.querySelector('.prompt').textContent, reply: t.querySelector('.completion').textContent,
      usage: t.querySelector('.turn-usage').textContent,
      cached: t.dataset.cached == null ? null : Number(t.dataset.cached),
      prompt: t.dataset.promptTokens == null ? null : Number(t.dataset.promptTokens),
    })),
  }));
}

// Waits for the card's turn n to end (done or error) and returns the card's thread.
async function waitTurn(page, id, n) {
  await page.waitForFunction(([cid, k]) => {
    const t = document.querySelector(`.card[data-id="${cid}"] .thread > .turn[data-turn="${k}"]`);
    return t && (t.dataset.state === 'done' || t.dataset.state === 'error');
  }, [id, n], { timeout: 60000 });
  return threadOf(page, id);
}

async function checkConversation(browser, base, port) {
  const sent = [], got = [];
  const page = await openPage(browser, base, 'conversation', {}, '', (p) => p.on('websocket', (ws) => {
    ws.on('framesent', (f) => {
      const m = parseFrame(f.payload);
      if (m && m.type === 'generate') sent.push(m);
    });
    ws.on('framereceived', (f) => {
      const m = parseFrame(f.payload);
      if (m && (m.type === 'started' || m.type === 'done' || m.type === 'error')) got.push(m);
    });
  }));
  const frame = (type, id) => got.find((m) => m.type === type && m.id === id);
  await setPolicy(page, 'iterative');
  await page.click('label[for="mode-chat"]');
  check(await page.isChecked('#mode-chat'), 'conversation: the composer is in Chat mode');
  await page.fill('#max-tokens', '16');
  await page.check('#ignore-eos');

  // -------- send, continue, continue
  await page.fill('#prompt', TURNS[0]);
  await page.click('#send');
  const id = (await cardIds(page))[0];
  let th = await waitTurn(page, id, 1);
  check(th.list[0].state === 'done' && th.canContinue, `conversation: card ${id} turn 1 done, Continue offered`);
  for (let n = 2; n <= 3; n++) {
    await page.click(`.card[data-id="${id}"] .card-continue`);
    const focused = await page.evaluate((cid) => document.activeElement === document.querySelector(`.card[data-id="${cid}"] .turn-input`), id);
    check(focused, `conversation: Continue opened card ${id}'s input for turn ${n}, focused`);
    await page.fill(`.card[data-id="${id}"] .turn-input`, TURNS[n - 1]);
    if (n === 2) await page.press(`.card[data-id="${id}"] .turn-input`, 'Enter');
    else await page.click(`.card[data-id="${id}"] .turn-send`);
    th = await waitTurn(page, id, n);
    check(th.list[n - 1].state === 'done', `conversation: turn ${n} done (${th.list[n - 1].reply.length} characters)`);
  }
  check(th.turns === 3 && th.list.length === 3 && th.list.every((t, i) => t.n === i + 1 && t.kind === 'chat' && t.user === TURNS[i]),
    `conversation: the thread shows 3 turns, each its user text and reply (${th.list.map((t) => t.req).join(', ')})`);
  check(/^[A-Za-z0-9_-]{1,64}$/.test(th.conv), `conversation: id ${th.conv} (the server's charset)`);

  // -------- each generate carried every earlier turn, with the same conversation id
  check(sent.length === 3, `conversation: 3 generate frames sent (${sent.length})`);
  for (const [k, m] of sent.entries()) {
    const want = [];
    for (let i = 0; i < k; i++) want.push({ role: 'user', content: th.list[i].user }, { role: 'assistant', content: th.list[i].reply });
    want.push({ role: 'user', content: TURNS[k] });
    check(m.prompt === undefined && JSON.stringify(m.messages) === JSON.stringify(want) &&
      m.conversation === th.conv && m.id === th.list[k].req && m.model === 'iterative',
    `conversation: turn ${k + 1}'s generate (${m.id}) has messages = ${want.length} (the earlier turns as shown, replies as received, then the new one), conversation ${m.conversation}`);
  }

  // -------- cached tokens: started, done, the turn's usage line, the step frames, the batch view
  const usage = [];
  for (const t of th.list) {
    const st = frame('started', t.req), dn = frame('done', t.req);
    check(st && dn && dn.usage && typeof dn.usage.cached_tokens === 'number' && st.cached_tokens === dn.usage.cached_tokens,
      `conversation: turn ${t.n}: started and done say ${dn && dn.usage && dn.usage.cached_tokens} of ${dn && dn.usage && dn.usage.prompt_tokens} prompt tokens cached`);
    const u = dn.usage;
    usage.push({ rid: st.rid, prompt: u.prompt_tokens, cached: u.cached_tokens });
    check(t.cached === u.cached_tokens && t.prompt === u.prompt_tokens &&
      t.usage.startsWith(`${u.prompt_tokens} prompt tokens, ${u.cached_tokens} cached`),
    `conversation: turn ${t.n} shows "${t.usage}"`);
  }
  for (const k of [1, 2]) {
    const u = usage[k];
    check(u.cached > 0 && u.cached % KV_BLOCK === 0 && u.cached < u.prompt,
      `conversation: turn ${k + 1} took ${u.cached} of its ${u.prompt} prompt tokens from the prefix cache (whole ${KV_BLOCK}-token blocks, the last token computed)`);
  }
  log(`     turn 1: ${usage[0].cached} of ${usage[0].prompt} cached (a prompt nobody sent before)`);
  const runs = await page.evaluate((rids) => {
    const out = {};
    for (const r of rids) out[r] = [];
    for (const s of window.inflightSteps.iterative) {
      for (const q of s.seqs) if (out[q[0]] && q.length > 2) out[q[0]].push({ step: s.step, seq: q });
    }
    return out;
  }, usage.map((u) => u.rid));
  for (const k of [1, 2]) {
    const r = runs[usage[k].rid];
    check(r.length === 1 && r[0].seq[1] === 1 && r[0].seq[2] === usage[k].cached,
      `conversation: turn ${k + 1} (rid ${usage[k].rid}): one step frame entry ${JSON.stringify(r.map((x) => x.seq))} in step ${r[0] && r[0].step}, its cached prefix`);
  }
  // hover once the view has drawn the last step (the batcher is idle: the columns stay put)
  const last = runs[usage[2].rid][0];
  await page.waitForFunction(([st, rid]) => {
    const all = window.inflightSteps.iterative, v = window.inflight.views.iterative;
    return Number(v.fig.dataset.lastStep) === all[all.length - 1].step && v.locate(st, rid);
  }, [last.step, usage[2].rid], { timeout: 5000 });
  await sleep(100);
  const at = await page.evaluate(([st, rid]) => {
    const v = window.inflight.views.iterative, p = v.locate(st, rid), r = v.canvas.getBoundingClientRect();
    return { x: r.left + p.x, y: r.top + p.y, cells: Number(v.fig.dataset.cachedCells) };
  }, [last.step, usage[2].rid]);
  await page.mouse.move(at.x, at.y);
  const tip = await page.waitForFunction(() => {
    const t = document.querySelector('#batch-iterative .tip');
    return !t.hidden && t.textContent;
  }, null, { timeout: 3000 }).then((j) => j.jsonValue());
  check(at.cells >= 2 && tip.includes(`${usage[2].cached} prompt tokens from the prefix cache`),
    `conversation: the batch view marked ${at.cells} cached cells; hovering turn 3's says "${tip.split('\n').slice(-2).join(' / ')}"`);
  await page.mouse.move(0, 0);
  await screenshot(page, 'conversation.png');

  // -------- a reload restores the thread (not the live parts)
  await page.reload();
  await page.waitForSelector('body[data-conn="open"]', { timeout: 20000 });
  const rid = await page.$eval(`.card[data-conversation="${th.conv}"]`, (c) => c.dataset.id);
  const back = await threadOf(page, rid);
  check(back.restored && back.state === 'done' && back.turns === 3 && back.canContinue &&
    back.list.every((t, i) => t.user === th.list[i].user && t.reply === th.list[i].reply && t.usage === th.list[i].usage),
  `reload: card ${rid} restored conversation ${th.conv} with its 3 turns, their replies and usage`);

  // -------- New chat: a fresh card, a fresh conversation
  const before = (await cardIds(page)).length;
  await page.click('#new-chat');
  const nid = (await cardIds(page))[0];
  const fresh = await threadOf(page, nid);
  check(fresh.state === 'new' && fresh.turns === 0 && fresh.formOpen && fresh.conv !== th.conv && (await cardIds(page)).length === before + 1,
    `New chat: card ${nid}, no turns, its input open, conversation ${fresh.conv}`);
  await page.fill(`.card[data-id="${nid}"] .turn-input`, 'A fresh start.');
  await page.click(`.card[data-id="${nid}"] .turn-send`);
  const one = await waitTurn(page, nid, 1);
  const m4 = sent[sent.length - 1];
  check(one.list[0].state === 'done' && sent.length === 4 && m4.conversation === fresh.conv &&
    JSON.stringify(m4.messages) === JSON.stringify([{ role: 'user', content: 'A fresh start.' }]),
  `New chat: its first turn went alone (messages of 1) under conversation ${m4.conversation}`);
  check((await threadOf(page, rid)).turns === 3, `New chat: card ${rid} still holds its 3 turns`);

  // -------- the history page: the three requests as one thread
  const key = await page.evaluate(() => localStorage.getItem('inflight.userKey'));
  const hp = watchPage(await page.context().newPage(), base, 'conversation history');
  await loadHistory(hp, base, 4);
  const api = await httpGet(port, `/api/history?user=${key}&conversation=${th.conv}`);
  check(api.status === 200, `GET /api/history?conversation=${th.conv}: 200`);
  const apiReqs = JSON.parse(api.body).requests;
  check(apiReqs.length === 3 && sameList(apiReqs.map((r) => r.client_id).reverse(), th.list.map((t) => t.req)) &&
    apiReqs.every((r) => r.conversation === th.conv),
  `GET /api/history?conversation=: only its 3 requests (${apiReqs.map((r) => r.client_id).join(', ')}), newest first`);
  const shown = async () => hp.evaluate((conv) => ({
    heads: Array.from(document.querySelectorAll('#rows tr.thread-head'), (tr) => ({ conv: tr.dataset.conversation, turns: Number(tr.dataset.turns) })),
    rows: Array.from(document.querySelectorAll(`#rows tr[data-id][data-conversation="${conv}"]`), (tr) => ({
      id: Number(tr.dataset.id), turn: Number(tr.dataset.turn), cached: tr.dataset.cached == null ? null : Number(tr.dataset.cached),
      prompt: tr.querySelector('.cell-prompt').textContent, prev: tr.previousElementSibling && tr.previousElementSibling.className,
    })),
    all: document.querySelectorAll('#rows tr[data-id]').length,
  }), th.conv);
  const h = await shown();
  const ids = apiReqs.map((r) => r.id).reverse();
  check(h.heads.length === 1 && h.heads[0].conv === th.conv && h.heads[0].turns === 3,
    `history: one thread head, conversation ${th.conv}, 3 turns (the new chat's lone request is a plain row)`);
  check(h.rows.length === 3 && sameList(h.rows.map((r) => r.id), ids) && sameList(h.rows.map((r) => r.turn), [1, 2, 3]) &&
    h.rows[0].prev === 'thread-head' && h.rows.every((r, i) => r.prompt === TURNS[i] && r.cached === usage[i].cached),
  `history: the thread's rows are requests ${ids.join(', ')} in turn order, each its user turn and cached tokens (${h.rows.map((r) => r.cached).join(', ')})`);
  await screenshot(hp, 'conversation-history.png');
  await hp.goto(base + '/history.html?conversation=' + th.conv);
  await hp.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 10000 });
  const only = await shown();
  check(only.all === 3 && sameList(only.rows.map((r) => r.id), ids), `history.html?conversation=${th.conv}: only its 3 requests`);
}

// A server started with --api-key: the page opened without the key says it needs one (the server
// closed /ws with 1008); opened as /?api_key=KEY it connects and a prompt streams to the end.
async function checkApiKeyPage(browser, model) {
  const KEY = 'browser+key/0123&x';
  const mainServer = cleanup.server;
  const srv = await startServer(model, path.join(cleanup.tmp, 'keyed.db'), ['--api-key', KEY], 'server-keyed.log');
  cleanup.server = mainServer;
  try {
    await waitReady(srv);
    const base = `http://127.0.0.1:${srv.port}`;
    const ctx = await browser.newContext();
    const bare = await ctx.newPage();
    await bare.goto(base + '/');
    await bare.waitForFunction(() => !document.getElementById('banner').hidden &&
      /needs an API key/.test(document.getElementById('banner-text').textContent), null, { timeout: 20000 });
    const said = await bare.$eval('#banner-text', (e) => e.textContent);
    check(/api_key=KEY/.test(said) && (await bare.$eval('body', (b) => b.dataset.conn)) !== 'open',
      `keyed server, page without the key: not connected, it says "${said}"`);
    await ctx.close();
    const page = await openPage(browser, base, 'keyed', {}, '?api_key=' + encodeURIComponent(KEY));
    await setPolicy(page, 'iterative');
    await page.fill('#max-tokens', '12');
    await page.fill('#prompt', 'A key in the address');
    await page.click('#send');
    const id = (await cardIds(page))[0];
    const c = await waitFinal(page, id);
    check(c.state === 'done' && c.finish === 'length', `keyed server, page as /?api_key=...: card ${id} ${c.state} (${c.finish}, ${c.tokens})`);
    await screenshot(page, 'api-key.png');
  } finally {
    await stopServer(srv);
  }
}

async function teardown() {
  if (cleanup.browser) await cleanup.browser.close().catch(() => {});
  cleanup.browser = null;
  if (cleanup.server) await stopServer(cleanup.server).catch(() => {});
  cleanup.server = null;
  if (cleanup.tmp) fs.rmSync(cleanup.tmp, { recursive: true, force: true });
  cleanup.tmp = null;
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    log(`interrupted (${sig}): cleaning up`);
    teardown().finally(() => process.exit(1));
  });
}

const watchdog = setTimeout(() => {
  process.stderr.write('FAIL: the browser test took more than 5 minutes\n');
  teardown().finally(() => process.exit(1));
}, 300000);

main().then(async () => {
  await teardown();
  clearTimeout(watchdog);
  log('PASS: browser test');
  process.exit(0);
}, async (e) => {
  await teardown();
  clearTimeout(watchdog);
  process.stderr.write(`FAIL: ${e && e.message ? e.message : e}\n`);
  for (const rec of pages) {
    if (rec.problems.length) process.stderr.write(`page ${rec.name} reported:\n  ${rec.problems.join('\n  ')}\n`);
  }
  if (lastServer && lastServer.output) {
    process.stderr.write(`the server's last output (all of it in ${path.join(ARTIFACTS, 'server.log')}):\n` +
      lastServer.output.slice(-3000) + '\n');
  }
  process.exit(1);
});
