/*
 * test_winstat.c - the sliding-window statistics behind /metrics summaries
 * and tokens/s gauges (common/winstat.h), driven by a fake clock: bucket
 * error bound, nearest-rank quantiles against a sorted reference, the
 * window's exact edges (a value counts from its step until 12 steps later),
 * slot reuse after the window wrapped, values older than a slot's step
 * dropped, a reset abandoned by a dead writer taken over, rates over whole
 * seconds only, concurrent writers losing nothing, and a writer in another
 * process (the structures live in shared memory).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/winstat.h"
#include "test.h"

#define SEC 1000000000LL

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_buckets(void)
{
    double worst = 0;
    int prev = -1, mono = 1, exact = 1;
    uint64_t v;

    for (v = 0; v < 16; v++)
        exact &= hy_qwin_bucket(v) == (int)v && hy_qwin_bucket_value((int)v) == (double)v;
    HY_T_OK(exact, "values below 16 have a bucket each");
    for (v = 1; v < ((uint64_t)1 << 36); v = v + v / 7 + 1) {
        int b = hy_qwin_bucket(v);
        double err = fabs(hy_qwin_bucket_value(b) - (double)v) / (double)v;

        mono &= b >= prev;
        prev = b;
        if (err > worst)
            worst = err;
    }
    HY_T_OK(mono, "buckets grow with the value");
    HY_T_OK(worst <= 1.0 / 32 + 1e-12, "a bucket's value is within 1/32 of any value in it (worst %.4f)",
            worst);
    HY_T_OK(hy_qwin_bucket((uint64_t)1 << 40) == HY_QWIN_NBUCKETS - 1 &&
                hy_qwin_bucket(UINT64_MAX) == HY_QWIN_NBUCKETS - 1,
            "values beyond 2^36 land in the last bucket");
}

static void test_quantiles(hy_qwin_t *w)
{
    static const double q[3] = {0.5, 0.95, 0.99};
    uint64_t vals[2000], n;
    double out[3], worst = 0;
    int i, k;

    memset(w, 0, sizeof *w);
    n = hy_qwin_quantiles(w, 100 * SEC, q, 3, out);
    HY_T_OK(n == 0 && isnan(out[0]) && isnan(out[2]), "empty window: no values, NaN quantiles");
    srand(7);
    for (i = 0; i < 2000; i++) {
        vals[i] = (uint64_t)(rand() % 5000000) + 1; /* up to 5 s in microseconds */
        /* spread over one minute's steps */
        hy_qwin_observe(w, 100 * SEC + (int64_t)i * (59 * SEC / 2000), vals[i]);
    }
    qsort(vals, 2000, sizeof vals[0], cmp_u64);
    n = hy_qwin_quantiles(w, 159 * SEC, q, 3, out);
    for (k = 0; k < 3; k++) {
        uint64_t ref = vals[(size_t)ceil(q[k] * 2000) - 1];
        double err = fabs(out[k] - (double)ref) / (double)ref;
        if (err > worst)
            worst = err;
    }
    HY_T_OK(n == 2000 && worst <= 1.0 / 32 + 1e-9,
            "P50/P95/P99 of 2000 values within 1/32 of the nearest-rank ones (worst %.4f)", worst);
}

static void test_window_edges(hy_qwin_t *w)
{
    static const double q[1] = {0.5};
    double out[1];
    uint64_t a, b, c;

    memset(w, 0, sizeof *w);
    /* step 20 = [100 s, 105 s) counts until step 31 ends at 160 s */
    hy_qwin_observe(w, 100 * SEC, 1000);
    a = hy_qwin_quantiles(w, 100 * SEC, q, 1, out);
    b = hy_qwin_quantiles(w, 160 * SEC - 1, q, 1, out);
    c = hy_qwin_quantiles(w, 160 * SEC, q, 1, out);
    HY_T_OK(a == 1 && b == 1 && c == 0 && isnan(out[0]),
            "a value counts from its 5 s step for 60 s (at 0 s, 59.99 s: %llu, %llu; at 60 s: %llu)",
            (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);

    /* 60 s later the same slot serves a new step: the old value is gone */
    hy_qwin_observe(w, 160 * SEC, 7);
    a = hy_qwin_quantiles(w, 160 * SEC, q, 1, out);
    HY_T_OK(a == 1 && out[0] == 7.0, "a slot reused after the window wrapped holds only the new step");

    /* a writer whose clock read is older than the slot's step drops the value */
    hy_qwin_observe(w, 100 * SEC, 9);
    a = hy_qwin_quantiles(w, 160 * SEC, q, 1, out);
    HY_T_OK(a == 1 && out[0] == 7.0, "a value older than its slot's step is dropped");

    /* a writer died while resetting step 33's slot for step 33: the next
     * writer for a later step of that slot takes the reset over */
    atomic_store(&w->step[33 % HY_QWIN_STEPS].epoch, -(33 + 1));
    hy_qwin_observe(w, 166 * SEC, 5); /* step 33 itself: still "being reset", dropped */
    a = hy_qwin_quantiles(w, 166 * SEC, q, 1, out);
    hy_qwin_observe(w, (33 + HY_QWIN_STEPS) * 5 * SEC, 11);
    b = hy_qwin_quantiles(w, (33 + HY_QWIN_STEPS) * 5 * SEC, q, 1, out);
    HY_T_OK(a == 1 && b == 1 && out[0] == 11.0,
            "a reset abandoned mid-way is skipped by readers and taken over by a later writer");
}

static void test_rates(hy_rwin_t *w)
{
    uint64_t want10 = 0, want60 = 0;
    int64_t s;

    memset(w, 0, sizeof *w);
    HY_T_OK(hy_rwin_rate(w, 5 * SEC, 10) == 0.0, "no tokens: 0 per second");
    for (s = 100; s < 170; s++) {
        hy_rwin_add(w, s * SEC + SEC / 3, (uint32_t)(s % 7 + 1));
        hy_rwin_add(w, s * SEC + 2 * SEC / 3, 1);
        if (s >= 160)
            want10 += (uint64_t)(s % 7 + 2);
        if (s >= 110)
            want60 += (uint64_t)(s % 7 + 2);
    }
    hy_rwin_add(w, 170 * SEC + 1, 1000); /* the current second: not in the rate yet */
    HY_T_OK(hy_rwin_rate(w, 170 * SEC + SEC / 2, 10) == (double)want10 / 10 &&
                hy_rwin_rate(w, 170 * SEC + SEC / 2, 60) == (double)want60 / 60,
            "tokens/s over the last 10 s and 60 s count whole seconds only (%.1f, %.2f)",
            (double)want10 / 10, (double)want60 / 60);
    HY_T_OK(hy_rwin_rate(w, 171 * SEC, 1) == 1000.0, "the second that just ended counts in full");
    HY_T_OK(hy_rwin_rate(w, 300 * SEC, 60) == 0.0, "after two idle minutes: 0 per second");
    hy_rwin_add(w, 400 * SEC, 3);
    hy_rwin_add(w, 336 * SEC, 5); /* same slot, 64 s older: dropped */
    HY_T_OK(hy_rwin_rate(w, 401 * SEC, 1) == 3.0 && hy_rwin_rate(w, 337 * SEC, 1) == 0.0,
            "an add older than its slot's second is dropped");
    HY_T_OK(isnan(hy_rwin_rate(w, 10 * SEC, 64)) && isnan(hy_rwin_rate(w, 10 * SEC, 0)),
            "a window beyond 63 s (or empty) is refused with NaN");
}

typedef struct {
    hy_qwin_t *q;
    hy_rwin_t *r;
    int n;
} writer_t;

static void *writer(void *arg)
{
    writer_t *wr = arg;

    for (int i = 0; i < wr->n; i++) {
        hy_rwin_add(wr->r, 42 * SEC, 1);
        hy_qwin_observe(wr->q, 42 * SEC, (uint64_t)i);
    }
    return NULL;
}

static void test_concurrent(hy_qwin_t *q, hy_rwin_t *r)
{
    static const double qq[1] = {1.0};
    pthread_t t[4];
    writer_t wr = {q, r, 50000};
    double out[1];
    uint64_t n;
    int i;

    memset(q, 0, sizeof *q);
    memset(r, 0, sizeof *r);
    for (i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, writer, &wr);
    for (i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    n = hy_qwin_quantiles(q, 42 * SEC, qq, 1, out);
    HY_T_OK(n == 200000 && hy_rwin_rate(r, 43 * SEC, 1) == 200000.0,
            "4 threads x 50000 values and tokens: none lost (%llu)", (unsigned long long)n);
}

static void test_process(void)
{
    static const double qq[1] = {0.5};
    struct {
        hy_qwin_t q;
        hy_rwin_t r;
    } *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double out[1];
    int status = -1;
    pid_t pid;

    if (sh == MAP_FAILED) {
        HY_T_OK(0, "mmap for the cross-process check");
        return;
    }
    memset(sh, 0, sizeof *sh);
    pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 100; i++) {
            hy_qwin_observe(&sh->q, 500 * SEC, 250);
            hy_rwin_add(&sh->r, 500 * SEC, 2);
        }
        _exit(0);
    }
    waitpid(pid, &status, 0);
    HY_T_OK(status == 0 && hy_qwin_quantiles(&sh->q, 501 * SEC, qq, 1, out) == 100 &&
                fabs(out[0] - 250) <= 250.0 / 32 && hy_rwin_rate(&sh->r, 501 * SEC, 1) == 200.0,
            "a child process's values are read by its parent through shared memory");
    munmap(sh, sizeof *sh);
}

int main(void)
{
    hy_qwin_t *q = calloc(1, sizeof *q);
    hy_rwin_t *r = calloc(1, sizeof *r);

    test_buckets();
    test_quantiles(q);
    test_window_edges(q);
    test_rates(r);
    test_concurrent(q, r);
    test_process();
    free(q);
    free(r);
    return hy_t_done();
}
