'use strict';
// ws_client.js: the WebSocket part of the integration tests' helpers (re-exported by lib.js): Client
// (a `ws` client that records every frame and the protocol violations it sees), the check of one
// request's documented frame order (checkRequestFrames), and RawWs, a hand-built WebSocket on a
// net.Socket for what `ws` will not do (pausing reads, odd frames, fragments).

const crypto = require('crypto');
const net = require('net');
const path = require('path');
const { TestFailure, check, eq, now } = require('./harness');

let WebSocket;
try {
  WebSocket = require('ws');
} catch (e) {
  WebSocket = require(path.join(__dirname, '..', '..', 'node_modules', 'ws'));
}

// ---- WebSocket client ----------------------------------------------------------------------------

let SEQ = 0; // arrival order across every client of the process

// A `ws` client that records every frame it receives: {seq, t (ms, monotonic), msg}. It also
// records protocol violations it sees on the way (a binary frame, a frame that is not a JSON
// object with a string type).
class Client {
  constructor(ws, name) {
    this.ws = ws;
    this.name = name;
    this.frames = [];
    this.byId = new Map();
    this.violations = [];
    this.waiters = [];
    this.closeInfo = null;
    this.closed = new Promise((resolve) => {
      this._resolveClosed = resolve;
    });
    this.errors = [];
    ws.on('message', (data, isBinary) => this._onMessage(data, isBinary));
    ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString('utf8'), t: now() };
      this._resolveClosed(this.closeInfo);
      this._wake();
    });
    ws.on('error', (e) => this.errors.push(e));
  }

  static connect(port, { name = 'client', path: p = '/ws', timeoutMs = 30000, wsOptions = {} } = {}) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}${p}`, { perMessageDeflate: false,
        maxPayload: 64 << 20, ...wsOptions });
      const c = new Client(ws, name);
      const t = setTimeout(() => {
        ws.terminate();
        reject(new TestFailure(`${name}: no WebSocket connection after ${timeoutMs} ms`));
      }, timeoutMs);
      ws.once('open', () => {
        clearTimeout(t);
        resolve(c);
      });
      ws.once('unexpected-response', (req, res) => {
        clearTimeout(t);
        reject(new TestFailure(`${name}: upgrade refused with HTTP ${res.statusCode}`));
      });
      ws.once('error', (e) => {
        clearTimeout(t);
        reject(new TestFailure(`${name}: WebSocket error: ${e.message}`));
      });
    });
  }

  // connects and waits for `hello`
  static async open(port, opts = {}) {
    const c = await Client.connect(port, opts);
    c.hello = (await c.waitFor((f) => f.msg.type === 'hello', 30000, 'hello')).msg;
    return c;
  }

  _onMessage(data, isBinary) {
    const f = { seq: ++SEQ, t: now(), msg: null, raw: data };
    this.bytesIn = (this.bytesIn || 0) + data.length;
    if (isBinary) this.violations.push(`binary frame from the server (${data.length} bytes)`);
    try {
      f.msg = JSON.parse(data.toString('utf8'));
    } catch (e) {
      this.violations.push(`frame is not JSON: ${data.toString('utf8').slice(0, 200)}`);
      f.msg = { type: '(invalid)' };
    }
    if (!f.msg || typeof f.msg !== 'object' || Array.isArray(f.msg) || typeof f.msg.type !== 'string') {
      this.violations.push(`frame is not an object with a string type: ${data.toString('utf8').slice(0, 200)}`);
      f.msg = { type: '(invalid)' };
    }
    this.frames.push(f);
    const id = f.msg.id;
    if (typeof id === 'string' && ['queued', 'started', 'token', 'done', 'error'].includes(f.msg.type)) {
      if (!this.byId.has(id)) this.byId.set(id, []);
      this.byId.get(id).push(f);
    }
    if (this.onFrame) this.onFrame(f);
    this._wake();
  }

  _wake() {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  // Resolves with the first frame (from index `from` on) that satisfies pred. Fails if the socket
  // closes first or after timeoutMs.
  waitFor(pred, timeoutMs = 30000, what = 'a frame', from = 0) {
    return new Promise((resolve, reject) => {
      let i = from;
      let timer = null;
      const look = () => {
        for (; i < this.frames.length; i++) {
          if (pred(this.frames[i])) {
            if (timer) clearTimeout(timer);
            resolve(this.frames[i]);
            return;
          }
        }
        if (this.closeInfo) {
          if (timer) clearTimeout(timer);
          reject(new TestFailure(`${this.name}: connection closed (${this.closeInfo.code} ` +
            `${JSON.stringify(this.closeInfo.reason)}) while waiting for ${what}`));
          return;
        }
        this.waiters.push(look);
      };
      timer = setTimeout(() => {
        const idx = this.waiters.indexOf(look);
        if (idx >= 0) this.waiters.splice(idx, 1);
        const lastFrames = this.frames.slice(-3).map((f) => JSON.stringify(f.msg)).join('\n  ');
        reject(new TestFailure(`${this.name}: timed out after ${timeoutMs} ms waiting for ${what}; ` +
          `last frames:\n  ${lastFrames}`));
      }, timeoutMs);
      look();
    });
  }

  send(obj) {
    this.ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj));
  }

  framesFor(id) {
    return this.byId.get(id) || [];
  }

  // Waits for the done or error frame of request `id`.
  // (frames from index `from` on: an id may be reused once its request is over)
  async waitEnd(id, timeoutMs = 120000, from = 0) {
    const f = await this.waitFor((fr) => fr.msg.id === id && (fr.msg.type === 'done' || fr.msg.type === 'error'),
      timeoutMs, `the end of request ${id}`, from);
    return f.msg;
  }

  // Sends a generate and waits for its done (or error); returns {done, error, frames, tokens, text}
  // over the frames of this id that arrived after the send.
  async request(params, timeoutMs = 120000) {
    const from = this.frames.length;
    this.send({ type: 'generate', ...params });
    const end = await this.waitEnd(params.id, timeoutMs, from);
    const firstSeq = from < this.frames.length ? this.frames[from].seq : Infinity;
    return summarize(this.framesFor(params.id).filter((f) => f.seq >= firstSeq), end);
  }

  async ping(timeoutMs = 30000) {
    const id = `ping-${crypto.randomBytes(4).toString('hex')}`;
    const from = this.frames.length;
    this.send({ type: 'ping', id });
    return (await this.waitFor((f) => f.msg.type === 'pong' && f.msg.id === id, timeoutMs, 'pong', from)).msg;
  }

  assertNoViolations() {
    check(this.violations.length === 0, () => `${this.name}: protocol violations:\n  ${this.violations.join('\n  ')}`);
  }

  close() {
    try {
      this.ws.close(1000);
    } catch (e) {
      /* closed */
    }
  }

  terminate() {
    this.ws.terminate();
  }
}

function summarize(frames, end) {
  const tokens = frames.filter((f) => f.msg.type === 'token');
  return {
    frames,
    done: end && end.type === 'done' ? end : null,
    error: end && end.type === 'error' ? end : null,
    tokens,
    text: tokens.map((f) => f.msg.text).join(''),
  };
}

// Checks the documented frame order of one request that ran to a done frame: queued (>= 1),
// started, token x N with index 0..N-1, done (last), consistent ids/rids/policy. Returns
// {tokens, text, done, started}. `expect` may hold {model, seed, n, finish}.
function checkRequestFrames(frames, id, expect = {}) {
  const msgs = frames.map((f) => f.msg);
  const where = () => `request ${id}: frames ${msgs.map((m) => m.type + (m.type === 'token' ? m.index : '')).join(',')}`;
  check(msgs.length >= 3, () => `${where()}: too few frames`);
  let i = 0;
  let rid = null;
  while (i < msgs.length && msgs[i].type === 'queued') {
    const q = msgs[i];
    check(Number.isInteger(q.rid) && q.rid >= 0, () => `${where()}: queued without an integer rid`);
    check(rid === null || rid === q.rid, () => `${where()}: queued frames with different rids`);
    rid = q.rid;
    check(Number.isInteger(q.position) && q.position >= 1, () => `${where()}: queued position ${q.position}`);
    if (expect.model) eq(q.model, expect.model, `${id} queued.model`);
    i++;
  }
  check(i >= 1, () => `${where()}: does not start with queued`);
  const started = msgs[i];
  check(started && started.type === 'started', () => `${where()}: no started after queued`);
  eq(started.rid, rid, `${id} started.rid (queued had ${rid})`);
  if (expect.model) eq(started.model, expect.model, `${id} started.model`);
  if (expect.seed !== undefined) eq(started.seed, expect.seed, `${id} started.seed`);
  check(Number.isInteger(started.prompt_tokens) && started.prompt_tokens >= 1, () => `${where()}: started.prompt_tokens`);
  i++;
  const tokens = [];
  while (i < msgs.length && msgs[i].type === 'token') {
    const t = msgs[i];
    eq(t.index, tokens.length, `${id} token index`);
    check(Number.isInteger(t.token) && t.token >= 0, () => `${where()}: token id ${t.token}`);
    check(typeof t.text === 'string', () => `${where()}: token text not a string`);
    tokens.push(t);
    i++;
  }
  const done = msgs[i];
  check(done && done.type === 'done', () => `${where()}: no done after the tokens (got ${done && done.type})`);
  check(i === msgs.length - 1, () => `${where()}: ${msgs.length - 1 - i} frames after done`);
  if (expect.n !== undefined) eq(tokens.length, expect.n, `${id} token frames`);
  if (expect.finish) eq(done.finish_reason, expect.finish, `${id} finish_reason`);
  check(done.usage && done.usage.completion_tokens === tokens.length,
    () => `${where()}: usage.completion_tokens ${done.usage && done.usage.completion_tokens} != ${tokens.length} token frames`);
  eq(done.usage.prompt_tokens, started.prompt_tokens, `${id} usage.prompt_tokens vs started`);
  check(done.timing && typeof done.timing.total_ms === 'number', () => `${where()}: done.timing.total_ms missing`);
  return { tokens, text: tokens.map((t) => t.text).join(''), done, started, rid };
}

// ---- raw WebSocket (hand-built frames on a net.Socket) -------------------------------------------

// Opens a TCP connection, does the upgrade handshake by hand, then parses server frames.
// Options: path, paused (do not read after the handshake), onFrame.
class RawWs {
  static connect(port, { path: p = '/ws', timeoutMs = 30000, paused = false } = {}) {
    return new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1');
      const key = crypto.randomBytes(16).toString('base64');
      let buf = Buffer.alloc(0);
      const t = setTimeout(() => {
        sock.destroy();
        reject(new TestFailure(`raw WebSocket: no handshake answer after ${timeoutMs} ms`));
      }, timeoutMs);
      sock.on('connect', () => {
        sock.write(`GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
      });
      const onData = (c) => {
        buf = Buffer.concat([buf, c]);
        const he = buf.indexOf('\r\n\r\n');
        if (he < 0) return;
        sock.removeListener('data', onData);
        clearTimeout(t);
        const head = buf.subarray(0, he).toString('latin1');
        const rest = buf.subarray(he + 4);
        if (!/^HTTP\/1\.1 101/.test(head)) {
          sock.destroy();
          reject(new TestFailure(`raw WebSocket: upgrade refused: ${head.split('\r\n')[0]}`));
          return;
        }
        const accept = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11')
          .digest('base64');
        const m = /\r\nsec-websocket-accept:\s*(\S+)/i.exec(head);
        if (!m || m[1] !== accept) {
          sock.destroy();
          reject(new TestFailure(`raw WebSocket: bad Sec-WebSocket-Accept in ${JSON.stringify(head)}`));
          return;
        }
        if (paused) sock.pause(); // reads nothing more until resume()
        resolve(new RawWs(sock, rest));
      };
      sock.on('data', onData);
      sock.on('error', (e) => {
        clearTimeout(t);
        reject(e);
      });
    });
  }

  constructor(sock, initial) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.frames = []; // {opcode, fin, payload}
    this.messages = []; // text messages, parsed JSON when possible
    this.closeFrame = null; // {code, reason}
    this.ended = false;
    this.bytesIn = 0;
    this.waiters = [];
    this.error = null;
    this.replyClose = true;
    this.sentClose = false;
    sock.on('data', (c) => this._onData(c));
    sock.on('end', () => {
      this.ended = true;
      this._wake();
    });
    sock.on('close', () => {
      this.ended = true;
      this._wake();
    });
    sock.on('error', (e) => {
      this.error = e;
      this.ended = true;
      this._wake();
    });
    if (initial.length) this._onData(initial);
  }

  _wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  _onData(c) {
    this.bytesIn += c.length;
    this.buf = Buffer.concat([this.buf, c]);
    for (;;) {
      const b = this.buf;
      if (b.length < 2) break;
      const fin = !!(b[0] & 0x80);
      const opcode = b[0] & 0x0f;
      const masked = !!(b[1] & 0x80);
      let len = b[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (b.length < 4) break;
        len = b.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (b.length < 10) break;
        len = Number(b.readBigUInt64BE(2));
        off = 10;
      }
      if (masked) off += 4; // servers must not mask; recorded below
      if (b.length < off + len) break;
      const payload = Buffer.from(b.subarray(off, off + len));
      this.buf = b.subarray(off + len);
      const fr = { opcode, fin, masked, payload };
      this.frames.push(fr);
      if (opcode === 8) {
        this.closeFrame = {
          code: payload.length >= 2 ? payload.readUInt16BE(0) : null,
          reason: payload.length > 2 ? payload.subarray(2).toString('utf8') : '',
        };
        // answer the close handshake as a client does (the server then drops the TCP connection)
        if (this.replyClose && !this.sentClose && !this.sock.destroyed) {
          this.sentClose = true;
          this.sock.write(encodeFrame(8, payload.subarray(0, 2)));
        }
      } else if (opcode === 1) {
        let msg;
        try {
          msg = JSON.parse(payload.toString('utf8'));
        } catch (e) {
          msg = { type: '(invalid)', raw: payload.toString('utf8') };
        }
        this.messages.push(msg);
      }
    }
    this._wake();
  }

  // Writes one frame (client frames are masked). payload: Buffer or string.
  sendFrame(opcode, payload, { fin = true, mask = true } = {}) {
    this.sock.write(encodeFrame(opcode, payload, { fin, mask }));
  }

  sendText(s, opts) {
    this.sendFrame(1, Buffer.from(s, 'utf8'), opts);
  }

  waitFor(pred, timeoutMs, what) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        const i = this.waiters.indexOf(look);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new TestFailure(`raw WebSocket: timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const look = () => {
        const r = pred(this);
        if (r) {
          clearTimeout(t);
          resolve(r);
          return;
        }
        if (this.ended) {
          clearTimeout(t);
          const r2 = pred(this);
          if (r2) resolve(r2);
          else reject(new TestFailure(`raw WebSocket: connection ended while waiting for ${what}`));
          return;
        }
        this.waiters.push(look);
      };
      look();
    });
  }

  // Waits for the server's close frame and the end of the socket.
  async waitClose(timeoutMs = 10000) {
    await this.waitFor((s) => s.ended || null, timeoutMs, 'the connection to end');
    return this.closeFrame;
  }

  destroy() {
    this.sock.destroy();
  }
}

function encodeFrame(opcode, payload, { fin = true, mask = true } = {}) {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  const len = data.length;
  let head;
  if (len < 126) {
    head = Buffer.alloc(2);
    head[1] = len;
  } else if (len < 65536) {
    head = Buffer.alloc(4);
    head[1] = 126;
    head.writeUInt16BE(len, 2);
  } else {
    head = Buffer.alloc(10);
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(len), 2);
  }
  head[0] = (fin ? 0x80 : 0) | (opcode & 0x0f);
  if (!mask) return Buffer.concat([head, data]);
  head[1] |= 0x80;
  const key = crypto.randomBytes(4);
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) out[i] = data[i] ^ key[i & 3];
  return Buffer.concat([head, key, out]);
}

module.exports = { WebSocket, Client, summarize, checkRequestFrames, RawWs, encodeFrame };
