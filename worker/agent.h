/* The worker agent: the one ZeroMQ loop of spotlab-worker. It registers with
 * the gateway over CURVE, heartbeats, runs the jobs it is assigned, relays
 * what they report, and reacts to preemption notices and signals. */
#ifndef WK_AGENT_H
#define WK_AGENT_H

struct wk_config;
struct wk_agent;

/* cfg and train are borrowed for the life of the agent. */
int wk_agent_new(const struct wk_config *cfg, const char *train, struct wk_agent **ret);
struct wk_agent *wk_agent_free(struct wk_agent *a);

/* Runs until a shutdown request, a notice or SIGINT has ended every job.
 * signal_fd delivers one byte per signal received (the signal number).
 * Returns 0, or a negative error when the loop could not run. */
int wk_agent_run(struct wk_agent *a, int signal_fd);

#endif
