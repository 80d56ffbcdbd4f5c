#!/usr/bin/env node
// long_chat.test.js: a long conversation on the chat page in headless Chromium against the real
// `inflight serve` with a tiny random model of a 64-token context, so that a conversation of
// 8-token replies overflows it every few turns and the server leaves its oldest turns out
// (docs/protocol.md, "Long conversations"). Checked:
//   - a stored version 1 conversation (the record shape before branches) is restored, and kept
//     (rewritten as version 2) when the page next writes;
//   - 30 turns in ONE card, sent by the keyboard (Enter; Shift+Enter is a newline in the text):
//     every turn answers (started and done, finish "length", no error frame), every generate
//     carries the whole shown conversation, and after each turn the faded turns are exactly the
//     first trimmed_messages messages the server reported in that turn's frames (none guessed),
//     with the note naming the context's 64 tokens; trims happen several times;
//   - Copy: the clipboard (permission granted to the context) holds the reply;
//   - Regenerate: the same messages are sent again under a new id with another seed, the turn
//     count stays, the reply shown is the new one;
//   - Edit an earlier turn: a branch from there (the generate sends the turns above it, then the
//     edited text), "‹ 2/2 ›" on that turn, both branches reachable, faded per branch;
//   - Export: the download is the shown branch as [{role, content}]; Import of that file makes a
//     card with the same turns that continues (one more turn answers, sending them all);
//   - Escape stops a running reply (finish "cancelled"); Delete removes a card and its record;
//   - a reload restores the branches, the shown branch and the fades; the history page shows the
//     conversation as a thread with its trims ("N turns left out (T tokens)") and each row's turn
//     from the API's `messages`, which are what the page sent.
// No console errors, page errors, CSP violations or requests to other origins. Screenshots (and
// the server's output, server.log) go to ARTIFACTS_DIR.
//
// usage: node tests/browser/long_chat.test.js INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR
// Exit status: 0 passed, 1 failed, 77 skipped (no Chromium; $CHROMIUM overrides /usr/bin/chromium;
// under CI=true no Chromium is a failure).
'use strict';

const fs = require('fs');
const path = require('path');
const lib = require('./lib');
const {
  log, ok, check, cleanup, httpGet, pages, openPage, watchPage, setPolicy,
  screenshot, sameList, loadHistory, apiHistory,
} = lib;
const { chromiumOrExit, launch } = require('./browser');
const WebSocket = require('ws');

const { vocab: VOCAB, artifacts: ARTIFACTS } = lib.parseArgs('long_chat.test.js');
const chromium = chromiumOrExit(log);

const N_CTX = 64;
const TURNS = 30;
const MAX_TOKENS = 8;
const EDITED = 27;        // the turn edited into a second branch
const STOP_TOKENS = 48;   // the reply Escape stops: long enough to be still running
// A 48-token reply of this model takes ~50 ms alone, less than a key press takes to arrive from
// here; beside LOAD other requests (another connection's) each step takes ~30 times as long.
const LOAD = 32;
const V1_ID = 'c-v1record00000001';
const say = (n) => `Turn ${n}: tell me more`;
const turnsOut = (r) => r.messages.slice(0, r.trimmed_messages).filter((x) => x.role === 'user').length;
const outText = (k) => `${k} turn${k === 1 ? '' : 's'} left out`;

// ------------------------------------------------------------------ reading the page

// A card's shown turns, faded counts and note.
function cardState(page, conv) {
  return page.$eval(`.card[data-conversation="${conv}"]`, (c) => ({
    id: c.dataset.id, state: c.dataset.state, finish: c.dataset.finish || null, turns: Number(c.dataset.turns),
    restored: c.dataset.restored === '1', imported: c.dataset.imported === '1',
    trimmed: c.dataset.trimmedMessages == null ? null : Number(c.dataset.trimmedMessages),
    list: Array.from(c.querySelectorAll('.thread > .turn'), (t) => ({
      n: Number(t.dataset.turn), state: t.dataset.state, req: t.dataset.req || null,
      user: t.querySelector('.prompt').textContent, reply: t.querySelector('.completion').textContent,
      faded: Number(t.dataset.faded || 0), branch: t.dataset.branch || null, branches: t.dataset.branches || null,
      pos: t.querySelector('.branch-pos').textContent,
    })),
    notes: Array.from(c.querySelectorAll('.thread > .trim-note'), (n) => ({
      text: n.textContent, after: Number(n.previousElementSibling.dataset.turn), messages: Number(n.dataset.trimmedMessages),
    })),
  }));
}

async function waitTurnEnd(page, conv, n, req) {
  await page.waitForFunction(([c, k, r]) => {
    const t = document.querySelector(`.card[data-conversation="${c}"] .thread > .turn[data-turn="${k}"]`);
    return t && (!r || t.dataset.req === r) && (t.dataset.state === 'done' || t.dataset.state === 'error');
  }, [conv, n, req], { timeout: 20000 });
  return cardState(page, conv);
}

// The faded turns must be the first ones and hold exactly `want` messages (the server's
// trimmed_messages for the latest turn), with the note after the last of them.
function checkFades(th, want, what) {
  const sum = th.list.reduce((a, t) => a + t.faded, 0);
  const k = th.list.findIndex((t) => !t.faded);
  const prefix = k < 0 ? th.list.length : k;
  const ok1 = sum === want && th.list.slice(prefix).every((t) => !t.faded) && th.trimmed === want;
  const note = th.notes[0];
  const ok2 = want === 0 ? th.notes.length === 0
    : th.notes.length === 1 && note.after === prefix && note.messages === want && note.text.includes(`the context holds ${N_CTX} tokens`);
  if (!ok1 || !ok2) {
    throw new Error(`${what}: the page fades ${sum} messages (turns 1..${prefix}, card data-trimmed-messages ` +
      `${th.trimmed}, notes ${JSON.stringify(th.notes)}); the server reported trimmed_messages ${want}`);
  }
  return prefix;
}

// ------------------------------------------------------------------ the test

async function main() {
  const { srv, base } = await lib.startOnNewModel(VOCAB, N_CTX, 'inflight-long-chat-');
  const browser = await launch(chromium);
  cleanup.browser = browser;
  log(`browser: Chromium ${browser.version()}, server ${base}`);

  // every generate sent, every started/token/done/error received, by request id
  const sent = new Map(), got = { started: new Map(), done: new Map(), error: new Map(), text: new Map() };
  const page = await openPage(browser, base, 'long chat', { permissions: ['clipboard-read', 'clipboard-write'] }, '',
    (p) => p.on('websocket', (ws) => {
      ws.on('framesent', (f) => {
        const m = parse(f.payload);
        if (m && m.type === 'generate') sent.set(m.id, m);
      });
      ws.on('framereceived', (f) => {
        const m = parse(f.payload);
        if (!m || !m.id) return;
        if (m.type === 'token') got.text.set(m.id, (got.text.get(m.id) || '') + (m.text || ''));
        else if (got[m.type]) got[m.type].set(m.id, m);
      });
    }));
  const hello = await page.evaluate(() => window.inflight.hello);
  check(hello.model.n_ctx === N_CTX && hello.defaults.truncate === true, `hello: context ${hello.model.n_ctx}, truncate on by default`);

  // -------- a version 1 record is read (and kept)
  await page.evaluate(([id]) => localStorage.setItem('inflight.conversations', JSON.stringify({ v: 1, list: [{
    id, mode: 'chat', model: 'iterative', updated: Date.now() - 60000,
    turns: [{ user: 'An old question', reply: ' An old answer.', kind: 'chat', finish: 'length', model: 'iterative', seed: 5,
      usage: { prompt_tokens: 9, completion_tokens: 4, cached_tokens: 0 } }],
  }] })), [V1_ID]);
  await page.reload();
  await page.waitForSelector('body[data-conn="open"]', { timeout: 20000 });
  const v1 = await cardState(page, V1_ID);
  check(v1.restored && v1.turns === 1 && v1.list[0].user === 'An old question' && v1.list[0].reply === ' An old answer.',
    `a version 1 record is restored as card ${v1.id} (1 turn, its text)`);

  // -------- 30 turns in one card, by the keyboard
  await setPolicy(page, 'iterative');
  await page.click('label[for="mode-chat"]');
  await page.fill('#max-tokens', String(MAX_TOKENS));
  await page.check('#ignore-eos');
  await page.fill('#prompt', say(1));
  await page.press('#prompt', 'Enter');
  const conv = await page.waitForFunction((old) => {
    const c = Array.from(document.querySelectorAll('#cards .card')).find((x) => x.dataset.conversation !== old);
    return c && c.dataset.conversation;
  }, V1_ID).then((h) => h.jsonValue());
  const card = `.card[data-conversation="${conv}"]`;
  const users = [];
  let th = null, trims = 0, lastTrim = 0, maxPrefix = 0;
  const t0 = Date.now();
  for (let n = 1; n <= TURNS; n++) {
    if (n > 1) {
      await page.click(`${card} .card-continue`);
      if (n === 2) {
        await page.type(`${card} .turn-input`, 'Two lines:');
        await page.press(`${card} .turn-input`, 'Shift+Enter');
        await page.type(`${card} .turn-input`, say(n));
      } else {
        await page.fill(`${card} .turn-input`, say(n));
      }
      await page.press(`${card} .turn-input`, 'Enter');
    }
    users.push(n === 2 ? 'Two lines:\n' + say(n) : say(n));
    th = await waitTurnEnd(page, conv, n);
    const t = th.list[n - 1];
    const st = got.started.get(t.req), dn = got.done.get(t.req), m = sent.get(t.req);
    if (t.state !== 'done' || !st || !dn || dn.finish_reason !== 'length' || got.error.has(t.req)) {
      throw new Error(`turn ${n} (${t.req}) did not answer: state ${t.state}, done ${JSON.stringify(dn)}, error ${JSON.stringify(got.error.get(t.req))}`);
    }
    const want = [];
    for (const u of th.list.slice(0, n - 1)) want.push({ role: 'user', content: u.user }, { role: 'assistant', content: u.reply });
    want.push({ role: 'user', content: users[n - 1] });
    if (!m || JSON.stringify(m.messages) !== JSON.stringify(want) || m.conversation !== conv) {
      throw new Error(`turn ${n}: the generate ${t.req} did not carry the whole conversation (${m && m.messages && m.messages.length} messages, ${want.length} expected)`);
    }
    const tm = dn.usage.trimmed_messages;
    if (st.trimmed_messages !== tm) throw new Error(`turn ${n}: started says ${st.trimmed_messages} trimmed, done ${tm}`);
    maxPrefix = checkFades(th, tm, `turn ${n}`);
    if (tm > lastTrim) trims++;
    lastTrim = tm;
  }
  const cardsOfConv = await page.$$eval(card, (cs) => cs.length);
  check(cardsOfConv === 1 && th.turns === TURNS && th.list.every((t, i) => t.state === 'done' && t.user === users[i]),
    `${TURNS} turns in one card (${th.id}), each answered (done, finish length, no error frame) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  check(users[1].includes('\n') && sent.get(th.list[1].req).messages[2].content === users[1],
    'Shift+Enter put a newline in turn 2, Enter sent it');
  check(trims >= 3 && lastTrim > 0,
    `the server trimmed ${trims} times; after turn ${TURNS} the first ${lastTrim} messages (turns 1..${maxPrefix}) are faded, exactly its trimmed_messages`);
  const last = th.list[TURNS - 1];
  await page.mouse.move(0, 0);
  await screenshot(page, 'long-chat.png');

  // -------- copy
  await page.click(`${card} .turn[data-turn="${TURNS}"] .turn-copy`);
  await page.waitForSelector(`${card} .turn[data-turn="${TURNS}"][data-copied="1"]`, { timeout: 5000 });
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  check(clip === last.reply && clip === got.text.get(last.req), `Copy: the clipboard holds turn ${TURNS}'s reply ${JSON.stringify(clip)}`);

  // -------- regenerate
  await page.click(`${card} .turn[data-turn="${TURNS}"] .turn-regen`);
  th = await page.waitForFunction(([c, k, old]) => {
    const t = document.querySelector(`.card[data-conversation="${c}"] .thread > .turn[data-turn="${k}"]`);
    return t.dataset.req !== old && t.dataset.state === 'done';
  }, [conv, TURNS, last.req], { timeout: 20000 }).then(() => cardState(page, conv));
  const regen = th.list[TURNS - 1];
  const mOld = sent.get(last.req), mNew = sent.get(regen.req);
  const seedOld = got.started.get(last.req).seed, seedNew = got.started.get(regen.req).seed;
  check(mNew && JSON.stringify(mNew.messages) === JSON.stringify(mOld.messages) && seedNew !== seedOld && mNew.seed === seedNew,
    `Regenerate: request ${regen.req} resent turn ${TURNS}'s ${mNew.messages.length} messages with seed ${seedNew} (was ${seedOld})`);
  check(th.turns === TURNS && regen.reply === got.text.get(regen.req) && got.done.get(regen.req).finish_reason === 'length',
    `Regenerate: still ${TURNS} turns, the reply shown is the new one` + (regen.reply !== last.reply ? ' (it changed)' : ' (the same text by chance)'));
  checkFades(th, got.done.get(regen.req).usage.trimmed_messages, 'after regenerate');

  // -------- edit an earlier turn: a branch
  const old = th.list[EDITED - 1];
  const editedText = 'An edited question';
  await page.click(`${card} .turn[data-turn="${EDITED}"] .turn-edit`);
  await page.fill(`${card} .turn[data-turn="${EDITED}"] .edit-input`, editedText);
  await page.press(`${card} .turn[data-turn="${EDITED}"] .edit-input`, 'Enter');
  th = await page.waitForFunction(([c, k]) => {
    const t = document.querySelector(`.card[data-conversation="${c}"] .thread > .turn[data-turn="${k}"]`);
    return t && t.querySelector('.prompt').textContent !== '' && t.dataset.branch === '2' && t.dataset.state === 'done';
  }, [conv, EDITED], { timeout: 20000 }).then(() => cardState(page, conv));
  const ed = th.list[EDITED - 1];
  const mEd = sent.get(ed.req);
  const wantEd = [];
  for (const u of th.list.slice(0, EDITED - 1)) wantEd.push({ role: 'user', content: u.user }, { role: 'assistant', content: u.reply });
  wantEd.push({ role: 'user', content: editedText });
  check(th.turns === EDITED && ed.user === editedText && ed.branches === '2' && ed.pos === '2/2' &&
    JSON.stringify(mEd.messages) === JSON.stringify(wantEd) && got.done.get(ed.req).finish_reason === 'length',
  `Edit turn ${EDITED}: a new branch (${ed.pos}), its request sent the ${EDITED - 1} turns above and the edited text, answered`);
  checkFades(th, got.done.get(ed.req).usage.trimmed_messages, 'the edited branch');
  await page.click(`${card} .turn[data-turn="${EDITED}"] .branch-prev`);
  const b1 = await cardState(page, conv);
  check(b1.turns === TURNS && b1.list[EDITED - 1].user === old.user && b1.list[EDITED - 1].pos === '1/2' &&
    b1.list[TURNS - 1].reply === regen.reply, `branch 1/2: the old ${TURNS} turns again, turn ${EDITED} "${old.user}"`);
  checkFades(b1, got.done.get(regen.req).usage.trimmed_messages, 'branch 1/2');
  await page.mouse.move(0, 0);
  await screenshot(page, 'long-chat-branch.png');
  await page.click(`${card} .turn[data-turn="${EDITED}"] .branch-next`);
  th = await cardState(page, conv);
  check(th.turns === EDITED && th.list[EDITED - 1].user === editedText && th.list[EDITED - 1].pos === '2/2',
    `branch 2/2: the edited branch again (${th.turns} turns)`);

  // -------- export, then import and continue
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 10000 }), page.click(`${card} .card-export`)]);
  const file = path.join(ARTIFACTS, 'long-chat-export.json');
  await dl.saveAs(file);
  const exported = JSON.parse(fs.readFileSync(file, 'utf8'));
  const shown = [];
  for (const u of th.list) shown.push({ role: 'user', content: u.user }, { role: 'assistant', content: u.reply });
  check(dl.suggestedFilename() === `inflight-${conv}.json` && JSON.stringify(exported) === JSON.stringify(shown),
    `Export: ${dl.suggestedFilename()} holds the shown branch as ${exported.length} {role, content} messages`);
  const before = new Set(await page.$$eval('#cards .card', (cs) => cs.map((c) => c.dataset.conversation)));
  await page.setInputFiles('#import-file', file);
  const conv2 = await page.waitForFunction((had) => {
    const c = Array.from(document.querySelectorAll('#cards .card[data-imported="1"]')).find((x) => !had.includes(x.dataset.conversation));
    return c && c.dataset.conversation;
  }, [...before]).then((h) => h.jsonValue());
  const card2 = `.card[data-conversation="${conv2}"]`;
  let im = await cardState(page, conv2);
  check(im.imported && im.turns === EDITED && im.list.every((t, i) => t.user === th.list[i].user && t.reply === th.list[i].reply),
    `Import: card ${im.id} (conversation ${conv2}) holds the file's ${im.turns} turns`);
  await page.click(`${card2} .card-continue`);
  await page.fill(`${card2} .turn-input`, 'And after the import?');
  await page.press(`${card2} .turn-input`, 'Enter');
  im = await waitTurnEnd(page, conv2, EDITED + 1);
  const it = im.list[EDITED];
  const mIm = sent.get(it.req), dIm = got.done.get(it.req);
  check(it.state === 'done' && dIm && dIm.finish_reason === 'length' && mIm.conversation === conv2 &&
    JSON.stringify(mIm.messages) === JSON.stringify([...exported, { role: 'user', content: 'And after the import?' }]),
  `the imported conversation continues: turn ${EDITED + 1} sent its ${mIm.messages.length} messages and answered`);
  checkFades(im, dIm.usage.trimmed_messages, 'the imported card');

  // -------- Escape stops a running reply
  await page.fill('#max-tokens', String(STOP_TOKENS));
  let stopped = null;
  for (let attempt = 1; attempt <= 3 && !stopped; attempt++) {
    const n = im.turns + 1;
    const load = await loadServer(srv.port, LOAD, N_CTX - 8);
    await page.click(`${card2} .card-continue`);
    await page.fill(`${card2} .turn-input`, 'Stop.');
    await page.press(`${card2} .turn-input`, 'Enter');
    await page.waitForSelector(`${card2} .turn[data-turn="${n}"][data-state="streaming"], ${card2} .turn[data-turn="${n}"][data-state="done"]`, { timeout: 20000 });
    await page.keyboard.press('Escape');
    im = await waitTurnEnd(page, conv2, n);
    load.close();
    const d = got.done.get(im.list[n - 1].req);
    if (d && d.finish_reason === 'cancelled') stopped = { n, tokens: d.usage.completion_tokens };
    else log(`     attempt ${attempt}: turn ${n} finished (${d && d.finish_reason}) before Escape arrived; again`);
  }
  check(stopped && im.finish === 'cancelled', `Escape stopped turn ${stopped && stopped.n}'s reply after ${stopped && stopped.tokens} of ${STOP_TOKENS} tokens (finish cancelled)`);
  await page.fill('#max-tokens', String(MAX_TOKENS));

  // -------- delete
  await page.click(`${card2} .card-delete`);
  const gone = await page.$$eval(card2, (cs) => cs.length);
  const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('inflight.conversations')));
  check(gone === 0 && !stored.list.some((r) => r.id === conv2) && stored.list.some((r) => r.id === conv),
    `Delete: the imported card and its record are gone, conversation ${conv} stays`);
  check(stored.v === 2 && stored.list.some((r) => r.id === V1_ID && r.turns.length === 1 && r.turns[0].parent === -1),
    'the store is version 2 and still holds the version 1 conversation');

  // -------- a reload restores the branches and the fades
  await page.reload();
  await page.waitForSelector('body[data-conn="open"]', { timeout: 20000 });
  const back = await cardState(page, conv);
  check(back.restored && back.turns === EDITED && back.list[EDITED - 1].pos === '2/2' &&
    back.list.every((t, i) => t.user === th.list[i].user && t.reply === th.list[i].reply),
  `reload: card ${back.id} restored with the shown branch (2/2, ${back.turns} turns)`);
  checkFades(back, got.done.get(ed.req).usage.trimmed_messages, 'after the reload');
  await page.click(`${card} .turn[data-turn="${EDITED}"] .branch-prev`);
  const back1 = await cardState(page, conv);
  check(back1.turns === TURNS && back1.list[TURNS - 1].reply === regen.reply, `reload: branch 1/2 still reachable (${back1.turns} turns)`);
  await page.click(`${card} .turn[data-turn="${EDITED}"] .branch-next`);

  // -------- the history page: the thread, its trims, each row's turn from `messages`
  const key = await page.evaluate(() => localStorage.getItem('inflight.userKey'));
  const api = await apiHistory(srv.port, key);
  const mine = api.filter((r) => r.conversation === conv);
  check(mine.length === TURNS + 2 && mine.every((r) => {
    const m = sent.get(r.client_id), d = got.done.get(r.client_id);
    return m && d && JSON.stringify(r.messages) === JSON.stringify(m.messages) && r.trimmed_messages === d.usage.trimmed_messages &&
      r.trimmed_tokens === d.usage.trimmed_tokens;
  }), `history API: conversation ${conv}'s ${mine.length} requests, each with the messages the page sent and the trims it was told`);
  const hp = watchPage(await page.context().newPage(), base, 'long chat history');
  await loadHistory(hp, base, api.length, '?limit=500');
  const h = await hp.evaluate((c) => {
    const head = document.querySelector(`#rows tr.thread-head[data-conversation="${c}"]`);
    return {
      head: head && { turns: Number(head.dataset.turns), messages: Number(head.dataset.trimmedMessages),
        tokens: Number(head.dataset.trimmedTokens), text: head.querySelector('.trim-note').textContent },
      rows: Array.from(document.querySelectorAll(`#rows tr.turn-row[data-conversation="${c}"]`), (tr) => ({
        id: Number(tr.dataset.id), prompt: tr.querySelector('.cell-prompt').textContent,
        reply: (tr.querySelector('.cell-reply') || {}).textContent || '',
        trim: (tr.querySelector('.trim-note') || {}).textContent || '',
      })),
    };
  }, conv);
  const newest = mine[0];
  check(h.head && h.head.turns === mine.length && h.head.messages === newest.trimmed_messages &&
    h.head.text === `${outText(turnsOut(newest))} (${newest.trimmed_tokens} tokens)`,
  `history: the thread head of ${conv}: ${h.head && h.head.turns} requests, "${h.head && h.head.text}"`);
  const byId = new Map(mine.map((r) => [r.id, r]));
  const bad = h.rows.filter((row) => {
    const r = byId.get(row.id);
    const u = r.messages.filter((x) => x.role === 'user').pop().content;
    const tr = r.trimmed_messages > 0 ? outText(turnsOut(r)) : '';
    return row.prompt !== u || row.reply !== r.completion || !row.trim.startsWith(tr) || (!tr && row.trim);
  });
  check(h.rows.length === mine.length && bad.length === 0,
    `history: each of the thread's ${h.rows.length} rows shows its last user message, its completion and its trims` +
    (bad.length ? `; not rows ${bad.map((r) => r.id).join(', ')}` : ''));
  await hp.click(`#rows tr[data-id="${newest.id}"]`);
  await hp.waitForSelector(`#detail[data-state="ready"][data-id="${newest.id}"]`, { timeout: 10000 });
  const dt = await hp.$eval('#detail-trim', (p) => ({ hidden: p.hidden, text: p.textContent }));
  check(!dt.hidden && dt.text.startsWith(outText(turnsOut(newest))), `history: the opened request says "${dt.text}"`);
  await hp.evaluate(() => window.scrollTo(0, 0));
  await screenshot(hp, 'long-chat-history.png');

  for (const rec of pages) {
    const csp = await rec.page.evaluate(() => window.__cspViolations).catch(() => []);
    for (const v of csp) rec.problems.push('CSP violation: ' + v);
    check(rec.problems.length === 0, `page ${rec.name}: no console errors, page errors or CSP violations` +
      (rec.problems.length ? ':\n  ' + rec.problems.join('\n  ') : ''));
  }
  check(sameList([...new Set(api.map((r) => r.conversation))].sort(), [conv, conv2].sort()),
    'the history holds this test\'s two conversations only');
}

// LOAD requests of `tokens` tokens each on a connection of its own (no user key: they are not
// this page's history), all streaming when this resolves; close() drops them.
function loadServer(port, n, tokens) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    const streaming = new Set();
    const close = () => { try { ws.close(); } catch (e) { /* closed */ } };
    const timer = setTimeout(() => { close(); reject(new Error(`load: ${streaming.size} of ${n} requests streaming after 20 s`)); }, 20000);
    ws.on('error', (e) => { clearTimeout(timer); reject(e); });
    ws.on('message', (d) => {
      const m = parse(d);
      if (!m) return;
      if (m.type === 'hello') {
        for (let i = 0; i < n; i++) {
          ws.send(JSON.stringify({ type: 'generate', id: 'load' + i, prompt: 'Load ' + i, max_tokens: tokens, ignore_eos: true }));
        }
      } else if (m.type === 'token' && !streaming.has(m.id)) {
        streaming.add(m.id);
        if (streaming.size === n) {
          clearTimeout(timer);
          resolve({ close });
        }
      } else if (m.type === 'error' || m.type === 'done') {
        clearTimeout(timer);
        close();
        reject(new Error(`load: request ${m.id} ended before the others streamed: ${JSON.stringify(m)}`));
      }
    });
  });
}

function parse(payload) {
  try { return JSON.parse(typeof payload === 'string' ? payload : payload.toString()); } catch (e) { return null; }
}

lib.runMain(main, { what: 'the long chat test', minutes: 3, passed: 'long chat browser test' });
