/*
 * fault.h - allocation fault injection for the test programs that link
 * tests/unit/fault.c with -Wl,--wrap=malloc,... (tests/unit/fault.mk): every
 * malloc, calloc, realloc, strdup, strndup, aligned_alloc, posix_memalign
 * and mmap made by libhy.a or the test is counted, the Nth one after
 * hy_fault_arm(N) fails, and the blocks still live are counted, so one
 * scenario run leaks exactly when the live count differs before and after
 * it.  cJSON (a shared library) is routed through the same counters with
 * cJSON_InitHooks by hy_fault_init().
 *
 * hy_fault_loop runs a scenario once unarmed to count its allocations, then
 * once for each N = 1..count with the Nth failing: every run must either
 * fail with an error (code < 0 and a message) or succeed with the complete
 * result (the scenario checks that against the unarmed run), never crash,
 * and leave nothing allocated (the live count, and LeakSanitizer when the
 * build has it).
 */
#ifndef HY_TEST_FAULT_H
#define HY_TEST_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hooks cJSON into the counters; call first in main. */
void hy_fault_init(void);
/* From now on the nth allocation fails (n >= 1); 0 disarms.  Resets the
 * count, the fired flag and a pause. */
void hy_fault_arm(long nth);
/* While paused, allocations are neither counted nor failed: a scenario
 * checks its result (which may allocate) without moving the count. */
void hy_fault_pause(bool paused);
/* Allocations counted since the last hy_fault_arm. */
long hy_fault_count(void);
/* Whether the armed allocation has been refused. */
bool hy_fault_fired(void);
/* Blocks (and mappings) allocated through the wrappers and not yet freed. */
long hy_fault_live(void);
/* I/O faults (not counted with the allocations): from now on preads
 * deliver `after` bytes in all (shortening the call that reaches it), then
 * the next one returns 0 (err 0: the file ended) or fails with errno err;
 * err EINTR fails that one call only and disarms.  after < 0 disarms. */
void hy_fault_pread(long after, int err);

/* 64-bit FNV-1a over n bytes, from HY_FAULT_HASH0: a run's whole result as
 * one number, compared with the unarmed run's. */
#define HY_FAULT_HASH0 0xcbf29ce484222325ULL
static inline uint64_t hy_fault_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* One run of a scenario.  Returns < 0 (an HY_E* code) when the code under
 * test reported an error, with its message in why; 0 when it succeeded and
 * the result is complete; > 0 when it succeeded with a wrong or partial
 * result (why says what differs): always a defect. */
typedef int (*hy_fault_fn_t)(void *ctx, char *why, size_t why_len);

typedef struct {
    long allocations; /* the unarmed run's count (the loop's upper bound) */
    long runs;        /* armed runs made */
    long errors;      /* runs that reported an error */
    long absorbed;    /* runs whose failure the code absorbed (fell back) */
    long bad;         /* runs that broke a rule; the first is in first_bad */
    char first_bad[512];
} hy_fault_result_t;

/* The counting pass and the N loop, as described above.  max_runs > 0
 * bounds the loop (N strided evenly over 1..count, first and last kept) for
 * scenarios with many thousands of allocations; 0 = every N. */
void hy_fault_loop(hy_fault_fn_t fn, void *ctx, long max_runs, hy_fault_result_t *res);

/* The TAP line for res (include test.h first): no run broke a rule, and
 * the counting pass saw at least one allocation to fail. */
#ifdef HY_TEST_H
static void hy_fault_report(const char *what, const hy_fault_result_t *r)
    __attribute__((unused));
static void hy_fault_report(const char *what, const hy_fault_result_t *r)
{
    HY_T_OK(r->bad == 0 && r->allocations > 0 && r->runs > 0,
            "%s: %ld allocations, %ld runs each failing one: %ld errors, %ld absorbed, "
            "%ld broke a rule%s%s", what, r->allocations, r->runs, r->errors, r->absorbed,
            r->bad, r->bad ? ", first: " : "", r->first_bad);
}
#endif

#endif
