'use strict';
// db_failures: serving goes on whatever happens to the request log's database, the failure shows on
// /metrics and /readyz, and the log catches up once the database is back.
//  (a) unwritable path, twice: --db /proc/inflight-test-PID.db, and a path under a directory that
//      is a regular file. The server starts; /readyz answers 200 "ready, degraded: ..."; /metrics
//      inflight_db_up 0, inflight_db_write_errors_total > 0 and growing (it keeps retrying), the
//      records kept show in inflight_db_queue_depth; requests stream with no stall (the stall beyond
//      the server's steps, /metrics and /readyz answer times under MAX_GAP_MS; at least 3 requests
//      served, 2.5 s at least, for two retries); nothing is created in place of the regular file.
//      SIGTERM exits 0 in bounded time (the records it could not write reported on stderr); with a
//      second SIGTERM while the log's flush still retries, it exits 130 at once.
//  (b) locked: while clients stream, the sqlite3 shell holds BEGIN EXCLUSIVE on the file for
//      HOLD_MS at least, and until a request completed during the lock and write errors rose:
//      serving continues (requests complete during the lock, no stall), inflight_db_up goes
//      0, write errors rise, /readyz says degraded; after the lock is released the log is up again
//      within RECOVER_MS, /readyz says "ready" again, and every request the clients completed (before,
//      during, after the lock) is in the database, nothing dropped. Then the stop while locked:
//      requests done with the lock held, SIGTERM, the lock released 1.5 s later: the server is
//      still flushing, writes them, exits 0 (the session close written too).
//      And the queue bound: --db-queue 20, the file locked, 60 requests: inflight_db_queue_depth stays
//      at the bound, the excess is dropped and counted (queue_full), the session row is not dropped,
//      what was kept is written after the lock, written + dropped account for every request.
//  (c) only where `mount -t tmpfs` works (root; otherwise skipped with a note, and under CI=true the
//      test fails instead):
//      read-only mid-run: the database on a tmpfs; the file system is remounted read-only while
//      clients stream, then read-write: the same checks as (b). Linux refuses to remount a file
//      system read-only while a process has a file open on it for writing (EBUSY), and the server
//      keeps the database open while it works; so a lock (as in (b)) first makes the writer fail and
//      close the file, and the remount happens while it waits to retry (no descriptor of the server
//      on the tmpfs, seen in /proc/PID/fd), before the lock is released.
//      disk full: the database on a tiny tmpfs, filled up with a file while clients stream: failures
//      counted, serving continues, readyz degraded; the filler deleted: writing resumes, every
//      request is in the database.
//      The tmpfs mounts are always unmounted at the end (cleanup).
const fs = require('fs');
const path = require('path');
const D = require('./dblib');

// A thread of the serving path blocked on the database would stall a stream for the writer's busy
// timeout (1 s) or the whole failure. What is bounded is the stall beyond the server's own steps
// (D.stallBeyondSteps: a gap between two tokens less the time between the steps that made them), so
// a slow build's slow steps do not count; the bound leaves room for a busy shared 2-core machine's
// scheduling of the service thread. The HTTP answers (/metrics, /readyz) are bounded alike.
const MAX_GAP_MS = D.QUICK ? 2500 : 900;
// A failure lasts at least HOLD_MS, and until a request has completed while it lasted and the write
// errors have grown (so a slow build gets as many requests through as it needs); WAIT_MS bounds
// that, and the recovery after it, as timeouts.
const HOLD_MS = 3000;
const WAIT_MS = 300000;
const RECOVER_MS = 30000; // a timeout: retry interval 1 s + busy timeout 1 s + a flush, with room
const N_STREAMS = 3;
const STREAM_TOKENS = D.QUICK ? 8 : 16;
const FULL_TMPFS = '1m';

// Polls /metrics (the log's figures) and /readyz every 100 ms, timing each answer.
function sampler(port) {
  const s = { samples: [], stopFlag: false, maxHttpMs: 0 };
  s.promise = (async () => {
    while (!s.stopFlag) {
      const t = D.now();
      const m = await D.dbMetrics(port);
      const t1 = D.now();
      const rz = await D.readyz(port);
      const t2 = D.now();
      s.maxHttpMs = Math.max(s.maxHttpMs, t1 - t, t2 - t1);
      s.samples.push({ t, m, rz });
      await D.sleep(100);
    }
  })().catch((e) => {
    s.failure = e;
  });
  s.stop = async () => {
    s.stopFlag = true;
    await s.promise;
    if (s.failure) throw s.failure;
  };
  s.last = () => s.samples[s.samples.length - 1];
  return s;
}

// Waits until a fresh /metrics + /readyz pair satisfies pred; returns it.
async function waitState(port, pred, timeoutMs, what) {
  let last = null;
  try {
    return await D.until(async () => {
      const m = await D.dbMetrics(port);
      const rz = await D.readyz(port);
      last = { m, rz, t: D.now() };
      return pred(last) ? last : null;
    }, timeoutMs, what, 50);
  } catch (e) {
    D.fail(`${e.message}; last: ${last ? `${D.fmtMetrics(last.m)} readyz ${last.rz.status} ${JSON.stringify(last.rz.body)}` : '-'}`);
  }
  return null;
}

async function openStreams(srv, tag) {
  const clients = await Promise.all(Array.from({ length: N_STREAMS }, (_, i) => D.Client.open(srv.port, { name: `${tag}${i}` })));
  const streams = clients.map((c, i) => D.streamer(c, { prefix: `${tag}${i}-`, depth: 1,
    params: { max_tokens: STREAM_TOKENS, model: i % 2 ? 'static' : 'iterative' } }));
  return { clients, streams };
}

// Every request the clients completed is in the database (matched by session and client_id, with
// its completion); returns the count.
function checkAllLogged(db, clients, streams, what) {
  const rows = D.q(db, 'SELECT s.session, r.client_id, r.completion_tokens, r.completion, r.finish_reason FROM requests r ' +
    'JOIN sessions s ON s.id = r.session_id');
  const byKey = new Map(rows.map((r) => [`${r.session}/${r.client_id}`, r]));
  let n = 0;
  const missing = [];
  clients.forEach((c, i) => {
    for (const [id, rec] of streams[i].done) {
      const row = byKey.get(`${c.hello.session}/${id}`);
      if (!row) {
        missing.push(`${c.hello.session}/${id}`);
        continue;
      }
      D.eq(row.completion_tokens, rec.tokens, `${what}: ${id} completion_tokens`);
      D.eq(row.completion, rec.text, `${what}: ${id} completion`);
      D.eq(row.finish_reason, 'length', `${what}: ${id} finish_reason`);
      n++;
    }
  });
  D.check(missing.length === 0, () => `${what}: ${missing.length} completed requests not in the database: ${missing.slice(0, 10).join(', ')}`);
  return n;
}

function doneBetween(streams, t0, t1) {
  let n = 0;
  for (const s of streams) for (const rec of s.done.values()) if (rec.doneAt >= t0 && rec.doneAt <= t1) n++;
  return n;
}

// ---- (a) --------------------------------------------------------------------------------------------

async function unwritable(bin, vocab, model, dbPath, label, secondSignal) {
  const srv = await D.startServer(bin, vocab, model, ['--db', dbPath, '--no-request-log']);
  const rz0 = await D.readyz(srv.port);
  D.eq(rz0.status, 200, `(a ${label}) /readyz status`);
  D.check(/degraded/.test(rz0.body), `(a ${label}) /readyz body ${JSON.stringify(rz0.body)} does not say degraded`);
  const m0 = await D.dbMetrics(srv.port);
  D.eq(m0.up, 0, `(a ${label}) inflight_db_up`);
  D.check(m0.errors > 0, `(a ${label}) inflight_db_write_errors_total ${m0.errors}`);
  const smp = sampler(srv.port);
  const sub = await D.stepSubscriber(srv.port);
  const { clients, streams } = await openStreams(srv, 'a');
  // two retries at least (2.5 s), and 3 requests served (however long this build takes for them)
  const tA = D.now();
  await D.until(async () => D.now() - tA >= 2500 && streams.reduce((a, s) => a + s.done.size, 0) >= 3 &&
    (await D.dbMetrics(srv.port)).errors > m0.errors, WAIT_MS, `(a ${label}) 3 requests served and the log retried`, 100);
  const servedMs = D.now() - tA;
  await Promise.all(streams.map((s) => s.stop()));
  await smp.stop();
  const m1 = await D.dbMetrics(srv.port);
  for (const st of streams) D.check(st.errors.length === 0, `(a ${label}) error frames: ${JSON.stringify(st.errors.slice(0, 3))}`);
  const n = streams.reduce((a, s) => a + s.done.size, 0);
  const maxGap = Math.max(...streams.map((s) => s.maxGap));
  const stall = await D.stallBeyondSteps(sub, streams, `(a ${label})`);
  sub.close();
  const lat = streams.flatMap((s) => [...s.done.values()].map((r) => r.done.timing.total_ms));
  D.check(n >= 3, `(a ${label}) only ${n} requests completed`);
  D.check(stall.max < MAX_GAP_MS, `(a ${label}) a stream stalled ${stall.max.toFixed(1)} ms beyond the server's steps at ${stall.at} (bound ${MAX_GAP_MS})`);
  D.check(smp.maxHttpMs < MAX_GAP_MS, `(a ${label}) /metrics or /readyz took ${smp.maxHttpMs.toFixed(1)} ms`);
  D.check(smp.samples.every((x) => x.m.up === 0 && x.rz.status === 200 && /degraded/.test(x.rz.body)),
    `(a ${label}) a sample not (up 0, readyz 200 degraded)`);
  D.check(m1.errors > m0.errors, `(a ${label}) write errors did not grow (${m0.errors} -> ${m1.errors}): no retry`);
  D.check(m1.queue > 0, `(a ${label}) inflight_db_queue_depth ${m1.queue}: the records are not kept`);
  D.log(`(a ${label}) --db ${dbPath}: served ${n} requests in ${(servedMs / 1000).toFixed(1)} s (total_ms p50 ${D.percentile(lat, 50).toFixed(1)} max ` +
    `${Math.max(...lat).toFixed(1)}, max gap ${maxGap.toFixed(1)} ms, beyond the steps ${stall.max.toFixed(1)} ms over ${stall.pairs} token pairs, ` +
    `HTTP max ${smp.maxHttpMs.toFixed(1)} ms); ` +
    `readyz ${JSON.stringify(rz0.body.trim())}; errors ${m0.errors} -> ${m1.errors}, queue ${m1.queue}`);
  for (const c of clients) c.close();
  const lines = srv.stderr.split('\n').filter((l) => /request log/.test(l));
  const t = D.now();
  if (!secondSignal) {
    const r = await D.killServer(srv, 'SIGTERM', 30000);
    D.check(r.code === 0, () => `(a ${label}) exit ${r.code} signal ${r.signal} after SIGTERM\n${D.tail(srv.stderr, 3000)}`);
    const stopMs = D.now() - t;
    D.check(stopMs < 15000, `(a ${label}) the stop took ${stopMs.toFixed(0)} ms`);
    const lost = /(\d+) record\(s\) could not be written/.exec(srv.stderr);
    D.check(lost, `(a ${label}) no "record(s) could not be written" at exit: ${D.tail(srv.stderr, 2000)}`);
    D.log(`(a ${label}) SIGTERM: exit 0 in ${stopMs.toFixed(0)} ms (the log's flush gives up after its deadline); ` +
      `stderr: ${lines[0]} | ${lost[0]}`);
  } else {
    // the log's flush at exit keeps retrying a while: a second signal must end it at once
    srv.expectExit = true;
    srv.proc.kill('SIGTERM');
    await D.sleep(500);
    D.check(!srv.exited, `(a ${label}) exited within 500 ms of the first SIGTERM (code ${srv.exitCode}): nothing to check a second signal against`);
    const t2 = D.now();
    srv.proc.kill('SIGTERM');
    const r = await D.withTimeout(srv.exitPromise, 5000, 'the server to exit after a second SIGTERM');
    const ms = D.now() - t2;
    D.eq(r.code, 130, `(a ${label}) exit status after a second SIGTERM`);
    // "at once": well before the ~4.5 s the flush would still have (ThreadSanitizer delays signal
    // delivery to a thread blocked in pthread_join by about a second)
    D.check(ms < 2500, `(a ${label}) exit ${ms.toFixed(0)} ms after the second SIGTERM`);
    D.log(`(a ${label}) SIGTERM, then SIGTERM 500 ms later while the log's flush retries: exit 130 ${ms.toFixed(0)} ms after the second; ` +
      `stderr: ${lines[0]}`);
  }
}

// ---- (b), (c): a failure while clients stream ---------------------------------------------------------

// induce(): makes the database fail, resolves when it is failing (from outside); release(): undoes
// it. Checks serving, /metrics, /readyz through the failure and the catch-up after it.
async function failureWhileStreaming(srv, db, label, { induce, release, holdMs = HOLD_MS, baselineMs = 800 }) {
  await waitState(srv.port, (s) => s.m.up === 1 && s.rz.body === 'ready\n', 10000, `(${label}) the log up at the start`);
  const smp = sampler(srv.port);
  const sub = await D.stepSubscriber(srv.port);
  const { clients, streams } = await openStreams(srv, label.replace(/\W/g, ''));
  await D.sleep(baselineMs);
  const baseGap = Math.max(0, ...streams.map((s) => s.maxGap));
  const mBefore = await D.dbMetrics(srv.port);
  const tInduce = D.now();
  const how = await induce();
  const tInduced = D.now();
  const mInduced = await D.dbMetrics(srv.port);
  const failing = await waitState(srv.port, (s) => s.m.up === 0, 10000, `(${label}) inflight_db_up 0`);
  const deg = await waitState(srv.port, (s) => s.rz.status === 200 && /degraded/.test(s.rz.body), 10000, `(${label}) /readyz degraded`);
  const rest = tInduced + holdMs - D.now();
  if (rest > 0) await D.sleep(rest);
  // and until a request completed while the database failed and the log has retried (a slow build
  // may need longer than holdMs for either)
  await D.until(async () => doneBetween(streams, tInduce, D.now()) > 0 && (await D.dbMetrics(srv.port)).errors > mInduced.errors,
    WAIT_MS, `(${label}) a request completed while the database failed, and write errors grew`, 100);
  const mDuring = await D.dbMetrics(srv.port);
  const tRelease = D.now();
  await release();
  const tReleased = D.now();
  const back = await waitState(srv.port, (s) => s.m.up === 1 && s.rz.body === 'ready\n', RECOVER_MS,
    `(${label}) inflight_db_up 1 and /readyz "ready" after the release`);
  await D.sleep(500);
  await Promise.all(streams.map((s) => s.stop()));
  await smp.stop();
  const mEnd = await D.waitDrained(srv.port);
  srv.assertAlive();

  for (const st of streams) D.check(st.errors.length === 0, `(${label}) error frames: ${JSON.stringify(st.errors.slice(0, 3))}`);
  const during = doneBetween(streams, tInduce, tReleased);
  const maxGap = Math.max(...streams.map((s) => s.maxGap));
  const stall = await D.stallBeyondSteps(sub, streams, `(${label})`);
  sub.close();
  const readyzSeen = new Set(smp.samples.map((x) => `${x.rz.status} ${x.rz.body.startsWith('ready, degraded') ? 'degraded' : x.rz.body.trim()}`));
  D.check(smp.samples.every((x) => x.rz.status === 200), () => `(${label}) /readyz not 200 at some point: ${[...readyzSeen].join(', ')}`);
  D.check(during > 0, `(${label}) no request completed while the database failed`);
  D.check(stall.max < MAX_GAP_MS, `(${label}) a stream stalled ${stall.max.toFixed(1)} ms beyond the server's steps at ${stall.at} ` +
    `(bound ${MAX_GAP_MS}; largest plain gap ${maxGap.toFixed(1)} ms, before the failure ${baseGap.toFixed(1)})`);
  D.check(smp.maxHttpMs < MAX_GAP_MS, `(${label}) /metrics or /readyz took ${smp.maxHttpMs.toFixed(1)} ms`);
  D.check(mDuring.errors > mInduced.errors, `(${label}) write errors did not grow during the failure: ${mBefore.errors} before, ` +
    `${mInduced.errors} when induced, ${mDuring.errors} at the release`);
  const degradedSeen = [...new Set(smp.samples.filter((x) => x.t >= tInduced && x.t <= tRelease && /degraded/.test(x.rz.body))
    .map((x) => x.rz.body.trim().replace(/^ready, degraded: the request log is failing \((.*)\); serving goes on$/, '$1')))];
  D.eq(mEnd.droppedFull + mEnd.droppedRejected, 0, `(${label}) records dropped`);
  const logged = checkAllLogged(db, clients, streams, label);
  const total = streams.reduce((a, s) => a + s.done.size, 0);
  D.log(`(${label}) ${how}; inflight_db_up 0 ${(failing.t - tInduced).toFixed(0)} ms after, readyz ${JSON.stringify(deg.rz.body.trim())}; ` +
    `write errors ${mBefore.errors} -> ${mInduced.errors} -> ${mDuring.errors} -> ${mEnd.errors} (before/induced/release/end), queue at the release ${mDuring.queue}; ` +
    `released after ${(tRelease - tInduced).toFixed(0)} ms, up again ${(back.t - tReleased).toFixed(0)} ms later; ` +
    `${total} requests (${during} completed while failing), all ${logged} in the database; max gap ${maxGap.toFixed(1)} ms ` +
    `(before ${baseGap.toFixed(1)}), beyond the server's steps ${stall.max.toFixed(1)} ms over ${stall.pairs} token pairs; ` +
    `HTTP max ${smp.maxHttpMs.toFixed(1)} ms; readyz seen: ${[...readyzSeen].join(', ')}; ` +
    `failures /readyz named while failing: ${degradedSeen.map((x) => JSON.stringify(x)).join(' ; ')}`);
  for (const c of clients) c.close();
  await Promise.all(clients.map((c) => D.withTimeout(c.closed, 10000, `${c.name} to close`)));
  return { clients, streams, degradedSeen };
}

// The sqlite3 shell holding BEGIN EXCLUSIVE; resolves once it holds it.
async function holdLock(db) {
  const p = D.spawnTracked(D.sqlite3Bin(), ['-cmd', '.timeout 20000', db]);
  p.stdin.write("BEGIN EXCLUSIVE;\nSELECT 'locked';\n");
  await D.until(() => {
    if (p.err) D.fail(`the lock holder: ${p.err}`);
    return /locked/.test(p.out);
  }, 30000, 'the sqlite3 shell to hold BEGIN EXCLUSIVE');
  const probe = D.sqliteRun(db, 'BEGIN IMMEDIATE; ROLLBACK;', { busyMs: 0 });
  D.check(probe.status !== 0 && /locked/.test(probe.stderr), `a second writer is not locked out: ${probe.status} ${probe.stderr}`);
  p.release = async () => {
    p.stdin.end('ROLLBACK;\n.quit\n');
    const r = await D.withTimeout(p.exited, 10000, 'the lock holder to exit');
    D.check(r.code === 0 && !p.err, `the lock holder: exit ${r.code} ${p.err}`);
  };
  return p;
}

// The server's descriptors on files under dir.
function fdsUnder(pid, dir) {
  const out = [];
  let names = [];
  try {
    names = fs.readdirSync(`/proc/${pid}/fd`);
  } catch (e) {
    return out;
  }
  for (const n of names) {
    try {
      const t = fs.readlinkSync(`/proc/${pid}/fd/${n}`);
      if (t.startsWith(dir + '/')) out.push(t);
    } catch (e) {
      /* closed meanwhile */
    }
  }
  return out;
}

// Fills the file system of dir up (ENOSPC); returns the filler's size.
function fill(file) {
  const fd = fs.openSync(file, 'w');
  let size = 0;
  try {
    for (const chunk of [1 << 16, 4096, 512]) {
      const buf = Buffer.alloc(chunk, 0x5a);
      for (;;) {
        try {
          const n = fs.writeSync(fd, buf);
          size += n;
          if (n < chunk) break;
        } catch (e) {
          if (e.code === 'ENOSPC') break;
          throw e;
        }
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return size;
}

function dfFree(dir) {
  const st = fs.statfsSync(dir);
  return st.bavail * st.bsize;
}

D.main('db_failures', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const model = D.makeModel(bin, vocab, [], 'dbfail-model');
  const dir = D.tmpDir('dbfail');

  // (a)
  await unwritable(bin, vocab, model, `/proc/inflight-test-${process.pid}.db`, '/proc', false);
  const regular = path.join(dir, 'regular-file');
  fs.writeFileSync(regular, 'not a directory\n');
  await unwritable(bin, vocab, model, path.join(regular, 'log.db'), 'under a regular file', true);
  D.eq(fs.readFileSync(regular, 'utf8'), 'not a directory\n', '(a) the regular file');

  // (b)
  {
    const db = path.join(dir, 'locked.db');
    const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log']);
    let holder = null;
    await failureWhileStreaming(srv, db, 'b locked', {
      induce: async () => {
        holder = await holdLock(db);
        return `sqlite3 shell holding BEGIN EXCLUSIVE`;
      },
      release: () => holder.release(),
    });
    // the stop while the file is locked: the flush at exit retries, and gets through once the lock
    // goes (here 1.5 s after the SIGTERM, within the flush's deadline)
    const c = await D.Client.open(srv.port, { name: 'b-stop' });
    const h2 = await holdLock(db);
    const done = [];
    for (let i = 0; i < 5; i++) {
      const r = await c.request({ id: `late${i}`, prompt: 'Written at exit', max_tokens: 4, seed: i, ignore_eos: true });
      D.check(r.done, `late${i}: no done`);
      done.push({ id: `late${i}`, text: r.text });
    }
    const tTerm = D.now();
    srv.expectExit = true;
    srv.proc.kill('SIGTERM');
    await D.sleep(1500);
    D.check(!srv.exited, `(b) the server exited (code ${srv.exitCode}) within 1.5 s of SIGTERM with the file locked and records queued`);
    await h2.release();
    const ex = await D.withTimeout(srv.exitPromise, 15000, 'the server to exit once the lock is gone');
    D.eq(ex.code, 0, '(b) exit status after SIGTERM, the lock released meanwhile');
    D.check(!/could not be written/.test(srv.stderr), () => `(b) records lost at exit: ${D.tail(srv.stderr, 2000)}`);
    const rows = D.q(db, `SELECT r.client_id, r.completion FROM requests r JOIN sessions s ON s.id = r.session_id
      WHERE s.session = ${D.sqlStr(c.hello.session)} ORDER BY r.id`);
    D.eq(JSON.stringify(rows.map((r) => [r.client_id, r.completion])), JSON.stringify(done.map((d) => [d.id, d.text])),
      '(b) the requests made while locked, written at exit');
    const sess = D.q(db, `SELECT close_reason FROM sessions WHERE session = ${D.sqlStr(c.hello.session)}`);
    D.check(sess.length === 1 && /^server 1001/.test(sess[0].close_reason || ''), `(b) the session closed at the stop: ${JSON.stringify(sess)}`);
    D.log(`(b) SIGTERM with the file locked and ${done.length} requests queued for the log; lock released 1.5 s later; ` +
      `exit 0 ${(D.now() - tTerm).toFixed(0)} ms after the SIGTERM with every record written (session close ${JSON.stringify(sess[0].close_reason)})`);
    const ic = D.integrityCheck(db);
    D.check(ic.ok, `(b) integrity_check: ${ic.out}`);
  }

  // (b) the queue bound: --db-queue QCAP with the file locked; records beyond the bound are dropped
  // and counted (queue_full), the session rows never; after the lock the rest is written
  {
    const QCAP = 20;
    const db = path.join(dir, 'bounded.db');
    const srv = await D.startServer(bin, vocab, model, ['--db', db, '--db-queue', String(QCAP), '--no-request-log']);
    await waitState(srv.port, (x) => x.m.up === 1, 10000, '(b queue) the log up');
    const holder = await holdLock(db);
    const c = await D.Client.open(srv.port, { name: 'b-queue' });
    const ids = [];
    let maxQueue = 0;
    for (let i = 0; i < 3 * QCAP; i++) {
      const r = await c.request({ id: `b${i}`, prompt: 'Bounded', max_tokens: 2, seed: i, ignore_eos: true });
      D.check(r.done, `b${i}: no done`);
      ids.push(`b${i}`);
      if (i % 10 === 9) maxQueue = Math.max(maxQueue, (await D.dbMetrics(srv.port)).queue);
    }
    const mLocked = await D.dbMetrics(srv.port);
    maxQueue = Math.max(maxQueue, mLocked.queue);
    D.check(mLocked.droppedFull > 0, `(b queue) nothing dropped with ${ids.length} requests and --db-queue ${QCAP}: ${D.fmtMetrics(mLocked)}`);
    D.check(maxQueue <= QCAP + 1, `(b queue) queue depth ${maxQueue} over --db-queue ${QCAP} (+1 session row)`);
    await holder.release();
    const mEnd = await D.waitDrained(srv.port);
    const rows = D.q(db, `SELECT r.client_id FROM requests r JOIN sessions s ON s.id = r.session_id WHERE s.session = ${D.sqlStr(c.hello.session)}`);
    const n = rows.length;
    D.check(n > 0 && n < ids.length, `(b queue) ${n} of ${ids.length} requests written`);
    D.eq(mEnd.written.request, n, '(b queue) inflight_db_records_written_total{request} vs rows');
    D.check(mEnd.written.request + mEnd.droppedFull >= ids.length,
      `(b queue) written ${mEnd.written.request} + dropped ${mEnd.droppedFull} < ${ids.length} requests: records unaccounted for`);
    D.eq(D.scalar(db, `SELECT count(*) FROM sessions WHERE session = ${D.sqlStr(c.hello.session)}`), 1, '(b queue) the session row');
    c.close();
    await c.closed;
    await srv.stop();
    D.log(`(b queue) --db-queue ${QCAP}, file locked, ${ids.length} requests: queue depth at most ${maxQueue}, ` +
      `dropped ${mEnd.droppedFull} (queue_full; requests and sampled steps), ${n} requests written after the lock, session row kept`);
  }

  // (c)
  const probe = D.mountTmpfs('dbfail-probe', '64k');
  if (!probe.dir) {
    D.cannotCheck(`(c) the read-only and disk-full cases need a tmpfs mount: ${probe.why}`);
    return;
  }

  // (c) read-only mid-run
  {
    const mnt = D.mountTmpfs('dbfail-ro', '16m').dir;
    D.check(mnt, 'second tmpfs mount failed');
    const db = path.join(mnt, 'log.db');
    const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log']);
    let notes = '';
    const ro = await failureWhileStreaming(srv, db, 'c read-only', {
      induce: async () => {
        // a plain remount while the server has the file open for writing: refused by Linux
        const plain = D.sh('mount', ['-o', 'remount,ro', mnt]);
        notes = `plain remount,ro while the server writes: status ${plain.status} (${plain.out.split('\n')[0]})`;
        if (plain.status === 0) return notes + '; read-only now';
        // the lock makes the writer fail and close the file; remount while it waits to retry
        for (let attempt = 0; attempt < 8; attempt++) {
          const holder = await holdLock(db);
          await D.until(() => fdsUnder(srv.proc.pid, mnt).length === 0, 15000, 'the writer to close the database (no fd on the tmpfs)', 5);
          await holder.release();
          const r = D.sh('mount', ['-o', 'remount,ro', mnt]);
          if (r.status === 0) {
            notes += `; remounted read-only while the writer waited to retry (attempt ${attempt + 1})`;
            return notes;
          }
          notes += `; attempt ${attempt + 1}: ${r.out.split('\n')[0]}`;
          await D.sleep(300);
        }
        D.fail(`(c read-only) could not remount read-only: ${notes}`);
        return notes;
      },
      release: async () => {
        D.remount(mnt, 'rw');
      },
    });
    D.check(ro.degradedSeen.some((x) => !/locked/.test(x)),
      `(c read-only) while read-only, /readyz named only the lock used to get there: ${JSON.stringify(ro.degradedSeen)}`);
    await srv.stop();
    const ic = D.integrityCheck(db);
    D.check(ic.ok, `(c read-only) integrity_check: ${ic.out}`);
    const errs = srv.stderr.split('\n').filter((l) => /request log/.test(l));
    D.log(`(c read-only) server said: ${[...new Set(errs.map((l) => l.replace(/\(\d+ records kept/, '(N records kept')))].slice(0, 6).join(' | ')}`);
  }

  // (c) disk full
  {
    const mnt = D.mountTmpfs('dbfail-full', FULL_TMPFS).dir;
    D.check(mnt, 'third tmpfs mount failed');
    const db = path.join(mnt, 'log.db');
    const filler = path.join(mnt, 'filler');
    const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log']);
    await failureWhileStreaming(srv, db, 'c disk full', {
      baselineMs: 300,
      induce: async () => {
        const free0 = dfFree(mnt);
        const n = fill(filler);
        return `tmpfs of ${FULL_TMPFS}: ${free0} bytes free, filled with ${n} bytes (free now ${dfFree(mnt)})`;
      },
      release: async () => {
        fs.rmSync(filler);
      },
    });
    await srv.stop();
    const ic = D.integrityCheck(db);
    D.check(ic.ok, `(c disk full) integrity_check: ${ic.out}`);
    const errs = srv.stderr.split('\n').filter((l) => /request log/.test(l));
    D.log(`(c disk full) server said: ${[...new Set(errs.map((l) => l.replace(/\(\d+ records kept/, '(N records kept')))].slice(0, 6).join(' | ')}`);
    const sizes = fs.readdirSync(mnt).map((f) => `${f} ${fs.statSync(path.join(mnt, f)).size}`);
    D.log(`(c disk full) files on the tmpfs at the end: ${sizes.join(', ')}`);
  }
});
