// batchview.js: one batcher's live timeline, drawn on a canvas from the server's `step` frames: one
// column per scheduler step (newest on the right), one lane per request, prompt (prefill) steps
// lighter than decode steps, this page's own requests in their card's colour (and a dotted trail
// while they wait in the queue), other sessions' requests in grey, the queue length underneath.
// A request's first prefill run after a cached prefix (a `seqs` entry [rid, 1, cached]) is
// hatched: its cached share of the prompt when the prompt's length is known (this page's own
// requests), else the whole cell; the tooltip says how many tokens came from the prefix cache.
// app.js creates one per policy (this module's export BatchView). For tests: the figure's
// data-cached-cells (cached cells received so far) and view.locate(step, rid) (a cell's centre).

import { CanvasBox, themeOf } from './canvas.js';

const MAX_COLS = 2000;   // columns kept (more than a wide screen shows at the smallest zoom)
const QUEUE_H = 18;      // the queue-length strip
const AXIS_H = 15;       // step numbers
const IDLE_MS = 250;     // a pause this long between steps is marked with a dashed line
const FRAME_MS = 33;     // at most ~30 redraws a second
const CELL = 4;          // a column's cells, flat: rid, lane, kind, cached prefix tokens
const KIND_DECODE = 0, KIND_PREFILL = 1, KIND_WAITING = 2;
const KIND_NAMES = ['decode', 'prefill', 'waiting in the queue'];
// the colours and font when the figure's --bv-* properties (style.css) are not set
const THEME_DEFAULTS = { bg: '#fff', lane: 'rgba(0,0,0,.03)', grid: 'rgba(0,0,0,.08)', text: '#667',
  other: '#9aa0aa', queue: '#e8a33d', idle: 'rgba(0,0,0,.25)', font: '11px system-ui, sans-serif' };

function niceTick(minSteps) {
  for (const t of [5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000]) {
    if (t >= minSteps) return t;
  }
  return 10000;
}

function fmtMs(ms) {
  if (!(ms >= 0)) return '–';
  if (ms < 10) return ms.toFixed(2) + ' ms';
  if (ms < 1000) return ms.toFixed(1) + ' ms';
  return (ms / 1000).toFixed(2) + ' s';
}

export class BatchView {
  // figure: the .batch element (holds a canvas, a .tip and [data-stat] cells)
  // model: "iterative" | "static"; label: shown in the canvas's accessible name
  // own(rid) -> {id, color, promptTokens} for this page's requests, else null
  constructor(figure, model, label, own) {
    this.fig = figure;
    this.model = model;
    this.label = label;
    this.own = own;
    this.box = new CanvasBox(figure.querySelector('canvas'), () => this.schedule(true));
    this.canvas = this.box.canvas;
    this.tip = figure.querySelector('.tip');
    this.stats = {};
    for (const el of figure.querySelectorAll('[data-stat]')) this.stats[el.dataset.stat] = el;
    this.kvbar = figure.querySelector('.kvbar > span');
    this.zoom = 'fit';          // 'fit' or a column width in CSS pixels
    this.paused = false;
    this.theme = null;
    this.raf = 0;
    this.timer = 0;
    this.lastRender = 0;
    this.layout = null;
    this.lastLabelAt = 0;
    this.hoverPt = null;
    this.reset();
    this.canvas.addEventListener('pointermove', (e) => this.onPointer(e));
    this.canvas.addEventListener('pointerdown', (e) => this.onPointer(e));
    this.canvas.addEventListener('pointerleave', () => this.hideTip());
    this.box.fit();
  }

  // Forget everything (a new connection: rids and steps start over for this page).
  reset() {
    this.cols = [];
    this.serial = 0;
    this.lanes = [];            // lane -> {rid, last: serial of the last column it was in}
    this.laneOf = new Map();    // rid -> lane
    this.last = null;           // last step frame
    this.dropped = 0;
    this.cachedCells = 0;
    this.fig.dataset.cachedCells = '0';
    this.hideTip();
    this.schedule();
  }

  // 'fit': the widest columns that show the whole current busy period (since the last idle
  // pause), at least 1 px; else a fixed width in CSS pixels.
  setZoom(z) {
    this.zoom = z === 'fit' ? 'fit' : Math.max(1, Number(z) || 6);
    this.schedule(true);
  }

  columnWidth() {
    if (this.zoom !== 'fit') return this.zoom;
    let start = this.cols.length - 1;
    while (start > 0 && !this.cols[start].idle) start--;
    const n = Math.max(24, this.cols.length - start);
    for (const w of [12, 10, 8, 6, 5, 4, 3, 2]) if (n * w <= this.box.width) return w;
    return 1;
  }

  setPaused(p) {
    this.paused = p;
    if (!p) this.schedule();
  }

  // The theme's colours, from CSS custom properties on the figure.
  readTheme() {
    this.theme = themeOf(this.fig, '--bv-', THEME_DEFAULTS);
    this.schedule();
  }

  // The lane a rid occupies in column `serial`: its own if it has one, else a free one (one left
  // empty for at least a column if possible, so consecutive requests in a lane stay apart).
  laneFor(rid, serial) {
    const lane = this.laneOf.get(rid);
    if (lane !== undefined && this.lanes[lane] && this.lanes[lane].rid === rid) {
      this.lanes[lane].last = serial;
      return lane;
    }
    let pick = -1;
    for (let i = 0; i < this.lanes.length; i++) {
      if (this.lanes[i].last < serial - 1) { pick = i; break; }
    }
    if (pick < 0) {
      for (let i = 0; i < this.lanes.length; i++) {
        if (this.lanes[i].last < serial) { pick = i; break; }
      }
    }
    if (pick < 0) {
      pick = this.lanes.length;
      this.lanes.push({ rid, last: serial });
    } else {
      this.laneOf.delete(this.lanes[pick].rid);
      this.lanes[pick] = { rid, last: serial };
    }
    this.laneOf.set(rid, pick);
    return pick;
  }

  // One step frame; waitingRids: this page's requests of this batcher still in the queue.
  push(f, waitingRids) {
    const serial = this.serial++;
    const cells = [];   // flat: rid, lane, kind, cached (CELL a cell)
    const seen = new Set();
    if (Array.isArray(f.seqs)) {
      for (const s of f.seqs) {
        const rid = s[0];
        const cached = s[1] && s[2] > 0 ? s[2] : 0;
        seen.add(rid);
        cells.push(rid, this.laneFor(rid, serial), s[1] ? KIND_PREFILL : KIND_DECODE, cached);
        if (cached) this.cachedCells++;
      }
    }
    for (const rid of waitingRids) {
      if (!seen.has(rid)) cells.push(rid, this.laneFor(rid, serial), KIND_WAITING, 0);
    }
    this.fig.dataset.cachedCells = String(this.cachedCells);
    const prev = this.cols.length ? this.cols[this.cols.length - 1] : null;
    const idle = prev ? (f.t_ms - (prev.t + prev.ms)) : 0;
    this.cols.push({
      step: f.step, t: f.t_ms, ms: f.ms, pre: f.prefill_tokens, dec: f.decode_tokens,
      running: f.running, waiting: f.waiting, cells, idle: idle > IDLE_MS ? idle : 0,
    });
    if (this.cols.length > MAX_COLS * 1.25) this.cols.splice(0, this.cols.length - MAX_COLS);
    this.dropped += f.dropped || 0;
    this.last = f;
    this.schedule();
  }

  // Redraws at most every FRAME_MS: a timeline needs no more, and the server may share the CPU.
  schedule(force) {
    if (this.raf || this.timer || (this.paused && !force)) return;
    const go = () => {
      this.timer = 0;
      this.raf = requestAnimationFrame(() => {
        this.raf = 0;
        this.lastRender = performance.now();
        this.render();
      });
    };
    const wait = this.lastRender + FRAME_MS - performance.now();
    if (wait > 0) this.timer = setTimeout(go, wait);
    else go();
  }

  render() {
    if (!this.theme) this.readTheme();
    this.renderStats();
    this.draw();
    if (this.hoverPt) this.showTip(this.hoverPt.x, this.hoverPt.y);
  }

  renderStats() {
    const f = this.last, s = this.stats;
    if (!f) {
      s.running.textContent = '0';
      s.waiting.textContent = '0';
      s.kv.textContent = '–';
      s.step.textContent = '–';
      s.ms.textContent = '–';
      if (this.kvbar) this.kvbar.style.setProperty('--frac', '0');
      this.canvas.setAttribute('aria-label', this.label + ' batcher: no steps yet');
      return;
    }
    s.running.textContent = String(f.running);
    s.waiting.textContent = String(f.waiting);
    s.kv.textContent = f.kv_used + ' / ' + f.kv_total;
    s.step.textContent = String(f.step) + (this.dropped ? ' (' + this.dropped + ' not shown)' : '');
    s.ms.textContent = fmtMs(f.ms);
    if (this.kvbar) {
      const frac = f.kv_total > 0 ? Math.min(1, f.kv_used / f.kv_total) : 0;
      this.kvbar.style.setProperty('--frac', frac.toFixed(4));
    }
    this.fig.dataset.lastStep = String(f.step);
    this.fig.dataset.running = String(f.running);
    this.fig.dataset.waiting = String(f.waiting);
    const now = performance.now();
    if (now - this.lastLabelAt > 1000) {
      this.lastLabelAt = now;
      this.canvas.setAttribute('aria-label', `${this.label} batcher: step ${f.step}, ${f.running} running, ` +
        `${f.waiting} waiting, ${f.kv_used} of ${f.kv_total} KV blocks in use`);
    }
  }

  draw() {
    const ctx = this.box.clear(), th = this.theme, W = this.box.width, H = this.box.height;
    const colW = this.columnWidth();
    const laneTop = 4;
    const laneArea = Math.max(8, H - QUEUE_H - AXIS_H - laneTop - 2);
    const nVis = Math.min(this.cols.length, Math.floor(W / colW));
    const first = this.cols.length - nVis;
    let maxLane = -1, maxWait = 4;
    for (let i = first; i < this.cols.length; i++) {
      const c = this.cols[i];
      for (let j = 1; j < c.cells.length; j += CELL) if (c.cells[j] > maxLane) maxLane = c.cells[j];
      if (c.waiting > maxWait) maxWait = c.waiting;
    }
    const rows = Math.max(6, maxLane + 1);
    const rowH = Math.min(18, laneArea / rows);
    const queueTop = laneTop + laneArea + 2;
    this.layout = { first, nVis, colW, rowH, laneTop, rows, queueTop };

    // lanes: alternate bands
    ctx.fillStyle = th.lane;
    for (let r = 0; r < rows; r += 2) ctx.fillRect(0, laneTop + r * rowH, W, rowH);
    ctx.fillStyle = th.grid;
    ctx.fillRect(0, queueTop - 1, W, 1);

    ctx.font = th.font;
    ctx.textBaseline = 'middle';
    if (nVis === 0) {
      ctx.fillStyle = th.text;
      ctx.textAlign = 'center';
      ctx.fillText('No steps yet: send a prompt', W / 2, laneTop + laneArea / 2);
      return;
    }

    const tick = niceTick(Math.ceil(64 / colW));
    const gap = colW >= 5 ? 1 : 0;
    const cw = colW - gap;
    const vpad = rowH >= 7 ? 1.5 : (rowH >= 4 ? 0.5 : 0);
    ctx.textAlign = 'center';
    for (let i = 0; i < nVis; i++) {
      const c = this.cols[first + i];
      const x = W - (nVis - i) * colW;
      if (c.step % tick === 0) {
        ctx.fillStyle = th.grid;
        ctx.fillRect(x, laneTop, 1, laneArea);
        ctx.fillStyle = th.text;
        if (x > 14 && x < W - 14) ctx.fillText(String(c.step), x, H - AXIS_H / 2);
      }
      if (c.idle && i > 0) {
        ctx.fillStyle = th.idle;
        for (let y = laneTop; y < queueTop + QUEUE_H; y += 4) ctx.fillRect(x, y, 1, 2);
      }
      const cells = c.cells;
      for (let j = 0; j < cells.length; j += CELL) {
        const rid = cells[j], lane = cells[j + 1], kind = cells[j + 2], cached = cells[j + 3];
        const o = this.own(rid);
        const color = o ? o.color : th.other;
        const y = laneTop + lane * rowH + vpad, h = rowH - 2 * vpad;
        ctx.fillStyle = color;
        if (kind === KIND_DECODE) {
          ctx.globalAlpha = 1;
          ctx.fillRect(x, y, cw, h);
        } else if (kind === KIND_PREFILL) {
          ctx.globalAlpha = 0.35;
          ctx.fillRect(x, y, cw, h);
          ctx.globalAlpha = 1;
          if (cw >= 4 && h >= 5) {
            ctx.strokeStyle = color;
            ctx.lineWidth = 1;
            ctx.strokeRect(x + 0.5, y + 0.5, cw - 1, h - 1);
          } else {
            ctx.fillRect(x, y + h - 1, cw, 1);
          }
          if (cached) this.hatch(x, y, cw, h, color, cached, o && o.promptTokens);
        } else {
          ctx.globalAlpha = 0.7;
          const dh = Math.max(1, Math.min(2, h / 3));
          ctx.fillRect(x, y + (h - dh) / 2, Math.max(1, cw * 0.6), dh);
        }
        ctx.globalAlpha = 1;
      }
      if (c.waiting > 0) {
        const bh = Math.max(2, (QUEUE_H - 4) * Math.min(1, c.waiting / maxWait));
        ctx.fillStyle = th.queue;
        ctx.fillRect(x, queueTop + QUEUE_H - 2 - bh, cw, bh);
      }
    }
  }

  // The cached share of a prefill cell: diagonal stripes over the top cached/prompt of its
  // height (all of it when the prompt's length is unknown), and a solid edge on its left.
  hatch(x, y, w, h, color, cached, promptTokens) {
    const ctx = this.box.ctx;
    const frac = promptTokens > 0 ? Math.min(1, cached / promptTokens) : 1;
    const hh = Math.max(1, h * frac);
    ctx.save();
    ctx.beginPath();
    ctx.rect(x, y, w, hh);
    ctx.clip();
    ctx.fillStyle = color;
    ctx.globalAlpha = 0.3;
    ctx.fillRect(x, y, w, hh);
    ctx.globalAlpha = 1;
    ctx.strokeStyle = color;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let d = -hh; d < w; d += 3) {
      ctx.moveTo(x + d, y + hh);
      ctx.lineTo(x + d + hh, y);
    }
    ctx.stroke();
    ctx.restore();
    ctx.fillStyle = color;
    ctx.fillRect(x, y, Math.min(w, 1.5), h);
  }

  // The centre of rid's cell in the column of `step`, in the canvas's CSS pixels, or null when
  // that column is not on screen (for tests: hover there for the tooltip).
  locate(step, rid) {
    const L = this.layout;
    if (!L || !L.nVis) return null;
    for (let i = 0; i < L.nVis; i++) {
      const c = this.cols[L.first + i];
      if (c.step !== step) continue;
      for (let j = 0; j < c.cells.length; j += CELL) {
        if (c.cells[j] !== rid) continue;
        return {
          x: this.box.width - (L.nVis - i) * L.colW + L.colW / 2,
          y: L.laneTop + c.cells[j + 1] * L.rowH + L.rowH / 2,
        };
      }
    }
    return null;
  }

  onPointer(e) {
    const r = this.canvas.getBoundingClientRect();
    this.hoverPt = { x: e.clientX - r.left, y: e.clientY - r.top };
    this.showTip(this.hoverPt.x, this.hoverPt.y);
  }

  hideTip() {
    this.hoverPt = null;
    if (this.tip) this.tip.hidden = true;
  }

  showTip(x, y) {
    const L = this.layout;
    if (!L || !L.nVis) { this.tip.hidden = true; return; }
    const fromRight = Math.floor((this.box.width - x) / L.colW);
    const i = L.nVis - 1 - fromRight;
    if (i < 0 || i >= L.nVis || x < 0) { this.tip.hidden = true; return; }
    const c = this.cols[L.first + i];
    const lane = Math.floor((y - L.laneTop) / L.rowH);
    let who = '';
    for (let j = 0; j < c.cells.length; j += CELL) {
      if (c.cells[j + 1] === lane) {
        const rid = c.cells[j], o = this.own(rid), cached = c.cells[j + 3];
        who = `rid ${rid}: ${o ? 'yours (' + o.id + ')' : 'another session'}, ${KIND_NAMES[c.cells[j + 2]]}`;
        if (cached) {
          who += `\n${cached} prompt token${cached === 1 ? '' : 's'} from the prefix cache` +
            (o && o.promptTokens > 0 ? ` (of ${o.promptTokens})` : '') + ', the rest computed from here';
        }
        break;
      }
    }
    const lines = [
      `Step ${c.step} · ${fmtMs(c.ms)}`,
      `${c.pre} prefill + ${c.dec} decode tokens`,
      `${c.running} running · ${c.waiting} waiting`,
    ];
    if (c.idle) lines.push(`after ${fmtMs(c.idle)} idle`);
    if (who) lines.push(who);
    this.tip.textContent = lines.join('\n');
    this.tip.hidden = false;
    const tw = this.tip.offsetWidth, thh = this.tip.offsetHeight;
    const left = Math.max(0, Math.min(this.box.width - tw, x + 12));
    const top = y + 14 + thh > this.box.height ? Math.max(0, y - thh - 8) : y + 14;
    this.tip.style.left = left + 'px';
    this.tip.style.top = top + 'px';
  }
}
