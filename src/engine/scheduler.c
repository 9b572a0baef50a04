/*
 * scheduler.c - seniority order, chunk sizes and preemption victims for the
 * engine loop (see scheduler.h).  Everything here is a pure function of the
 * sequences' fields.
 */
#include "engine/scheduler.h"

#include <stdlib.h>

int hy_sched_cmp(const hy_sched_seq_t *a, const hy_sched_seq_t *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->order != b->order)
        return a->order < b->order ? -1 : 1;
    return 0;
}

static int hy_sched_qcmp(const void *x, const void *y)
{
    return hy_sched_cmp(*(hy_sched_seq_t *const *)x, *(hy_sched_seq_t *const *)y);
}

void hy_sched_sort(hy_sched_seq_t **v, int32_t n)
{
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, hy_sched_qcmp);
}

int32_t hy_sched_prompt_boundary(const hy_sched_seq_t *s, int32_t page_tokens)
{
    return s->n_prompt > 0 ? (s->n_prompt - 1) / page_tokens * page_tokens : 0;
}

int32_t hy_sched_chunk(const hy_sched_seq_t *s, int32_t budget, int32_t page_tokens,
                       int32_t ckpt_interval, bool hybrid)
{
    int32_t done = s->kv.n_tokens, chunk = HY_MIN(s->n_total - done, budget);
    int32_t next = INT32_MAX, pb;

    if (!hybrid || chunk <= 1)
        return chunk;
    /* The recurrent state exists only at the end of a chunk, so a chunk
     * that should leave a checkpoint behind must end exactly there. */
    if (ckpt_interval > 0)
        next = (done / ckpt_interval + 1) * ckpt_interval;
    pb = hy_sched_prompt_boundary(s, page_tokens);
    if (pb > done && pb < next)
        next = pb;
    if (s->branch > done && s->branch < next)
        next = s->branch;
    if (next < done + chunk)
        chunk = next - done;
    return chunk;
}

hy_sched_seq_t *hy_sched_victim(hy_sched_seq_t **v, int32_t n, const hy_sched_seq_t *asking)
{
    hy_sched_seq_t *best = NULL;
    int32_t i;

    for (i = 0; i < n; i++) {
        hy_sched_seq_t *s = v[i];

        if (s == asking || s->status != HY_SEQ_RUNNING || s->chunk > 0)
            continue;
        /* only juniors give way: a senior never loses its pages to a newer one */
        if (asking != NULL && hy_sched_cmp(s, asking) < 0)
            continue;
        if (best == NULL || hy_sched_cmp(s, best) > 0)
            best = s;
    }
    return best;
}
