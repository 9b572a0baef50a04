/*
 * request.c - the request parameters' defaults and range checks (request.h),
 * one place for the API parser, both request sources and the engine's
 * sampler, so a value refused anywhere is refused everywhere with the same
 * message.
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

int hy_req_check(const hy_req_params_t *p, const int32_t *prompt, int32_t n, char *err)
{
    int32_t i;
    int rc;

    if (n < 1)
        return hy_err(err, HY_ERANGE, "prompt has %d tokens: must be >= 1", n);
    if (p->max_tokens < 1)
        return hy_err(err, HY_ERANGE, "max_tokens = %d: must be >= 1", p->max_tokens);
    if (p->n_stop_ids < 0 || p->n_stop_ids > HY_REQ_MAX_STOP_IDS)
        return hy_err(err, HY_ERANGE, "%d stop token ids: at most %d", p->n_stop_ids,
                      HY_REQ_MAX_STOP_IDS);
    if ((rc = hy_sampling_validate(&p->sampling, 0, err)) != HY_OK)
        return rc;
    for (i = 0; i < n; i++)
        if (prompt[i] < 0)
            return hy_err(err, HY_EINVAL, "prompt token %d is negative (%d)", i, prompt[i]);
    return HY_OK;
}
