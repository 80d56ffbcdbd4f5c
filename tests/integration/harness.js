'use strict';
// harness.js: the test-runner part of the integration tests' helpers (re-exported by lib.js):
// assertions (fail, check, eq, cannotCheck; requireOpenAI), logging and waiting (log, sleep, until, withTimeout),
// the cleanup registry (onCleanup, tmpDir, the servers to kill) and main(), which runs a test body
// and tears down everything it started on every way out: normal end, thrown error, unhandled
// rejection, SIGINT/SIGTERM, the test's own deadline.

const fs = require('fs');
const os = require('os');
const path = require('path');

const REPO = path.resolve(__dirname, '..', '..');
const QUICK = !!process.env.IFL_TEST_QUICK;
// CI=true (as CI services set it): a test that cannot make a check it was written to make fails
// instead of skipping it (cannotCheck below).
const IN_CI = /^(1|true|yes)$/i.test(process.env.CI || '');

// ---- assertions and logging ----------------------------------------------------------------------

class TestFailure extends Error {}

function fail(msg) {
  throw new TestFailure(msg);
}

function check(cond, msg) {
  if (!cond) fail(typeof msg === 'function' ? msg() : msg);
}

function eq(actual, expected, what) {
  if (actual !== expected)
    fail(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

// A check this test cannot make here (a tool is missing, no root for a mount, ...). Under CI=true
// that is a failure, with the reason; elsewhere a NOTE, and with exit: true (nothing left to check)
// the test ends as skipped (exit 77, CTest's SKIP_RETURN_CODE).
function cannotCheck(why, { exit = false } = {}) {
  if (IN_CI) fail(`CI=true: ${why}; under CI a test must not skip what it checks`);
  if (exit) {
    console.log(`SKIP: ${why} (under CI=true this fails)`);
    process.exit(77);
  }
  log(`NOTE: not checked here: ${why} (under CI=true this fails)`);
}

// The official `openai` npm package's client class, for the tests that check the server against its
// own HTTP and SSE parsing; without the package they have nothing to check: skipped (exit 77), a
// failure under CI=true (cannotCheck).
function requireOpenAI() {
  try {
    const m = require(path.join(REPO, 'node_modules', 'openai'));
    return m.default || m.OpenAI || m;
  } catch (e) {
    return cannotCheck(`the openai npm package is not installed (scripts/setup.sh installs it): ${e.message}`,
      { exit: true });
  }
}

const T0 = Date.now();
function log(...args) {
  const t = ((Date.now() - T0) / 1000).toFixed(2).padStart(7);
  console.log(`[${t}s]`, ...args);
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// Polls fn (sync or async) until it returns a truthy value; returns it, or throws after timeoutMs.
async function until(fn, timeoutMs, what, intervalMs = 20) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    promise,
    new Promise((_, rej) => {
      t = setTimeout(() => rej(new TestFailure(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}

// ---- cleanup registry ----------------------------------------------------------------------------

const cleanups = []; // synchronous functions, run last-in first-out
// servers that server.js started and that still run: SIGKILLed on the way out, their stderr tail
// printed when a test fails
const liveServers = new Set();

function onCleanup(fn) {
  cleanups.push(fn);
}

let cleanedUp = false;
function cleanupSync() {
  if (cleanedUp) return;
  cleanedUp = true;
  for (const s of liveServers) {
    try {
      s.proc.kill('SIGKILL');
    } catch (e) {
      /* already gone */
    }
  }
  while (cleanups.length) {
    const fn = cleanups.pop();
    try {
      fn();
    } catch (e) {
      console.error('cleanup:', e.message);
    }
  }
}

process.on('exit', cleanupSync);

function tmpDir(tag) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), `ifl-it-${tag}-`));
  onCleanup(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

// The last n characters of s (for server logs in failure messages).
function tail(s, n) {
  return s.length > n ? '...' + s.slice(-n) : s;
}

// ---- main wrapper --------------------------------------------------------------------------------

function now() {
  return Number(process.hrtime.bigint()) / 1e6;
}

// Runs the async test body; exit 0 on success, 1 on failure, always cleaning up. deadlineS bounds
// the whole test (it fails, and cleans up, before CTest's own timeout would kill it).
function main(name, body, { deadlineS } = {}) {
  const limit = Number(process.env.IFL_TEST_TIMEOUT_S) || deadlineS || 780;
  let finished = false;
  const finish = (code, msg) => {
    if (finished) return;
    finished = true;
    if (msg) console.error(msg);
    for (const s of liveServers) {
      if (s.stderr && code !== 0)
        console.error(`-- server (port ${s.port}) stderr tail --\n${tail(s.stderr, 3000)}`);
    }
    cleanupSync();
    console.log(code === 0 ? `PASS ${name}` : `FAIL ${name}`);
    process.exit(code);
  };
  const timer = setTimeout(() => finish(1, `${name}: the test ran past its ${limit} s limit`), limit * 1000);
  timer.unref();
  process.on('uncaughtException', (e) => finish(1, `${name}: uncaught exception: ${e.stack || e}`));
  process.on('unhandledRejection', (e) => finish(1, `${name}: unhandled rejection: ${(e && e.stack) || e}`));
  process.on('SIGINT', () => finish(1, `${name}: interrupted (SIGINT)`));
  process.on('SIGTERM', () => finish(1, `${name}: terminated (SIGTERM)`));
  Promise.resolve()
    .then(body)
    .then(() => finish(0))
    .catch((e) => finish(1, `${name}: ${e instanceof TestFailure ? e.message : (e && e.stack) || e}`));
}

function percentile(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

module.exports = {
  REPO, QUICK, IN_CI, TestFailure, fail, check, eq, cannotCheck, requireOpenAI, log, sleep, until, withTimeout,
  onCleanup, tmpDir, liveServers, main, now, percentile, tail,
};
