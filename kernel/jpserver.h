/* The notebook this kernel runs, asked of the Jupyter server that started
 * it, for front ends that do not set JPY_SESSION_NAME (classic Notebook).
 * See jpserver.c. */
#ifndef JK_JPSERVER_H
#define JK_JPSERVER_H

#include <stddef.h>

/* The program that asks the server (jpserver.c, session_main.c). */
#define JK_JPSERVER_PROGRAM "spotlab-kernel-session"
/* Its exit status when the server does not know this kernel. */
#define JK_JPSERVER_NOT_FOUND 3

/* The runtime file (nbserver-PID.json or jpserver-PID.json) of
 * the Jupyter server whose pid is parent_pid (JPY_PARENT_PID), looked for in
 * conn_dir (the connection file's folder; may be NULL) and in Jupyter's
 * runtime folder: its path into ret (size bytes). -ENOENT when there is
 * none. Looks only whether it is there (jpserver_file.c). */
int jk_jpserver_file(long parent_pid, const char *conn_dir, char *ret, size_t size);

/* The path of the notebook whose session holds kernel_id, asked of the
 * server whose runtime file is path_of_file (GET api/sessions), waiting up
 * to wait_ms for the session to appear (a server records it just after
 * starting the kernel). Writes ret only on success; -ENOENT when no such
 * server or session answers, another negative error when a reply cannot be
 * read. Links libcurl: spotlab-kernel-session's (jpserver.c). */
int jk_jpserver_notebook(const char *path_of_file, const char *kernel_id, int wait_ms, char *ret,
                         size_t size);

/* The kernel's side: JK_JPSERVER_PROGRAM asked for the notebook of
 * kernel_id by the server whose runtime file is file (jk_jpserver_file),
 * given wait_ms and a margin to answer. 0 and ret; -ENOENT when the server
 * does not know kernel_id; another negative error, with the program's word
 * in why, when it could not answer (jpserver_file.c). */
int jk_jpserver_ask(const char *file, const char *kernel_id, int wait_ms, char *ret, size_t size, char *why,
                    size_t why_size);

#endif
