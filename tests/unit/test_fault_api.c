/*
 * test_fault_api.c - every allocation the request parser makes fails once
 * (tests/unit/fault.h): each body of the realistic corpus
 * tests/fuzz/corpus/api, as every endpoint that accepts it (chat,
 * completions, infer, generate, tokenize, detokenize), cJSON's own
 * allocations included.  An armed run must answer 500 "Out of memory." with
 * HY_ENOMEM - not a 400 about the client's valid JSON, and never a request
 * missing a field - or parse to exactly what the unarmed run parsed; nothing
 * may stay allocated.  Built with --enable-fault-injection (implied by
 * --enable-sanitizers).
 */
#include "server/api.h"
#include "test.h"
#include "fault.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int kind; /* hy_api_kind_t, or FA_TOKENIZE / FA_DETOKENIZE */
    const char *body;
    size_t len;
    bool have_ref;
    uint64_t ref;
} fa_case_t;

enum { FA_TOKENIZE = 100, FA_DETOKENIZE };

static uint64_t fa_str(uint64_t h, const char *s)
{
    return s ? hy_fault_hash(hy_fault_hash(h, "s", 1), s, strlen(s) + 1) : hy_fault_hash(h, "-", 1);
}

#define FA_FIELD(h, x) hy_fault_hash((h), &(x), sizeof(x))

/* Every field of a parsed request, so a request that lost a message, a stop
 * string or a sampling parameter to a failed allocation cannot pass. */
static uint64_t fa_digest(const hy_api_req_t *r)
{
    const hy_sampling_t *s = &r->sampling;
    uint64_t h = HY_FAULT_HASH0;
    size_t i;

    h = FA_FIELD(h, r->kind);
    h = fa_str(h, r->model);
    for (i = 0; i < r->n_prompts; i++) {
        h = fa_str(h, r->prompts[i].text);
        h = FA_FIELD(h, r->prompts[i].text_len);
        h = hy_fault_hash(h, r->prompts[i].tokens, r->prompts[i].n_tokens * sizeof(int32_t));
    }
    for (i = 0; i < r->n_messages; i++) {
        const hy_chat_msg_t *m = &r->messages[i];

        h = fa_str(fa_str(fa_str(h, m->role), m->content), m->name);
        h = fa_str(fa_str(fa_str(h, m->tool_calls), m->tool_call_id), m->reasoning_content);
    }
    h = fa_str(fa_str(fa_str(h, r->tools), r->tool_name), r->template_kwargs);
    h = FA_FIELD(FA_FIELD(h, r->tool_choice), r->parallel_tool_calls);
    h = FA_FIELD(h, r->legacy_functions);
    h = FA_FIELD(FA_FIELD(h, r->enable_thinking), r->add_generation_prompt);
    h = FA_FIELD(FA_FIELD(h, r->max_tokens), r->seed_given);
    h = FA_FIELD(FA_FIELD(FA_FIELD(h, s->temperature), s->top_k), s->top_p);
    h = FA_FIELD(FA_FIELD(FA_FIELD(h, s->min_p), s->repetition_penalty), s->presence_penalty);
    h = FA_FIELD(FA_FIELD(FA_FIELD(h, s->frequency_penalty), s->penalty_last_n), s->seed);
    h = FA_FIELD(FA_FIELD(h, s->n_logprobs), s->n_logit_bias);
    for (i = 0; i < (size_t)s->n_logit_bias; i++)
        h = FA_FIELD(FA_FIELD(h, s->logit_bias[i].token), s->logit_bias[i].bias);
    for (i = 0; i < r->n_stop; i++)
        h = hy_fault_hash(h, r->stop[i], r->stop_len[i]);
    h = FA_FIELD(FA_FIELD(FA_FIELD(h, r->n_stop), r->logprobs), r->n);
    h = FA_FIELD(FA_FIELD(FA_FIELD(h, r->stream), r->include_usage), r->echo);
    h = FA_FIELD(FA_FIELD(h, r->ignore_eos), r->skip_special_tokens);
    h = FA_FIELD(h, r->include_stop_str_in_output);
    return fa_str(h, r->user);
}

static uint64_t fa_tok_digest(const hy_api_tok_req_t *t)
{
    uint64_t h = HY_FAULT_HASH0;

    h = fa_str(fa_str(h, t->text), t->model);
    h = FA_FIELD(FA_FIELD(h, t->text_len), t->add_special);
    return hy_fault_hash(h, t->tokens, t->n_tokens * sizeof(int32_t));
}

static int fa_run(void *ctx, char *why, size_t why_len)
{
    fa_case_t *c = ctx;
    hy_api_req_t *r = NULL;
    hy_api_tok_req_t *t = NULL;
    hy_api_error_t e;
    uint64_t d = 0;
    int rc;

    memset(&e, 0, sizeof e);
    if (c->kind == FA_TOKENIZE)
        rc = hy_api_parse_tokenize(c->body, c->len, &t, &e);
    else if (c->kind == FA_DETOKENIZE)
        rc = hy_api_parse_detokenize(c->body, c->len, &t, &e);
    else
        rc = hy_api_parse((hy_api_kind_t)c->kind, c->body, c->len, &r, &e);
    hy_fault_pause(true);
    if (rc != HY_OK) {
        snprintf(why, why_len, "%d %s: %s", e.status, e.type ? e.type : "?", e.message);
        if (r != NULL || t != NULL) {
            snprintf(why, why_len, "an error (%d %s) that still handed out a request",
                     e.status, e.message);
            return 1;
        }
        if (hy_fault_fired() && (rc != HY_ENOMEM || e.status != 500)) {
            snprintf(why, why_len, "out of memory answered as the client's fault: %d %s: %s",
                     e.status, e.type ? e.type : "?", e.message);
            return 1;
        }
        return rc;
    }
    d = r ? fa_digest(r) : fa_tok_digest(t);
    hy_api_req_free(r);
    hy_api_tok_req_free(t);
    if (!c->have_ref) {
        c->ref = d;
        c->have_ref = true;
    }
    if (d != c->ref) {
        snprintf(why, why_len, "accepted, but parsed to something else than the unarmed run");
        return 1;
    }
    return 0;
}

static const struct {
    int kind;
    const char *name;
} fa_kinds[] = {
    {HY_API_CHAT, "chat"},         {HY_API_COMPLETIONS, "completions"},
    {HY_API_INFER, "infer"},       {HY_API_GENERATE, "generate"},
    {FA_TOKENIZE, "tokenize"},     {FA_DETOKENIZE, "detokenize"},
};

/* Whether the endpoint accepts body at all (unarmed). */
static bool fa_accepts(int kind, const char *body, size_t len)
{
    fa_case_t c = {kind, body, len, false, 0};
    char why[512];

    return fa_run(&c, why, sizeof why) == 0;
}

int main(void)
{
    const char *dir = hy_t_srcpath("tests/fuzz/corpus/api");
    char path[4096], *names[64], what[300];
    int n_names = 0, i, covered[HY_ARRAY_LEN(fa_kinds)] = {0};
    struct dirent *de;
    DIR *dp;

    hy_fault_init();
    if ((dp = opendir(dir)) == NULL) {
        HY_T_OK(0, "corpus %s: cannot open it", dir);
        return hy_t_done();
    }
    while ((de = readdir(dp)) != NULL && n_names < 64)
        if (de->d_name[0] != '.')
            names[n_names++] = strdup(de->d_name);
    closedir(dp);
    HY_T_OK(n_names >= 10, "corpus %s: %d bodies", dir, n_names);
    for (i = 0; i < n_names; i++) {
        static char body[65536];
        size_t len = 0, k;
        bool any = false;
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if ((f = fopen(path, "rb")) != NULL) {
            len = fread(body, 1, sizeof body, f);
            fclose(f);
        }
        for (k = 0; k < HY_ARRAY_LEN(fa_kinds); k++) {
            fa_case_t c = {fa_kinds[k].kind, body, len, false, 0};
            hy_fault_result_t res;

            if (len == 0 || !fa_accepts(c.kind, body, len))
                continue;
            any = true;
            covered[k]++;
            hy_fault_loop(fa_run, &c, 0, &res);
            snprintf(what, sizeof what, "%s as %s", names[i], fa_kinds[k].name);
            hy_fault_report(what, &res);
        }
        HY_T_OK(any, "%s (%zu bytes) is accepted by some endpoint", names[i], len);
        free(names[i]);
    }
    for (i = 0; i < (int)HY_ARRAY_LEN(fa_kinds); i++)
        HY_T_OK(covered[i] > 0, "the corpus has %d bodies for %s", covered[i], fa_kinds[i].name);
    return hy_t_done();
}
