// conv_store.js: the chat page's conversations as data, apart from the page: their records in
// localStorage (`inflight.conversations`, version 2: every branch of a card's turns; version 1
// records, a plain list of turns, are read and rewritten as version 2 on the next write), a
// turn's messages in OpenAI's format ({role, content}), and a conversation file's import and
// export (a JSON array of messages, or an object with a `messages` array, as a chat request has).
// conversation.js keeps the cards; this module knows nothing of the DOM.

import { isNum } from './format.js';

export const STORE = 'inflight.conversations';
const VERSION = 2;
const KEEP = 50;   // conversations kept: the most recently used
export const CONV_ID = /^[A-Za-z0-9_-]{1,64}$/;   // what the server accepts as a conversation id
const IMPORT_MAX_BYTES = 4 << 20;
const IMPORT_MAX_MESSAGES = 10000;

// ---------------------------------------------------------------- a turn's messages

// A turn is a user message and its reply; an imported conversation may lack either (two user
// messages in a row, or a reply first): null stands for the missing one.
export function messagesOf(t) {
  const out = [];
  if (t.user != null) out.push({ role: 'user', content: t.user });
  if (t.reply != null) out.push({ role: 'assistant', content: t.reply });
  return out;
}

// ---------------------------------------------------------------- records

const str = (v) => typeof v === 'string';
const strOrNull = (v) => v === null || str(v);

// A stored turn: version 1 had user and reply (strings) only; version 2 adds parent (the index of
// the turn it follows, -1 for a first turn; always below its own), sel (which of its followers is
// shown), trimmed ({messages, tokens, ctx}: what the server left out of its request).
function validTurn(t, i) {
  if (!t || typeof t !== 'object' || !strOrNull(t.user) || !strOrNull(t.reply)) return false;
  if (t.user == null && t.reply == null) return false;
  return t.parent === undefined || (Number.isInteger(t.parent) && t.parent >= -1 && t.parent < i);
}

function validRecord(r) {
  return r && typeof r === 'object' && str(r.id) && CONV_ID.test(r.id) &&
    Array.isArray(r.turns) && r.turns.length > 0 && r.turns.every(validTurn);
}

function cleanTrim(t) {
  return t && typeof t === 'object' && isNum(t.messages) && t.messages >= 0
    ? { messages: t.messages, tokens: isNum(t.tokens) ? t.tokens : null, ctx: isNum(t.ctx) ? t.ctx : null } : null;
}

// A record as version 2: a version 1 record's turns follow one another.
function upgrade(r) {
  return {
    id: r.id, mode: r.mode === 'chat' ? 'chat' : 'complete', model: str(r.model) ? r.model : '',
    updated: isNum(r.updated) ? r.updated : 0,
    system: Array.isArray(r.system) ? r.system.filter(str) : [],
    sel: Number.isInteger(r.sel) ? r.sel : 0,
    turns: r.turns.map((t, i) => ({
      user: t.user, reply: t.reply, kind: t.kind === 'complete' ? 'complete' : 'chat',
      finish: str(t.finish) ? t.finish : 'unknown', model: str(t.model) ? t.model : '',
      seed: isNum(t.seed) ? t.seed : null,
      usage: t.usage && typeof t.usage === 'object' ? t.usage : null,
      trimmed: cleanTrim(t.trimmed),
      parent: t.parent === undefined ? i - 1 : t.parent,
      sel: Number.isInteger(t.sel) ? t.sel : 0,
      imported: t.imported === true,
    })),
  };
}

// Whether a newer page wrote the store (then this one only reads it: writing would lose what it
// does not know).
let newer = false;

// The stored conversations as version 2 records, least recently used first ([] when storage is
// off or unreadable).
export function readStore() {
  try {
    const j = JSON.parse(window.localStorage.getItem(STORE) || 'null');
    if (!j || !Array.isArray(j.list)) return [];
    newer = isNum(j.v) && j.v > VERSION;
    return j.list.filter(validRecord).map(upgrade);
  } catch (e) {
    return [];
  }
}

// Writes the list; when the browser's quota refuses it, drops the oldest half and tries again.
function writeStore(list) {
  if (newer) return false;
  for (let l = list.slice(-KEEP); ; l = l.slice(Math.ceil(l.length / 2))) {
    try {
      if (l.length) window.localStorage.setItem(STORE, JSON.stringify({ v: VERSION, list: l }));
      else window.localStorage.removeItem(STORE);
      return true;
    } catch (e) {
      if (!l.length) return false;
    }
  }
}

// Another tab may have written meanwhile: read, change one entry (rec null: remove it), write.
export function storeUpdate(id, rec) {
  const list = readStore().filter((r) => r.id !== id);
  if (rec) list.push(rec);
  writeStore(list);
}

// A card's tree of turns as a record: root is {kids, sel}, a turn {user, reply, ..., kids, sel}.
// keep(t): whether a turn is stored (a failed one is not: its followers take its place).
export function toRecord(head, root, keep) {
  const keptKids = (node) => node.kids.flatMap((k) => (keep(k) ? [k] : keptKids(k)));
  const shownKept = (node) => {
    const s = node.kids[Math.min(node.sel, node.kids.length - 1)];
    return !s || keep(s) ? s : shownKept(s);
  };
  const turns = [];
  const walk = (node, parent) => {
    const kids = keptKids(node);
    const sel = Math.max(0, kids.indexOf(shownKept(node)));
    if (parent >= 0) turns[parent].sel = sel;
    for (const k of kids) {
      turns.push({
        user: k.user, reply: k.reply, kind: k.kind, finish: k.finish, model: k.model, seed: k.seed,
        usage: k.usage ? {
          prompt_tokens: k.usage.prompt_tokens, completion_tokens: k.usage.completion_tokens,
          cached_tokens: k.usage.cached_tokens,
        } : null,
        trimmed: k.trimmed || null, parent, sel: 0, imported: k.imported || undefined,
      });
      walk(k, turns.length - 1);
    }
    return sel;
  };
  const sel = walk(root, -1);
  return turns.length ? Object.assign({}, head, { sel, turns }) : null;
}

// ---------------------------------------------------------------- files

// The messages of a file: a JSON array of {role, content}, or an object with such a `messages`
// array (a chat request). A content may be OpenAI's list of parts: its text parts are joined.
// Returns {system: [text], turns: [{user, reply}]} or {error}.
export function parseImport(text) {
  if (text.length > IMPORT_MAX_BYTES) return { error: `the file is over ${IMPORT_MAX_BYTES >> 20} MiB` };
  let j;
  try {
    j = JSON.parse(text);
  } catch (e) {
    return { error: 'the file is not JSON' };
  }
  const list = Array.isArray(j) ? j : (j && Array.isArray(j.messages) ? j.messages : null);
  if (!list) return { error: 'the file holds no list of messages ([{"role": ..., "content": ...}])' };
  if (!list.length) return { error: 'the file\'s list of messages is empty' };
  if (list.length > IMPORT_MAX_MESSAGES) return { error: `more than ${IMPORT_MAX_MESSAGES} messages` };
  const system = [], turns = [];
  for (const [i, m] of list.entries()) {
    if (!m || typeof m !== 'object') return { error: `message ${i + 1} is not an object` };
    let c = m.content;
    if (Array.isArray(c)) c = c.filter((p) => p && p.type === 'text' && str(p.text)).map((p) => p.text).join('');
    else if (c == null) c = '';
    if (!str(c)) return { error: `message ${i + 1}'s content is not text` };
    const last = turns[turns.length - 1];
    if (m.role === 'system' || m.role === 'developer') system.push(c);
    else if (m.role === 'user') turns.push({ user: c, reply: null });
    else if (m.role === 'assistant') {
      if (last && last.reply == null) last.reply = c;
      else turns.push({ user: null, reply: c });
    } else {
      return { error: `message ${i + 1}'s role ${JSON.stringify(m.role)} is not system, user or assistant` };
    }
  }
  if (!turns.length) return { error: 'the file has no user or assistant message' };
  return { system, turns };
}

// A conversation's file: its system messages, then each turn's messages.
export function exportText(system, turns) {
  const msgs = system.map((s) => ({ role: 'system', content: s }));
  for (const t of turns) msgs.push(...messagesOf(t));
  return JSON.stringify(msgs, null, 2) + '\n';
}
