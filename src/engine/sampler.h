/*
 * sampler.h - turns one row of logits into one token for one sequence.
 * hy_sampling_t (ipc/request.h) is the plain, copyable parameter block a
 * request carries; hy_sampler_t is the per-sequence state built from it:
 * its own PRNG and the token counts the repetition/presence/frequency
 * penalties need.
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

#include "ipc/request.h"

typedef struct {
    int32_t token;   /* the chosen token */
    float logprob;   /* its log-probability (see the header comment) */
    int32_t n_top;   /* = n_logprobs (or n_vocab if smaller) */
    int32_t top_ids[HY_SAMPLING_MAX_LOGPROBS];    /* best first, ties -> lowest id */
    float top_logprobs[HY_SAMPLING_MAX_LOGPROBS];
} hy_sample_out_t;

typedef struct hy_sampler hy_sampler_t;

/* Validates p and builds the per-sequence state (p is copied). */
int hy_sampler_create(hy_sampler_t **out, const hy_sampling_t *p, int32_t n_vocab,
                      char *err);
void hy_sampler_free(hy_sampler_t *s);

/* Records prompt tokens: they count for repetition_penalty (and fill the
 * penalty_last_n window) but not for presence/frequency penalties. */
int hy_sampler_accept_prompt(hy_sampler_t *s, const int32_t *tokens, size_t n);

/* Records one generated token (normally the one just sampled). */
int hy_sampler_accept(hy_sampler_t *s, int32_t token);

/* The random stream's position: numbers drawn so far (seed + position
 * reproduce the stream, which is how a request survives an engine crash:
 * ipc/request.h hy_req_hist_t). */
uint64_t hy_sampler_draws(const hy_sampler_t *s);
/* Moves a fresh stream on to position n (draws and discards). */
void hy_sampler_skip(hy_sampler_t *s, uint64_t n);

/* Picks a token from logits (n_vocab floats; bias and penalties are applied
 * in place).  Fills out (may be NULL) and returns the token id, or
 * HY_EINVAL when the logits contain NaN or are all -inf.  Does not accept
 * the token: call hy_sampler_accept() with it. */
int32_t hy_sampler_sample(hy_sampler_t *s, float *logits, hy_sample_out_t *out);
/* Draws again from logits hy_sampler_sample has already seen (bias and
 * penalties in place; the caller has since excluded tokens with -inf), the
 * random stream moving on: how a constrained row replaces a token that
 * would leave its grammar's end out of reach. */
int32_t hy_sampler_resample(hy_sampler_t *s, float *logits, hy_sample_out_t *out);

#endif
