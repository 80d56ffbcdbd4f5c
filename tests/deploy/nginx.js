'use strict';
// tests/deploy/nginx.js: the nginx side of scale_out.test.js: finding Debian's nginx, the server
// parameters docker/nginx-upstreams.conf ships, starting nginx on docker/nginx.conf unchanged (with
// the test's own upstreams and listen files beside it), its access log's lines, its workers.
const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const path = require('path');
const L = require('../integration/lib');

function findNginx() {
  for (const p of [process.env.IFL_NGINX, '/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx']) {
    if (p && fs.existsSync(p)) return p;
  }
  const r = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

function shippedServerParams() {
  const text = fs.readFileSync(path.join(L.REPO, 'docker', 'nginx-upstreams.conf'), 'utf8');
  const lines = text.split('\n').filter((l) => /^\s*server\s/.test(l));
  L.check(lines.length >= 1, 'docker/nginx-upstreams.conf has no server line');
  const params = lines.map((l) => /^\s*server\s+\S+\s*(.*?)\s*;\s*$/.exec(l)[1]);
  L.check(params.every((p) => p === params[0]), 'docker/nginx-upstreams.conf: server lines with different parameters');
  const mf = /\bmax_fails=(\d+)/.exec(params[0]);
  const ft = /\bfail_timeout=(\d+)s?\b/.exec(params[0]);
  L.check(mf && ft, `docker/nginx-upstreams.conf: no max_fails / fail_timeout in "${params[0]}"`);
  return { params: params[0], maxFails: Number(mf[1]), failTimeoutS: Number(ft[1]) };
}

// One access-log line of the `inflight` log_format: key=value and key="value" pairs.
function parseLogLine(line) {
  const o = {};
  const re = /(\w+)=(?:"([^"]*)"|(\S+))/g;
  let m;
  while ((m = re.exec(line))) o[m[1]] = m[2] !== undefined ? m[2] : m[3];
  if (!o.msec) return null;
  o.end = Number(o.msec);
  o.start = o.end - Number(o.rt);
  const list = (v) => (v || '').split(',').map((s) => s.trim()).filter(Boolean);
  o.upstreams = list(o.upstream); // one per replica tried, in order ...
  o.ustatuses = list(o.ustatus); // ... its status (502: the connection failed or broke) ...
  o.uconnects = list(o.uconnect); // ... and its connect time ("-": never connected)
  return o;
}

async function startNginx(nginx, dir) {
  const asRoot = process.getuid && process.getuid() === 0;
  // As root, nginx's workers run as `user` and nginx chowns its temp directories to it: name the
  // Debian package's own user so that nothing of the system's install changes owner.
  const haveWwwData = /^www-data:/m.test(fs.readFileSync('/etc/passwd', 'utf8'));
  const g = `daemon off; pid ${dir}/nginx.pid;${asRoot && haveWwwData ? ' user www-data;' : ''}`;
  const args = ['-p', `${dir}/`, '-c', path.join(dir, 'nginx.conf'), '-g', g];
  const t = spawnSync(nginx, ['-t', ...args], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
  L.check(t.status === 0, () => `nginx -t ${args.join(' ')} failed (${t.status}):\n${t.stderr}`);
  // stdout and stderr into files: docker/nginx.conf logs to /dev/stdout, which nginx opens by path
  // (a pipe or a file can be opened so, not the socket node would give it)
  const outPath = path.join(dir, 'nginx.stdout');
  const errPath = path.join(dir, 'nginx.stderr');
  const outFd = fs.openSync(outPath, 'a');
  const errFd = fs.openSync(errPath, 'a');
  const p = spawn(nginx, args, { detached: true, stdio: ['ignore', outFd, errFd] });
  fs.closeSync(outFd);
  fs.closeSync(errFd);
  const ng = { proc: p, exited: false, pid: p.pid };
  Object.defineProperty(ng, 'out', { get: () => fs.readFileSync(outPath, 'utf8') });
  Object.defineProperty(ng, 'err', { get: () => fs.readFileSync(errPath, 'utf8') });
  p.on('exit', (code, signal) => {
    ng.exited = true;
    ng.exit = { code, signal };
  });
  // nginx's workers are in its process group (detached: a group of its own): kill them all, also
  // when this node process is killed (the watchdog).
  const wd = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${p.pid} 2>/dev/null; ` +
    `do sleep 1; done; kill -9 -${p.pid} 2>/dev/null; exit 0`], { stdio: 'ignore', detached: true });
  wd.unref();
  L.onCleanup(() => {
    try {
      process.kill(-p.pid, 'SIGKILL');
    } catch (e) {
      /* gone */
    }
    try {
      process.kill(wd.pid, 'SIGKILL');
    } catch (e) {
      /* gone */
    }
  });
  L.log(`nginx ${args.join(' ')}`);
  return ng;
}

function workersOf(pid) {
  let n = 0;
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const st = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) n++;
    } catch (err) {
      /* gone */
    }
  }
  return n;
}

// A key's whole history through the proxy, following next_before.

module.exports = { findNginx, freePort, shippedServerParams, parseLogLine, startNginx, workersOf };
