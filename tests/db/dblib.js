'use strict';
// Shared helpers of the request-log tests (tests/db/*.test.js). Each test is a standalone program
// `node <test> <inflight-binary> <vocab-dir>` like the integration tests, whose helpers
// (tests/integration/lib.js: servers, clients, cleanup, watchdog) it re-exports. Added here: the
// database read from outside through the sqlite3 command-line shell, the /metrics figures of the
// log, /readyz, inter-token gaps, stalls beyond what the server's own step frames explain, stopping a
// server by a signal of our choosing, tmpfs mounts that are always unmounted.

const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const L = require('../integration/lib.js');

const SKIP = 77; // CTest SKIP_RETURN_CODE

// ---- the sqlite3 shell ---------------------------------------------------------------------------

let SQLITE3 = null;
function sqlite3Bin() {
  if (SQLITE3) return SQLITE3;
  for (const p of [process.env.IFL_SQLITE3, '/usr/bin/sqlite3', '/usr/local/bin/sqlite3']) {
    if (p && fs.existsSync(p)) {
      SQLITE3 = p;
      return p;
    }
  }
  const r = spawnSync('sh', ['-c', 'command -v sqlite3'], { encoding: 'utf8' });
  if (r.status === 0 && r.stdout.trim()) {
    SQLITE3 = r.stdout.trim();
    return SQLITE3;
  }
  return null;
}

// Exits 77 (skipped) when there is no sqlite3 shell: every check here reads the file through it.
// Under CI=true that fails instead (L.cannotCheck).
function requireSqlite3() {
  const b = sqlite3Bin();
  if (!b) L.cannotCheck('no sqlite3 command-line shell (set IFL_SQLITE3=/path/to/sqlite3)', { exit: true });
  const v = spawnSync(b, ['--version'], { encoding: 'utf8' });
  L.log(`sqlite3 shell: ${b} ${(v.stdout || '').split(' ')[0]}`);
}

// Runs SQL in the sqlite3 shell on file db; returns {status, stdout, stderr}. A 5 s busy timeout so
// that a read racing the server's writer waits instead of failing.
function sqliteRun(db, sql, { json = false, timeoutMs = 30000, busyMs = 5000, input = null } = {}) {
  const args = ['-bail', '-cmd', `.timeout ${busyMs}`];
  if (json) args.push('-json');
  args.push(db);
  if (sql !== null) args.push(sql);
  const r = spawnSync(sqlite3Bin(), args, { encoding: 'utf8', timeout: timeoutMs, input: input || undefined,
    maxBuffer: 256 << 20 });
  return { status: r.status, stdout: r.stdout || '', stderr: (r.stderr || '') + (r.error ? String(r.error) : '') };
}

// One query, rows as objects (sqlite3 -json). Fails the test on an error.
function q(db, sql, opts = {}) {
  const r = sqliteRun(db, sql, { ...opts, json: true });
  if (r.status !== 0) L.fail(`sqlite3 ${db} ${JSON.stringify(sql)}: status ${r.status}: ${r.stderr.trim()}`);
  const out = r.stdout.trim();
  if (!out) return [];
  // several statements print several arrays: join them
  return JSON.parse('[' + out.replace(/\]\s*\n\s*\[/g, '],[') + ']').flat();
}

// The first column of the first row.
function scalar(db, sql, opts) {
  const rows = q(db, sql, opts);
  if (!rows.length) return undefined;
  return Object.values(rows[0])[0];
}

// Statements without a result; fails on an error.
function exec(db, sql, opts = {}) {
  const r = sqliteRun(db, sql, opts);
  if (r.status !== 0) L.fail(`sqlite3 ${db} ${JSON.stringify(sql.slice(0, 300))}: status ${r.status}: ${r.stderr.trim()}`);
  return r.stdout;
}

function integrityCheck(db) {
  const r = sqliteRun(db, 'PRAGMA integrity_check;');
  return { ok: r.status === 0 && r.stdout.trim() === 'ok', out: (r.stdout + r.stderr).trim() };
}

// token offsets blob (hex) -> array of uint32 (little-endian)
function offsetsFromHex(hex) {
  const b = Buffer.from(hex || '', 'hex');
  const out = [];
  for (let i = 0; i + 4 <= b.length; i += 4) out.push(b.readUInt32LE(i));
  return { bytes: b.length, offsets: out };
}

// ---- the inflight db subcommands -----------------------------------------------------------------

function inflightDb(bin, vocab, args, timeoutMs = 60000) {
  const r = spawnSync(bin, ['db', ...args], { env: L.childEnv(vocab), encoding: 'utf8', timeout: timeoutMs });
  return { status: r.status, signal: r.signal, stdout: r.stdout || '', stderr: (r.stderr || '') + (r.error ? String(r.error) : ''),
    out: ((r.stdout || '') + (r.stderr || '')).trim() };
}

// The number of migrations the binary has, from `inflight db status` of a freshly migrated file,
// cross-checked with migrations/*.sql of the source tree.
function latestVersion(bin, vocab, dir) {
  const f = path.join(dir, 'latest-probe.db');
  const m = inflightDb(bin, vocab, ['migrate', '--db', f]);
  if (m.status !== 0) L.fail(`inflight db migrate --db ${f}: status ${m.status}: ${m.out}`);
  const s = inflightDb(bin, vocab, ['status', '--db', f]);
  const mm = /this binary has (\d+) migration/.exec(s.out);
  if (!mm) L.fail(`inflight db status: no "this binary has N migration(s)" in ${JSON.stringify(s.out)}`);
  const n = Number(mm[1]);
  const srcDir = path.join(L.REPO, 'migrations');
  if (fs.existsSync(srcDir)) {
    const files = fs.readdirSync(srcDir).filter((x) => /^\d{4}_.*\.sql$/.test(x));
    L.eq(n, files.length, `migrations the binary has vs migrations/*.sql (${files.join(', ')})`);
  }
  for (const x of [f, f + '-wal', f + '-shm']) fs.rmSync(x, { force: true });
  return n;
}

// ---- the server ----------------------------------------------------------------------------------

// Sends `sig` to the server and waits for it to exit; returns {code, signal}.
async function killServer(srv, sig, timeoutMs = 30000) {
  srv.expectExit = true;
  srv.proc.kill(sig);
  return L.withTimeout(srv.exitPromise, timeoutMs, `the server to exit after ${sig}`);
}

async function readyz(port) {
  const r = await L.httpRequest(port, '/readyz');
  return { status: r.status, body: r.body.toString('utf8') };
}

// The request log's figures on /metrics.
async function dbMetrics(port) {
  const m = await L.fetchMetrics(port);
  const kinds = ['session_open', 'session_close', 'request', 'step'];
  const written = {};
  for (const k of kinds) written[k] = m.get('inflight_db_records_written_total', { kind: k });
  return {
    up: m.get('inflight_db_up'),
    written,
    droppedFull: m.get('inflight_db_records_dropped_total', { reason: 'queue_full' }),
    droppedRejected: m.get('inflight_db_records_dropped_total', { reason: 'rejected' }),
    errors: m.get('inflight_db_write_errors_total'),
    queue: m.get('inflight_db_queue_depth'),
    tx: m.get('inflight_db_transactions_total'),
    retentionDeleted: m.maybe('inflight_db_retention_deleted_total'),
  };
}

function fmtMetrics(d) {
  return `up ${d.up} written ${JSON.stringify(d.written)} dropped full ${d.droppedFull} rejected ${d.droppedRejected} ` +
    `errors ${d.errors} queue ${d.queue} tx ${d.tx}`;
}

// Waits until the log has written everything queued (queue depth 0, up 1).
async function waitDrained(port, timeoutMs = 20000) {
  let last;
  await L.until(async () => {
    last = await dbMetrics(port);
    return last.queue === 0 && last.up === 1;
  }, timeoutMs, 'the request log to drain (inflight_db_queue_depth 0, inflight_db_up 1)', 50).catch((e) => {
    L.fail(`${e.message}; last: ${last ? fmtMetrics(last) : '-'}`);
  });
  return last;
}

// ---- streams -------------------------------------------------------------------------------------

// Gaps between consecutive token frames of one request (and from started to the first token).
function tokenGaps(frames) {
  const gaps = [];
  let prev = null;
  for (const f of frames) {
    if (f.msg.type === 'started') prev = f.t;
    else if (f.msg.type === 'token') {
      if (prev !== null) gaps.push(f.t - prev);
      prev = f.t;
    }
  }
  return gaps;
}

// A client that keeps `depth` requests in flight back to back until stop(); every request has a
// unique id (prefix + counter). Records per request: id, sent time, done frame and its arrival.
function streamer(client, { prefix = 'q', depth = 1, params = {}, onDone = null } = {}) {
  const st = { client, sent: [], done: new Map(), errors: [], stopFlag: false, n: 0, maxGap: 0, gapAt: '' };
  const one = async () => {
    while (!st.stopFlag) {
      const id = `${prefix}${st.n++}`;
      const rec = { id, sentAt: L.now() };
      st.sent.push(rec);
      let r;
      try {
        r = await client.request({ id, prompt: 'Streaming along', max_tokens: 8, ignore_eos: true, seed: st.n, ...params }, 120000);
      } catch (e) {
        if (st.stopFlag || client.closeInfo) return; // killed server / closed on purpose
        throw e;
      }
      if (r.error) {
        st.errors.push(r.error);
        continue;
      }
      const doneFrame = r.frames.find((f) => f.msg.type === 'done');
      const started = r.frames.find((f) => f.msg.type === 'started');
      rec.doneAt = doneFrame.t;
      rec.done = r.done;
      rec.tokens = r.tokens.length;
      rec.text = r.text;
      rec.rid = started ? started.msg.rid : null;
      rec.policy = started ? started.msg.model : null;
      rec.tokenTimes = r.tokens.map((f) => f.t);
      for (const g of tokenGaps(r.frames)) {
        if (g > st.maxGap) {
          st.maxGap = g;
          st.gapAt = `${client.name}/${id}`;
        }
      }
      st.done.set(id, rec);
      if (onDone) onDone(rec);
    }
  };
  st.promise = Promise.all(Array.from({ length: depth }, one)).catch((e) => {
    st.failure = e;
  });
  st.stop = async () => {
    st.stopFlag = true;
    await st.promise;
    if (st.failure) throw st.failure;
  };
  return st;
}

// ---- the server's steps against what the clients saw -----------------------------------------------

// A client subscribed to `steps`: the server's own record of its scheduling, in sub.frames.
async function stepSubscriber(port, name = 'steps') {
  const sub = await L.Client.open(port, { name });
  sub.send({ type: 'subscribe', topic: 'steps' });
  await sub.waitFor((f) => f.msg.type === 'subscribed', 30000, 'subscribed');
  return sub;
}

// The ends of the steps (ms on the server's clock) each (policy, rid) ran in, from the step frames.
function stepEnds(sub) {
  const ends = new Map();
  let dropped = 0;
  for (const f of sub.frames) {
    if (f.msg.type !== 'step') continue;
    dropped += f.msg.dropped;
    for (const [rid] of f.msg.seqs) {
      const k = `${f.msg.model}/${rid}`;
      if (!ends.has(k)) ends.set(k, []);
      ends.get(k).push(f.msg.t_ms + f.msg.ms);
    }
  }
  return { ends, dropped };
}

// Stalls as the clients of `streams` saw them, less what the server's own steps explain: for each
// two consecutive tokens of a request, the time between their arrivals minus the time between the
// ends of the steps that produced them (a request of a one-step prompt runs in one step per token).
// A serving thread blocked (on the database, say) shows here as the time it was blocked; slow steps
// (a sanitizer build, a busy machine) cancel out. Waits (a timeout, timeoutMs) until the subscriber
// has every step of every completed request. Returns {max, at, pairs, raw (the largest plain gap)}.
async function stallBeyondSteps(sub, streams, what, timeoutMs = 60000) {
  const recs = streams.flatMap((st) => [...st.done.values()]);
  let got = null;
  await L.until(() => {
    got = stepEnds(sub);
    return recs.every((r) => (got.ends.get(`${r.policy}/${r.rid}`) || []).length >= r.tokens);
  }, timeoutMs, `${what}: the step frames of every completed request`, 50).catch((e) => {
    const short = recs.filter((r) => (got.ends.get(`${r.policy}/${r.rid}`) || []).length !== r.tokens);
    L.fail(`${e.message} (${short.length} of ${recs.length} requests short of steps, e.g. ${short.slice(0, 3).map((r) => `${r.id} ` +
      `rid ${r.rid}: ${(got.ends.get(`${r.policy}/${r.rid}`) || []).length} steps for ${r.tokens} tokens`).join(', ')}; ` +
      `step frames dropped ${got.dropped})`);
  });
  L.eq(got.dropped, 0, `${what}: step frames dropped for the subscriber (the record would be incomplete)`);
  let max = 0;
  let raw = 0;
  let at = '';
  let pairs = 0;
  for (const r of recs) {
    const ends = got.ends.get(`${r.policy}/${r.rid}`);
    L.eq(ends.length, r.tokens, `${what}: steps holding ${r.id} (rid ${r.rid}, one per token)`);
    for (let i = 1; i < r.tokenTimes.length; i++) {
      const gap = r.tokenTimes[i] - r.tokenTimes[i - 1];
      const extra = gap - (ends[i] - ends[i - 1]);
      raw = Math.max(raw, gap);
      pairs++;
      if (extra > max) {
        max = extra;
        at = `${r.id} token ${i}`;
      }
    }
  }
  return { max, at, pairs, raw };
}

// ---- tmpfs ---------------------------------------------------------------------------------------

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 30000 });
  return { status: r.status, out: ((r.stdout || '') + (r.stderr || '') + (r.error ? String(r.error) : '')).trim() };
}

// Mounts a tmpfs of `size` (e.g. '2m', '400k') on a new directory; returns its path, or null (with
// the reason in .why) if mounting is not possible here. Unmounted in cleanup, always: the servers
// are killed first (cleanupSync), then this retries, then detaches lazily.
function mountTmpfs(tag, size) {
  const dir = L.tmpDir(tag);
  const r = sh('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0777`, 'tmpfs', dir]);
  if (r.status !== 0) return { dir: null, why: `mount -t tmpfs failed (status ${r.status}): ${r.out}` };
  // if this process is killed without cleaning up (SIGKILL from a CTest timeout), a watchdog shell
  // detaches the mount once it is gone
  const wd = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ` +
    `umount -l '${dir}' 2>/dev/null; rmdir '${dir}' 2>/dev/null; exit 0`], { stdio: 'ignore', detached: true });
  wd.unref();
  L.onCleanup(() => {
    for (let i = 0; i < 20; i++) {
      const u = sh('umount', [dir]);
      if (u.status === 0) return;
      if (/not mounted/.test(u.out)) return;
      spawnSync('sleep', ['0.1']);
    }
    const u = sh('umount', ['-l', dir]);
    if (u.status !== 0) console.error(`cleanup: cannot unmount ${dir}: ${u.out}`);
  });
  return { dir, why: null };
}

function remount(dir, mode) {
  const r = sh('mount', ['-o', `remount,${mode}`, dir]);
  if (r.status !== 0) L.fail(`mount -o remount,${mode} ${dir}: status ${r.status}: ${r.out}`);
}

// A child process we started: killed in cleanup if still alive.
function spawnTracked(cmd, args, opts = {}) {
  const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], ...opts });
  p.out = '';
  p.err = '';
  p.stdout.setEncoding('utf8');
  p.stderr.setEncoding('utf8');
  p.stdout.on('data', (d) => {
    p.out += d;
  });
  p.stderr.on('data', (d) => {
    p.err += d;
  });
  p.exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
  let gone = false;
  p.on('exit', () => {
    gone = true;
  });
  L.onCleanup(() => {
    if (!gone) {
      try {
        p.kill('SIGKILL');
      } catch (e) {
        /* gone */
      }
    }
  });
  return p;
}

function sqlStr(s) {
  return `'${String(s).replace(/'/g, "''")}'`;
}

module.exports = {
  ...L, L, SKIP, sqlite3Bin, requireSqlite3, sqliteRun, q, scalar, exec, integrityCheck, offsetsFromHex,
  inflightDb, latestVersion, killServer, readyz, dbMetrics, fmtMetrics, waitDrained, tokenGaps, streamer,
  stepSubscriber, stepEnds, stallBeyondSteps,
  mountTmpfs, remount, spawnTracked, sqlStr, sh,
};
