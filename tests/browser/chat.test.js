#!/usr/bin/env node
// chat.test.js: the web page end to end in headless Chromium against the real `inflight serve`:
// makes a small random model, starts the server on a free port, and drives web/ from several
// browser contexts (each its own WebSocket session): two pages submit at the same moment under the
// iterative policy and must share a scheduler step (by the server's step frames; sent again if they
// ran one after the other); the demo button under static; an error frame
// shown in its card; page-side validation (against the hello's limits); the sampling panel built
// from the hello's parameter table (every parameter's field and default, the new controls under
// "More controls", one refused, all of them sent in a generate message); cancel; a phone-sized
// and a dark-mode page; and, against
// a second server started with --api-key, the page without the key (it says one is needed) and
// opened as /?api_key=KEY (it streams). The server
// logs to a SQLite file (--db): then each context's history page (history.html, same user key as
// its chat page) must list exactly that context's requests, with plots and a token timeline that
// match the history API. A conversation in its own context: Chat mode, then Continue twice on
// its card; each turn's generate frame carries every earlier turn as `messages` with one
// conversation id, turns 2 and 3 take their prefix from the server's prefix cache (cached_tokens,
// the step frame's [rid, 1, cached] and the batch view's tooltip), a reload restores the thread,
// New chat starts another, and the history page shows the three requests as one thread. Every
// page must be free of console errors, page errors, CSP violations and requests to other origins. Screenshots go to ARTIFACTS_DIR (with the server's output,
// server.log).
//
// This file is the entry (the flow, the API-key page); the harness (the command line, the server,
// the run with its teardown) is in lib.js, the history page check in history.js, the conversation
// check in conversation.js, finding and launching Chromium in browser.js.
//
// usage: node tests/browser/chat.test.js INFLIGHT_BINARY VOCAB_DIR ARTIFACTS_DIR
// Exit status: 0 passed, 1 failed, 77 skipped (no Chromium; $CHROMIUM overrides /usr/bin/chromium;
// under CI=true no Chromium is a failure).
'use strict';

const path = require('path');
const lib = require('./lib');
const {
  log, ok, check, cleanup, startServer, httpGet, waitReady, stopServer, pages, openPage, openParams, setPolicy,
  waitFinal, cardIds, clickAt, stepSpans, screenshot, sameList, cardsOf, historyState, loadHistory,
} = lib;
const { checkHistory } = require('./history');
const { checkConversation } = require('./conversation');
const { chromiumOrExit, launch } = require('./browser');

const { vocab: VOCAB } = lib.parseArgs('chat.test.js');
const chromium = chromiumOrExit(log);

// ------------------------------------------------------------------ the test

async function main() {
  const { srv, base, model } = await lib.startOnNewModel(VOCAB, 256, 'inflight-browser-');
  ok(`server listening on ${base}, /readyz 200`);
  const index = await httpGet(srv.port, '/');
  check(index.status === 200 && /<title>inflight/.test(index.body), 'GET / serves web/index.html');
  if (index.headers['content-security-policy']) log(`server CSP header: ${index.headers['content-security-policy']}`);

  const browser = await launch(chromium);
  cleanup.browser = browser;
  log(`browser: Chromium ${browser.version()}`);

  // -------- two contexts, same moment, iterative: they must share a step
  const sentA = [];   // page A's generate messages, as sent
  const A = await openPage(browser, base, 'A', {}, '', captureGenerates(sentA));
  const B = await openPage(browser, base, 'B');
  const sessions = await Promise.all([A, B].map((p) => p.evaluate(() => document.body.dataset.session)));
  check(sessions[0] && sessions[1] && sessions[0] !== sessions[1], `two sessions: ${sessions.join(', ')}`);
  const hello = await A.evaluate(() => window.inflight.hello);
  await checkPanelBuilt(A, hello);
  const summary = await A.$eval('#model-summary', (e) => e.innerText.replace(/\s+/g, ' ').trim());
  check(/2\s*layers/.test(summary) && /64\s*wide/.test(summary), `model summary shown: "${summary}"`);

  // A's request is the longer one (A_TOKENS), so that B's, sent at the same moment, arrives while
  // A's runs even if the two pages' sends are some way apart on a busy machine; if they still ran
  // one after the other (the server's step record says so), the pair is sent again
  const prompts = ['Programming in C++ is like', 'Programming in Assembly is like'];
  const A_TOKENS = 200, B_TOKENS = 48, ATTEMPTS = 3;
  for (const [i, p] of [A, B].entries()) {
    await setPolicy(p, 'iterative');
    await p.fill('#max-tokens', String(i ? B_TOKENS : A_TOKENS));
    await p.check('#ignore-eos');
  }
  let cA, cB, both, spans;
  for (let attempt = 1; ; attempt++) {
    for (const [i, p] of [A, B].entries()) await p.fill('#prompt', prompts[i]);
    const at = Date.now() + 400;
    const [idA, idB] = await Promise.all([clickAt(A, '#send', at), clickAt(B, '#send', at)]);
    check(idA && idB, `both pages sent at the same moment (cards ${idA}, ${idB})`);
    [cA, cB] = await Promise.all([waitFinal(A, idA), waitFinal(B, idB)]);
    for (const [n, c, want] of [['A', cA, A_TOKENS], ['B', cB, B_TOKENS]]) {
      check(c.state === 'done', `page ${n}: card ${c.id} is done (state ${c.state}${c.error ? ': ' + c.error : ''})`);
      check(c.model === 'iterative' && Number.isInteger(c.rid), `page ${n}: card has data-model iterative and data-rid ${c.rid}`);
      check(c.finish === 'length', `page ${n}: finish_reason ${c.finish} (${want} tokens, ignore_eos)`);
      check(c.completion.length > 0, `page ${n}: completion is ${c.completion.length} characters: ${JSON.stringify(c.completion.slice(0, 60))}…`);
      check(/\d/.test(c.ttft) && /tok\/s/.test(c.tps), `page ${n}: TTFT ${c.ttft}, ${c.tps}, tokens ${c.tokens}`);
    }
    both = await A.evaluate(([r1, r2]) => {
      const has = (s, r) => s.seqs.some((q) => q[0] === r);
      const s = window.inflightSteps.iterative.find((st) => has(st, r1) && has(st, r2));
      return s ? { step: s.step, seqs: s.seqs, running: s.running, prefill: s.prefill_tokens, decode: s.decode_tokens } : null;
    }, [cA.rid, cB.rid]);
    spans = await stepSpans(A, 'iterative', [cA.rid, cB.rid]);
    const sa = spans[cA.rid], sb = spans[cB.rid];
    const apart = sa.n > 0 && sb.n > 0 && (sa.last < sb.first || sb.last < sa.first);
    if (both || !apart || attempt === ATTEMPTS) break;
    log(`     attempt ${attempt}: rids ${cA.rid} and ${cB.rid} ran one after the other (steps ${sa.first}..${sa.last}, ` +
      `${sb.first}..${sb.last}): the two sends were too far apart to meet; again`);
  }
  const spanText = `rid ${cA.rid} in steps ${spans[cA.rid].first}..${spans[cA.rid].last} (${spans[cA.rid].n} steps); ` +
      `rid ${cB.rid} in steps ${spans[cB.rid].first}..${spans[cB.rid].last} (${spans[cB.rid].n} steps)`;
  check(both !== null, `an iterative step holds both pages' requests (rid ${cA.rid} from A, rid ${cB.rid} from B)` +
    (both ? '' : `: ${spanText}`));
  log(`     evidence: step ${both.step}: seqs ${JSON.stringify(both.seqs)} (${both.prefill} prefill + ${both.decode} decode tokens, ${both.running} running after it)`);
  log(`     ${spanText}`);
  const seenByB = await B.evaluate((n) => window.inflightSteps.iterative.some((s) => s.step === n), both.step);
  check(seenByB, `page B also recorded step ${both.step}`);
  await A.waitForFunction((n) => Number(document.getElementById('batch-iterative').dataset.lastStep) >= n,
    both.step, { timeout: 5000 });
  const drawn = await A.$eval('#batch-iterative', (f) => f.dataset.lastStep);
  check(Number(drawn) >= both.step, `the iterative batch view has drawn up to step ${drawn}`);

  // -------- an error frame lands in its card (prompt + max_tokens beyond the context)
  const maxTokens = hello.limits.max_tokens;
  await B.fill('#max-tokens', String(maxTokens));
  await B.fill('#prompt', 'This prompt and the longest completion do not fit in the context');
  await B.click('#send');
  const idErr = (await cardIds(B))[0];
  const cErr = await waitFinal(B, idErr, 20000);
  check(cErr.state === 'error' && cErr.errorCode === 'prompt_too_long' && cErr.error.length > 0,
    `server error shown in card ${idErr}: [${cErr.errorCode}] ${cErr.error}`);
  await B.fill('#max-tokens', '48');

  // -------- validation in the page: nothing is sent while a field is invalid
  const before = (await cardIds(A)).length;
  await A.fill('#temperature', '7');
  await A.fill('#prompt', 'not sent');
  await A.click('#send');
  const tErr = await A.$eval('#temperature-err', (e) => e.textContent);
  const invalid = await A.getAttribute('#temperature', 'aria-invalid');
  check(tErr.length > 0 && invalid === 'true' && (await cardIds(A)).length === before,
    `temperature 7 refused in the page: "${tErr}"`);
  await A.fill('#temperature', '0.8');
  await A.fill('#prompt', '');
  await A.click('#send');
  const pErr = await A.$eval('#prompt-err', (e) => e.textContent);
  check(pErr.length > 0 && (await cardIds(A)).length === before, `empty prompt refused in the page: "${pErr}"`);
  await A.fill('#prompt', 'x');   // typing clears the message
  await A.fill('#prompt', '');
  // the page's bounds are the hello's limits, not copies of them (this model's context is 256)
  const maxT = hello.limits.max_tokens;
  await A.fill('#max-tokens', String(maxT + 1));
  await A.fill('#prompt', 'not sent');
  await A.click('#send');
  const mErr = await A.$eval('#max-tokens-err', (e) => e.textContent);
  check(mErr.endsWith(` and ${maxT}.`) && (await cardIds(A)).length === before,
    `max tokens ${maxT + 1} refused in the page, with the hello's limit: "${mErr}"`);
  const stopHint = await A.$eval('#stop-hint', (e) => e.textContent);
  check(stopHint.includes(`, up to ${hello.limits.max_stop};`), `the stop strings' hint has the hello's limit: "${stopHint}"`);
  await A.fill('#max-tokens', String(B_TOKENS));
  await A.fill('#prompt', '');
  await checkMoreControls(A, hello, sentA);

  await screenshot(A, 'iterative-a.png');
  await screenshot(B, 'iterative-b.png');

  // -------- the demo button under static: the second request waits for the first to drain
  await setPolicy(A, 'static');
  await A.fill('#max-tokens', '160');
  const known = new Set(await cardIds(A));
  await A.click('#demo');
  await A.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, known.size + 2, { timeout: 10000 });
  const demoIds = (await cardIds(A)).filter((id) => !known.has(id)).reverse();   // oldest first
  const demo = [];
  for (const id of demoIds) demo.push(await waitFinal(A, id));
  check(demo.length === 2 && demo[0].prompt === prompts[0] && demo[1].prompt === prompts[1],
    `demo sent the two seed prompts (${demoIds.join(', ')})`);
  for (const c of demo) {
    check(c.state === 'done' && c.model === 'static' && c.completion.length > 0,
      `demo card ${c.id}: static rid ${c.rid}, ${c.finish}, ${c.completion.length} characters`);
  }
  const sspans = await stepSpans(A, 'static', [demo[0].rid, demo[1].rid]);
  const s0 = sspans[demo[0].rid], s1 = sspans[demo[1].rid];
  log(`     static: rid ${demo[0].rid} in steps ${s0.first}..${s0.last}; rid ${demo[1].rid} in steps ${s1.first}..${s1.last}`);
  // Static never lets a request join a running batch: the second one either waited for the first
  // one's batch to drain, or (a loaded machine: the first was not admitted within the 50 ms) both
  // were taken together as one batch from the first step.
  const together = s0.first === s1.first;
  check(s0.n > 0 && s1.n > 0 && (s1.first > s0.last || together),
    together
      ? `static: rids ${demo[0].rid} and ${demo[1].rid} were admitted together as one batch (step ${s0.first}); neither joined a running batch`
      : `static: rid ${demo[1].rid} started (step ${s1.first}) only after rid ${demo[0].rid}'s batch drained (step ${s0.last})`);
  const waited = await A.evaluate(([r0]) => window.inflightSteps.static.filter((s) => s.seqs.some((q) => q[0] === r0) && s.waiting > 0).length, [demo[0].rid]);
  log(`     static: ${waited} of rid ${demo[0].rid}'s ${s0.n} steps had a request waiting` +
      (waited ? ' (the demo\'s second one, admitted only when the batch drained)'
        : ' (the second request arrived after the first had finished)'));
  await screenshot(A, 'static-demo.png');

  // -------- cancel: a request waiting behind a static batch is cancelled from its card
  await A.fill('#max-tokens', '200');
  await A.fill('#prompt', 'A long one');
  await A.click('#send');
  const idLong = (await cardIds(A))[0];
  await A.fill('#prompt', 'Cancel me');
  await A.click('#send');
  const idCancel = (await cardIds(A))[0];
  // (the button is gone if the request finished first: then don't wait the default 30 s for it)
  await A.click(`.card[data-id="${idCancel}"] .card-cancel`, { timeout: 3000 }).catch(() => {});
  const cCancel = await waitFinal(A, idCancel);
  await waitFinal(A, idLong);
  check(cCancel.state === 'done' && (cCancel.finish === 'cancelled' || cCancel.finish === 'length'),
    `cancel button: card ${idCancel} ended ${cCancel.finish}` + (cCancel.finish === 'length' ? ' (it finished before the cancel arrived)' : ''));

  // -------- a phone
  const phone = await openPage(browser, base, 'phone', {
    viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
  });
  await setPolicy(phone, 'iterative');
  check(!(await phone.$eval('#params', (d) => d.open)), 'phone: the sampling parameters start collapsed');
  await openParams(phone);
  await phone.fill('#max-tokens', '40');
  await phone.click('#params > summary');   // collapse again: the screenshot shows the batches first
  const pk = new Set(await cardIds(phone));
  await phone.click('#demo');
  await phone.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, pk.size + 2, { timeout: 10000 });
  for (const id of (await cardIds(phone)).filter((x) => !pk.has(x))) {
    const c = await waitFinal(phone, id);
    check(c.state === 'done', `phone: demo card ${id} done (${c.completion.length} characters)`);
  }
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `phone: no horizontal scrolling (overflow ${overflow}px)`);
  await screenshot(phone, 'phone.png');

  // -------- dark mode
  const dark = await openPage(browser, base, 'dark', { colorScheme: 'dark' });
  const bg = await dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const rgb = (bg.match(/\d+/g) || []).map(Number);
  check(rgb.length >= 3 && rgb[0] + rgb[1] + rgb[2] < 150, `dark mode: page background ${bg}`);
  await setPolicy(dark, 'iterative');
  await dark.fill('#max-tokens', '64');
  await dark.fill('#prompt', 'The best thing about batching is');
  await dark.click('#send');
  const idDark = (await cardIds(dark))[0];
  await setPolicy(dark, 'static');
  const dk = new Set(await cardIds(dark));
  await dark.click('#demo');
  await dark.waitForFunction((n) => document.querySelectorAll('#cards .card').length >= n, dk.size + 2, { timeout: 10000 });
  for (const id of [idDark, ...(await cardIds(dark)).filter((x) => !dk.has(x))]) {
    const c = await waitFinal(dark, id);
    check(c.state === 'done', `dark: card ${id} (${c.model}) done`);
  }
  await screenshot(dark, 'dark.png');

  // -------- the history pages: each context sees its own requests, and only those
  await B.fill('#max-tokens', '24');
  await B.fill('#prompt', 'Page B keeps this prompt to itself');
  await B.click('#send');
  const idPrivate = (await cardIds(B))[0];
  check((await waitFinal(B, idPrivate)).state === 'done', `page B: card ${idPrivate} done (a prompt only B sent)`);
  const link = await A.$eval('#history-link', (a) => ({ href: a.href, visible: !!a.offsetParent }));
  check(link.visible && link.href === base + '/history.html', `the chat page links to ${link.href}`);
  const ctxPrompts = {};
  for (const [n, p] of [['A', A], ['B', B], ['phone', phone], ['dark', dark]]) {
    ctxPrompts[n] = new Set((await cardsOf(p)).map((c) => c.prompt));
  }
  const foreignTo = (n) => {
    const out = new Set();
    for (const [m, set] of Object.entries(ctxPrompts)) if (m !== n) for (const p of set) if (!ctxPrompts[n].has(p)) out.add(p);
    return [...out];
  };
  const hA = await checkHistory(A, base, srv.port, 'A', foreignTo('A'));
  await screenshot(hA.page, 'history.png');
  const hB = await checkHistory(B, base, srv.port, 'B', foreignTo('B'));
  check(hA.key !== hB.key && hB.api.some((r) => r.prompt === 'Page B keeps this prompt to itself') &&
    hB.api.some((r) => r.error_code === 'prompt_too_long'),
  'B history: its own prompt and its refused request (prompt_too_long) are there, under another key than A\'s');
  const refused = await hB.page.$$eval('#rows tr[data-kind="error"]', (trs) => trs.map((tr) => tr.dataset.errorCode));
  check(refused.includes('prompt_too_long'), `B history: the refused request is an error row (${refused.join(', ')})`);
  const hPhone = await checkHistory(phone, base, srv.port, 'phone', foreignTo('phone'));
  const pover = await hPhone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(pover <= 0, `phone history: no horizontal scrolling (overflow ${pover}px)`);
  await screenshot(hPhone.page, 'history-phone.png');
  const hDark = await checkHistory(dark, base, srv.port, 'dark', foreignTo('dark'));
  await screenshot(hDark.page, 'history-dark.png');

  // paging: two at a time with "Load older" gives the same list as the API
  const paged = hA.page;
  await loadHistory(paged, base, 2, '?limit=2');
  for (let i = 0; i < 50 && await paged.isVisible('#load-older'); i++) {
    const n = (await historyState(paged)).rows.length;
    await paged.click('#load-older');
    await paged.waitForFunction((k) => document.querySelectorAll('#rows tr[data-id]').length > k, n, { timeout: 10000 });
  }
  const all = (await historyState(paged)).rows.map((r) => r.id);
  check(sameList(all, hA.api.map((r) => r.id)), `A history, 2 a page: "Load older" ${Math.ceil(all.length / 2) - 1} times lists all ${all.length} requests in order`);

  await checkConversation(browser, base, srv.port);

  await checkApiKeyPage(browser, model);

  // -------- no console errors, page errors, CSP violations or foreign requests anywhere
  for (const rec of pages) {
    const csp = await rec.page.evaluate(() => window.__cspViolations).catch(() => []);
    for (const v of csp) rec.problems.push('CSP violation: ' + v);
    check(rec.problems.length === 0, `page ${rec.name}: no console errors, page errors or CSP violations` +
      (rec.problems.length ? ':\n  ' + rec.problems.join('\n  ') : ''));
  }
}

// ------------------------------------------------------------------ the parameter panel

// The parameters under "More controls" (off unless set), each with a value to send and what the
// generate message must then carry.
const MORE = {
  min_tokens: ['2', 2],
  min_p: ['0.05', 0.05],
  presence_penalty: ['0.5', 0.5],
  frequency_penalty: ['0.25', 0.25],
  repetition_penalty: ['1.2', 1.2],
  logit_bias: ['13: 5, 198:-100', { 13: 5, 198: -100 }],
  stop_token_ids: ['50256, 0', [50256, 0]],
};
const fieldId = (name) => name.replace(/_/g, '-');

// Records the generate messages a page sends (a beforeLoad of openPage).
function captureGenerates(into) {
  return (page) => page.on('websocket', (ws) => ws.on('framesent', (f) => {
    try {
      const m = JSON.parse(f.payload);
      if (m && m.type === 'generate') into.push(m);
    } catch (e) { /* not JSON: not ours */ }
  }));
}

// A fresh page's panel is the hello's table: every row a field (label, doc, default; basic
// ones filled with it), the rows of MORE (and only those) in a collapsed "More controls".
async function checkPanelBuilt(page, hello) {
  check(Array.isArray(hello.params) && Object.keys(MORE).every((n) => hello.params.some((r) => r.name === n)),
    `the hello's params list ${hello.params ? hello.params.length : 0} parameters, the new ones among them`);
  const shown = await page.evaluate((rows) => rows.map((r) => {
    const id = r.name.replace(/_/g, '-');
    const input = document.getElementById(id);
    const label = document.querySelector(`label[for="${id}"]`);
    return input && {
      label: label ? label.textContent : '', title: input.title, placeholder: input.placeholder, value: input.value,
      checked: input.checked, more: !!input.closest('#params-more'), err: !!document.getElementById(id + '-err'),
      described: (input.getAttribute('aria-describedby') || '').split(' '),
    };
  }), hello.params);
  const bad = [];
  hello.params.forEach((r, i) => {
    const f = shown[i], basic = !(r.name in MORE);
    if (!f) return bad.push(`${r.name}: no #${fieldId(r.name)}`);
    if (!f.label.startsWith(r.label) || f.title !== r.doc) bad.push(`${r.name}: label "${f.label}", title "${f.title}"`);
    if (!f.err || !f.described.includes(fieldId(r.name) + '-err')) bad.push(`${r.name}: no message element described by`);
    if (f.more === basic) bad.push(`${r.name}: ${f.more ? 'under' : 'not under'} More controls`);
    if (r.type === 'bool' && f.checked !== r.default) bad.push(`${r.name}: checked ${f.checked}, default ${r.default}`);
    if ((r.type === 'int' || r.type === 'number') &&
        (f.placeholder !== String(r.default) || (basic && f.value !== String(r.default)))) {
      bad.push(`${r.name}: placeholder "${f.placeholder}", value "${f.value}", default ${r.default}`);
    }
  });
  const closed = await page.$eval('#params-more', (d) => !d.open);
  check(bad.length === 0 && closed, `the panel is the hello's ${hello.params.length} parameters, ` +
    `${Object.keys(MORE).length} of them in a collapsed "More controls"` + (bad.length ? ':\n  ' + bad.join('\n  ') : ''));
}

// A bad value of a new control is refused with its row's bounds; every new control set is sent
// in the generate message as typed (none of them before), and the request completes.
async function checkMoreControls(page, hello, sent) {
  const before = (await cardIds(page)).length;
  check(sent.length > 0 && sent.every((m) => Object.keys(MORE).every((k) => !(k in m))),
    `page A's ${sent.length} earlier generate messages carry none of the controls left empty`);
  await page.click('#params-more > summary');
  const pp = hello.params.find((r) => r.name === 'presence_penalty');
  await page.fill('#presence-penalty', '3');
  await page.fill('#logit-bias', '13:500');
  await page.fill('#prompt', 'not sent');
  await page.click('#send');
  const msgs = await page.evaluate(() => ['presence-penalty', 'logit-bias'].map((id) =>
    [document.getElementById(id + '-err').textContent, document.getElementById(id).getAttribute('aria-invalid')]));
  check(msgs[0][0] === `${pp.label} must be between ${pp.min} and ${pp.max}.` && msgs[0][1] === 'true' &&
    / between -100 and 100\.$/.test(msgs[1][0]) && msgs[1][1] === 'true' && (await cardIds(page)).length === before,
  `presence penalty 3 and logit bias 13:500 refused in the page: "${msgs[0][0]}", "${msgs[1][0]}"`);
  await page.fill('#max-tokens', '16');
  for (const [name, [typed]] of Object.entries(MORE)) await page.fill('#' + fieldId(name), typed);
  await page.fill('#prompt', 'Every control at once');
  await page.click('#send');
  const id = (await cardIds(page))[0];
  const c = await waitFinal(page, id);
  const m = sent[sent.length - 1];
  const wrong = Object.entries(MORE).filter(([k, [, want]]) => JSON.stringify(m[k]) !== JSON.stringify(want))
    .map(([k, [, want]]) => `${k}: ${JSON.stringify(m[k])}, not ${JSON.stringify(want)}`);
  check(m.prompt === 'Every control at once' && wrong.length === 0,
    `the generate message carries every new control as typed` + (wrong.length ? ':\n  ' + wrong.join('\n  ') : ''));
  check(c.state === 'done', `card ${id} with every new control set: ${c.state} (${c.finish}, ${c.tokens})`);
  for (const name of Object.keys(MORE)) await page.fill('#' + fieldId(name), '');
  await page.fill('#max-tokens', '48');
}

// A server started with --api-key: the page opened without the key says it needs one (the server
// closed /ws with 1008); opened as /?api_key=KEY it connects and a prompt streams to the end.
async function checkApiKeyPage(browser, model) {
  const KEY = 'browser+key/0123&x';
  const mainServer = cleanup.server;
  const srv = await startServer(model, path.join(cleanup.tmp, 'keyed.db'), ['--api-key', KEY], 'server-keyed.log');
  cleanup.server = mainServer;
  try {
    await waitReady(srv);
    const base = `http://127.0.0.1:${srv.port}`;
    const ctx = await browser.newContext();
    const bare = await ctx.newPage();
    await bare.goto(base + '/');
    await bare.waitForFunction(() => !document.getElementById('banner').hidden &&
      /needs an API key/.test(document.getElementById('banner-text').textContent), null, { timeout: 20000 });
    const said = await bare.$eval('#banner-text', (e) => e.textContent);
    check(/api_key=KEY/.test(said) && (await bare.$eval('body', (b) => b.dataset.conn)) !== 'open',
      `keyed server, page without the key: not connected, it says "${said}"`);
    await ctx.close();
    const page = await openPage(browser, base, 'keyed', {}, '?api_key=' + encodeURIComponent(KEY));
    await setPolicy(page, 'iterative');
    await page.fill('#max-tokens', '12');
    await page.check('#ignore-eos'); // sampled from a random model: end-of-text would end it early
    await page.fill('#prompt', 'A key in the address');
    await page.click('#send');
    const id = (await cardIds(page))[0];
    const c = await waitFinal(page, id);
    check(c.state === 'done' && c.finish === 'length', `keyed server, page as /?api_key=...: card ${id} ${c.state} (${c.finish}, ${c.tokens})`);
    await screenshot(page, 'api-key.png');
  } finally {
    await stopServer(srv);
  }
}

lib.runMain(main, { what: 'the browser test', minutes: 5, passed: 'browser test' });
