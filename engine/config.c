/* config.c: config.json reading, validation and writing (see config.h). */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void ifl_config_default(ifl_config *c)
{
    memset(c, 0, sizeof *c);
    c->n_layer = 12;
    c->n_head = 12;
    c->n_embd = 768;
    c->n_inner = 0;
    c->n_ctx = 1024;
    c->n_vocab = 50257;
    c->ln_eps = 1e-5;
    c->gelu = IFL_GELU_TANH;
    c->scale_attn_weights = 1;
    c->scale_attn_by_inverse_layer_idx = 0;
    c->tie_word_embeddings = 1;
    c->bos_token_id = 50256;
    c->eos_token_id = 50256;
}

/* Reads an optional integer field. Returns 0 if absent or valid, -1 (with err) if present and bad.
 */
static int get_int(const cJSON *root, const char *key, int32_t *out, int *present, const char *path,
                   ifl_err *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (present)
        *present = 0;
    if (!j || cJSON_IsNull(j))
        return 0;
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) ||
        fabs(j->valuedouble) > 2147483647.0)
        return ifl_err_set(err, "%s: field \"%s\" must be an integer", path, key);
    *out = (int32_t)j->valuedouble;
    if (present)
        *present = 1;
    return 0;
}

static int get_bool(const cJSON *root, const char *key, int *out, const char *path, ifl_err *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j))
        return 0;
    if (!cJSON_IsBool(j))
        return ifl_err_set(err, "%s: field \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

int ifl_config_load(ifl_config *c, const char *path, ifl_err *err)
{
    int rc = -1;
    size_t len = 0;
    char *text = NULL;
    cJSON *root = NULL;
    ifl_config_default(c);

    if (ifl_read_file(path, &text, &len, 1u << 20, err))
        goto out;
    root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        ifl_err_set(err, "%s: not valid JSON (error near byte %ld)", path,
                    ep ? (long)(ep - text) : -1L);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        ifl_err_set(err, "%s: not a JSON object", path);
        goto out;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt && !(cJSON_IsString(mt) && !strcmp(mt->valuestring, "gpt2"))) {
        ifl_err_set(err, "%s: field \"model_type\" is %s%s%s, expected \"gpt2\"", path,
                    cJSON_IsString(mt) ? "\"" : "",
                    cJSON_IsString(mt) ? mt->valuestring : "not a string",
                    cJSON_IsString(mt) ? "\"" : "");
        goto out;
    }
    int have_pos = 0, have_ctx = 0, have;
    int32_t n_ctx_legacy = 0;
    c->n_layer = c->n_head = c->n_embd = c->n_ctx = c->n_vocab = 0;
    if (get_int(root, "n_layer", &c->n_layer, NULL, path, err) ||
        get_int(root, "n_head", &c->n_head, NULL, path, err) ||
        get_int(root, "n_embd", &c->n_embd, NULL, path, err) ||
        get_int(root, "n_inner", &c->n_inner, NULL, path, err) ||
        get_int(root, "n_positions", &c->n_ctx, &have_pos, path, err) ||
        get_int(root, "n_ctx", &n_ctx_legacy, &have_ctx, path, err) ||
        get_int(root, "vocab_size", &c->n_vocab, NULL, path, err) ||
        get_int(root, "bos_token_id", &c->bos_token_id, NULL, path, err) ||
        get_int(root, "eos_token_id", &c->eos_token_id, &have, path, err) ||
        get_bool(root, "scale_attn_weights", &c->scale_attn_weights, path, err) ||
        get_bool(root, "scale_attn_by_inverse_layer_idx", &c->scale_attn_by_inverse_layer_idx, path,
                 err) ||
        get_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, path, err))
        goto out;
    if (!have_pos && have_ctx)
        c->n_ctx = n_ctx_legacy;
    const char *missing = !c->n_layer   ? "n_layer"
                          : !c->n_head  ? "n_head"
                          : !c->n_embd  ? "n_embd"
                          : !c->n_ctx   ? "n_positions"
                          : !c->n_vocab ? "vocab_size"
                                        : NULL;
    if (missing) {
        ifl_err_set(err, "%s: required field \"%s\" is missing or zero", path, missing);
        goto out;
    }
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
    if (eps) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0) || eps->valuedouble > 1) {
            ifl_err_set(err, "%s: field \"layer_norm_epsilon\" must be a number in (0, 1]", path);
            goto out;
        }
        c->ln_eps = eps->valuedouble;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    if (act) {
        if (!cJSON_IsString(act)) {
            ifl_err_set(err, "%s: field \"activation_function\" must be a string", path);
            goto out;
        }
        const char *a = act->valuestring;
        if (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_fast")) {
            c->gelu = IFL_GELU_TANH;
        } else if (!strcmp(a, "gelu")) {
            c->gelu = IFL_GELU_ERF;
        } else {
            ifl_err_set(err,
                        "%s: activation_function \"%.40s\" is not supported (GPT-2 uses "
                        "\"gelu_new\"; \"gelu\" is also accepted)",
                        path, a);
            goto out;
        }
    }
    int cross = 0;
    if (get_bool(root, "add_cross_attention", &cross, path, err))
        goto out;
    if (cross) {
        ifl_err_set(err, "%s: add_cross_attention is true: encoder-decoder GPT-2 is not supported",
                    path);
        goto out;
    }
    rc = ifl_config_validate(c, path, err);
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

int ifl_config_validate(const ifl_config *c, const char *what, ifl_err *err)
{
    struct {
        const char *name;
        int32_t v, lo, hi;
    } f[] = {
        {"n_layer", c->n_layer, 1, 512},        {"n_head", c->n_head, 1, 1024},
        {"n_embd", c->n_embd, 1, 65536},        {"n_positions", c->n_ctx, 1, 1 << 20},
        {"vocab_size", c->n_vocab, 1, 1 << 24}, {"n_inner", c->n_inner, 0, 1 << 20},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return ifl_err_set(err, "%s: field \"%s\" is %d, outside [%d, %d]", what, f[i].name,
                               f[i].v, f[i].lo, f[i].hi);
    if (c->n_embd % c->n_head)
        return ifl_err_set(err, "%s: n_embd %d is not divisible by n_head %d", what, c->n_embd,
                           c->n_head);
    if (c->eos_token_id < 0 || c->eos_token_id >= c->n_vocab)
        return ifl_err_set(err, "%s: eos_token_id %d is outside the vocabulary (%d)", what,
                           c->eos_token_id, c->n_vocab);
    return 0;
}

int ifl_config_write(const ifl_config *c, const char *path, ifl_err *err)
{
    int rc = -1;
    cJSON *r = cJSON_CreateObject();
    char *s = NULL;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(r, "model_type", "gpt2");
    cJSON_AddStringToObject(r, "activation_function",
                            c->gelu == IFL_GELU_ERF ? "gelu" : "gelu_new");
    cJSON_AddNumberToObject(r, "attn_pdrop", 0.1);
    cJSON_AddNumberToObject(r, "bos_token_id", c->bos_token_id);
    cJSON_AddNumberToObject(r, "embd_pdrop", 0.1);
    cJSON_AddNumberToObject(r, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    cJSON_AddNumberToObject(r, "layer_norm_epsilon", c->ln_eps);
    cJSON_AddNumberToObject(r, "n_ctx", c->n_ctx);
    cJSON_AddNumberToObject(r, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(r, "n_head", c->n_head);
    if (c->n_inner)
        cJSON_AddNumberToObject(r, "n_inner", c->n_inner);
    else
        cJSON_AddNullToObject(r, "n_inner");
    cJSON_AddNumberToObject(r, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(r, "n_positions", c->n_ctx);
    cJSON_AddNumberToObject(r, "resid_pdrop", 0.1);
    cJSON_AddBoolToObject(r, "scale_attn_weights", c->scale_attn_weights);
    cJSON_AddBoolToObject(r, "scale_attn_by_inverse_layer_idx", c->scale_attn_by_inverse_layer_idx);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(r, "vocab_size", c->n_vocab);
    s = cJSON_Print(r);
    if (!s) {
        ifl_err_set(err, "%s: out of memory", path);
        goto out;
    }
    if (ifl_write_file(path, s, strlen(s), err))
        goto out;
    rc = 0;
out:
    free(s);
    cJSON_Delete(r);
    return rc;
}
