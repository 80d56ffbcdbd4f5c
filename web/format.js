// format.js: the numbers and times the chat page's cards and the history page show, formatted
// one way for both (this module's exports): durations (ms, s, then min + s), token rates, a row's
// clock time (the day too when not today), a full timestamp, and a quantile of sorted values.
// The batch view keeps its own step-time format (two decimals under 10 ms).

export const isNum = (v) => typeof v === 'number' && isFinite(v);

export function ms(v) {
  if (!isNum(v) || v < 0) return '–';
  if (v < 10) return v.toFixed(1) + ' ms';
  if (v < 1000) return Math.round(v) + ' ms';
  if (v < 60000) return (v / 1000).toFixed(2) + ' s';
  return Math.floor(v / 60000) + ' min ' + Math.round((v % 60000) / 1000) + ' s';
}

export function rate(r) {
  if (!isNum(r) || r <= 0) return '–';
  return (r < 100 ? r.toFixed(1) : String(Math.round(r))) + ' tok/s';
}

export const pad2 = (n) => String(n).padStart(2, '0');
export const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const clock = (d) => pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());

// A row's time: the clock today, else the day too.
export function when(t) {
  if (!isNum(t)) return '–';
  const d = new Date(t), now = new Date();
  if (d.toDateString() === now.toDateString()) return clock(d);
  const day = d.getDate() + ' ' + MONTHS[d.getMonth()] + (d.getFullYear() !== now.getFullYear() ? ' ' + d.getFullYear() : '');
  return day + ', ' + pad2(d.getHours()) + ':' + pad2(d.getMinutes());
}

export function full(t) {
  if (!isNum(t)) return '–';
  const d = new Date(t);
  return d.getDate() + ' ' + MONTHS[d.getMonth()] + ' ' + d.getFullYear() + ', ' + clock(d) +
    '.' + String(d.getMilliseconds()).padStart(3, '0');
}

export function quantile(sorted, q) {
  if (!sorted.length) return NaN;
  const i = (sorted.length - 1) * q, lo = Math.floor(i), hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}
