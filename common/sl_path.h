/* Finding spotlab's own programs and folders. */
#ifndef SL_PATH_H
#define SL_PATH_H

#include <stddef.h>

/* Path of the spotlab program `name` ("spotlab-worker", "spotlab-train"):
 * $SPOTLAB_<NAME>_BIN (dashes as underscores, upper case), then the folder of
 * the running executable, then the build tree this binary was built in, then
 * PATH. Writes ret (size bytes) only on success; -ENOENT if not found. */
int sl_find_program(const char *name, char *ret, size_t size);
/* spotlab-train's CUDA backend (kernels/tc_cuda_api.h), for the
 * spotlab-train at train: beside it (a build tree), else in ../lib/spotlab/
 * from its folder (an installed tree, the worker bundle). Writes ret only on
 * success; -ENOENT when neither has it. */
#define SL_TRAIN_CUDA_BACKEND "libspotlab-train-cuda.so"
int sl_train_cuda_backend(const char *train, char *ret, size_t size);
/* $SPOTLAB_HOME, else $HOME/.local/share/spotlab; created (0700) with its
 * parents. Writes ret only on success. */
int sl_spotlab_home(char *ret, size_t size);
/* mkdir -p with mode for the folders it creates. */
int sl_mkdir_p(const char *path, unsigned mode);

#endif
