/* test_model_errors.c: every malformed model directory gives one clear error naming the file and
 * the problem, never a crash. Starts from a valid random model (make-model), then breaks one thing
 * at a time: config.json fields, the safetensors header (offsets, shapes, dtypes, overlaps,
 * length), truncation, missing tensors, the vocabulary files. Prints each error it got as evidence.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "make_model.h"
#include "model.h"
#include "testutil.h"
#include "tokenizer.h"
#include "util.h"

static char base[4096], work[4096];

static void path_in(char *buf, const char *dir, const char *name)
{
    snprintf(buf, 4200, "%s/%s", dir, name);
}

static char *slurp(const char *path, size_t *len)
{
    char *s;
    ifl_err err;
    if (ifl_read_file(path, &s, len, (size_t)1 << 30, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return s;
}

static void spit(const char *path, const void *data, size_t len)
{
    ifl_err err;
    if (ifl_write_file(path, data, len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

/* Fresh copy of the valid model in `work`. */
static void reset_work(void)
{
    static const char *files[] = {"config.json", "model.safetensors", "vocab.json", "merges.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[4200], b[4200];
        path_in(a, base, files[i]);
        path_in(b, work, files[i]);
        size_t len;
        char *s = slurp(a, &len);
        spit(b, s, len);
        free(s);
    }
}

/* Loads `work` (with opts) and checks that it fails with every `want` substring in the message. */
static void expect_load_error_opts(const char *what, const ifl_model_opts *opts, const char *want1,
                                   const char *want2)
{
    ifl_model m;
    ifl_err err = {{0}};
    int rc = ifl_model_load(&m, work, opts, &err);
    if (rc == 0) {
        fprintf(stderr, "FAIL %s: loaded without error\n", what);
        test_failures++;
        ifl_model_free(&m);
        return;
    }
    int ok = strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2));
    printf("%-34s -> %s\n", what, err.msg);
    if (!ok) {
        fprintf(stderr, "FAIL %s: message lacks '%s'%s%s%s\n", what, want1, want2 ? " / '" : "",
                want2 ? want2 : "", want2 ? "'" : "");
        test_failures++;
    }
}

static void expect_load_error(const char *what, const char *want1, const char *want2)
{
    expect_load_error_opts(what, NULL, want1, want2);
}

/* q8: asked of a load that keeps the checkpoint's layout; a weight it cannot hold (NaN, infinity,
 * beyond an f16 scale) names the tensor and the value's row and column. */
static void q8_errors(void)
{
    ifl_model_opts rows = {.convert = 1, .dtype = IFL_DTYPE_Q8, .cpu_layout = 0};
    expect_load_error_opts("q8 without the CPU's layout", &rows, "q8 weights are held only",
                           "runs f32, f16, bf16");
    static const float bad[3] = {NAN, INFINITY, 2e10f};
    for (int i = 0; i < 3; i++) {
        reset_work();
        char p[4200];
        path_in(p, work, "model.safetensors");
        ifl_safetensors st;
        ifl_err err;
        if (ifl_st_open(&st, p, &err)) {
            CHECKF(0, "%s", err.msg);
            return;
        }
        const ifl_st_tensor *t = ifl_st_find(&st, "h.1.mlp.c_proj.weight");
        CHECK(t && t->dtype == IFL_DTYPE_F32 && t->shape[1] == 16);
        size_t at = (size_t)((const char *)t->data - (const char *)st.map) + (5 * 16 + 9) * 4;
        ifl_st_close(&st);
        size_t len;
        char *s = slurp(p, &len);
        memcpy(s + at, &bad[i], 4);
        spit(p, s, len);
        free(s);
        ifl_model_opts q8 = {.convert = 1, .dtype = IFL_DTYPE_Q8, .cpu_layout = 1};
        char what[64];
        snprintf(what, sizeof what, "q8 of a weight %g", (double)bad[i]);
        expect_load_error_opts(what, &q8, "tensor 'h.1.mlp.c_proj.weight' value [5, 9]",
                               "cannot be held as q8");
    }
    reset_work();
}

/* ---- config.json edits ---- */

static void edit_config(const char *key, cJSON *value) /* value NULL: delete the key */
{
    char p[4200];
    path_in(p, work, "config.json");
    size_t len;
    char *s = slurp(p, &len);
    cJSON *root = cJSON_Parse(s);
    free(s);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (value)
        cJSON_AddItemToObject(root, key, value);
    char *out = cJSON_Print(root);
    spit(p, out, strlen(out));
    free(out);
    cJSON_Delete(root);
}

/* ---- safetensors header edits ---- */

typedef struct {
    cJSON *header;
    char *data;
    size_t data_len;
} st_parts;

static st_parts st_read(void)
{
    char p[4200];
    path_in(p, work, "model.safetensors");
    size_t len;
    char *s = slurp(p, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | (unsigned char)s[i];
    st_parts r;
    r.header = cJSON_ParseWithLength(s + 8, (size_t)hl);
    r.data_len = len - 8 - (size_t)hl;
    r.data = malloc(r.data_len + 1);
    memcpy(r.data, s + 8 + hl, r.data_len);
    free(s);
    return r;
}

/* Writes header text + data (data_len bytes of it) as model.safetensors. */
static void st_write_raw(const char *header, size_t hlen_claim, const char *data, size_t data_len)
{
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_len;
    char *buf = malloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((uint64_t)hlen_claim >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, data_len);
    char p[4200];
    path_in(p, work, "model.safetensors");
    spit(p, buf, total);
    free(buf);
}

static void st_write(st_parts *r, size_t data_len)
{
    char *h = cJSON_PrintUnformatted(r->header);
    st_write_raw(h, strlen(h), r->data, data_len);
    free(h);
    cJSON_Delete(r->header);
    free(r->data);
}

static cJSON *entry(st_parts *r, const char *name)
{
    cJSON *e = cJSON_GetObjectItemCaseSensitive(r->header, name);
    if (!e) {
        fprintf(stderr, "test setup: no tensor %s\n", name);
        exit(1);
    }
    return e;
}

static void set_offsets(cJSON *e, double b, double end)
{
    cJSON *o = cJSON_CreateArray();
    cJSON_AddItemToArray(o, cJSON_CreateNumber(b));
    cJSON_AddItemToArray(o, cJSON_CreateNumber(end));
    cJSON_ReplaceItemInObjectCaseSensitive(e, "data_offsets", o);
}

static double off(cJSON *e, int i)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), i)->valuedouble;
}

int main(void)
{
    test_tmpdir(base, sizeof base, "errbase");
    test_tmpdir(work, sizeof work, "errwork");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 2;
    o.cfg.n_head = 2;
    o.cfg.n_embd = 16;
    o.cfg.n_ctx = 32;
    o.vocab_dir =
        getenv("INFLIGHT_VOCAB_DIR") ? getenv("INFLIGHT_VOCAB_DIR") : INFLIGHT_DEFAULT_VOCAB_DIR;
    ifl_err err;
    if (ifl_make_model(base, &o, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    /* The unbroken model loads. */
    reset_work();
    {
        ifl_model m;
        int rc = ifl_model_load(&m, work, NULL, &err);
        CHECKF(rc == 0, "valid model failed: %s", err.msg);
        if (!rc)
            ifl_model_free(&m);
    }

    /* Directory and config.json */
    {
        char gone[4300];
        snprintf(gone, sizeof gone, "%s/does-not-exist", work);
        ifl_model m;
        int rc = ifl_model_load(&m, gone, NULL, &err);
        CHECK(rc != 0 && strstr(err.msg, "config.json") && strstr(err.msg, "cannot open"));
        printf("%-34s -> %s\n", "missing directory", err.msg);
    }
    reset_work();
    {
        char p[4200];
        path_in(p, work, "config.json");
        unlink(p);
        expect_load_error("missing config.json", "config.json", "cannot open");
        spit(p, "{\"n_layer\": 2,", 14);
        expect_load_error("config.json truncated JSON", "config.json", "not valid JSON");
        spit(p, "[1, 2]", 6);
        expect_load_error("config.json not an object", "config.json", "not a JSON object");
    }
    reset_work();
    edit_config("n_embd", NULL);
    expect_load_error("config.json without n_embd", "config.json", "\"n_embd\"");
    reset_work();
    edit_config("n_embd", cJSON_CreateString("sixteen"));
    expect_load_error("config.json n_embd a string", "config.json",
                      "\"n_embd\" must be an integer");
    reset_work();
    edit_config("n_head", cJSON_CreateNumber(3));
    expect_load_error("n_embd not divisible by n_head", "not divisible by n_head 3", NULL);
    reset_work();
    edit_config("n_layer", cJSON_CreateNumber(-4));
    expect_load_error("negative n_layer", "\"n_layer\" is -4", NULL);
    reset_work();
    edit_config("model_type", cJSON_CreateString("bert"));
    expect_load_error("model_type bert", "model_type", "bert");
    reset_work();
    edit_config("activation_function", cJSON_CreateString("relu"));
    expect_load_error("activation relu", "activation_function", "relu");
    reset_work();
    edit_config("layer_norm_epsilon", cJSON_CreateNumber(-1));
    expect_load_error("negative layer_norm_epsilon", "layer_norm_epsilon", NULL);
    reset_work();
    edit_config("n_layer", cJSON_CreateNumber(1));
    expect_load_error("config n_layer < weights", "belongs to layer 1", "n_layer 1");
    reset_work();
    edit_config("n_layer", cJSON_CreateNumber(3));
    expect_load_error("config n_layer > weights", "missing tensor 'h.2.", NULL);
    reset_work();
    edit_config("n_embd", cJSON_CreateNumber(32));
    expect_load_error("config n_embd != weights", "model.safetensors", "has shape [50257, 16]");

    /* model.safetensors: the container */
    reset_work();
    {
        char p[4200];
        path_in(p, work, "model.safetensors");
        unlink(p);
        expect_load_error("missing model.safetensors", "model.safetensors", "cannot open");
        spit(p, "abc", 3);
        expect_load_error("3-byte safetensors", "model.safetensors", "too short");
    }
    reset_work();
    st_write_raw("{}", 1u << 20, "", 0);
    expect_load_error("header length past EOF", "model.safetensors", "exceeds the file size");
    reset_work();
    st_write_raw("", 0, "", 0);
    expect_load_error("zero header length", "model.safetensors", "not a plausible");
    reset_work();
    st_write_raw("{\"wte.weight\": {\"dtype\": ", 25, "", 0);
    expect_load_error("header not JSON", "model.safetensors", "header is not valid JSON");
    reset_work();
    st_write_raw("[1,2,3]", 7, "", 0);
    expect_load_error("header is an array", "model.safetensors", "not a JSON object");
    reset_work();
    st_write_raw("{}", 2, "", 0);
    expect_load_error("header with no tensors", "missing tensor 'wte.weight'", NULL);

    /* model.safetensors: entries */
    reset_work();
    {
        st_parts r = st_read();
        cJSON_DeleteItemFromObjectCaseSensitive(entry(&r, "h.1.mlp.c_fc.bias"), "dtype");
        st_write(&r, r.data_len);
        expect_load_error("entry without dtype", "h.1.mlp.c_fc.bias", "no \"dtype\"");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "h.0.attn.c_proj.weight");
        cJSON_ReplaceItemInObjectCaseSensitive(e, "dtype", cJSON_CreateString("Q4_K"));
        st_write(&r, r.data_len);
        expect_load_error("unknown dtype Q4_K", "h.0.attn.c_proj.weight", "dtype Q4_K");
    }
    reset_work();
    {
        /* I64 of the same byte size: a known dtype the engine cannot compute with */
        st_parts r = st_read();
        cJSON *e = entry(&r, "ln_f.bias");
        cJSON_ReplaceItemInObjectCaseSensitive(e, "dtype", cJSON_CreateString("I64"));
        cJSON *shape = cJSON_CreateArray();
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(8));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "shape", shape);
        st_write(&r, r.data_len);
        expect_load_error("dtype I64", "ln_f.bias", "dtype I64; only F32, F16 and BF16");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "wpe.weight");
        set_offsets(e, off(e, 1), off(e, 0));
        st_write(&r, r.data_len);
        expect_load_error("end before begin", "wpe.weight", "end before begin");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "wpe.weight");
        set_offsets(e, -8, off(e, 1));
        st_write(&r, r.data_len);
        expect_load_error("negative offset", "wpe.weight", "not non-negative integers");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "h.0.ln_1.weight");
        cJSON_ReplaceItemInObjectCaseSensitive(e, "data_offsets", cJSON_CreateString("0-64"));
        st_write(&r, r.data_len);
        expect_load_error("data_offsets a string", "h.0.ln_1.weight", "data_offsets");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "h.0.ln_1.weight");
        set_offsets(e, off(e, 0), off(e, 0) + 60); /* 16 floats need 64 */
        st_write(&r, r.data_len);
        expect_load_error("size != shape x dtype", "h.0.ln_1.weight", "needs 64 bytes");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *a = entry(&r, "h.0.ln_1.weight"), *b = entry(&r, "h.0.ln_1.bias");
        set_offsets(b, off(a, 0), off(a, 1)); /* same bytes as another tensor */
        st_write(&r, r.data_len);
        expect_load_error("overlapping tensors", "overlap", NULL);
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON *e = entry(&r, "h.1.attn.c_attn.weight");
        cJSON *shape = cJSON_CreateArray();
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(-16));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(48));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "shape", shape);
        st_write(&r, r.data_len);
        expect_load_error("negative dimension", "h.1.attn.c_attn.weight", "not a valid dimension");
    }
    reset_work();
    {
        /* A self-consistent entry with the wrong shape for the config. */
        st_parts r = st_read();
        cJSON *e = entry(&r, "h.1.attn.c_attn.weight");
        cJSON *shape = cJSON_CreateArray();
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(48));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(16));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "shape", shape);
        st_write(&r, r.data_len);
        expect_load_error("transposed c_attn", "h.1.attn.c_attn.weight", "shape [48, 16]");
    }
    reset_work();
    {
        st_parts r = st_read();
        cJSON_DeleteItemFromObjectCaseSensitive(r.header, "h.1.mlp.c_fc.bias");
        st_write(&r, r.data_len);
        expect_load_error("missing tensor", "missing tensor 'h.1.mlp.c_fc.bias'", NULL);
    }
    reset_work();
    {
        /* cJSON keeps duplicate keys: the header names one tensor twice. */
        char p[4200];
        path_in(p, work, "model.safetensors");
        st_parts r = st_read();
        char *h = cJSON_PrintUnformatted(r.header);
        const char *dup =
            ",\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
        size_t hl = strlen(h);
        char *h2 = malloc(hl + strlen(dup) + 1);
        memcpy(h2, h, hl - 1);
        strcpy(h2 + hl - 1, dup);
        st_write_raw(h2, strlen(h2), r.data, r.data_len);
        free(h);
        free(h2);
        cJSON_Delete(r.header);
        free(r.data);
        expect_load_error("duplicate tensor name", "ln_f.bias", "appears twice");
    }
    reset_work();
    {
        /* Truncated download: the data section cut in half. */
        st_parts r = st_read();
        st_write(&r, r.data_len / 2);
        expect_load_error("truncated file", "model.safetensors", "truncated");
    }

    /* The vocabulary */
    reset_work();
    {
        ifl_tokenizer *t = NULL;
        char p[4200];
        int rc = ifl_tokenizer_load(&t, work, &err);
        CHECKF(rc == 0, "valid vocabulary failed: %s", err.msg);
        ifl_tokenizer_free(t);
        t = NULL;
        path_in(p, work, "merges.txt");
        unlink(p);
        rc = ifl_tokenizer_load(&t, work, &err);
        CHECK(rc != 0 && strstr(err.msg, "no vocabulary"));
        printf("%-34s -> %s\n", "missing merges.txt", err.msg);
        reset_work();
        path_in(p, work, "vocab.json");
        spit(p, "{\"a\": 0,", 8);
        rc = ifl_tokenizer_load(&t, work, &err);
        CHECK(rc != 0 && strstr(err.msg, "vocab.json"));
        printf("%-34s -> %s\n", "vocab.json truncated", err.msg);
        reset_work();
        path_in(p, work, "merges.txt");
        spit(p, "#version: 0.2\n\xc4\xa0 t\nthis has three\n", 30);
        rc = ifl_tokenizer_load(&t, work, &err);
        CHECK(rc != 0 && strstr(err.msg, "merges.txt:3"));
        printf("%-34s -> %s\n", "merges.txt bad line", err.msg);
        spit(p, "#version: 0.2\nzzzzqqq xxyy\n", 27);
        rc = ifl_tokenizer_load(&t, work, &err);
        CHECK(rc != 0 && strstr(err.msg, "merges.txt:2") &&
              strstr(err.msg, "not in the vocabulary"));
        printf("%-34s -> %s\n", "merges.txt unknown token", err.msg);
        ifl_tokenizer_free(t);
    }
    q8_errors();
    test_rmdir(base);
    test_rmdir(work);
    return test_finish("test_model_errors");
}
