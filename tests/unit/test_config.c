/* test_config.c: config.json as the four Hugging Face GPT-2 checkpoints write it (with their extra
 * fields: summary_*, task_specific_params, n_ctx next to n_positions, ...) parses to the right
 * shapes; defaults apply when optional fields are absent; make-model's config.json reads back. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "testutil.h"
#include "util.h"

static const char *const head =
    "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], "
    "\"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, "
    "\"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", "
    "\"n_ctx\": 1024, \"n_positions\": 1024, \"resid_pdrop\": 0.1, \"summary_activation\": null, "
    "\"summary_first_dropout\": 0.1, \"summary_proj_to_labels\": true, \"summary_type\": "
    "\"cls_index\", \"summary_use_proj\": true, \"task_specific_params\": {\"text-generation\": "
    "{\"do_sample\": true, \"max_length\": 50}}, \"vocab_size\": 50257, ";

int main(void)
{
    char dir[4096], path[4200], json[4096];
    test_tmpdir(dir, sizeof dir, "config");
    snprintf(path, sizeof path, "%s/config.json", dir);
    static const struct {
        const char *name;
        int L, H, C;
    } sizes[] = {{"gpt2", 12, 12, 768},
                 {"gpt2-medium", 24, 16, 1024},
                 {"gpt2-large", 36, 20, 1280},
                 {"gpt2-xl", 48, 25, 1600}};
    ifl_err err;
    for (size_t i = 0; i < 4; i++) {
        snprintf(json, sizeof json, "%s\"n_embd\": %d, \"n_head\": %d, \"n_layer\": %d}", head,
                 sizes[i].C, sizes[i].H, sizes[i].L);
        ifl_write_file(path, json, strlen(json), &err);
        ifl_config c;
        int rc = ifl_config_load(&c, path, &err);
        CHECKF(rc == 0, "%s: %s", sizes[i].name, err.msg);
        CHECK(c.n_layer == sizes[i].L && c.n_head == sizes[i].H && c.n_embd == sizes[i].C);
        CHECK(c.n_ctx == 1024 && c.n_vocab == 50257 && c.n_inner == 0 && c.ln_eps == 1e-5);
        CHECK(c.gelu == IFL_GELU_TANH && c.scale_attn_weights && c.tie_word_embeddings);
        CHECK(c.eos_token_id == 50256);
        printf("%-12s L=%d H=%d C=%d D=%d P=%d V=%d\n", sizes[i].name, c.n_layer, c.n_head,
               c.n_embd, c.n_embd / c.n_head, c.n_ctx, c.n_vocab);
    }
    /* Legacy configs: n_ctx only; minimal configs: defaults. */
    const char *legacy = "{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_ctx\": 128, "
                         "\"vocab_size\": 1000, \"eos_token_id\": 999, \"activation_function\": "
                         "\"gelu\", \"n_inner\": 100, \"scale_attn_by_inverse_layer_idx\": true}";
    ifl_write_file(path, legacy, strlen(legacy), &err);
    ifl_config c;
    CHECKF(ifl_config_load(&c, path, &err) == 0, "legacy: %s", err.msg);
    CHECK(c.n_ctx == 128 && c.n_inner == 100 && c.gelu == IFL_GELU_ERF &&
          c.scale_attn_by_inverse_layer_idx == 1 && c.ln_eps == 1e-5);
    /* Round trip through the writer make-model uses. */
    c.ln_eps = 3e-6;
    CHECK(ifl_config_write(&c, path, &err) == 0);
    ifl_config d;
    CHECKF(ifl_config_load(&d, path, &err) == 0, "round trip: %s", err.msg);
    CHECK(d.n_layer == 2 && d.n_ctx == 128 && d.n_inner == 100 && d.ln_eps == 3e-6 &&
          d.gelu == IFL_GELU_ERF && d.eos_token_id == 999 && d.scale_attn_by_inverse_layer_idx);
    test_rmdir(dir);
    return test_finish("test_config");
}
