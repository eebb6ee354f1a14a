/* Relative training speed per GPU model, A10G = 1 (speed.h).
 *
 * Where the numbers come from: the peak dense FP16/BF16 tensor TFLOPS of
 * each model in NVIDIA's datasheets (in parentheses below; the A10G taken
 * as the A10, K80 and M60 by their FP32 peak per GPU, having no tensor
 * cores), as the square root of the ratio to the A10G's. The square root
 * because a step of the small and medium models spotlab trains reaches a
 * smaller share of peak on the larger GPUs (memory bandwidth, launch
 * overhead), so raw peak ratios overstate the gaps. The table is only the
 * prior: measured step times of the job, or of an earlier job of the same
 * shape, replace it for the types they ran on. */
#include "speed.h"

#include <stddef.h>
#include <strings.h>

static const struct {
  const char *model;
  double speed;
} table[] = {
  {"K80", 0.18},  /* (4.1 FP32) */
  {"M60", 0.20},  /* (4.8 FP32) */
  {"T4", 0.72},   /* (65) */
  {"T4G", 0.72},  /* the T4 of Graviton instances */
  {"A10G", 1.00}, /* (125) */
  {"A10", 1.00},  /* (125) */
  {"L4", 0.98},   /* (121) */
  {"V100", 1.00}, /* (125) */
  {"A100", 1.58}, /* (312) */
  {"L40S", 1.70}, /* (362) */
  {"H100", 2.81}, /* (989) */
  {"H200", 2.81}, /* (989) */
  {"B200", 4.24}, /* (2250) */
};

double gw_speed_relative(const char *gpu_model) {
  if (!gpu_model)
    return 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcasecmp(table[i].model, gpu_model))
      return table[i].speed;
  return 0;
}
