/*
 * request.c - the request parameters' defaults and range checks (request.h),
 * one place for the API parser, the request slots and the engine's sampler,
 * so a value refused anywhere is refused everywhere with the same message.
 */
#include "ipc/request.h"

#include <string.h>

void hy_sampling_default(hy_sampling_t *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

int hy_sampling_validate(const hy_sampling_t *p, int32_t n_vocab, char *err)
{
    int32_t i;

    /* The !(x >= lo && x <= hi) form also rejects NaN. */
    if (!(p->temperature >= 0.0f && p->temperature <= 2.0f))
        return hy_err(err, HY_ERANGE, "temperature = %g: must be in [0, 2]", p->temperature);
    if (p->top_k < 0)
        return hy_err(err, HY_ERANGE, "top_k = %d: must be >= 0 (0 = off)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return hy_err(err, HY_ERANGE, "top_p = %g: must be in (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return hy_err(err, HY_ERANGE, "min_p = %g: must be in [0, 1]", p->min_p);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f))
        return hy_err(err, HY_ERANGE, "repetition_penalty = %g: must be in (0, 10]",
                      p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return hy_err(err, HY_ERANGE, "presence_penalty = %g: must be in [-2, 2]",
                      p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return hy_err(err, HY_ERANGE, "frequency_penalty = %g: must be in [-2, 2]",
                      p->frequency_penalty);
    if (p->penalty_last_n < 0)
        return hy_err(err, HY_ERANGE, "penalty_last_n = %d: must be >= 0 (0 = whole sequence)",
                      (int)p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > HY_SAMPLING_MAX_LOGPROBS)
        return hy_err(err, HY_ERANGE, "top_logprobs = %d: must be in [0, %d]",
                      (int)p->n_logprobs, HY_SAMPLING_MAX_LOGPROBS);
    if (p->n_logit_bias < 0 || p->n_logit_bias > HY_SAMPLING_MAX_LOGIT_BIAS)
        return hy_err(err, HY_ERANGE, "logit_bias: %d entries: must be at most %d",
                      (int)p->n_logit_bias, HY_SAMPLING_MAX_LOGIT_BIAS);
    for (i = 0; i < p->n_logit_bias; i++) {
        const hy_logit_bias_t *b = &p->logit_bias[i];

        if (b->token < 0 || (n_vocab > 0 && b->token >= n_vocab))
            return hy_err(err, HY_ERANGE, "logit_bias: token %d: must be in [0, %d]",
                          (int)b->token, (int)(n_vocab > 0 ? n_vocab - 1 : INT32_MAX));
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return hy_err(err, HY_ERANGE, "logit_bias[%d] = %g: must be in [-100, 100]",
                          (int)b->token, b->bias);
    }
    return HY_OK;
}
