// canvas.js: what the page's canvas renderers (batchview.js, plot.js) share: a CanvasBox keeps a
// canvas's backing store sized to the canvas's CSS box at the device's pixel ratio (at most 3x),
// follows it as the box changes and starts each frame with a cleared canvas in CSS pixels; and
// themeOf reads a renderer's colours from CSS custom properties, so light and dark themes apply.

const MAX_DPR = 3;   // sharper than this only costs memory

export class CanvasBox {
  // onResize() runs after each change of size or pixel ratio; call fit() once the owner is ready.
  constructor(canvas, onResize) {
    this.canvas = canvas;
    this.ctx = canvas.getContext('2d');
    this.onResize = onResize;
    this.width = 0;    // CSS pixels
    this.height = 0;
    this.dpr = 1;
    new ResizeObserver(() => this.fit()).observe(canvas);
  }

  // Matches the backing store to the canvas's box; onResize() if anything changed.
  fit() {
    const r = this.canvas.getBoundingClientRect();
    const dpr = Math.max(1, Math.min(MAX_DPR, window.devicePixelRatio || 1));
    const w = Math.max(1, Math.round(r.width)), h = Math.max(1, Math.round(r.height));
    if (w === this.width && h === this.height && dpr === this.dpr) return;
    this.width = w;
    this.height = h;
    this.dpr = dpr;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.onResize();
  }

  // The context, cleared and scaled so that drawing is in CSS pixels.
  clear() {
    const ctx = this.ctx;
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, this.height);
    return ctx;
  }
}

// A theme from el's CSS custom properties: each key of defaults is read from the property named
// by prefix and the key in kebab case ('--pl-' and spanText: --pl-span-text), else its default.
export function themeOf(el, prefix, defaults) {
  const cs = getComputedStyle(el);
  const theme = {};
  for (const [key, dflt] of Object.entries(defaults)) {
    const name = prefix + key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
    theme[key] = cs.getPropertyValue(name).trim() || dflt;
  }
  return theme;
}
