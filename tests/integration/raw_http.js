'use strict';
// raw_http: what tests/integration/soak.test.js drives its hostile connections with, apart from
// the test: a seeded PRNG (so a run's plan is reproducible), a POST as raw bytes, a strict parser
// of HTTP/1.1 responses (status line, headers, Content-Length or chunked framing), and Conn, one
// raw loopback connection that parses what it receives as it comes and records how it ended.
const net = require('net');
const L = require('./lib');

// ---- a seeded PRNG (mulberry32) --------------------------------------------------------------------

function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), // lo..hi inclusive
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
  };
}

// ---- requests, as bytes --------------------------------------------------------------------------

function postRaw(body, { path = '/v1/completions', extra = '', length = null } = {}) {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}` +
    `Content-Length: ${length === null ? b.length : length}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

// ---- HTTP/1.1 responses, parsed strictly ---------------------------------------------------------

// Splits buf into complete responses. Returns {responses, error, rest}: error names the first
// malformed thing (status line, header line, framing); rest: the bytes of an incomplete response.
// A response without Content-Length or chunked coding runs to the close (closed: true).
function parseResponses(buf, closed) {
  const responses = [];
  let at = 0;
  while (at < buf.length) {
    const he = buf.indexOf('\r\n\r\n', at, 'latin1');
    if (he < 0) {
      if (buf.length - at > 16384) return { responses, error: 'a response head over 16 KiB', rest: buf.length - at };
      return { responses, error: null, rest: buf.length - at };
    }
    const lines = buf.subarray(at, he).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.1 ([1-5]\d\d) ([^\r\n]*)$/.exec(lines[0]);
    if (!m) return { responses, error: `malformed status line ${JSON.stringify(lines[0].slice(0, 80))}`, rest: buf.length - at };
    const headers = {};
    for (const line of lines.slice(1)) {
      const h = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/.exec(line);
      if (!h) return { responses, error: `malformed header line ${JSON.stringify(line.slice(0, 80))}`, rest: buf.length - at };
      const k = h[1].toLowerCase();
      if (k in headers && k === 'content-length') return { responses, error: 'two Content-Length headers', rest: buf.length - at };
      headers[k] = h[2];
    }
    const status = Number(m[1]);
    let p = he + 4;
    let body;
    if (/chunked/i.test(headers['transfer-encoding'] || '')) {
      if ('content-length' in headers) return { responses, error: 'Content-Length with chunked coding', rest: buf.length - at };
      const parts = [];
      for (;;) {
        const le = buf.indexOf('\r\n', p, 'latin1');
        if (le < 0) return { responses, error: null, rest: buf.length - at };
        const sz = /^([0-9a-fA-F]{1,8})(;[^\r\n]*)?$/.exec(buf.subarray(p, le).toString('latin1'));
        if (!sz) return { responses, error: `malformed chunk size ${JSON.stringify(buf.subarray(p, le).toString('latin1').slice(0, 40))}`, rest: buf.length - at };
        const n = parseInt(sz[1], 16);
        if (n === 0) {
          // (no trailers expected: the empty line right after)
          if (buf.length < le + 4) return { responses, error: null, rest: buf.length - at };
          if (buf.subarray(le + 2, le + 4).toString('latin1') !== '\r\n')
            return { responses, error: 'no empty line after the last chunk', rest: buf.length - at };
          p = le + 4;
          break;
        }
        if (buf.length < le + 2 + n + 2) return { responses, error: null, rest: buf.length - at };
        parts.push(buf.subarray(le + 2, le + 2 + n));
        if (buf.subarray(le + 2 + n, le + 4 + n).toString('latin1') !== '\r\n')
          return { responses, error: 'a chunk not followed by CRLF', rest: buf.length - at };
        p = le + 4 + n;
      }
      body = Buffer.concat(parts);
    } else if ('content-length' in headers) {
      if (!/^\d+$/.test(headers['content-length'])) return { responses, error: `Content-Length ${headers['content-length']}`, rest: buf.length - at };
      const n = Number(headers['content-length']);
      if (buf.length < p + n) return { responses, error: null, rest: buf.length - at };
      body = buf.subarray(p, p + n);
      p += n;
    } else if (status === 204 || status === 304 || status < 200) {
      body = Buffer.alloc(0);
    } else {
      if (!closed) return { responses, error: null, rest: buf.length - at };
      body = buf.subarray(p);
      p = buf.length;
    }
    responses.push({ status, reason: m[2], headers, body, text: body.toString('utf8') });
    at = p;
  }
  return { responses, error: null, rest: 0 };
}

// One raw connection: what it received, parsed as it comes; how it ended.
class Conn {
  constructor(port) {
    this.buf = Buffer.alloc(0);
    this.responses = [];
    this.error = null; // malformed response
    this.ended = null; // 'end' (FIN), 'reset' (ECONNRESET/EPIPE), 'error CODE', 'destroyed' (by us)
    this.t0 = L.now();
    this.firstByteMs = null;
    this.endMs = null;
    this.waiters = [];
    this.sock = net.connect(port, '127.0.0.1');
    this.sock.setNoDelay(true);
    // (or failed: the exchange's checks then find no answer)
    this.connected = new Promise((resolve) => {
      this.sock.once('connect', resolve);
      this.sock.once('close', resolve);
    });
    this.sock.on('data', (c) => {
      if (this.firstByteMs === null) this.firstByteMs = L.now() - this.t0;
      this.buf = Buffer.concat([this.buf, c]);
      this._parse(false);
    });
    this.sock.on('end', () => this._end('end'));
    this.sock.on('error', (e) => this._end(e.code === 'ECONNRESET' || e.code === 'EPIPE' ? 'reset' : `error ${e.code}`));
    this.sock.on('close', () => this._end('end'));
  }

  _parse(closed) {
    const r = parseResponses(this.buf, closed);
    this.responses = r.responses;
    if (r.error && !this.error) this.error = r.error;
    this.rest = r.rest;
    this._wake();
  }

  _end(how) {
    if (this.ended) return;
    this.ended = how;
    this.endMs = L.now() - this.t0;
    this._parse(true);
    this.sock.destroy();
    this._wake();
  }

  _wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  // Resolves once pred() holds, the connection ended, or ms passed (then with false).
  wait(pred, ms) {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        const i = this.waiters.indexOf(look);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(false);
      }, ms);
      const look = () => {
        if (pred() || this.ended || this.error) {
          clearTimeout(t);
          resolve(!!pred());
          return;
        }
        this.waiters.push(look);
      };
      look();
    });
  }

  waitResponses(n, ms) {
    return this.wait(() => this.responses.length >= n, ms);
  }

  waitEnd(ms) {
    return this.wait(() => !!this.ended, ms);
  }

  write(b) {
    if (!this.ended && !this.sock.destroyed) this.sock.write(b);
  }

  destroy() {
    if (!this.ended) this._end('destroyed');
  }

  // the outcome class of the exchange
  // the outcome class of the exchange: complete responses; closed (FIN) with 0 bytes; reset with 0
  // bytes; cut by us before a whole response; anything else is a broken answer
  get outcome() {
    if (this.responses.length) return 'response';
    if (this.ended === 'destroyed') return 'cut by us';
    if (this.ended === 'end' && !this.buf.length) return 'closed, 0 bytes';
    if (this.ended === 'reset' && !this.buf.length) return 'reset';
    return `incomplete (${this.ended}, ${this.buf.length} bytes)`;
  }
}

// ---- the checks of an answer ---------------------------------------------------------------------

module.exports = { prng, postRaw, parseResponses, Conn };
