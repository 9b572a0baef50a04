/*
 * local_req.h - one greedy request at a time through an in-process engine
 * (engine/local.h), for tests that compare what a request sampled with
 * and without a prefix hit: the tokens with their top-5 logprobs, the
 * cached-token count the engine reported, and two outputs compared bit
 * for bit or by their largest logprob gap.
 */
#ifndef HY_TEST_LOCAL_REQ_H
#define HY_TEST_LOCAL_REQ_H

#include <math.h>
#include <string.h>

#include "engine/local.h"

#define SW_GEN 4 /* tokens each request generates */

typedef struct {
    int32_t n;
    hy_ring_tok_t t[SW_GEN];
} sw_out_t;

static inline void sw_on_token(void *user, int32_t id, const hy_ring_tok_t *t)
{
    sw_out_t *o = &((sw_out_t *)user)[id];

    if (o->n < SW_GEN)
        o->t[o->n++] = *t;
}

/* Same tokens, logprobs and top alternatives, bit for bit. */
static inline bool sw_same(const sw_out_t *a, const sw_out_t *b)
{
    if (a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n; i++) {
        const hy_ring_tok_t *x = &a->t[i], *y = &b->t[i];

        if (x->token != y->token || memcmp(&x->logprob, &y->logprob, sizeof(float)) != 0 ||
            x->n_top != y->n_top ||
            memcmp(x->top_ids, y->top_ids, sizeof(int32_t) * (size_t)x->n_top) != 0 ||
            memcmp(x->top_logprobs, y->top_logprobs, sizeof(float) * (size_t)x->n_top) != 0)
            return false;
    }
    return true;
}

/* One request of prompt[0..n) through le; its output and cached count. */
static inline int sw_request(hy_local_engine_t *le, const int32_t *prompt, int32_t n, sw_out_t *outs,
                      sw_out_t *got, int32_t *n_cached, char *err)
{
    hy_req_params_t rp;
    int32_t id;
    int rc;

    memset(&rp, 0, sizeof rp);
    hy_sampling_default(&rp.sampling);
    rp.sampling.temperature = 0;
    rp.sampling.n_logprobs = 5;
    rp.flags = HY_REQ_F_IGNORE_EOS;
    rp.max_tokens = SW_GEN;
    if ((rc = hy_local_submit(le->local, &rp, prompt, n, &id, err)) != HY_OK)
        return rc;
    memset(&outs[id], 0, sizeof outs[id]);
    rc = hy_local_engine_wait(le, id, err);
    *got = outs[id];
    *n_cached = hy_local_status(le->local, id)->n_cached;
    hy_local_release(le->local, id);
    return rc;
}

/* Largest |logprob difference| over the sampled tokens and their top
 * alternatives (INFINITY when the tokens differ). */
static inline double sw_gap(const sw_out_t *a, const sw_out_t *b)
{
    double g = 0;

    if (a->n != b->n)
        return INFINITY;
    for (int32_t i = 0; i < a->n; i++) {
        if (a->t[i].token != b->t[i].token || a->t[i].n_top != b->t[i].n_top)
            return INFINITY;
        for (int32_t j = 0; j < a->t[i].n_top; j++) {
            if (a->t[i].top_ids[j] != b->t[i].top_ids[j])
                return INFINITY;
            g = fmax(g, fabs((double)a->t[i].top_logprobs[j] - b->t[i].top_logprobs[j]));
        }
    }
    return g;
}

#endif
