// chat_tools.js: what a chat page's conversation card offers besides Continue (conversation.js
// keeps the cards and their tree of turns): on a turn, Copy (its reply to the clipboard), Edit
// (a user turn: sending the edited text starts a new branch from there, the old one stays) and
// the "‹ 1/2 ›" switcher between a turn's branches; on the last turn, Regenerate (the same turn
// sent again with a new seed, its reply replaced); on the card, Export (the shown branch as a
// JSON file of OpenAI-style messages) and Delete (the card and its record); the composer's
// Import (such a file becomes a card that can be continued); and the Escape key, which stops
// the running reply (the focused card's, else the newest).
//
// Hooks for tests:
//   on a turn: .turn-copy (the turn gets data-copied="1|0" for a moment: copied or not),
//       .turn-edit opens form.edit-form (.edit-input, .edit-send, .edit-cancel, .edit-err;
//       the turn has data-editing="1"), .turn-regen (the last turn's), span.branch with
//       .branch-prev, .branch-pos ("1/2"), .branch-next when the turn has siblings (the turn has
//       data-branch="1" data-branches="2")
//   on a card: .card-tools with .card-export (a download named inflight-CONVERSATION.json) and
//       .card-delete
//   #import-chat opens the file input #import-file; an imported card has data-imported="1"

import { exportText, parseImport, storeUpdate } from './conv_store.js';

const COPIED_MS = 1500;

// A fresh seed, not the one before (seeds are 0 .. 2^53 - 1; 32 random bits are plenty).
function newSeed(old) {
  const b = new Uint32Array(1);
  crypto.getRandomValues(b);
  return b[0] === old ? (b[0] + 1) >>> 0 : b[0];
}

// navigator.clipboard where the page may use it (a secure context: https or localhost), else a
// selected textarea and the older execCommand('copy'). Resolves to whether it copied.
async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (e) { /* refused: try the older way */ }
  }
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.style.position = 'fixed';
  ta.style.top = '0';
  ta.style.opacity = '0';
  document.body.append(ta);
  ta.select();
  let ok = false;
  try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
  ta.remove();
  return ok;
}

// t: {app, el, cards (conversation.js's api), send(card, makeTurn, extra), cancel(card), banner(text)}
export function initTools(t) {
  const { app, cards } = t;
  const byEl = (li) => app.cards.get(li && li.dataset.id);

  // ---------------------------------------------------------------- a turn's tools

  function bindTurn(card, turn) {
    const li = turn.el;
    const q = turn.q;
    for (const cls of ['edit-form', 'edit-input', 'edit-send', 'edit-cancel', 'edit-err', 'branch',
      'branch-prev', 'branch-pos', 'branch-next', 'turn-tools', 'turn-copy', 'turn-edit', 'turn-regen']) {
      q[cls] = li.querySelector('.' + cls);
    }
    q['turn-copy'].addEventListener('click', () => copy(turn));
    q['turn-edit'].addEventListener('click', () => openEdit(card, turn));
    q['turn-regen'].addEventListener('click', () => regenerate(card, turn));
    q['branch-prev'].addEventListener('click', () => switchBranch(card, turn, -1));
    q['branch-next'].addEventListener('click', () => switchBranch(card, turn, 1));
    q['edit-form'].addEventListener('submit', (e) => { e.preventDefault(); sendEdit(card, turn); });
    q['edit-cancel'].addEventListener('click', () => closeEdit(card, turn));
    q['edit-input'].addEventListener('input', () => { q['edit-err'].textContent = ''; });
    q['edit-input'].addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        sendEdit(card, turn);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        closeEdit(card, turn);
      }
    });
  }

  async function copy(turn) {
    const done = await copyText(turn.reply || '');
    const b = turn.q['turn-copy'];
    turn.el.dataset.copied = done ? '1' : '0';
    b.textContent = done ? 'Copied' : 'Copy failed';
    clearTimeout(turn.copyTimer);
    turn.copyTimer = setTimeout(() => {
      b.textContent = 'Copy';
      delete turn.el.dataset.copied;
    }, COPIED_MS);
  }

  function openEdit(card, turn) {
    if (!cards.isFinal(card)) return;
    for (const o of card.turns) if (o !== turn && o.el.dataset.editing) closeEdit(card, o);
    const q = turn.q;
    q['edit-input'].value = turn.user || '';
    q['edit-err'].textContent = '';
    q['edit-form'].hidden = false;
    turn.el.dataset.editing = '1';
    update(card);
    q['edit-input'].focus();
    q['edit-input'].setSelectionRange(q['edit-input'].value.length, q['edit-input'].value.length);
  }

  function closeEdit(card, turn) {
    turn.q['edit-form'].hidden = true;
    delete turn.el.dataset.editing;
    update(card);
  }

  // The edited text becomes a new turn beside the old one (same parent): a branch from there.
  function sendEdit(card, turn) {
    const q = turn.q;
    const text = q['edit-input'].value;
    if (!text.trim()) {
      q['edit-err'].textContent = 'Write a message first.';
      return;
    }
    if (!cards.isFinal(card)) {
      q['edit-err'].textContent = 'Wait for the reply that is running, or stop it (Escape).';
      return;
    }
    const why = t.send(card, () => cards.addTurn(card, text, turn.parent, turn.kind));
    if (why) {
      q['edit-err'].textContent = why;
      return;
    }
    closeEdit(card, turn);
  }

  // The same turn again, with a new seed: the same messages are sent, the reply replaced.
  function regenerate(card, turn) {
    if (!cards.isFinal(card) || card.turns[card.turns.length - 1] !== turn) return;
    const why = t.send(card, () => turn, { seed: newSeed(turn.seed) });
    if (why) t.banner(why);
  }

  function switchBranch(card, turn, d) {
    const sibs = turn.parent.kids;
    const k = sibs.indexOf(turn) + d;
    if (!cards.isFinal(card) || k < 0 || k >= sibs.length) return;
    turn.parent.sel = k;
    cards.render(card);
    cards.persist(card);
    const to = sibs[k].q[d < 0 ? 'branch-prev' : 'branch-next'];
    (to.disabled ? sibs[k].q[d < 0 ? 'branch-next' : 'branch-prev'] : to).focus();
  }

  // Which tools each shown turn offers now (a running card offers none but Copy on finished turns).
  function update(card) {
    const final = cards.isFinal(card) && card.state !== 'new';
    const last = card.turns[card.turns.length - 1];
    for (const turn of card.turns) {
      const q = turn.q, ds = turn.el.dataset;
      const sibs = turn.parent.kids;
      q.branch.hidden = sibs.length < 2;
      if (sibs.length > 1) {
        const k = sibs.indexOf(turn);
        q['branch-pos'].textContent = `${k + 1}/${sibs.length}`;
        ds.branch = String(k + 1);
        ds.branches = String(sibs.length);
        q['branch-prev'].disabled = !final || k === 0;
        q['branch-next'].disabled = !final || k === sibs.length - 1;
      } else {
        delete ds.branch;
        delete ds.branches;
      }
      const running = turn === card.turn && !final;
      q['turn-copy'].hidden = running || !turn.reply;
      q['turn-edit'].hidden = !final || turn.user == null || !!ds.editing;
      q['turn-regen'].hidden = !final || turn !== last || turn.user == null;
      q['turn-regen'].textContent = turn.failed ? 'Retry' : (turn.reply == null ? 'Answer' : 'Regenerate');
      q['turn-regen'].title = turn.reply == null ? 'Send this turn for a reply'
        : 'Send this turn again with a new seed; the new reply replaces this one';
      q['turn-tools'].hidden = q['turn-copy'].hidden && q['turn-edit'].hidden && q['turn-regen'].hidden;
    }
    const has = card.turns.some(cards.good);
    card.q['card-tools'].hidden = !final || !card.turns.length;
    card.q['card-export'].disabled = !has;
  }

  // ---------------------------------------------------------------- the card's tools

  function bindCard(card) {
    card.q['card-export'].addEventListener('click', () => exportCard(card));
    card.q['card-delete'].addEventListener('click', () => {
      if (!cards.isFinal(card)) return;
      cards.remove(card);
      storeUpdate(card.conv, null);
    });
  }

  // The shown branch's finished turns as a download (inflight-CONVERSATION.json).
  function exportCard(card) {
    const blob = new Blob([exportText(card.system, card.turns.filter(cards.good))], { type: 'application/json' });
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = `inflight-${card.conv}.json`;
    a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // ---------------------------------------------------------------- import

  const importBtn = document.getElementById('import-chat');
  const importFile = document.getElementById('import-file');
  const formErr = document.getElementById('form-err');
  importBtn.addEventListener('click', () => importFile.click());
  importFile.addEventListener('change', async () => {
    const f = importFile.files && importFile.files[0];
    importFile.value = '';   // the same file can be chosen again
    if (!f) return;
    let text;
    try {
      text = await f.text();
    } catch (e) {
      formErr.textContent = `Cannot read ${f.name}.`;
      return;
    }
    const parsed = parseImport(text);
    if (parsed.error) {
      formErr.textContent = `Cannot import ${f.name}: ${parsed.error}.`;
      return;
    }
    formErr.textContent = '';
    const card = cards.importConversation(parsed);
    card.el.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
    card.q['card-continue'].focus({ preventScroll: true });
  });

  // ---------------------------------------------------------------- Escape stops a reply

  // The focused card's running reply, else the newest running one. A form's own Escape (it
  // closes the form) comes first: it calls preventDefault.
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || e.isComposing) return;
    let card = byEl(e.target && e.target.closest ? e.target.closest('.card') : null);
    if (!card || cards.isFinal(card)) {
      card = null;
      for (const c of app.cards.values()) {
        if (!cards.isFinal(c) && (!card || c.sentAt > card.sentAt)) card = c;
      }
    }
    if (!card) return;
    e.preventDefault();
    t.cancel(card);
  });

  return { bindTurn, bindCard, update };
}
