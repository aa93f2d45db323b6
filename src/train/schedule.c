/* schedule.c: linear warmup, then cosine decay to a floor (SPEC section 3). */
#include <math.h>

#include "mxlm/trainer.h"

double mx_lr_at(int64_t s, int64_t total, int64_t warmup, double peak, double min_frac) {
    if (warmup > 0 && s < warmup) return peak * (double)(s + 1) / (double)warmup;
    double lo = peak * min_frac;
    if (total <= warmup) return peak;
    double p = (double)(s - warmup) / (double)(total - warmup);
    if (p > 1.0) p = 1.0;
    return lo + (peak - lo) * 0.5 * (1.0 + cos(M_PI * p));
}
