/*
 * request.h - what one generation request is, wherever it travels: its
 * sampling parameters, the limits and flags it carries, the token the
 * engine emits for it (with its logprobs), a request's states and why it
 * finished.  Everything here is plain old data with no pointers, because it
 * lives in the shared segment's request slots (ipc/ring.h) as well as in
 * the engine's own memory; the API parser (server/api.c), the slots, the
 * engine and its sampler all include this one definition.
 */
#ifndef HY_IPC_REQUEST_H
#define HY_IPC_REQUEST_H

#include "common/hy.h"

/* ---- sampling ------------------------------------------------------------- */

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

/* The neutral parameters: temperature 1, every filter and penalty off. */
void hy_sampling_default(hy_sampling_t *p);

/* Checks every field against its allowed range.  n_vocab > 0 also checks
 * logit_bias token ids (pass 0 when the vocabulary is not known yet).  The
 * message names the field with its OpenAI spelling, e.g.
 * "top_p = 0: must be in (0, 1]".  Returns HY_OK or HY_ERANGE/HY_EINVAL. */
int hy_sampling_validate(const hy_sampling_t *p, int32_t n_vocab, char *err);

/* ---- the request ------------------------------------------------------------ */

/* A request's life.  FREE and CLAIMED are the request slot's (ipc/ring.h);
 * the engine sees QUEUED -> RUNNING -> one of the final three. */
enum {
    HY_REQ_FREE = 0,
    HY_REQ_CLAIMED,
    HY_REQ_QUEUED,
    HY_REQ_RUNNING,
    HY_REQ_DONE,
    HY_REQ_CANCELLED,
    HY_REQ_ERROR,
};

enum {
    HY_FINISH_NONE = 0,
    HY_FINISH_STOP,      /* stop token / stop sequence */
    HY_FINISH_LENGTH,    /* max_tokens or context full */
    HY_FINISH_CANCELLED,
    HY_FINISH_ERROR,
};

#define HY_REQ_MAX_STOP_IDS 16
#define HY_REQ_ERRMSG_LEN 160

/* What a request carries besides its prompt. */
typedef struct {
    hy_sampling_t sampling;
    int32_t max_tokens; /* >= 1 */
    int32_t priority;   /* lower runs first (vLLM's convention) */
    int32_t n_stop_ids; /* token ids that end generation (besides EOS) */
    int32_t stop_ids[HY_REQ_MAX_STOP_IDS];
    uint32_t flags;     /* HY_REQ_F_* */
    uint32_t grammar_len; /* bytes of the grammar spec (grammar/grammar_cache.h) that
                           * travel with the prompt; 0 = unconstrained.  Set by the
                           * submit call from its grammar argument. */
} hy_req_params_t;

#define HY_REQ_F_IGNORE_EOS 1u
/* The submitter will not read the tokens' logprobs (an API request without
 * "logprobs", `hyserve run`): the engine samples without the log-softmax
 * over the whole vocabulary, a double exp() per entry (2.5 ms of CPU a
 * token for Gemma 3's 262,144; the draw itself needs only the few top-k
 * candidates).  The token drawn is the same; logprob and n_top are 0. */
#define HY_REQ_F_NO_LOGPROBS 2u

/* The checks every submit makes, whatever the transport: max_tokens >= 1,
 * the stop ids' count, the sampling ranges (hy_sampling_validate without
 * the vocabulary), a non-empty prompt of non-negative ids. */
int hy_req_check(const hy_req_params_t *p, const int32_t *prompt, int32_t n, char *err);

/* One generated token as the API sees it (what a request slot's ring carries). */
/* hy_ring_tok_t.flags / hy_req_hist_t.flags */
#define HY_TOK_F_CLOSED 1u /* the grammar's token budget chose a token of this answer at or
                            * before this one (engine.c hy_engine_budget): the answer
                            * finishes "length", however complete it is */

typedef struct {
    int32_t token;
    uint32_t rng_draws; /* the sampler's random draws after choosing it (resume point) */
    uint32_t flags;     /* HY_TOK_F_* */
    float logprob;
    int32_t n_top; /* <= n_logprobs (and the segment's ring_top_logprobs) */
    int32_t top_ids[HY_SAMPLING_MAX_LOGPROBS];
    float top_logprobs[HY_SAMPLING_MAX_LOGPROBS];
} hy_ring_tok_t;

/* What a request slot remembers of each token pushed: enough for a new
 * engine to continue the request exactly where a dead one stopped (the
 * token joins the context, the sampler's random stream skips rng_draws). */
typedef struct {
    int32_t token;
    uint32_t rng_draws;
    uint32_t flags; /* HY_TOK_F_* */
} hy_req_hist_t;

#endif
