/* The notebook this kernel runs, asked of the Jupyter server that started
 * it, for front ends that do not set JPY_SESSION_NAME (classic Notebook).
 * See jpserver.c. */
#ifndef JK_JPSERVER_H
#define JK_JPSERVER_H

#include <stddef.h>

/* The path of the notebook whose session holds kernel_id (borrowed), asked
 * of the Jupyter server whose pid is parent_pid (JPY_PARENT_PID): its
 * runtime file (nbserver-PID.json or jpserver-PID.json) is looked for in
 * conn_dir (the connection file's folder, borrowed; may be NULL) and in
 * Jupyter's runtime folder. Waits up to wait_ms for the session to appear
 * (a server records it just after starting the kernel). Writes ret (size
 * bytes) only on success; -ENOENT when no such server or session answers,
 * another negative error when a reply cannot be read. */
int jk_jpserver_notebook(const char *kernel_id, long parent_pid, const char *conn_dir, int wait_ms,
                         char *ret, size_t size);

#endif
