/* A per-instance metadata endpoint that answers like the EC2 instance
 * metadata service with IMDSv2 tokens, on 127.0.0.1 (DESIGN.md §5,
 * docs/internals/local-provider.md). */
#ifndef GW_IMDS_H
#define GW_IMDS_H

#include <stdint.h>

struct gw_imds;

/* Starts an endpoint for one instance on 127.0.0.1:port (0: a free port the
 * system picks) serving in its own thread. Strings are copied. Returns 0 and
 * an owned endpoint in *ret, or a negative error (-EADDRINUSE when the port
 * is taken, -EINVAL for bad arguments). */
int gw_imds_new(const char *instance_id, const char *type, const char *zone, int port,
                struct gw_imds **ret);
/* Stops the server (waits for its thread) and frees; NULL is a no-op. Returns NULL. */
struct gw_imds *gw_imds_free(struct gw_imds *m);
/* The port the endpoint listens on. */
int gw_imds_port(const struct gw_imds *m);
/* From now on spot/instance-action answers {"action":ACTION,"time":DEADLINE}
 * (action "terminate", "stop" or "hibernate"; deadline in µs since the
 * epoch, printed to whole seconds). deadline_real_us <= 0 withdraws it. */
void gw_imds_set_notice(struct gw_imds *m, const char *action, int64_t deadline_real_us);
/* From now on events/recommendations/rebalance answers {"noticeTime":T}. */
void gw_imds_set_rebalance(struct gw_imds *m, int64_t notice_real_us);

#endif
