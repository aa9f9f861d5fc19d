/*
 * mr_train.c -- mr_sgd_f32 and mr_sgd_f64: the training step's parameter update.
 */
#include "mr_internal.h"

/* mr_sgd_f32 and mr_sgd_f64, one body: v = momentum * v + g, then w -= lr * v (v
 * untouched when momentum is 0). */
#define MR_SGD(name, T)                                                  \
    void name(T *w, const T *g, T *v, int64_t n, T lr, T momentum)       \
    {                                                                    \
        int64_t i;                                                       \
        if (momentum == 0) {                                             \
            for (i = 0; i < n; ++i) {                                    \
                w[i] -= lr * g[i];                                       \
            }                                                            \
            return;                                                      \
        }                                                                \
        for (i = 0; i < n; ++i) {                                        \
            v[i] = momentum * v[i] + g[i];                               \
            w[i] -= lr * v[i];                                           \
        }                                                                \
    }
MR_SGD(mr_sgd_f32, float)
MR_SGD(mr_sgd_f64, double)
