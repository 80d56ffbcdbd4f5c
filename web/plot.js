// plot.js: a small scatter/line plot on a canvas for the history page: axes with "nice" ticks
// (numbers, or local clock times), points coloured by the caller, vertical markers (e.g. TTFT), a
// shaded span (e.g. time in the queue), a hover tooltip and click-to-pick. Sized to its CSS box at
// the device's pixel ratio and coloured from CSS custom properties (--pl-*) on the figure, so
// light and dark themes apply (both by canvas.js).
//
// Hook: the canvas's data-points attribute says how many points the last draw showed.
// Exports class Plot (history.js makes three).

import { CanvasBox, themeOf } from './canvas.js';
import { pad2, MONTHS } from './format.js';

const HIT_PX = 14;          // how near the pointer must be to a point
const MIN_TICK_PX = 34;     // vertical space between y ticks
const TIME_STEPS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 108e5,
  216e5, 432e5, 864e5, 1728e5, 6048e5, 2592e6];

// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi], about `target` of them.
function niceStep(span, target) {
  const raw = span / Math.max(1, target);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function fmtNum(v, step) {
  if (Math.abs(v) >= 10000 && step >= 1000) return +(v / 1000).toFixed(step >= 10000 ? 0 : 1) + 'k';
  let dec = 0;
  while (dec < 4 && Math.abs(step * Math.pow(10, dec) - Math.round(step * Math.pow(10, dec))) > 1e-6) dec++;
  return v.toFixed(dec);
}

function fmtClock(t, step) {
  const d = new Date(t);
  if (step >= 864e5) return d.getDate() + ' ' + MONTHS[d.getMonth()];
  const hm = pad2(d.getHours()) + ':' + pad2(d.getMinutes());
  if (step < 1e3) return hm + ':' + pad2(d.getSeconds()) + '.' + Math.floor(d.getMilliseconds() / 100);
  return step < 6e4 ? hm + ':' + pad2(d.getSeconds()) : hm;
}
function fmtDate(t) {
  const d = new Date(t);
  return d.getDate() + ' ' + MONTHS[d.getMonth()] + ' ' + d.getFullYear();
}
const localOffset = (t) => -new Date(t).getTimezoneOffset() * 6e4;
// the colours and font when the figure's --pl-* properties (history.css) are not set
const THEME_DEFAULTS = { grid: 'rgba(0,0,0,.08)', axis: 'rgba(0,0,0,.25)', text: '#6a7280', strong: '#1a1d23',
  line: '#3d7bf7', span: 'rgba(232,163,61,.16)', spanText: '#b86a00', halo: '#fff', font: '11px system-ui, sans-serif' };

export class Plot {
  // canvas: in a .canvas-wrap with a .tip sibling, inside a figure carrying the --pl-* colours.
  // opts: {x: 'time'|'linear', xTitle, yTitle, integerY, line, empty, tip(point) -> string,
  //        pick(point), label(n) -> the canvas's accessible name}
  constructor(canvas, opts) {
    this.canvas = canvas;
    this.opts = Object.assign({ x: 'linear', xTitle: '', yTitle: '', empty: 'No data' }, opts || {});
    this.tip = canvas.parentElement.querySelector('.tip');
    this.fig = canvas.closest('figure') || canvas.parentElement;
    this.box = new CanvasBox(canvas, () => this.draw());
    this.data = { points: [], marks: [], spans: [] };
    this.selected = null;
    this.hover = null;
    this.proj = [];
    this.raf = 0;
    this.theme = null;
    canvas.addEventListener('pointermove', (e) => this.onPointer(e));
    canvas.addEventListener('pointerleave', () => this.setHover(null));
    canvas.addEventListener('click', (e) => {
      const p = this.nearest(e);
      if (p && this.opts.pick) this.opts.pick(p.pt);
    });
    this.box.fit();
  }

  // data: {points: [{x, y, color, id, ...}], marks: [{x, label, color}], spans: [{x0, x1, label}],
  //        xMin, xMax, yMax}: points whose x or y is not a finite number are left out.
  set(data) {
    this.data = Object.assign({ points: [], marks: [], spans: [] }, data);
    this.data.points = this.data.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
    this.hover = null;
    if (this.tip) this.tip.hidden = true;
    this.schedule();
  }

  select(id) {
    this.selected = id;
    this.schedule();
  }

  readTheme() {
    this.theme = themeOf(this.fig, '--pl-', THEME_DEFAULTS);
    this.schedule();
  }

  schedule() {
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      this.draw();
    });
  }

  xTicks(lo, hi, plotW) {
    if (this.opts.x === 'time') {
      const minPx = (hi - lo) / plotW * 90 < 1e3 ? 92 : 78;   // "12:00:01.5" is wider
      let step = TIME_STEPS[TIME_STEPS.length - 1];
      for (const s of TIME_STEPS) if ((s / (hi - lo)) * plotW >= minPx) { step = s; break; }
      const off = localOffset(lo);
      const ticks = [];
      for (let t = Math.ceil((lo + off) / step) * step - off; t <= hi; t += step) ticks.push(t);
      return { ticks, label: (t) => fmtClock(t, step) };
    }
    const step = niceStep(hi - lo, Math.max(2, Math.floor(plotW / 70)));
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(t);
    return { ticks, label: (t) => fmtNum(t, step) };
  }

  draw() {
    if (!this.theme) this.readTheme();
    const ctx = this.box.clear(), th = this.theme, W = this.box.width, H = this.box.height;
    const d = this.data, pts = d.points;
    ctx.font = th.font;
    this.canvas.dataset.points = String(pts.length);
    if (this.opts.label) this.canvas.setAttribute('aria-label', this.opts.label(pts.length));
    this.proj = [];
    if (!pts.length) {
      ctx.fillStyle = th.text;
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText(this.opts.empty, W / 2, H / 2);
      return;
    }

    // ranges
    let xlo = Infinity, xhi = -Infinity, yhi = 0;
    for (const p of pts) {
      if (p.x < xlo) xlo = p.x;
      if (p.x > xhi) xhi = p.x;
      if (p.y > yhi) yhi = p.y;
    }
    for (const m of d.marks) { if (m.x > xhi) xhi = m.x; }
    if (d.xMin != null) xlo = d.xMin;
    if (d.xMax != null) xhi = Math.max(xhi, d.xMax);
    if (this.opts.x === 'time') {
      const span = xhi - xlo;
      const pad = span > 0 ? Math.max(span * 0.04, 500) : 30000;
      xlo -= pad;
      xhi += pad;
    } else if (xhi <= xlo) {
      xhi = xlo + 1;
    }
    if (d.yMax != null) yhi = Math.max(yhi, d.yMax);
    if (!(yhi > 0)) yhi = 1;

    // y ticks first: their labels set the left margin
    const top = 26, bottom = 36, right = 14;
    const plotH0 = H - top - bottom;
    let ystep = niceStep(yhi, Math.max(2, Math.min(6, Math.floor(plotH0 / MIN_TICK_PX))));
    if (this.opts.integerY) ystep = Math.max(1, Math.round(ystep));
    const ytop = Math.ceil(yhi * 1.04 / ystep) * ystep;
    const yticks = [];
    for (let t = 0; t <= ytop + ystep * 1e-9; t += ystep) yticks.push(t);
    let labW = 0;
    for (const t of yticks) labW = Math.max(labW, ctx.measureText(fmtNum(t, ystep)).width);
    const left = Math.ceil(Math.max(labW + 12, 34));
    const plotW = Math.max(10, W - left - right), plotH = Math.max(10, plotH0);
    const X = (x) => left + ((x - xlo) / (xhi - xlo)) * plotW;
    const Y = (y) => top + plotH - (y / ytop) * plotH;

    // shaded spans (behind everything)
    for (const s of d.spans) {
      const x0 = Math.max(left, X(s.x0)), x1 = Math.min(left + plotW, X(s.x1));
      if (x1 - x0 < 0.5) continue;
      ctx.fillStyle = th.span;
      ctx.fillRect(x0, top, x1 - x0, plotH);
    }

    // grid and y labels
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (const t of yticks) {
      const y = Math.round(Y(t)) + 0.5;
      ctx.fillStyle = th.grid;
      ctx.fillRect(left, y - 0.5, plotW, 1);
      ctx.fillStyle = th.text;
      ctx.fillText(fmtNum(t, ystep), left - 6, y);
    }
    const xt = this.xTicks(xlo, xhi, plotW);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    let lastRight = -Infinity;
    for (const t of xt.ticks) {
      const x = Math.round(X(t)) + 0.5;
      if (x < left - 0.5 || x > left + plotW + 0.5) continue;
      ctx.fillStyle = th.grid;
      ctx.fillRect(x - 0.5, top, 1, plotH);
      ctx.fillStyle = th.axis;
      ctx.fillRect(x - 0.5, top + plotH, 1, 4);
      const s = xt.label(t);
      const w = ctx.measureText(s).width;
      const cx = Math.min(Math.max(x, left + w / 2), W - w / 2 - 1);
      if (cx - w / 2 < lastRight + 8) continue;
      ctx.fillStyle = th.text;
      ctx.fillText(s, cx, top + plotH + 16);
      lastRight = cx + w / 2;
    }
    // axes
    ctx.fillStyle = th.axis;
    ctx.fillRect(left, top + plotH, plotW, 1);
    ctx.fillRect(left, top, 1, plotH + 1);
    // titles: y above its axis, x under its labels on the right
    ctx.fillStyle = th.text;
    ctx.textAlign = 'left';
    ctx.fillText(this.opts.yTitle, 4, 12);
    ctx.textAlign = 'right';
    let xTitle = this.opts.xTitle;
    if (this.opts.x === 'time') {
      const a = fmtDate(xlo), b = fmtDate(xhi);
      xTitle = (xTitle ? xTitle + ', ' : '') + (a === b ? a : a + ' – ' + b);
    }
    ctx.fillText(xTitle, W - right, H - 4);

    // markers
    ctx.textBaseline = 'alphabetic';
    for (const m of d.marks) {
      if (!Number.isFinite(m.x)) continue;
      const x = Math.round(X(m.x)) + 0.5;
      ctx.strokeStyle = m.color || th.strong;
      ctx.lineWidth = 1.25;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + plotH);
      ctx.stroke();
      ctx.setLineDash([]);
      if (m.label) {
        ctx.fillStyle = m.color || th.strong;
        const w = ctx.measureText(m.label).width;
        const right = x + 4 + w <= left + plotW;
        ctx.textAlign = right ? 'left' : 'right';
        ctx.fillText(m.label, right ? x + 4 : x - 4, top + 10 + (m.row || 0) * 13);
      }
    }
    for (const s of d.spans) {
      if (!s.label) continue;
      const x0 = Math.max(left, X(s.x0)), x1 = Math.min(left + plotW, X(s.x1));
      const w = ctx.measureText(s.label).width;
      if (x1 - x0 < w + 8) continue;
      ctx.fillStyle = th.spanText;
      ctx.textAlign = 'center';
      ctx.fillText(s.label, (x0 + x1) / 2, top + plotH - 6);
    }

    // the points
    for (const p of pts) this.proj.push({ px: X(p.x), py: Y(p.y), pt: p });
    if (this.opts.line && this.proj.length > 1) {
      ctx.strokeStyle = th.line;
      ctx.lineWidth = 1.5;
      ctx.lineJoin = 'round';
      ctx.beginPath();
      this.proj.forEach((q, i) => (i ? ctx.lineTo(q.px, q.py) : ctx.moveTo(q.px, q.py)));
      ctx.stroke();
    }
    const r = this.opts.line ? (pts.length > 150 ? 1.6 : 2.6) : 4;
    for (const q of this.proj) {
      ctx.beginPath();
      ctx.arc(q.px, q.py, r, 0, Math.PI * 2);
      ctx.fillStyle = q.pt.color || th.line;
      ctx.fill();
      if (!this.opts.line) {
        ctx.lineWidth = 1;
        ctx.strokeStyle = th.halo;
        ctx.stroke();
      }
    }
    const ring = (q, width) => {
      ctx.beginPath();
      ctx.arc(q.px, q.py, r + 3.5, 0, Math.PI * 2);
      ctx.lineWidth = width;
      ctx.strokeStyle = th.strong;
      ctx.stroke();
    };
    if (this.selected != null) {
      for (const q of this.proj) if (q.pt.id === this.selected) ring(q, 2);
    }
    if (this.hover) {
      const q = this.proj.find((o) => o.pt === this.hover);
      if (q) ring(q, 1.25);
    }
  }

  nearest(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    let best = null, bd = Infinity;
    for (const q of this.proj) {
      // a line plot picks by x (its points are dense along one curve)
      const dd = this.opts.line ? Math.abs(q.px - x) : Math.hypot(q.px - x, q.py - y);
      if (dd < bd) { bd = dd; best = q; }
    }
    return best && bd <= (this.opts.line ? Math.max(HIT_PX, 40) : HIT_PX) ? best : null;
  }

  onPointer(e) {
    const q = this.nearest(e);
    this.setHover(q);
  }

  setHover(q) {
    const pt = q ? q.pt : null;
    if (pt !== this.hover) {
      this.hover = pt;
      this.schedule();
    }
    this.canvas.style.cursor = pt && this.opts.pick ? 'pointer' : 'default';
    if (!this.tip) return;
    if (!q || !this.opts.tip) {
      this.tip.hidden = true;
      return;
    }
    this.tip.textContent = this.opts.tip(pt);
    this.tip.hidden = false;
    const tw = this.tip.offsetWidth, th = this.tip.offsetHeight;
    const left = Math.max(0, Math.min(this.box.width - tw, q.px + 12));
    const top = q.py - th - 10 < 0 ? Math.min(this.box.height - th, q.py + 12) : q.py - th - 10;
    this.tip.style.setProperty('left', left + 'px');
    this.tip.style.setProperty('top', Math.max(0, top) + 'px');
  }
}
