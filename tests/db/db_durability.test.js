'use strict';
// db_durability: the request log survives a crash. RUNS times (2 with IFL_TEST_QUICK), on one
// database file: start `inflight serve --db` (the same file each time), let N_CLIENTS clients stream
// short requests back to back (2 in flight each), and SIGKILL the server at a random moment
// KILL_MIN_MS..KILL_MAX_MS into the load (counted from the first done frame). The client records when
// each done frame arrived. Then:
//  - `PRAGMA integrity_check` on the file (sqlite3 shell, right after the kill) is ok;
//  - every request the log had reported written (inflight_db_records_written_total{kind="request"},
//    read just before the kill: committed) is in the file: at least that many rows of this run;
//  - every request whose done frame reached its client more than WINDOW_MS (the flush interval,
//    200 ms, + a margin that is a timeout for a busy machine's writer, not a bound on it) before the
//    kill is in the database, matched by (session of the hello, client_id), with completion_tokens
//    as streamed; the recent ones (done inside the window) are counted as there / not there
//    (reported, not required);
//  - nothing in the database that no client sent;
//  - the restart on the same file: no migration is applied again (no "applied" line on stderr,
//    schema_migrations has exactly N rows with applied_at unchanged since the first start,
//    user_version N), the log is up (inflight_db_up 1) and writes (each run's rows land).
// At the end the server is started once more, serves a request that must reach the file, stops
// with SIGTERM (exit 0), and the file passes integrity_check again.
const D = require('./dblib');

const RUNS = D.QUICK ? 2 : 5;
const N_CLIENTS = 6;
const FLUSH_MS = 200; // the default --db-flush-ms, passed explicitly
const MARGIN_MS = 1800; // the writer's commit, on a busy machine with a sanitizer build: a timeout
const WINDOW_MS = FLUSH_MS + MARGIN_MS;
const KILL_MIN_MS = WINDOW_MS + 500; // so that some requests are older than the window at the kill
const KILL_MAX_MS = KILL_MIN_MS + 2500;

D.main('db_durability', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const model = D.makeModel(bin, vocab, [], 'dbdur-model');
  const dir = D.tmpDir('dbdur');
  const db = `${dir}/log.db`;
  const latest = D.latestVersion(bin, vocab, dir);
  const args = ['--db', db, '--db-flush-ms', String(FLUSH_MS), '--no-request-log'];
  let migrationsAtFirst = null;
  const totals = { checked: 0, recentThere: 0, recentMissing: 0, doneNotSeen: 0, rowsTotal: 0 };

  for (let run = 0; run < RUNS; run++) {
    const srv = await D.startServer(bin, vocab, model, args);
    const applied = /applied \d+ migration/.test(srv.stderr);
    const sm = D.q(db, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
    D.eq(D.scalar(db, 'PRAGMA user_version'), latest, `run ${run}: user_version`);
    D.eq(sm.length, latest, `run ${run}: schema_migrations rows`);
    if (run === 0) {
      D.check(applied, () => `run 0: a new file and no "applied N migration(s)" line: ${srv.stderr}`);
      migrationsAtFirst = JSON.stringify(sm);
    } else {
      D.check(!applied, () => `run ${run}: the restart applied migrations again: ${srv.stderr}`);
      D.eq(JSON.stringify(sm), migrationsAtFirst, `run ${run}: schema_migrations (versions, names, applied_at) since the first start`);
    }
    const m0 = await D.dbMetrics(srv.port);
    D.eq(m0.up, 1, `run ${run}: inflight_db_up after the (re)start`);
    const rowsBefore = D.scalar(db, 'SELECT count(*) FROM requests');

    const clients = await Promise.all(Array.from({ length: N_CLIENTS }, (_, i) => D.Client.open(srv.port, { name: `r${run}c${i}` })));
    const streams = clients.map((c, i) => D.streamer(c, { prefix: `q${i}-`, depth: 2,
      params: { max_tokens: 4 + (i % 4) * 4, model: i % 2 ? 'static' : 'iterative' } }));
    // "into the load": from the first done frame (a sanitizer build takes a while to get going)
    await D.until(() => streams.some((s) => s.done.size > 0), 60000, `run ${run}: the first done frame`);
    const delay = KILL_MIN_MS + Math.random() * (KILL_MAX_MS - KILL_MIN_MS);
    await D.sleep(delay);
    const mBefore = await D.dbMetrics(srv.port);
    srv.assertAlive();
    const killAt = D.now();
    const ex = await D.killServer(srv, 'SIGKILL', 10000);
    D.eq(ex.signal, 'SIGKILL', `run ${run}: the server's end`);
    await Promise.all(streams.map((s) => s.stop()));
    await Promise.all(clients.map((c) => D.withTimeout(c.closed, 10000, `${c.name} to see the connection end`)));

    for (const st of streams) D.check(st.errors.length === 0, `run ${run}: error frames: ${JSON.stringify(st.errors.slice(0, 3))}`);
    const ic = D.integrityCheck(db);
    D.check(ic.ok, `run ${run}: PRAGMA integrity_check after SIGKILL: ${ic.out}`);
    const rows = D.q(db, 'SELECT s.session, r.client_id, r.completion_tokens, r.finish_reason, r.completion FROM requests r ' +
      'JOIN sessions s ON s.id = r.session_id');
    const sessions = new Set(clients.map((c) => c.hello.session));
    const inDb = new Map();
    for (const r of rows) if (sessions.has(r.session)) inDb.set(`${r.session}/${r.client_id}`, r);
    const rowsThisRun = D.scalar(db, 'SELECT count(*) FROM requests') - rowsBefore;
    D.eq(inDb.size, rowsThisRun, `run ${run}: rows of this run's sessions vs the rows added`);
    // what the log had committed (by its own count) just before the kill survives it
    const committed = mBefore.written.request - m0.written.request;
    D.check(rowsThisRun >= committed, `run ${run}: ${rowsThisRun} rows after the kill, but the log had written ${committed} request records before it`);

    let checked = 0;
    let recentThere = 0;
    let recentMissing = 0;
    let done = 0;
    const missing = [];
    const sent = new Set();
    for (let i = 0; i < streams.length; i++) {
      const s = streams[i];
      const sess = clients[i].hello.session;
      for (const rec of s.sent) {
        const key = `${sess}/${rec.id}`;
        sent.add(key);
        if (rec.doneAt === undefined) continue;
        done++;
        const row = inDb.get(key);
        if (rec.doneAt < killAt - WINDOW_MS) {
          checked++;
          if (!row) missing.push(`${key} (done ${(killAt - rec.doneAt).toFixed(0)} ms before the kill)`);
          else {
            D.eq(row.completion_tokens, rec.tokens, `${key} completion_tokens`);
            D.eq(row.completion, rec.text, `${key} completion`);
            D.eq(row.finish_reason, rec.done.finish_reason, `${key} finish_reason`);
          }
        } else if (row) recentThere++;
        else recentMissing++;
      }
    }
    let notSeen = 0;
    for (const k of inDb.keys()) {
      D.check(sent.has(k), `run ${run}: a row for ${k}, which no client sent`);
      const [sess, id] = k.split('/');
      const i = clients.findIndex((c) => c.hello.session === sess);
      if (!streams[i].done.has(id)) notSeen++; // written, but its done frame never arrived (the kill)
    }
    D.check(missing.length === 0, () => `run ${run}: ${missing.length} of ${checked} requests done more than ${WINDOW_MS} ms before the kill ` +
      `are not in the database: ${missing.slice(0, 10).join(', ')}`);
    D.check(checked > 0, `run ${run}: no request finished ${WINDOW_MS} ms before the kill: nothing checked`);
    D.log(`run ${run}: SIGKILL ${delay.toFixed(0)} ms into the load (metrics just before: ${D.fmtMetrics(mBefore)}); ` +
      `${done} done frames; ${committed} written by the log's count before the kill, ${rowsThisRun} rows; ` +
      `${checked} done > ${WINDOW_MS} ms before the kill: all in the database; ` +
      `inside the window: ${recentThere} there, ${recentMissing} not; ${notSeen} rows whose done frame never arrived; integrity ok`);
    totals.checked += checked;
    totals.recentThere += recentThere;
    totals.recentMissing += recentMissing;
    totals.doneNotSeen += notSeen;
  }

  // once more: the restarted server writes, and stops cleanly
  const srv = await D.startServer(bin, vocab, model, args);
  D.check(!/applied \d+ migration/.test(srv.stderr), () => `the last restart applied migrations again: ${srv.stderr}`);
  D.eq(JSON.stringify(D.q(db, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version')), migrationsAtFirst,
    'schema_migrations at the last restart');
  const c = await D.Client.open(srv.port, { name: 'last' });
  const r = await c.request({ id: 'final', prompt: 'After the crashes', max_tokens: 6, seed: 9, ignore_eos: true });
  D.check(r.done, 'the last request ended with done');
  const m = await D.waitDrained(srv.port);
  D.eq(m.errors, 0, 'write errors after the restart');
  const row = D.q(db, `SELECT r.completion FROM requests r JOIN sessions s ON s.id = r.session_id WHERE s.session = ${D.sqlStr(c.hello.session)} AND r.client_id = 'final'`);
  D.eq(row.length, 1, 'the last request in the database (read while the server runs)');
  D.eq(row[0].completion, r.text, 'its completion');
  c.close();
  await c.closed;
  await srv.stop();
  const ic = D.integrityCheck(db);
  D.check(ic.ok, `PRAGMA integrity_check after the last clean stop: ${ic.out}`);
  totals.rowsTotal = D.scalar(db, 'SELECT count(*) FROM requests');
  D.log(`${RUNS} crashes: ${totals.checked} requests done > ${WINDOW_MS} ms (flush ${FLUSH_MS} + margin ${MARGIN_MS}) before a kill, all found; ` +
    `inside the window ${totals.recentThere} found, ${totals.recentMissing} not; ${totals.doneNotSeen} written without the client seeing done; ` +
    `${totals.rowsTotal} requests in the file, integrity ok after each kill and at the end; no migration re-applied`);
});
