/* util.c: file, path and clock helpers (see util.h). */
#include "util.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ifl_read_file(const char *path, char **out, size_t *len, size_t max_bytes, ifl_err *err)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ifl_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ifl_err_set(err, "%s: not a regular file", path);
    }
    if ((size_t)sb.st_size > max_bytes) {
        close(fd);
        return ifl_err_set(err, "%s: %lld bytes, larger than the %zu allowed", path,
                           (long long)sb.st_size, max_bytes);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return ifl_err_set(err, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return ifl_err_set(err, "%s: read failed: %s", path,
                               r < 0 ? strerror(e) : "short file");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int ifl_write_file(const char *path, const void *data, size_t len, ifl_err *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    if (!tmp)
        return ifl_err_set(err, "%s: out of memory", path);
    snprintf(tmp, plen + 8, "%s.tmp", path);
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ifl_err_set(err, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            ifl_err_set(err, "%s: write failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        ifl_err_set(err, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    return rc;
}

int ifl_copy_file(const char *src, const char *dst, ifl_err *err)
{
    char *buf;
    size_t len;
    if (ifl_read_file(src, &buf, &len, (size_t)1 << 30, err))
        return -1;
    int rc = ifl_write_file(dst, buf, len, err);
    free(buf);
    return rc;
}

int ifl_path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

int ifl_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int ifl_mkdir_p(const char *path, ifl_err *err)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return ifl_err_set(err, "%s: bad directory path", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return ifl_err_set(err, "%s: cannot create directory: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    struct stat sb;
    if (stat(path, &sb) < 0 || !S_ISDIR(sb.st_mode))
        return ifl_err_set(err, "%s: not a directory", path);
    return 0;
}

double ifl_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint64_t ifl_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

int ifl_n_cores(void)
{
    cpu_set_t set; /* the CPUs this process may run on (containers, taskset), not the host's */
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
