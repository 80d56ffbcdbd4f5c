'use strict';
// triton_probes: Triton's (KServe v2) probes and metadata under /v2 (server/http_v2.c).
//  - a ready server: GET /v2 (and /v2/) is the server metadata {name, version, extensions:
//    ["generate"]};
//    /v2/health/live, /v2/health/ready, /v2/models/M/ready and /v2/models/M/versions/1/ready are
//    200 with an empty body for both models (iterative-gpt2, simple-gpt2); /v2/models/M and
//    .../versions/1 are the model metadata (name, versions ["1"], the policy it means, max_tokens
//    and n_ctx of the model, text_input / max_tokens in, text_output out); HEAD of each has the
//    GET's status and Content-Length and no body; an unknown model, an unknown version and unknown
//    paths under /v2 are 404 with Triton's {"error": "..."} naming what was wrong; POST, PUT and
//    DELETE are 405 with Allow: GET, HEAD;
//  - while the server stops (SIGTERM with a request still running and --grace 600), ready and
//    model ready are 400 {"error": "shutting down"} while live stays 200, a generate is 503; the
//    request still ends with all its tokens and the server exits 0.
const L = require('./lib');

const MODELS = { 'iterative-gpt2': 'iterative', 'simple-gpt2': 'static' };

function json(r, what) {
  L.check(/^application\/json/.test(r.headers['content-type'] || ''),
    `${what}: Content-Type ${JSON.stringify(r.headers['content-type'])}, want application/json`);
  try {
    return JSON.parse(r.body.toString('utf8'));
  } catch (e) {
    return L.fail(`${what}: the body is not JSON: ${JSON.stringify(r.body.toString('utf8').slice(0, 200))}`);
  }
}

// GET path, its status; HEAD gives the same status and length, no body. Returns the GET's answer.
async function getBoth(port, path, status) {
  const r = await L.httpRequest(port, path);
  L.eq(r.status, status, `GET ${path} status (${r.body.toString('utf8').slice(0, 200)})`);
  const h = await L.httpRequest(port, path, { method: 'HEAD' });
  L.eq(h.status, status, `HEAD ${path} status`);
  L.eq(h.body.length, 0, `HEAD ${path} body bytes`);
  L.eq(h.headers['content-length'], r.headers['content-length'], `HEAD ${path} Content-Length`);
  return r;
}

async function probeTrue(port, path) {
  const r = await getBoth(port, path, 200);
  L.eq(r.body.length, 0, `GET ${path} body bytes`);
}

async function errorOf(port, path, status, re) {
  const r = await getBoth(port, path, status);
  const j = json(r, `GET ${path}`);
  L.eq(Object.keys(j).join(','), 'error', `GET ${path}: the error object's fields`);
  L.check(typeof j.error === 'string' && re.test(j.error), `GET ${path}: error ${JSON.stringify(j.error)} does not match ${re}`);
  return j.error;
}

async function checkReady(srv, vocab) {
  const port = srv.port;
  for (const p of ['/v2', '/v2/']) {
    const j = json(await getBoth(port, p, 200), `GET ${p}`);
    L.eq(JSON.stringify(j), JSON.stringify({ name: 'inflight', version: j.version, extensions: ['generate'] }), `GET ${p}`);
    L.check(/^\d+\.\d+\.\d+$/.test(j.version), `GET ${p}: version ${JSON.stringify(j.version)}`);
  }
  await probeTrue(port, '/v2/health/live');
  await probeTrue(port, '/v2/health/ready');
  const cfg = require(require('path').join(srv.args[srv.args.indexOf('--model') + 1], 'config.json'));
  for (const [name, policy] of Object.entries(MODELS)) {
    await probeTrue(port, `/v2/models/${name}/ready`);
    await probeTrue(port, `/v2/models/${name}/versions/1/ready`);
    for (const p of [`/v2/models/${name}`, `/v2/models/${name}/versions/1`]) {
      const j = json(await getBoth(port, p, 200), `GET ${p}`);
      const want = {
        name, versions: ['1'], platform: 'inflight',
        parameters: { policy, max_tokens: cfg.n_positions - 1, n_ctx: cfg.n_positions },
        inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1] }, { name: 'max_tokens', datatype: 'INT32', shape: [1] }],
        outputs: [{ name: 'text_output', datatype: 'BYTES', shape: [1] }],
      };
      L.eq(JSON.stringify(j), JSON.stringify(want), `GET ${p}`);
    }
  }
  const errs = [];
  errs.push(await errorOf(port, '/v2/models/gpt2', 404, /unknown model 'gpt2'.*iterative-gpt2.*simple-gpt2/));
  errs.push(await errorOf(port, '/v2/models/gpt2/ready', 404, /unknown model 'gpt2'/));
  errs.push(await errorOf(port, '/v2/models/simple-gpt2/versions/2', 404, /no version '2'/));
  errs.push(await errorOf(port, '/v2/models/iterative-gpt2/versions/0/ready', 404, /no version '0'/));
  errs.push(await errorOf(port, '/v2/models/iterative-gpt2/config', 404, /no such endpoint under model 'iterative-gpt2'/));
  errs.push(await errorOf(port, '/v2/health', 404, /no such endpoint/));
  errs.push(await errorOf(port, '/v2/repository/index', 404, /no such endpoint/));
  errs.push(await errorOf(port, '/v2/models/', 404, /no such endpoint/));
  const other = await L.httpRequest(port, '/v2x');
  L.eq(other.status, 404, 'GET /v2x (not under /v2)');
  for (const method of ['POST', 'PUT', 'DELETE']) {
    const r = await L.rawHttp(port, `${method} /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    const allow = /\r\nallow:\s*([^\r]*)/i.exec(r.text);
    L.eq(r.status, 405, `${method} /v2/health/ready status`);
    L.check(allow && /GET/.test(allow[1]) && /HEAD/.test(allow[1]), `${method} /v2/health/ready: no Allow header with GET and HEAD`);
  }
  L.log(`ready server: /v2 metadata, live/ready/model ready 200 (GET and HEAD), both models' metadata; errors: ${errs.join(' | ')}; POST/PUT/DELETE 405`);
}

L.main('triton_probes', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, ['--n-layer', '6', '--n-embd', '256', '--n-head', '4']);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--grace', '600']);
  await checkReady(srv, vocab);

  // the stop: a request runs, SIGTERM, then the probes say not ready while it finishes
  const c = await L.Client.open(srv.port, { name: 'long' });
  const from = c.frames.length;
  c.send({ type: 'generate', id: 'long', prompt: 'Hello', max_tokens: 255, seed: 5, ignore_eos: true, model: 'static' });
  await c.waitFor((f) => f.msg.type === 'token' && f.msg.id === 'long', 60000, 'the first token', from);
  srv.expectExit = true;
  srv.proc.kill('SIGTERM');
  await L.until(() => /stopping: no new requests/.test(srv.stdout), 10000, 'the server to log the stop');
  const seen = [];
  for (const p of ['/v2/health/ready', '/v2/models/iterative-gpt2/ready', '/v2/models/simple-gpt2/versions/1/ready']) {
    const r = await L.httpRequest(srv.port, p);
    const j = json(r, `GET ${p} while stopping`);
    L.eq(r.status, 400, `GET ${p} while stopping`);
    L.eq(j.error, 'shutting down', `GET ${p} while stopping: error`);
    seen.push(`${p} ${r.status}`);
  }
  const live = await L.httpRequest(srv.port, '/v2/health/live');
  L.eq(live.status, 200, 'GET /v2/health/live while stopping');
  const body = '{"text_input":"Hello","max_tokens":2}';
  const gen = await L.rawHttp(srv.port, `POST /v2/models/iterative-gpt2/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  L.eq(gen.status, 503, 'POST generate while stopping');
  L.check(/"error":"the server is shutting down"/.test(gen.text), `POST generate while stopping: ${gen.text.slice(-120)}`);
  const tokensThen = c.framesFor('long').filter((f) => f.msg.type === 'token').length;
  L.check(!c.framesFor('long').some((f) => f.msg.type === 'done'),
    'the request had ended before the probes were answered: they did not probe a stop in progress');
  const end = await c.waitEnd('long', 120000, from);
  L.eq(end.type, 'done', 'the running request after SIGTERM');
  L.eq(end.finish_reason, 'length', 'its finish_reason');
  const ex = await L.withTimeout(srv.exitPromise, 60000, 'the server to exit');
  L.eq(ex.code, 0, 'exit status after the stop');
  L.log(`while stopping (request at ${tokensThen} of 255 tokens): ${seen.join(', ')} ({"error":"shutting down"}), live 200, generate 503; the request ended ${end.type} (${end.finish_reason}); exit 0`);
});
