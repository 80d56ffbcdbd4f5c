'use strict';
// weights: the format the weights are held in (--weights; the format registry, engine/tensor.h) is
// named everywhere the server describes itself, the same in each place:
//  (a) q8 (8-bit weights, made at load; the CPU backend only): `serve --weights q8` picks the CPU
//      under --device auto and says why on its device line ("(auto: q8 weights run on the CPU
//      only)"), prints "weights q8" on its model line, and names q8 in hello (model.weights, and
//      "weights q8" in model.device), in /metrics' inflight_build_info{weights="q8"}, in each
//      request's stderr line (weights=q8) and in its row of the request log (requests.weights,
//      --db); `serve --weights q8 --device cuda` exits 1 at once, naming the formats the CUDA
//      backend runs (in every build: the format decides before any GPU is probed);
//  (b) a model kept as stored (no --weights): its checkpoint's format (f32) in the same places.
const { spawnSync } = require('child_process');
const L = require('./lib');
const D = require('../db/dblib');

// One server with `extra` options; the format `want` (and, for q8, the CPU chosen for it) in its
// start-up lines, hello, /metrics, a request's stderr line and its request-log row.
async function checkServer(bin, vocab, model, extra, want) {
  const db = `${L.tmpDir(`weights-${want}-db`)}/log.db`;
  const srv = await L.startServer(bin, vocab, model, [...extra, '--db', db, '--max-batch', '4']);
  const line = await L.until(() => /^inflight serve: model .*, weights (\S+)$/m.exec(srv.stdout), 10000,
    'the start-up line naming the weights');
  L.eq(line[1], want, 'the weights of the start-up line');
  const dev = /^inflight serve: device (.*)$/m.exec(srv.stdout);
  L.check(dev, `no device line in ${JSON.stringify(srv.stdout)}`);
  if (want === 'q8')
    L.check(/^cpu: .*\(auto: q8 weights run on the CPU only\)$/.test(dev[1]),
      `the device line does not say auto chose the CPU for q8: ${JSON.stringify(dev[1])}`);

  const c = await L.Client.open(srv.port, { name: `client-${want}` });
  L.eq(c.hello.model.weights, want, 'hello model.weights');
  L.check(c.hello.model.device.includes(`weights ${want},`),
    `hello model.device ${JSON.stringify(c.hello.model.device)} does not say weights ${want}`);
  const metrics = await L.fetchMetrics(srv.port);
  const bi = metrics.samples.filter((x) => x.name === 'inflight_build_info');
  L.eq(bi.length, 1, '/metrics inflight_build_info samples');
  L.eq(bi[0].labels.weights, want, 'inflight_build_info{weights}');

  const id = `w-${want}`;
  const r = await c.request({ id, prompt: 'The format of the weights', max_tokens: 4, seed: 7, ignore_eos: true });
  L.check(r.done && r.done.usage.completion_tokens === 4, `request ${id}: ${JSON.stringify(r.done || r.error)}`);
  const logLine = await L.until(() => new RegExp(`^inflight: request [0-9a-f]{16}/${id} .*$`, 'm').exec(srv.stderr),
    10000, `the stderr line of request ${id}`);
  L.check(new RegExp(` policy=iterative weights=${want} `).test(logLine[0]),
    `the request's stderr line does not say weights=${want}: ${logLine[0]}`);
  await D.waitDrained(srv.port);
  const rows = D.q(db, `SELECT weights FROM requests WHERE client_id = ${D.sqlStr(id)}`);
  L.eq(JSON.stringify(rows), JSON.stringify([{ weights: want }]), 'the request-log row\'s weights');
  c.close();
  await c.closed;
  await srv.stop();
  L.log(`weights ${want}: the start-up line, hello (model.weights, model.device), ` +
    `inflight_build_info${JSON.stringify(bi[0].labels)}, the request's stderr line and its row agree` +
    (want === 'q8' ? `; device ${dev[1].replace(/^cpu: .*(\(auto: .*\))$/, 'cpu $1')}` : ''));
}

L.main('weights', async () => {
  const { bin, vocab } = L.parseArgs();
  D.requireSqlite3(); // the request log's row is read with the sqlite3 shell
  const model = L.makeModel(bin, vocab, [], 'weights-model'); // 2 layers, 64 wide, f32

  // (a) q8 and --device cuda: refused before anything loads
  const r = spawnSync(bin, ['serve', '--model', model, '--vocab', vocab, '--port', '0', '--weights', 'q8',
    '--device', 'cuda'], { env: L.childEnv(vocab), encoding: 'utf8', timeout: 60000 });
  L.eq(r.status, 1, `serve --weights q8 --device cuda: exit status (stderr ${JSON.stringify(r.stderr)})`);
  L.check(/^inflight serve: --device cuda: the CUDA backend runs f32, f16, bf16 weights, not q8; q8 runs on the CPU only \(--device cpu or auto\)$/m
    .test(r.stderr), `serve --weights q8 --device cuda: ${JSON.stringify(r.stderr)}`);
  L.log(`serve --weights q8 --device cuda: exit 1: ${r.stderr.trim()}`);

  await checkServer(bin, vocab, model, ['--weights', 'q8'], 'q8');
  // (b) as stored
  await checkServer(bin, vocab, model, [], 'f32');
});
