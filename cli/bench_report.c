/* bench_report.c: percentiles and the printed report of the profilers (bench_report.h). */
#include "bench_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort(double *v, size_t n)
{
    if (n)
        qsort(v, n, sizeof *v, cmp_double);
}

double bench_pct(const double *sorted, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)ceil(p / 100.0 * (double)n);
    return sorted[i ? i - 1 : 0];
}

void bench_ttft(bench_result *r, double *ttft_ms, size_t n)
{
    bench_sort(ttft_ms, n);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ttft_ms[i];
    r->ttft_mean = n ? s / (double)n : 0;
    r->ttft_p50 = bench_pct(ttft_ms, n, 50);
    r->ttft_p90 = bench_pct(ttft_ms, n, 90);
    r->ttft_p99 = bench_pct(ttft_ms, n, 99);
}

void bench_itl(bench_result *r, double *itl_ms, size_t n)
{
    bench_sort(itl_ms, n);
    r->itl_p50 = bench_pct(itl_ms, n, 50);
    r->itl_p90 = bench_pct(itl_ms, n, 90);
    r->itl_p99 = bench_pct(itl_ms, n, 99);
}

void bench_result_print(const char *policy, const bench_result *r)
{
    printf("%s:\n", policy);
    printf("  response throughput   : %8.1f tokens/s (%lld tokens in %.2f s, %d requests%s)\n",
           r->throughput, (long long)r->tokens, r->wall_s, r->requests,
           r->failed ? ", some failed" : "");
    printf("  time to first token   : mean %7.1f ms   p50 %7.1f   p90 %7.1f   p99 %7.1f ms\n",
           r->ttft_mean, r->ttft_p50, r->ttft_p90, r->ttft_p99);
    printf("  inter-token latency   :                   p50 %7.1f   p90 %7.1f   p99 %7.1f ms\n",
           r->itl_p50, r->itl_p90, r->itl_p99);
    printf("  time to last response : mean %7.3f s\n", r->last_mean);
    fflush(stdout);
}

void bench_compare_print(const bench_result *it, const bench_result *st)
{
    if (st->ttft_p90 <= 0 || st->last_mean <= 0)
        return;
    printf("iterative vs static: p90 time to first token %.2fx, mean time to last response %.2fx, "
           "throughput %.2fx\n",
           it->ttft_p90 / st->ttft_p90, it->last_mean / st->last_mean,
           st->throughput > 0 ? it->throughput / st->throughput : 0);
    fflush(stdout);
}
