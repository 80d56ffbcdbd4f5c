// app.js: the inflight page's client: the WebSocket session (docs/protocol.md) with reconnection,
// the composer (its sampling parameters' panel, built from the hello's parameter table, and its
// checks are params.js's), the requests of the cards (conversation.js: one card per conversation,
// its turns streaming in; Chat mode and continued cards send `messages` with the card's
// `conversation` id; a regenerated or edited turn (chat_tools.js) is sent the same way), and the
// live batch views fed by `step` frames (batchview.js).
//
// Hooks for tests and curious users:
//   each card: <li class="card" data-id="c1" data-state="new|queued|started|streaming|done|error"
//              data-model="iterative" data-rid="17" data-finish="length"> with a .completion
//              (its current request's; the thread's hooks are in conversation.js, the tools'
//              in chat_tools.js)
//   <body data-conn="connecting|open|closed" data-steps="on|off" data-session="...">
//   window.inflightSteps = {iterative: [...], static: [...]}: the last step frames, as received
//   window.inflight: the page's state (hello, cards by id, requests by id, own rids by model)
// The connection presents this browser's user key (userkey.js) as /ws?user=KEY, so the history
// page (history.html) can list this browser's past requests.

import { BatchView } from './batchview.js';
import { initCards } from './conversation.js';
import { bind as bindParams, setFieldError, byteLength, rememberTable } from './params.js';
import * as userKey from './userkey.js';

const $ = (sel, root) => (root || document).querySelector(sel);
const POLICIES = ['iterative', 'static'];
const LABELS = { iterative: 'Iterative', static: 'Static' };
const STEPS_KEPT = 5000;
const DEMO_PROMPTS = ['Programming in C++ is like', 'Programming in Assembly is like'];
const DEMO_GAP_MS = 50;
const PING_EVERY_MS = 15000;
const PONG_TIMEOUT_MS = 45000;

const steps = { iterative: [], static: [] };
window.inflightSteps = steps;

const app = {
  ws: null,
  hello: null,
  limits: {},     // the last hello's limits (kept while reconnecting); {} before the first
  vocab: null,    // the last hello's model.vocab_size
  session: null,
  cards: new Map(),                                   // card id -> card
  reqs: new Map(),                                    // request id (a turn's) -> card
  own: { iterative: new Map(), static: new Map() },   // rid -> card (this connection's)
  waiting: { iterative: new Map(), static: new Map() },  // rid -> card still in the queue
  nextId: 1,
  nextColor: 0,
  retries: 0,
  retryTimer: 0,
  countdownTimer: 0,
  retryAt: 0,
  pingTimer: 0,
  pingSeq: 0,
  pingSent: new Map(),
  rttMs: null,
};
window.inflight = app;

const el = {
  body: document.body,
  connText: $('#conn-text'),
  reconnectNow: $('#reconnect-now'),
  modelSummary: $('#model-summary'),
  banner: $('#banner'),
  bannerText: $('#banner-text'),
  bannerClose: $('#banner-close'),
  form: $('#composer'),
  prompt: $('#prompt'),
  send: $('#send'),
  demo: $('#demo'),
  formErr: $('#form-err'),
  paramsBox: $('#params'),
  paramsGrid: $('#params-grid'),
  paramsBrief: $('#params-brief'),
  cards: $('#cards'),
  cardsEmpty: $('#cards-empty'),
  cardsCount: $('#cards-count'),
  clearDone: $('#clear-done'),
  template: $('#card-template'),
  turnTemplate: $('#turn-template'),
  newChat: $('#new-chat'),
  zoom: $('#zoom'),
  pause: $('#pause'),
  serverName: $('#server-name'),
  sessionId: $('#session-id'),
  historyLink: $('#history-link'),
};

// ---------------------------------------------------------------- batch views

const views = {};
for (const p of POLICIES) {
  views[p] = new BatchView($('#batch-' + p), p, LABELS[p], (rid) => {
    const c = app.own[p].get(rid);
    if (!c) return null;
    const t = c.turns.find((x) => x.rid === rid && x.model === p);
    return { id: t ? t.reqId : c.id, color: c.color, promptTokens: t ? t.promptTokens : null };
  });
}
app.views = views;
const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');
const rethemeViews = () => { for (const p of POLICIES) views[p].readTheme(); };
if (darkQuery.addEventListener) darkQuery.addEventListener('change', rethemeViews);
el.zoom.addEventListener('change', () => {
  for (const p of POLICIES) views[p].setZoom(el.zoom.value);
});
el.pause.addEventListener('click', () => {
  const paused = el.pause.getAttribute('aria-pressed') !== 'true';
  el.pause.setAttribute('aria-pressed', String(paused));
  el.pause.textContent = paused ? 'Resume' : 'Pause';
  for (const p of POLICIES) views[p].setPaused(paused);
});

// ---------------------------------------------------------------- banner and connection status

function showBanner(text) {
  el.bannerText.textContent = text;
  el.banner.hidden = false;
}
el.bannerClose.addEventListener('click', () => { el.banner.hidden = true; });

function setConn(state, text) {
  el.body.dataset.conn = state;
  el.connText.textContent = text;
  el.reconnectNow.hidden = state !== 'closed';
  const usable = state === 'open';
  el.send.disabled = !usable;
  el.demo.disabled = !usable;
  for (const b of document.querySelectorAll('.turn-send')) b.disabled = !usable;
  el.send.title = usable ? '' : 'Not connected to the server';
}

// ---------------------------------------------------------------- connection

// A server started with --api-key wants it on /ws too: open the page as /?api_key=KEY.
function wsUrl() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const apiKey = new URLSearchParams(location.search).get('api_key');
  return proto + '//' + location.host + '/ws?user=' + encodeURIComponent(userKey.get().key) +
    (apiKey ? '&api_key=' + encodeURIComponent(apiKey) : '');
}

function connect() {
  clearTimeout(app.retryTimer);
  clearInterval(app.countdownTimer);
  if (app.ws) return;
  if (!/^https?:$/.test(location.protocol)) {
    setConn('closed', 'Offline');
    showBanner('Open this page from `inflight serve` (http://HOST:PORT/), not as a file.');
    return;
  }
  setConn('connecting', app.retries ? 'Reconnecting…' : 'Connecting…');
  let ws;
  try {
    ws = new WebSocket(wsUrl());
  } catch (e) {
    onClosed(null, { code: 1006, reason: String(e && e.message || e) });
    return;
  }
  app.ws = ws;
  ws.addEventListener('open', () => {
    if (app.ws === ws) setConn('connecting', 'Connected, waiting for the server…');
  });
  ws.addEventListener('message', (ev) => { if (app.ws === ws) onMessage(ev); });
  ws.addEventListener('close', (ev) => { if (app.ws === ws) onClosed(ws, ev); });
}

const CLOSE_REASONS = {
  4000: 'the server stopped answering',
  1001: 'the server is shutting down',
  1007: 'the server received text that is not UTF-8',
  1008: 'this page fell too far behind the server, or the server refused its user key',
  1009: 'a message was too large',
  1013: 'the server has too many connections',
};

function onClosed(ws, ev) {
  app.ws = null;
  app.hello = null;
  clearInterval(app.pingTimer);
  app.pingSent.clear();
  el.body.dataset.steps = 'off';
  // a server started with --api-key closes a /ws without the key with 1008 and says so
  const why = ev.code === 1008 && /API key/i.test(ev.reason || '')
    ? 'this server needs an API key: open this page as ' + location.pathname + '?api_key=KEY'
    : CLOSE_REASONS[ev.code];
  let lost = 0;
  for (const c of app.cards.values()) {
    if (!isFinal(c)) {
      lost++;
      cards.fail(c, 'disconnected', 'The connection closed before this request finished' +
        (why ? ' (' + why + ')' : '') + '; the server cancelled it.');
    }
  }
  if (why) showBanner('Disconnected: ' + why + '.' + (lost ? ` ${lost} request${lost > 1 ? 's were' : ' was'} cancelled.` : ''));
  const base = Math.min(15000, 500 * Math.pow(2, app.retries));
  const delay = Math.round(base * (0.75 + Math.random() * 0.5));
  app.retries++;
  app.retryAt = Date.now() + delay;
  const tick = () => {
    const s = Math.max(0, Math.ceil((app.retryAt - Date.now()) / 1000));
    setConn('closed', s > 0 ? `Disconnected · retrying in ${s} s` : 'Disconnected · retrying…');
  };
  tick();
  clearInterval(app.countdownTimer);
  app.countdownTimer = setInterval(tick, 500);
  clearTimeout(app.retryTimer);
  app.retryTimer = setTimeout(connect, delay);
}

el.reconnectNow.addEventListener('click', () => { app.retries = 0; connect(); });

function send(obj) {
  if (!app.ws || app.ws.readyState !== WebSocket.OPEN) return false;
  app.ws.send(JSON.stringify(obj));
  return true;
}

// A ping now and every PING_EVERY_MS: the round trip shows in the status; a pong overdue by
// PONG_TIMEOUT_MS means a dead connection, dropped at once (its late events are ignored).
function startPings() {
  const ping = () => {
    const now = Date.now();
    for (const t of app.pingSent.values()) {
      if (now - t > PONG_TIMEOUT_MS && app.ws) {
        const dead = app.ws;
        onClosed(dead, { code: 4000 });
        try { dead.close(4000, 'no pong'); } catch (e) { /* already closing */ }
        return;
      }
    }
    const id = 'p' + (++app.pingSeq);
    if (send({ type: 'ping', id })) app.pingSent.set(id, now);
  };
  clearInterval(app.pingTimer);
  app.pingTimer = setInterval(ping, PING_EVERY_MS);
  ping();
}

function connectedText() {
  return 'Connected' + (app.rttMs != null ? ` · ${app.rttMs < 1 ? '<1' : Math.round(app.rttMs)} ms` : '');
}

// ---------------------------------------------------------------- messages

function onMessage(ev) {
  if (typeof ev.data !== 'string') return;
  let m;
  try {
    m = JSON.parse(ev.data);
  } catch (e) {
    showBanner('The server sent a message that is not JSON.');
    return;
  }
  if (!m || typeof m !== 'object') return;
  switch (m.type) {
    case 'hello': onHello(m); break;
    case 'subscribed': if (m.topic === 'steps') el.body.dataset.steps = 'on'; break;
    case 'unsubscribed': if (m.topic === 'steps') el.body.dataset.steps = 'off'; break;
    case 'queued': onQueued(m); break;
    case 'started': onStarted(m); break;
    case 'token': onToken(m); break;
    case 'done': onDone(m); break;
    case 'error': onError(m); break;
    case 'step': onStep(m); break;
    case 'pong': onPong(m); break;
    default: break;   // newer servers may say more
  }
}

function onHello(m) {
  app.hello = m;
  app.session = m.session || null;
  app.retries = 0;
  clearInterval(app.countdownTimer);
  // A new session: rids and steps start over for this page.
  for (const p of POLICIES) {
    app.own[p].clear();
    app.waiting[p].clear();
    steps[p].length = 0;
    views[p].reset();
  }
  el.body.dataset.session = app.session || '';
  el.sessionId.textContent = app.session || '–';
  el.serverName.textContent = m.server || 'inflight';
  el.historyLink.title = m.history === 'off' ? 'History is off on this server'
    : 'Your past requests, with their timings';
  renderModel(m.model || {});
  applyHello(m);
  const policies = Array.isArray(m.policies) ? m.policies : POLICIES;
  for (const input of document.querySelectorAll('input[name="model"]')) {
    input.disabled = !policies.includes(input.value);
  }
  setConn('open', connectedText());
  send({ type: 'subscribe', topic: 'steps' });
  startPings();
}

function renderModel(model) {
  const box = el.modelSummary;
  box.textContent = '';
  const chip = (value, unit, title, cls) => {
    const s = document.createElement('span');
    s.className = 'chip' + (cls ? ' ' + cls : '');
    if (title) s.title = title;
    const b = document.createElement('b');
    b.textContent = value;
    s.append(b);
    if (unit) s.append(' ' + unit);
    box.append(s);
  };
  const name = String(model.name || 'model');
  chip(name, '', name);
  if (model.n_layer != null) chip(String(model.n_layer), 'layers');
  if (model.n_head != null) chip(String(model.n_head), 'heads');
  if (model.n_embd != null) chip(String(model.n_embd), 'wide');
  if (model.n_ctx != null) chip(String(model.n_ctx), 'context');
  if (model.weights) chip(String(model.weights), 'weights');
  if (model.device) {
    // the device line can be long ("cpu: 2 threads, own AVX-512 kernels ..."): its first clause
    const dev = String(model.device);
    chip(dev.split(', ')[0], '', 'Device: ' + dev, 'device');
  }
}

// The hello (docs/protocol.md): its parameter table is the sampling panel (params.js) from now
// on, its limits bound the messages, its default policy is selected unless the user chose one.
function applyHello(m) {
  app.limits = m.limits || {};
  app.vocab = (m.model && m.model.vocab_size) || null;
  const d = m.defaults || {};
  paramFields.build(m.params, d);
  if (Array.isArray(m.params)) rememberTable(m.params);
  if (d.model && !document.querySelector('input[name="model"][data-touched]')) {
    const r = document.querySelector(`input[name="model"][value="${d.model}"]`);
    if (r) r.checked = true;
  }
}

function onPong(m) {
  const t = app.pingSent.get(m.id);
  if (t != null) {
    app.pingSent.delete(m.id);
    app.rttMs = Date.now() - t;
    if (el.body.dataset.conn === 'open') el.connText.textContent = connectedText();
  }
}

function onStep(m) {
  const arr = steps[m.model];
  if (!arr) return;
  arr.push(m);
  if (arr.length > STEPS_KEPT * 1.2) arr.splice(0, arr.length - STEPS_KEPT);
  const waiting = [];
  for (const [rid, c] of app.waiting[m.model]) {
    if (c.state === 'queued') waiting.push(rid);
    else app.waiting[m.model].delete(rid);
  }
  views[m.model].push(m, waiting);
}

// ---------------------------------------------------------------- cards (conversation.js)

const cards = initCards({
  app, el,
  submitTurn: (card, text) => continueCard(card, text),
  send: (card, makeTurn, extra) => sendOn(card, makeTurn, extra),
  cancel: (card) => cancelCard(card),
  banner: showBanner,
  reuse: (card) => {
    el.prompt.value = card.prompt;
    el.prompt.focus();
    el.prompt.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  },
});
const isFinal = cards.isFinal;

function cancelCard(card) {
  if (isFinal(card)) return;
  if (!send({ type: 'cancel', id: card.turn ? card.turn.reqId : card.id })) {
    showBanner('Not connected: the request cannot be cancelled (a closed connection cancels it anyway).');
    return;
  }
  card.q['card-cancel'].disabled = true;
  card.q['card-cancel'].textContent = 'Cancelling…';
}

function onQueued(m) {
  const card = cards.cardOf(m.id);
  if (!card || isFinal(card)) return;
  bindRid(card, m);
  card.position = m.position;
  cards.touch(card);
}

function bindRid(card, m) {
  if (m.model && app.own[m.model]) {
    card.model = m.model;
    card.el.dataset.model = m.model;
    if (m.rid != null) {
      card.rid = m.rid;
      card.el.dataset.rid = String(m.rid);
      app.own[m.model].set(m.rid, card);
      if (card.turn) {
        card.turn.rid = m.rid;
        card.turn.model = m.model;
      }
      if (card.state === 'queued') app.waiting[m.model].set(m.rid, card);
    }
  }
}

function onStarted(m) {
  const card = cards.cardOf(m.id);
  if (!card || isFinal(card)) return;
  bindRid(card, m);
  card.position = null;
  card.promptTokens = m.prompt_tokens;
  if (typeof m.cached_tokens === 'number') card.cachedTokens = m.cached_tokens;
  card.seed = m.seed;
  cards.setTrim(card, m);   // what the server left out of a long conversation
  if (card.state === 'queued') cards.setState(card, 'started');
  cards.touch(card);
}

function onToken(m) {
  const card = cards.cardOf(m.id);
  if (!card || isFinal(card)) return;
  const now = performance.now();
  if (card.firstAt == null) card.firstAt = now;
  card.lastAt = now;
  card.tokens = (typeof m.index === 'number' ? m.index : card.tokens) + 1;
  if (m.text) {
    card.text += m.text;
    card.textNode.appendData(m.text);
  }
  if (card.state !== 'streaming') cards.setState(card, 'streaming');
  cards.touch(card);
}

function onDone(m) {
  const card = cards.cardOf(m.id);
  if (!card || isFinal(card)) return;
  card.finish = m.finish_reason || 'unknown';
  card.timing = m.timing || null;
  card.usage = m.usage || null;
  card.el.dataset.finish = card.finish;
  if (card.finish === 'error') {
    cards.fail(card, 'engine', m.message || 'The engine failed on this request.');
    return;
  }
  cards.finishTurn(card);
}

function onError(m) {
  const text = m.message || 'unknown error';
  const card = m.id != null ? cards.cardOf(m.id) : null;
  if (!card && m.id != null && app.reqs.has(m.id)) return;   // about an earlier turn of a card
  if (card) {
    if (isFinal(card)) return;   // e.g. a cancel that crossed the request's done
    if (m.code === 'unknown_id' && card.state !== 'queued') {
      // the cancel came too late: the request is finishing anyway
      card.q['card-cancel'].textContent = 'Cancel';
      card.q['card-cancel'].disabled = false;
      return;
    }
    cards.fail(card, m.code || '', text);
    return;
  }
  showBanner(`Server error${m.code ? ' (' + m.code + ')' : ''}: ${text}`);
}

// ---------------------------------------------------------------- controls and validation

// The server's limits as its last hello told them: a limit not told yet is not checked here (the
// server checks every request anyway).
const limits = () => app.limits;

// The sampling parameters' panel (params.js): built at each hello, its fields checked as they
// are edited, read for a request.
const paramFields = bindParams({
  grid: el.paramsGrid, formErr: el.formErr, form: el.form, box: el.paramsBox, brief: el.paramsBrief,
}, () => app.vocab);
const readParams = paramFields.read;

for (const r of document.querySelectorAll('input[name="model"]')) {
  r.addEventListener('change', () => { r.dataset.touched = '1'; });
}

function currentPolicy() {
  const r = document.querySelector('input[name="model"]:checked');
  return r ? r.value : 'iterative';
}

function currentMode() {
  const r = document.querySelector('input[name="mode"]:checked');
  return r && r.value === 'chat' ? 'chat' : 'complete';
}

// A new card for a prompt from the composer; mode 'chat' sends it as the first user turn.
function submit(prompt, model, params, mode) {
  const card = cards.create({ model, params, mode });
  sendTurn(card, cards.addTurn(card, prompt), params);
  return card;
}

// A request of the card's turn: `prompt` for a completion card's first turn, else `messages` with
// every earlier turn of the shown branch; always with the card's conversation id.
function sendTurn(card, turn, params) {
  const req = cards.beginTurn(card, turn, params);
  const history = req.messages || null;
  const msg = Object.assign({ type: 'generate', id: turn.reqId },
    history ? { messages: history } : { prompt: req.prompt },
    { conversation: card.conv, model: card.model }, params);
  const text = JSON.stringify(msg), maxBytes = limits().max_message_bytes;
  if (maxBytes && byteLength(text) > maxBytes) {
    cards.fail(card, 'too_large', `The ${history ? 'conversation' : 'prompt'} is too long: the message would be ${byteLength(text)} bytes, ` +
      `the server takes at most ${maxBytes}.`);
    return;
  }
  if (!app.ws || app.ws.readyState !== WebSocket.OPEN || !app.hello) {
    cards.fail(card, 'disconnected', 'Not connected to the server; nothing was sent.');
    return;
  }
  card.sentAt = performance.now();
  app.ws.send(text);
}

// A request on the card, with the composer's parameters (and `extra`, e.g. a regenerated turn's
// new seed): makeTurn() gives its turn once it can be sent. Null when sent, else why not.
function sendOn(card, makeTurn, extra) {
  if (!app.hello) return 'Not connected to the server yet.';
  const params = readParams();
  if (!params) return 'Please fix the highlighted sampling parameter first.';
  if (!card.model || !card.turns.some(cards.good)) card.model = currentPolicy();
  sendTurn(card, makeTurn(), Object.assign(params, extra || {}));
  return null;
}

// The card's Continue form (or a new chat's first turn): null when sent, else why not.
function continueCard(card, text) {
  return sendOn(card, () => cards.addTurn(card, text));
}

function onSend(ev) {
  if (ev) ev.preventDefault();
  const prompt = el.prompt.value;
  let ok = true;
  if (prompt.trim() === '') {
    setFieldError(el.prompt, 'Write a prompt first.');
    ok = false;
  } else {
    setFieldError(el.prompt, '');
  }
  const params = readParams();
  if (!ok) {
    if (params) el.formErr.textContent = '';
    el.prompt.focus();
    return;
  }
  if (!params) return;
  if (!app.hello) {
    el.formErr.textContent = 'Not connected to the server yet.';
    return;
  }
  submit(prompt, currentPolicy(), params, currentMode());
  el.prompt.value = '';
  el.prompt.focus();
}

el.form.addEventListener('submit', onSend);
el.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    onSend();
  }
});
el.prompt.addEventListener('input', () => {
  if (el.prompt.getAttribute('aria-invalid') && el.prompt.value.trim()) setFieldError(el.prompt, '');
});

el.demo.addEventListener('click', () => {
  const params = readParams();
  if (!params || !app.hello) return;
  const model = currentPolicy();
  submit(DEMO_PROMPTS[0], model, params, 'complete');
  setTimeout(() => submit(DEMO_PROMPTS[1], model, Object.assign({}, params), 'complete'), DEMO_GAP_MS);
});

el.newChat.addEventListener('click', () => cards.newChat());

if (window.matchMedia('(max-width: 720px)').matches) el.paramsBox.open = false;

// ---------------------------------------------------------------- start

cards.restore();
paramFields.updateBrief();
connect();
