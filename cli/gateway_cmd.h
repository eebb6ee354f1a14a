/* spotlab gateway stop|status (gateway_cmd.c). */
#ifndef CLI_GATEWAY_CMD_H
#define CLI_GATEWAY_CMD_H

#include <stdbool.h>

/* what: "stop" or "status"; force: stop even with live jobs (they keep
 * running on their workers). Returns the exit status. */
int cli_gateway(const char *what, bool force, bool json);

#endif
