// userkey.js: this browser's user key (docs/protocol.md, "User key and history"): 32 random hex
// characters made once with crypto.getRandomValues and kept in localStorage as `inflight.userKey`.
// The chat page presents it when it connects (/ws?user=KEY) and the history page asks for that
// key's requests. The server stores only its SHA-256.
//
// get() -> {key, stored}: `stored` is false when localStorage cannot be
// used (disabled, private mode): the key then lives only as long as the page.

export const STORAGE_NAME = 'inflight.userKey';
const VALID = /^[A-Za-z0-9_-]{16,64}$/;   // what the server accepts
let cached = null;

function fresh() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function get() {
  if (cached) return cached;
  let key = null, stored = false;
  try {
    key = window.localStorage.getItem(STORAGE_NAME);
    if (!key || !VALID.test(key)) {
      key = fresh();
      window.localStorage.setItem(STORAGE_NAME, key);
    }
    stored = window.localStorage.getItem(STORAGE_NAME) === key;
  } catch (e) {
    // storage refused: a key for this page only
    if (!key || !VALID.test(key)) key = fresh();
  }
  cached = { key, stored };
  return cached;
}
