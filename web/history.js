// history.js: the history page: this browser's past requests from the server's SQLite log
// (docs/protocol.md, "User key and history"), newest first, 50 at a time ("Load older" pages with
// `before`), a conversation's requests together as a thread (threads.js: at its newest request's
// place, oldest turn first, each its user message and completion from the API's `messages`, with
// the prompt tokens that came from the prefix cache and the turns a long conversation left out);
// history.html?conversation=ID shows one conversation; TTFT and tokens/s over
// time (plot.js); the selected request's token arrival timeline, parameters (labelled from the
// parameter table the chat page last saw, params.js) and whole text from /api/requests/ID.
//
// Hooks for tests:
//   threads: <tr class="thread-head" data-conversation="c-..." data-turns="3" data-cached="64"
//         data-trimmed-messages="6" data-trimmed-turns="3" data-trimmed-tokens="412"> (its
//         newest request's trims, .trim-note), then its rows <tr class="turn-row" data-id
//         data-conversation data-turn="1" data-cached="0" data-trimmed-messages="6"> (a lone
//         request of a conversation: a plain row with data-conversation); a row's .cell-prompt
//         (a chat request's last user message), .cell-reply (its completion), .trim-note
//   #detail-trim: the selected request's trims (hidden when none)
//   <body data-state="loading|ready|empty|nodb|error" data-error="off|network|http|bad-answer">
//   rows: <tr data-id="412" data-policy="iterative" data-finish="length" data-kind="done|cancelled|
//         error" data-error-code="..."> (aria-expanded="true" on the selected one, which has the
//         request's panel in a <tr class="detail-row"> right under it)
//   canvases #plot-ttft, #plot-tps, #plot-timeline with data-points="N" (points drawn)
//   #detail[data-state="none|loading|ready|error"][data-id] (its row: tr.detail-row)
//   window.inflightHistory: the loaded requests, the selected request's detail, the plots

import * as CONV from './threads.js';
import { isNum, ms as fmtMs, rate as fmtRate, when as fmtWhen, full as fmtFull, quantile } from './format.js';
import { describeParams, rememberedTable } from './params.js';
import { Plot } from './plot.js';
import * as userKey from './userkey.js';

const $ = (sel, root) => (root || document).querySelector(sel);
// 50 a page; history.html?limit=N (1..500) asks for pages of N
const PAGE_SIZE = (() => {
  const n = Number(new URLSearchParams(location.search).get('limit'));
  return Number.isInteger(n) && n >= 1 && n <= 500 ? n : 50;
})();
const POLICY_NAMES = { iterative: 'iterative', static: 'static' };
// history.html?conversation=ID: only that conversation's requests
const ONLY = (() => {
  const c = new URLSearchParams(location.search).get('conversation');
  return c && CONV.CONV_ID.test(c) ? c : null;
})();

const user = userKey.get();
const hist = {
  requests: [],          // newest first, as the server sent them
  byId: new Map(),
  nextBefore: null,
  scope: null,
  selected: null,        // request id
  detail: null,          // the /api/requests/ID answer's "request" for the selected one
  loading: false,
  detailSeq: 0,
};
window.inflightHistory = hist;

const el = {
  body: document.body,
  stateBox: $('#state-box'),
  stateTitle: $('#state-title'),
  stateText: $('#state-text'),
  stateDetail: $('#state-detail'),
  stateChat: $('#state-chat'),
  stateRetry: $('#state-retry'),
  summary: $('#summary'),
  refresh: $('#refresh'),
  plots: $('#plots'),
  reqsPanel: $('#reqs-panel'),
  detailHome: $('#detail-home'),
  rows: $('#rows'),
  count: $('#count'),
  scopeNote: $('#scope-note'),
  loadOlder: $('#load-older'),
  more: $('#more'),
  moreNote: $('#more-note'),
  statTtft: $('#stat-ttft'),
  statTps: $('#stat-tps'),
  detail: $('#detail'),
  detailTitle: $('#detail-title'),
  detailPolicy: $('#detail-policy'),
  detailFinish: $('#detail-finish'),
  detailClose: $('#detail-close'),
  detailWhen: $('#detail-when'),
  detailErr: $('#detail-err'),
  detailMetrics: $('#detail-metrics'),
  detailParams: $('#detail-params'),
  detailPrompt: $('#detail-prompt'),
  detailCompletion: $('#detail-completion'),
  detailTrim: $('#detail-trim'),
  statTimeline: $('#stat-timeline'),
  keyHint: $('#key-hint'),
  keyWhere: $('#key-where'),
  threadNote: $('#thread-note'),
};

// ---------------------------------------------------------------- formatting (the rest is format.js's)

const { finishText, finishKind, shortPrompt } = CONV;

// ---------------------------------------------------------------- the API

// {ok, status, json} or {ok: false, status (0: no answer), message}
async function api(path) {
  let res;
  try {
    // a server started with --api-key wants it here too (the page was opened as /?api_key=KEY)
    const key = new URLSearchParams(location.search).get('api_key');
    const headers = { Accept: 'application/json' };
    if (key) headers.Authorization = 'Bearer ' + key;
    res = await fetch(path, { cache: 'no-store', headers });
  } catch (e) {
    return { ok: false, status: 0, message: String(e && e.message || e) };
  }
  let text = '';
  try { text = await res.text(); } catch (e) { /* an empty body */ }
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (e) { /* not JSON */ }
  if (res.ok) {
    if (!json || typeof json !== 'object') {
      return { ok: false, status: res.status, bad: true, message: 'the server\'s answer is not JSON' };
    }
    return { ok: true, status: res.status, json };
  }
  const message = json && typeof json.error === 'string' ? json.error : text.trim().slice(0, 300);
  return { ok: false, status: res.status, message };
}

const q = (params) => Object.keys(params).filter((k) => params[k] != null)
  .map((k) => k + '=' + encodeURIComponent(params[k])).join('&');

// ---------------------------------------------------------------- page states

function showState(state, o) {
  el.body.dataset.state = state;
  if (o && o.error) el.body.dataset.error = o.error;
  else delete el.body.dataset.error;
  const ready = state === 'ready';
  el.stateBox.hidden = ready;
  el.plots.hidden = !ready;
  el.reqsPanel.hidden = !ready;
  el.stateBox.dataset.kind = state;
  if (ready) return;
  el.stateTitle.textContent = o.title;
  el.stateText.textContent = '';
  for (const part of [].concat(o.text)) {
    // strings, and {code: "..."} for command-line bits
    if (typeof part === 'string') el.stateText.append(part);
    else {
      const c = document.createElement('code');
      c.textContent = part.code;
      el.stateText.append(c);
    }
  }
  el.stateDetail.hidden = !o.detail;
  el.stateDetail.textContent = o.detail ? 'The server said: ' + o.detail : '';
  el.stateChat.hidden = !o.chat;
  el.stateRetry.hidden = !o.retry;
  el.stateRetry.textContent = o.retryText || 'Try again';
}

function showLoadError(r) {
  if (r.status === 503) {
    showState('nodb', {
      title: 'No request log on this server',
      text: ['This server keeps no history: it runs without ', { code: '--db PATH' },
        ' (or cannot read its database right now). Started with ', { code: '--db requests.db' },
        ' it keeps every request with its timings.'],
      detail: r.message, retry: true, chat: true,
    });
  } else if (r.status === 403) {
    showState('error', {
      error: 'off',
      title: 'History is off on this server',
      text: ['Its operator started it with ', { code: '--history off' },
        ', so past requests are not shown to anyone. The chat works as usual.'],
      detail: r.message, chat: true,
    });
  } else if (r.status === 0) {
    showState('error', {
      error: 'network',
      title: 'Cannot reach the server',
      text: 'The history could not be loaded: the server did not answer. Is it still running?',
      retry: true,
    });
  } else {
    showState('error', {
      error: r.bad ? 'bad-answer' : 'http',
      title: r.bad ? 'The server\'s answer was not understood' : `The server refused (HTTP ${r.status})`,
      text: 'The history could not be loaded.',
      detail: r.message, retry: true,
    });
  }
}

function showEmpty() {
  if (ONLY) {
    return showState('empty', {
      title: 'No requests in this conversation',
      text: ['None of this browser\'s requests belong to conversation ', { code: ONLY }, '.'],
      chat: true, retry: true, retryText: 'Check again',
    });
  }
  showState('empty', {
    title: 'No requests yet',
    text: user.stored
      ? 'Requests you send from the chat page in this browser show up here, with their timings.'
      : 'Requests you send from the chat page show up here, with their timings. This browser does ' +
        'not let the page keep its key, so the history starts empty each time the page opens.',
    chat: true, retry: true, retryText: 'Check again',
  });
}

// ---------------------------------------------------------------- loading

function validRequests(json) {
  return json && Array.isArray(json.requests) &&
    json.requests.every((r) => r && typeof r === 'object' && r.id != null);
}

async function loadFirst() {
  if (hist.loading) return;
  hist.loading = true;
  el.refresh.disabled = true;
  if (!hist.requests.length) showState('loading', { title: 'Loading your history…', text: 'Asking the server for this browser\'s requests.' });
  const r = await api('api/history?' + q({ user: user.key, limit: PAGE_SIZE, conversation: ONLY }));
  hist.loading = false;
  el.refresh.disabled = false;
  if (!r.ok) return showLoadError(r);
  if (!validRequests(r.json)) return showLoadError({ status: 200, bad: true, message: 'no "requests" list' });
  hist.requests = [];
  hist.byId.clear();
  addRequests(r.json.requests);
  hist.nextBefore = r.json.next_before != null ? r.json.next_before : null;
  hist.scope = r.json.scope || null;
  if (!hist.requests.length) {
    render();
    return showEmpty();
  }
  showState('ready');
  render();
  // reopen the request named in the address (#r412), or keep the one open
  const m = /^#r(\d+)$/.exec(location.hash);
  const want = hist.selected != null ? hist.selected : (m ? Number(m[1]) : null);
  if (want != null) select(want, { scroll: false, force: true });
}

async function loadOlder() {
  if (hist.loading || hist.nextBefore == null) return;
  hist.loading = true;
  el.loadOlder.disabled = true;
  el.loadOlder.textContent = 'Loading…';
  el.moreNote.textContent = '';
  const r = await api('api/history?' + q({ user: user.key, limit: PAGE_SIZE, before: hist.nextBefore, conversation: ONLY }));
  hist.loading = false;
  el.loadOlder.disabled = false;
  el.loadOlder.textContent = 'Load older';
  if (!r.ok || !validRequests(r.json)) {
    el.moreNote.textContent = 'Could not load older requests' +
      (r.status ? ` (HTTP ${r.status}${r.message ? ': ' + r.message : ''})` : ': the server did not answer') + '.';
    el.more.hidden = false;
    return;
  }
  addRequests(r.json.requests);
  hist.nextBefore = r.json.next_before != null ? r.json.next_before : null;
  render();
}

function addRequests(list) {
  for (const r of list) {
    if (hist.byId.has(r.id)) continue;
    hist.byId.set(r.id, r);
    hist.requests.push(r);
  }
}

// ---------------------------------------------------------------- rendering

// --pol-iterative etc. from history.css (they differ in dark mode); read once per render
let colors = {};
function policyColor(policy) {
  const name = POLICY_NAMES[policy] || 'other';
  if (!colors[name]) colors[name] = getComputedStyle(el.body).getPropertyValue('--pol-' + name).trim() || '#8f98a6';
  return colors[name];
}

function render() {
  colors = {};
  renderSummary();
  renderRows();
  renderPlots();
}

function renderSummary() {
  const box = el.summary;
  box.textContent = '';
  const chip = (value, unit, title) => {
    const s = document.createElement('span');
    s.className = 'chip';
    if (title) s.title = title;
    const b = document.createElement('b');
    b.textContent = value;
    s.append(b);
    if (unit) s.append(' ' + unit);
    box.append(s);
  };
  const n = hist.requests.length;
  if (!n) return;
  chip(String(n) + (hist.nextBefore != null ? '+' : ''), n === 1 ? 'request' : 'requests');
  const tokens = hist.requests.reduce((a, r) => a + (isNum(r.completion_tokens) ? r.completion_tokens : 0), 0);
  chip(String(tokens), 'tokens', 'completion tokens of the requests shown');
  const errors = hist.requests.filter((r) => finishKind(r) === 'error').length;
  if (errors) chip(String(errors), errors === 1 ? 'error' : 'errors');
  const threads = CONV.threadOrder(hist.requests).filter((t) => t.head).length;
  if (threads) chip(String(threads), threads === 1 ? 'conversation' : 'conversations', 'conversations of two or more requests');
  const cached = hist.requests.reduce((a, r) => a + (isNum(r.cached_tokens) ? r.cached_tokens : 0), 0);
  if (cached) chip(String(cached), 'cached', 'prompt tokens whose KV came from the server\'s prefix cache');
  if (hist.scope === 'all') chip('everyone', 'shown', 'The server runs with --history all');
}

function cell(tr, cls, text, title) {
  const td = document.createElement('td');
  td.className = cls;
  if (text != null) td.textContent = text;
  if (title) td.title = title;
  tr.append(td);
  return td;
}

function renderRows() {
  const frag = document.createDocumentFragment();
  for (const t of CONV.threadOrder(hist.requests)) {
    if (t.head) {
      frag.append(CONV.threadHead(t, { color: policyColor(t.list[t.list.length - 1].policy),
        link: !ONLY && hist.nextBefore != null ? 'history.html?' + q({ conversation: t.head }) : null }));
      continue;
    }
    const r = t.r;
    const tr = document.createElement('tr');
    if (t.conv) tr.dataset.conversation = t.conv;
    if (t.turn) {
      tr.className = 'turn-row';
      tr.dataset.turn = String(t.turn);
    }
    if (isNum(r.cached_tokens)) tr.dataset.cached = String(r.cached_tokens);
    tr.dataset.id = String(r.id);
    tr.dataset.policy = r.policy || '';
    tr.dataset.finish = r.finish_reason || '';
    tr.dataset.kind = finishKind(r);
    if (r.error_code) tr.dataset.errorCode = r.error_code;
    tr.tabIndex = 0;
    tr.setAttribute('aria-expanded', String(r.id === hist.selected));
    tr.style.setProperty('--pc', policyColor(r.policy));

    const tdTime = cell(tr, 'c-time');
    const time = document.createElement('time');
    if (isNum(r.queued_at_ms)) time.dateTime = new Date(r.queued_at_ms).toISOString();
    time.textContent = fmtWhen(r.queued_at_ms);
    time.title = fmtFull(r.queued_at_ms);
    tdTime.append(time);

    const tdPol = cell(tr, 'c-policy');
    const tag = document.createElement('span');
    tag.className = 'pol';
    tag.textContent = r.policy || '–';
    tdPol.append(tag);

    CONV.promptCell(cell(tr, 'c-prompt'), r, t);
    CONV.cachedNote(cell(tr, 'c-num c-tokens', isNum(r.completion_tokens) ? String(r.completion_tokens) : '–',
      isNum(r.prompt_tokens) ? `prompt ${r.prompt_tokens}` + (isNum(r.cached_tokens) ? ` (${r.cached_tokens} cached)` : '') +
        ` + completion ${isNum(r.completion_tokens) ? r.completion_tokens : 0} tokens` : ''), r);

    const tdFin = cell(tr, 'c-finish');
    const badge = document.createElement('span');
    badge.className = 'fin';
    badge.textContent = finishText(r);
    if (r.error_code) badge.title = r.error_code;
    tdFin.append(badge);
    if (r.error_code) {
      const code = document.createElement('code');
      code.className = 'err-code';
      code.textContent = r.error_code;
      tdFin.append(code);
    }

    cell(tr, 'c-num c-ttft', fmtMs(r.ttft_ms)).dataset.label = 'TTFT';
    cell(tr, 'c-num c-tps', fmtRate(r.tokens_per_s)).dataset.label = 'speed';
    cell(tr, 'c-num c-total', fmtMs(r.total_ms)).dataset.label = 'total';
    frag.append(tr);
  }
  el.detailHome.append(el.detail);   // out of the old rows before they go
  el.rows.textContent = '';
  el.rows.append(frag);
  placeDetail();
  const n = hist.requests.length;
  el.count.textContent = n ? `${n} shown${hist.nextBefore != null ? ', older ones on the server' : ''}` : '';
  el.loadOlder.hidden = hist.nextBefore == null;
  if (hist.nextBefore == null && n > PAGE_SIZE) el.moreNote.textContent = 'That is all of them.';
  else if (hist.nextBefore != null) el.moreNote.textContent = '';
  el.more.hidden = el.loadOlder.hidden && !el.moreNote.textContent;
  el.threadNote.hidden = !ONLY;
  el.scopeNote.hidden = hist.scope !== 'all';
  el.scopeNote.textContent = hist.scope === 'all'
    ? 'This server shows everyone\'s requests (it runs with --history all), not only this browser\'s.' : '';
}

// ---------------------------------------------------------------- plots

function tipFor(r, line) {
  return [`#${r.id} · ${r.policy || '–'} · ${fmtWhen(r.queued_at_ms)}`, line,
    `“${shortPrompt(CONV.lastUserMessage(r) ?? r.prompt, 44)}”`, `${isNum(r.completion_tokens) ? r.completion_tokens : 0} tokens · ${finishText(r)}`].join('\n');
}

const plotTtft = new Plot($('#plot-ttft'), {
  x: 'time', xTitle: 'arrival, local time', yTitle: 'ms', empty: 'No request produced a token',
  tip: (p) => tipFor(p.r, `TTFT ${fmtMs(p.r.ttft_ms)} (queue ${fmtMs(p.r.queue_ms)})`),
  pick: (p) => select(p.id, { scroll: true, fromPlot: true }),
  label: (n) => `Time to first token of ${n} requests over time`,
});
const plotTps = new Plot($('#plot-tps'), {
  x: 'time', xTitle: 'arrival, local time', yTitle: 'tok/s', empty: 'No request produced two tokens',
  tip: (p) => tipFor(p.r, `${fmtRate(p.r.tokens_per_s)} after the first token`),
  pick: (p) => select(p.id, { scroll: true, fromPlot: true }),
  label: (n) => `Decode speed in tokens per second of ${n} requests over time`,
});
const plotTimeline = new Plot($('#plot-timeline'), {
  x: 'linear', xTitle: 'ms since the request arrived', yTitle: 'token', integerY: true, line: true,
  empty: 'No tokens',
  tip: (p) => `token ${p.y} at ${fmtMs(p.x)}` + (p.gap != null ? `\n+${fmtMs(p.gap)} after token ${p.y - 1}` : '\nthe first token'),
  label: (n) => `Arrival time of each of the ${n} tokens of the selected request`,
});
hist.plots = { ttft: plotTtft, tps: plotTps, timeline: plotTimeline };
const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');
const retheme = () => {
  for (const p of [plotTtft, plotTps, plotTimeline]) p.readTheme();
  render();
  if (hist.detail) renderTimeline(hist.detail);
};
if (darkQuery.addEventListener) darkQuery.addEventListener('change', retheme);

function statText(values, fmt) {
  if (!values.length) return '';
  const s = values.slice().sort((a, b) => a - b);
  return `median ${fmt(quantile(s, 0.5))} · p90 ${fmt(quantile(s, 0.9))}`;
}

function renderPlots() {
  const reqs = hist.requests.slice().reverse();   // oldest first: drawn left to right
  const ttft = reqs.filter((r) => isNum(r.ttft_ms) && isNum(r.queued_at_ms));
  const tps = reqs.filter((r) => isNum(r.tokens_per_s) && r.tokens_per_s > 0 && isNum(r.queued_at_ms));
  // TTFT in seconds once it reaches seconds
  const maxT = ttft.reduce((a, r) => Math.max(a, r.ttft_ms), 0);
  const scale = maxT >= 2000 ? 1000 : 1;
  plotTtft.opts.yTitle = scale === 1 ? 'ms' : 's';
  plotTtft.set({ points: ttft.map((r) => ({ x: r.queued_at_ms, y: r.ttft_ms / scale, id: r.id, r, color: policyColor(r.policy) })) });
  plotTps.set({ points: tps.map((r) => ({ x: r.queued_at_ms, y: r.tokens_per_s, id: r.id, r, color: policyColor(r.policy) })) });
  plotTtft.select(hist.selected);
  plotTps.select(hist.selected);
  el.statTtft.textContent = statText(ttft.map((r) => r.ttft_ms), fmtMs);
  el.statTps.textContent = statText(tps.map((r) => r.tokens_per_s), fmtRate);
}

// ---------------------------------------------------------------- one request

function dlRow(dl, name, value, title) {
  const div = document.createElement('div');
  const dt = document.createElement('dt');
  dt.textContent = name;
  const dd = document.createElement('dd');
  dd.textContent = value;
  if (title) dd.title = title;
  div.append(dt, dd);
  dl.append(div);
}

function rowOf(id) {
  return el.rows.querySelector(`tr[data-id="${CSS.escape(String(id))}"]`);
}

// The request's panel goes in a row of its own right under the selected request's row (at the
// top when that request is not among the rows loaded, e.g. opened from the address #r412).
let detailRow = null;
function placeDetail() {
  if (!detailRow) {
    detailRow = document.createElement('tr');
    detailRow.className = 'detail-row';
    const td = document.createElement('td');
    td.colSpan = 8;
    detailRow.append(td);
  }
  if (hist.selected == null) {
    el.detailHome.append(el.detail);
    detailRow.remove();
    return;
  }
  const tr = rowOf(hist.selected);
  if (tr) tr.after(detailRow);
  else el.rows.prepend(detailRow);
  if (el.detail.parentElement !== detailRow.firstChild) detailRow.firstChild.append(el.detail);
}

function markSelected() {
  for (const tr of el.rows.querySelectorAll('tr[aria-expanded="true"]')) tr.setAttribute('aria-expanded', 'false');
  const tr = hist.selected != null ? rowOf(hist.selected) : null;
  if (tr) tr.setAttribute('aria-expanded', 'true');
  placeDetail();
  plotTtft.select(hist.selected);
  plotTps.select(hist.selected);
}

// What the history row already says, shown at once while the detail loads.
function renderDetailHead(r) {
  el.detailTitle.textContent = 'Request #' + r.id;
  el.detailPolicy.hidden = !r.policy;
  el.detailPolicy.textContent = r.policy || '';
  el.detailPolicy.style.setProperty('--pc', policyColor(r.policy));
  el.detailFinish.hidden = false;
  el.detailFinish.textContent = finishText(r);
  el.detailFinish.dataset.kind = finishKind(r);
  const parts = [fmtFull(r.queued_at_ms)];
  if (r.client_id) parts.push('id ' + r.client_id);
  if (r.conversation) parts.push('conversation ' + r.conversation);
  if (r.session) parts.push('session ' + r.session);
  el.detailWhen.textContent = parts.join(' · ');
  el.detailMetrics.textContent = '';
  dlRow(el.detailMetrics, 'Queue', fmtMs(r.queue_ms), 'arrival to admission');
  dlRow(el.detailMetrics, 'TTFT', fmtMs(r.ttft_ms), 'arrival to the first token');
  dlRow(el.detailMetrics, 'Speed', fmtRate(r.tokens_per_s), 'tokens after the first, over the time from the first to the last');
  dlRow(el.detailMetrics, 'Tokens', `${isNum(r.prompt_tokens) ? r.prompt_tokens : '–'} + ${isNum(r.completion_tokens) ? r.completion_tokens : '–'}`, 'prompt + completion tokens');
  if (isNum(r.cached_tokens)) dlRow(el.detailMetrics, 'Cached', String(r.cached_tokens), 'prompt tokens whose KV came from the prefix cache');
  dlRow(el.detailMetrics, 'Total', fmtMs(r.total_ms), 'arrival to the end');
  el.detailPrompt.textContent = r.prompt || '';
  el.detailCompletion.textContent = r.completion || '';
  CONV.trimLine(el.detailTrim, r);
  // a refused request has no timings: no timeline, no numbers
  if (r.error_code) el.detail.dataset.refused = '';
  else delete el.detail.dataset.refused;
  if (r.error_code) {
    el.detailErr.hidden = false;
    el.detailErr.textContent = `Refused by the server before it was queued: ${r.error_code}.`;
  } else {
    el.detailErr.hidden = true;
  }
}

// The request's logged parameters, labelled and in the order of the parameter table the chat
// page last saw in this browser (params.js); without one (or for a name it lacks), by name.
function renderParams(p) {
  el.detailParams.textContent = '';
  if (!p || typeof p !== 'object') {
    dlRow(el.detailParams, '–', 'not recorded');
    return;
  }
  for (const [label, text, doc] of describeParams(p, rememberedTable())) dlRow(el.detailParams, label, text, doc);
}

function renderTimeline(d) {
  const offs = Array.isArray(d.token_offsets_us) ? d.token_offsets_us.filter(isNum) : [];
  const pts = offs.map((us, i) => ({ x: us / 1000, y: i, id: i, gap: i ? (us - offs[i - 1]) / 1000 : null }));
  const marks = [], spans = [];
  if (isNum(d.queue_ms) && d.queue_ms > 0) spans.push({ x0: 0, x1: d.queue_ms, label: 'queued' });
  if (isNum(d.ttft_ms)) marks.push({ x: d.ttft_ms, label: 'first token ' + fmtMs(d.ttft_ms), color: policyColor(d.policy) });
  plotTimeline.opts.empty = d.error_code ? 'No tokens: refused before it was queued'
    : (offs.length ? '' : 'No tokens were produced');
  plotTimeline.set({ points: pts, marks, spans, xMin: 0, xMax: isNum(d.total_ms) ? d.total_ms : undefined });
  plotTimeline.fig.style.setProperty('--pl-line', policyColor(d.policy));
  plotTimeline.readTheme();
  if (offs.length >= 2) {
    const gaps = [];
    for (let i = 1; i < offs.length; i++) gaps.push((offs[i] - offs[i - 1]) / 1000);
    gaps.sort((a, b) => a - b);
    el.statTimeline.textContent = `${offs.length} tokens · gap median ${fmtMs(quantile(gaps, 0.5))}, max ${fmtMs(gaps[gaps.length - 1])}`;
  } else {
    el.statTimeline.textContent = offs.length ? '1 token' : '';
  }
}

// Brings the opened request into view: from a plot, its row to the top; from the table, as much of
// its panel as fits without the row leaving the screen.
function revealDetail(tr, fromPlot) {
  if (!tr) {
    el.detail.scrollIntoView({ block: 'start', behavior: 'smooth' });
    return;
  }
  if (fromPlot) {
    tr.scrollIntoView({ block: 'start', behavior: 'smooth' });
    tr.focus({ preventScroll: true });
    return;
  }
  requestAnimationFrame(() => {
    const r = tr.getBoundingClientRect(), d = el.detail.getBoundingClientRect();
    const top = parseFloat(getComputedStyle(tr).scrollMarginTop) || 0;
    const over = d.bottom + 12 - window.innerHeight;
    if (over > 0) window.scrollBy({ top: Math.min(over, r.top - top), behavior: 'smooth' });
  });
}

async function select(id, o) {
  o = o || {};
  if (id === hist.selected && !o.force && el.detail.dataset.state !== 'error') return;
  hist.selected = id;
  hist.detail = null;
  const seq = ++hist.detailSeq;
  markSelected();
  if (location.hash !== '#r' + id) history.replaceState(null, '', '#r' + id);
  const row = hist.byId.get(id);
  el.detail.dataset.state = 'loading';
  el.detail.dataset.id = String(id);
  if (row) renderDetailHead(row);
  else renderDetailHead({ id });
  el.detailParams.textContent = '';
  el.statTimeline.textContent = 'loading…';
  plotTimeline.opts.empty = 'Loading…';
  plotTimeline.set({ points: [] });
  if (o.scroll) revealDetail(rowOf(id), o.fromPlot);
  const r = await api(`api/requests/${encodeURIComponent(id)}?` + q({ user: user.key }));
  if (seq !== hist.detailSeq) return;   // another one was selected meanwhile
  const d = r.ok && r.json && r.json.request;
  if (!d || typeof d !== 'object') {
    el.detail.dataset.state = 'error';
    const why = !r.ok && r.status === 404 ? 'There is no request with this id.'
      : !r.ok && r.status === 403 ? 'This request is not yours (or history is off).'
        : !r.ok && r.status === 503 ? 'The server cannot read its request log right now.'
          : !r.ok && r.status === 0 ? 'The server did not answer.'
            : 'The server\'s answer was not understood.';
    el.detailErr.hidden = false;
    el.detailErr.textContent = why + (r.message ? ` (${r.message})` : '');
    el.statTimeline.textContent = '';
    plotTimeline.opts.empty = 'No timeline';
    plotTimeline.set({ points: [] });
    return;
  }
  const merged = Object.assign({}, row || {}, d);
  hist.detail = merged;
  renderDetailHead(merged);
  renderParams(d.params);
  renderTimeline(merged);
  el.detail.dataset.state = 'ready';
}

function closeDetail() {
  const prev = hist.selected;
  hist.selected = null;
  hist.detail = null;
  hist.detailSeq++;
  markSelected();
  history.replaceState(null, '', location.pathname + location.search);
  el.detail.dataset.state = 'none';
  delete el.detail.dataset.id;
  el.detailTitle.textContent = 'Request';
  el.detailPolicy.hidden = true;
  el.detailFinish.hidden = true;
  plotTimeline.set({ points: [] });
  const tr = prev != null ? rowOf(prev) : null;
  if (tr) tr.focus({ preventScroll: true });
}

// ---------------------------------------------------------------- events

el.rows.addEventListener('click', (e) => {
  const tr = e.target.closest('tr[data-id]');
  if (tr) toggle(Number(tr.dataset.id));
});
el.rows.addEventListener('keydown', (e) => {
  const tr = e.target.closest('tr[data-id]');
  if (!tr) return;
  if (e.key === 'Enter' || e.key === ' ') {
    e.preventDefault();
    toggle(Number(tr.dataset.id));
  } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    e.preventDefault();
    let next = tr;
    do next = e.key === 'ArrowDown' ? next.nextElementSibling : next.previousElementSibling;
    while (next && !next.dataset.id);
    if (next) next.focus();
  }
});
el.detailClose.addEventListener('click', closeDetail);
el.detail.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeDetail(); });

// A click on the open request's row closes it; on another row, opens that one.
function toggle(id) {
  if (id === hist.selected && el.detail.dataset.state !== 'error') closeDetail();
  else select(id, { scroll: true });
}
el.loadOlder.addEventListener('click', loadOlder);
el.refresh.addEventListener('click', loadFirst);
el.stateRetry.addEventListener('click', loadFirst);

if (ONLY) {
  el.threadNote.querySelector('code').textContent = ONLY;
  document.title = 'inflight · conversation ' + ONLY;
}
el.keyHint.textContent = user.key.slice(0, 6) + '…';
el.keyHint.title = 'The first characters of this browser\'s user key; the server keeps only its SHA-256';
el.keyWhere.textContent = user.stored ? 'is kept in this browser' : 'lives only in this page (storage is off)';

loadFirst();
