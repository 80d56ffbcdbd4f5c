/* test_prefault.c: the CPU backend's prefault parameter (backend.h). With prefault 1 the KV pool's
 * pages are resident as soon as the backend is made (the process's resident set grows by at least
 * the pool, read from /proc/self/statm); with 0 they are taken only as steps reach them (it grows
 * by less than half the pool); and a step on a prefaulted backend gives the same logits, bit for
 * bit, as on one that was not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "make_model.h"
#include "model.h"
#include "testutil.h"

#define POOL_BLOCKS 2048

/* Resident bytes of this process, or -1. */
static long long resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, resident = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (long long)sysconf(_SC_PAGESIZE);
}

/* Makes a backend (prefault pf), checks the resident set's growth against its pool, runs one
 * prompt and copies its logits into out (V floats). */
static int one_backend(const ifl_model *m, int pf, float *out)
{
    ifl_err err;
    ifl_backend_params bp = {.max_seqs = 1, .max_tokens = 16, .kv_blocks = POOL_BLOCKS,
                             .n_threads = 2, .prefault = pf};
    long long before = resident_bytes();
    CHECKF(before >= 0, "/proc/self/statm is not readable");
    ifl_backend *be = ifl_cpu_backend_new(m, &bp, &err);
    if (!be) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    long long grown = resident_bytes() - before;
    const ifl_config *c = &m->cfg;
    long long pool = (long long)POOL_BLOCKS * be->params.kv_block_size * c->n_layer * 2 *
                     c->n_embd * (long long)sizeof(float);
    printf("prefault %d: pool %.1f MiB, resident set grew by %.1f MiB\n", pf,
           (double)pool / 1048576.0, (double)grown / 1048576.0);
    if (pf)
        CHECKF(grown >= pool, "prefault 1: %lld bytes resident of a %lld-byte pool", grown, pool);
    else
        CHECKF(grown < pool / 2, "prefault 0: %lld bytes resident of a %lld-byte pool already",
               grown, pool);
    int32_t tokens[5] = {11, 3, 7, 1, 9}, run_start[2] = {0, 5}, pos0[1] = {0}, nblk[1] = {1};
    int32_t block = POOL_BLOCKS - 1; /* the last block: the far end of the pool */
    const int32_t *tables[1] = {&block};
    ifl_batch b = {.n_seqs = 1, .n_tokens = 5, .tokens = tokens, .run_start = run_start,
                   .pos0 = pos0, .block_tables = tables, .n_blocks = nblk};
    int rc = ifl_backend_step(be, &b, out, &err);
    CHECKF(rc == 0, "step: %s", err.msg);
    ifl_backend_free(be);
    return 0;
}

int main(void)
{
    test_select_isa("test_prefault");
    char dir[4096];
    test_tmpdir(dir, sizeof dir, "prefault");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 2;
    o.cfg.n_head = 2;
    o.cfg.n_embd = 64;
    o.cfg.n_ctx = 64;
    o.cfg.n_vocab = 256;
    o.cfg.eos_token_id = o.cfg.bos_token_id = 255;
    o.seed = 3;
    o.vocab_dir = NULL;
    ifl_err err;
    ifl_model m;
    ifl_model_opts mo = {0};
    if (ifl_make_model(dir, &o, &err) || ifl_model_load(&m, dir, &mo, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    float *lazy = calloc((size_t)m.cfg.n_vocab, sizeof *lazy);
    float *pre = calloc((size_t)m.cfg.n_vocab, sizeof *pre);
    if (!lazy || !pre)
        return 1;
    test_failures += one_backend(&m, 0, lazy);
    test_failures += one_backend(&m, 1, pre);
    CHECK(memcmp(lazy, pre, (size_t)m.cfg.n_vocab * sizeof *pre) == 0);
    free(lazy);
    free(pre);
    ifl_model_free(&m);
    test_rmdir(dir);
    return test_finish("test_prefault");
}
