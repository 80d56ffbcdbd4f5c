/* safetensors.c: the .safetensors reader (mmap + header validation) and writer (see safetensors.h).
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u * 1024u * 1024u) /* the format's own limit */

static int64_t st_dtype_size(const char *dt)
{
    static const struct {
        const char *name;
        int64_t size;
    } sizes[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
        {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
        {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(sizes[i].name, dt))
            return sizes[i].size;
    return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

void ifl_st_format_shape(char *buf, size_t cap, int n_dims, const int64_t *shape)
{
    size_t at = 0;
    buf[0] = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

static int cmp_by_begin(const void *a, const void *b)
{
    const ifl_st_tensor *x = *(const ifl_st_tensor *const *)a,
                        *y = *(const ifl_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_entry(const char *path, const cJSON *item, ifl_st_tensor *t, uint64_t data_size,
                       ifl_err *err)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return ifl_err_set(err, "%s: header entry '%s' is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring[0])
        return ifl_err_set(err, "%s: tensor '%s' has no \"dtype\" string", path, name);
    if (strlen(dt->valuestring) >= sizeof t->dtype_name)
        return ifl_err_set(err, "%s: tensor '%s' has an unknown dtype '%.40s'", path, name,
                           dt->valuestring);
    if (!cJSON_IsArray(shape))
        return ifl_err_set(err, "%s: tensor '%s' has no \"shape\" array", path, name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return ifl_err_set(err, "%s: tensor '%s' has no \"data_offsets\" [begin, end] pair", path,
                           name);
    t->name = strdup(name);
    if (!t->name)
        return ifl_err_set(err, "%s: out of memory", path);
    strcpy(t->dtype_name, dt->valuestring);
    t->known_dtype = ifl_dtype_parse(t->dtype_name, &t->dtype) == 0 &&
                     (!strcmp(t->dtype_name, "F32") || !strcmp(t->dtype_name, "F16") ||
                      !strcmp(t->dtype_name, "BF16"));
    t->n_dims = cJSON_GetArraySize(shape);
    if (t->n_dims > IFL_ST_MAX_DIMS)
        return ifl_err_set(err, "%s: tensor '%s' has %d dimensions (at most %d supported)", path,
                           name, t->n_dims, IFL_ST_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < t->n_dims; i++) {
        uint64_t d;
        if (json_uint(cJSON_GetArrayItem(shape, i), &d) || d > ((uint64_t)1 << 40))
            return ifl_err_set(err, "%s: tensor '%s' shape[%d] is not a valid dimension", path,
                               name, i);
        t->shape[i] = (int64_t)d;
        if (d && numel > INT64_MAX / (int64_t)d)
            return ifl_err_set(err, "%s: tensor '%s' shape overflows", path, name);
        numel *= (int64_t)d;
    }
    t->numel = numel;
    if (json_uint(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        json_uint(cJSON_GetArrayItem(offs, 1), &t->end))
        return ifl_err_set(err, "%s: tensor '%s' data_offsets are not non-negative integers", path,
                           name);
    if (t->end < t->begin)
        return ifl_err_set(err, "%s: tensor '%s' data_offsets [%llu, %llu] end before begin", path,
                           name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return ifl_err_set(err,
                           "%s: tensor '%s' data_offsets [%llu, %llu] run past the end of the "
                           "data section (%llu bytes): the file is truncated or the header lies",
                           path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                           (unsigned long long)data_size);
    int64_t esize = st_dtype_size(t->dtype_name);
    if (esize) {
        if (numel > INT64_MAX / esize || (uint64_t)(numel * esize) != t->end - t->begin) {
            char shp[160];
            ifl_st_format_shape(shp, sizeof shp, t->n_dims, t->shape);
            return ifl_err_set(err,
                               "%s: tensor '%s' of shape %s %s needs %lld bytes but its "
                               "data_offsets [%llu, %llu] span %llu",
                               path, name, shp, t->dtype_name, (long long)(numel * esize),
                               (unsigned long long)t->begin, (unsigned long long)t->end,
                               (unsigned long long)(t->end - t->begin));
        }
    }
    return 0;
}

/* Maps the file at path read-only into st. */
static int map_file(ifl_safetensors *st, const char *path, ifl_err *err)
{
    int rc = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ifl_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        ifl_err_set(err, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        ifl_err_set(err, "%s: not a regular file", path);
        goto out;
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        ifl_err_set(err, "%s: file is %zu bytes, too short for a safetensors header", path, size);
        goto out;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        ifl_err_set(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(errno));
        goto out;
    }
    st->map = map;
    st->map_size = size;
    rc = 0;
out:
    close(fd);
    return rc;
}

/* The header's length (the first 8 bytes, little-endian) checked against the file; sets
 * st->data_offset. */
static int read_header_length(ifl_safetensors *st, const char *path, uint64_t *hlen, ifl_err *err)
{
    const unsigned char *b = st->map;
    size_t size = st->map_size;
    *hlen = 0;
    for (int i = 7; i >= 0; i--)
        *hlen = (*hlen << 8) | b[i];
    if (*hlen > size - 8)
        return ifl_err_set(err,
                           "%s: header length %llu exceeds the file size %zu: the file is "
                           "truncated or not a safetensors file",
                           path, (unsigned long long)*hlen, size);
    if (*hlen > ST_MAX_HEADER || *hlen < 2)
        return ifl_err_set(err, "%s: header length %llu is not a plausible safetensors header",
                           path, (unsigned long long)*hlen);
    st->data_offset = 8 + (size_t)*hlen;
    return 0;
}

/* Every entry of the header but __metadata__, as a tensor; no name twice. */
static int read_entries(ifl_safetensors *st, const char *path, const cJSON *root, ifl_err *err)
{
    uint64_t data_size = st->map_size - st->data_offset;
    int n = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        if (strcmp(it->string, "__metadata__"))
            n++;
    st->tensors = calloc((size_t)(n ? n : 1), sizeof *st->tensors);
    if (!st->tensors)
        return ifl_err_set(err, "%s: out of memory", path);
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it))
                return ifl_err_set(err, "%s: __metadata__ is not an object", path);
            continue;
        }
        for (int i = 0; i < st->n_tensors; i++)
            if (!strcmp(st->tensors[i].name, it->string))
                return ifl_err_set(err, "%s: tensor '%s' appears twice in the header", path,
                                   it->string);
        ifl_st_tensor *t = &st->tensors[st->n_tensors++];
        if (parse_entry(path, it, t, data_size, err))
            return -1;
        t->data = (const unsigned char *)st->map + st->data_offset + t->begin;
    }
    return 0;
}

/* No two tensors share bytes of the data section. */
static int check_overlaps(const ifl_safetensors *st, const char *path, ifl_err *err)
{
    int rc = 0;
    ifl_st_tensor **order = calloc((size_t)(st->n_tensors ? st->n_tensors : 1), sizeof *order);
    if (!order)
        return ifl_err_set(err, "%s: out of memory", path);
    for (int i = 0; i < st->n_tensors; i++)
        order[i] = &st->tensors[i];
    qsort(order, (size_t)st->n_tensors, sizeof *order, cmp_by_begin);
    for (int i = 1; i < st->n_tensors && !rc; i++)
        if (order[i]->begin < order[i - 1]->end)
            rc = ifl_err_set(err, "%s: tensors '%s' and '%s' overlap in the data section", path,
                             order[i - 1]->name, order[i]->name);
    free(order);
    return rc;
}

int ifl_st_open(ifl_safetensors *st, const char *path, ifl_err *err)
{
    memset(st, 0, sizeof *st);
    int rc = -1;
    cJSON *root = NULL;
    uint64_t hlen;
    if (map_file(st, path, err))
        goto out;
    st->path = strdup(path);
    if (!st->path) {
        ifl_err_set(err, "%s: out of memory", path);
        goto out;
    }
    if (read_header_length(st, path, &hlen, err))
        goto out;
    const char *header = (const char *)st->map + 8;
    root = cJSON_ParseWithLength(header, (size_t)hlen);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        long at = ep ? (long)(ep - header) : -1;
        ifl_err_set(err, "%s: header is not valid JSON (error near header byte %ld)", path, at);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        ifl_err_set(err, "%s: header is not a JSON object", path);
        goto out;
    }
    if (read_entries(st, path, root, err) || check_overlaps(st, path, err))
        goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc)
        ifl_st_close(st);
    return rc;
}

void ifl_st_close(ifl_safetensors *st)
{
    if (st->map)
        munmap(st->map, st->map_size);
    for (int i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    free(st->path);
    memset(st, 0, sizeof *st);
}

const ifl_st_tensor *ifl_st_find(const ifl_safetensors *st, const char *name)
{
    for (int i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name))
            return &st->tensors[i];
    return NULL;
}

/* ---- writer ---------------------------------------------------------------------------------- */

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp((*(const ifl_st_entry *const *)a)->name, (*(const ifl_st_entry *const *)b)->name);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int ifl_st_write(const char *path, int n, const ifl_st_entry *entries, ifl_err *err)
{
    int rc = -1, fd = -1;
    cJSON *root = NULL;
    char *json = NULL, *tmp = NULL;
    const ifl_st_entry **sorted = calloc((size_t)(n ? n : 1), sizeof *sorted);
    if (!sorted) {
        ifl_err_set(err, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++)
        sorted[i] = &entries[i];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_entry_name);

    root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const ifl_st_entry *e = sorted[i];
        int64_t numel = 1;
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        static const char *const dt[] = {"F32", "F16", "BF16"};
        cJSON_AddStringToObject(t, "dtype", dt[e->dtype]);
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e->n_dims; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->shape[d]));
            numel *= e->shape[d];
        }
        uint64_t bytes = (uint64_t)numel * ifl_dtype_size(e->dtype);
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        ifl_err_set(err, "%s: out of memory building the header", path);
        goto out;
    }
    size_t jlen = strlen(json);
    size_t padded = (jlen + 7) & ~(size_t)7;
    size_t plen = strlen(path);
    tmp = malloc(plen + 16);
    if (!tmp) {
        ifl_err_set(err, "%s: out of memory", path);
        goto out;
    }
    snprintf(tmp, plen + 16, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ifl_err_set(err, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if (write_all(fd, len8, 8) || write_all(fd, json, jlen) ||
        write_all(fd, spaces, padded - jlen)) {
        ifl_err_set(err, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const ifl_st_entry *e = sorted[i];
        int64_t numel = 1;
        for (int d = 0; d < e->n_dims; d++)
            numel *= e->shape[d];
        if (write_all(fd, e->data, (size_t)numel * ifl_dtype_size(e->dtype))) {
            ifl_err_set(err, "%s: write failed: %s", tmp, strerror(errno));
            goto out;
        }
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        fd = -1;
        ifl_err_set(err, "%s: cannot flush: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        ifl_err_set(err, "%s: cannot rename into place: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc && tmp)
        unlink(tmp);
    free(tmp);
    free(json);
    cJSON_Delete(root);
    free(sorted);
    return rc;
}
