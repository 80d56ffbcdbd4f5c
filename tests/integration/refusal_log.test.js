'use strict';
// refusal_log: refused requests cost the sender nothing, so the request log (--db) keeps only a
// budget of them per client address and across all clients (server/reqlog.h), whatever the number
// of connections they come on; the rest are counted in inflight_request_log_refusals_skipped_total
// and summed up on stderr. A connection whose requests were all refused and not logged writes no
// sessions row. Accepted requests are always logged, with their session.
//   A. 3,000 refused 60 KB OpenAI requests (prompt_too_long), each on a fresh connection from
//      127.0.0.1, while a well-behaved client on the same address sends accepted ones (fresh
//      connections and a keep-alive one): at most the address's budget of refused rows.
//   C. /ws: three connections from 127.0.0.3, 100 refused requests each: one address's budget.
//   B. 1,500 more, each on a fresh connection, spread over 150 addresses 127.0.0.10-159: each
//      address is within its own budget, the global one holds.
//   D. after the floods, one refusal from the untouched 127.0.0.2 is logged, with its session.
// The log is read after SIGTERM (the writer flushes) with the sqlite3 shell.
const http = require('http');
const path = require('path');
const L = require('./lib');
const D = require('../db/dblib');

// server/reqlog.h
const ADDR_BURST = 20;
const ADDR_PER_S = 1;
const ALL_BURST = 200;
const ALL_PER_S = 20;

const FLOOD_A = L.QUICK ? 600 : 3000;
const FLOOD_B = L.QUICK ? 600 : 1500;
const CONCURRENCY = 16;
const B_ADDRS = 150;
const WS_CONNS = 3;
const WS_REQS = 100;
const FILLER = ' a'.repeat(30000); // 60 KB: over the model's context, under --max-message

// POST /v1/completions on a fresh connection (agent: false) from localAddress; resolves with the
// status.
function post(port, body, localAddress, agent = false) {
  const data = JSON.stringify({ model: 'iterative-gpt2', ...body });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      localAddress, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } },
    (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.setTimeout(60000, () => req.destroy(new Error('POST /v1/completions: timeout')));
    req.on('error', reject);
    req.end(data);
  });
}

// n refused requests, CONCURRENCY at a time; addr(i) is the i-th one's source address.
async function flood(port, tag, n, addr) {
  let next = 0;
  const statuses = new Map();
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const r = await post(port, { prompt: `${tag} ${i}${FILLER}`, max_tokens: 1 }, addr(i));
      statuses.set(r.status, (statuses.get(r.status) || 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return statuses;
}

// The well-behaved client: accepted requests from 127.0.0.1 until stop(), every other one on a
// fresh connection, the rest on one keep-alive connection.
function wellBehaved(port) {
  const keep = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const st = { sent: [], bad: [], stopped: false };
  st.done = (async () => {
    for (let i = 0; !st.stopped || i < 4; i++) {
      const prompt = `well-behaved ${i}`;
      const r = await post(port, { prompt, max_tokens: 2 }, '127.0.0.1', i % 2 ? keep : false);
      if (r.status !== 200) st.bad.push(`${prompt}: ${r.status} ${r.body.slice(0, 200)}`);
      st.sent.push(prompt);
      await L.sleep(150);
    }
    keep.destroy();
  })();
  return st;
}

async function wsFlood(port) {
  const clients = [];
  for (let k = 0; k < WS_CONNS; k++) {
    const c = await L.Client.open(port, { name: `ws${k}`, wsOptions: { localAddress: '127.0.0.3' } });
    for (let i = 0; i < WS_REQS; i++)
      c.send({ type: 'generate', id: `w${k}-${i}`, prompt: `W ${k} ${i}${FILLER}`, max_tokens: 1 });
    await c.waitEnd(`w${k}-${WS_REQS - 1}`, 120000);
    clients.push(c);
  }
  for (const c of clients) c.close();
  await Promise.all(clients.map((c) => c.closed));
  return clients.map((c) => c.hello.session);
}

L.main('refusal_log', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3();
  const dir = L.tmpDir('refusal_log');
  const db = path.join(dir, 'log.db');
  const model = L.makeModel(bin, vocab);
  const srv = await L.startServer(bin, vocab, model, ['--db', db]);
  const t0 = L.now();

  const good = wellBehaved(srv.port);
  const sa = await flood(srv.port, 'A', FLOOD_A, () => '127.0.0.1');
  const tA = (L.now() - t0) / 1000;
  L.log(`A: ${FLOOD_A} refused requests from 127.0.0.1 on fresh connections in ${tA.toFixed(1)} s: ` +
    `${JSON.stringify(Object.fromEntries(sa))}`);
  L.eq(sa.get(400), FLOOD_A, 'A: answered 400 (prompt_too_long)');
  const tC0 = L.now();
  const wsSessions = await wsFlood(srv.port);
  const tC = (L.now() - tC0) / 1000;
  L.log(`C: ${WS_CONNS * WS_REQS} refused requests on ${WS_CONNS} /ws connections from 127.0.0.3 in ${tC.toFixed(1)} s`);
  const tB0 = L.now();
  const sb = await flood(srv.port, 'B', FLOOD_B, (i) => `127.0.0.${10 + (i % B_ADDRS)}`);
  const tB = (L.now() - tB0) / 1000;
  L.log(`B: ${FLOOD_B} refused requests over ${B_ADDRS} addresses in ${tB.toFixed(1)} s`);
  L.eq(sb.get(400), FLOOD_B, 'B: answered 400 (prompt_too_long)');
  good.stopped = true;
  await good.done;
  await L.sleep(1500); // the global budget refills (20 a second)
  L.check(good.bad.length === 0, () => `the well-behaved client was refused:\n  ${good.bad.join('\n  ')}`);
  const lone = await post(srv.port, { prompt: `D 0${FILLER}`, max_tokens: 1 }, '127.0.0.2');
  L.eq(lone.status, 400, 'D: the refusal from 127.0.0.2');
  const elapsed = (L.now() - t0) / 1000;
  const m = await L.fetchMetrics(srv.port);
  const refused = m.get('inflight_errors_total', { code: 'prompt_too_long' });
  const skipped = m.get('inflight_request_log_refusals_skipped_total');
  srv.assertAlive();
  await srv.stop(60000);

  const count = (sql) => Number(D.scalar(db, sql));
  const rowsA = count("SELECT count(*) FROM requests WHERE error_code = 'prompt_too_long' AND prompt LIKE 'A %'");
  const boundA = ADDR_BURST + ADDR_PER_S * tA + 2;
  L.check(rowsA <= boundA, () => `A: ${rowsA} refused rows from one address in ${tA.toFixed(1)} s: over its budget of ${boundA.toFixed(0)}`);
  const rowsB = count("SELECT count(*) FROM requests WHERE error_code = 'prompt_too_long' AND prompt LIKE 'B %'");
  const boundB = ALL_BURST + ALL_PER_S * tB + 2;
  L.check(rowsB <= boundB, () => `B: ${rowsB} refused rows from ${B_ADDRS} addresses in ${tB.toFixed(1)} s: over the global budget of ${boundB.toFixed(0)}`);
  const rowsC = count("SELECT count(*) FROM requests WHERE error_code = 'prompt_too_long' AND prompt LIKE 'W %'");
  const boundC = ADDR_BURST + ADDR_PER_S * tC + 2;
  L.check(rowsC <= boundC, () => `C: ${rowsC} refused /ws rows from 127.0.0.3 on ${WS_CONNS} connections in ${tC.toFixed(1)} s: over its budget of ${boundC.toFixed(0)}`);
  const logged = count("SELECT count(*) FROM requests WHERE error_code = 'prompt_too_long'");
  L.check(logged <= ALL_BURST + ALL_PER_S * elapsed + 2, () => `${logged} refused rows in ${elapsed.toFixed(1)} s: over the global budget`);
  L.eq(logged + skipped, refused, 'refused rows + refusals not logged, against the server\'s prompt_too_long count');
  L.check(rowsA > 0 && rowsB > 0 && rowsC > 0, `each flood has rows (A ${rowsA}, B ${rowsB}, C ${rowsC})`);
  // D: an address that sent nothing before has its own budget (and the global one has refilled)
  const d = D.q(db, "SELECT s.remote_addr AS addr FROM requests r JOIN sessions s ON s.id = r.session_id WHERE r.prompt LIKE 'D %'");
  L.eq(JSON.stringify(d), JSON.stringify([{ addr: '127.0.0.2' }]), 'D: the lone refusal\'s row and its session');
  // no session without a request, apart from the /ws ones (written at the upgrade)
  const ws = wsSessions.map(D.sqlStr).join(',');
  const empty = count(`SELECT count(*) FROM sessions s WHERE s.session NOT IN (${ws}) AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.session_id = s.id)`);
  const sessions = count('SELECT count(*) FROM sessions');
  L.eq(empty, 0, `HTTP sessions rows without a request row (of ${sessions} sessions rows)`);
  // every accepted request is logged, finished, in its session
  const rows = D.q(db, "SELECT r.prompt, r.finish_reason AS f, s.remote_addr AS addr FROM requests r JOIN sessions s ON s.id = r.session_id WHERE r.prompt LIKE 'well-behaved %'");
  const byPrompt = new Map(rows.map((r) => [r.prompt, r]));
  for (const p of good.sent) {
    const r = byPrompt.get(p);
    L.check(r, `no row (with its session) for the accepted request "${p}"`);
    L.eq(`${r.f} ${r.addr}`, 'length 127.0.0.1', `"${p}": finish_reason and remote_addr`);
  }
  L.eq(rows.length, good.sent.length, 'rows of the well-behaved client');
  L.check(/inflight: request log: \d+ refused requests? not logged/.test(srv.stderr),
    () => `no summary line on stderr:\n${L.tail(srv.stderr, 2000)}`);
  const ic = D.integrityCheck(db);
  L.check(ic.ok, () => `integrity_check: ${ic.out}`);
  L.log(`request log: ${logged} of ${refused} refusals kept (A ${rowsA} <= ${boundA.toFixed(0)}, B ${rowsB} <= ${boundB.toFixed(0)}, ` +
    `C ${rowsC} <= ${boundC.toFixed(0)}, D 1), ${skipped} in inflight_request_log_refusals_skipped_total; ` +
    `${sessions} sessions rows; ${good.sent.length} of ${good.sent.length} accepted requests logged; ${elapsed.toFixed(1)} s`);
}, { deadlineS: 300 });
