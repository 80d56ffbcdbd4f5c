'use strict';
// server.js: the server-facing part of the integration tests' helpers (re-exported by lib.js):
// the test's arguments, generated models and reference completions (make-model, generate), starting
// and stopping `inflight serve` on a free loopback port (with a watchdog shell that kills the server
// if the node process itself is killed, e.g. SIGKILL from a CTest timeout), HTTP requests (through
// node's http and as raw bytes) and /metrics parsing. The WebSocket clients are in ws_client.js.

const { spawn, execFile, spawnSync } = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');
const { TestFailure, fail, check, eq, log, until, withTimeout, onCleanup, tmpDir, liveServers, tail } =
  require('./harness');

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

module.exports = {
  parseArgs, childEnv, makeModel, generateRef, startServer, httpRequest, rawHttp, httpAnswered,
  parseLabels, parseMetrics, parseValue, fetchMetrics, checkIsa,
};
