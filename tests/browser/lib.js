// lib.js: the harness the browser tests' checks share (tests/browser/chat.test.js and
// long_chat.test.js are entries that CTest runs; conversation.js and history.js hold two of
// chat.test.js's checks): logging and check(), the entry's command line, the `inflight serve`
// process (start on a new small model, readiness, stop), the run of an entry's main (teardown,
// signals, watchdog, the PASS or FAIL report), pages opened in Chromium and watched for console
// errors, page errors, failed responses and requests to other origins, and helpers that
// read the chat and history pages. One instance of the shared state (cleanup, the pages, the last
// server) for every file: they all require this module.
'use strict';

const fs = require('fs');
const path = require('path');
const http = require('http');
const os = require('os');
const { spawn, spawnSync } = require('child_process');

const REPO = path.resolve(__dirname, '..', '..');
const T0 = Date.now();

function log(msg) {
  process.stdout.write(`[${((Date.now() - T0) / 1000).toFixed(1).padStart(5)} s] ${msg}\n`);
}
function ok(msg) { log('ok   ' + msg); }
function check(cond, msg) {
  if (!cond) throw new Error(msg);
  ok(msg);
}

// The inflight binary and the artifacts folder, from the entry's command line (configure()).
let BIN = null;
let ARTIFACTS = null;
function configure(opts) {
  BIN = opts.bin;
  ARTIFACTS = opts.artifacts;
}

// The entry's command line, INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR (else the usage and exit
// status 1), as absolute paths {bin, vocab, artifacts}; the harness is configured with them.
function parseArgs(script) {
  const argv = process.argv.slice(2);
  if (argv.length !== 3) {
    process.stderr.write(`usage: node tests/browser/${script} INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR\n`);
    process.exit(1);
  }
  const [bin, vocab, artifacts] = argv.map((a) => path.resolve(a));
  configure({ bin, artifacts });
  return { bin, vocab, artifacts };
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

// A small random model (2 layers, 4 heads, 64 wide, seed 3) of an nCtx-token context in a new
// temporary folder (cleanup.tmp, named from prefix), and the server on it, logging to a SQLite file
// there, ready. Returns { srv, base, model } (the model's folder).
async function startOnNewModel(vocab, nCtx, prefix) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  cleanup.tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const model = path.join(cleanup.tmp, 'model');
  const mk = spawnSync(BIN, ['make-model', '--out', model, '--n-layer', '2', '--n-head', '4', '--n-embd', '64',
    '--n-ctx', String(nCtx), '--seed', '3', '--vocab', vocab], { encoding: 'utf8', timeout: 120000 });
  if (mk.error) throw new Error(`cannot run ${BIN} make-model: ${mk.error.message}`);
  if (mk.status !== 0) throw new Error(`make-model failed (status ${mk.status}): ${mk.stderr}`);
  ok('make-model: ' + (mk.stderr || mk.stdout).trim().split('\n').pop());
  const srv = await startServer(model, path.join(cleanup.tmp, 'log.db'));
  await waitReady(srv);
  return { srv, base: `http://127.0.0.1:${srv.port}`, model };
}

// ------------------------------------------------------------------ the run

// Closes the browser, stops the server and removes the temporary folder (each if there is one).
async function teardown() {
  if (cleanup.browser) await cleanup.browser.close().catch(() => {});
  cleanup.browser = null;
  if (cleanup.server) await stopServer(cleanup.server).catch(() => {});
  cleanup.server = null;
  if (cleanup.tmp) fs.rmSync(cleanup.tmp, { recursive: true, force: true });
  cleanup.tmp = null;
}

// Runs an entry's main() to its exit: the teardown after it, on SIGINT or SIGTERM, and when it
// runs past `minutes` (the FAIL line names it as `what`); then "PASS: <passed>" and exit status 0,
// or the error, each page's problems and the server's last output and exit status 1.
function runMain(main, { what, minutes, passed }) {
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      log(`interrupted (${sig}): cleaning up`);
      teardown().finally(() => process.exit(1));
    });
  }
  const watchdog = setTimeout(() => {
    process.stderr.write(`FAIL: ${what} took more than ${minutes} minutes\n`);
    teardown().finally(() => process.exit(1));
  }, minutes * 60000);
  main().then(async () => {
    await teardown();
    clearTimeout(watchdog);
    log(`PASS: ${passed}`);
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
}

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

module.exports = {
  REPO, T0, log, ok, check, configure, parseArgs, cleanup, startServer, httpGet, waitReady, stopServer, sleep,
  startOnNewModel, teardown, runMain,
  pages, openPage, watchPage, openParams, setPolicy, cardInfo, waitFinal, cardIds, clickAt, stepSpans, screenshot,
  sameList, cardsOf, apiHistory, historyState, drawn, loadHistory,
  // the server started last (a getter: startServer replaces it), for its output when the test fails
  get lastServer() { return lastServer; },
};
