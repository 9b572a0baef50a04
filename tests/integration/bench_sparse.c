/*
 * bench_sparse.c - block-sparse attention against dense on a real model,
 * the numbers docs/sparse.md quotes (built by make check, not run by it:
 * minutes per case on this machine):
 *
 *   bench_sparse MODEL passkey N COUNT [settings]
 *       a 5-digit pass key hidden at COUNT depths of ~N tokens of filler,
 *       asked for at the end; greedy, dense and sparse: how often each
 *       finds it
 *   bench_sparse MODEL kl FILE N [settings]
 *       the first N tokens of FILE teacher-forced dense and sparse: at
 *       every 8th position from the threshold on, KL(dense || sparse) of
 *       the next-token distributions (median, mean, max) and how often
 *       their argmax agrees
 *   bench_sparse MODEL decode N STEPS [settings]
 *       N tokens of a fixed pseudo-random sequence prefilled, then STEPS
 *       decode steps, dense and sparse: the median user CPU time per step
 *       and the median system CPU time (getrusage: all threads; the
 *       machine is shared) and wall time (a spill file's reads wait on
 *       the kernel); --hot T [--out-pages P]: the
 *       sparse run keeps T tokens hot, the rest in an out arena of P
 *       pages (default: the plan's), --warm-pages W of them in RAM and
 *       the rest in a spill file under --spill-dir DIR.  The sparse run's
 *       peak RSS against the plan's process bound for the same runner (as
 *       hyserve plan prints it), exit 1 over it; --ref R: a second sequence of R tokens
 *       (R < N) decodes in the same run, its steps alternating with the
 *       long one's and timed apart, so that the ratio of the two compares
 *       them under the same load (the machine is shared and its speed
 *       drifts by tens of percent between runs minutes apart)
 *
 * settings: --threads T (default 1) --block B --topk K --topp P
 * --max-blocks C --sink S --local L --min M (tokens; defaults:
 * etc/hyserve.ini's [attention]); --dense 0:
 * decode and passkey skip the dense runs (a dense prefill of 1M tokens is
 * quadratic; the pass-key grid's dense half does not depend on the settings);
 * --first I, --last J: passkey runs positions I..J-1 of the grid only (a
 * grid resumed or split between processes; J 0: to the end).
 */
#include "engine/runner.h"
#include "kv/plan.h"
#include "model/tokenizer.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BS_CHUNK 256
#define BS_KL_EVERY 8

typedef struct {
    hy_model_t *m;
    hy_backend_t *be;
    hy_tok_t *tok;
    hy_kv_sparse_t sp; /* the sparse runs' settings */
    int dense;         /* decode, passkey: 0 skips the dense runs (dense prefill is
                        * quadratic; the passkey grid's dense half does not change
                        * with the sparse settings) */
    int32_t hot;       /* decode: the sparse run's hot window in tokens (0: all hot) */
    int32_t out_pages; /* and its out arena */
    int32_t warm_pages; /* of which in RAM (0: all), the rest in a spill file under spill_dir */
    const char *spill_dir;
    int first;          /* passkey: positions from this index on (0: all; a grid resumed) */
    int last;           /* and before this one (0: to the end) */
    int32_t ref;        /* decode: a reference sequence's tokens (0: none) */
    uint64_t reads;     /* blocks the sparse runs' tokens read (backend.h out_reads[2]) */
    uint64_t sparse_tokens; /* and how many such tokens, times hy_model_sparse_units */
    uint64_t image_bytes, model_bytes; /* measured (hy_plan_image_bytes): the program
                                          before the model, and what loading it added */
} bs_t;

static double bs_user_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
}

/* System CPU time: the spill file's reads and writes (from and to the page
 * cache) are the kernel's */
static double bs_sys_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double bs_wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bs_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double bs_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bs_cmp_double);
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bs_plan(bs_t *b, int32_t n_ctx, hy_plan_t *p, char *err);

static int bs_runner(bs_t *b, hy_runner_t *r, int32_t n_ctx, bool sparse, bool all, char *err)
{
    hy_runner_opts_t o;
    hy_plan_t p;
    int rc;

    hy_runner_opts_default(&o);
    o.max_tokens = BS_CHUNK;
    o.max_outputs = all ? BS_CHUNK : 1;
    o.max_seqs = sparse && b->ref > 0 ? 2 : 1;
    o.n_ctx = n_ctx;
    if (sparse)
        o.sparse = b->sp;
    if (sparse && b->hot > 0) {
        /* the pool: what the plan says a sequence with this window holds;
         * the rest of the context lives in the out arena */
        o.hot_blocks = b->hot / (b->sp.block_pages * o.page_tokens);
        o.out_pages = b->out_pages;
        o.out_warm = b->warm_pages;
        /* no --out-pages: the arena the plan sizes, as the engine does */
        if (b->out_pages == 0) {
            if ((rc = bs_plan(b, n_ctx, &p, err)) != HY_OK)
                return rc;
            o.out_pages = HY_MAX(1, p.out_seq_pages * o.max_seqs);
            o.out_warm = p.out_warm_pages;
        }
        o.out_dir = b->spill_dir;
        o.n_pages = o.max_seqs * hy_plan_hot_pages(&b->sp, o.hot_blocks, o.page_tokens, BS_CHUNK);
    }
    return hy_runner_init(r, b->m, b->be, &o, err);
}

/* The plan of the sparse run's runner (bs_runner), its process bound
 * measured with this process's program image: what `hyserve plan` prints
 * for the same configuration. */
static int bs_plan(bs_t *b, int32_t n_ctx, hy_plan_t *p, char *err)
{
    hy_plan_opts_t po = {n_ctx, b->ref > 0 ? 2 : 1, 16, BS_CHUNK, HY_DTYPE_F16, false, b->sp,
                         0, 0, b->out_pages, 1, b->image_bytes, b->model_bytes};
    int rc;

    if (b->hot > 0 && (rc = hy_plan_hot_window((uint32_t)b->hot, &b->sp, 16, BS_CHUNK, true,
                                               &po.hot_blocks, err)) != HY_OK)
        return rc;
    if ((rc = hy_plan_make_opts(p, b->m, b->be, &po, err)) != HY_OK || b->warm_pages == 0)
        return rc;
    /* --warm-pages in the plan's terms: bytes of pages */
    po.out_warm_bytes = (uint64_t)b->warm_pages * p->page_bytes;
    return hy_plan_make_opts(p, b->m, b->be, &po, err);
}

/* The process's peak resident memory (VmHWM) in MiB, or -1. */
static double bs_peak_rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;

    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

static int32_t bs_argmax(const float *x, int32_t n)
{
    int32_t best = 0;

    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* What a sparse run of positions 0..n-1 of s read: into b's counts. */
static void bs_count(bs_t *b, const hy_kv_seq_t *s, bool sparse, int32_t n)
{
    if (!sparse || n <= b->sp.min_tokens)
        return;
    b->reads += s->out_reads[2];
    b->sparse_tokens +=
        (uint64_t)(n - b->sp.min_tokens) * (uint64_t)hy_model_sparse_units(b->m);
}

/* Greedy continuation of ids (n_gen tokens) into out. */
static int bs_generate(bs_t *b, bool sparse, const int32_t *ids, int32_t n, int32_t *out,
                       int32_t n_gen, char *err)
{
    hy_runner_t r;
    hy_kv_seq_t s = {0};
    float *lg = malloc(sizeof(float) * (size_t)b->m->n_vocab);
    int rc;

    if (lg == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    if ((rc = bs_runner(b, &r, n + n_gen + 16, sparse, false, err)) != HY_OK) {
        free(lg);
        return rc;
    }
    rc = hy_runner_prefill(&r, &s, ids, n, lg, err);
    for (int32_t i = 0; i < n_gen && rc == HY_OK; i++) {
        hy_runner_item_t it = {&s, out + i, 1, false};

        out[i] = bs_argmax(lg, b->m->n_vocab);
        if (i + 1 < n_gen)
            rc = hy_runner_step(&r, &it, 1, lg, err);
    }
    bs_count(b, &s, sparse, n + n_gen - 1);
    hy_runner_seq_release(&r, &s);
    hy_runner_free(&r);
    free(lg);
    return rc;
}

static int bs_encode(bs_t *b, const char *text, bool bos, int32_t **ids, size_t *n, char *err)
{
    return hy_tok_encode_alloc(b->tok, text, strlen(text), bos, false, ids, n, err);
}

/* The prompt: filler to ~n tokens with the key's sentence at depth d (0..1). */
static char *bs_passkey_text(bs_t *b, int32_t n, double d, int key)
{
    static const char *fill = "The grass is green. The sky is blue. The sun is yellow. Here we "
                              "go. There and back again. ";
    char needle[160], *text;
    int32_t *ids = NULL;
    size_t per, reps, at, len;
    char err[HY_ERR_LEN];

    snprintf(needle, sizeof needle, "The pass key is %d. Remember it. %d is the pass key. ", key,
             key);
    if (bs_encode(b, fill, false, &ids, &per, err) != HY_OK)
        return NULL;
    free(ids);
    reps = (size_t)n / per;
    at = (size_t)(d * (double)reps);
    len = strlen(fill) * reps + strlen(needle) + 256;
    text = malloc(len);
    if (text == NULL)
        return NULL;
    strcpy(text, "There is an important piece of information hidden inside a lot of irrelevant "
                 "text. Find it and memorize it. ");
    for (size_t i = 0; i < reps; i++) {
        if (i == at)
            strcat(text, needle);
        strcat(text, fill);
    }
    strcat(text, "What is the pass key? The pass key is");
    return text;
}

/* Whether the answer out holds the key's digits as a number of their own
 * (" 166525" does not hold 66525: until 2026-12-04 a bare substring
 * counted, so earlier grids may count such answers as found). */
static bool bs_has_key(const char *out, const char *want)
{
    size_t n = strlen(want);

    for (const char *p = strstr(out, want); p; p = strstr(p + 1, want))
        if ((p == out || !isdigit((unsigned char)p[-1])) && !isdigit((unsigned char)p[n]))
            return true;
    return false;
}

static int bs_passkey(bs_t *b, int32_t n, int count)
{
    int found[2] = {0, 0}, end = b->last > 0 ? HY_MIN(b->last, count) : count;
    char err[HY_ERR_LEN] = "";

    for (int i = b->first; i < end; i++) {
        int key = 10000 + (int)((uint32_t)(i * 2654435761u) % 90000u);
        char *text = bs_passkey_text(b, n, count > 1 ? (double)i / (count - 1) * 0.95 : 0.5, key);
        int32_t *ids = NULL, gen[8];
        size_t nid = 0;

        if (text == NULL || bs_encode(b, text, true, &ids, &nid, err) != HY_OK) {
            fprintf(stderr, "bench_sparse: prompt: %s\n", err);
            free(text);
            return 1;
        }
        for (int sparse = b->dense ? 0 : 1; sparse < 2; sparse++) {
            char *out = NULL, want[16];
            size_t len;

            if (bs_generate(b, sparse, ids, (int32_t)nid, gen, 8, err) != HY_OK ||
                hy_tok_decode(b->tok, gen, 8, false, &out, &len, err) != HY_OK) {
                fprintf(stderr, "bench_sparse: %s\n", err);
                return 1;
            }
            snprintf(want, sizeof want, "%d", key);
            found[sparse] += bs_has_key(out, want);
            printf("depth %.2f (%zu tokens) key %d %s: '%s' %s",
                   count > 1 ? (double)i / (count - 1) * 0.95 : 0.5, nid, key,
                   sparse ? "sparse" : "dense ", out, bs_has_key(out, want) ? "found" : "MISSED");
            if (sparse && b->sparse_tokens > 0)
                printf(" (%.1f blocks a sparse token and KV head)",
                       (double)b->reads / (double)b->sparse_tokens);
            printf("\n");
            b->reads = b->sparse_tokens = 0;
            fflush(stdout);
            free(out);
        }
        free(ids);
        free(text);
    }
    if (b->dense)
        printf("passkey at ~%d tokens: dense %d/%d, sparse %d/%d\n", n, found[0],
               end - b->first, found[1], end - b->first);
    else
        printf("passkey at ~%d tokens: sparse %d/%d (dense not run)\n", n, found[1],
               end - b->first);
    return 0;
}

/* log-softmax of x into y (n). */
static void bs_log_softmax(const float *x, double *y, int32_t n)
{
    double mx = -INFINITY, s = 0;

    for (int32_t i = 0; i < n; i++)
        mx = fmax(mx, x[i]);
    for (int32_t i = 0; i < n; i++)
        s += exp(x[i] - mx);
    for (int32_t i = 0; i < n; i++)
        y[i] = x[i] - mx - log(s);
}

/* Teacher-forced logits of ids; rows at positions p >= from, p % every
 * == 0 copied to keep (in order). */
static int bs_rows(bs_t *b, bool sparse, const int32_t *ids, int32_t n, int32_t from,
                   float *keep, char *err)
{
    size_t nv = (size_t)b->m->n_vocab, k = 0;
    hy_runner_t r;
    hy_kv_seq_t s = {0};
    float *lg = malloc(sizeof(float) * nv * BS_CHUNK);
    int rc;

    if (lg == NULL)
        return hy_err(err, HY_ENOMEM, "out of memory");
    if ((rc = bs_runner(b, &r, n + 16, sparse, true, err)) != HY_OK) {
        free(lg);
        return rc;
    }
    for (int32_t done = 0; done < n && rc == HY_OK; done += BS_CHUNK) {
        int32_t c = HY_MIN(BS_CHUNK, n - done);
        hy_runner_item_t it = {&s, ids + done, c, true};

        rc = hy_runner_step(&r, &it, 1, lg, err);
        for (int32_t i = 0; i < c && rc == HY_OK; i++)
            if (done + i >= from && (done + i) % BS_KL_EVERY == 0)
                memcpy(keep + nv * k++, lg + nv * (size_t)i, sizeof(float) * nv);
    }
    hy_runner_seq_release(&r, &s);
    hy_runner_free(&r);
    free(lg);
    return rc;
}

static int bs_kl(bs_t *b, const char *file, int32_t n)
{
    FILE *f = fopen(file, "rb");
    char *text = NULL, err[HY_ERR_LEN] = "";
    int32_t *ids = NULL, nv = b->m->n_vocab, from = b->sp.min_tokens, rows, agree = 0;
    size_t nid = 0, len = 0;
    float *d = NULL, *s = NULL;
    double *ld = malloc(sizeof(double) * (size_t)nv), *ls = malloc(sizeof(double) * (size_t)nv);
    double *kl = NULL, sum = 0, mx = 0;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = (size_t)ftell(f)) == 0 ||
        (text = calloc(1, len + 1)) == NULL || fseek(f, 0, SEEK_SET) != 0 ||
        fread(text, 1, len, f) != len || bs_encode(b, text, true, &ids, &nid, err) != HY_OK ||
        nid < (size_t)n || from >= n) {
        fprintf(stderr, "bench_sparse: %s: cannot read %d tokens past --min %d (%zu) %s\n", file,
                n, from, nid, err);
        return 1;
    }
    fclose(f);
    rows = (n - 1) / BS_KL_EVERY - (from + BS_KL_EVERY - 1) / BS_KL_EVERY + 1;
    d = malloc(sizeof(float) * (size_t)nv * (size_t)rows);
    s = malloc(sizeof(float) * (size_t)nv * (size_t)rows);
    kl = malloc(sizeof(double) * (size_t)rows);
    if (!d || !s || !kl || !ld || !ls || bs_rows(b, false, ids, n, from, d, err) != HY_OK ||
        bs_rows(b, true, ids, n, from, s, err) != HY_OK) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        return 1;
    }
    for (int32_t i = 0; i < rows; i++) {
        double k = 0;

        bs_log_softmax(d + (size_t)i * nv, ld, nv);
        bs_log_softmax(s + (size_t)i * nv, ls, nv);
        for (int32_t v = 0; v < nv; v++)
            k += exp(ld[v]) * (ld[v] - ls[v]);
        kl[i] = k;
        sum += k;
        mx = fmax(mx, k);
        agree += bs_argmax(d + (size_t)i * nv, nv) == bs_argmax(s + (size_t)i * nv, nv);
    }
    printf("kl over %d positions (every %d from %d to %d): mean %.5f max %.5f median %.5f "
           "nats; top-1 agreement %.1f%%\n", rows, BS_KL_EVERY, from, n - 1, sum / rows, mx,
           bs_median(kl, rows), 100.0 * agree / rows);
    free(text);
    free(ids);
    free(d);
    free(s);
    free(kl);
    free(ld);
    free(ls);
    return 0;
}

static int bs_decode(bs_t *b, int32_t n, int32_t steps)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n + steps));
    double *t = malloc(sizeof(double) * (size_t)steps), med[2];
    double *ts = malloc(sizeof(double) * (size_t)steps);
    double *tw = malloc(sizeof(double) * (size_t)steps);
    double *tr = malloc(sizeof(double) * (size_t)steps);
    double *trw = malloc(sizeof(double) * (size_t)steps);
    char err[HY_ERR_LEN] = "";
    uint64_t x = 0x9e3779b97f4a7c15ull;

    for (int32_t i = 0; ids && i < n + steps; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)b->m->n_vocab);
    }
    med[0] = NAN;
    if (b->ref >= n) {
        fprintf(stderr, "bench_sparse: --ref %d is not shorter than %d\n", b->ref, n);
        return 1;
    }
    for (int sparse = b->dense ? 0 : 1; sparse < 2 && ids && t && ts && tw && tr && trw; sparse++) {
        hy_runner_t r;
        hy_kv_seq_t s = {0}, s2 = {0};
        bool ref = sparse && b->ref > 0;
        hy_outstore_counts_t oc0 = {0};
        uint64_t reads0[3] = {0, 0, 0};
        double t0 = bs_user_s();
        int rc = bs_runner(b, &r, n + steps + 16, sparse, false, err);

        if (rc == HY_OK)
            rc = hy_runner_prefill(&r, &s, ids, n, NULL, err);
        printf("%s: prefill %d tokens: %.1f s user\n", sparse ? "sparse" : "dense", n,
               bs_user_s() - t0);
        /* the reference: the same stream one token on */
        if (ref && rc == HY_OK)
            rc = hy_runner_prefill(&r, &s2, ids + 1, b->ref, NULL, err);
        /* what the decode steps alone take from the out arena */
        if (rc == HY_OK && r.out != NULL) {
            hy_outstore_sync(r.out);
            hy_outstore_counts(r.out, &oc0);
            reads0[0] = s.out_reads[0];
            reads0[1] = s.out_reads[1];
        }
        reads0[2] = s.out_reads[2];
        for (int32_t i = 0; i < steps && rc == HY_OK; i++) {
            hy_runner_item_t it = {&s, ids + n + i, 1, false};
            hy_runner_item_t it2 = {&s2, ids + 1 + b->ref + i, 1, false};
            double u = bs_user_s(), k = bs_sys_s(), w = bs_wall_s();

            rc = hy_runner_step(&r, &it, 1, NULL, err);
            t[i] = bs_user_s() - u;
            ts[i] = bs_sys_s() - k;
            tw[i] = bs_wall_s() - w;
            u = bs_user_s();
            w = bs_wall_s();
            if (ref && rc == HY_OK)
                rc = hy_runner_step(&r, &it2, 1, NULL, err);
            tr[i] = bs_user_s() - u;
            trw[i] = bs_wall_s() - w;
        }
        if (rc != HY_OK) {
            fprintf(stderr, "bench_sparse: %s\n", err);
            return 1;
        }
        med[sparse] = bs_median(t, steps);
        printf("%s: decode at %d: median %.3f ms user CPU per token over %d steps (system "
               "%.3f ms; wall %.3f ms)\n", sparse ? "sparse" : "dense", n, med[sparse] * 1e3,
               steps, bs_median(ts, steps) * 1e3, bs_median(tw, steps) * 1e3);
        if (ref) {
            double mref = bs_median(tr, steps), wl = bs_median(tw, steps);
            double wref = bs_median(trw, steps);

            /* user CPU counts every thread's (the out store's I/O thread
             * reads during the step after the one that asked): the wall
             * clock is the ratio a user sees, on a quiet machine */
            printf("sparse: decode at %d, steps alternating with the above: median %.3f ms "
                   "user CPU per token (wall %.3f ms); the long sequence runs at %.0f%% of its "
                   "speed (wall: %.0f%%)\n",
                   b->ref, mref * 1e3, wref * 1e3, 100.0 * mref / med[sparse],
                   100.0 * wref / wl);
        }
        if (sparse && n >= b->sp.min_tokens)
            printf("sparse: decode steps at %d: %.1f blocks read a step and KV head of a full "
                   "layer\n", n,
                   (double)(s.out_reads[2] - reads0[2]) / steps /
                       (double)hy_model_sparse_units(b->m));
        if (sparse && b->hot > 0) {
            hy_outstore_counts_t c;

            hy_outstore_sync(r.out); /* the last step's reads in flight */
            hy_outstore_counts(r.out, &c);
            printf("sparse: decode steps at %d, per step: %.1f blocks read from the out arena "
                   "(%.1f with a page from the spill file), %.1f pages brought up, %.1f KiB "
                   "read from the file, %.1f pages written to it\n", n,
                   (double)(s.out_reads[0] - reads0[0]) / steps,
                   (double)(s.out_reads[1] - reads0[1]) / steps,
                   (double)(c.promotions - oc0.promotions) / steps,
                   (double)(c.disk_read_bytes - oc0.disk_read_bytes) / 1024.0 / steps,
                   (double)(c.spills - oc0.spills) / steps);
            printf("sparse: hot window %d tokens: pool %d pages of %llu bytes, out arena %d of "
                   "%d pages used (%d in RAM, %d only in the spill file); RAM %.1f MiB, spill "
                   "file %.1f MiB\n", b->hot, r.opts.n_pages,
                   (unsigned long long)r.page_bytes[HY_KV_FULL], c.used, c.units, c.warm_used,
                   c.cold, (double)hy_runner_out_bytes(&r) / 1048576.0,
                   (double)c.file_bytes / 1048576.0);
            if (c.file_bytes > 0)
                printf("sparse: spill file: %llu pages written (%.1f MiB), %llu brought up, "
                       "%.1f MiB read (%.1f ms of reads on the I/O thread)\n",
                       (unsigned long long)c.spills, (double)c.disk_write_bytes / 1048576.0,
                       (unsigned long long)c.promotions, (double)c.disk_read_bytes / 1048576.0,
                       (double)c.disk_read_ns / 1e6);
        }
        printf("%s: peak RSS %.1f MiB so far\n", sparse ? "sparse" : "dense", bs_peak_rss_mib());
        if (sparse) {
            hy_plan_t p;
            double peak = bs_peak_rss_mib(), bound;

            if (bs_plan(b, n + steps + 16, &p, err) != HY_OK || peak < 0) {
                fprintf(stderr, "bench_sparse: plan: %s\n", peak < 0 ? "no VmHWM" : err);
                return 1;
            }
            bound = (double)p.process_total / 1048576.0;
            printf("sparse: peak RSS %.1f MiB, plan bound %.1f MiB (image %.1f + model %.1f "
                   "+ cache %.1f + working memory %.1f)\n", peak, bound,
                   (double)p.image_bytes / 1048576.0,
                   (double)HY_MAX(p.model_bytes, p.weights_total) / 1048576.0,
                   (double)(p.kv_total + p.state_total + p.cache_round_bytes) / 1048576.0,
                   (double)p.work_total / 1048576.0);
            if (peak > bound) {
                fprintf(stderr, "bench_sparse: peak RSS %.1f MiB exceeds the plan's bound "
                                "%.1f MiB\n", peak, bound);
                return 1;
            }
        }
        fflush(stdout);
        hy_runner_seq_release(&r, &s);
        if (ref)
            hy_runner_seq_release(&r, &s2);
        hy_runner_free(&r);
    }
    printf("decode at %d: dense %.3f ms, sparse %.3f ms per token (%.2fx)\n", n, med[0] * 1e3,
           med[1] * 1e3, med[0] / med[1]);
    free(ids);
    free(t);
    free(ts);
    free(tw);
    free(tr);
    free(trw);
    return 0;
}

/* --flag N pairs after the mode's arguments into the settings. */
static int bs_settings(int argc, char **argv, hy_config_attention_t *a, int *threads,
                       bs_t *b)
{
    for (int i = 0; i + 1 < argc; i += 2) {
        char *end;
        long v = strtol(argv[i + 1], &end, 10);

        if (strcmp(argv[i], "--topp") == 0) {
            a->sparse_topp = strtod(argv[i + 1], &end);
            if (end == argv[i + 1] || *end != '\0' ||
                !(a->sparse_topp >= 0 && a->sparse_topp <= 1)) {
                fprintf(stderr, "bench_sparse: bad value for --topp: '%s' (0..1)\n", argv[i + 1]);
                return -1;
            }
            continue;
        }
        /* every other number is a count: a whole non-negative int */
        if (strcmp(argv[i], "--spill-dir") != 0 &&
            (end == argv[i + 1] || *end != '\0' || v < 0 || v > INT32_MAX)) {
            fprintf(stderr, "bench_sparse: bad value for %s: '%s'\n", argv[i], argv[i + 1]);
            return -1;
        }
        if (strcmp(argv[i], "--spill-dir") == 0) b->spill_dir = argv[i + 1];
        else if (strcmp(argv[i], "--warm-pages") == 0) b->warm_pages = (int32_t)v;
        else if (strcmp(argv[i], "--first") == 0) b->first = (int)v;
        else if (strcmp(argv[i], "--last") == 0) b->last = (int)v;
        else if (strcmp(argv[i], "--threads") == 0) *threads = (int)v;
        else if (strcmp(argv[i], "--dense") == 0) b->dense = (int)v;
        else if (strcmp(argv[i], "--hot") == 0) b->hot = (int32_t)v;
        else if (strcmp(argv[i], "--out-pages") == 0) b->out_pages = (int32_t)v;
        else if (strcmp(argv[i], "--ref") == 0) b->ref = (int32_t)v;
        else if (strcmp(argv[i], "--block") == 0) a->sparse_block_tokens = (uint32_t)v;
        else if (strcmp(argv[i], "--topk") == 0) a->sparse_topk = (uint32_t)v;
        else if (strcmp(argv[i], "--max-blocks") == 0) a->sparse_max_blocks = (uint32_t)v;
        else if (strcmp(argv[i], "--sink") == 0) a->sink_tokens = (uint32_t)v;
        else if (strcmp(argv[i], "--local") == 0) a->local_tokens = (uint32_t)v;
        else if (strcmp(argv[i], "--min") == 0) a->sparse_min_tokens = (uint32_t)v;
        else {
            fprintf(stderr, "bench_sparse: unknown setting %s\n", argv[i]);
            return -1;
        }
    }
    if (argc % 2 != 0)
        fprintf(stderr, "bench_sparse: %s needs a value\n", argv[argc - 1]);
    return argc % 2 == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    hy_config_t *cfg = malloc(sizeof *cfg);
    hy_backend_opts_t bo = {.n_threads = 1};
    char err[HY_ERR_LEN] = "";
    bs_t b = {0};
    int threads = 1, rc = 2;

    if (argc < 5 || cfg == NULL) {
        fprintf(stderr, "usage: bench_sparse MODEL passkey N COUNT | kl FILE N | decode N STEPS "
                        "[--threads T --block B --topk K --topp P --max-blocks C --sink S "
                        "--local L --min M --dense 0|1 "
                        "--hot TOKENS --out-pages P [--warm-pages W --spill-dir DIR] --ref R --first I --last J]\n");
        return 2;
    }
    /* the program before anything it allocates: the bound's measured image */
    if ((b.image_bytes = hy_plan_image_bytes(err)) == 0) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        return 1;
    }
    hy_config_defaults(cfg);
    cfg->attention.sparse = HY_CONFIG_SPARSE_BLOCK;
    b.dense = 1;
    if (bs_settings(argc - 5, argv + 5, &cfg->attention, &threads, &b) != 0 ||
        hy_plan_sparse(&cfg->attention, 16, true, &b.sp, err) != HY_OK) {
        fprintf(stderr, "bench_sparse: bad settings %s\n", err);
        return 2;
    }
    bo.n_threads = threads;
    if (hy_backend_cpu_new(&b.be, &bo, err) != HY_OK ||
        hy_model_load(&b.m, argv[1], b.be, err) != HY_OK ||
        hy_tok_load(&b.tok, b.m->gguf, err) != HY_OK) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        return 1;
    }
    if ((b.model_bytes = hy_plan_image_bytes(err)) == 0) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        return 1;
    }
    b.model_bytes = b.model_bytes > b.image_bytes ? b.model_bytes - b.image_bytes : 0;
    printf("%s: sparse blocks of %d pages, top-%d", argv[1], b.sp.block_pages, b.sp.topk);
    if (b.sp.topp > 0)
        printf(" and on to top-p %g (at most %d)", (double)b.sp.topp, b.sp.max_blocks);
    printf(", %d sink + %d local blocks, from %d; %d thread(s)\n", b.sp.sink_blocks,
           b.sp.local_blocks, b.sp.min_tokens, threads);
    if (strcmp(argv[2], "passkey") == 0)
        rc = bs_passkey(&b, atoi(argv[3]), atoi(argv[4]));
    else if (strcmp(argv[2], "kl") == 0)
        rc = bs_kl(&b, argv[3], atoi(argv[4]));
    else if (strcmp(argv[2], "decode") == 0)
        rc = bs_decode(&b, atoi(argv[3]), atoi(argv[4]));
    hy_tok_free(b.tok);
    hy_model_free(b.m);
    b.be->i->free(b.be);
    free(cfg);
    return rc;
}
