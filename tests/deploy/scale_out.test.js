'use strict';
// scale_out: three `inflight serve` replicas behind a real nginx running docker/nginx.conf as it is
// shipped (the test's directory holds a symlink to it, and writes the two files it includes:
// nginx-upstreams.conf with the replicas' loopback ports, the server parameters copied from
// docker/nginx-upstreams.conf, and nginx-listen.conf with a free loopback port).
//
//  1. Host and Origin through the proxy: a page's own origin (Origin = the proxy's host:port) and
//     a public name given to the replicas with --allowed-hosts are served; a foreign Origin (1008
//     before hello) and an unknown Host (403) are still refused by the replicas; a Host without
//     its port (what `proxy_set_header Host $host` would send) would refuse the page's own origin.
//  2. Wave 1: 60 user keys x 5 WebSocket clients (/ws?user=KEY), one 8-token generate each
//     (ignore_eos), and 50 streamed /v1/completions through the official `openai` package, 25 with
//     `X-Inflight-User: KEY` (one of the 60 keys) and 25 without: every one ends with exactly 8
//     tokens. Then, from the replicas' own SQLite logs (--db, one per replica): each key's sessions
//     (sessions.user_key = SHA-256 of the key) are all on one replica, each client's hello session
//     is in that replica's log, each keyed OpenAI request is on its key's replica; figures per
//     replica. GET /api/history?user=KEY through the proxy answers each key's 5 requests.
//  3. Wave 2: 60 keys x 2 clients and 30 clients without a key, each generating 16-token requests
//     back to back, and 4 long OpenAI streams keyed to the victim's keys; the replica with the
//     most keys is killed with SIGKILL while all run, and the survivors' clients stop after the
//     request they have in flight (which ends complete). The victim's clients, exactly them, see
//     their connection close; each reconnects (with its key) after a short random backoff, sends
//     the interrupted request again (same id) and gets all its tokens from a survivor. Then 30 new
//     connections (20 with the moved keys). Keys of the survivors stay where they were
//     (consistent hashing); each moved key sticks to one survivor, and its history through the
//     proxy is now what it ran there. The OpenAI streams cut by the kill were not resent by nginx
//     (their prompt is in no survivor's log). nginx's access log ($upstream_addr etc., the
//     log_format of docker/nginx.conf): a request that reached the replica between kill() and its
//     end was a GET passed on to a survivor, or a POST answered 502 and not resent; after its end,
//     connection attempts on the dead address are at most what max_fails allows (per upstream
//     group and nginx worker, per fail_timeout window), each passed on to a survivor that
//     answered, and none in a group's fail_timeout after its max_fails-th failure. No request is
//     in two logs (client ids unique across the databases), every request a client saw end on a
//     survivor is in its log, none interrupted is anywhere but as its retry.
// About 12 s in a Release build on 2 cores (a minute with ASan). IFL_TEST_QUICK: a fifth of the
// clients. IFL_NGINX: the nginx binary (default: /usr/sbin/nginx, else the PATH's).
// Skipped (exit 77) without nginx or the sqlite3 shell, unless CI=true (then it fails).
const { spawnSync } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const D = require('../db/dblib');
const L = require('../integration/lib');
const { findNginx, freePort, shippedServerParams, parseLogLine, startNginx, workersOf } = require('./nginx');

const KEYS = L.QUICK ? 12 : 60;
const PER_KEY = 5;
const OPENAI_STREAMS = L.QUICK ? 10 : 50;
const W1_TOKENS = 8;
const W2_PER_KEY = 2;
const W2_ANON = L.QUICK ? 6 : 30;
const W2_TOKENS = 16;
const W2_OPENAI = 4;
const W2_OPENAI_TOKENS = 200; // long: in flight at the kill (the tiny model's context is 256)
const BURST = L.QUICK ? 9 : 30; // new connections after the failover, 2/3 with the dead replica's keys
const POOLS = 2; // upstream groups in nginx.conf that list every replica

function sha256(s) {
  return crypto.createHash('sha256').update(s).digest('hex');
}

function count(xs, f) {
  const m = new Map();
  for (const x of xs) {
    const k = f(x);
    m.set(k, (m.get(k) || 0) + 1);
  }
  return m;
}

// The server parameters of the shipped upstreams file (max_fails=... fail_timeout=...).
async function history(port, key) {
  const out = [];
  let before = null;
  for (;;) {
    const r = await L.httpRequest(port, `/api/history?user=${key}&limit=500${before ? `&before=${before}` : ''}`);
    L.eq(r.status, 200, 'GET /api/history status');
    const h = JSON.parse(r.body.toString('utf8'));
    out.push(...h.requests);
    if (h.next_before === null) return out;
    before = h.next_before;
  }
}

async function openaiStream(oa, { prompt, maxTokens, seed, key }) {
  const stream = await oa.completions.create({ model: 'iterative-gpt2', prompt, max_tokens: maxTokens, seed,
    temperature: 0.8, ignore_eos: true, stream: true, stream_options: { include_usage: true } },
  key ? { headers: { 'X-Inflight-User': key } } : {});
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

function checkOpenaiChunks(chunks, maxTokens, what) {
  L.check(chunks.length >= 2, `${what}: ${chunks.length} chunks`);
  const usage = chunks[chunks.length - 1];
  const body = chunks.slice(0, -1);
  L.eq(usage.choices.length, 0, `${what}: the usage chunk has no choices`);
  L.eq(usage.usage.completion_tokens, maxTokens, `${what}: usage.completion_tokens`);
  L.eq(body.length, maxTokens + 1, `${what}: chunks (one per token and the finish)`);
  L.eq(body[body.length - 1].choices[0].finish_reason, 'length', `${what}: finish_reason`);
  return usage.usage.completion_tokens;
}

L.main('scale_out', async () => {
  const { bin, vocab } = L.parseArgs();
  const nginx = findNginx();
  if (!nginx) L.cannotCheck('nginx is not installed (apt-get install nginx; IFL_NGINX=/path/to/nginx)', { exit: true });
  D.requireSqlite3();
  let OpenAI;
  try {
    OpenAI = require(path.join(L.REPO, 'node_modules', 'openai'));
    OpenAI = OpenAI.default || OpenAI.OpenAI || OpenAI;
  } catch (e) {
    L.cannotCheck(`the openai npm package is not installed (scripts/setup.sh installs it): ${e.message}`, { exit: true });
  }
  const v = spawnSync(nginx, ['-v'], { encoding: 'utf8' });
  L.log(`${nginx}: ${(v.stderr || '').trim()}`);

  // ---- replicas and the proxy ----------------------------------------------------------------
  const model = L.makeModel(bin, vocab, [], 'scale-model');
  const dir = L.tmpDir('scale');
  const PUBLIC = 'inflight.test';
  const replicas = await Promise.all([1, 2, 3].map(async (n) => {
    const db = path.join(dir, `replica${n}.db`);
    const srv = await L.startServer(bin, vocab, model, ['--db', db, '--threads', '1', '--max-connections', '1024',
      '--allowed-hosts', PUBLIC, '--no-request-log']);
    return { n, srv, db, addr: `127.0.0.1:${srv.port}`, name: `replica${n}` };
  }));
  const shipped = shippedServerParams();
  const port = await freePort();
  fs.symlinkSync(path.join(L.REPO, 'docker', 'nginx.conf'), path.join(dir, 'nginx.conf'));
  fs.writeFileSync(path.join(dir, 'nginx-upstreams.conf'),
    replicas.map((r) => `server ${r.addr} ${shipped.params};\n`).join(''));
  fs.writeFileSync(path.join(dir, 'nginx-listen.conf'), `listen 127.0.0.1:${port};\n`);
  const ng = await startNginx(nginx, dir);
  let passed = false;
  L.onCleanup(() => {
    if (!passed) console.error(`-- nginx stderr (tail) --\n${L.tail(ng.err, 4000)}`);
  });
  await L.until(async () => {
    if (ng.exited) L.fail(`nginx exited (${JSON.stringify(ng.exit)}):\n${ng.err}`);
    try {
      return (await L.httpRequest(port, '/readyz')).status === 200;
    } catch (e) {
      return false;
    }
  }, 20000, 'GET /readyz through nginx');
  const workers = workersOf(ng.pid);
  L.log(`nginx on 127.0.0.1:${port}, ${workers} workers, replicas ${replicas.map((r) => r.addr).join(' ')}, ` +
    `server parameters "${shipped.params}" (docker/nginx-upstreams.conf)`);
  const accessLog = () => ng.out.split('\n').map(parseLogLine).filter(Boolean);

  // ---- 1. Host and Origin through the proxy ----------------------------------------------------
  {
    const own = await L.Client.open(port, { name: 'own-origin', wsOptions: { origin: `http://127.0.0.1:${port}` } });
    L.eq(own.hello.type, 'hello', 'own origin through the proxy');
    own.close();
    const pub = await L.Client.open(port, { name: 'public-name',
      wsOptions: { origin: `http://${PUBLIC}:${port}`, headers: { Host: `${PUBLIC}:${port}` } } });
    pub.close();
    // refused by the replica: the upgrade closed with 1008 before any hello
    const refusedWs = async (p, wsOptions, what) => {
      const c = await L.Client.connect(p, { name: what, wsOptions });
      const ci = await L.withTimeout(c.closed, 10000, `${what}: the close`);
      L.eq(c.frames.length, 0, `${what}: frames before the close`);
      L.eq(ci.code, 1008, `${what}: close code (${ci.reason})`);
      return ci.reason;
    };
    const foreign = await refusedWs(port, { origin: 'http://evil.example' }, 'foreign Origin through the proxy');
    const badHost = await L.httpRequest(port, '/healthz', { headers: { Host: `evil.example:${port}` } });
    L.eq(badHost.status, 403, 'an unknown Host through the proxy');
    // what `proxy_set_header Host $host` (no port) would send: the page's own origin refused
    const portless = await refusedWs(replicas[0].srv.port, { origin: `http://127.0.0.1:${port}`,
      headers: { Host: '127.0.0.1' } }, 'Host without the port, Origin with it');
    L.log(`Host/Origin: own origin and ${PUBLIC} (--allowed-hosts) served through the proxy; refused by the replica ` +
      `through it: a foreign Origin (1008 "${foreign}"), an unknown Host (403); a Host without the port (what ` +
      `proxy_set_header Host $host sends) would refuse the page's own origin (1008 "${portless}")`);
  }

  // ---- 2. wave 1 -------------------------------------------------------------------------------
  const keys = Array.from({ length: KEYS }, () => `k${crypto.randomBytes(12).toString('hex')}`);
  const keyIndex = new Map(keys.map((k, i) => [sha256(k), i]));
  const oa = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const t1 = Date.now();
  const w1ws = [];
  for (let k = 0; k < KEYS; k++) {
    for (let j = 0; j < PER_KEY; j++) {
      w1ws.push((async () => {
        const id = `w1-k${k}-c${j}`;
        const c = await L.Client.open(port, { name: id, path: `/ws?user=${keys[k]}` });
        L.eq(c.hello.user_key, true, `${id}: hello.user_key`);
        const r = await c.request({ id, prompt: `Wave one, key ${k}, client ${j}:`, max_tokens: W1_TOKENS,
          ignore_eos: true, seed: k * 10 + j });
        L.check(r.done, () => `${id}: ${JSON.stringify(r.error)}`);
        L.checkRequestFrames(r.frames, id, { n: W1_TOKENS, finish: 'length' });
        c.assertNoViolations();
        c.close();
        return { id, k, session: c.hello.session, tokens: r.tokens.length };
      })());
    }
  }
  const w1oa = [];
  for (let i = 0; i < OPENAI_STREAMS; i++) {
    const keyed = i < OPENAI_STREAMS / 2;
    const k = keyed ? (i * 7) % KEYS : null;
    const prompt = `OpenAI stream ${i}${keyed ? `, key ${k}` : ''}:`;
    w1oa.push(openaiStream(oa, { prompt, maxTokens: W1_TOKENS, seed: 100 + i, key: keyed ? keys[k] : null })
      .then((chunks) => ({ prompt, k, tokens: checkOpenaiChunks(chunks, W1_TOKENS, prompt) })));
  }
  const w1 = await Promise.all(w1ws);
  const w1o = await Promise.all(w1oa);
  const w1Tokens = w1.reduce((a, x) => a + x.tokens, 0) + w1o.reduce((a, x) => a + x.tokens, 0);
  L.log(`wave 1: ${w1.length} WebSocket clients (${KEYS} keys x ${PER_KEY}) and ${w1o.length} OpenAI streams ` +
    `(${w1o.filter((x) => x.k !== null).length} with X-Inflight-User) done, ${w1Tokens} tokens, every request ` +
    `exactly ${W1_TOKENS}, in ${((Date.now() - t1) / 1000).toFixed(1)} s`);

  // the logs, once flushed
  const rows = (r) => D.q(r.db, 'SELECT r.client_id, r.api, r.prompt, r.completion_tokens AS n, r.finish_reason AS fin, ' +
    's.session, s.user_key FROM requests r JOIN sessions s ON s.id = r.session_id');
  const sessionsOf = (r) => D.q(r.db, 'SELECT session, user_key FROM sessions');
  await L.until(() => replicas.reduce((a, r) => a + rows(r).length, 0) >= w1.length + w1o.length, 20000,
    'wave 1 in the request logs', 200);
  for (const r of replicas) {
    for (const x of rows(r)) {
      L.check(x.n === W1_TOKENS && x.fin === 'length', () => `${r.name}: logged ${JSON.stringify(x)}`);
    }
  }
  const keyHome = new Map(); // key index -> replica
  const sessionHome = new Map(); // session hex -> replica
  for (const r of replicas) {
    for (const s of sessionsOf(r)) {
      sessionHome.set(s.session, r);
      if (s.user_key === null) continue;
      const k = keyIndex.get(s.user_key);
      L.check(k !== undefined, `${r.name}: a session with a user key no client sent`);
      const prev = keyHome.get(k);
      L.check(!prev || prev === r, () => `key ${k}: sessions on ${prev.name} and ${r.name}`);
      keyHome.set(k, r);
    }
  }
  L.eq(keyHome.size, KEYS, 'keys found in the logs');
  for (const c of w1) {
    const home = sessionHome.get(c.session);
    L.check(home === keyHome.get(c.k), () => `${c.id}: its session ${c.session} is on ${home && home.name}, ` +
      `its key's on ${keyHome.get(c.k).name}`);
  }
  const figures1 = [];
  for (const r of replicas) {
    const rs = rows(r);
    const ks = [...keyHome].filter(([, h]) => h === r).map(([k]) => k);
    const sess = sessionsOf(r).filter((s) => s.user_key !== null).length;
    const oaRows = rs.filter((x) => x.api === 'openai');
    for (const x of oaRows) {
      const o = w1o.find((y) => y.prompt === x.prompt);
      L.check(o, `${r.name}: an OpenAI request no client sent: ${x.prompt}`);
      if (o.k !== null) {
        L.check(keyHome.get(o.k) === r, () => `"${o.prompt}" (X-Inflight-User of key ${o.k}) is on ${r.name}, ` +
          `the key's sessions on ${keyHome.get(o.k).name}`);
      }
    }
    L.check(ks.length >= 1, `${r.name} got no key: the hash sent none of ${KEYS} keys there`);
    figures1.push(`${r.name} (${r.addr}): ${ks.length} keys, ${sess} keyed sessions, ${rs.filter((x) => x.api === 'ws').length} ` +
      `ws requests, ${oaRows.filter((x) => w1o.find((y) => y.prompt === x.prompt).k !== null).length} keyed + ` +
      `${oaRows.filter((x) => w1o.find((y) => y.prompt === x.prompt).k === null).length} anonymous OpenAI requests`);
  }
  L.log(`wave 1 by replica (from their logs): each key's ${PER_KEY} sessions on one replica, ` +
    `keyed OpenAI requests on their key's replica:\n    ${figures1.join('\n    ')}`);
  // history through the proxy: each key's own requests, from its replica
  await Promise.all(keys.map(async (key, k) => {
    const ids = (await history(port, key)).map((x) => x.client_id).sort();
    const want = Array.from({ length: PER_KEY }, (_, j) => `w1-k${k}-c${j}`).sort();
    L.eq(JSON.stringify(ids), JSON.stringify(want), `history of key ${k} through the proxy`);
  }));
  L.log(`history: GET /api/history?user=KEY through the proxy answers each of the ${KEYS} keys its ${PER_KEY} requests`);

  // ---- 3. wave 2, a replica killed -------------------------------------------------------------
  const victim = [...replicas].sort((a, b) => [...keyHome.values()].filter((h) => h === b).length -
    [...keyHome.values()].filter((h) => h === a).length)[0];
  const victimKeys = [...keyHome].filter(([, h]) => h === victim).map(([k]) => k);
  let stop = false;
  let killAt = null; // epoch ms
  const clients = [];
  const openW2 = async (name, k) => {
    const c = await L.Client.open(port, { name, path: k === null ? '/ws' : `/ws?user=${keys[k]}` });
    return c;
  };
  for (let k = 0; k < KEYS; k++) for (let j = 0; j < W2_PER_KEY; j++) clients.push({ name: `w2-k${k}-c${j}`, k });
  for (let j = 0; j < W2_ANON; j++) clients.push({ name: `w2-anon-c${j}`, k: null });
  await Promise.all(clients.map(async (cl) => {
    cl.c = await openW2(cl.name, cl.k);
    cl.session = cl.c.hello.session;
    cl.done = 0;
    cl.tokens = 0;
    cl.finished = []; // client ids that ended with done
  }));
  const firstDone = [];
  const chains = clients.map((cl) => (async () => {
    let n = 0;
    let resolveFirst;
    firstDone.push(new Promise((r) => {
      resolveFirst = r;
    }));
    for (;;) {
      const id = `${cl.name}-r${n}`;
      const params = { id, prompt: `Wave two, ${cl.name}, request ${n}:`, max_tokens: W2_TOKENS, ignore_eos: true,
        seed: 1000 + n };
      let r;
      try {
        r = await cl.c.request(params);
      } catch (e) {
        if (!cl.c.closeInfo) throw e;
        cl.interrupted = { id, close: cl.c.closeInfo.code, at: Date.now(), tokensSeen: cl.c.framesFor(id)
          .filter((f) => f.msg.type === 'token').length };
        resolveFirst();
        L.check(killAt !== null, () => `${cl.name}: connection closed (${cl.c.closeInfo.code}) before the kill`);
        // a client's reconnect: a short random backoff, the same key, the same request again
        await L.sleep(50 + Math.floor(Math.random() * 350));
        const c2 = await openW2(`${cl.name}-retry`, cl.k);
        cl.retrySession = c2.hello.session;
        const r2 = await c2.request(params);
        L.check(r2.done, () => `${cl.name} retry of ${id}: ${JSON.stringify(r2.error)}`);
        L.checkRequestFrames(r2.frames, id, { n: W2_TOKENS, finish: 'length' });
        cl.retryTokens = r2.tokens.length;
        cl.finishedRetry = id;
        c2.close();
        return;
      }
      L.check(r.done, () => `${id}: ${JSON.stringify(r.error)}`);
      L.checkRequestFrames(r.frames, id, { n: W2_TOKENS, finish: 'length' });
      cl.finished.push(id);
      cl.tokens += r.tokens.length;
      n++;
      resolveFirst();
      // (the victim's clients go on until their connection closes: a request may still end
      // between kill() and the process's end)
      if (stop && cl.home !== victim) {
        cl.c.close();
        return;
      }
    }
  })());
  // OpenAI streams in a loop, keyed to the victim's keys: the one in flight at the kill is cut
  const oaChains = Array.from({ length: W2_OPENAI }, (_, i) => (async () => {
    const k = victimKeys[i % victimKeys.length];
    const st = { k, finished: [], cut: [] };
    for (let n = 0; !stop; n++) {
      const prompt = `Wave two OpenAI ${i}, key ${k}, request ${n}:`;
      let chunks = [];
      let err = null;
      try {
        const stream = await oa.completions.create({ model: 'iterative-gpt2', prompt, max_tokens: W2_OPENAI_TOKENS,
          seed: n, ignore_eos: true, stream: true, stream_options: { include_usage: true } },
        { headers: { 'X-Inflight-User': keys[k] } });
        for await (const ch of stream) chunks.push(ch);
      } catch (e) {
        err = e;
      }
      const complete = !err && chunks.length === W2_OPENAI_TOKENS + 2 && chunks[chunks.length - 1].usage &&
        chunks[chunks.length - 1].usage.completion_tokens === W2_OPENAI_TOKENS;
      if (complete) {
        st.finished.push(prompt);
        if (st.cut.length) break;
        continue;
      }
      L.check(killAt !== null, () => `OpenAI ${prompt}: cut before the kill: ${err}`);
      st.cut.push({ prompt, chunks: chunks.length, err: !err ? 'ended early' : err.status ? `HTTP ${err.status}` :
        `${err.constructor.name}: ${String(err.message).split('\n')[0]}` });
      // the client's own retry (a new request): served by a survivor
    }
    return st;
  })());
  // everyone running, every session in a log: then the kill
  await Promise.all(firstDone);
  await L.until(() => {
    const all = new Set(replicas.flatMap((r) => sessionsOf(r).map((s) => s.session)));
    return clients.every((cl) => all.has(cl.session));
  }, 20000, 'the wave-2 sessions in the logs', 300);
  for (const r of replicas) for (const s of sessionsOf(r)) sessionHome.set(s.session, r);
  for (const cl of clients) cl.home = sessionHome.get(cl.session);
  for (const cl of clients) {
    if (cl.k !== null)
      L.check(cl.home === keyHome.get(cl.k), () => `${cl.name}: on ${cl.home.name}, its key's home is ${keyHome.get(cl.k).name}`);
  }
  const onVictim = clients.filter((cl) => cl.home === victim);
  L.log(`wave 2: ${clients.length} clients generating ${W2_TOKENS}-token requests back to back ` +
    `(${KEYS} keys x ${W2_PER_KEY}, ${W2_ANON} without a key) and ${W2_OPENAI} OpenAI loops of ${W2_OPENAI_TOKENS}-token streams; killing ${victim.name} ` +
    `(${victim.addr}: ${victimKeys.length} keys, ${onVictim.length} clients of which ` +
    `${onVictim.filter((cl) => cl.k === null).length} without a key)`);
  victim.srv.expectExit = true;
  killAt = Date.now();
  victim.srv.proc.kill('SIGKILL');
  // the survivors' clients finish the request they have in flight (untouched by the kill), then
  // stop, leaving the survivors to the retries; the interrupted clients retry on their own
  stop = true;
  await victim.srv.exitPromise;
  const deadAt = Date.now();
  await L.until(() => onVictim.every((cl) => cl.finishedRetry), 120000, 'the retries of the victim\'s clients', 50);
  // then a burst of new connections: the proxy has taken the dead replica out, none tries it
  const burst = await Promise.all(Array.from({ length: BURST }, async (_, i) => {
    const k = i < (BURST * 2) / 3 ? victimKeys[i % victimKeys.length] : null;
    const id = `w2-burst-${i}`;
    const c = await openW2(id, k);
    const r = await c.request({ id, prompt: `Burst ${i}:`, max_tokens: W1_TOKENS, ignore_eos: true, seed: i });
    L.check(r.done, () => `${id}: ${JSON.stringify(r.error)}`);
    L.checkRequestFrames(r.frames, id, { n: W1_TOKENS, finish: 'length' });
    c.close();
    return { id, k, session: c.hello.session, tokens: r.tokens.length };
  }));
  await L.sleep(300);
  await Promise.all(chains);
  const oaStats = await Promise.all(oaChains);
  const retryDone = Date.now();

  const interrupted = clients.filter((cl) => cl.interrupted);
  L.eq(JSON.stringify(interrupted.map((cl) => cl.name).sort()), JSON.stringify(onVictim.map((cl) => cl.name).sort()),
    'the clients whose connection closed are exactly the killed replica\'s');
  const closeCodes = count(interrupted, (cl) => cl.interrupted.close);
  for (const cl of interrupted) {
    const home2 = sessionHome.get(cl.retrySession);
    cl.retryHome = home2;
  }
  // wait for the survivors' logs to hold every request their clients saw end
  const expected = new Map(replicas.filter((r) => r !== victim).map((r) => [r, new Set()]));
  const w2Finished = [];
  for (const cl of clients) {
    for (const id of cl.finished) w2Finished.push({ id, home: cl.home });
    if (cl.finishedRetry) w2Finished.push({ id: cl.finishedRetry, retry: true, session: cl.retrySession });
  }
  for (const b of burst) w2Finished.push({ id: b.id, retry: true, session: b.session });
  await L.until(() => {
    const have = new Map();
    for (const r of replicas) if (r !== victim) for (const s of sessionsOf(r)) sessionHome.set(s.session, r);
    for (const cl of interrupted) cl.retryHome = sessionHome.get(cl.retrySession);
    if (interrupted.some((cl) => !cl.retryHome)) return false;
    for (const [r] of expected) have.set(r, new Set(rows(r).map((x) => x.client_id)));
    return w2Finished.every((f) => {
      const home = f.retry ? sessionHome.get(f.session) : f.home;
      return home === victim || have.get(home).has(f.id);
    });
  }, 20000, 'every finished wave-2 request in its survivor\'s log', 200);
  for (const cl of interrupted) {
    L.check(cl.retryHome && cl.retryHome !== victim, () => `${cl.name}: retried on ${cl.retryHome && cl.retryHome.name}`);
    L.eq(cl.retryTokens, W2_TOKENS, `${cl.name}: tokens of the retry`);
  }
  // consistent hashing: the survivors' keys stayed; each moved key went to one survivor
  const moved = new Map();
  for (const cl of interrupted) {
    if (cl.k === null) continue;
    if (moved.has(cl.k))
      L.check(moved.get(cl.k) === cl.retryHome, () => `key ${cl.k}: its retries on ${moved.get(cl.k).name} and ${cl.retryHome.name}`);
    moved.set(cl.k, cl.retryHome);
  }
  const movedTo = count([...moved.values()], (r) => r.name);
  for (const b of burst) {
    b.home = sessionHome.get(b.session);
    L.check(b.home && b.home !== victim, () => `${b.id}: on ${b.home && b.home.name}`);
    if (b.k !== null)
      L.check(b.home === moved.get(b.k), () => `${b.id} (key ${b.k}): on ${b.home.name}, the key's retries on ${moved.get(b.k).name}`);
  }

  // the cut OpenAI streams were not resent by nginx
  const allRows = replicas.map((r) => ({ r, rows: rows(r) }));
  const cut = oaStats.flatMap((s) => s.cut);
  if (!cut.length) L.log('NOTE: no OpenAI stream was in flight at the kill (each had just ended): nothing cut to check');
  for (const c of cut) {
    for (const { r, rows: rs } of allRows) {
      if (r === victim) continue;
      L.check(!rs.some((x) => x.prompt === c.prompt), () => `"${c.prompt}" (cut by the kill) was run again on ${r.name}`);
    }
  }
  for (const s of oaStats) {
    for (const p of s.finished) {
      const where = allRows.filter(({ rows: rs }) => rs.some((x) => x.prompt === p));
      L.check(where.length <= 1, () => `"${p}" in ${where.length} logs`);
    }
  }

  // no request in two logs; the interrupted ones only as their retry
  const ids = allRows.flatMap(({ r, rows: rs }) => rs.filter((x) => x.api === 'ws').map((x) => ({ id: x.client_id, r })));
  const dup = [...count(ids, (x) => x.id)].filter(([, n]) => n > 1);
  L.check(dup.length === 0, () => `requests logged twice: ${dup.slice(0, 5).map(([id, n]) => `${id} x${n}`).join(', ')}`);
  const oaPrompts = allRows.flatMap(({ rows: rs }) => rs.filter((x) => x.api === 'openai').map((x) => x.prompt));
  const dupO = [...count(oaPrompts, (x) => x)].filter(([, n]) => n > 1);
  L.check(dupO.length === 0, () => `OpenAI requests logged twice: ${dupO.slice(0, 5).map(([p]) => p).join(', ')}`);
  for (const cl of interrupted) {
    const where = ids.filter((x) => x.id === cl.interrupted.id);
    L.check(where.length === 1 && where[0].r === cl.retryHome, () => `${cl.interrupted.id}: logged on ` +
      `${where.map((x) => x.r.name).join(', ') || 'none'}, retried on ${cl.retryHome.name}`);
  }
  // history through the proxy after the kill: a survivor's key still gets all of its requests (it did
  // not move); a moved key gets what it ran on its new replica (its retries): the rest of its
  // history is in the dead replica's log
  await Promise.all(keys.map(async (key, k) => {
    const got = (await history(port, key)).map((x) => x.client_id).sort();
    const mine = clients.filter((cl) => cl.k === k);
    const want = keyHome.get(k) === victim
      ? [...mine.map((cl) => cl.finishedRetry), ...burst.filter((b) => b.k === k).map((b) => b.id)]
      : [...Array.from({ length: PER_KEY }, (_, j) => `w1-k${k}-c${j}`), ...mine.flatMap((cl) => cl.finished)];
    L.eq(JSON.stringify(got), JSON.stringify(want.sort()), `history of key ${k} through the proxy after the kill`);
  }));
  const victimFinished = w2Finished.filter((f) => !f.retry && f.home === victim);
  const victimLogged = new Set(rows(victim).map((x) => x.client_id));
  const victimHas = victimFinished.filter((f) => victimLogged.has(f.id)).length;

  // nginx's view (its access log): what went to the victim's address once it was killed. Between
  // kill() and the process's end its sockets still accept; after, every connection is refused.
  await L.sleep(300); // the last connections' log lines
  const log = accessLog();
  const logAt = Date.now();
  const onDead = log.filter((x) => x.start * 1000 >= killAt - 1 && x.upstreams.includes(victim.addr));
  const at = (x) => {
    const i = x.upstreams.indexOf(victim.addr);
    return { connected: (x.uconnects[i] || '-') !== '-', status: x.ustatuses[i] };
  };
  const passedOn = (x) => x.upstreams.length >= 2 && x.upstreams[x.upstreams.length - 1] !== victim.addr &&
    /^(101|200)$/.test(x.status);
  const dying = onDead.filter((x) => at(x).connected); // reached it while it died
  const refusedAttempts = onDead.filter((x) => !at(x).connected); // connection attempts after
  for (const x of dying) {
    L.check(x.start * 1000 <= deadAt + 5, () => `connected to ${victim.addr} after its exit: ${JSON.stringify(x)}`);
    if (x.method === 'POST') {
      // a generation that reached a replica is never run a second time: the client gets the 502
      L.check(x.upstreams.length === 1 && x.status === '502',
        () => `a POST that reached the dying replica was passed on: ${JSON.stringify(x)}`);
    } else {
      L.check(passedOn(x), () => `a GET that reached the dying replica was not passed on: ${JSON.stringify(x)}`);
    }
  }
  for (const x of refusedAttempts)
    L.check(passedOn(x), () => `a refused connection to the dead replica was not passed on: ${JSON.stringify(x)}`);
  const windows = 1 + Math.floor((logAt - killAt) / 1000 / shipped.failTimeoutS);
  // per group and worker: max_fails in the first fail_timeout window, one probe in each later one
  const allowed = POOLS * Math.max(1, workers) * (shipped.maxFails + (windows - 1));
  const afterByPool = count(refusedAttempts, (x) => x.pool);
  L.check(refusedAttempts.length <= allowed, () => `${refusedAttempts.length} connection attempts on the dead ` +
    `${victim.addr} (${JSON.stringify([...afterByPool])}); max_fails=${shipped.maxFails} allows ${allowed} ` +
    `(${POOLS} groups x ${workers} workers x ${shipped.maxFails + windows - 1})`);
  // once a group has counted max_fails failed attempts (refused, or broken by the death), it sends the dead replica nothing for
  // fail_timeout (50 ms of slack: workers racing for the shared counter)
  const quiet = [];
  for (const pool of ['inflight_by_user', 'inflight_any']) {
    const fails = onDead.filter((x) => x.pool === pool).sort((a, b) => a.start - b.start);
    if (fails.length < shipped.maxFails) {
      quiet.push(`${pool}: ${fails.length} failed attempt(s), below max_fails: not taken out`);
      continue;
    }
    const outAt = fails[shipped.maxFails - 1].start;
    const inWindow = (x) => x.start > outAt + 0.05 && x.start < outAt + shipped.failTimeoutS - 0.05;
    const tried = fails.filter(inWindow);
    L.check(tried.length === 0, () => `${pool}: ${tried.length} attempts on the dead replica within fail_timeout of ` +
      `its ${shipped.maxFails}th failure: ${JSON.stringify(tried[0])}`);
    const served = log.filter((x) => x.pool === pool && inWindow(x)).length;
    quiet.push(`${pool}: out ${((outAt * 1000 - killAt)).toFixed(0)} ms after the kill (failure ${shipped.maxFails}), ` +
      `then ${served} requests in its fail_timeout and none tried it`);
  }
  const lastAttempt = refusedAttempts.reduce((m, x) => Math.max(m, x.start * 1000 - killAt), 0);
  const before = log.filter((x) => x.start * 1000 < killAt && x.upstreams[x.upstreams.length - 1] === victim.addr);
  const disabled = (ng.err.match(/upstream server temporarily disabled/g) || []).length;

  const survivorsW2 = w2Finished.filter((f) => f.retry || f.home !== victim).length;
  const w2Tokens = clients.reduce((a, cl) => a + cl.tokens + (cl.retryTokens || 0), 0) +
    burst.reduce((a, b) => a + b.tokens, 0) +
    oaStats.reduce((a, s) => a + s.finished.length * W2_OPENAI_TOKENS, 0);
  L.log([
    `wave 2 after the kill of ${victim.name} (${((retryDone - killAt) / 1000).toFixed(1)} s to the last retry):`,
    `  ${w2Finished.length} WebSocket requests finished with exactly ${W2_TOKENS} tokens (${survivorsW2} on the survivors, ` +
      `${victimFinished.length} on ${victim.name} before the kill, of which ${victimHas} reached its log before it died), ` +
      `${oaStats.reduce((a, s) => a + s.finished.length, 0)} OpenAI streams, ${w2Tokens} tokens`,
    `  the killed replica's ${interrupted.length} clients (${interrupted.filter((cl) => cl.k !== null).length} keyed, ` +
      `${interrupted.filter((cl) => cl.k === null).length} without a key) saw their connection close ` +
      `(codes ${JSON.stringify([...closeCodes])}), ${interrupted.reduce((a, cl) => a + cl.interrupted.tokensSeen, 0)} ` +
      `tokens of their interrupted requests seen; each reconnected (with its key, if it had one), sent the ` +
      `request again and got its ${W2_TOKENS} tokens on a survivor: ${JSON.stringify([...count(interrupted, (cl) => cl.retryHome.name)])}`,
    `  moved keys by new replica ${JSON.stringify([...movedTo])} (each key's retries on one survivor); ` +
      `the survivors' ${KEYS - victimKeys.length} keys stayed on their replica`,
    `  ${cut.length} OpenAI streams cut by the kill (${cut.map((c) => `${c.chunks} chunks, ${c.err}`).join('; ')}), ` +
      'none of them run again on a survivor',
    `  nginx: ${before.length} connections to ${victim.addr} before the kill; ${dying.length} requests reached it ` +
      `in the ${deadAt - killAt} ms from kill() to its end (${dying.filter((x) => x.method === 'POST').length} POSTs: ` +
      `answered 502, not resent; ${dying.filter((x) => x.method !== 'POST').length} GETs passed on); after its end ` +
      `${refusedAttempts.length} connection attempts on it (by group ${JSON.stringify([...afterByPool])}, the last ` +
      `${lastAttempt.toFixed(0)} ms after the kill; allowed ${allowed}: ${POOLS} groups x ${workers} workers x ` +
      `(max_fails ${shipped.maxFails} + ${windows - 1} later probes)), each passed on to a survivor that answered; ` +
      `"temporarily disabled" ${disabled} times in its error log`,
    `  ${BURST} new connections after the retries (${burst.filter((b) => b.k !== null).length} with moved keys, on their ` +
      `key's new replica): ${quiet.join('; ')}`,
    `  request logs: no client id in two logs (${ids.length} ws requests, ${oaPrompts.length} OpenAI), ` +
      `the ${interrupted.length} interrupted ids only as their retry`,
  ].join('\n'));

  // every process gone cleanly: the survivors stop with SIGTERM (exit 0)
  for (const r of replicas) if (r !== victim) await r.srv.stop();
  L.check(!ng.exited, () => `nginx exited during the test: ${JSON.stringify(ng.exit)}`);
  passed = true;
}, { deadlineS: 420 }); // (23 s on 2 cores in a Release build; the limit is for sanitizer builds on a busy machine)
