/*
 * sample_ref.c - the device sampler's semantics written plainly on the host
 * (sample.h): a full sort where the kernel searches thresholds, the same
 * cut and the same draw.  The CUDA tests compare the kernel with it row by
 * row; test_cuda_sample checks it against engine/sampler.c's distribution.
 */
#include "backend/cuda/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float l;
    int32_t id;
} hy_sample_cand_t;

/* Best first: higher logit, then lower id (engine/sampler.c's order). */
static int hy_sample_cmp(const void *pa, const void *pb)
{
    const hy_sample_cand_t *a = pa, *b = pb;

    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int hy_sample_params_check(const hy_sample_params_t *p, char *err)
{
    if (!(p->temperature >= 0.0f && p->temperature <= 2.0f))
        return hy_err(err, HY_ERANGE, "temperature = %g: must be in [0, 2]", p->temperature);
    if (p->top_k < 0)
        return hy_err(err, HY_ERANGE, "top_k = %d: must be >= 0 (0 = off)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return hy_err(err, HY_ERANGE, "top_p = %g: must be in (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return hy_err(err, HY_ERANGE, "min_p = %g: must be in [0, 1]", p->min_p);
    if (p->n_logprobs < 0 || p->n_logprobs > HY_SAMPLE_MAX_TOP)
        return hy_err(err, HY_ERANGE, "top_logprobs = %d: must be in [0, %d]",
                      (int)p->n_logprobs, HY_SAMPLE_MAX_TOP);
    return HY_OK;
}

int hy_sample_ref(const float *logits, int32_t n_vocab, const hy_sample_params_t *p,
                  hy_sample_result_t *res, char *err)
{
    hy_sample_cand_t *c = NULL;
    unsigned char *member = NULL;
    float maxl = -INFINITY;
    int32_t best = 0, n, v, token;
    double z = 0.0, log_z;
    int rc;

    res->token = -1;
    res->logprob = 0.0f;
    res->n_top = 0;
    if (n_vocab <= 0)
        return hy_err(err, HY_EINVAL, "sample: n_vocab = %d: must be > 0", (int)n_vocab);
    if ((rc = hy_sample_params_check(p, err)) != HY_OK)
        return rc;
    for (v = 0; v < n_vocab; v++) {
        if (isnan(logits[v]))
            return HY_OK;
        if (logits[v] > maxl) {
            maxl = logits[v];
            best = v;
        }
    }
    if (isinf(maxl))
        return HY_OK;
    for (v = 0; v < n_vocab; v++)
        z += exp((double)logits[v] - maxl);
    log_z = log(z);
    c = malloc(sizeof *c * (size_t)n_vocab);
    member = calloc((size_t)n_vocab, 1);
    if (!c || !member) {
        rc = hy_err(err, HY_ENOMEM, "sample: out of memory for %d candidates", (int)n_vocab);
        goto out;
    }
    for (v = 0; v < n_vocab; v++)
        c[v] = (hy_sample_cand_t){logits[v], v};
    qsort(c, (size_t)n_vocab, sizeof *c, hy_sample_cmp);

    if (p->temperature == 0.0f || p->top_k == 1) {
        token = best;
    } else {
        double inv_t = 1.0 / p->temperature, total = 0.0, cum = 0.0, target;
        float thr = p->min_p > 0.0f ? maxl + logf(p->min_p) : -INFINITY;
        int32_t last = best;

        n = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
        if (p->top_p < 1.0f) {
            for (int32_t i = 0; i < n; i++)
                total += exp((double)c[i].l - maxl);
            target = (double)p->top_p * total;
            for (int32_t i = 0; i < n; i++) {
                cum += exp((double)c[i].l - maxl);
                if (cum >= target) {
                    n = i + 1;
                    break;
                }
            }
        }
        for (int32_t i = 0; i < n; i++)
            member[c[i].id] = c[i].l >= thr;
        /* the draw walks the vocabulary in id order: the same distribution
         * as the host's best-first walk, and what the kernel can scan */
        total = 0.0;
        for (v = 0; v < n_vocab; v++)
            if (member[v])
                total += exp(((double)logits[v] - maxl) * inv_t);
        target = hy_sample_uniform(p->seed, p->counter) * total;
        cum = 0.0;
        token = -1;
        for (v = 0; v < n_vocab && token < 0; v++) {
            if (!member[v])
                continue;
            cum += exp(((double)logits[v] - maxl) * inv_t);
            last = v;
            if (target < cum)
                token = v;
        }
        if (token < 0)
            token = last; /* the target landed in the rounding gap at the top */
    }
    res->token = token;
    res->logprob = (float)((double)logits[token] - maxl - log_z);
    res->n_top = HY_MIN(p->n_logprobs, n_vocab);
    for (int32_t i = 0; i < res->n_top; i++) {
        res->top_ids[i] = c[i].id;
        res->top_logprobs[i] = (float)((double)c[i].l - maxl - log_z);
    }
    rc = HY_OK;
out:
    free(c);
    free(member);
    return rc;
}
