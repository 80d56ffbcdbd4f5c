// params.js: the chat page's sampling parameters (max tokens, temperature, top-k, top-p, seed,
// stop strings, ignore EOS): each field checked against the limits of the server's hello as it is
// edited, its message shown beside it (#ID-err), the set read for a generate message, and their
// one-line summary next to the collapsible heading (this module's exports). app.js binds the
// fields once and calls read() for every request.

const utf8 = new TextEncoder();
export const byteLength = (s) => utf8.encode(s).length;

// Shows msg under the input (#ID-err) and marks it invalid; an empty msg clears both. Returns
// whether the field is valid.
export function setFieldError(input, msg) {
  const err = document.getElementById(input.id + '-err');
  if (err) err.textContent = msg || '';
  if (msg) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
  return !msg;
}

// Each reader returns {value} (undefined: leave it to the server's default) or {error}.
// readInt's hi is null while the server has not told that limit yet: then only lo is checked.
function readInt(input, name, lo, hi) {
  const s = input.value.trim();
  if (input.validity && input.validity.badInput) return { error: `${name} must be a whole number.` };
  if (s === '') return { value: undefined };
  const known = hi != null;
  const range = known ? `from ${lo} to ${hi}` : `of at least ${lo}`;
  if (!/^\d+$/.test(s)) return { error: `${name} must be a whole number ${range}.` };
  const v = Number(s);
  if (!Number.isSafeInteger(v) || v < lo || (known && v > hi)) {
    return { error: known ? `${name} must be between ${lo} and ${hi}.` : `${name} must be a whole number ${range}.` };
  }
  return { value: v };
}

function readNum(input, name, lo, hi, loOpen) {
  const s = input.value.trim();
  if (input.validity && input.validity.badInput) return { error: `${name} must be a number.` };
  if (s === '') return { value: undefined };
  if (!/^(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s)) return { error: `${name} must be a number from ${lo} to ${hi}.` };
  const v = Number(s);
  if (!(loOpen ? v > lo : v >= lo) || v > hi) {
    return { error: loOpen ? `${name} must be more than ${lo} and at most ${hi}.` : `${name} must be between ${lo} and ${hi}.` };
  }
  return { value: v };
}

// Stop strings: split at newlines and commas; `\n`, `\t`, `\,` and `\\` are escapes; spaces
// around each one are trimmed (escaped characters are kept).
export function parseStops(s) {
  const out = [];
  let cur = [];
  const flush = () => {
    let a = 0, b = cur.length;
    while (a < b && !cur[a].esc && /\s/.test(cur[a].ch)) a++;
    while (b > a && !cur[b - 1].esc && /\s/.test(cur[b - 1].ch)) b--;
    const str = cur.slice(a, b).map((c) => c.ch).join('');
    if (str) out.push(str);
    cur = [];
  };
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === '\\' && i + 1 < s.length) {
      const n = s[++i];
      cur.push({ ch: n === 'n' ? '\n' : n === 't' ? '\t' : n, esc: true });
    } else if (ch === ',' || ch === '\n') {
      flush();
    } else {
      cur.push({ ch, esc: false });
    }
  }
  flush();
  return out;
}

// Binds the fields f {maxTokens, temperature, topK, topP, seed, stop, ignoreEos, formErr, form
// (the composer), box (the <details> around the fields), brief (the summary)}; limits() is the
// server's limits as far as it has told them ({} before its hello), vocab() its vocabulary size
// (null before). Returns {read, updateBrief}.
export function bind(f, limits, vocab) {
  function readStops() {
    const lim = limits();
    const list = parseStops(f.stop.value);
    if (lim.max_stop != null && list.length > lim.max_stop) {
      return { error: `At most ${lim.max_stop} stop strings (found ${list.length}).` };
    }
    for (const s of list) {
      if (lim.max_stop_bytes != null && byteLength(s) > lim.max_stop_bytes) {
        return { error: `Stop string “${s.length > 20 ? s.slice(0, 20) + '…' : s}” is longer than ${lim.max_stop_bytes} bytes.` };
      }
    }
    return { value: list };
  }

  const fieldReaders = {
    'max-tokens': () => readInt(f.maxTokens, 'Max tokens', 1, limits().max_tokens),
    temperature: () => readNum(f.temperature, 'Temperature', 0, 2),
    'top-k': () => readInt(f.topK, 'Top-k', 0, vocab()),
    'top-p': () => readNum(f.topP, 'Top-p', 0, 1, true),
    seed: () => readInt(f.seed, 'Seed', 0, Number.MAX_SAFE_INTEGER),
    stop: readStops,
  };
  const names = { 'max-tokens': 'max_tokens', temperature: 'temperature', 'top-k': 'top_k', 'top-p': 'top_p', seed: 'seed', stop: 'stop' };

  function validateField(id) {
    const r = fieldReaders[id]();
    setFieldError(document.getElementById(id), r.error);
    return r;
  }

  for (const id of Object.keys(fieldReaders)) {
    const input = document.getElementById(id);
    input.addEventListener('change', () => { input.dataset.touched = '1'; validateField(id); });
    input.addEventListener('input', () => {
      input.dataset.touched = '1';
      if (input.getAttribute('aria-invalid') && !fieldReaders[id]().error) setFieldError(input, '');
    });
  }

  // The parameters of a generate message, or null (with the messages shown) if one is invalid.
  function read() {
    const params = {};
    let firstBad = null;
    for (const id of Object.keys(fieldReaders)) {
      const r = validateField(id);
      if (r.error) {
        if (!firstBad) firstBad = document.getElementById(id);
      } else if (r.value !== undefined && !(Array.isArray(r.value) && r.value.length === 0)) {
        params[names[id]] = r.value;
      }
    }
    if (firstBad) {
      f.formErr.textContent = 'Please fix the highlighted parameter.';
      if (f.box && !f.box.open) f.box.open = true;
      firstBad.focus();
      return null;
    }
    params.ignore_eos = f.ignoreEos.checked;
    f.formErr.textContent = '';
    return params;
  }

  // The parameters in one line next to their (collapsible) heading.
  function updateBrief() {
    const v = (input) => input.value.trim() || input.placeholder || '–';
    const parts = [`${v(f.maxTokens)} tokens`, `T ${v(f.temperature)}`, `top-k ${v(f.topK)}`, `top-p ${v(f.topP)}`];
    if (f.seed.value.trim()) parts.push(`seed ${f.seed.value.trim()}`);
    const nStop = parseStops(f.stop.value).length;
    if (nStop) parts.push(`${nStop} stop${nStop > 1 ? 's' : ''}`);
    if (f.ignoreEos.checked) parts.push('ignore EOS');
    f.brief.textContent = '· ' + parts.join(' · ');
  }
  f.form.addEventListener('input', updateBrief);
  f.form.addEventListener('change', updateBrief);

  return { read, updateBrief };
}
