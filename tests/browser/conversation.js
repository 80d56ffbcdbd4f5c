// conversation.js: the browser test's conversation check (called from tests/browser/chat.test.js's
// main): Chat mode and Continue on a card, the messages each turn sends, the prefix cache's cached
// tokens as the page shows them, a reload, New chat, and the thread on the history page.
'use strict';

const { log, check, sleep, httpGet, openPage, watchPage, setPolicy, cardIds, screenshot, sameList, loadHistory } = require('./lib');

// The first turn is long enough (~40 tokens with the template) to fill two 16-token KV blocks, so
// the next turns find it in the prefix cache.
const TURNS = [
  'The prefix cache keeps the key and value blocks of every prompt it has computed, so that a ' +
    'conversation which comes back for another turn does not have to read its beginning again.',
  'Tell me more about the blocks that it keeps.',
  'And what happens to them when the pool is full?',
];
const KV_BLOCK = 16;

function parseFrame(payload) {
  try { return JSON.parse(typeof payload === 'string' ? payload : payload.toString()); } catch (e) { return null; }
}

async function threadOf(page, id) {
  return page.$eval(`.card[data-id="${id}"]`, (c) => ({
    id: c.dataset.id, conv: c.dataset.conversation, state: c.dataset.state, mode: c.dataset.mode,
    turns: Number(c.dataset.turns), restored: c.dataset.restored === '1',
    formOpen: !c.querySelector('.turn-form').hidden, canContinue: !c.querySelector('.card-continue').hidden,
    list: Array.from(c.querySelectorAll('.thread > .turn'), (t) => ({
      n: Number(t.dataset.turn), kind: t.dataset.kind, state: t.dataset.state, req: t.dataset.req,
      user: t.querySelector('.prompt').textContent, reply: t.querySelector('.completion').textContent,
      usage: t.querySelector('.turn-usage').textContent,
      cached: t.dataset.cached == null ? null : Number(t.dataset.cached),
      prompt: t.dataset.promptTokens == null ? null : Number(t.dataset.promptTokens),
    })),
  }));
}

// Waits for the card's turn n to end (done or error) and returns the card's thread.
async function waitTurn(page, id, n) {
  await page.waitForFunction(([cid, k]) => {
    const t = document.querySelector(`.card[data-id="${cid}"] .thread > .turn[data-turn="${k}"]`);
    return t && (t.dataset.state === 'done' || t.dataset.state === 'error');
  }, [id, n], { timeout: 60000 });
  return threadOf(page, id);
}

async function checkConversation(browser, base, port) {
  const sent = [], got = [];
  const page = await openPage(browser, base, 'conversation', {}, '', (p) => p.on('websocket', (ws) => {
    ws.on('framesent', (f) => {
      const m = parseFrame(f.payload);
      if (m && m.type === 'generate') sent.push(m);
    });
    ws.on('framereceived', (f) => {
      const m = parseFrame(f.payload);
      if (m && (m.type === 'started' || m.type === 'done' || m.type === 'error')) got.push(m);
    });
  }));
  const frame = (type, id) => got.find((m) => m.type === type && m.id === id);
  await setPolicy(page, 'iterative');
  await page.click('label[for="mode-chat"]');
  check(await page.isChecked('#mode-chat'), 'conversation: the composer is in Chat mode');
  await page.fill('#max-tokens', '16');
  await page.check('#ignore-eos');

  // -------- send, continue, continue
  await page.fill('#prompt', TURNS[0]);
  await page.click('#send');
  const id = (await cardIds(page))[0];
  let th = await waitTurn(page, id, 1);
  check(th.list[0].state === 'done' && th.canContinue, `conversation: card ${id} turn 1 done, Continue offered`);
  for (let n = 2; n <= 3; n++) {
    await page.click(`.card[data-id="${id}"] .card-continue`);
    const focused = await page.evaluate((cid) => document.activeElement === document.querySelector(`.card[data-id="${cid}"] .turn-input`), id);
    check(focused, `conversation: Continue opened card ${id}'s input for turn ${n}, focused`);
    await page.fill(`.card[data-id="${id}"] .turn-input`, TURNS[n - 1]);
    if (n === 2) await page.press(`.card[data-id="${id}"] .turn-input`, 'Enter');
    else await page.click(`.card[data-id="${id}"] .turn-send`);
    th = await waitTurn(page, id, n);
    check(th.list[n - 1].state === 'done', `conversation: turn ${n} done (${th.list[n - 1].reply.length} characters)`);
  }
  check(th.turns === 3 && th.list.length === 3 && th.list.every((t, i) => t.n === i + 1 && t.kind === 'chat' && t.user === TURNS[i]),
    `conversation: the thread shows 3 turns, each its user text and reply (${th.list.map((t) => t.req).join(', ')})`);
  check(/^[A-Za-z0-9_-]{1,64}$/.test(th.conv), `conversation: id ${th.conv} (the server's charset)`);

  // -------- each generate carried every earlier turn, with the same conversation id
  check(sent.length === 3, `conversation: 3 generate frames sent (${sent.length})`);
  for (const [k, m] of sent.entries()) {
    const want = [];
    for (let i = 0; i < k; i++) want.push({ role: 'user', content: th.list[i].user }, { role: 'assistant', content: th.list[i].reply });
    want.push({ role: 'user', content: TURNS[k] });
    check(m.prompt === undefined && JSON.stringify(m.messages) === JSON.stringify(want) &&
      m.conversation === th.conv && m.id === th.list[k].req && m.model === 'iterative',
    `conversation: turn ${k + 1}'s generate (${m.id}) has messages = ${want.length} (the earlier turns as shown, replies as received, then the new one), conversation ${m.conversation}`);
  }

  // -------- cached tokens: started, done, the turn's usage line, the step frames, the batch view
  const usage = [];
  for (const t of th.list) {
    const st = frame('started', t.req), dn = frame('done', t.req);
    check(st && dn && dn.usage && typeof dn.usage.cached_tokens === 'number' && st.cached_tokens === dn.usage.cached_tokens,
      `conversation: turn ${t.n}: started and done say ${dn && dn.usage && dn.usage.cached_tokens} of ${dn && dn.usage && dn.usage.prompt_tokens} prompt tokens cached`);
    const u = dn.usage;
    usage.push({ rid: st.rid, prompt: u.prompt_tokens, cached: u.cached_tokens });
    check(t.cached === u.cached_tokens && t.prompt === u.prompt_tokens &&
      t.usage.startsWith(`${u.prompt_tokens} prompt tokens, ${u.cached_tokens} cached`),
    `conversation: turn ${t.n} shows "${t.usage}"`);
  }
  for (const k of [1, 2]) {
    const u = usage[k];
    check(u.cached > 0 && u.cached % KV_BLOCK === 0 && u.cached < u.prompt,
      `conversation: turn ${k + 1} took ${u.cached} of its ${u.prompt} prompt tokens from the prefix cache (whole ${KV_BLOCK}-token blocks, the last token computed)`);
  }
  log(`     turn 1: ${usage[0].cached} of ${usage[0].prompt} cached (a prompt nobody sent before)`);
  const runs = await page.evaluate((rids) => {
    const out = {};
    for (const r of rids) out[r] = [];
    for (const s of window.inflightSteps.iterative) {
      for (const q of s.seqs) if (out[q[0]] && q.length > 2) out[q[0]].push({ step: s.step, seq: q });
    }
    return out;
  }, usage.map((u) => u.rid));
  for (const k of [1, 2]) {
    const r = runs[usage[k].rid];
    check(r.length === 1 && r[0].seq[1] === 1 && r[0].seq[2] === usage[k].cached,
      `conversation: turn ${k + 1} (rid ${usage[k].rid}): one step frame entry ${JSON.stringify(r.map((x) => x.seq))} in step ${r[0] && r[0].step}, its cached prefix`);
  }
  // hover once the view has drawn the last step (the batcher is idle: the columns stay put)
  const last = runs[usage[2].rid][0];
  await page.waitForFunction(([st, rid]) => {
    const all = window.inflightSteps.iterative, v = window.inflight.views.iterative;
    return Number(v.fig.dataset.lastStep) === all[all.length - 1].step && v.locate(st, rid);
  }, [last.step, usage[2].rid], { timeout: 5000 });
  await sleep(100);
  const at = await page.evaluate(([st, rid]) => {
    const v = window.inflight.views.iterative, p = v.locate(st, rid), r = v.canvas.getBoundingClientRect();
    return { x: r.left + p.x, y: r.top + p.y, cells: Number(v.fig.dataset.cachedCells) };
  }, [last.step, usage[2].rid]);
  await page.mouse.move(at.x, at.y);
  const tip = await page.waitForFunction(() => {
    const t = document.querySelector('#batch-iterative .tip');
    return !t.hidden && t.textContent;
  }, null, { timeout: 3000 }).then((j) => j.jsonValue());
  check(at.cells >= 2 && tip.includes(`${usage[2].cached} prompt tokens from the prefix cache`),
    `conversation: the batch view marked ${at.cells} cached cells; hovering turn 3's says "${tip.split('\n').slice(-2).join(' / ')}"`);
  await page.mouse.move(0, 0);
  await screenshot(page, 'conversation.png');

  // -------- a reload restores the thread (not the live parts)
  await page.reload();
  await page.waitForSelector('body[data-conn="open"]', { timeout: 20000 });
  const rid = await page.$eval(`.card[data-conversation="${th.conv}"]`, (c) => c.dataset.id);
  const back = await threadOf(page, rid);
  check(back.restored && back.state === 'done' && back.turns === 3 && back.canContinue &&
    back.list.every((t, i) => t.user === th.list[i].user && t.reply === th.list[i].reply && t.usage === th.list[i].usage),
  `reload: card ${rid} restored conversation ${th.conv} with its 3 turns, their replies and usage`);

  // -------- New chat: a fresh card, a fresh conversation
  const before = (await cardIds(page)).length;
  await page.click('#new-chat');
  const nid = (await cardIds(page))[0];
  const fresh = await threadOf(page, nid);
  check(fresh.state === 'new' && fresh.turns === 0 && fresh.formOpen && fresh.conv !== th.conv && (await cardIds(page)).length === before + 1,
    `New chat: card ${nid}, no turns, its input open, conversation ${fresh.conv}`);
  await page.fill(`.card[data-id="${nid}"] .turn-input`, 'A fresh start.');
  await page.click(`.card[data-id="${nid}"] .turn-send`);
  const one = await waitTurn(page, nid, 1);
  const m4 = sent[sent.length - 1];
  check(one.list[0].state === 'done' && sent.length === 4 && m4.conversation === fresh.conv &&
    JSON.stringify(m4.messages) === JSON.stringify([{ role: 'user', content: 'A fresh start.' }]),
  `New chat: its first turn went alone (messages of 1) under conversation ${m4.conversation}`);
  check((await threadOf(page, rid)).turns === 3, `New chat: card ${rid} still holds its 3 turns`);

  // -------- the history page: the three requests as one thread
  const key = await page.evaluate(() => localStorage.getItem('inflight.userKey'));
  const hp = watchPage(await page.context().newPage(), base, 'conversation history');
  await loadHistory(hp, base, 4);
  const api = await httpGet(port, `/api/history?user=${key}&conversation=${th.conv}`);
  check(api.status === 200, `GET /api/history?conversation=${th.conv}: 200`);
  const apiReqs = JSON.parse(api.body).requests;
  check(apiReqs.length === 3 && sameList(apiReqs.map((r) => r.client_id).reverse(), th.list.map((t) => t.req)) &&
    apiReqs.every((r) => r.conversation === th.conv),
  `GET /api/history?conversation=: only its 3 requests (${apiReqs.map((r) => r.client_id).join(', ')}), newest first`);
  const shown = async () => hp.evaluate((conv) => ({
    heads: Array.from(document.querySelectorAll('#rows tr.thread-head'), (tr) => ({ conv: tr.dataset.conversation, turns: Number(tr.dataset.turns) })),
    rows: Array.from(document.querySelectorAll(`#rows tr[data-id][data-conversation="${conv}"]`), (tr) => ({
      id: Number(tr.dataset.id), turn: Number(tr.dataset.turn), cached: tr.dataset.cached == null ? null : Number(tr.dataset.cached),
      prompt: tr.querySelector('.cell-prompt').textContent, prev: tr.previousElementSibling && tr.previousElementSibling.className,
    })),
    all: document.querySelectorAll('#rows tr[data-id]').length,
  }), th.conv);
  const h = await shown();
  const ids = apiReqs.map((r) => r.id).reverse();
  check(h.heads.length === 1 && h.heads[0].conv === th.conv && h.heads[0].turns === 3,
    `history: one thread head, conversation ${th.conv}, 3 turns (the new chat's lone request is a plain row)`);
  check(h.rows.length === 3 && sameList(h.rows.map((r) => r.id), ids) && sameList(h.rows.map((r) => r.turn), [1, 2, 3]) &&
    h.rows[0].prev === 'thread-head' && h.rows.every((r, i) => r.prompt === TURNS[i] && r.cached === usage[i].cached),
  `history: the thread's rows are requests ${ids.join(', ')} in turn order, each its user turn and cached tokens (${h.rows.map((r) => r.cached).join(', ')})`);
  await screenshot(hp, 'conversation-history.png');
  await hp.goto(base + '/history.html?conversation=' + th.conv);
  await hp.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 10000 });
  const only = await shown();
  check(only.all === 3 && sameList(only.rows.map((r) => r.id), ids), `history.html?conversation=${th.conv}: only its 3 requests`);
}

module.exports = { checkConversation };
