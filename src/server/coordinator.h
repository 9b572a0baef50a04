/*
 * coordinator.h - `hyserve serve` (coordinator.c): the master process that
 * owns the sockets and the shared segment and supervises its children, the
 * engine process (engine_proc.h: the weights, the engine loop) and the
 * FastCGI workers.  The hyserve binary's command table calls it.
 */
#ifndef HY_SERVER_COORDINATOR_H
#define HY_SERVER_COORDINATOR_H

int hy_cmd_serve(int argc, char **argv);

#endif
