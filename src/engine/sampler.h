/*
 * sampler.h - turns one row of logits into one token for one sequence.
 * hy_sampling_t is the plain, copyable parameter block a request carries
 * (it has no pointers, so it can live in a shared-memory request slot);
 * hy_sampler_t is the per-sequence state built from it: its own PRNG and
 * the token counts the repetition/presence/frequency penalties need.
 *
 * Pipeline (llama.cpp's default chain):
 *   logit_bias -> penalties -> top_k -> top_p -> min_p -> temperature -> draw
 * top_k/top_p/min_p therefore see probabilities at temperature 1.
 *
 * Reported logprobs are log-softmax of the logits after logit_bias and the
 * penalties, at temperature 1 and before any truncation, over the whole
 * vocabulary (what OpenAI/vLLM report as "processed" logprobs).
 *
 * Penalty bookkeeping (vLLM semantics, with llama.cpp's window as an option):
 *   - presence/frequency penalties count GENERATED tokens only (OpenAI);
 *   - repetition_penalty applies to every token seen in the prompt or the
 *     generation (HF/vLLM): logit > 0 ? logit / p : logit * p;
 *   - penalty_last_n = 0 means "the whole sequence"; n > 0 restricts both
 *     counts to the last n accepted tokens (prompt tokens included), like
 *     llama.cpp's penalty_last_n.
 */
#ifndef HY_ENGINE_SAMPLER_H
#define HY_ENGINE_SAMPLER_H

#include "common/hy.h"

#define HY_SAMPLING_MAX_LOGPROBS 20    /* OpenAI top_logprobs upper bound */
#define HY_SAMPLING_MAX_LOGIT_BIAS 300 /* entries in one request's logit_bias */

typedef struct {
    int32_t token;
    float bias; /* added to the logit; OpenAI range -100..100 */
} hy_logit_bias_t;

typedef struct {
    float temperature;        /* 0..2; 0 = greedy (argmax, ties -> lowest id) */
    int32_t top_k;            /* >= 0; 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* 0..1; 0 = off */
    float repetition_penalty; /* (0, 10]; 1 = off */
    float presence_penalty;   /* -2..2 */
    float frequency_penalty;  /* -2..2 */
    int32_t penalty_last_n;   /* >= 0; 0 = whole sequence */
    uint64_t seed;            /* the server picks a random one when the request has none */
    int32_t n_logprobs;       /* 0..20 alternatives reported per token */
    int32_t n_logit_bias;     /* 0..HY_SAMPLING_MAX_LOGIT_BIAS */
    hy_logit_bias_t logit_bias[HY_SAMPLING_MAX_LOGIT_BIAS];
} hy_sampling_t;

typedef struct {
    int32_t token;   /* the chosen token */
    float logprob;   /* its log-probability (see the header comment) */
    int32_t n_top;   /* = n_logprobs (or n_vocab if smaller) */
    int32_t top_ids[HY_SAMPLING_MAX_LOGPROBS];    /* best first, ties -> lowest id */
    float top_logprobs[HY_SAMPLING_MAX_LOGPROBS];
} hy_sample_out_t;

typedef struct hy_sampler hy_sampler_t;

/* The neutral parameters: temperature 1, every filter and penalty off. */
void hy_sampling_default(hy_sampling_t *p);

/* Checks every field against its allowed range.  n_vocab > 0 also checks
 * logit_bias token ids (pass 0 when the vocabulary is not known yet).  The
 * message names the field with its OpenAI spelling, e.g.
 * "top_p = 0: must be in (0, 1]".  Returns HY_OK or HY_ERANGE/HY_EINVAL. */
int hy_sampling_validate(const hy_sampling_t *p, int32_t n_vocab, char *err);

/* Validates p and builds the per-sequence state (p is copied). */
int hy_sampler_create(hy_sampler_t **out, const hy_sampling_t *p, int32_t n_vocab,
                      char *err);
void hy_sampler_free(hy_sampler_t *s);

/* Records prompt tokens: they count for repetition_penalty (and fill the
 * penalty_last_n window) but not for presence/frequency penalties. */
int hy_sampler_accept_prompt(hy_sampler_t *s, const int32_t *tokens, size_t n);

/* Records one generated token (normally the one just sampled). */
int hy_sampler_accept(hy_sampler_t *s, int32_t token);

/* Picks a token from logits (n_vocab floats; bias and penalties are applied
 * in place).  Fills out (may be NULL) and returns the token id, or
 * HY_EINVAL when the logits contain NaN or are all -inf.  Does not accept
 * the token: call hy_sampler_accept() with it. */
int32_t hy_sampler_sample(hy_sampler_t *s, float *logits, hy_sample_out_t *out);

#endif
