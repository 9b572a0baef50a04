/*
 * bench_url.h - `hyserve bench --url URL`: a streaming HTTP load generator
 * for any OpenAI-compatible server (hyserve behind nginx, llama-server, ...)
 * that reports throughput and TTFT/TPOT/end-to-end latency percentiles, so
 * servers can be compared with the same client.
 */
#ifndef HY_TOOLS_BENCH_URL_H
#define HY_TOOLS_BENCH_URL_H

int hy_cmd_bench_url(int argc, char **argv);

#endif
