'use strict';
// http: the plain HTTP side of `inflight serve`.
//  - a server with --web <tmpdir> holding our own files (index.html, .js, .css, .svg, .json, .txt,
//    an unknown extension, a subdirectory, a dotfile, symlinks to a file and a directory outside):
//    GET and HEAD of each with the right Content-Type and exact bytes, / = index.html, 404 for
//    missing files and directories, dotfiles and symlinks leading outside, directory escape attempts
//    (raw requests: ../, %2e%2e, %2f, //, backslashes, NUL) all 400/403/404 and never leaking content;
//    /healthz, /readyz, /metrics (text/plain; version=0.0.4), HEAD, POST/PUT/DELETE -> 405 with
//    Allow, /ws without upgrade -> 426, a WebSocket upgrade at another path refused; run with
//    --isa scalar, which the start-up line, hello's model.isa and /metrics' inflight_build_info
//    name.
//  - a server with the repository's web/ (whatever files it holds at test time): each served with
//    the Content-Type of its extension and its exact bytes.
const fs = require('fs');
const path = require('path');
const L = require('./lib');

const TYPES = {
  '.html': /^text\/html(;\s*charset=utf-8)?$/i,
  '.js': /^(text|application)\/javascript(;\s*charset=utf-8)?$/i,
  '.mjs': /^(text|application)\/javascript(;\s*charset=utf-8)?$/i,
  '.css': /^text\/css(;\s*charset=utf-8)?$/i,
  '.svg': /^image\/svg\+xml(;\s*charset=utf-8)?$/i,
  '.json': /^application\/json(;\s*charset=utf-8)?$/i,
  '.png': /^image\/png$/i,
  '.ico': /^image\/(x-icon|vnd\.microsoft\.icon)$/i,
  '.txt': /^text\/plain(;\s*charset=utf-8)?$/i,
  '.woff2': /^font\/woff2$/i,
  '.webmanifest': /^application\/manifest\+json(;\s*charset=utf-8)?$/i,
};

function listFiles(dir, rel = '') {
  const out = [];
  for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    if (e.name.startsWith('.')) continue;
    const r = path.posix.join(rel, e.name);
    if (e.isDirectory()) out.push(...listFiles(dir, r));
    else if (e.isFile()) out.push(r);
  }
  return out;
}

// GET + HEAD of /rel: status 200, Content-Type for its extension, exact bytes (re-read the file if
// it changed meanwhile: web/ may be edited while tests run).
async function checkFile(srv, dir, rel, { urlPath = '/' + rel, wantType } = {}) {
  const ext = path.extname(rel).toLowerCase();
  const want = wantType || TYPES[ext];
  L.check(want, `no expected Content-Type for ${rel}`);
  let r;
  let body;
  for (let attempt = 0; ; attempt++) {
    r = await L.httpRequest(srv.port, urlPath);
    body = fs.readFileSync(path.join(dir, rel));
    if (r.status !== 200 || r.body.equals(body) || attempt >= 3) break;
    await L.sleep(200);
  }
  L.eq(r.status, 200, `GET ${urlPath} status`);
  L.check(want.test(r.headers['content-type'] || ''), () => `GET ${urlPath}: Content-Type ${JSON.stringify(r.headers['content-type'])} does not match ${want}`);
  L.check(r.body.equals(body), () => `GET ${urlPath}: ${r.body.length} bytes differ from the file's ${body.length}`);
  L.eq(Number(r.headers['content-length']), body.length, `GET ${urlPath} Content-Length`);
  L.eq(r.headers['x-content-type-options'], 'nosniff', `GET ${urlPath} X-Content-Type-Options`);
  const h = await L.httpRequest(srv.port, urlPath, { method: 'HEAD' });
  L.eq(h.status, 200, `HEAD ${urlPath} status`);
  L.eq(h.body.length, 0, `HEAD ${urlPath} body bytes`);
  L.eq(h.headers['content-type'], r.headers['content-type'], `HEAD ${urlPath} Content-Type`);
  L.eq(Number(h.headers['content-length']), body.length, `HEAD ${urlPath} Content-Length`);
  return `${urlPath} ${r.headers['content-type']} ${body.length} B`;
}

function rawGet(p, method = 'GET') {
  return `${method} ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`;
}

L.main('http', async () => {
  const { bin, vocab } = L.parseArgs();
  const model = L.makeModel(bin, vocab, [], 'http-model');

  // ---- our own web dir ----
  const root = L.tmpDir('http-web');
  const web = path.join(root, 'web');
  const outside = path.join(root, 'outside');
  fs.mkdirSync(web);
  fs.mkdirSync(outside);
  const SECRET = `TOPSECRET-${process.pid}-${Date.now()}`;
  fs.writeFileSync(path.join(outside, 'secret.txt'), `${SECRET}\n`);
  fs.writeFileSync(path.join(web, 'index.html'), '<!doctype html><title>test index</title><p>index page</p>\n');
  fs.writeFileSync(path.join(web, 'a.js'), 'console.log("a.js");\n');
  fs.writeFileSync(path.join(web, 'b.css'), 'body { color: #123456; }\n');
  fs.writeFileSync(path.join(web, 'c.svg'), '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>\n');
  fs.writeFileSync(path.join(web, 'd.json'), '{"d": [1, 2, 3]}\n');
  fs.writeFileSync(path.join(web, 'e.txt'), 'plain text é\n');
  fs.writeFileSync(path.join(web, 'f.weird'), Buffer.from([0, 1, 2, 3, 255]));
  fs.writeFileSync(path.join(web, 'big.js'), `// ${'x'.repeat(200000)}\n`); // several HTTP chunks
  fs.mkdirSync(path.join(web, 'sub'));
  fs.writeFileSync(path.join(web, 'sub', 'g.js'), 'export const g = 1;\n');
  fs.writeFileSync(path.join(web, '.hidden'), `${SECRET} hidden\n`);
  fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(web, 'link-out.txt'));
  fs.symlinkSync(outside, path.join(web, 'dirlink'));
  fs.symlinkSync(path.join(web, 'a.js'), path.join(web, 'link-in.js')); // inside: allowed or not, never a leak

  // --isa scalar (any CPU has it): the start-up line, hello and /metrics name it (checked below)
  const srv = await L.startServer(bin, vocab, model, ['--web', web, '--no-request-log', '--isa', 'scalar']);
  const served = [];
  for (const f of ['index.html', 'a.js', 'b.css', 'c.svg', 'd.json', 'e.txt', 'big.js', 'sub/g.js'])
    served.push(await checkFile(srv, web, f));
  served.push(await checkFile(srv, web, 'index.html', { urlPath: '/' }));
  served.push(await checkFile(srv, web, 'f.weird', { wantType: /^application\/octet-stream$/ }));
  L.log(`own web dir served: ${served.join('; ')}`);

  // endpoints
  const hz = await L.httpRequest(srv.port, '/healthz');
  L.eq(hz.status, 200, 'GET /healthz');
  const rz = await L.httpRequest(srv.port, '/readyz');
  L.eq(rz.status, 200, 'GET /readyz after ready');
  const mt = await L.httpRequest(srv.port, '/metrics');
  L.eq(mt.status, 200, 'GET /metrics');
  L.check(/^text\/plain;\s*version=0\.0\.4(;\s*charset=utf-8)?$/i.test(mt.headers['content-type']),
    `GET /metrics Content-Type ${JSON.stringify(mt.headers['content-type'])}`);
  L.check(/^# (HELP|TYPE) /.test(mt.body.toString()), '/metrics body does not start with # HELP/# TYPE');
  for (const p of ['/healthz', '/readyz', '/metrics']) {
    const h = await L.httpRequest(srv.port, p, { method: 'HEAD' });
    L.eq(h.status, 200, `HEAD ${p}`);
    L.eq(h.body.length, 0, `HEAD ${p} body bytes`);
  }
  L.log(`/healthz ${hz.status} ${JSON.stringify(hz.body.toString())}, /readyz ${rz.status} ${JSON.stringify(rz.body.toString())}, ` +
    `/metrics ${mt.status} ${JSON.stringify(mt.headers['content-type'])} ${mt.body.length} B; HEAD of each 200 without a body`);

  for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
    for (const p of ['/', '/metrics', '/a.js']) {
      const r = await L.rawHttp(srv.port, `${method} ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      const allow = /\r\nallow:\s*([^\r]*)/i.exec(r.text);
      L.log(`${method} ${p} -> ${r.status}${allow ? ` Allow: ${allow[1]}` : ''}`);
      L.eq(r.status, 405, `${method} ${p} status`);
      L.check(allow && /GET/.test(allow[1]) && /HEAD/.test(allow[1]), `${method} ${p}: no Allow header with GET and HEAD`);
    }
  }

  const ws = await L.httpRequest(srv.port, '/ws');
  L.eq(ws.status, 426, 'GET /ws without an upgrade');
  L.log(`GET /ws without upgrade -> ${ws.status} ${JSON.stringify(ws.body.toString())}`);

  for (const p of ['/missing.html', '/missing.js', '/sub/missing.js', '/sub', '/sub/', '/index.html/x']) {
    const r = await L.httpRequest(srv.port, p);
    L.eq(r.status, 404, `GET ${p}`);
  }
  L.log('missing files and directories: 404');

  // escapes: every answer 400/403/404, never the content of anything outside (or the dotfile)
  const escapes = [
    '/../etc/passwd', '/../../../../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd', '/..%2fetc/passwd',
    '/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd', '//etc/passwd', '/.hidden', '/%2ehidden',
    '/sub/../.hidden', '/../outside/secret.txt', '/%2e%2e/outside/secret.txt', '/sub/..%2f..%2foutside%2fsecret.txt',
    '/link-out.txt', '/dirlink/secret.txt', '/dirlink/', '/..\\outside\\secret.txt', '/..%5coutside%5csecret.txt',
    '/sub/%2e%2e/%2e%2e/outside/secret.txt', `/${'../'.repeat(20)}etc/passwd`, '/.%2e/outside/secret.txt',
    '/%252e%252e/outside/secret.txt', 'http://127.0.0.1/../etc/passwd', '/%c0%ae%c0%ae/outside/secret.txt',
    '/sub//../../outside/secret.txt', '/./../outside/secret.txt',
  ];
  const noLeak = (p, r) => {
    L.check(!r.text.includes(SECRET), `GET ${p} leaked the secret file: ${JSON.stringify(r.text.slice(0, 300))}`);
    L.check(!/root:.*:0:0:/.test(r.text), `GET ${p} leaked /etc/passwd`);
  };
  const seen = {};
  for (const p of escapes) {
    const r = await L.rawHttp(srv.port, rawGet(p));
    (seen[r.status] = seen[r.status] || []).push(p);
    noLeak(p, r);
    L.check([400, 403, 404].includes(r.status), () => `GET ${p}: status ${r.status} (want 400/403/404): ${JSON.stringify(r.text.slice(0, 200))}`);
  }
  L.log(`${escapes.length} escape attempts, no leak: ${Object.entries(seen).map(([st, ps]) =>
    `${st} x${ps.length}${st !== '404' ? ` (${ps.join(' ')})` : ''}`).join(', ')}`);
  // a NUL (%00) in the path: no leak; libwebsockets drops the connection without an answer (status 0
  // here), except that /%00 serves the index page
  const nulSeen = [];
  for (const p of ['/a.js%00', '/a.js%00.html', '/index.html%00.js', '/.hidden%00', '/link-out.txt%00.js', '/%00',
    '/..%00/outside/secret.txt', '/healthz%00']) {
    const r = await L.rawHttp(srv.port, rawGet(p));
    noLeak(p, r);
    const body = r.text.split('\r\n\r\n')[1] || '';
    const isIndex = r.status === 200 && body === fs.readFileSync(path.join(web, 'index.html'), 'latin1');
    L.check([0, 400, 403, 404].includes(r.status) || (p === '/%00' && isIndex),
      () => `GET ${p}: status ${r.status}: ${JSON.stringify(r.text.slice(0, 200))}`);
    nulSeen.push(`${p} ${r.status || 'dropped'}${isIndex ? ' (index page)' : ''}`);
  }
  L.log(`NUL in the path, no leak: ${nulSeen.join(', ')}`);
  const li = await L.httpRequest(srv.port, '/link-in.js');
  L.check(li.status === 404 || (li.status === 200 && li.body.equals(fs.readFileSync(path.join(web, 'a.js')))),
    `a symlink inside the web dir: ${li.status}`);
  L.log(`symlink to a file inside the web dir: ${li.status}`);

  // a WebSocket upgrade anywhere but /ws is refused with 404 (it used to be a closed connection)
  for (const p of ['/', '/index.html', '/wsx', '/ws/', '/WS', '/metrics']) {
    let opened = false;
    let why = '';
    try {
      const c = await L.Client.connect(srv.port, { path: p, name: `ws ${p}`, timeoutMs: 10000 });
      opened = true;
      c.terminate();
    } catch (e) {
      why = e.message;
    }
    L.check(!opened, `a WebSocket upgrade at ${p} was accepted`);
    L.check(/upgrade refused with HTTP 404/.test(why), `a WebSocket upgrade at ${p}: ${why} (want HTTP 404)`);
    L.log(`WebSocket upgrade at ${p}: refused (${why})`);
  }
  // and /ws itself works; its hello names the ISA asked for, as do the start-up line and /metrics
  const c = await L.Client.open(srv.port, { name: 'ws' });
  await L.checkIsa(srv, c.hello, await L.fetchMetrics(srv.port),
    { want: 'scalar', whyRe: /^--isa scalar; the CPU has [a-z0-9_ /]+$/ });
  c.close();
  await c.closed;
  srv.assertAlive();
  const hz2 = await L.httpRequest(srv.port, '/healthz');
  L.eq(hz2.status, 200, '/healthz after everything');
  await srv.stop();

  // ---- the repository's web/ ----
  const repoWeb = path.join(L.REPO, 'web');
  const files = fs.existsSync(repoWeb) ? listFiles(repoWeb) : [];
  if (!files.length) {
    L.cannotCheck(`${repoWeb} has no files: the repository page is not checked`);
  } else {
    const srv2 = await L.startServer(bin, vocab, model, ['--web', repoWeb, '--no-request-log']);
    const out = [];
    for (const f of files) {
      const ext = path.extname(f).toLowerCase();
      if (!TYPES[ext]) {
        L.cannotCheck(`web/${f}: extension ${ext} has no expected Content-Type in this test's TYPES`);
        continue;
      }
      out.push(await checkFile(srv2, repoWeb, f));
    }
    if (files.includes('index.html')) out.push(await checkFile(srv2, repoWeb, 'index.html', { urlPath: '/' }));
    L.log(`repository web/: ${out.length} files served right: ${out.join('; ')}`);
    await srv2.stop();
  }
  L.log('servers stopped cleanly (exit 0)');
});
