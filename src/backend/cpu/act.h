/*
 * act.h - the exp-based activations of the CPU backend (sigmoid, SiLU,
 * GELU-tanh, SwiGLU) on the widest level the CPU has, every lane with the
 * scalar level's bits (act.c).
 */
#ifndef HY_CPU_ACT_H
#define HY_CPU_ACT_H

#include "backend/backend.h"

#include <stddef.h>

/* y[i] = op(x[i]) for op HY_UNARY_SIGMOID, HY_UNARY_SILU or
 * HY_UNARY_GELU_TANH (x == y allowed); returns false for any other op. */
bool hy_act(hy_unary_t op, const float *x, float *y, size_t n);

/* y[i] = silu(g[i]) * u[i] (y may be g or u). */
void hy_act_swiglu(const float *g, const float *u, float *y, size_t n);

/* y[i] = gelu_tanh(g[i]) * u[i] (y may be g or u): hy_act's GELU-tanh and
 * a product, the same bits as the two passes. */
void hy_act_geglu(const float *g, const float *u, float *y, size_t n);

/* Pin a level (tests compare them); -1: the CPU's best.  HY_EUNSUPPORTED
 * for a level the CPU or this build lacks. */
int hy_cpu_act_set_isa(int isa);

#endif
