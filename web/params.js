// params.js: the chat page's sampling parameters panel, built from the server's parameter table
// (the hello's `params`, docs/protocol.md): one field per row (its label, its doc, its bounds and
// default), each checked against its row as it is edited with its message beside it (#ID-err),
// the set read for a generate message, and their one-line summary next to the collapsible
// heading. Nothing here knows a parameter by name: what a field looks like and how it is checked
// follow from the row's type. app.js builds the panel at every hello and calls read() for every
// request; the history page shows a logged request's parameters labelled from the last table
// this browser saw (rememberTable, rememberedTable, describeParams).

const utf8 = new TextEncoder();
export const byteLength = (s) => utf8.encode(s).length;

// The element id of a parameter's field: its name with '_' -> '-' (#top-p, #top-p-err).
export const fieldId = (name) => String(name).replace(/_/g, '-');

// Shows msg under the input (#ID-err) and marks it invalid; an empty msg clears both. Returns
// whether the field is valid.
export function setFieldError(input, msg) {
  const err = document.getElementById(input.id + '-err');
  if (err) err.textContent = msg || '';
  if (msg) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
  return !msg;
}

// ---------------------------------------------------------------- the table, kept for history.html

const TABLE_STORAGE = 'inflight.paramTable';

// Keeps the last hello's table in this browser (the history page has no /ws of its own).
export function rememberTable(table) {
  try {
    localStorage.setItem(TABLE_STORAGE, JSON.stringify(table));
  } catch (e) { /* no storage: the history page shows the names */ }
}

// The table the chat page last saw in this browser, or null.
export function rememberedTable() {
  try {
    const t = JSON.parse(localStorage.getItem(TABLE_STORAGE));
    return Array.isArray(t) ? t : null;
  } catch (e) {
    return null;
  }
}

// ---------------------------------------------------------------- reading one value

// Each reader returns {value} (undefined: leave it to the server's default) or {error}.
function readInt(input, name, lo, hi) {
  const s = input.value.trim();
  if (input.validity && input.validity.badInput) return { error: `${name} must be a whole number.` };
  if (s === '') return { value: undefined };
  if (!/^-?\d+$/.test(s)) return { error: `${name} must be a whole number from ${lo} to ${hi}.` };
  const v = Number(s);
  if (!Number.isSafeInteger(v) || v < lo || v > hi) return { error: `${name} must be between ${lo} and ${hi}.` };
  return { value: v };
}

function readNum(input, name, lo, hi, loOpen) {
  const s = input.value.trim();
  if (input.validity && input.validity.badInput) return { error: `${name} must be a number.` };
  if (s === '') return { value: undefined };
  if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s)) return { error: `${name} must be a number from ${lo} to ${hi}.` };
  const v = Number(s);
  if (!(loOpen ? v > lo : v >= lo) || v > hi) {
    return { error: loOpen ? `${name} must be more than ${lo} and at most ${hi}.` : `${name} must be between ${lo} and ${hi}.` };
  }
  return { value: v };
}

const clip = (s) => (s.length > 20 ? s.slice(0, 20) + '…' : s);

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

function readStrings(input, row) {
  const list = parseStops(input.value);
  const what = row.label.toLowerCase();
  if (row.max_items != null && list.length > row.max_items) {
    return { error: `At most ${row.max_items} ${what} (found ${list.length}).` };
  }
  for (const s of list) {
    if (row.max_bytes != null && byteLength(s) > row.max_bytes) {
      return { error: `${row.label}: “${clip(s)}” is longer than ${row.max_bytes} bytes.` };
    }
  }
  return { value: list.length ? list : undefined };
}

// Items of a list field: separated by commas, spaces or newlines.
const items = (s) => s.split(/[\s,]+/).filter((x) => x !== '');

function readTokenIds(input, row) {
  const list = items(input.value);
  if (row.max_items != null && list.length > row.max_items) {
    return { error: `At most ${row.max_items} ${row.label.toLowerCase()} (found ${list.length}).` };
  }
  const out = [];
  for (const s of list) {
    const v = Number(s);
    if (!/^\d+$/.test(s) || v < row.min || v > row.max) {
      return { error: `${row.label}: “${clip(s)}” is not a token id from ${row.min} to ${row.max}.` };
    }
    out.push(v);
  }
  return { value: out.length ? out : undefined };
}

// "id:bias, id:bias": an object {"id": bias}; ids 0..vocab-1 (vocab null: not checked here),
// each once, biases in [row.min, row.max].
function readLogitBias(input, row, vocab) {
  const list = items(input.value.replace(/\s*:\s*/g, ':'));
  if (row.max_items != null && list.length > row.max_items) {
    return { error: `${row.label}: at most ${row.max_items} tokens (found ${list.length}).` };
  }
  const out = {};
  for (const s of list) {
    const m = /^(\d+):([-+]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?)$/i.exec(s);
    if (!m) return { error: `${row.label}: “${clip(s)}” is not id:bias.` };
    const id = Number(m[1]), bias = Number(m[2]);
    if (!Number.isSafeInteger(id) || (vocab != null && id >= vocab)) {
      return { error: `${row.label}: token id ${clip(m[1])} is not from 0 to ${vocab != null ? vocab - 1 : '…'}.` };
    }
    if (String(id) in out) return { error: `${row.label}: token id ${id} is given twice.` };
    if (bias < row.min || bias > row.max) {
      return { error: `${row.label}: the bias of token ${id} must be between ${row.min} and ${row.max}.` };
    }
    out[String(id)] = bias;
  }
  return { value: list.length ? out : undefined };
}

// ---------------------------------------------------------------- the kinds of field

// Per row type: the control (tag, attributes), a usage hint (or none), and its reader.
const KINDS = {
  int: {
    control: (row) => ({ tag: 'input', type: 'number', inputmode: 'numeric', min: row.min, max: row.max, step: 1 }),
    read: (input, row) => readInt(input, row.label, row.min, row.max),
  },
  number: {
    control: (row) => ({
      tag: 'input', type: 'number', inputmode: row.min < 0 ? 'text' : 'decimal', min: row.min, max: row.max,
      step: 0.01 * Math.pow(10, Math.floor(Math.log10(row.max - row.min))),
    }),
    read: (input, row) => readNum(input, row.label, row.min, row.max, row.min_open),
  },
  seed: {
    control: () => ({ tag: 'input', type: 'text', inputmode: 'numeric', placeholder: 'random' }),
    hint: () => 'blank: the server picks one',
    read: (input, row) => readInt(input, row.label, row.min, row.max),
  },
  strings: {
    wide: true,
    control: () => ({ tag: 'textarea', rows: 1, spellcheck: 'false', placeholder: 'e.g. END, ###' }),
    hint: (row) => ['comma or newline separated' + (row.max_items != null ? `, up to ${row.max_items}` : '') + '; ',
      ['code', '\\n'], ' is a newline, ', ['code', '\\,'], ' a comma'],
    read: readStrings,
  },
  token_ids: {
    control: () => ({ tag: 'input', type: 'text', inputmode: 'numeric', placeholder: 'none', spellcheck: 'false' }),
    hint: (row) => `token ids, comma separated` + (row.max_items != null ? `, up to ${row.max_items}` : ''),
    read: readTokenIds,
  },
  logit_bias: {
    wide: true,
    control: () => ({ tag: 'input', type: 'text', placeholder: 'none', spellcheck: 'false' }),
    hint: (row) => [['code', 'id:bias'], `, comma separated; bias from ${row.min} to ${row.max}` +
      (row.max_items != null ? `, up to ${row.max_items} tokens` : '')],
    read: readLogitBias,
  },
  bool: {
    control: () => ({ tag: 'input', type: 'checkbox' }),
    read: (input) => ({ value: input.checked }),
  },
};

// The basic fields stay in view; the rest (off unless set) go under "More controls": those the
// server has its own default for (its --max-tokens, --temperature, ... options: the hello's
// `defaults`), and the seed, the stop strings and the switches.
const BASIC_TYPES = new Set(['seed', 'strings', 'bool']);
const isBasic = (row, serverDefaults) => BASIC_TYPES.has(row.type) || row.name in serverDefaults;

// ---------------------------------------------------------------- building the fields

// Appends text and [tag, text] pieces to node.
function appendPieces(node, pieces) {
  for (const p of [].concat(pieces)) {
    if (Array.isArray(p)) {
      const e = document.createElement(p[0]);
      e.textContent = p[1];
      node.append(e);
    } else {
      node.append(p);
    }
  }
}

function makeControl(row, kind, id) {
  const spec = kind.control(row);
  const input = document.createElement(spec.tag);
  input.id = id;
  input.name = row.name;
  for (const [k, v] of Object.entries(spec)) {
    if (k !== 'tag' && v != null) input.setAttribute(k, String(v));
  }
  if (spec.tag !== 'input' || spec.type === 'text') input.setAttribute('autocomplete', 'off');
  if (row.default != null && spec.type !== 'checkbox') input.placeholder = String(row.default);
  if (spec.type === 'checkbox') input.checked = row.default === true;
  input.title = row.doc || '';
  return input;
}

// One field: <div class="field"> label, control, hint (#ID-hint), doc for screen readers
// (#ID-doc), message (#ID-err).
function makeField(row, kind) {
  const id = fieldId(row.name);
  const box = document.createElement('div');
  box.className = 'field' + (kind.wide ? ' wide' : '') + (row.type === 'bool' ? ' check' : '');
  box.dataset.param = row.name;
  const input = makeControl(row, kind, id);
  const label = document.createElement('label');
  label.htmlFor = id;
  label.textContent = row.label;
  label.title = row.doc || '';
  const described = [id + '-err'];
  if (row.type === 'bool') {
    const doc = document.createElement('span');
    doc.className = 'muted';
    doc.textContent = ` (${row.doc})`;
    label.append(doc);
    box.append(input, label);
  } else {
    box.append(label, input);
    if (kind.hint) {
      const hint = document.createElement('p');
      hint.className = 'field-hint';
      hint.id = id + '-hint';
      appendPieces(hint, kind.hint(row));
      box.append(hint);
      described.push(hint.id);
    }
    if (row.doc) {
      const doc = document.createElement('span');
      doc.className = 'visually-hidden';
      doc.id = id + '-doc';
      doc.textContent = row.doc;
      box.append(doc);
      described.push(doc.id);
    }
  }
  const err = document.createElement('p');
  err.className = 'field-err';
  err.id = id + '-err';
  err.setAttribute('aria-live', 'polite');
  box.append(err);
  input.setAttribute('aria-describedby', described.join(' '));
  return { row, kind, input, box, basic: false };
}

// The "More controls" <details> (collapsed) holding the fields that are not basic.
function makeMore(fields) {
  const more = document.createElement('details');
  more.className = 'params-more';
  more.id = 'params-more';
  const summary = document.createElement('summary');
  summary.textContent = 'More controls';
  const grid = document.createElement('div');
  grid.className = 'params-grid';
  for (const f of fields) grid.append(f.box);
  more.append(summary, grid);
  return more;
}

// The values of new fields: what the user typed in the old field of that name, else the
// row's default for a basic one (others show it as their placeholder and are not sent).
function fillValues(fields, old) {
  const kept = new Map(old.filter((fd) => fd.input.dataset.touched).map((fd) => [fd.row.name, fd.input]));
  for (const fd of fields) {
    const was = kept.get(fd.row.name), input = fd.input;
    if (was) {
      if (input.type === 'checkbox') input.checked = was.checked;
      else input.value = was.value;
      input.dataset.touched = '1';
    } else if (fd.basic && fd.row.default != null && input.type !== 'checkbox') {
      input.value = String(fd.row.default);
    }
  }
}

// A field in the one-line summary: the basic numbers always, anything else when it is set.
function briefOf(fd, vocab) {
  const name = fd.row.label.toLowerCase(), input = fd.input;
  if (input.type === 'checkbox') return input.checked ? name : null;
  const v = input.value.trim();
  if (fd.row.type === 'int' || fd.row.type === 'number') {
    return v || fd.basic ? `${name} ${v || input.placeholder || '–'}` : null;
  }
  if (!v) return null;
  const r = fd.kind.read(input, fd.row, vocab);
  if (r.error || r.value === undefined) return `${name} ${clip(v)}`;
  const n = Array.isArray(r.value) ? r.value.length : typeof r.value === 'object' ? Object.keys(r.value).length : null;
  return `${name} ${n != null ? n : v}`;
}

// A logged request's parameters (its params object) in words, in table's order then any other
// name: [[label, text, doc]]; table null (or a name it lacks): the name, '_' as a space.
export function describeParams(p, table) {
  const rows = new Map((table || []).filter((r) => r && r.name).map((r) => [r.name, r]));
  const names = [...[...rows.keys()].filter((k) => k in p), ...Object.keys(p).filter((k) => !rows.has(k))];
  return names.map((k) => {
    const row = rows.get(k);
    return [row && row.label ? row.label : k.replace(/_/g, ' '), valueText(p[k]), row ? row.doc || '' : ''];
  });
}

// A logged value in words: yes/no, strings quoted, lists and {"id": bias} short, none if empty.
function valueText(v) {
  if (v == null) return '–';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (Array.isArray(v)) {
    return v.length ? v.map((x) => (typeof x === 'string' ? JSON.stringify(x) : String(x))).join(' ') : 'none';
  }
  if (typeof v === 'object') {
    const e = Object.entries(v);
    return e.length ? e.map(([k, b]) => `${k}:${b}`).join(' ') : 'none';
  }
  return String(v);
}

// ---------------------------------------------------------------- the panel

// Binds the panel f {grid (the fields' container), formErr, form (the composer), box (the
// <details> around the fields), brief (the summary)}; vocab() is the server's vocabulary size
// (null before its hello). Returns {build, read, updateBrief}.
export function bind(f, vocab) {
  let fields = [];   // in the table's order
  let built = null;  // what the fields were built from (JSON), to rebuild only on a change
  let more = null;

  const readField = (fd) => fd.kind.read(fd.input, fd.row, vocab());
  function validateField(fd) {
    const r = readField(fd);
    setFieldError(fd.input, r.error);
    return r;
  }

  function listen(fd) {
    const input = fd.input;
    input.addEventListener('change', () => { input.dataset.touched = '1'; validateField(fd); });
    input.addEventListener('input', () => {
      input.dataset.touched = '1';
      if (input.getAttribute('aria-invalid') && !readField(fd).error) setFieldError(input, '');
    });
  }

  // (Re)builds the fields from a hello's table; serverDefaults is its `defaults` (which fields
  // are basic). A field the user has edited keeps its value across a rebuild; the others show
  // the row's default (basic fields as their value, the others as a placeholder: not sent).
  function build(table, serverDefaults) {
    const rows = Array.isArray(table) ? table.filter((r) => r && KINDS[r.type] && r.name && r.label) : [];
    const key = JSON.stringify([rows, Object.keys(serverDefaults || {})]);
    if (key === built) return;
    const moreOpen = more ? more.open : false;
    const old = fields;
    fields = rows.map((row) => makeField(row, KINDS[row.type]));
    for (const fd of fields) fd.basic = isBasic(fd.row, serverDefaults || {});
    fillValues(fields, old);
    for (const fd of fields) listen(fd);
    const rest = fields.filter((fd) => !fd.basic);
    more = rest.length ? makeMore(rest) : null;
    if (more) more.open = moreOpen;
    f.grid.replaceChildren(...fields.filter((fd) => fd.basic).map((fd) => fd.box), ...(more ? [more] : []));
    if (!rows.length) f.grid.textContent = 'This server does not list its parameters: its defaults are used.';
    built = key;
    updateBrief();
  }

  // The parameters of a generate message, or null (with the messages shown) if one is invalid.
  function read() {
    const params = {};
    let firstBad = null;
    for (const fd of fields) {
      const r = validateField(fd);
      if (r.error) {
        if (!firstBad) firstBad = fd;
      } else if (r.value !== undefined) {
        params[fd.row.name] = r.value;
      }
    }
    if (firstBad) {
      f.formErr.textContent = 'Please fix the highlighted parameter.';
      if (f.box && !f.box.open) f.box.open = true;
      if (!firstBad.basic && more) more.open = true;
      firstBad.input.focus();
      return null;
    }
    f.formErr.textContent = '';
    return params;
  }

  // The parameters in one line next to their (collapsible) heading.
  function updateBrief() {
    if (!fields.length) {
      f.brief.textContent = built === null ? '· connecting…' : '';
      return;
    }
    f.brief.textContent = '· ' + fields.map((fd) => briefOf(fd, vocab())).filter((x) => x).join(' · ');
  }
  f.form.addEventListener('input', updateBrief);
  f.form.addEventListener('change', updateBrief);

  return { build, read, updateBrief };
}
