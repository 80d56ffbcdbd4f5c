'use strict';
// event_loop: the server's event loop (server/server.c, --event-loop). By default lws runs on
// libuv (epoll: the cost of a wake-up does not grow with idle sockets; lws's own poll() visits
// every socket at each one: 10,000 idle connections made a new request 15x slower,
// scripts/bench/bench-idle.js and docs/perf.md). Checks that the default is libuv, named on the
// start-up line and in inflight_build_info{event_loop}; that with 900 idle WebSocket connections
// open, under libuv and under --event-loop poll, a newcomer's requests are served in full and
// every idle connection is still open; that a stop closes them all (1001) and exits 0; and that
// an unknown --event-loop is a usage error. The speed is the benchmark's to measure, not this
// test's.
const { spawnSync } = require('child_process');
const fs = require('fs');
const L = require('./lib');

const IDLE = 900;

function softNofile() {
  const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  return Number(line.replace('Max open files', '').trim().split(/\s+/)[0]);
}

async function run(bin, vocab, model, loop) {
  const args = ['--no-request-log', '--max-connections', String(IDLE + 100)];
  if (loop) args.push('--event-loop', loop);
  const srv = await L.startServer(bin, vocab, model, args);
  const want = loop === 'poll' ? 'poll' : 'libuv';
  L.check(new RegExp(`listening on http://127\\.0\\.0\\.1:\\d+ .*; event loop ${want}\\)`).test(srv.stdout),
    () => `the start-up line does not name event loop ${want}: ${srv.stdout.split('\n')[0]}`);
  const bi = (await L.fetchMetrics(srv.port)).samples.filter((x) => x.name === 'inflight_build_info');
  L.eq(bi.length === 1 && bi[0].labels.event_loop, want, 'inflight_build_info{event_loop}');
  const idle = [];
  for (let i = 0; i < IDLE; i += 100)
    idle.push(...await Promise.all(Array.from({ length: 100 }, (_, j) => L.Client.open(srv.port, { name: `idle${i + j}` }))));
  const c = await L.Client.open(srv.port, { name: 'newcomer' });
  for (let k = 0; k < 3; k++) {
    const r = await c.request({ id: `n${k}`, prompt: 'Hello world', max_tokens: 12, ignore_eos: true });
    L.check(r.done && r.tokens.length === 12, () => `${want}: request ${k}: ${JSON.stringify(r.error || r.done)}`);
  }
  const m = await L.fetchMetrics(srv.port);
  L.eq(m.get('inflight_connections_open'), IDLE + 1, `${want}: connections open`);
  L.check(idle.every((x) => !x.closeInfo), `${want}: an idle connection was closed`);
  c.close();
  await c.closed;
  await srv.stop(60000);
  const infos = await L.withTimeout(Promise.all(idle.map((x) => x.closed)), 30000, 'the idle connections to close');
  const bad = infos.filter((i) => i.code !== 1001);
  L.check(bad.length === 0, () => `${bad.length} idle connections closed otherwise than 1001: ${JSON.stringify(bad[0])}`);
  L.log(`event loop ${want}: ${IDLE} idle WebSockets open, a newcomer's 3 requests of 12 tokens served, ` +
    `inflight_build_info{event_loop="${want}"}, all ${IDLE} closed 1001 at the stop`);
}

L.main('event_loop', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab);
  const bad = spawnSync(bin, ['serve', '--model', model, '--event-loop', 'epoll'], { encoding: 'utf8', env: L.childEnv(vocab) });
  L.eq(bad.status, 2, 'serve --event-loop epoll: exit status');
  L.check(/--event-loop must be uv or poll/.test(bad.stderr), () => `serve --event-loop epoll said: ${bad.stderr}`);
  if (softNofile() < IDLE + 200) {
    L.cannotCheck(`this process may open ${softNofile()} files (ulimit -n): ${IDLE} idle connections need more`);
    return;
  }
  await run(bin, vocab, model, null);
  await run(bin, vocab, model, 'poll');
}, { deadlineS: 600 });
