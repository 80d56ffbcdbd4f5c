// conversation.js: the chat page's request cards and their conversations. A card is a thread of
// turns (the user's text and the reply streaming into it). A finished card can be continued:
// "Continue" opens an input for the next user turn, which app.js sends as `messages` (every earlier
// turn, then the new one) with the card's `conversation` id (docs/protocol.md), so the server can
// take the earlier turns' KV from its prefix cache; each turn shows its token usage with the cached
// share. "New chat" starts an empty card. Conversations are kept in localStorage
// (`inflight.conversations`: id, mode, policy, each turn's text and usage) and their cards restored
// on load, without the live parts (timings, rids). app.js drives it (initCards);
// the history page (history.html) uses its helpers to show a conversation's requests as a thread.
//
// Hooks for tests:
//   <li class="card" data-conversation="c-0123456789abcdef" data-mode="chat|complete"
//       data-turns="N" data-restored="1"> holds <ol class="thread"> of <li class="turn"
//       data-turn="1" data-kind="chat|complete" data-state="queued|...|done|error" data-req="c1"
//       data-prompt-tokens="42" data-cached="32" data-completion-tokens="12"> (.prompt,
//       .completion, .turn-usage); .card-continue opens form.turn-form (.turn-input, .turn-send,
//       .turn-close, .turn-err); #new-chat makes a card with data-state="new" and its form open.

import { isNum, ms as fmtMs, rate as fmtRate } from './format.js';

const STORE = 'inflight.conversations';
const KEEP = 50;   // conversations kept in localStorage: the most recently used
// Card colours: distinct hues that read on light and dark backgrounds.
const PALETTE = ['#3d7bf7', '#e5484d', '#2fa36b', '#f08c1a', '#8e55d6', '#0fa3a3', '#d6409f',
  '#a87b4f', '#5b6cf0', '#7ab317'];
const CONV_ID = /^[A-Za-z0-9_-]{1,64}$/;   // what the server accepts as a conversation id

// "c-" and 16 random hex digits: within the server's [A-Za-z0-9_-]{1,64}.
function newConversationId() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return 'c-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------- localStorage

function validRecord(r) {
  return r && typeof r === 'object' && typeof r.id === 'string' && CONV_ID.test(r.id) &&
    Array.isArray(r.turns) && r.turns.length > 0 &&
    r.turns.every((t) => t && typeof t.user === 'string' && typeof t.reply === 'string');
}

// The stored conversations, least recently used first ([] when storage is off or unreadable).
function readStore() {
  try {
    const j = JSON.parse(window.localStorage.getItem(STORE) || 'null');
    return j && Array.isArray(j.list) ? j.list.filter(validRecord) : [];
  } catch (e) {
    return [];
  }
}

// Writes the list; when the browser's quota refuses it, drops the oldest half and tries again.
function writeStore(list) {
  for (let l = list.slice(-KEEP); ; l = l.slice(Math.ceil(l.length / 2))) {
    try {
      if (l.length) window.localStorage.setItem(STORE, JSON.stringify({ v: 1, list: l }));
      else window.localStorage.removeItem(STORE);
      return true;
    } catch (e) {
      if (!l.length) return false;
    }
  }
}

// Another tab may have written meanwhile: read, change one entry, write.
function storeUpdate(id, rec) {
  const list = readStore().filter((r) => r.id !== id);
  if (rec) list.push(rec);
  writeStore(list);
}

// ---------------------------------------------------------------- the cards

// ctx: {app, el (the page's elements), submitTurn(card, text) -> null or why it was not sent,
//       cancel(card), reuse(card)}
function init(ctx) {
  const { app, el } = ctx;
  const isFinal = (c) => c.state === 'done' || c.state === 'error' || c.state === 'new';
  const goodTurns = (c) => c.turns.filter((t) => !t.failed && t.finish);

  function create(o) {
    const id = 'c' + app.nextId++;
    const li = el.template.content.cloneNode(true).querySelector('.card');
    const card = {
      id, model: o.model || '', params: o.params || {}, mode: o.mode === 'chat' ? 'chat' : 'complete',
      conv: o.conv || newConversationId(), restored: !!o.restored,
      color: PALETTE[app.nextColor++ % PALETTE.length],
      turns: [], turn: null, prompt: '',
      rid: null, state: 'new', position: null, seed: null, tokens: 0, text: '', maxTokens: 64,
      sentAt: performance.now(), firstAt: null, lastAt: null,
      timing: null, usage: null, finish: null, promptTokens: null, cachedTokens: null,
      textNode: null, el: li, q: {},
    };
    for (const cls of ['card-id', 'card-model', 'card-rid', 'card-state', 'card-cancel', 'card-reuse',
      'card-continue', 'thread', 'card-error', 'progress', 'm-ttft', 'm-tps', 'm-tokens', 'm-queue',
      'm-total', 'm-seed', 'metrics', 'turn-form', 'turn-input', 'turn-send', 'turn-close', 'turn-err']) {
      card.q[cls] = li.querySelector('.' + cls);
    }
    li.dataset.id = id;
    li.dataset.model = card.model;
    li.dataset.mode = card.mode;
    li.dataset.conversation = card.conv;
    li.dataset.turns = '0';
    li.dataset.state = 'new';
    if (card.restored) li.dataset.restored = '1';
    li.style.setProperty('--c', card.color);
    card.q['card-id'].textContent = id;
    card.q['card-id'].title = 'conversation ' + card.conv;
    card.q['card-model'].textContent = card.model || 'new chat';
    card.q['card-cancel'].addEventListener('click', () => ctx.cancel(card));
    card.q['card-reuse'].addEventListener('click', () => ctx.reuse(card));
    card.q['card-continue'].addEventListener('click', () => openForm(card));
    card.q['turn-form'].addEventListener('submit', (e) => { e.preventDefault(); sendForm(card); });
    card.q['turn-input'].addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        sendForm(card);
      } else if (e.key === 'Escape') {
        closeForm(card, true);
      }
    });
    card.q['turn-input'].addEventListener('input', () => { card.q['turn-err'].textContent = ''; });
    card.q['turn-close'].addEventListener('click', () => closeForm(card, true));
    app.cards.set(id, card);
    el.cards.prepend(li);
    update(card);
    counts();
    return card;
  }

  // One turn's element in the thread (its text filled in; the reply streams into textNode).
  function makeTurn(card, user, kind) {
    const n = card.turns.length + 1;
    const li = el.turnTemplate.content.cloneNode(true).querySelector('.turn');
    const turn = {
      n, user, kind, reqId: n === 1 ? card.id : card.id + '.' + n,
      reply: '', usage: null, finish: null, seed: null, rid: null, model: card.model,
      promptTokens: null, cached: null, failed: false, el: li,
      q: { prompt: li.querySelector('.prompt'), completion: li.querySelector('.completion'), usage: li.querySelector('.turn-usage') },
    };
    li.dataset.turn = String(n);
    li.dataset.kind = kind;
    li.dataset.req = turn.reqId;
    turn.q.prompt.textContent = user;
    turn.textNode = document.createTextNode('');
    turn.q.completion.append(turn.textNode);
    card.turns.push(turn);
    card.el.dataset.turns = String(n);
    card.q.thread.append(li);
    if (n === 1) card.prompt = user;
    return turn;
  }

  // A new request on the card: its turn is added and the live fields start over.
  function beginTurn(card, user, kind, params) {
    const turn = makeTurn(card, user, kind);
    card.turn = turn;
    card.params = params || {};
    const d = app.hello && app.hello.defaults;
    Object.assign(card, {
      rid: null, position: null, seed: null, tokens: 0, text: '', timing: null, usage: null,
      finish: null, promptTokens: null, cachedTokens: null, firstAt: null, lastAt: null,
      sentAt: performance.now(), textNode: turn.textNode,
      maxTokens: card.params.max_tokens || (d && d.max_tokens) || 64,
    });
    const ds = card.el.dataset;
    delete ds.rid;
    delete ds.finish;
    delete ds.errorCode;
    ds.model = card.model;
    card.q['card-model'].textContent = card.model;
    card.q['card-rid'].hidden = true;
    card.q['card-error'].hidden = true;
    card.q['card-error'].textContent = '';
    card.q['card-cancel'].disabled = false;
    card.q['card-cancel'].textContent = 'Cancel';
    for (const k of ['m-ttft', 'm-tps', 'm-queue', 'm-total', 'm-seed']) {
      card.q[k].textContent = '–';
      card.q[k].title = '';
    }
    app.reqs.set(turn.reqId, card);
    setState(card, 'queued');
    closeForm(card);
    update(card);
    counts();
    return turn;
  }

  // The card a frame's id names: only its current turn's request (a late frame of an earlier
  // turn, e.g. an unknown_id answer to a cancel, is ignored).
  function cardOf(reqId) {
    const c = app.reqs.get(reqId);
    return c && c.turn && c.turn.reqId === reqId ? c : null;
  }

  // The `messages` of the card's next turn: each finished turn (user, then the reply as received),
  // then the new user turn. A failed turn is left out.
  function messages(card, user) {
    const out = [];
    for (const t of goodTurns(card)) out.push({ role: 'user', content: t.user }, { role: 'assistant', content: t.reply });
    out.push({ role: 'user', content: user });
    return out;
  }

  // The next turn goes as `messages` for a chat card, or once a card has a finished turn.
  const nextKind = (card) => (card.mode === 'chat' || goodTurns(card).length ? 'chat' : 'complete');

  function setState(card, state) {
    card.state = state;
    card.el.dataset.state = state;
    if (card.turn) card.turn.el.dataset.state = state;
  }

  function stateText(card) {
    switch (card.state) {
      case 'new': return 'new chat';
      case 'queued':
        return card.position == null ? 'sending…' : `queued · #${card.position}`;
      case 'started': return 'reading prompt';
      case 'streaming': return 'streaming';
      case 'done':
        return {
          length: 'done · max tokens', eos: 'done · end of text', stop: 'done · stop string',
          cancelled: 'cancelled',
        }[card.finish] || 'done';
      case 'error': return card.rid == null && card.el.dataset.errorCode !== 'disconnected' ? 'refused' : 'failed';
      default: return card.state;
    }
  }

  // "42 prompt tokens, 32 cached · 12 completion tokens" (what is known so far).
  function usageText(p, cached, c) {
    if (!isNum(p)) return '';
    let s = `${p} prompt token${p === 1 ? '' : 's'}`;
    if (isNum(cached)) s += `, ${cached} cached`;
    if (isNum(c)) s += ` · ${c} completion token${c === 1 ? '' : 's'}`;
    return s;
  }

  function renderTurnUsage(t) {
    const u = t.usage || {};
    const p = isNum(u.prompt_tokens) ? u.prompt_tokens : t.promptTokens;
    const cached = isNum(u.cached_tokens) ? u.cached_tokens : t.cached;
    const c = isNum(u.completion_tokens) ? u.completion_tokens : null;
    t.q.usage.textContent = t.failed ? t.error || '' : usageText(p, cached, c);
    t.q.usage.title = isNum(cached) && cached > 0
      ? `${cached} of the ${p} prompt tokens had their KV in the server's prefix cache: only ${p - cached} were computed`
      : 'prompt tokens (those found in the server\'s prefix cache) and completion tokens';
    const ds = t.el.dataset;
    if (isNum(p)) ds.promptTokens = String(p);
    if (isNum(cached)) ds.cached = String(cached);
    if (isNum(c)) ds.completionTokens = String(c);
  }

  // The card's text fields; cheap enough for every frame but batched by requestAnimationFrame.
  const dirty = new Set();
  let raf = 0;
  function touch(card) {
    dirty.add(card);
    if (!raf) {
      raf = requestAnimationFrame(() => {
        raf = 0;
        for (const c of dirty) update(c);
        dirty.clear();
      });
    }
  }

  function update(card) {
    const q = card.q;
    q['card-state'].textContent = stateText(card);
    if (card.rid != null) {
      q['card-rid'].hidden = false;
      q['card-rid'].textContent = 'rid ' + card.rid;
    }
    const final = isFinal(card);
    q['card-cancel'].hidden = final;
    q['card-reuse'].hidden = !final || !card.prompt;
    q['card-continue'].hidden = !final || card.state === 'new' || !q['turn-form'].hidden ||
      !(goodTurns(card).length || card.mode === 'chat');
    q.progress.hidden = final;
    q.metrics.hidden = card.state === 'new' || (card.state === 'error' && !card.tokens && !card.timing) ||
      (card.restored && !card.timing && final);
    q.progress.firstElementChild.style.setProperty('--frac',
      Math.min(1, card.tokens / Math.max(1, card.maxTokens)).toFixed(4));
    const t = card.timing;
    if (t) {
      q['m-ttft'].textContent = fmtMs(t.ttft_ms);
      q['m-tps'].textContent = fmtRate(t.tokens_per_s);
      q['m-queue'].textContent = fmtMs(t.queue_ms);
      q['m-total'].textContent = fmtMs(t.total_ms);
      q['m-ttft'].title = q['m-tps'].title = 'measured on the server';
    } else {
      // Client-side estimates while streaming (they include the network).
      if (card.firstAt != null) {
        q['m-ttft'].textContent = '≈ ' + fmtMs(card.firstAt - card.sentAt);
        q['m-ttft'].title = 'estimated in the page';
      }
      if (card.tokens >= 2 && card.lastAt > card.firstAt) {
        q['m-tps'].textContent = '≈ ' + fmtRate((card.tokens - 1) * 1000 / (card.lastAt - card.firstAt));
        q['m-tps'].title = 'estimated in the page';
      }
    }
    const usage = card.usage;
    q['m-tokens'].textContent = usage
      ? `${usage.prompt_tokens} + ${usage.completion_tokens}`
      : (card.tokens ? `${card.promptTokens != null ? card.promptTokens + ' + ' : ''}${card.tokens}` :
        (card.promptTokens != null ? `${card.promptTokens} + 0` : '–'));
    const cached = usage && isNum(usage.cached_tokens) ? usage.cached_tokens : card.cachedTokens;
    q['m-tokens'].title = 'prompt + completion tokens' + (isNum(cached) ? `; ${cached} of the prompt's were cached` : '');
    q['m-seed'].textContent = card.seed != null ? String(card.seed) : '–';
    const turn = card.turn;
    if (turn && !turn.finish) {
      turn.promptTokens = card.promptTokens;
      turn.cached = card.cachedTokens;
      turn.usage = card.usage;
      renderTurnUsage(turn);
    }
  }

  function counts() {
    let running = 0, finished = 0;
    for (const c of app.cards.values()) {
      if (c.state === 'new') continue;
      if (isFinal(c)) finished++;
      else running++;
    }
    const total = app.cards.size;
    el.cardsCount.textContent = total ? `${running} running · ${total} total` : '';
    el.cardsEmpty.hidden = total > 0;
    el.clearDone.disabled = finished === 0;
  }

  function fail(card, code, message) {
    if (card.turn) {
      card.turn.failed = true;
      card.turn.error = 'not part of the conversation: ' + message + (code ? ` [${code}]` : '');
      card.turn.el.dataset.errorCode = code;
      renderTurnUsage(card.turn);
    }
    setState(card, 'error');
    card.el.dataset.errorCode = code;
    card.q['card-error'].hidden = false;
    card.q['card-error'].textContent = message + (code ? ` [${code}]` : '');
    update(card);
    counts();
  }

  // The current turn ended (not failed): its reply and usage are kept, the conversation stored.
  function finishTurn(card) {
    const t = card.turn;
    if (!t) return;
    t.reply = card.text;
    t.usage = card.usage;
    t.finish = card.finish || 'unknown';
    t.seed = card.seed;
    t.promptTokens = card.usage && isNum(card.usage.prompt_tokens) ? card.usage.prompt_tokens : card.promptTokens;
    t.cached = card.usage && isNum(card.usage.cached_tokens) ? card.usage.cached_tokens : card.cachedTokens;
    setState(card, 'done');
    renderTurnUsage(t);
    update(card);
    counts();
    persist(card);
  }

  // ---------------------------------------------------------------- the next turn's input

  function openForm(card) {
    const q = card.q;
    q['turn-form'].hidden = false;
    q['turn-err'].textContent = '';
    update(card);
    q['turn-input'].focus();
    q['turn-form'].scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  // Closing the form of a new chat that has no turn yet removes its card.
  function closeForm(card, byUser) {
    card.q['turn-form'].hidden = true;
    if (byUser && card.state === 'new' && !card.turns.length) {
      remove(card);
      return;
    }
    update(card);
    if (byUser && !card.q['card-continue'].hidden) card.q['card-continue'].focus();
  }

  function sendForm(card) {
    const input = card.q['turn-input'];
    if (!input.value.trim()) {
      card.q['turn-err'].textContent = 'Write a message first.';
      input.focus();
      return;
    }
    const why = ctx.submitTurn(card, input.value);
    if (why) {
      card.q['turn-err'].textContent = why;
      return;
    }
    input.value = '';
  }

  function newChat() {
    const card = create({ mode: 'chat' });
    openForm(card);
    return card;
  }

  function remove(card) {
    card.el.remove();
    app.cards.delete(card.id);
    for (const t of card.turns) if (app.reqs.get(t.reqId) === card) app.reqs.delete(t.reqId);
    counts();
  }

  el.clearDone.addEventListener('click', () => {
    for (const c of Array.from(app.cards.values())) {
      if (c.state === 'done' || c.state === 'error') {
        remove(c);
        storeUpdate(c.conv, null);
      }
    }
  });

  // ---------------------------------------------------------------- storage

  // Kept: chat cards, and any card that was continued (a lone completion is not a conversation).
  function persist(card) {
    const turns = goodTurns(card);
    if (!turns.length || (card.mode !== 'chat' && turns.length < 2)) return;
    storeUpdate(card.conv, {
      id: card.conv, mode: card.mode, model: card.model, updated: Date.now(),
      turns: turns.map((t) => ({
        user: t.user, reply: t.reply, kind: t.kind, finish: t.finish, model: t.model, seed: t.seed,
        usage: t.usage ? {
          prompt_tokens: t.usage.prompt_tokens, completion_tokens: t.usage.completion_tokens,
          cached_tokens: t.usage.cached_tokens,
        } : null,
      })),
    });
  }

  // The stored conversations as finished cards, the most recent on top.
  function restore() {
    for (const r of readStore()) {
      if (Array.from(app.cards.values()).some((c) => c.conv === r.id)) continue;
      const card = create({ model: r.model, mode: r.mode, conv: r.id, restored: true });
      for (const s of r.turns) {
        const t = makeTurn(card, s.user, s.kind === 'complete' ? 'complete' : 'chat');
        t.reply = s.reply;
        t.textNode.appendData(s.reply);
        t.finish = typeof s.finish === 'string' ? s.finish : 'unknown';
        t.model = s.model || r.model;
        t.seed = isNum(s.seed) ? s.seed : null;
        t.usage = s.usage && typeof s.usage === 'object' ? s.usage : null;
        t.promptTokens = t.usage && isNum(t.usage.prompt_tokens) ? t.usage.prompt_tokens : null;
        t.cached = t.usage && isNum(t.usage.cached_tokens) ? t.usage.cached_tokens : null;
        t.el.dataset.state = 'done';
        renderTurnUsage(t);
        card.turn = t;
      }
      const last = card.turn;
      card.finish = last.finish;
      card.usage = last.usage;
      card.seed = last.seed;
      card.text = last.reply;
      card.el.dataset.finish = last.finish;
      setState(card, 'done');
      update(card);
    }
    counts();
  }

  return { create, beginTurn, cardOf, messages, nextKind, setState, touch, update, counts, fail, finishTurn, newChat, restore, isFinal };
}

// ---------------------------------------------------------------- for the history page

// A chat request's logged prompt is its rendered conversation ("User: ...\nAssistant: ...\n
// User: ...\nAssistant:", server/chat_template.h): its last user turn, or null if it is not one.
function lastUserTurn(prompt) {
  const s = String(prompt == null ? '' : prompt);
  if (!s.endsWith('Assistant:')) return null;
  const body = s.slice(0, -'Assistant:'.length).replace(/\n$/, '');
  const i = body.lastIndexOf('\nUser:');
  const turn = i >= 0 ? body.slice(i + 6) : (body.startsWith('User:') ? body.slice(5) : null);
  return turn == null ? null : turn.replace(/^ /, '');
}

// History rows (newest first) as threads: [{r} | {head: id, list} | {r, conv, turn, of}]. A
// conversation's requests come together at its newest one's place, oldest turn first; a
// conversation of one request is a plain row (with its conv).
function threadOrder(requests) {
  const conv = (r) => (typeof r.conversation === 'string' && r.conversation ? r.conversation : null);
  const groups = new Map();
  for (const r of requests) {
    const c = conv(r);
    if (c) (groups.get(c) || groups.set(c, []).get(c)).push(r);
  }
  const at = (r) => (isNum(r.queued_at_ms) ? r.queued_at_ms : 0);
  for (const g of groups.values()) g.sort((a, b) => at(a) - at(b) || a.id - b.id);
  const out = [];
  const placed = new Set();
  for (const r of requests) {
    const c = conv(r);
    if (!c) {
      out.push({ r });
    } else if (!placed.has(c)) {
      placed.add(c);
      const g = groups.get(c);
      if (g.length === 1) {
        out.push({ r, conv: c });
      } else {
        out.push({ head: c, list: g });
        g.forEach((x, i) => out.push({ r: x, conv: c, turn: i + 1, of: g.length }));
      }
    }
  }
  return out;
}

// A thread's first row: the conversation, its turns and cached tokens, and (o.link) a link to
// the conversation alone when older turns may be on pages not loaded. o.color: its policy's.
function threadHead(t, o) {
  const tr = document.createElement('tr');
  tr.className = 'thread-head';
  tr.dataset.conversation = t.head;
  tr.dataset.turns = String(t.list.length);
  const cached = t.list.reduce((a, r) => a + (isNum(r.cached_tokens) ? r.cached_tokens : 0), 0);
  tr.dataset.cached = String(cached);
  if (o.color) tr.style.setProperty('--pc', o.color);
  const td = document.createElement('td');
  td.className = 'c-thread';
  td.colSpan = 8;
  const code = document.createElement('code');
  code.textContent = t.head;
  td.append('Conversation ', code, ` · ${t.list.length} turns` + (cached ? ` · ${cached} prompt tokens from the prefix cache` : ''));
  if (o.link) {
    const a = document.createElement('a');
    a.href = o.link;
    a.textContent = 'all its turns';
    a.title = 'Older turns may be on pages not loaded yet';
    td.append(' · ', a);
  }
  tr.append(td);
  return tr;
}

// A history row's prompt cell: the turn's number in its thread, and for a chat request its
// newest user turn (its prompt is the whole conversation: in the title, and the detail panel).
function promptCell(td, r, t) {
  if (t.turn) {
    const n = document.createElement('span');
    n.className = 'turn-no';
    n.textContent = String(t.turn);
    n.title = `turn ${t.turn} of ${t.of}`;
    td.append(n);
  }
  const pr = document.createElement('span');
  pr.className = 'cell-prompt';
  const said = t.conv ? lastUserTurn(r.prompt) : null;
  pr.textContent = said != null ? said : (r.prompt || '');
  pr.title = String(r.prompt || '').slice(0, 600);
  td.append(pr);
}

// "32 cached" under a row's token count when the prefix cache served part of its prompt.
function cachedNote(td, r) {
  if (!isNum(r.cached_tokens) || r.cached_tokens <= 0) return;
  const c = document.createElement('span');
  c.className = 'cached-note';
  c.textContent = `${r.cached_tokens} cached`;
  td.append(c);
}

export {
  init as initCards, newConversationId, lastUserTurn, threadOrder, threadHead, promptCell, cachedNote,
  CONV_ID, STORE,
};
