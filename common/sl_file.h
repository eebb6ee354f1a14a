/* Whole-file writes that are either complete or absent, the folder fsync
 * that makes a name last, a folder's removal, and sizes as people read them. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include <stddef.h>

/* Writes data to path through a temporary file in the same folder (created
 * with mode), fsyncs it, renames it over path and fsyncs the folder, so a
 * crash leaves either the old file or the new one, never a torn one. On
 * failure the temporary file is removed and path is untouched, except when
 * only the folder's fsync fails: the new file is then in place, but may not
 * outlast a crash, and its error is returned all the same. */
int sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode);

/* The same without the fsyncs: whole or absent for any process that reads it,
 * and across the writer's death (the kernel keeps what is written in its
 * page cache), but not across a crash of the machine. For files rewritten
 * often on a path where a disk flush would be felt (a kernel's names at the
 * end of each cell). */
int sl_file_replace(const char *path, const void *data, size_t len, unsigned mode);

/* fsyncs the folder dir, so that the names created, renamed or removed in
 * it last: 0 or -errno. */
int sl_file_fsync_dir(const char *dir);

/* Removes from dir the temporary files ("NAME.tmp.PID") that a writer
 * killed between its write and its rename left behind: those of processes
 * that no longer run. Returns how many went, or -errno when dir cannot be
 * read (0 when it does not exist). */
int sl_file_sweep_temporaries(const char *dir);

/* Removes path and, if it is a folder, everything under it, following no
 * symbolic link (a link is removed, not what it names). Goes on past an
 * entry it cannot remove: 0 (also when path does not exist), or the first
 * failure as -errno. */
int sl_file_remove_tree(const char *path);

/* A size as people read it, into buf: "512 B", "1.0 KiB", "12.3 MiB",
 * "2.0 GiB" (never "1024.0 KiB"). Returns buf. */
char *sl_file_size_text(long long bytes, char *buf, size_t size);

#endif
