/*
 * cmd_bench_url.c - `hyserve bench --url http://HOST:PORT`: N client threads
 * keep N streamed completions in flight against an OpenAI-compatible server
 * over plain HTTP/1.1 (one connection per request, as nginx talks to the
 * workers), read each SSE stream as it arrives and timestamp every content
 * event.  Reports requests ok/failed, aggregate output tokens/s and the
 * p50/p90/p99 of time to first token, time per output token and end-to-end
 * latency, plus one `json:` line for scripts.  TLS is not supported: the
 * tool measures servers on the same host or a trusted network.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/hy.h"
#include "tools/bench_url.h"
#include "tools/cli.h"

/* What one request measured; times in ms from its send. */
typedef struct {
    bool ok;
    double ttft, e2e, tpot; /* tpot < 0: fewer than 2 tokens */
    long tokens;
    long prompt_tokens; /* from usage, -1 when the server sent none */
    char why[160];      /* failure reason */
} hy_burl_result_t;

typedef struct {
    /* options */
    char host[256], port[16], path[512];
    char auth[512];
    const char *model;
    bool chat;
    bool sessions; /* X-Session-Id per request: spreads a pool's hosts (nginx hash) */
    long concurrency, requests, prompt_tokens, max_tokens, timeout_s, prompt_seed;
    struct addrinfo *addr;
    /* shared state */
    atomic_long next;
    hy_burl_result_t *res; /* [requests] */
} hy_burl_t;

/* Per-stream parser state: HTTP head, chunked framing, SSE lines. */
typedef struct {
    char head[8192];
    size_t head_len;
    bool head_done, chunked;
    int status;
    /* chunked decoder: 0 size line, 1 data, 2 CRLF after data, 3 trailer/done */
    int cstate;
    char cline[64];
    size_t cline_len;
    unsigned long cleft;
    /* SSE */
    char *line;
    size_t line_len, line_cap;
    bool done, finished, error;
    char errmsg[120];
    long events, content_events, usage_tokens, usage_prompt;
    double t_first, t_last;
    bool have_first;
} hy_burl_stream_t;

/* A small vocabulary of common words: with a leading space each is one
 * token in the usual BPE vocabularies, so --prompt-tokens P words give a
 * prompt of about P tokens without needing the server's tokenizer. */
static const char *const hy_burl_words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "world", "life", "work", "house", "water", "city", "book", "story",
    "music", "river"};

/* Records why request r failed: "what" or "what: detail". */
static void hy_burl_fail(hy_burl_result_t *r, const char *what, const char *detail)
{
    r->ok = false;
    snprintf(r->why, sizeof r->why, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

/* Builds the JSON body for request i into a malloc'd string. */
static char *hy_burl_body(const hy_burl_t *b, long i)
{
    size_t cap = 512 + (size_t)b->prompt_tokens * 12 + (b->model ? strlen(b->model) * 2 : 0);
    char *s = malloc(cap), *p;
    uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1) + (uint64_t)b->prompt_seed;
    long k;

    if (s == NULL)
        return NULL;
    p = s;
    p += sprintf(p, "{");
    if (b->model) {
        /* the model name is echoed as given; refuse quotes rather than escape */
        p += sprintf(p, "\"model\":\"%s\",", b->model);
    }
    p += sprintf(p, b->chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"" : "\"prompt\":\"");
    /* a distinct opening per request so no server gets a free prefix hit */
    p += sprintf(p, "Request %ld-%ld:", b->prompt_seed, i);
    for (k = 2; k < b->prompt_tokens; k++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        p += sprintf(p, " %s", hy_burl_words[(rng >> 33) % (sizeof hy_burl_words /
                                                             sizeof hy_burl_words[0])]);
    }
    p += sprintf(p, b->chat ? "\"}]," : "\",");
    sprintf(p, "\"max_tokens\":%ld,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
               "\"ignore_eos\":true,\"temperature\":0}", b->max_tokens);
    return s;
}

/* Finds "key": in json and returns the first byte of its value, or NULL. */
static const char *hy_burl_json_val(const char *json, const char *key)
{
    size_t kl = strlen(key);
    const char *p = json;

    while ((p = strstr(p, key)) != NULL) {
        const char *q = p + kl;

        if (p > json && p[-1] == '"' && *q == '"') {
            q++;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == ':') {
                q++;
                while (*q == ' ' || *q == '\t')
                    q++;
                return q;
            }
        }
        p = q;
    }
    return NULL;
}

/* One complete SSE line. */
static void hy_burl_sse_line(hy_burl_stream_t *st, const char *line, bool chat, double now)
{
    const char *d, *v;

    if (strncmp(line, "data:", 5) != 0)
        return; /* comments, event:, id: and the blank separators */
    d = line + 5;
    if (*d == ' ')
        d++;
    if (strcmp(d, "[DONE]") == 0) {
        st->done = true;
        return;
    }
    st->events++;
    if (hy_burl_json_val(d, "choices") == NULL && (v = hy_burl_json_val(d, "error")) != NULL) {
        const char *m = hy_burl_json_val(v, "message");

        st->error = true;
        snprintf(st->errmsg, sizeof st->errmsg, "error event: %.100s", m ? m : v);
        return;
    }
    /* a content event: a non-empty "text" (completions) or delta "content" (chat) */
    v = hy_burl_json_val(d, chat ? "content" : "text");
    if (v != NULL && v[0] == '"' && v[1] != '"') {
        if (!st->have_first) {
            st->have_first = true;
            st->t_first = now;
        }
        st->t_last = now;
        st->content_events++;
    }
    v = hy_burl_json_val(d, "finish_reason");
    if (v != NULL && *v == '"')
        st->finished = true;
    v = hy_burl_json_val(d, "completion_tokens");
    if (v != NULL)
        st->usage_tokens = strtol(v, NULL, 10);
    v = hy_burl_json_val(d, "prompt_tokens");
    if (v != NULL)
        st->usage_prompt = strtol(v, NULL, 10);
}

/* Appends payload bytes to the SSE line buffer, handling each full line. */
static int hy_burl_payload(hy_burl_stream_t *st, const char *p, size_t n, bool chat, double now)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (st->line_len > 0 && st->line[st->line_len - 1] == '\r')
                st->line_len--;
            st->line[st->line_len] = '\0';
            hy_burl_sse_line(st, st->line, chat, now);
            st->line_len = 0;
            continue;
        }
        if (st->line_len + 2 > st->line_cap) {
            size_t cap = st->line_cap ? st->line_cap * 2 : 4096;
            char *nl;

            if (cap > ((size_t)16 << 20))
                return -1; /* a single SSE line over 16 MiB: not a token stream */
            nl = realloc(st->line, cap);
            if (nl == NULL)
                return -1;
            st->line = nl;
            st->line_cap = cap;
        }
        st->line[st->line_len++] = p[i];
    }
    return 0;
}

/* Undoes chunked transfer encoding incrementally; -1 on a framing error. */
static int hy_burl_body_bytes(hy_burl_stream_t *st, const char *p, size_t n, bool chat,
                              double now)
{
    size_t i = 0;

    if (!st->chunked)
        return hy_burl_payload(st, p, n, chat, now);
    while (i < n) {
        if (st->cstate == 0) { /* size line: hex [;ext] CRLF */
            char c = p[i++];

            if (c == '\n') {
                char *end;

                st->cline[st->cline_len] = '\0';
                st->cleft = strtoul(st->cline, &end, 16);
                if (end == st->cline)
                    return -1;
                st->cline_len = 0;
                st->cstate = st->cleft == 0 ? 3 : 1;
            } else if (st->cline_len + 1 < sizeof st->cline) {
                st->cline[st->cline_len++] = c;
            } else {
                return -1;
            }
        } else if (st->cstate == 1) {
            size_t k = HY_MIN(n - i, (size_t)st->cleft);

            if (hy_burl_payload(st, p + i, k, chat, now) != 0)
                return -1;
            i += k;
            st->cleft -= k;
            if (st->cleft == 0)
                st->cstate = 2;
        } else if (st->cstate == 2) { /* the CRLF that closes a chunk */
            if (p[i++] == '\n')
                st->cstate = 0;
        } else {
            return 0; /* last chunk seen; ignore trailers */
        }
    }
    return 0;
}

/* Connects, sends request i and reads its stream to the end. */
static void hy_burl_one(hy_burl_t *b, long i, hy_burl_result_t *r)
{
    hy_burl_stream_t st;
    char *body = hy_burl_body(b, i), *req = NULL, buf[16384], sess[80] = "";
    size_t req_len = 0, off = 0;
    struct timeval tv = {b->timeout_s, 0};
    double t0;
    int fd = -1;

    memset(&st, 0, sizeof st);
    memset(r, 0, sizeof *r);
    r->prompt_tokens = -1;
    st.usage_tokens = -1;
    st.usage_prompt = -1;
    if (body == NULL) {
        hy_burl_fail(r, "out of memory", NULL);
        goto out;
    }
    req = malloc(strlen(body) + 1024 + strlen(b->auth));
    if (req == NULL) {
        hy_burl_fail(r, "out of memory", NULL);
        goto out;
    }
    if (b->sessions)
        snprintf(sess, sizeof sess, "X-Session-Id: bench-%ld-%ld\r\n", b->prompt_seed, i);
    req_len = (size_t)sprintf(req,
                              "POST %s%s HTTP/1.1\r\nHost: %s:%s\r\n"
                              "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                              "%s%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                              b->path, b->chat ? "/v1/chat/completions" : "/v1/completions",
                              b->host, b->port, b->auth, sess, strlen(body), body);
    t0 = hy_cli_now_ms();
    fd = socket(b->addr->ai_family, b->addr->ai_socktype, b->addr->ai_protocol);
    if (fd < 0 || connect(fd, b->addr->ai_addr, b->addr->ai_addrlen) != 0) {
        hy_burl_fail(r, "connect", strerror(errno));
        goto out;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    while (off < req_len) {
        ssize_t w = send(fd, req + off, req_len - off, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            hy_burl_fail(r, "send", strerror(errno));
            goto out;
        }
        off += (size_t)w;
    }
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        double now;
        size_t used = 0;

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            hy_burl_fail(r, "recv", errno == EAGAIN ? "timed out" : strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        now = hy_cli_now_ms() - t0;
        if (!st.head_done) {
            char *end;

            /* the head is small; copy until the blank line */
            used = HY_MIN((size_t)got, sizeof st.head - 1 - st.head_len);
            memcpy(st.head + st.head_len, buf, used);
            st.head_len += used;
            st.head[st.head_len] = '\0';
            end = strstr(st.head, "\r\n\r\n");
            if (end == NULL) {
                if (st.head_len == sizeof st.head - 1) {
                    hy_burl_fail(r, "response head over 8 KiB", NULL);
                    goto out;
                }
                continue;
            }
            /* bytes of buf that belong to the body */
            used -= st.head_len - (size_t)(end + 4 - st.head);
            *end = '\0';
            if (sscanf(st.head, "HTTP/1.%*d %d", &st.status) != 1) {
                hy_burl_fail(r, "not an HTTP/1.x response", NULL);
                goto out;
            }
            for (char *h = strstr(st.head, "\r\n"); h; h = strstr(h + 2, "\r\n"))
                if (strncasecmp(h + 2, "transfer-encoding:", 18) == 0 &&
                    strstr(h + 20, "chunked") != NULL)
                    st.chunked = true;
            st.head_done = true;
        }
        if (hy_burl_body_bytes(&st, buf + used, (size_t)got - used, b->chat, now) != 0) {
            hy_burl_fail(r, "malformed chunked body", NULL);
            goto out;
        }
        if (st.done || st.error)
            break;
        /* keep the body of an error response for the message */
    }
    r->e2e = hy_cli_now_ms() - t0;
    if (st.status != 200) {
        char msg[100];

        st.line_len = HY_MIN(st.line_len, (size_t)60);
        snprintf(msg, sizeof msg, "HTTP %d %.60s", st.status,
                 st.line ? (st.line[st.line_len] = '\0', st.line) : "");
        hy_burl_fail(r, msg, NULL);
        goto out;
    }
    if (st.error) {
        hy_burl_fail(r, st.errmsg, NULL);
        goto out;
    }
    if (!st.done && !st.finished) {
        hy_burl_fail(r, "stream ended without [DONE] or a finish_reason", NULL);
        goto out;
    }
    if (!st.have_first) {
        hy_burl_fail(r, "no content token in the stream", NULL);
        goto out;
    }
    r->ok = true;
    /* usage is exact; content events undercount when the detokenizer holds
     * back partial characters or a server sends several tokens per event */
    r->tokens = st.usage_tokens > 0 ? st.usage_tokens : st.content_events;
    r->prompt_tokens = st.usage_prompt;
    r->ttft = st.t_first;
    r->tpot = r->tokens > 1 ? (st.t_last - st.t_first) / (double)(r->tokens - 1) : -1;
out:
    if (fd >= 0)
        close(fd);
    free(st.line);
    free(req);
    free(body);
}

/* Without --model, asks GET /v1/models for the first id: OpenAI servers
 * (hyserve included) require the field, and llama-server accepts its own. */
static void hy_burl_default_model(hy_burl_t *b, char *out, size_t cap)
{
    char req[1024], *buf = malloc(1 << 20);
    size_t len = 0;
    struct timeval tv = {10, 0};
    const char *v, *q;
    int fd = -1, n;

    out[0] = '\0';
    if (buf == NULL)
        return;
    n = snprintf(req, sizeof req, "GET %s/v1/models HTTP/1.1\r\nHost: %s:%s\r\n%s"
                 "Connection: close\r\n\r\n", b->path, b->host, b->port, b->auth);
    fd = socket(b->addr->ai_family, b->addr->ai_socktype, b->addr->ai_protocol);
    if (fd < 0 || n <= 0 || (size_t)n >= sizeof req ||
        connect(fd, b->addr->ai_addr, b->addr->ai_addrlen) != 0)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto out;
    for (;;) {
        ssize_t got = recv(fd, buf + len, (1 << 20) - 1 - len, 0);

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    buf[len] = '\0';
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0 && strncmp(buf, "HTTP/1.0 200", 12) != 0)
        goto out;
    v = hy_burl_json_val(buf, "id");
    if (v == NULL || *v != '"')
        goto out;
    v++;
    q = strchr(v, '"');
    /* ids with escapes would need re-escaping; leave the field out instead */
    if (q == NULL || (size_t)(q - v) >= cap || memchr(v, '\\', (size_t)(q - v)) != NULL)
        goto out;
    memcpy(out, v, (size_t)(q - v));
    out[q - v] = '\0';
out:
    if (fd >= 0)
        close(fd);
    free(buf);
}

static void *hy_burl_client(void *arg)
{
    hy_burl_t *b = arg;
    long i;

    while ((i = atomic_fetch_add(&b->next, 1)) < b->requests)
        hy_burl_one(b, i, &b->res[i]);
    return NULL;
}

static int hy_burl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of n sorted values (0 when n == 0). */
static double hy_burl_pct(const double *v, long n, double p)
{
    long k;

    if (n == 0)
        return 0;
    k = (long)(p / 100.0 * (double)n + 0.999999) - 1;
    return v[HY_MAX(0, HY_MIN(k, n - 1))];
}

/* Splits http://host[:port][/prefix] into b; the prefix loses a trailing
 * "/" or "/v1" so both base-URL conventions work. */
static int hy_burl_parse_url(hy_burl_t *b, const char *url)
{
    const char *p, *slash, *colon, *hend;
    size_t n;

    if (strncmp(url, "https://", 8) == 0) {
        fprintf(stderr, "hyserve bench: --url %s: TLS is not supported, use plain http://\n", url);
        return -1;
    }
    if (strncmp(url, "http://", 7) != 0) {
        fprintf(stderr, "hyserve bench: --url %s: expected http://HOST:PORT[/PREFIX]\n", url);
        return -1;
    }
    p = url + 7;
    slash = strchr(p, '/');
    hend = slash ? slash : p + strlen(p);
    if (*p == '[') { /* [v6]:port */
        const char *rb = memchr(p, ']', (size_t)(hend - p));

        if (rb == NULL)
            goto bad;
        n = (size_t)(rb - p - 1);
        if (n == 0 || n >= sizeof b->host)
            goto bad;
        memcpy(b->host, p + 1, n);
        b->host[n] = '\0';
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(hend - p));
        n = (size_t)((colon ? colon : hend) - p);
        if (n == 0 || n >= sizeof b->host)
            goto bad;
        memcpy(b->host, p, n);
        b->host[n] = '\0';
    }
    if (colon) {
        n = (size_t)(hend - colon - 1);
        if (n == 0 || n >= sizeof b->port || strspn(colon + 1, "0123456789") < n)
            goto bad;
        memcpy(b->port, colon + 1, n);
        b->port[n] = '\0';
    } else {
        strcpy(b->port, "80");
    }
    n = slash ? strlen(slash) : 0;
    if (n >= sizeof b->path)
        goto bad;
    memcpy(b->path, slash ? slash : "", n + 1);
    if (n >= 1 && b->path[n - 1] == '/')
        b->path[--n] = '\0';
    if (n >= 3 && strcmp(b->path + n - 3, "/v1") == 0)
        b->path[n - 3] = '\0';
    return 0;
bad:
    fprintf(stderr, "hyserve bench: --url %s: expected http://HOST:PORT[/PREFIX]\n", url);
    return -1;
}

static void hy_burl_usage(FILE *f)
{
    fprintf(f,
            "usage: hyserve bench --url http://HOST:PORT [--concurrency N] [--requests M]\n"
            "                     [--prompt-tokens P] [--max-tokens T] [--api-key K]\n"
            "                     [--model NAME] [--chat] [--timeout S] [--prompt-seed X]\n"
            "                     [--sessions]\n"
            "  N clients keep N streamed requests in flight until M are done (defaults 1, 8,\n"
            "  P=100, T=64, S=300); ignore_eos makes every request generate T tokens.\n"
            "  Prompts differ per request and per X (default 0): warm up with another X so\n"
            "  the measured prompts are not already in a prefix cache.  --sessions sends\n"
            "  each request its own X-Session-Id (bench-X-i), which a pool of hosts behind\n"
            "  nginx spreads over its hosts (one API key alone always lands on one host).\n");
}

/* Options into b and *url: 0 parsed, 1 --help printed, 2 a usage error
 * (reported). */
static int hy_burl_args(int argc, char **argv, hy_burl_t *b, const char **url)
{
    static const struct option opts[] = {
        {"url", required_argument, 0, 'u'}, {"concurrency", required_argument, 0, 'c'},
        {"requests", required_argument, 0, 'n'}, {"prompt-tokens", required_argument, 0, 'p'},
        {"max-tokens", required_argument, 0, 'T'}, {"api-key", required_argument, 0, 'k'},
        {"model", required_argument, 0, 'm'}, {"chat", no_argument, 0, 'C'},
        {"timeout", required_argument, 0, 't'}, {"prompt-seed", required_argument, 0, 's'},
        {"sessions", no_argument, 0, 'S'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *key = NULL;
    int opt;

    b->concurrency = 1;
    b->requests = 8;
    b->prompt_tokens = 100;
    b->max_tokens = 64;
    b->timeout_s = 300;
    *url = NULL;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'u': *url = optarg; break;
        case 'c': if (hy_cli_int("bench", "--concurrency", optarg, 1, 4096, &b->concurrency)) return 2; break;
        case 'n': if (hy_cli_int("bench", "--requests", optarg, 1, 10000000, &b->requests)) return 2; break;
        case 'p': if (hy_cli_int("bench", "--prompt-tokens", optarg, 2, 100000, &b->prompt_tokens)) return 2; break;
        case 'T': if (hy_cli_int("bench", "--max-tokens", optarg, 1, 1000000, &b->max_tokens)) return 2; break;
        case 't': if (hy_cli_int("bench", "--timeout", optarg, 1, 86400, &b->timeout_s)) return 2; break;
        case 's': if (hy_cli_int("bench", "--prompt-seed", optarg, 0, 1000000000, &b->prompt_seed)) return 2; break;
        case 'k': key = optarg; break;
        case 'm': b->model = optarg; break;
        case 'C': b->chat = true; break;
        case 'S': b->sessions = true; break;
        case 'h': hy_burl_usage(stdout); return 1;
        default: hy_burl_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "hyserve bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (*url == NULL || hy_burl_parse_url(b, *url) != 0)
        return 2;
    if (b->model && strpbrk(b->model, "\"\\") != NULL) {
        fprintf(stderr, "hyserve bench: --model: quotes and backslashes are not allowed\n");
        return 2;
    }
    if (key) {
        if (strpbrk(key, "\r\n") != NULL || strlen(key) > 400) {
            fprintf(stderr, "hyserve bench: --api-key: must be one line of at most 400 bytes\n");
            return 2;
        }
        snprintf(b->auth, sizeof b->auth, "Authorization: Bearer %s\r\n", key);
    }
    return 0;
}

/* The results table and its JSON line; 0 when every request succeeded.
 * ttft, tpot, e2e: scratch for b->requests values each. */
static int hy_burl_report(const hy_burl_t *b, const char *url, double wall, double *ttft,
                          double *tpot, double *e2e)
{
    long n_ok = 0, n_tpot = 0, tokens = 0, prompt_sum = 0, prompt_n = 0, i;
    const char *first_why = NULL;

    for (i = 0; i < b->requests; i++) {
        const hy_burl_result_t *r = &b->res[i];

        if (!r->ok) {
            if (first_why == NULL)
                first_why = r->why;
            continue;
        }
        ttft[n_ok] = r->ttft;
        e2e[n_ok] = r->e2e;
        n_ok++;
        if (r->tpot >= 0)
            tpot[n_tpot++] = r->tpot;
        tokens += r->tokens;
        if (r->prompt_tokens >= 0) {
            prompt_sum += r->prompt_tokens;
            prompt_n++;
        }
    }
    qsort(ttft, (size_t)n_ok, sizeof(double), hy_burl_cmp);
    qsort(tpot, (size_t)n_tpot, sizeof(double), hy_burl_cmp);
    qsort(e2e, (size_t)n_ok, sizeof(double), hy_burl_cmp);
    printf("url %s%s  model %s  concurrency %ld  requests %ld  prompt ~%ld words  "
           "max_tokens %ld\n", url, b->chat ? " (chat)" : "", b->model ? b->model : "(none)",
           b->concurrency, b->requests, b->prompt_tokens, b->max_tokens);
    if (prompt_n)
        printf("prompt tokens (server usage): mean %.1f\n", (double)prompt_sum / prompt_n);
    printf("requests: %ld ok, %ld failed%s%s\n", n_ok, b->requests - n_ok,
           first_why ? "; first failure: " : "", first_why ? first_why : "");
    printf("wall %.2f s, output tokens %ld, throughput %.1f tok/s, %.2f req/s\n", wall / 1e3,
           tokens, tokens * 1e3 / wall, n_ok * 1e3 / wall);
    printf("| metric (ms) |    p50 |    p90 |    p99 |\n");
    printf("| ----------- | -----: | -----: | -----: |\n");
    printf("| TTFT        | %6.1f | %6.1f | %6.1f |\n", hy_burl_pct(ttft, n_ok, 50),
           hy_burl_pct(ttft, n_ok, 90), hy_burl_pct(ttft, n_ok, 99));
    printf("| TPOT        | %6.2f | %6.2f | %6.2f |\n", hy_burl_pct(tpot, n_tpot, 50),
           hy_burl_pct(tpot, n_tpot, 90), hy_burl_pct(tpot, n_tpot, 99));
    printf("| E2E         | %6.1f | %6.1f | %6.1f |\n", hy_burl_pct(e2e, n_ok, 50),
           hy_burl_pct(e2e, n_ok, 90), hy_burl_pct(e2e, n_ok, 99));
    printf("json: {\"concurrency\":%ld,\"requests\":%ld,\"ok\":%ld,\"failed\":%ld,"
           "\"output_tokens\":%ld,\"wall_s\":%.3f,\"tok_per_s\":%.2f,"
           "\"ttft_ms\":{\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f},"
           "\"tpot_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f},"
           "\"e2e_ms\":{\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f}}\n",
           b->concurrency, b->requests, n_ok, b->requests - n_ok, tokens, wall / 1e3,
           tokens * 1e3 / wall, hy_burl_pct(ttft, n_ok, 50), hy_burl_pct(ttft, n_ok, 90),
           hy_burl_pct(ttft, n_ok, 99), hy_burl_pct(tpot, n_tpot, 50),
           hy_burl_pct(tpot, n_tpot, 90), hy_burl_pct(tpot, n_tpot, 99),
           hy_burl_pct(e2e, n_ok, 50), hy_burl_pct(e2e, n_ok, 90), hy_burl_pct(e2e, n_ok, 99));
    fflush(stdout);
    return n_ok == b->requests ? 0 : 1;
}

int hy_cmd_bench_url(int argc, char **argv)
{
    hy_burl_t b;
    struct addrinfo hints, *ai = NULL;
    pthread_t *tid = NULL;
    double *ttft = NULL, *tpot = NULL, *e2e = NULL, t0, wall;
    long i, started = 0;
    const char *url;
    char model_buf[512];
    int rc, gai;

    memset(&b, 0, sizeof b);
    if ((rc = hy_burl_args(argc, argv, &b, &url)) != 0)
        return rc == 1 ? 0 : rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if ((gai = getaddrinfo(b.host, b.port, &hints, &ai)) != 0) {
        fprintf(stderr, "hyserve bench: --url %s: %s\n", url, gai_strerror(gai));
        return 2;
    }
    rc = 1;
    b.addr = ai;
    b.concurrency = HY_MIN(b.concurrency, b.requests);
    if (b.model == NULL) {
        hy_burl_default_model(&b, model_buf, sizeof model_buf);
        if (model_buf[0] != '\0')
            b.model = model_buf;
    }
    b.res = calloc((size_t)b.requests, sizeof *b.res);
    tid = calloc((size_t)b.concurrency, sizeof *tid);
    ttft = malloc(sizeof(double) * (size_t)b.requests);
    tpot = malloc(sizeof(double) * (size_t)b.requests);
    e2e = malloc(sizeof(double) * (size_t)b.requests);
    if (b.res == NULL || tid == NULL || ttft == NULL || tpot == NULL || e2e == NULL) {
        fprintf(stderr, "hyserve bench: out of memory\n");
        goto out;
    }
    atomic_init(&b.next, 0);
    t0 = hy_cli_now_ms();
    for (started = 0; started < b.concurrency; started++)
        if ((errno = pthread_create(&tid[started], NULL, hy_burl_client, &b)) != 0) {
            fprintf(stderr, "hyserve bench: pthread_create: %s\n", strerror(errno));
            break;
        }
    for (i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    wall = hy_cli_now_ms() - t0;
    if (started > 0)
        rc = hy_burl_report(&b, url, wall, ttft, tpot, e2e);
out:
    free(b.res);
    free(tid);
    free(ttft);
    free(tpot);
    free(e2e);
    freeaddrinfo(ai);
    return rc;
}
