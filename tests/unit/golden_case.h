/* golden_case.h: the golden fixtures' models (tests/fixtures/golden/manifest.json), rebuilt by
 * make-model from each case's parameters and checked against the fixture's sha256, for the tests
 * that run them (test_golden, test_q8_golden). */
#ifndef IFL_GOLDEN_CASE_H
#define IFL_GOLDEN_CASE_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "make_model.h"
#include "sha256.h"
#include "testutil.h"
#include "util.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define GOLDEN_HAVE_VALGRIND_H 1
#endif
#endif

typedef struct {
    int32_t *ids;
    int32_t n;
} id_list;

static inline id_list json_ids(const cJSON *arr)
{
    id_list l = {0};
    l.n = cJSON_GetArraySize(arr);
    l.ids = malloc((size_t)(l.n ? l.n : 1) * sizeof *l.ids);
    for (int32_t i = 0; i < l.n; i++)
        l.ids[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return l;
}

/* Whether this model's sha256 is checked: always, except under valgrind (IFL_TEST_QUICK, memcheck
 * running) after the first: hashing the 7 models (13-25 MB each) there was ~130 of
 * valgrind_test_golden's 310 s (2026-12-07), the hash of one model already runs the code under
 * memcheck, and the release, ASan/UBSan (also -O0) and aarch64 stages check every model's hash. */
static inline int golden_check_sha(void)
{
#ifdef GOLDEN_HAVE_VALGRIND_H
    static int hashed; /* models seen: the first is always hashed */
    if (hashed && test_quick() && RUNNING_ON_VALGRIND) {
        if (hashed++ == 1)
            printf("(under valgrind: the models after the first are not hashed)\n");
        return 0;
    }
    hashed = 1;
#endif
    return 1;
}

/* Writes case c's model into tmp/<name> (its path in dir, cap bytes); *stored gets the dtype the
 * case stores. 0, or 1 with the reason on stderr. */
static inline int golden_make_model(const cJSON *c, const char *tmp, char *dir, size_t cap,
                                    ifl_dtype *stored)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const cJSON *mp = cJSON_GetObjectItem(c, "model");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.seed = (uint64_t)cJSON_GetObjectItem(mp, "seed")->valuedouble;
    o.cfg.n_layer = (int32_t)cJSON_GetObjectItem(mp, "n_layer")->valuedouble;
    o.cfg.n_head = (int32_t)cJSON_GetObjectItem(mp, "n_head")->valuedouble;
    o.cfg.n_embd = (int32_t)cJSON_GetObjectItem(mp, "n_embd")->valuedouble;
    o.cfg.n_ctx = (int32_t)cJSON_GetObjectItem(mp, "n_ctx")->valuedouble;
    o.cfg.n_vocab = (int32_t)cJSON_GetObjectItem(mp, "n_vocab")->valuedouble;
    o.scale = cJSON_GetObjectItem(mp, "scale")->valuedouble;
    o.prefix = cJSON_IsTrue(cJSON_GetObjectItem(mp, "prefix"));
    o.mask_buffers = cJSON_IsTrue(cJSON_GetObjectItem(mp, "mask_buffers"));
    o.vocab_dir = NULL;
    const cJSON *opt;
    if ((opt = cJSON_GetObjectItem(mp, "n_inner")))
        o.cfg.n_inner = (int32_t)opt->valuedouble;
    if ((opt = cJSON_GetObjectItem(mp, "activation")))
        o.cfg.gelu = !strcmp(opt->valuestring, "gelu") ? IFL_GELU_ERF : IFL_GELU_TANH;
    if ((opt = cJSON_GetObjectItem(mp, "layer_norm_epsilon")))
        o.cfg.ln_eps = opt->valuedouble;
    if ((opt = cJSON_GetObjectItem(mp, "scale_attn_by_inverse_layer_idx")))
        o.cfg.scale_attn_by_inverse_layer_idx = cJSON_IsTrue(opt);
    if (ifl_dtype_parse(cJSON_GetObjectItem(mp, "dtype")->valuestring, &o.dtype)) {
        fprintf(stderr, "%s: bad dtype in manifest\n", name);
        return 1;
    }
    *stored = o.dtype;
    ifl_err err;
    char st_path[4300], hex[65];
    snprintf(dir, cap, "%s/%s", tmp, name);
    if (ifl_make_model(dir, &o, &err)) {
        fprintf(stderr, "%s: make-model: %s\n", name, err.msg);
        return 1;
    }
    if (!golden_check_sha())
        return 0;
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    if (ifl_sha256_file(st_path, hex, &err))
        return 1;
    const char *want_hex = cJSON_GetObjectItem(c, "safetensors_sha256")->valuestring;
    if (strcmp(hex, want_hex)) {
        fprintf(
            stderr,
            "FAIL %s: make-model wrote a different model (sha256 %s, fixture %s): the "
            "generator changed; regenerate the fixtures with tests/reference/make_fixtures.py\n",
            name, hex, want_hex);
        return 1;
    }
    return 0;
}

/* FIXTURE_DIR/manifest.json parsed (*root, for cJSON_Delete) and its non-empty "cases" array;
 * NULL with the reason on stderr. */
static inline const cJSON *golden_cases(const char *fixdir, cJSON **root)
{
    char path[4200], *text;
    size_t len;
    ifl_err err;
    snprintf(path, sizeof path, "%s/manifest.json", fixdir);
    *root = NULL;
    if (ifl_read_file(path, &text, &len, 1 << 24, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *cases = *root ? cJSON_GetObjectItem(*root, "cases") : NULL;
    if (!cJSON_IsArray(cases) || cJSON_GetArraySize(cases) == 0) {
        fprintf(stderr, "%s: no cases\n", path);
        cJSON_Delete(*root);
        *root = NULL;
        return NULL;
    }
    return cases;
}

#endif
