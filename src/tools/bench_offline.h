/*
 * bench_offline.h - `hyserve bench --offline`: the server's engine with an
 * in-process request source (engine/local.h), a fixed number of requests in
 * flight, and aggregate throughput and TTFT/TPOT percentiles.
 */
#ifndef HY_TOOLS_BENCH_OFFLINE_H
#define HY_TOOLS_BENCH_OFFLINE_H

int hy_cmd_bench_offline(int argc, char **argv);

#endif
