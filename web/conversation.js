// conversation.js: the chat page's request cards and their conversations. A card is a thread of
// turns (the user's text and the reply streaming into it) and goes on for as long as the user
// likes: "Continue" opens an input for the next user turn, which app.js sends as `messages` (every
// earlier turn, then the new one) with the card's `conversation` id (docs/protocol.md), so the
// server takes the earlier turns' KV from its prefix cache; each turn shows its token usage with
// the cached share. When the conversation outgrows the model's context the server leaves its
// oldest turns out and says how many (`trimmed_messages` in `started` and `done`): those turns
// are shown faded, under a note, from what the server reported for the latest turn (nothing is
// guessed here). The turns are a tree: editing an earlier user turn starts a branch beside it
// (the turn then switches between them, "‹ 2/2 ›"); the shown branch is `card.turns`. The
// per-turn tools (copy, edit, regenerate, branches), export, import, delete and the Escape key
// are chat_tools.js's; the records in localStorage (every branch) are conv_store.js's. "New
// chat" starts an empty card. app.js drives it (initCards).
//
// Hooks for tests:
//   <li class="card" data-conversation="c-0123456789abcdef" data-mode="chat|complete"
//       data-turns="N" data-restored="1" data-imported="1" data-trimmed-messages="6"
//       data-trimmed-tokens="36"> holds <ol class="thread"> of <li class="turn" data-turn="1"
//       data-kind="chat|complete" data-state="queued|...|done|error" data-req="c1"
//       data-prompt-tokens="42" data-cached="32" data-completion-tokens="12" data-faded="2"
//       data-trimmed-messages="6"> (.prompt, .completion, .turn-usage); data-faded: how many of
//       the turn's messages (its user text, its reply) the model did not see for the latest turn,
//       whose own data-trimmed-messages (and the card's) say what the server reported; after the
//       last faded turn <li class="trim-note" data-trimmed-messages data-trimmed-tokens>;
//       .card-continue opens form.turn-form (.turn-input, .turn-send, .turn-close, .turn-err);
//       #new-chat makes a card with data-state="new" and its form open. The tools' hooks are in
//       chat_tools.js.

import { isNum, ms as fmtMs, rate as fmtRate } from './format.js';
import { CONV_ID, STORE, messagesOf, readStore, storeUpdate, toRecord } from './conv_store.js';
import { initTools } from './chat_tools.js';

// Card colours: distinct hues that read on light and dark backgrounds.
const PALETTE = ['#3d7bf7', '#e5484d', '#2fa36b', '#f08c1a', '#8e55d6', '#0fa3a3', '#d6409f',
  '#a87b4f', '#5b6cf0', '#7ab317'];

// "c-" and 16 random hex digits: within the server's [A-Za-z0-9_-]{1,64}.
function newConversationId() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return 'c-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// A finished turn that is part of the conversation (a failed one is not sent again).
const good = (t) => !t.failed && !!t.finish;

// ---------------------------------------------------------------- the cards

// ctx: {app, el (the page's elements), submitTurn(card, text) -> null or why it was not sent,
//       send(card, makeTurn, extra) -> the same (for the tools), cancel(card), reuse(card),
//       banner(text)}
function init(ctx) {
  const { app, el } = ctx;
  const isFinal = (c) => c.state === 'done' || c.state === 'error' || c.state === 'new';
  const goodTurns = (c) => c.turns.filter(good);
  let tools = null;

  function create(o) {
    const id = 'c' + app.nextId++;
    const li = el.template.content.cloneNode(true).querySelector('.card');
    const card = {
      id, model: o.model || '', params: o.params || {}, mode: o.mode === 'chat' ? 'chat' : 'complete',
      conv: o.conv || newConversationId(), restored: !!o.restored, system: o.system || [],
      color: PALETTE[app.nextColor++ % PALETTE.length],
      root: { kids: [], sel: 0 }, turns: [], turn: null, prompt: '', nreq: 0,
      rid: null, state: 'new', position: null, seed: null, tokens: 0, text: '', maxTokens: 64,
      sentAt: performance.now(), firstAt: null, lastAt: null,
      timing: null, usage: null, finish: null, promptTokens: null, cachedTokens: null,
      textNode: null, el: li, q: {},
    };
    for (const cls of ['card-id', 'card-model', 'card-rid', 'card-state', 'card-cancel', 'card-reuse',
      'card-continue', 'thread', 'card-error', 'progress', 'm-ttft', 'm-tps', 'm-tokens', 'm-queue',
      'm-total', 'm-seed', 'metrics', 'turn-form', 'turn-input', 'turn-send', 'turn-close', 'turn-err',
      'card-tools', 'card-export', 'card-delete', 'card-system']) {
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
    card.q['card-system'].hidden = !card.system.length;
    card.q['card-system'].querySelector('.system-text').textContent = card.system.join('\n');
    card.q['card-cancel'].addEventListener('click', () => ctx.cancel(card));
    card.q['card-reuse'].addEventListener('click', () => ctx.reuse(card));
    card.q['card-continue'].addEventListener('click', () => openForm(card));
    card.q['turn-form'].addEventListener('submit', (e) => { e.preventDefault(); sendForm(card); });
    card.q['turn-input'].addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        sendForm(card);
      } else if (e.key === 'Escape') {
        e.preventDefault();   // the form's, not a cancel (chat_tools.js)
        closeForm(card, true);
      }
    });
    card.q['turn-input'].addEventListener('input', () => { card.q['turn-err'].textContent = ''; });
    card.q['turn-close'].addEventListener('click', () => closeForm(card, true));
    tools.bindCard(card);
    app.cards.set(id, card);
    el.cards.prepend(li);
    update(card);
    counts();
    return card;
  }

  // The next request id of the card: its own id first, then id.2, id.3, ...
  function newReqId(card) {
    card.nreq++;
    return card.nreq === 1 ? card.id : card.id + '.' + card.nreq;
  }

  // A new turn under parent (the card's root or a turn), shown: the parent's selected follower.
  function makeTurn(card, parent, user, kind) {
    const li = el.turnTemplate.content.cloneNode(true).querySelector('.turn');
    const turn = {
      n: 0, user, kind, reqId: null, parent, kids: [], sel: 0, sent: [],
      reply: null, usage: null, finish: null, seed: null, rid: null, model: card.model,
      promptTokens: null, cached: null, trimmed: null, failed: false, imported: false, el: li, q: {},
    };
    for (const cls of ['prompt', 'completion', 'turn-usage']) turn.q[cls] = li.querySelector('.' + cls);
    turn.q.usage = turn.q['turn-usage'];
    li.dataset.kind = kind;
    if (user == null) li.dataset.noUser = '1';
    turn.q.prompt.textContent = user == null ? '' : user;
    turn.textNode = document.createTextNode('');
    turn.q.completion.append(turn.textNode);
    parent.kids.push(turn);
    parent.sel = parent.kids.length - 1;
    tools.bindTurn(card, turn);
    return turn;
  }

  // The next user turn after the shown branch's last turn (or another branch of `after`'s turn).
  function addTurn(card, user, parent, kind) {
    const p = parent || card.turns[card.turns.length - 1] || card.root;
    const k = kind || (card.mode === 'chat' || goodTurns(card).length ? 'chat' : 'complete');
    const turn = makeTurn(card, p, user, k);
    render(card);
    return turn;
  }

  // The turns a request of `turn` sends before it (the shown branch's finished turns above it),
  // then its messages or, for a completion card's first turn, its prompt.
  function requestOf(card, turn) {
    const i = card.turns.indexOf(turn);
    const sent = card.turns.slice(0, i < 0 ? 0 : i).filter(good);
    if (turn.kind === 'complete' && !sent.length && !card.system.length) {
      return { sent, prompt: turn.user };
    }
    const messages = card.system.map((s) => ({ role: 'system', content: s }));
    for (const t of sent) messages.push(...messagesOf(t));
    if (turn.user != null) messages.push({ role: 'user', content: turn.user });
    return { sent, messages };
  }

  // ---------------------------------------------------------------- the shown branch

  function pathOf(card) {
    const out = [];
    for (let n = card.root; n.kids.length;) {
      n = n.kids[Math.min(n.sel, n.kids.length - 1)];
      out.push(n);
    }
    return out;
  }

  // The shown branch, its turns numbered, faded as the server reported, with the tools' state.
  function render(card) {
    card.turns = pathOf(card);
    card.turns.forEach((t, i) => {
      t.n = i + 1;
      t.el.dataset.turn = String(i + 1);
    });
    card.el.dataset.turns = String(card.turns.length);
    const first = card.turns[0];
    card.prompt = first && first.user != null ? first.user : '';
    const note = applyFades(card);
    const items = [];
    for (const t of card.turns) {
      items.push(t.el);
      if (note && note.after === t) items.push(note.li);
    }
    card.q.thread.replaceChildren(...items);
    tools.update(card);
  }

  // The latest turn of the shown branch the server reported on says which of the turns it sent
  // the model did not see: the first trimmed_messages of their messages. Returns where the note
  // goes, or null.
  function applyFades(card) {
    let ref = null;
    for (const t of card.turns) if (t.trimmed) ref = t;
    let left = ref ? ref.trimmed.messages : 0;
    const faded = new Map();
    for (const s of ref ? ref.sent : []) {
      if (left <= 0) break;
      const k = Math.min(left, messagesOf(s).length);
      faded.set(s, k);
      left -= k;
    }
    let last = null, turns = 0;
    for (const t of card.turns) {
      const k = faded.get(t) || 0;
      if (k) {
        t.el.dataset.faded = String(k);
        t.el.title = k === messagesOf(t).length ? 'Not seen by the model for the latest turn'
          : 'This user message was not seen by the model for the latest turn';
        last = t;
        turns++;
      } else if (t.el.dataset.faded) {
        delete t.el.dataset.faded;
        t.el.title = '';
      }
      if (t.trimmed) t.el.dataset.trimmedMessages = String(t.trimmed.messages);
      else delete t.el.dataset.trimmedMessages;
    }
    const ds = card.el.dataset;
    if (!ref) {
      delete ds.trimmedMessages;
      delete ds.trimmedTokens;
      return null;
    }
    ds.trimmedMessages = String(ref.trimmed.messages);
    ds.trimmedTokens = String(isNum(ref.trimmed.tokens) ? ref.trimmed.tokens : 0);
    if (!last) return null;
    const li = card.trimNote || (card.trimNote = document.createElement('li'));
    li.className = 'trim-note';
    li.setAttribute('role', 'note');
    li.dataset.trimmedMessages = ds.trimmedMessages;
    li.dataset.trimmedTokens = ds.trimmedTokens;
    const ctxTokens = ref.trimmed.ctx || (app.hello && app.hello.model && app.hello.model.n_ctx);
    const tok = ref.trimmed.tokens;
    li.textContent = `${turns} turn${turns === 1 ? '' : 's'} above not seen by the model` +
      (ctxTokens ? `: the context holds ${ctxTokens} tokens` : '') +
      (isNum(tok) && tok > 0 ? ` · ${tok} tokens left out of turn ${ref.n}'s request` : '');
    return { after: last, li };
  }

  // A `started` (or `done`) frame's report of what the server left out of the current turn.
  function setTrim(card, m) {
    const t = card.turn;
    if (!t || !isNum(m.trimmed_messages)) return;
    const ctxTokens = app.hello && app.hello.model && isNum(app.hello.model.n_ctx) ? app.hello.model.n_ctx : null;
    t.trimmed = { messages: m.trimmed_messages, tokens: isNum(m.trimmed_tokens) ? m.trimmed_tokens : null, ctx: ctxTokens };
    render(card);
  }

  // A request of the turn (a new one, or the same turn again) on the card: its live fields start
  // over. Returns the request's body: {messages} or {prompt}.
  function beginTurn(card, turn, params) {
    render(card);
    const req = requestOf(card, turn);
    turn.reqId = newReqId(card);
    Object.assign(turn, {
      sent: req.sent, reply: '', usage: null, finish: null, seed: null, rid: null, promptTokens: null,
      cached: null, trimmed: null, failed: false, error: null, model: card.model,
    });
    turn.textNode.data = '';
    const tds = turn.el.dataset;
    tds.req = turn.reqId;
    delete tds.errorCode;
    delete tds.promptTokens;
    delete tds.cached;
    delete tds.completionTokens;
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
    render(card);
    update(card);
    counts();
    return req;
  }

  // The card a frame's id names: only its current turn's request (a late frame of an earlier
  // request, e.g. an unknown_id answer to a cancel, is ignored).
  function cardOf(reqId) {
    const c = app.reqs.get(reqId);
    return c && c.turn && c.turn.reqId === reqId ? c : null;
  }

  function setState(card, state) {
    card.state = state;
    card.el.dataset.state = state;
    if (card.turn) card.turn.el.dataset.state = state;
    tools.update(card);
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
          cancelled: 'cancelled', imported: 'imported',
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
    if (card.usage) setTrim(card, card.usage);
    else render(card);
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
    for (const [id, c] of Array.from(app.reqs)) if (c === card) app.reqs.delete(id);
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
  // Every branch is kept, with the one shown.
  function persist(card) {
    const turns = goodTurns(card);
    if (!turns.length || (card.mode !== 'chat' && turns.length < 2)) return;
    const rec = toRecord({ id: card.conv, mode: card.mode, model: card.model, updated: Date.now(), system: card.system },
      card.root, good);
    if (rec) storeUpdate(card.conv, rec);
  }

  // A finished card of stored turns (a record's, or an imported file's): turns[i].parent is the
  // index of the turn it follows (-1: a first turn), sel which follower is shown.
  function fill(card, turns, rootSel) {
    const made = [];
    for (const s of turns) {
      const t = makeTurn(card, s.parent >= 0 ? made[s.parent] : card.root, s.user, s.kind === 'complete' ? 'complete' : 'chat');
      t.reqId = newReqId(card);
      t.el.dataset.req = t.reqId;
      t.reply = s.reply;
      if (s.reply) t.textNode.appendData(s.reply);
      t.finish = s.finish || 'unknown';
      t.model = s.model || card.model;
      t.seed = isNum(s.seed) ? s.seed : null;
      t.usage = s.usage && typeof s.usage === 'object' ? s.usage : null;
      t.promptTokens = t.usage && isNum(t.usage.prompt_tokens) ? t.usage.prompt_tokens : null;
      t.cached = t.usage && isNum(t.usage.cached_tokens) ? t.usage.cached_tokens : null;
      t.trimmed = s.trimmed || null;
      t.imported = !!s.imported;
      t.el.dataset.state = 'done';
      if (t.imported) t.el.dataset.imported = '1';
      renderTurnUsage(t);
      made.push(t);
    }
    // what each turn's request sent: the turns above it (all finished: only those are stored)
    for (const [i, t] of made.entries()) {
      t.sel = turns[i].sel || 0;
      t.sent = [];
      for (let p = t.parent; p !== card.root; p = p.parent) t.sent.unshift(p);
    }
    card.root.sel = rootSel || 0;
    if (made.some((t) => t.imported)) {
      card.el.dataset.imported = '1';
      if (!card.model) card.q['card-model'].textContent = 'imported';
    }
    render(card);
    const last = card.turns[card.turns.length - 1];
    card.turn = last;
    card.finish = last.finish;
    card.usage = last.usage;
    card.seed = last.seed;
    card.text = last.reply || '';
    card.el.dataset.finish = last.finish;
    setState(card, 'done');
    update(card);
  }

  // The stored conversations as finished cards, the most recent on top.
  function restore() {
    for (const r of readStore()) {
      if (Array.from(app.cards.values()).some((c) => c.conv === r.id)) continue;
      fill(create({ model: r.model, mode: r.mode, conv: r.id, restored: true, system: r.system }), r.turns, r.sel);
    }
    counts();
  }

  // A conversation from a file (conv_store.js's parseImport): a new card, kept at once.
  function importConversation(parsed) {
    const card = create({ mode: 'chat', restored: true, system: parsed.system });
    fill(card, parsed.turns.map((t, i) => ({ user: t.user, reply: t.reply, kind: 'chat', finish: 'imported', parent: i - 1, imported: true })), 0);
    persist(card);
    counts();
    return card;
  }

  const api = {
    create, addTurn, beginTurn, cardOf, setState, setTrim, touch, update, render, counts, fail, finishTurn,
    newChat, restore, isFinal, persist, remove, importConversation, good,
  };
  tools = initTools(Object.assign({ cards: api }, ctx));
  return api;
}

export { init as initCards, newConversationId, good, CONV_ID, STORE };
