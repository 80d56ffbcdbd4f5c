'use strict';
// fd_limit: the server and its file-descriptor limit (server/server.c, fit_fd_limit). Every
// connection is a descriptor, so at start a soft limit below what --max-connections needs (it
// and 64) is raised towards the hard one, only as far as needed, and a
// --max-connections the process cannot hold is lowered to what it can (the limit less 64 kept for
// the server's own files), saying so: that many WebSockets are served and the next is closed with
// 1013 naming the limit. Idle TCP sockets past the limit exhaust the descriptors; lws then logs
// "accept: errno 24" at every try, and the server prints a repeated line at most once a second
// with a count (it printed ~70,000 lines in 40 s), and serves again once they are gone.
const fs = require('fs');
const net = require('net');
const path = require('path');
const L = require('./lib');

// A wrapper that runs the server under `ulimit ARGS` (bash's: -n sets both limits, -Sn the soft).
function limited(bin, dir, ulimitArgs, name) {
  const p = path.join(dir, name);
  fs.writeFileSync(p, `#!/bin/bash\nulimit ${ulimitArgs} || exit 99\nexec ${JSON.stringify(bin)} "$@"\n`, { mode: 0o755 });
  return p;
}

function limitsOf(pid) {
  const line = fs.readFileSync(`/proc/${pid}/limits`, 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  const [soft, hard] = line.replace('Max open files', '').trim().split(/\s+/);
  return { soft: Number(soft), hard: Number(hard) };
}

L.main('fd_limit', async () => {
  const { bin, vocab } = L.parseArgs();
  const dir = L.tmpDir('fdlimit');
  const model = L.makeModel(bin, vocab);

  // soft limit 100 under a higher hard one: raised to what 256 connections need, 320
  const hard = Number(require('child_process').execSync('ulimit -Hn', { shell: '/bin/bash' }).toString().trim());
  if (hard >= 320) {
    const srv = await L.startServer(limited(bin, dir, '-Sn 100', 'soft100'), vocab, model, ['--no-request-log']);
    const lim = limitsOf(srv.proc.pid);
    L.eq(lim.soft, 320, 'the soft limit after start (--max-connections 256 and 64)');
    L.check(!/--max-connections/.test(srv.stderr), () => `a warning though ${lim.soft} descriptors suffice: ${srv.stderr}`);
    L.log(`ulimit -Sn 100 (hard ${lim.hard}): the server raised its soft limit to ${lim.soft}; --max-connections 256 kept`);
    await srv.stop();
  } else {
    L.cannotCheck(`the hard limit here is ${hard}: raising the soft limit is not checked`);
  }

  // both limits 100, --max-connections 256: lowered to 36, loudly, and enforced
  const srv = await L.startServer(limited(bin, dir, '-n 100', 'hard100'), vocab, model, ['--no-request-log', '--max-connections', '256']);
  L.check(/--max-connections 256 needs 320 file descriptors and this process may open 100 .*serving at most 36 connections/.test(srv.stderr),
    () => `no warning for --max-connections 256 under ulimit -n 100: ${srv.stderr}`);
  const clients = [];
  for (let i = 0; i < 36; i++) clients.push(await L.Client.open(srv.port, { name: `c${i}` }));
  const extra = await L.Client.connect(srv.port, { name: 'c36' });
  const info = await L.withTimeout(extra.closed, 10000, 'the 37th connection closed');
  L.eq(info.code, 1013, 'the 37th connection: close code');
  L.check(/limit 36/.test(info.reason), `the 37th connection: reason ${info.reason}`);
  L.log(`ulimit -n 100 and --max-connections 256: lowered to 36 with a warning; 36 served, the 37th closed ${info.code} "${info.reason}"`);
  for (const c of clients) c.close();
  await Promise.all(clients.map((c) => c.closed));

  // idle TCP sockets until accept fails with EMFILE, for two seconds: the repeated log line is
  // printed at most once a second (with a count), and the server serves again once they close
  const before = srv.stderr.length;
  const socks = [];
  for (let i = 0; i < 120; i++) {
    const s = net.connect(srv.port, '127.0.0.1');
    s.on('error', () => {});
    socks.push(s);
  }
  await L.sleep(2500);
  const flood = srv.stderr.slice(before);
  const lines = flood.split('\n').filter((l) => /errno 24|Too many open files/i.test(l));
  const repeats = flood.split('\n').filter((l) => /the line above \d+ more times/.test(l));
  for (const s of socks) s.destroy();
  L.check(lines.length >= 1, () => `no accept error logged with the descriptors exhausted: ${flood.slice(0, 500)}`);
  L.check(lines.length <= 6, () => `${lines.length} accept error lines in 2.5 s: not rate-limited`);
  await L.until(async () => {
    try {
      return (await L.httpRequest(srv.port, '/healthz', { timeoutMs: 2000 })).status === 200;
    } catch (e) {
      return false;
    }
  }, 20000, 'the server to answer again once the idle sockets closed');
  const again = await L.Client.open(srv.port, { name: 'after' });
  again.send({ type: 'generate', id: 'a', prompt: 'Hello', max_tokens: 2 });
  L.eq((await again.waitEnd('a')).type, 'done', 'a request after the descriptors came back');
  again.close();
  await again.closed;
  // the count of the suppressed lines comes with the next line that differs
  L.log(`120 idle sockets under ulimit -n 100: ${lines.length} accept-error line(s) in 2.5 s` +
    `${repeats.length ? ` (${repeats.join('; ')})` : ''}; served again after they closed`);
  srv.assertAlive();
  await srv.stop();
});
