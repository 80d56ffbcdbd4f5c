/* bench_report.h: the figures both profilers print (`inflight bench` in-process and
 * `inflight client --bench` over the WebSocket), computed and printed the same way so their
 * numbers compare line for line. */
#ifndef IFL_BENCH_REPORT_H
#define IFL_BENCH_REPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double throughput;                              /* completion tokens / wall_s */
    double ttft_mean, ttft_p50, ttft_p90, ttft_p99; /* ms, send to first token */
    double itl_p50, itl_p90, itl_p99;               /* ms between a request's tokens */
    double last_mean;                               /* s, mean send to done */
    double wall_s;                                  /* first send to last done */
    int64_t tokens;
    int32_t requests, failed;
} bench_result;

/* Sorts v ascending in place. */
void bench_sort(double *v, size_t n);
/* The p-th percentile (nearest rank) of sorted values; 0 when n is 0. */
double bench_pct(const double *sorted, size_t n, double p);
/* Fills the TTFT fields from n unsorted samples (sorted in place). */
void bench_ttft(bench_result *r, double *ttft_ms, size_t n);
/* Fills the inter-token fields from n unsorted samples (sorted in place). */
void bench_itl(bench_result *r, double *itl_ms, size_t n);
void bench_result_print(const char *policy, const bench_result *r);
/* The "iterative vs static" line, if both have figures. */
void bench_compare_print(const bench_result *iterative, const bench_result *stat);

#endif
