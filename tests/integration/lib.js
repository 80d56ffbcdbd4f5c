'use strict';
// Shared helpers of the integration tests (tests/integration/*.test.js): each test is a standalone
// program `node <test> <inflight-binary> <vocab-dir>` that starts the real `inflight serve` on a
// free loopback port with a generated model and drives it with real WebSocket clients.
//
// Everything a test starts (servers, temp dirs) is registered here and torn down on every way out:
// normal end, thrown error, unhandled rejection, SIGINT/SIGTERM, the test's own deadline. A watchdog
// shell kills the server if the node process itself is killed (SIGKILL from a CTest timeout).

const { spawn, execFile, spawnSync } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');

let WebSocket;
try {
  WebSocket = require('ws');
} catch (e) {
  WebSocket = require(path.join(__dirname, '..', '..', 'node_modules', 'ws'));
}

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

// ---- arguments, model ----------------------------------------------------------------------------

function parseArgs() {
  const [bin, vocab] = process.argv.slice(2);
  if (!bin || !vocab) {
    console.error(`usage: node ${path.basename(process.argv[1])} <inflight-binary> <vocab-dir>`);
    process.exit(2);
  }
  const b = path.resolve(bin);
  const v = path.resolve(vocab);
  if (!fs.existsSync(b)) {
    console.error(`inflight binary not found: ${b}`);
    process.exit(1);
  }
  if (!fs.existsSync(path.join(v, 'encoder.json')) && !fs.existsSync(path.join(v, 'vocab.json'))) {
    console.error(`no vocabulary (encoder.json or vocab.json) in ${v}`);
    process.exit(1);
  }
  return { bin: b, vocab: v };
}

function childEnv(vocab) {
  return { ...process.env, INFLIGHT_VOCAB_DIR: vocab, OMP_NUM_THREADS: '1' };
}

// Writes a random model (make-model) to a temp dir; extra: e.g. ['--n-layer', '4', ...].
function makeModel(bin, vocab, extra = [], tag = 'model') {
  const dir = tmpDir(tag);
  const args = ['make-model', '--out', dir, '--seed', '3', '--vocab', vocab, ...extra];
  const r = spawnSync(bin, args, { env: childEnv(vocab), encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0)
    fail(`make-model ${args.join(' ')} failed (status ${r.status}): ${r.stderr || r.error}`);
  return dir;
}

// The reference completion: what `inflight generate` prints (without its final newline).
function generateRef(bin, vocab, modelDir, prompt, n, seed, extra = []) {
  return new Promise((resolve, reject) => {
    const args = ['generate', '--model', modelDir, '--prompt', prompt, '-n', String(n),
      '--seed', String(seed), '--ignore-eos', ...extra];
    execFile(bin, args, { env: childEnv(vocab), encoding: 'buffer', timeout: 300000,
      maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) {
        reject(new TestFailure(`inflight ${args.join(' ')} failed: ${err.message}\n${stderr}`));
        return;
      }
      let s = stdout.toString('utf8');
      if (!s.endsWith('\n')) {
        reject(new TestFailure(`inflight generate output does not end with a newline: ${JSON.stringify(s)}`));
        return;
      }
      resolve(s.slice(0, -1));
    });
  });
}

// ---- the server ----------------------------------------------------------------------------------

// Starts `inflight serve` on a free loopback port; resolves once GET /readyz answers 200.
// opts: startTimeoutMs, readyTimeoutMs, env (the server's environment; default childEnv(vocab)).
async function startServer(bin, vocab, modelDir, extra = [], opts = {}) {
  const args = ['serve', '--model', modelDir, '--vocab', vocab, '--port', '0', '--host', '127.0.0.1',
    ...extra];
  const proc = spawn(bin, args, { env: opts.env || childEnv(vocab), stdio: ['ignore', 'pipe', 'pipe'] });
  const srv = {
    proc, args, stdout: '', stderr: '', port: 0, exited: false, exitCode: null, exitSignal: null,
    expectExit: false,
  };
  liveServers.add(srv);
  // watchdog: kills the server if this node process dies without cleaning up (SIGKILL)
  const wd = spawn('sh', ['-c',
    `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${proc.pid} 2>/dev/null; do sleep 1; done; ` +
    `kill -9 ${proc.pid} 2>/dev/null; exit 0`], { stdio: 'ignore', detached: true });
  wd.unref();
  srv.watchdog = wd;
  onCleanup(() => {
    try {
      process.kill(wd.pid, 'SIGKILL');
    } catch (e) {
      /* gone */
    }
  });
  srv.exitPromise = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      srv.exited = true;
      srv.exitCode = code;
      srv.exitSignal = signal;
      liveServers.delete(srv);
      if (!srv.expectExit)
        console.error(`!! server exited unexpectedly: code ${code} signal ${signal}\n` +
          `-- server stderr (tail) --\n${tail(srv.stderr, 4000)}`);
      resolve({ code, signal });
    });
  });
  proc.stdout.setEncoding('utf8');
  proc.stderr.setEncoding('utf8');
  proc.stdout.on('data', (d) => {
    srv.stdout += d;
  });
  proc.stderr.on('data', (d) => {
    srv.stderr += d;
    if (srv.stderr.length > (8 << 20)) srv.stderr = srv.stderr.slice(-(4 << 20));
  });
  const portLine = await until(() => {
    if (srv.exited)
      fail(`server exited during start (code ${srv.exitCode}):\n${srv.stdout}\n${tail(srv.stderr, 4000)}`);
    return /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(srv.stdout);
  }, opts.startTimeoutMs || 60000, 'the server to print its port');
  srv.port = Number(portLine[1]);
  srv.base = `http://127.0.0.1:${srv.port}`;
  srv.wsUrl = `ws://127.0.0.1:${srv.port}/ws`;
  await until(async () => {
    if (srv.exited) fail(`server exited before ready (code ${srv.exitCode}):\n${tail(srv.stderr, 4000)}`);
    try {
      const r = await httpRequest(srv.port, '/readyz');
      return r.status === 200;
    } catch (e) {
      return false;
    }
  }, opts.readyTimeoutMs || 120000, 'GET /readyz to answer 200', 50);
  srv.assertAlive = () => {
    check(!srv.exited, () => `the server died: code ${srv.exitCode} signal ${srv.exitSignal}\n` +
      `-- server stderr (tail) --\n${tail(srv.stderr, 4000)}`);
  };
  // Stops with SIGTERM; fails unless it exits 0 within timeoutMs (catches crashes and ASan reports
  // at exit).
  srv.stop = async (timeoutMs = 30000) => {
    srv.assertAlive();
    srv.expectExit = true;
    proc.kill('SIGTERM');
    let r;
    try {
      r = await withTimeout(srv.exitPromise, timeoutMs, 'the server to exit after SIGTERM');
    } catch (e) {
      proc.kill('SIGKILL');
      throw e;
    }
    check(r.code === 0, () => `the server exited with code ${r.code} signal ${r.signal} after SIGTERM\n` +
      `-- server stderr (tail) --\n${tail(srv.stderr, 6000)}`);
    return r;
  };
  log(`server up on port ${srv.port}: ${path.basename(bin)} ${args.slice(1).join(' ')}`);
  return srv;
}

function tail(s, n) {
  return s.length > n ? '...' + s.slice(-n) : s;
}

// ---- HTTP ----------------------------------------------------------------------------------------

// HTTP responses received, by server port (metrics.test.js compares with http_requests_total)
const httpAnswered = new Map();

function httpRequest(port, urlPath, { method = 'GET', headers = {}, body = null, timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: urlPath, method, headers, agent: false },
      (res) => {
        httpAnswered.set(port, (httpAnswered.get(port) || 0) + 1);
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers,
          body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`HTTP ${method} ${urlPath}: timeout`)));
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

// Sends `raw` (a whole HTTP request, bytes as given) on a fresh socket; resolves with everything the
// server sent until it closed the connection (or timeoutMs passed).
function rawHttp(port, raw, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(t);
      sock.destroy();
      const buf = Buffer.concat(chunks);
      const text = buf.toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, text, buf });
    };
    const t = setTimeout(finish, timeoutMs);
    sock.on('connect', () => sock.write(raw));
    sock.on('data', (c) => {
      chunks.push(c);
      // one response is enough: stop once the headers and content-length bytes are in
      const text = Buffer.concat(chunks).toString('latin1');
      const he = text.indexOf('\r\n\r\n');
      if (he >= 0) {
        const cl = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, he));
        if (cl && text.length - he - 4 >= Number(cl[1])) finish();
      }
    });
    sock.on('end', finish);
    sock.on('close', finish);
    sock.on('error', (e) => {
      if (chunks.length) finish();
      else if (!done) {
        done = true;
        clearTimeout(t);
        reject(e);
      }
    });
  });
}

// ---- metrics -------------------------------------------------------------------------------------

function parseLabels(s) {
  const labels = {};
  const re = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)/y;
  let i = 0;
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m) return null;
    labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    i = re.lastIndex;
    if (m[3] === '') break;
  }
  return labels;
}

// Lenient sample parser (the strict one lives in metrics.test.js).
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/.exec(line);
    if (!m) fail(`unparseable /metrics line: ${JSON.stringify(line)}`);
    const labels = m[2] !== undefined ? parseLabels(m[2]) : {};
    if (!labels) fail(`bad labels in /metrics line: ${JSON.stringify(line)}`);
    samples.push({ name: m[1], labels, value: parseValue(m[3]) });
  }
  return {
    text,
    samples,
    // value of the one sample named `name` whose labels include all of `labels`; fails if none
    get(name, labels = {}) {
      const hits = samples.filter((s) => s.name === name &&
        Object.entries(labels).every(([k, v]) => s.labels[k] === v));
      if (hits.length !== 1)
        fail(`/metrics: ${hits.length} samples match ${name}${JSON.stringify(labels)}`);
      return hits[0].value;
    },
    maybe(name, labels = {}) {
      const hits = samples.filter((s) => s.name === name &&
        Object.entries(labels).every(([k, v]) => s.labels[k] === v));
      return hits.length === 1 ? hits[0].value : undefined;
    },
  };
}

function parseValue(v) {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  if (v === 'NaN') return NaN;
  return Number(v);
}

async function fetchMetrics(port) {
  const r = await httpRequest(port, '/metrics');
  eq(r.status, 200, 'GET /metrics status');
  return parseMetrics(r.body.toString('utf8'));
}

// The CPU kernel family the server uses, named the same in three places: the start-up line
// ("inflight serve: isa NAME (WHY)"), hello's model.isa (and the end of model.device), and the isa
// label of /metrics' inflight_build_info. want: the family asked for (null: any); WHY must match
// whyRe when given. Returns {isa, why}.
async function checkIsa(srv, hello, metrics, { want = null, whyRe = null } = {}) {
  const line = await until(() => /^inflight serve: isa (\S+) \((.*)\)$/m.exec(srv.stdout), 10000,
    'the start-up line naming the ISA');
  const [, isa, why] = line;
  check(['avx512', 'avx2', 'scalar'].includes(isa), `the start-up line names ISA ${JSON.stringify(isa)}`);
  if (want !== null) eq(isa, want, 'the ISA of the start-up line');
  if (whyRe) check(whyRe.test(why), `the start-up line says why ${JSON.stringify(why)}: not ${whyRe}`);
  eq(hello.model.isa, isa, 'hello model.isa vs the start-up line');
  check(hello.model.device.endsWith(`, isa ${isa}`),
    `hello model.device ${JSON.stringify(hello.model.device)} does not end with ", isa ${isa}"`);
  const bi = metrics.samples.filter((x) => x.name === 'inflight_build_info');
  eq(bi.length, 1, '/metrics inflight_build_info samples');
  eq(bi[0].value, 1, 'inflight_build_info value');
  eq(bi[0].labels.isa, isa, 'inflight_build_info{isa} vs the start-up line');
  eq(`inflight ${bi[0].labels.version}`, hello.server, 'inflight_build_info{version} vs hello.server');
  log(`ISA ${isa} (${why}): the start-up line, hello (model.isa, model.device) and ` +
    `inflight_build_info${JSON.stringify(bi[0].labels)} agree`);
  return { isa, why };
}

// ---- WebSocket client ----------------------------------------------------------------------------

let SEQ = 0; // arrival order across every client of the process

// A `ws` client that records every frame it receives: {seq, t (ms, monotonic), msg}. It also
// records protocol violations it sees on the way (a binary frame, a frame that is not a JSON
// object with a string type).
class Client {
  constructor(ws, name) {
    this.ws = ws;
    this.name = name;
    this.frames = [];
    this.byId = new Map();
    this.violations = [];
    this.waiters = [];
    this.closeInfo = null;
    this.closed = new Promise((resolve) => {
      this._resolveClosed = resolve;
    });
    this.errors = [];
    ws.on('message', (data, isBinary) => this._onMessage(data, isBinary));
    ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString('utf8'), t: now() };
      this._resolveClosed(this.closeInfo);
      this._wake();
    });
    ws.on('error', (e) => this.errors.push(e));
  }

  static connect(port, { name = 'client', path: p = '/ws', timeoutMs = 30000, wsOptions = {} } = {}) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}${p}`, { perMessageDeflate: false,
        maxPayload: 64 << 20, ...wsOptions });
      const c = new Client(ws, name);
      const t = setTimeout(() => {
        ws.terminate();
        reject(new TestFailure(`${name}: no WebSocket connection after ${timeoutMs} ms`));
      }, timeoutMs);
      ws.once('open', () => {
        clearTimeout(t);
        resolve(c);
      });
      ws.once('unexpected-response', (req, res) => {
        clearTimeout(t);
        reject(new TestFailure(`${name}: upgrade refused with HTTP ${res.statusCode}`));
      });
      ws.once('error', (e) => {
        clearTimeout(t);
        reject(new TestFailure(`${name}: WebSocket error: ${e.message}`));
      });
    });
  }

  // connects and waits for `hello`
  static async open(port, opts = {}) {
    const c = await Client.connect(port, opts);
    c.hello = (await c.waitFor((f) => f.msg.type === 'hello', 30000, 'hello')).msg;
    return c;
  }

  _onMessage(data, isBinary) {
    const f = { seq: ++SEQ, t: now(), msg: null, raw: data };
    this.bytesIn = (this.bytesIn || 0) + data.length;
    if (isBinary) this.violations.push(`binary frame from the server (${data.length} bytes)`);
    try {
      f.msg = JSON.parse(data.toString('utf8'));
    } catch (e) {
      this.violations.push(`frame is not JSON: ${data.toString('utf8').slice(0, 200)}`);
      f.msg = { type: '(invalid)' };
    }
    if (!f.msg || typeof f.msg !== 'object' || Array.isArray(f.msg) || typeof f.msg.type !== 'string') {
      this.violations.push(`frame is not an object with a string type: ${data.toString('utf8').slice(0, 200)}`);
      f.msg = { type: '(invalid)' };
    }
    this.frames.push(f);
    const id = f.msg.id;
    if (typeof id === 'string' && ['queued', 'started', 'token', 'done', 'error'].includes(f.msg.type)) {
      if (!this.byId.has(id)) this.byId.set(id, []);
      this.byId.get(id).push(f);
    }
    if (this.onFrame) this.onFrame(f);
    this._wake();
  }

  _wake() {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  // Resolves with the first frame (from index `from` on) that satisfies pred. Fails if the socket
  // closes first or after timeoutMs.
  waitFor(pred, timeoutMs = 30000, what = 'a frame', from = 0) {
    return new Promise((resolve, reject) => {
      let i = from;
      let timer = null;
      const look = () => {
        for (; i < this.frames.length; i++) {
          if (pred(this.frames[i])) {
            if (timer) clearTimeout(timer);
            resolve(this.frames[i]);
            return;
          }
        }
        if (this.closeInfo) {
          if (timer) clearTimeout(timer);
          reject(new TestFailure(`${this.name}: connection closed (${this.closeInfo.code} ` +
            `${JSON.stringify(this.closeInfo.reason)}) while waiting for ${what}`));
          return;
        }
        this.waiters.push(look);
      };
      timer = setTimeout(() => {
        const idx = this.waiters.indexOf(look);
        if (idx >= 0) this.waiters.splice(idx, 1);
        const lastFrames = this.frames.slice(-3).map((f) => JSON.stringify(f.msg)).join('\n  ');
        reject(new TestFailure(`${this.name}: timed out after ${timeoutMs} ms waiting for ${what}; ` +
          `last frames:\n  ${lastFrames}`));
      }, timeoutMs);
      look();
    });
  }

  send(obj) {
    this.ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj));
  }

  framesFor(id) {
    return this.byId.get(id) || [];
  }

  // Waits for the done or error frame of request `id`.
  // (frames from index `from` on: an id may be reused once its request is over)
  async waitEnd(id, timeoutMs = 120000, from = 0) {
    const f = await this.waitFor((fr) => fr.msg.id === id && (fr.msg.type === 'done' || fr.msg.type === 'error'),
      timeoutMs, `the end of request ${id}`, from);
    return f.msg;
  }

  // Sends a generate and waits for its done (or error); returns {done, error, frames, tokens, text}
  // over the frames of this id that arrived after the send.
  async request(params, timeoutMs = 120000) {
    const from = this.frames.length;
    this.send({ type: 'generate', ...params });
    const end = await this.waitEnd(params.id, timeoutMs, from);
    const firstSeq = from < this.frames.length ? this.frames[from].seq : Infinity;
    return summarize(this.framesFor(params.id).filter((f) => f.seq >= firstSeq), end);
  }

  async ping(timeoutMs = 30000) {
    const id = `ping-${crypto.randomBytes(4).toString('hex')}`;
    const from = this.frames.length;
    this.send({ type: 'ping', id });
    return (await this.waitFor((f) => f.msg.type === 'pong' && f.msg.id === id, timeoutMs, 'pong', from)).msg;
  }

  assertNoViolations() {
    check(this.violations.length === 0, () => `${this.name}: protocol violations:\n  ${this.violations.join('\n  ')}`);
  }

  close() {
    try {
      this.ws.close(1000);
    } catch (e) {
      /* closed */
    }
  }

  terminate() {
    this.ws.terminate();
  }
}

function summarize(frames, end) {
  const tokens = frames.filter((f) => f.msg.type === 'token');
  return {
    frames,
    done: end && end.type === 'done' ? end : null,
    error: end && end.type === 'error' ? end : null,
    tokens,
    text: tokens.map((f) => f.msg.text).join(''),
  };
}

// Checks the documented frame order of one request that ran to a done frame: queued (>= 1),
// started, token x N with index 0..N-1, done (last), consistent ids/rids/policy. Returns
// {tokens, text, done, started}. `expect` may hold {model, seed, n, finish}.
function checkRequestFrames(frames, id, expect = {}) {
  const msgs = frames.map((f) => f.msg);
  const where = () => `request ${id}: frames ${msgs.map((m) => m.type + (m.type === 'token' ? m.index : '')).join(',')}`;
  check(msgs.length >= 3, () => `${where()}: too few frames`);
  let i = 0;
  let rid = null;
  while (i < msgs.length && msgs[i].type === 'queued') {
    const q = msgs[i];
    check(Number.isInteger(q.rid) && q.rid >= 0, () => `${where()}: queued without an integer rid`);
    check(rid === null || rid === q.rid, () => `${where()}: queued frames with different rids`);
    rid = q.rid;
    check(Number.isInteger(q.position) && q.position >= 1, () => `${where()}: queued position ${q.position}`);
    if (expect.model) eq(q.model, expect.model, `${id} queued.model`);
    i++;
  }
  check(i >= 1, () => `${where()}: does not start with queued`);
  const started = msgs[i];
  check(started && started.type === 'started', () => `${where()}: no started after queued`);
  eq(started.rid, rid, `${id} started.rid (queued had ${rid})`);
  if (expect.model) eq(started.model, expect.model, `${id} started.model`);
  if (expect.seed !== undefined) eq(started.seed, expect.seed, `${id} started.seed`);
  check(Number.isInteger(started.prompt_tokens) && started.prompt_tokens >= 1, () => `${where()}: started.prompt_tokens`);
  i++;
  const tokens = [];
  while (i < msgs.length && msgs[i].type === 'token') {
    const t = msgs[i];
    eq(t.index, tokens.length, `${id} token index`);
    check(Number.isInteger(t.token) && t.token >= 0, () => `${where()}: token id ${t.token}`);
    check(typeof t.text === 'string', () => `${where()}: token text not a string`);
    tokens.push(t);
    i++;
  }
  const done = msgs[i];
  check(done && done.type === 'done', () => `${where()}: no done after the tokens (got ${done && done.type})`);
  check(i === msgs.length - 1, () => `${where()}: ${msgs.length - 1 - i} frames after done`);
  if (expect.n !== undefined) eq(tokens.length, expect.n, `${id} token frames`);
  if (expect.finish) eq(done.finish_reason, expect.finish, `${id} finish_reason`);
  check(done.usage && done.usage.completion_tokens === tokens.length,
    () => `${where()}: usage.completion_tokens ${done.usage && done.usage.completion_tokens} != ${tokens.length} token frames`);
  eq(done.usage.prompt_tokens, started.prompt_tokens, `${id} usage.prompt_tokens vs started`);
  check(done.timing && typeof done.timing.total_ms === 'number', () => `${where()}: done.timing.total_ms missing`);
  return { tokens, text: tokens.map((t) => t.text).join(''), done, started, rid };
}

// ---- raw WebSocket (hand-built frames on a net.Socket) -------------------------------------------

// Opens a TCP connection, does the upgrade handshake by hand, then parses server frames.
// Options: path, paused (do not read after the handshake), onFrame.
class RawWs {
  static connect(port, { path: p = '/ws', timeoutMs = 30000, paused = false } = {}) {
    return new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1');
      const key = crypto.randomBytes(16).toString('base64');
      let buf = Buffer.alloc(0);
      const t = setTimeout(() => {
        sock.destroy();
        reject(new TestFailure(`raw WebSocket: no handshake answer after ${timeoutMs} ms`));
      }, timeoutMs);
      sock.on('connect', () => {
        sock.write(`GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
      });
      const onData = (c) => {
        buf = Buffer.concat([buf, c]);
        const he = buf.indexOf('\r\n\r\n');
        if (he < 0) return;
        sock.removeListener('data', onData);
        clearTimeout(t);
        const head = buf.subarray(0, he).toString('latin1');
        const rest = buf.subarray(he + 4);
        if (!/^HTTP\/1\.1 101/.test(head)) {
          sock.destroy();
          reject(new TestFailure(`raw WebSocket: upgrade refused: ${head.split('\r\n')[0]}`));
          return;
        }
        const accept = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11')
          .digest('base64');
        const m = /\r\nsec-websocket-accept:\s*(\S+)/i.exec(head);
        if (!m || m[1] !== accept) {
          sock.destroy();
          reject(new TestFailure(`raw WebSocket: bad Sec-WebSocket-Accept in ${JSON.stringify(head)}`));
          return;
        }
        if (paused) sock.pause(); // reads nothing more until resume()
        resolve(new RawWs(sock, rest));
      };
      sock.on('data', onData);
      sock.on('error', (e) => {
        clearTimeout(t);
        reject(e);
      });
    });
  }

  constructor(sock, initial) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.frames = []; // {opcode, fin, payload}
    this.messages = []; // text messages, parsed JSON when possible
    this.closeFrame = null; // {code, reason}
    this.ended = false;
    this.bytesIn = 0;
    this.waiters = [];
    this.error = null;
    this.replyClose = true;
    this.sentClose = false;
    sock.on('data', (c) => this._onData(c));
    sock.on('end', () => {
      this.ended = true;
      this._wake();
    });
    sock.on('close', () => {
      this.ended = true;
      this._wake();
    });
    sock.on('error', (e) => {
      this.error = e;
      this.ended = true;
      this._wake();
    });
    if (initial.length) this._onData(initial);
  }

  _wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  _onData(c) {
    this.bytesIn += c.length;
    this.buf = Buffer.concat([this.buf, c]);
    for (;;) {
      const b = this.buf;
      if (b.length < 2) break;
      const fin = !!(b[0] & 0x80);
      const opcode = b[0] & 0x0f;
      const masked = !!(b[1] & 0x80);
      let len = b[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (b.length < 4) break;
        len = b.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (b.length < 10) break;
        len = Number(b.readBigUInt64BE(2));
        off = 10;
      }
      if (masked) off += 4; // servers must not mask; recorded below
      if (b.length < off + len) break;
      const payload = Buffer.from(b.subarray(off, off + len));
      this.buf = b.subarray(off + len);
      const fr = { opcode, fin, masked, payload };
      this.frames.push(fr);
      if (opcode === 8) {
        this.closeFrame = {
          code: payload.length >= 2 ? payload.readUInt16BE(0) : null,
          reason: payload.length > 2 ? payload.subarray(2).toString('utf8') : '',
        };
        // answer the close handshake as a client does (the server then drops the TCP connection)
        if (this.replyClose && !this.sentClose && !this.sock.destroyed) {
          this.sentClose = true;
          this.sock.write(encodeFrame(8, payload.subarray(0, 2)));
        }
      } else if (opcode === 1) {
        let msg;
        try {
          msg = JSON.parse(payload.toString('utf8'));
        } catch (e) {
          msg = { type: '(invalid)', raw: payload.toString('utf8') };
        }
        this.messages.push(msg);
      }
    }
    this._wake();
  }

  // Writes one frame (client frames are masked). payload: Buffer or string.
  sendFrame(opcode, payload, { fin = true, mask = true } = {}) {
    this.sock.write(encodeFrame(opcode, payload, { fin, mask }));
  }

  sendText(s, opts) {
    this.sendFrame(1, Buffer.from(s, 'utf8'), opts);
  }

  waitFor(pred, timeoutMs, what) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        const i = this.waiters.indexOf(look);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new TestFailure(`raw WebSocket: timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const look = () => {
        const r = pred(this);
        if (r) {
          clearTimeout(t);
          resolve(r);
          return;
        }
        if (this.ended) {
          clearTimeout(t);
          const r2 = pred(this);
          if (r2) resolve(r2);
          else reject(new TestFailure(`raw WebSocket: connection ended while waiting for ${what}`));
          return;
        }
        this.waiters.push(look);
      };
      look();
    });
  }

  // Waits for the server's close frame and the end of the socket.
  async waitClose(timeoutMs = 10000) {
    await this.waitFor((s) => s.ended || null, timeoutMs, 'the connection to end');
    return this.closeFrame;
  }

  destroy() {
    this.sock.destroy();
  }
}

function encodeFrame(opcode, payload, { fin = true, mask = true } = {}) {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  const len = data.length;
  let head;
  if (len < 126) {
    head = Buffer.alloc(2);
    head[1] = len;
  } else if (len < 65536) {
    head = Buffer.alloc(4);
    head[1] = 126;
    head.writeUInt16BE(len, 2);
  } else {
    head = Buffer.alloc(10);
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(len), 2);
  }
  head[0] = (fin ? 0x80 : 0) | (opcode & 0x0f);
  if (!mask) return Buffer.concat([head, data]);
  head[1] |= 0x80;
  const key = crypto.randomBytes(4);
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) out[i] = data[i] ^ key[i & 3];
  return Buffer.concat([head, key, out]);
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
  REPO, QUICK, IN_CI, cannotCheck, WebSocket, TestFailure, fail, check, eq, log, sleep, until, withTimeout, onCleanup,
  tmpDir, parseArgs, makeModel, generateRef, startServer, httpRequest, rawHttp, parseMetrics,
  parseLabels, parseValue, fetchMetrics, checkIsa, Client, summarize, checkRequestFrames, RawWs, encodeFrame,
  main, now, percentile, tail, childEnv, httpAnswered,
};
