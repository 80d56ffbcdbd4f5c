'use strict';
// db_migrations: the schema migrations (migrations/NNNN_*.sql, embedded in the binary).
//  (a) a new (empty) file: `inflight db migrate` brings it to the latest version N (N = the
//      migrations the binary has = migrations/*.sql); `inflight db status` says "up to date";
//      user_version N; schema_migrations has one row per version with its file name; the tables
//      exist. A second migrate applies nothing and leaves schema_migrations as it was.
//  (b) each earlier version k (1..N-1), on a fresh file: `inflight db migrate --to k` (user_version
//      k, only k rows in schema_migrations, `db status` says pending), then rows valid at version k
//      written with the sqlite3 shell (DATA below: a closed session and a finished request for v1,
//      plus their token offsets and a step for v2, ...). Then the file is upgraded, once by
//      `inflight db migrate` and once (a copy) by starting `inflight serve --db` on it (stopped with
//      SIGTERM): version N, every row kept with the same values in the columns it had, the rows of
//      schema_migrations 1..k unchanged (applied_at too) and k+1..N added, and the schema (tables,
//      columns, indexes) the same as a file migrated from empty.
//  (c) a file at user_version N+1 (a newer binary's): `inflight db migrate` exits 1 naming the
//      version; `inflight db status` does not call it up to date; `inflight serve --db` exits
//      non-zero at start with a message naming the version, and does not change the file (bytes
//      and user_version).
//  (d) a file that is not a database (random bytes): `inflight db migrate` and `inflight db status`
//      fail with a message saying so and leave the file alone; `inflight serve --db` on it refuses
//      to start, naming the problem, and leaves the file byte for byte as it was.
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const D = require('./dblib');

// Representative rows valid at each version (applied cumulatively: version k gets DATA[1..k]).
const NOW = Date.now();
const DATA = {
  1: `INSERT INTO sessions (id, session, user_key, remote_addr, user_agent, connected_at, closed_at, close_reason)
        VALUES (1, '00112233445566ff', '${'ab'.repeat(32)}', '127.0.0.1', 'test-agent/1.0', ${NOW - 5000}.25, ${NOW - 1000}.5, 'client 1000');
      INSERT INTO sessions (id, session, connected_at) VALUES (2, '0123456789abcdef', ${NOW - 900}.125);
      INSERT INTO requests (id, session_id, client_id, policy, prompt, params, prompt_tokens, completion_tokens,
          completion, finish_reason, error_code, queued_at, admitted_at, first_token_at, finished_at, queue_ms, ttft_ms,
          total_ms, tokens_per_s)
        VALUES (1, 1, 'a1', 'iterative', 'Hello world', '{"max_tokens":3,"temperature":0.8,"top_k":40,"top_p":0.95,"seed":7,"stop":[],"ignore_eos":true}',
          2, 3, ' one two three', 'length', NULL, ${NOW - 4000}.5, ${NOW - 3999}.5, ${NOW - 3990}.5, ${NOW - 3980}.5, 1.0, 10.0, 20.0, 150.0);
      INSERT INTO requests (id, session_id, client_id, policy, prompt, params, completion_tokens, error_code, queued_at)
        VALUES (2, 1, 'a1', 'static', 'dup', '{}', 0, 'duplicate_id', ${NOW - 3995}.75);`,
  2: `INSERT INTO request_tokens (request_id, n_tokens, offsets_us) VALUES (1, 3, X'10270000803801002C4C0100');
      INSERT INTO steps (id, at, policy, step, batch_size, prefill_tokens, decode_tokens, step_ms, running, waiting, kv_used)
        VALUES (1, ${NOW - 3999}.5, 'iterative', 1, 1, 2, 0, 0.5, 1, 0, 1);`,
};

function sha(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

function rmDb(f) {
  for (const x of [f, `${f}-wal`, `${f}-shm`]) fs.rmSync(x, { force: true });
}

function userVersion(db) {
  return D.scalar(db, 'PRAGMA user_version');
}

function tables(db) {
  return D.q(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").map((r) => r.name);
}

// The schema as a comparable list: every table's columns (name, type, notnull, default, pk) and
// every index (table, columns, unique).
function schemaOf(db) {
  const out = [];
  for (const t of tables(db)) {
    const cols = D.q(db, `PRAGMA table_info(${t})`).map((c) => `${c.name} ${c.type} nn${c.notnull} d${c.dflt_value} pk${c.pk}`);
    out.push(`table ${t}: ${cols.join(', ')}`);
    const fks = D.q(db, `PRAGMA foreign_key_list(${t})`).map((f) => `${f.from}->${f.table}.${f.to} ${f.on_delete}`);
    if (fks.length) out.push(`fk ${t}: ${fks.join(', ')}`);
  }
  for (const ix of D.q(db, "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name")) {
    const cols = D.q(db, `PRAGMA index_info(${ix.name})`).map((c) => c.name);
    out.push(`index ${ix.name} on ${ix.tbl_name}(${cols.join(', ')})`);
  }
  return out;
}

// Every table's rows (all columns, blobs as hex), by table.
function dump(db) {
  const out = {};
  for (const t of tables(db)) {
    const cols = D.q(db, `PRAGMA table_info(${t})`);
    const sel = cols.map((c) => (c.type.toUpperCase() === 'BLOB' ? `hex(${c.name}) AS ${c.name}` : c.name)).join(', ');
    out[t] = { cols: cols.map((c) => c.name), sel, rows: D.q(db, `SELECT ${sel} FROM ${t} ORDER BY rowid`) };
  }
  return out;
}

function migrate(bin, vocab, db, to) {
  const r = D.inflightDb(bin, vocab, ['migrate', '--db', db, ...(to ? ['--to', String(to)] : [])]);
  D.check(r.status === 0, `inflight db migrate --db ${db}${to ? ` --to ${to}` : ''}: status ${r.status}: ${r.out}`);
  return r;
}

// serve --db on the file, stopped with SIGTERM once ready; returns the server's stderr.
async function serveOnce(bin, vocab, model, db) {
  const srv = await D.startServer(bin, vocab, model, ['--db', db, '--no-request-log']);
  const m = await D.dbMetrics(srv.port);
  D.eq(m.up, 1, `serve --db ${path.basename(db)}: inflight_db_up`);
  await srv.stop();
  return srv.stderr;
}

// Starts `inflight serve` and waits for it to exit by itself (at most timeoutMs); returns
// {status, signal, out}. A server that keeps running is killed and reported as such.
function serveExpectExit(bin, vocab, model, args, timeoutMs = 30000) {
  const r = spawnSync(bin, ['serve', '--model', model, '--vocab', vocab, '--port', '0', '--host', '127.0.0.1', ...args],
    { env: D.childEnv(vocab), encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGKILL' });
  return { status: r.status, signal: r.signal, out: ((r.stdout || '') + (r.stderr || '')).trim(), timedOut: !!(r.error && r.error.code === 'ETIMEDOUT') };
}

D.main('db_migrations', async () => {
  const { bin, vocab } = D.parseArgs();
  D.requireSqlite3();
  const dir = D.tmpDir('dbmig');
  const model = D.makeModel(bin, vocab, [], 'dbmig-model');
  const N = D.latestVersion(bin, vocab, dir);
  const names = fs.readdirSync(path.join(D.REPO, 'migrations')).filter((x) => /^\d{4}_.*\.sql$/.test(x)).sort();
  D.log(`the binary has ${N} migrations: ${names.join(', ')}`);
  D.check(N >= 1, 'no migrations');

  // ---- (a) ----
  const fresh = path.join(dir, 'fresh.db');
  fs.writeFileSync(fresh, ''); // an empty file, as a user might create it
  const m1 = migrate(bin, vocab, fresh);
  D.eq(userVersion(fresh), N, '(a) user_version after migrate');
  const st = D.inflightDb(bin, vocab, ['status', '--db', fresh]);
  D.eq(st.status, 0, `(a) inflight db status exit (${st.out})`);
  D.check(/up to date/.test(st.out), `(a) inflight db status does not say up to date:\n${st.out}`);
  const sm = D.q(fresh, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
  D.eq(JSON.stringify(sm.map((r) => [r.version, r.name])), JSON.stringify(names.map((n, i) => [i + 1, n])), '(a) schema_migrations versions and names');
  for (const r of sm) D.check(Math.abs(r.applied_at - Date.now()) < 600000, `(a) applied_at ${r.applied_at} of version ${r.version} is not now`);
  const freshTables = tables(fresh);
  for (const t of ['sessions', 'requests', 'schema_migrations']) D.check(freshTables.includes(t), `(a) no table ${t} (${freshTables})`);
  if (N >= 2) for (const t of ['request_tokens', 'steps']) D.check(freshTables.includes(t), `(a) no table ${t} (${freshTables})`);
  const freshSchema = schemaOf(fresh);
  const m2 = migrate(bin, vocab, fresh);
  D.eq(JSON.stringify(D.q(fresh, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version')), JSON.stringify(sm),
    '(a) schema_migrations after a second migrate');
  D.log(`(a) empty file: ${JSON.stringify(m1.out)}; again: ${JSON.stringify(m2.out)}; tables ${freshTables.join(', ')}; status says up to date`);

  // ---- (b) ----
  for (let k = 1; k < N; k++) {
    const base = path.join(dir, `v${k}.db`);
    migrate(bin, vocab, base, k);
    D.eq(userVersion(base), k, `(b v${k}) user_version after --to ${k}`);
    const smk = D.q(base, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
    D.eq(smk.length, k, `(b v${k}) schema_migrations rows after --to ${k}`);
    const stk = D.inflightDb(bin, vocab, ['status', '--db', base]);
    D.check(!/up to date/.test(stk.out) && /pending/.test(stk.out), `(b v${k}) inflight db status of a v${k} file:\n${stk.out}`);
    let inserted = 0;
    for (let j = 1; j <= k; j++) {
      if (!DATA[j]) continue;
      D.exec(base, DATA[j]);
      inserted++;
    }
    D.check(inserted > 0, `(b v${k}) no representative data for version ${k}`);
    const before = dump(base);
    const viaMigrate = path.join(dir, `v${k}-migrate.db`);
    const viaServe = path.join(dir, `v${k}-serve.db`);
    D.exec(base, `VACUUM INTO ${D.sqlStr(viaMigrate)}`);
    D.exec(base, `VACUUM INTO ${D.sqlStr(viaServe)}`);
    D.eq(userVersion(viaServe), k, `(b v${k}) the copy's user_version`);

    const mr = migrate(bin, vocab, viaMigrate);
    const serr = await serveOnce(bin, vocab, model, viaServe);
    D.check(new RegExp(`applied ${N - k} migration`).test(serr), `(b v${k}) serve --db did not say it applied ${N - k} migration(s): ${serr}`);
    for (const [how, f] of [['db migrate', viaMigrate], ['serve --db', viaServe]]) {
      const w = `(b v${k} via ${how})`;
      D.eq(userVersion(f), N, `${w} user_version`);
      const smN = D.q(f, 'SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
      D.eq(JSON.stringify(smN.map((r) => [r.version, r.name])), JSON.stringify(names.map((n, i) => [i + 1, n])), `${w} schema_migrations`);
      D.eq(JSON.stringify(smN.slice(0, k)), JSON.stringify(smk), `${w} schema_migrations rows 1..${k} (applied_at unchanged)`);
      for (const t of Object.keys(before)) {
        if (t === 'schema_migrations') continue;
        const after = D.q(f, `SELECT ${before[t].sel} FROM ${t} ORDER BY rowid`);
        let want = before[t].rows;
        if (t === 'sessions' && how === 'serve --db') {
          // the server closes the sessions a previous run left open (at their last request's end,
          // here their connected_at: no requests), so that retention can remove them
          want = want.map((r) => (r.closed_at === null
            ? { ...r, closed_at: r.connected_at, close_reason: 'the server stopped without closing it' } : r));
        }
        D.eq(JSON.stringify(after), JSON.stringify(want), `${w} rows of ${t} (columns ${before[t].cols.join(',')})`);
      }
      D.eq(JSON.stringify(schemaOf(f)), JSON.stringify(freshSchema), `${w} schema vs a file migrated from empty`);
      const ic = D.integrityCheck(f);
      D.check(ic.ok, `${w} integrity_check: ${ic.out}`);
      const fk = D.q(f, 'PRAGMA foreign_key_check');
      D.eq(fk.length, 0, `${w} foreign_key_check`);
    }
    const counts = Object.entries(before).filter(([t]) => t !== 'schema_migrations').map(([t, v]) => `${t} ${v.rows.length}`).join(', ');
    D.log(`(b v${k}) -> v${N}: ${JSON.stringify(mr.out)}; serve --db applied ${N - k}; rows kept (${counts}); schema = fresh v${N}; ` +
      `schema_migrations 1..${k} unchanged`);
  }

  // ---- (c) ----
  const newer = path.join(dir, 'newer.db');
  migrate(bin, vocab, newer);
  D.exec(newer, `INSERT INTO sessions (session, connected_at) VALUES ('fedcba9876543210', ${NOW}); PRAGMA user_version = ${N + 1};`);
  D.eq(userVersion(newer), N + 1, '(c) user_version set');
  const h0 = sha(newer);
  const cm = D.inflightDb(bin, vocab, ['migrate', '--db', newer]);
  D.eq(cm.status, 1, `(c) inflight db migrate on a v${N + 1} file: exit status (${cm.out})`);
  D.check(new RegExp(`\\b${N + 1}\\b`).test(cm.out), `(c) the message does not name version ${N + 1}: ${cm.out}`);
  const cs = D.inflightDb(bin, vocab, ['status', '--db', newer]);
  D.check(!/up to date/.test(cs.out), `(c) inflight db status calls a v${N + 1} file up to date: ${cs.out}`);
  const sv = serveExpectExit(bin, vocab, model, ['--db', newer]);
  D.check(!sv.timedOut, `(c) inflight serve --db on a v${N + 1} file kept running (killed after 30 s): ${sv.out}`);
  D.check(sv.status !== 0 && sv.status !== null, `(c) inflight serve --db on a v${N + 1} file: exit ${sv.status} signal ${sv.signal}: ${sv.out}`);
  D.check(new RegExp(`\\b${N + 1}\\b`).test(sv.out) && /newer/.test(sv.out), `(c) serve's message does not name version ${N + 1} as newer: ${sv.out}`);
  D.eq(userVersion(newer), N + 1, '(c) user_version after the refusals');
  D.eq(sha(newer), h0, '(c) the file\'s bytes after the refusals');
  D.eq(D.scalar(newer, 'SELECT count(*) FROM sessions'), 1, '(c) its rows');
  D.log(`(c) v${N + 1} file: db migrate exit 1: ${JSON.stringify(cm.out)}; db status (exit ${cs.status}): ${JSON.stringify(cs.out.split('\n')[0])}; ` +
    `serve exit ${sv.status}: ${JSON.stringify(sv.out.split('\n').filter((l) => /newer|version/.test(l)).join(' | '))}; file unchanged`);

  // ---- (d) ----
  const junk = path.join(dir, 'junk.db');
  fs.writeFileSync(junk, crypto.randomBytes(64 * 1024));
  const hj = sha(junk);
  for (const sub of ['migrate', 'status']) {
    const r = D.inflightDb(bin, vocab, [sub, '--db', junk]);
    D.check(r.status !== 0 && r.status !== null, `(d) inflight db ${sub} on random bytes: exit ${r.status}: ${r.out}`);
    D.check(/not a database/.test(r.out), `(d) inflight db ${sub}: the message does not say "not a database": ${r.out}`);
    D.eq(sha(junk), hj, `(d) the file after inflight db ${sub}`);
    D.log(`(d) inflight db ${sub} on random bytes: exit ${r.status}: ${JSON.stringify(r.out)}`);
  }
  // serve refuses to start on it (retrying cannot help), names the problem, leaves the file alone
  const proc = D.spawnTracked(bin, ['serve', '--model', model, '--vocab', vocab, '--port', '0', '--host', '127.0.0.1', '--db', junk],
    { env: D.childEnv(vocab) });
  const outcome = await Promise.race([
    proc.exited.then((e) => ({ exited: e })),
    D.until(() => /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(proc.out), 60000, 'serve to exit or listen').then((m) => ({ port: Number(m[1]) })),
  ]);
  D.check(!!outcome.exited, `(d) serve --db on random bytes started listening instead of refusing: ${proc.out}${proc.err}`);
  if (!outcome.exited) proc.kill('SIGKILL');
  D.check(outcome.exited && outcome.exited.code !== 0, `(d) serve --db on random bytes exited 0: ${proc.out}${proc.err}`);
  D.check(/not a database/.test(proc.err + proc.out), `(d) serve's message does not say "not a database": ${proc.err}`);
  D.log(`(d) serve --db on random bytes: refused, exit ${outcome.exited && outcome.exited.code}: ${JSON.stringify(proc.err.trim())}`);
  D.eq(sha(junk), hj, '(d) the file after serve');
  D.check(!fs.existsSync(`${junk}-wal`) || fs.statSync(`${junk}-wal`).size === 0, '(d) a WAL file next to the random bytes');
});
