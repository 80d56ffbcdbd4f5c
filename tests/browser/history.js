// history.js: the browser test's check of a context's history page (history.html) against its chat
// page's cards and the history API (called from tests/browser/chat.test.js's main).
'use strict';

const { ok, check, httpGet, watchPage, sameList, cardsOf, apiHistory, historyState, drawn, loadHistory } = require('./lib');

// A context's history page against its chat page's cards and the API: the same requests in the
// same order, nothing of `foreign` (other contexts' prompts), plots with one point per request
// that has the value, and a request's token timeline. Leaves the page with that request open.
async function checkHistory(chat, base, port, name, foreign) {
  const key = await chat.evaluate(() => localStorage.getItem('inflight.userKey'));
  check(/^[0-9a-f]{32}$/.test(key || ''), `${name}: user key ${String(key).slice(0, 6)}… in localStorage (32 hex characters)`);
  const cards = await cardsOf(chat);
  const done = cards.filter((c) => c.state === 'done');
  const page = watchPage(await chat.context().newPage(), base, name + ' history');
  const { h, tries } = await loadHistory(page, base, cards.length);
  const api = await apiHistory(port, key);
  check(h.rows.length >= done.length && h.rows.length === cards.length,
    `${name} history: ${h.rows.length} rows for ${cards.length} requests (${done.length} finished)` + (tries > 1 ? `, after ${tries} loads` : ''));
  check(sameList(h.rows.map((r) => r.id), api.map((r) => r.id)),
    `${name} history: the rows are the API's requests in its order (ids ${api.map((r) => r.id).join(', ')})`);
  const byClient = new Map(api.map((r) => [r.client_id, r]));
  for (const c of cards) {
    const r = byClient.get(c.id);
    if (!r) throw new Error(`${name} history: card ${c.id} (${JSON.stringify(c.prompt)}) is not in the history`);
    const row = h.rows.find((x) => x.id === r.id);
    if (row.prompt !== c.prompt || r.prompt !== c.prompt) {
      throw new Error(`${name} history: request ${r.id} (card ${c.id}) shows prompt ${JSON.stringify(row.prompt)}, the card has ${JSON.stringify(c.prompt)}`);
    }
    if (c.state === 'done' && c.finish !== 'cancelled' && r.completion !== c.completion) {
      throw new Error(`${name} history: request ${r.id}'s logged completion differs from card ${c.id}'s streamed text`);
    }
    if (c.state === 'done' && (r.finish_reason !== c.finish || row.finish !== c.finish)) {
      throw new Error(`${name} history: request ${r.id} finished ${r.finish_reason} (row: ${row.finish}), card ${c.id} says ${c.finish}`);
    }
  }
  ok(`${name} history: every card is a row with its prompt, finish reason and (when finished) completion`);
  const leaked = h.rows.filter((r) => foreign.includes(r.prompt));
  check(leaked.length === 0, `${name} history: none of the other contexts' ${foreign.length} prompts` +
    (leaked.length ? `: shows ${leaked.map((r) => JSON.stringify(r.prompt)).join(', ')}` : ''));
  const nTtft = api.filter((r) => typeof r.ttft_ms === 'number').length;
  const nTps = api.filter((r) => typeof r.tokens_per_s === 'number' && r.tokens_per_s > 0).length;
  await drawn(page, { ttft: nTtft, tps: nTps });
  h.points = (await historyState(page)).points;
  check(h.points.ttft === nTtft && h.points.tps === nTps,
    `${name} history: plots have ${h.points.ttft} TTFT and ${h.points.tps} tokens/s points for ${h.rows.length} rows ` +
    `(expected ${nTtft} and ${nTps}: the requests with a first token / with two tokens)`);

  // the hover tooltip on the newest point
  const hover = await page.evaluate(() => {
    const pl = window.inflightHistory.plots.ttft, q = pl.proj[pl.proj.length - 1];
    const r = pl.canvas.getBoundingClientRect();
    return q ? { x: r.left + q.px, y: r.top + q.py, id: q.pt.id } : null;
  });
  if (hover) {
    await page.mouse.move(hover.x, hover.y);
    const tip = await page.waitForFunction(() => {
      const t = document.querySelector('#fig-ttft .tip');
      return !t.hidden && t.textContent;
    }, null, { timeout: 3000 }).then((j) => j.jsonValue());
    check(tip.startsWith('#' + hover.id + ' ') && /TTFT/.test(tip), `${name} history: hovering a TTFT point shows "${tip.split('\n')[0]} · ${tip.split('\n')[1]}"`);
    await page.mouse.move(0, 0);
  }

  // a request's token timeline: the finished request with the most tokens
  const pick = api.filter((r) => r.finish_reason && r.finish_reason !== 'cancelled' && r.completion_tokens > 0)
    .sort((a, b) => b.completion_tokens - a.completion_tokens)[0];
  check(pick, `${name} history: a finished request to open (#${pick && pick.id}, ${pick && pick.completion_tokens} tokens)`);
  await page.click(`#rows tr[data-id="${pick.id}"]`);
  await page.waitForSelector(`#detail[data-state="ready"][data-id="${pick.id}"]`, { timeout: 10000 });
  await drawn(page, { timeline: pick.completion_tokens });
  const det = await httpGet(port, `/api/requests/${pick.id}?user=${key}`);
  check(det.status === 200, `GET /api/requests/${pick.id}: 200`);
  const d = JSON.parse(det.body).request;
  const offs = d.token_offsets_us;
  check(Array.isArray(offs) && offs.length === pick.completion_tokens && offs.every((v, i) => i === 0 || v >= offs[i - 1]),
    `request ${pick.id}: ${offs.length} token offsets, in order, ${offs[0]} .. ${offs[offs.length - 1]} us`);
  // the offset is stamped when the batcher hands the token over, right after it stamped the first
  // token: never before the TTFT, and after it by microseconds unless that thread was preempted
  // between the two (a busy machine: 10 ms seen); 50 ms catches a wrong base or unit
  const late = offs[0] / 1000 - d.ttft_ms;
  check(late >= -0.002 && late <= 50,
    `request ${pick.id}: the first token's offset ${(offs[0] / 1000).toFixed(3)} ms is its TTFT ${d.ttft_ms} ms (+${late.toFixed(3)} ms)`);
  const shown = await page.evaluate(() => ({
    points: Number(document.getElementById('plot-timeline').dataset.points),
    expanded: Array.from(document.querySelectorAll('#rows tr[aria-expanded="true"]'), (tr) => tr.dataset.id),
    prompt: document.getElementById('detail-prompt').textContent,
    completion: document.getElementById('detail-completion').textContent,
    params: document.getElementById('detail-params').textContent,
  }));
  check(shown.points === pick.completion_tokens && sameList(shown.expanded, [String(pick.id)]),
    `${name} history: row ${pick.id} opened, its timeline has ${shown.points} points for ${pick.completion_tokens} completion tokens`);
  check(shown.prompt === pick.prompt && shown.completion === pick.completion &&
      shown.params.includes(String(d.params.max_tokens)) && shown.params.includes(String(d.params.seed)),
  `${name} history: the opened request shows its whole text and parameters (max_tokens ${d.params.max_tokens}, seed ${d.params.seed})`);
  // the page scrolls the opened request into view (smoothly): let it settle, then go to the top
  await page.evaluate(() => new Promise((resolve) => {
    let last = -1, same = 0;
    const t0 = performance.now();
    const tick = () => {
      same = window.scrollY === last ? same + 1 : 0;
      last = window.scrollY;
      if (same >= 5 || performance.now() - t0 > 3000) resolve();
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }));
  await page.evaluate(() => window.scrollTo(0, 0));
  return { page, key, api };
}

module.exports = { checkHistory };
