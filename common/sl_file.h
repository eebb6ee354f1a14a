/* Whole-file writes that are either complete or absent. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include <stddef.h>

/* Writes data to path through a temporary file in the same folder (created
 * with mode), fsyncs it, renames it over path and fsyncs the folder, so a
 * crash leaves either the old file or the new one, never a torn one. On
 * failure the temporary file is removed and path is untouched. */
int sl_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode);

#endif
