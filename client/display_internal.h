/* The state behind a job display, shared by display.c (folding events, text)
 * and display_render.c (HTML, SVG, Vega-Lite). Not for use elsewhere. */
#ifndef JK_DISPLAY_INTERNAL_H
#define JK_DISPLAY_INTERNAL_H

#include "display.h"
#include "textbuf.h"

#define SERIES_CAP 4096  /* points kept per series; halved when full */
#define TIMELINE_CAP 64  /* newest entries kept */
#define RATE_WINDOW 32   /* metric samples behind the step rate */

struct series {
  struct jk_point *p;
  size_t n, cap;
};

struct tl_entry {
  int64_t time_us;
  char text[240];
};

struct jk_display {
  char job[32], kind[16], id[48];
  char model[64], data[64];
  char state[24], reason[256];
  int64_t last_seq;
  int64_t step, steps;
  int attempt;
  int nodes;                        /* instances of the job at once (nodes=N); 0 or 1: one */
  char instance[40], instance_type[48], zone[48];
  int spot; /* -1 unknown, 0 on-demand, 1 spot */
  double price_usd_per_hour, on_demand_usd_per_hour;
  double cost_usd, on_demand_usd;
  double energy_kwh, co2e_g;      /* the gateway's estimate (docs/admin.md, Carbon) */
  double throughput;
  char throughput_unit[16];
  /* where it trains (the device event) and how busy its GPUs are (metrics) */
  bool has_device, cuda;
  int gpus, world_size;
  long long threads;
  char gpu_model[96], precision[8];
  int gpus_unused;                  /* on the CPU: the instance's GPUs spotlab-train cannot use */
  char gpus_unusable[200];          /* and why */
  double gpu_memory_mib;            /* per GPU */
  bool has_gpu_usage;
  double gpu_util_pct, gpu_mem_used_mib, gpu_mem_total_mib;
  double loss, eval_loss;
  bool has_loss, has_eval_loss;
  bool has_result;
  double result_eval_loss;
  int64_t checkpoints, checkpoint_step;
  int64_t ckpt_every;               /* checkpoint_every=auto interval, 0 until one is chosen */
  double ckpt_write_s, ckpt_mtbp_s;
  /* deadline=: the newest plan event (protocols.md §1) */
  bool has_plan;
  int64_t plan_us, plan_deadline_us;
  double plan_left_s, plan_slack_s, plan_scale;
  char plan_mode[16], plan_text[200];
  int64_t first_us, last_us; /* event times */
  int64_t rate_t[RATE_WINDOW], rate_s[RATE_WINDOW];
  size_t rate_n, rate_head;
  struct series train, eval;
  struct tl_entry tl[TIMELINE_CAP];
  size_t tl_n, tl_head, tl_dropped;
  /* preemptions: the newest notice, and the timeline entry of a preemption
   * that waits for its resume (its absolute index: tl_dropped + position) */
  int64_t notice_us, notice_deadline_us;
  bool preempt_open;
  size_t preempt_entry;
  bool dirty, shown;
  int64_t sent_us;
};

/* Seconds left at the current rate, or -1 when unknown. */
double jk_display_eta_s(const struct jk_display *d);
/* "2 x NVIDIA A10G (22.2 GiB each), bf16; 87% busy, 30.1 of 44.4 GiB"
 * or "CPU, 4 threads, fp32" into buf; "" until the device is known. */
void jk_display_device_text(const struct jk_display *d, char *buf, size_t size);
/* "deadline 14:30 (2h 10m left), slack 40m 00s: spot on g5.xlarge while
 * slack > 2m, then on-demand" into buf; "" without a deadline. */
void jk_display_deadline_text(const struct jk_display *d, char *buf, size_t size);
/* The i-th timeline entry, oldest first. */
const struct tl_entry *jk_display_tl(const struct jk_display *d, size_t i);

#endif
