/*
 * bench_offline.h - `hyserve bench --offline`: drives the coordinator's
 * engine in-process through the request ring API (what the workers use),
 * with a fixed number of requests in flight, and reports aggregate
 * throughput and TTFT/TPOT percentiles.
 */
#ifndef HY_TOOLS_BENCH_OFFLINE_H
#define HY_TOOLS_BENCH_OFFLINE_H

int hy_cmd_bench_offline(int argc, char **argv);

#endif
