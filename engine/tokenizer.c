/* tokenizer.c: GPT-2 byte-level BPE: vocabulary loading, the pre-tokenizer, rank-ordered merges
 * with a heap (n log n on any input, however long a piece), decoding (see tokenizer.h). The UTF-8
 * decoding, character classes and streaming assembly are utf8.c's. */
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- hashing -----------------------------------------------------------------------------------
 */

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    return key ^ (key >> 33);
}

typedef struct {
    uint64_t key; /* (left << 32) | right; 0 marks empty (ids are < 2^31, so key != 0 unless
                     both are 0; that pair is stored with the `used` flag) */
    int32_t rank;
    int32_t merged;
    int32_t used;
} merge_slot;

struct ifl_tokenizer {
    int32_t n_vocab;
    int32_t eot;          /* "<|endoftext|>" or -1 */
    char *bytes;          /* all token bytes back to back */
    uint32_t *offs;       /* (V + 1) token i is bytes[offs[i] .. offs[i+1]) */
    int32_t *vocab_slots; /* open addressing: token id or -1, keyed by its bytes */
    size_t vocab_mask;
    merge_slot *merges; /* open addressing, keyed by the pair of ids */
    size_t merge_mask;
    int32_t n_merges;
    int32_t byte_id[256]; /* token of each single byte */
};

static int32_t vocab_find(const ifl_tokenizer *t, const unsigned char *p, size_t n)
{
    for (size_t i = hash_bytes(p, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        int32_t id = t->vocab_slots[i];
        if (id < 0)
            return -1;
        if (t->offs[id + 1] - t->offs[id] == n && !memcmp(t->bytes + t->offs[id], p, n))
            return id;
    }
}

static const merge_slot *merge_find(const ifl_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *s = &t->merges[i];
        if (!s->used)
            return NULL;
        if (s->key == key)
            return s;
    }
}

/* ---- the byte <-> unicode alphabet of GPT-2's vocabulary files ---------------------------------
 */

/* GPT-2 writes byte b as the code point byte_to_cp(b): printable Latin-1 bytes as themselves, the
 * other 68 bytes as U+0100.. in byte order. */
static void byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable =
            (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* Turns a vocabulary-file string (UTF-8 of alphabet code points) into raw bytes in place.
 * Returns the byte count, or -1 if a character is outside the alphabet. */
static long alphabet_to_bytes(const int16_t cp_to_byte[324], const char *s, size_t n,
                              unsigned char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int k = ifl_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (k <= 0 || cp >= 324 || cp_to_byte[cp] < 0)
            return -1;
        out[o++] = (unsigned char)cp_to_byte[cp];
        i += (size_t)k;
    }
    return (long)o;
}

/* ---- loading --------------------------------------------------------------------------------- */

void ifl_tokenizer_free(ifl_tokenizer *t)
{
    if (!t)
        return;
    free(t->bytes);
    free(t->offs);
    free(t->vocab_slots);
    free(t->merges);
    free(t);
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* First pass over encoder.json / vocab.json: every id exactly once in [0, n), each token's bytes
 * in GPT-2's alphabet; lens[id] gets the byte length (tmp: scratch of the file's size). */
static int vocab_lengths(const cJSON *root, int32_t n, const int16_t cp_to_byte[324],
                         const char *path, uint32_t *lens, unsigned char *tmp, ifl_err *err)
{
    for (const cJSON *it = root->child; it; it = it->next) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (d < 0 || d >= n || d != (double)(int32_t)d)
            return ifl_err_set(err, "%s: token \"%.40s\" has id %s, not an integer in [0, %d)",
                               path, it->string,
                               cJSON_IsNumber(it) ? "out of range" : "not a number", n);
        int32_t id = (int32_t)d;
        if (lens[id])
            return ifl_err_set(err, "%s: id %d is used by two tokens", path, id);
        long bl = alphabet_to_bytes(cp_to_byte, it->string, strlen(it->string), tmp);
        if (bl <= 0)
            return ifl_err_set(err,
                               "%s: token \"%.40s\" (id %d) has a character outside GPT-2's byte "
                               "alphabet",
                               path, it->string, id);
        lens[id] = (uint32_t)bl;
    }
    return 0;
}

/* Second pass: every token's bytes back to back in t->bytes, at t->offs[id]. */
static int vocab_bytes(ifl_tokenizer *t, const cJSON *root, const int16_t cp_to_byte[324],
                       const char *path, size_t text_len, ifl_err *err)
{
    int32_t n = t->n_vocab;
    int rc = -1;
    t->offs = calloc((size_t)n + 1, sizeof *t->offs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    unsigned char *tmp = malloc(text_len + 1);
    if (!t->offs || !lens || !tmp) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    if (vocab_lengths(root, n, cp_to_byte, path, lens, tmp, err))
        goto out;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        t->offs[i] = (uint32_t)total;
        total += lens[i];
    }
    t->offs[n] = (uint32_t)total;
    t->bytes = malloc(total ? total : 1);
    if (!t->bytes) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        int32_t id = (int32_t)it->valuedouble;
        long bl = alphabet_to_bytes(cp_to_byte, it->string, strlen(it->string), tmp);
        memcpy(t->bytes + t->offs[id], tmp, (size_t)bl);
    }
    rc = 0;
out:
    free(lens);
    free(tmp);
    return rc;
}

/* The index by bytes (open addressing), the 256 single-byte tokens, <|endoftext|>. */
static int vocab_index(ifl_tokenizer *t, const char *path, ifl_err *err)
{
    int32_t n = t->n_vocab;
    size_t cap = pow2_at_least((size_t)n * 2);
    t->vocab_slots = malloc(cap * sizeof *t->vocab_slots);
    if (!t->vocab_slots)
        return ifl_err_set(err, "out of memory");
    memset(t->vocab_slots, 0xff, cap * sizeof *t->vocab_slots);
    t->vocab_mask = cap - 1;
    for (int32_t id = 0; id < n; id++) {
        const unsigned char *p = (const unsigned char *)t->bytes + t->offs[id];
        size_t bl = t->offs[id + 1] - t->offs[id];
        if (vocab_find(t, p, bl) >= 0)
            return ifl_err_set(err, "%s: two tokens have the same bytes (id %d and another)", path,
                               id);
        size_t i = hash_bytes(p, bl) & t->vocab_mask;
        while (t->vocab_slots[i] >= 0)
            i = (i + 1) & t->vocab_mask;
        t->vocab_slots[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0)
            return ifl_err_set(err, "%s: no token for byte 0x%02x: not a byte-level BPE vocabulary",
                               path, b);
    }
    t->eot = vocab_find(t, (const unsigned char *)"<|endoftext|>", 13);
    return 0;
}

static int load_vocab(ifl_tokenizer *t, const char *path, const int16_t cp_to_byte[324],
                      ifl_err *err)
{
    int rc = -1;
    char *text = NULL;
    size_t len;
    cJSON *root = NULL;
    if (ifl_read_file(path, &text, &len, 64u << 20, err))
        goto out;
    root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        ifl_err_set(err, "%s: not a JSON object of token -> id", path);
        goto out;
    }
    int n = cJSON_GetArraySize(root);
    if (n <= 256 || n > (1 << 24)) {
        ifl_err_set(err, "%s: %d tokens: not a GPT-2 vocabulary", path, n);
        goto out;
    }
    t->n_vocab = n;
    if (vocab_bytes(t, root, cp_to_byte, path, len, err) || vocab_index(t, path, err))
        goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

static int load_merges(ifl_tokenizer *t, const char *path, const int16_t cp_to_byte[324],
                       ifl_err *err)
{
    int rc = -1;
    char *text = NULL;
    size_t len;
    unsigned char *buf = NULL;
    if (ifl_read_file(path, &text, &len, 64u << 20, err))
        goto out;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    size_t cap = pow2_at_least(lines * 2);
    t->merges = calloc(cap, sizeof *t->merges);
    buf = malloc(len + 1);
    if (!t->merges || !buf) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    t->merge_mask = cap - 1;
    size_t lineno = 0;
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        lineno++;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r')
            ll--;
        if (ll == 0 || (lineno == 1 && ll >= 8 && !memcmp(p, "#version", 8))) {
            p = le + 1;
            continue;
        }
        char *sp = memchr(p, ' ', ll);
        if (!sp || sp == p || sp == p + ll - 1 || memchr(sp + 1, ' ', (size_t)(p + ll - sp - 1))) {
            ifl_err_set(err, "%s:%zu: expected two tokens separated by one space", path, lineno);
            goto out;
        }
        long la = alphabet_to_bytes(cp_to_byte, p, (size_t)(sp - p), buf);
        long lb = la > 0
                      ? alphabet_to_bytes(cp_to_byte, sp + 1, (size_t)(p + ll - sp - 1), buf + la)
                      : -1;
        if (la <= 0 || lb <= 0) {
            ifl_err_set(err, "%s:%zu: character outside GPT-2's byte alphabet", path, lineno);
            goto out;
        }
        int32_t a = vocab_find(t, buf, (size_t)la), b = vocab_find(t, buf + la, (size_t)lb);
        int32_t m = vocab_find(t, buf, (size_t)(la + lb));
        if (a < 0 || b < 0 || m < 0) {
            ifl_err_set(err, "%s:%zu: merge \"%.*s\" uses or makes a token not in the vocabulary",
                        path, lineno, (int)(ll > 60 ? 60 : ll), p);
            goto out;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t i = hash_pair(key) & t->merge_mask;
        while (t->merges[i].used && t->merges[i].key != key)
            i = (i + 1) & t->merge_mask;
        if (!t->merges[i].used) { /* a repeated merge keeps its first (lowest) rank */
            t->merges[i].used = 1;
            t->merges[i].key = key;
            t->merges[i].rank = t->n_merges;
            t->merges[i].merged = m;
        }
        t->n_merges++;
        p = le + 1;
    }
    if (t->n_merges == 0) {
        ifl_err_set(err, "%s: no merges", path);
        goto out;
    }
    rc = 0;
out:
    free(buf);
    free(text);
    return rc;
}

static const char *const vocab_names[2][2] = {{"vocab.json", "merges.txt"},
                                              {"encoder.json", "vocab.bpe"}};

/* Which pair of vocab_names DIR holds (0, 1), -1 for none, -2 when a path is too long; the paths
 * of the pair found in vpath and mpath. */
static int find_vocab(const char *dir, char *vpath, char *mpath, size_t cap)
{
    for (int i = 0; i < 2; i++) {
        if (ifl_path_join(vpath, cap, dir, vocab_names[i][0]) ||
            ifl_path_join(mpath, cap, dir, vocab_names[i][1]))
            return -2;
        if (ifl_file_exists(vpath) && ifl_file_exists(mpath))
            return i;
    }
    return -1;
}

int ifl_tokenizer_dir_has_vocab(const char *dir)
{
    char vpath[4096], mpath[4096];
    return find_vocab(dir, vpath, mpath, sizeof vpath) >= 0;
}

int ifl_tokenizer_load(ifl_tokenizer **out, const char *dir, ifl_err *err)
{
    *out = NULL;
    char vpath[4096], mpath[4096];
    int found = find_vocab(dir, vpath, mpath, sizeof vpath);
    if (found == -2)
        return ifl_err_set(err, "%s: path too long", dir);
    if (found < 0)
        return ifl_err_set(err,
                           "%s: no vocabulary: expected vocab.json + merges.txt or "
                           "encoder.json + vocab.bpe",
                           dir);
    ifl_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return ifl_err_set(err, "out of memory");
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp, cp_to_byte);
    if (load_vocab(t, vpath, cp_to_byte, err) || load_merges(t, mpath, cp_to_byte, err)) {
        ifl_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int32_t ifl_tokenizer_n_vocab(const ifl_tokenizer *t)
{
    return t->n_vocab;
}
int32_t ifl_tokenizer_eot(const ifl_tokenizer *t)
{
    return t->eot;
}

static int char_at(const unsigned char *s, size_t n, int *cls)
{
    uint32_t cp;
    int k = ifl_utf8_decode(s, n, &cp);
    if (k <= 0) {
        *cls = IFL_UC_OTHER;
        return 1;
    }
    *cls = ifl_unicode_class(cp);
    return k;
}

/* ---- pre-tokenizer --------------------------------------------------------------------------- */

/* Length in bytes of the piece starting at s[0] (n > 0 bytes left). Implements, in order:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t next_piece(const unsigned char *s, size_t n)
{
    if (s[0] == '\'' && n >= 2) {
        unsigned char c = s[1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd')
            return 2;
        if (n >= 3 &&
            ((c == 'r' && s[2] == 'e') || (c == 'v' && s[2] == 'e') || (c == 'l' && s[2] == 'l')))
            return 3;
    }
    size_t i = 0;
    int cls;
    int k = char_at(s, n, &cls);
    int lead_space = 0;
    if (s[0] == ' ' && n > 1) {
        int cls2;
        char_at(s + 1, n - 1, &cls2);
        if (cls2 != IFL_UC_SPACE) { /* " " then a letter, number or other run */
            lead_space = 1;
            i = 1;
            k = char_at(s + 1, n - 1, &cls);
        }
    }
    if (lead_space || cls != IFL_UC_SPACE) {
        /* ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`: a run of one class. */
        int run_cls = cls;
        i += (size_t)k;
        while (i < n) {
            int c2;
            int k2 = char_at(s + i, n - i, &c2);
            if (c2 != run_cls)
                break;
            i += (size_t)k2;
        }
        return i;
    }
    /* Whitespace run: all of it at the end of text, else all but its last character (which then
     * leads the next piece), else (a single character before non-space) just it. */
    size_t last_start = 0;
    int count = 0;
    while (i < n) {
        int c2;
        int k2 = char_at(s + i, n - i, &c2);
        if (c2 != IFL_UC_SPACE)
            break;
        last_start = i;
        i += (size_t)k2;
        count++;
    }
    if (i == n || count == 1)
        return i;
    return last_start;
}

/* ---- BPE ------------------------------------------------------------------------------------- */

typedef struct {
    int32_t rank;
    int32_t left; /* symbol index of the left side */
    int32_t left_id, right_id;
} heap_item;

static int heap_less(const heap_item *a, const heap_item *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

typedef struct {
    int32_t *id, *next, *prev;
    heap_item *heap;
    size_t cap, heap_n;
} bpe_work;

static void heap_push(bpe_work *w, heap_item it)
{
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = it;
}

static heap_item heap_pop(bpe_work *w)
{
    heap_item top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!heap_less(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static void push_pair(const ifl_tokenizer *t, bpe_work *w, int32_t left)
{
    if (left < 0)
        return;
    int32_t right = w->next[left];
    if (right < 0)
        return;
    const merge_slot *m = merge_find(t, w->id[left], w->id[right]);
    if (m)
        heap_push(w, (heap_item){m->rank, left, w->id[left], w->id[right]});
}

static int bpe_reserve(bpe_work *w, size_t n)
{
    if (n <= w->cap)
        return 0;
    size_t cap = n < 64 ? 64 : n;
    int32_t *id = realloc(w->id, cap * sizeof *id);
    if (id)
        w->id = id;
    int32_t *nx = realloc(w->next, cap * sizeof *nx);
    if (nx)
        w->next = nx;
    int32_t *pv = realloc(w->prev, cap * sizeof *pv);
    if (pv)
        w->prev = pv;
    heap_item *h = realloc(w->heap, 2 * cap * sizeof *h);
    if (h)
        w->heap = h;
    if (!id || !nx || !pv || !h)
        return -1;
    w->cap = cap;
    return 0;
}

/* Merges the bytes of one piece by rank and appends the resulting ids. */
static int bpe_piece(const ifl_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
                     ifl_tokens *out)
{
    if (n == 1)
        return ifl_tokens_push(out, t->byte_id[s[0]]);
    if (bpe_reserve(w, n))
        return -1;
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, w, (int32_t)i);
    /* Each merge adds at most two heap entries and removes one symbol, so the heap holds < 2n. */
    while (w->heap_n) {
        heap_item it = heap_pop(w);
        int32_t l = it.left, r = w->next[l];
        if (w->id[l] != it.left_id || r < 0 || w->id[r] != it.right_id || w->prev[l] == -2)
            continue; /* stale: a neighbour merged since this pair was queued */
        const merge_slot *m = merge_find(t, it.left_id, it.right_id);
        w->id[l] = m->merged;
        w->next[l] = w->next[r];
        if (w->next[r] >= 0)
            w->prev[w->next[r]] = l;
        w->prev[r] = -2; /* dead */
        w->id[r] = -1;
        push_pair(t, w, w->prev[l]);
        push_pair(t, w, l);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (ifl_tokens_push(out, w->id[i]))
            return -1;
    return 0;
}

int ifl_tokens_push(ifl_tokens *t, int32_t id)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        int32_t *p = realloc(t->ids, cap * sizeof *p);
        if (!p)
            return -1;
        t->ids = p;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return 0;
}

void ifl_tokens_free(ifl_tokens *t)
{
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static int encode_plain(const ifl_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
                        ifl_tokens *out)
{
    size_t i = 0;
    while (i < n) {
        size_t k = next_piece(s + i, n - i);
        if (bpe_piece(t, w, s + i, k, out))
            return -1;
        i += k;
    }
    return 0;
}

int ifl_tokenizer_encode(const ifl_tokenizer *t, const char *text, size_t len, int allow_special,
                         ifl_tokens *out, ifl_err *err)
{
    bpe_work w = {0};
    int rc = -1;
    const unsigned char *s = (const unsigned char *)text;
    static const char eot_text[] = "<|endoftext|>";
    size_t i = 0;
    while (i < len) {
        size_t end = len;
        const unsigned char *hit = NULL;
        if (allow_special && t->eot >= 0) {
            hit = memmem(s + i, len - i, eot_text, sizeof eot_text - 1);
            if (hit)
                end = (size_t)(hit - s);
        }
        if (encode_plain(t, &w, s + i, end - i, out))
            goto out;
        i = end;
        if (hit) {
            if (ifl_tokens_push(out, t->eot))
                goto out;
            i += sizeof eot_text - 1;
        }
    }
    rc = 0;
out:
    if (rc)
        ifl_err_set(err, "out of memory while tokenizing %zu bytes", len);
    free(w.id);
    free(w.next);
    free(w.prev);
    free(w.heap);
    return rc;
}

/* ---- decoding -------------------------------------------------------------------------------- */

const char *ifl_tokenizer_token_bytes(const ifl_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->offs[id + 1] - t->offs[id];
    return t->bytes + t->offs[id];
}

int ifl_tokenizer_decode(const ifl_tokenizer *t, const int32_t *ids, size_t n, char **out,
                         size_t *len, ifl_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return ifl_err_set(err, "token id %d at position %zu is outside the vocabulary (%d)",
                               ids[i], i, t->n_vocab);
        total += t->offs[ids[i] + 1] - t->offs[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s)
        return ifl_err_set(err, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = t->offs[ids[i] + 1] - t->offs[ids[i]];
        memcpy(s + o, t->bytes + t->offs[ids[i]], k);
        o += k;
    }
    s[o] = 0;
    *out = s;
    *len = o;
    return 0;
}
