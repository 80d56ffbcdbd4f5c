// threads.js: the history page's requests as conversations (history.js draws the table): rows
// grouped by conversation into threads, each row's turn from the history API's `messages` (a
// chat request's conversation as it was sent: its last user message, then its completion) and
// what the server left out of a long conversation ("3 turns left out (412 tokens)", from
// `trimmed_messages` and `trimmed_tokens`), a row's finish in words, and the cached-tokens note.

import { isNum } from './format.js';

export { CONV_ID } from './conv_store.js';

const FINISH_TEXT = {
  length: 'max tokens', eos: 'end of text', stop: 'stop string', cancelled: 'cancelled', error: 'failed',
};

// One line of at most n characters, for a tooltip.
export const shortPrompt = (s, n) => {
  const t = String(s == null ? '' : s).replace(/\s+/g, ' ').trim();
  return t.length > n ? t.slice(0, n - 1) + '…' : t;
};

export function finishText(r) {
  if (r.error_code) return 'refused';
  return FINISH_TEXT[r.finish_reason] || r.finish_reason || '–';
}

export function finishKind(r) {
  if (r.error_code || r.finish_reason === 'error') return 'error';
  if (r.finish_reason === 'cancelled') return 'cancelled';
  if (!r.finish_reason) return 'unknown';
  return 'done';
}

// ---------------------------------------------------------------- a request's conversation

const chatOf = (r) => (Array.isArray(r.messages) ? r.messages.filter((m) => m && typeof m === 'object') : null);

// A chat request's newest user message (what the user said in that turn), or null.
export function lastUserMessage(r) {
  const msgs = chatOf(r);
  if (!msgs) return null;
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i].role === 'user') return typeof msgs[i].content === 'string' ? msgs[i].content : '';
  }
  return null;
}

// What the server left out of the request: {messages, tokens, turns (the user messages among
// them)}, or null when nothing was (or the row predates trimming).
export function trimOf(r) {
  if (!isNum(r.trimmed_messages) || r.trimmed_messages <= 0) return null;
  const rest = (chatOf(r) || []).filter((m) => m.role !== 'system').slice(0, r.trimmed_messages);
  const turns = rest.filter((m) => m.role === 'user').length;
  return { messages: r.trimmed_messages, tokens: isNum(r.trimmed_tokens) ? r.trimmed_tokens : null, turns };
}

// "3 turns left out (412 tokens)"
export function trimText(tr) {
  const n = tr.turns || tr.messages;
  const what = tr.turns ? (n === 1 ? 'turn' : 'turns') : (n === 1 ? 'message' : 'messages');
  return `${n} ${what} left out` + (isNum(tr.tokens) ? ` (${tr.tokens} tokens)` : '');
}

function trimSpan(tr, r) {
  const s = document.createElement('span');
  s.className = 'trim-note';
  s.textContent = trimText(tr);
  s.title = `The model did not see the first ${tr.messages} message${tr.messages === 1 ? '' : 's'} of ` +
    (r ? `request #${r.id}'s` : 'the newest request\'s') + ' conversation: it did not fit the context';
  return s;
}

// ---------------------------------------------------------------- threads

// History rows (newest first) as threads: [{r} | {head: id, list} | {r, conv, turn, of}]. A
// conversation's requests come together at its newest one's place, oldest turn first; a
// conversation of one request is a plain row (with its conv).
export function threadOrder(requests) {
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

// A thread's first row: the conversation, its turns and cached tokens, what its newest request
// left out, and (o.link) a link to the conversation alone when older turns may be on pages not
// loaded. o.color: its policy's.
export function threadHead(t, o) {
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
  const newest = t.list[t.list.length - 1];
  const trim = trimOf(newest);
  if (trim) {
    tr.dataset.trimmedMessages = String(trim.messages);
    tr.dataset.trimmedTurns = String(trim.turns);
    if (isNum(trim.tokens)) tr.dataset.trimmedTokens = String(trim.tokens);
    td.append(' · now ', trimSpan(trim, newest));
  }
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

// A history row's prompt cell: the turn's number in its thread and, for a chat request, its
// newest user message (from `messages`) and its completion, with what was left out; for a plain
// prompt, the prompt (the whole text the model was given is in the title and the detail panel).
export function promptCell(td, r, t) {
  if (t.turn) {
    const n = document.createElement('span');
    n.className = 'turn-no';
    n.textContent = String(t.turn);
    n.title = `turn ${t.turn} of ${t.of}`;
    td.append(n);
  }
  const pr = document.createElement('span');
  pr.className = 'cell-prompt';
  const said = lastUserMessage(r);
  pr.textContent = said != null ? said : (r.prompt || '');
  pr.title = String(r.prompt || '').slice(0, 600);
  td.append(pr);
  if (said != null && r.completion) {
    const re = document.createElement('span');
    re.className = 'cell-reply';
    re.textContent = r.completion;
    re.title = String(r.completion).slice(0, 600);
    td.append(re);
  }
  const trim = trimOf(r);
  if (trim) {
    const tr = td.closest('tr') || td;
    tr.dataset.trimmedMessages = String(trim.messages);
    td.append(trimSpan(trim, r));
  }
}

// The detail panel's line on what the model was given of a long conversation (hidden if nothing
// was left out).
export function trimLine(p, r) {
  const trim = trimOf(r);
  p.hidden = !trim;
  p.textContent = trim ? `${trimText(trim)}: the first ${trim.messages} message${trim.messages === 1 ? '' : 's'} of ` +
    'the conversation did not fit the context, so the text below begins after them.' : '';
}

// "32 cached" under a row's token count when the prefix cache served part of its prompt.
export function cachedNote(td, r) {
  if (!isNum(r.cached_tokens) || r.cached_tokens <= 0) return;
  const c = document.createElement('span');
  c.className = 'cached-note';
  c.textContent = `${r.cached_tokens} cached`;
  td.append(c);
}
