/* The worker bundle (bundle.h). */
#include "bundle.h"

#include "objstore.h"
#include "mpu_notes.h"

#include "sl_err.h"
#include "sl_digest.h"
#include "sl_ident.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_s3.h"
#include "sl_sigv4.h"
#include "sl_time.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define T "gateway.bundle"
#define LIBS_MAX 128

extern char **environ;

struct gw_bundle {
  struct gw_objstore *store;
  struct gw_mpu_note note;      /* a bundle above the part size: its upload recorded while open */
  char dir[PATH_MAX];
  pthread_t thread;
  pthread_mutex_t mu;
  int state;                    /* -EAGAIN building; 0 published; < 0 failed */
  char key[128];
  char sha256[65];
  char why[256];
};

/* Runs argv; stdout to out_fd when >= 0. Returns the exit status or an error. */
static int run(char *const argv[], int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r)
    return -r;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A library the instance's image is expected to have itself. */
static bool system_lib(const char *name, const char *path) {
  static const char *const libc[] = {"linux-vdso", "ld-linux", "libc.so", "libm.so", "libpthread.so",
                                     "libdl.so", "librt.so", "libresolv.so", "libutil.so",
                                     "libgcc_s.so", "libstdc++.so", "libcuda.so", "libnvidia-"};
  for (size_t i = 0; i < sizeof libc / sizeof *libc; i++)
    if (!strncmp(name, libc[i], strlen(libc[i])))
      return true;
  return !strncmp(path, "/usr/local/cuda", 15) || strstr(name, "libcudart") || strstr(name, "libcublas") ||
         strstr(name, "libnccl");
}

/* The files a bundle holds: where each goes in it (bin/NAME, lib/NAME) and
 * where it comes from; one source for each place. */
struct inputs {
  size_t n;
  struct input {
    char dest[256];
    char src[PATH_MAX];
  } v[3 + LIBS_MAX];
};

static int add_input(struct inputs *in, const char *dest, const char *src, char *err, size_t err_size) {
  if (strlen(dest) >= sizeof in->v->dest || strlen(src) >= sizeof in->v->src) {
    snprintf(err, err_size, "%s: name too long", src);
    return SL_ELIMIT;
  }
  for (size_t i = 0; i < in->n; i++)
    if (!strcmp(in->v[i].dest, dest))
      return 0; /* both programs need it: the same library */
  if (in->n == sizeof in->v / sizeof *in->v) {
    snprintf(err, err_size, "the programs need more than %d libraries", LIBS_MAX);
    return SL_ELIMIT;
  }
  snprintf(in->v[in->n].dest, sizeof in->v[in->n].dest, "%s", dest);
  snprintf(in->v[in->n].src, sizeof in->v[in->n].src, "%s", src);
  in->n++;
  return 0;
}

/* The non-system libraries program needs (ldd), into in as lib/NAME. */
static int add_libs(struct inputs *in, const char *program, char *err, size_t err_size) {
  char tmp[] = "/tmp/spotlab-ldd.XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0)
    return -errno;
  unlink(tmp);
  char *argv[] = {"ldd", (char *)program, NULL};
  int r = run(argv, fd);
  if (r != 0) {
    close(fd);
    snprintf(err, err_size, "ldd %s failed (%d)", program, r);
    return r < 0 ? r : SL_ENOTSUP;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return -errno;
  }
  rewind(f);
  char line[1024];
  r = 0;
  while (r == 0 && fgets(line, sizeof line, f)) {
    char name[256], path[768], dest[300];
    if (sscanf(line, " %255s => %767s", name, path) != 2 || path[0] != '/' || system_lib(name, path))
      continue;
    const char *base = strrchr(path, '/') + 1;
    snprintf(dest, sizeof dest, "lib/%s", base);
    r = add_input(in, dest, path, err, err_size);
  }
  if (r == 0 && ferror(f)) { /* a list read in part: a bundle without some of its libraries */
    r = -EIO;
    snprintf(err, err_size, "ldd %s: its output could not be read back", program);
  }
  fclose(f);
  return r;
}

static int list_inputs(struct inputs *in, char *err, size_t err_size) {
  static const char *const programs[] = {"spotlab-worker", "spotlab-train"};
  in->n = 0;
  for (size_t i = 0; i < 2; i++) {
    char prog[PATH_MAX], dest[64];
    int r;
    if (sl_find_program(programs[i], prog, sizeof prog) < 0) {
      snprintf(err, err_size, "cannot find %s to bundle", programs[i]);
      return -ENOENT;
    }
    snprintf(dest, sizeof dest, "bin/%s", programs[i]);
    if ((r = add_input(in, dest, prog, err, err_size)) < 0 || (r = add_libs(in, prog, err, err_size)) < 0)
      return r;
    /* spotlab-train's CUDA backend, where it looks from bin/ (its CUDA
     * libraries are the image's, as system_lib says); none in a build
     * without nvcc */
    char backend[PATH_MAX];
    if (!strcmp(programs[i], "spotlab-train") && sl_train_cuda_backend(prog, backend, sizeof backend) == 0 &&
        ((r = add_input(in, "lib/spotlab/" SL_TRAIN_CUDA_BACKEND, backend, err, err_size)) < 0 ||
         (r = add_libs(in, backend, err, err_size)) < 0))
      return r;
  }
  return 0;
}

static int cmp_input(const void *a, const void *b) {
  return strcmp(((const struct input *)a)->dest, ((const struct input *)b)->dest);
}

#define MANIFEST_HEAD "spotlab worker bundle 1\n"
#define MANIFEST_MAX (sizeof MANIFEST_HEAD + (3 + LIBS_MAX) * (256 + 66) + 80)

/* What the archive holds: each place in it and the SHA-256 of its file, read
 * from base/PLACE when base is set (the staged copies), else from its source. */
static int manifest(struct inputs *in, const char *base, char *out, size_t size, char *err,
                    size_t err_size) {
  qsort(in->v, in->n, sizeof *in->v, cmp_input);
  size_t k = (size_t)snprintf(out, size, "%s", MANIFEST_HEAD);
  for (size_t i = 0; i < in->n; i++) {
    char file[PATH_MAX + 256], sha[65];
    if (base)
      snprintf(file, sizeof file, "%s/%s", base, in->v[i].dest);
    else
      snprintf(file, sizeof file, "%s", in->v[i].src);
    int r = sl_sha256_file(file, 0, sha);
    if (r < 0) {
      snprintf(err, err_size, "%s: %s", file, sl_strerror(r));
      return r;
    }
    k += (size_t)snprintf(out + k, size - k, "%s %s\n", in->v[i].dest, sha);
    if (k >= size)
      return SL_ELIMIT;
  }
  return 0;
}

/* A build's lists and texts, on the heap: the manifest of the files to
 * bundle (want), that of the staged copies (have), the one read back. */
struct build {
  struct inputs in;
  char want[MANIFEST_MAX], have[MANIFEST_MAX], text[MANIFEST_MAX + 1];
};

/* Whether the archive of an earlier build holds exactly the files to bundle:
 * its manifest (DIR/inputs) is theirs, followed by the archive's own SHA-256,
 * which the archive still has. 1 with sha256 set; 0 for anything else (no
 * manifest, another, a damaged one, a changed archive); an error when a file
 * to bundle cannot be read. The files are hashed only when there is a
 * manifest to compare with. */
static int reusable(struct build *b, const char *inputs_path, const char *archive, char sha256[65],
                    char *err, size_t err_size) {
  FILE *f = fopen(inputs_path, "re");
  if (!f)
    return 0;
  size_t n = fread(b->text, 1, sizeof b->text - 1, f);
  fclose(f);
  b->text[n] = 0;
  int r = manifest(&b->in, NULL, b->want, sizeof b->want, err, err_size);
  if (r < 0)
    return r;
  size_t w = strlen(b->want);
  char recorded[65], sha[65];
  if (n != w + strlen("archive ") + 64 + 1 || strncmp(b->text, b->want, w) ||
      sscanf(b->text + w, "archive %64[0-9a-f]", recorded) != 1 || strlen(recorded) != 64 ||
      sl_sha256_file(archive, 0, sha) < 0 || strcmp(sha, recorded))
    return 0;
  memcpy(sha256, sha, 65);
  return 1;
}

/* What an earlier gateway, killed while it built, left in dir: its stage
 * folders and their archives. One gateway holds a state folder at a time,
 * so none of them is in use. */
static void remove_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "stage.", 6))
      continue;
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *rm[] = {"rm", "-rf", "--", path, NULL};
    if (run(rm, -1) != 0)
      sl_warn(T, "%s: could not be removed", path);
  }
  closedir(d);
}

/* Writes the manifest of what path holds, whole or not at all; without it
 * the next start builds the archive again. */
static void write_manifest(const char *inputs_path, const char *have, const char *sha256) {
  char part[PATH_MAX + 8];
  snprintf(part, sizeof part, "%s.part", inputs_path);
  FILE *f = fopen(part, "we");
  bool ok = f && fprintf(f, "%sarchive %s\n", have, sha256) > 0;
  if (f && fclose(f) != 0)
    ok = false;
  if (!ok || rename(part, inputs_path) < 0) {
    sl_warn(T, "%s: not written (%s); the next start builds the bundle again", inputs_path,
            strerror(errno));
    unlink(part);
  }
}

/* gw_bundle_build's archive made anew from b's files. */
static int build(struct build *b, const char *dir, const char *path, const char *inputs_path, char *stage,
                 char sha256[65], char *err, size_t err_size) {
  char tmp[PATH_MAX + 8];
  int r;
  /* the archive is replaced: no manifest may describe it meanwhile */
  if (unlink(inputs_path) < 0 && errno != ENOENT) {
    snprintf(err, err_size, "%s: %s", inputs_path, strerror(errno));
    return -errno;
  }
  /* a folder and an archive name of this build's own: a gateway killed
   * mid-build leaves its tar running, which must not touch this one */
  if (!mkdtemp(stage)) {
    snprintf(err, err_size, "%s: %s", dir, strerror(errno));
    return -errno;
  }
  snprintf(tmp, sizeof tmp, "%s.tar.gz", stage);
  char *rm[] = {"rm", "-rf", "--", stage, NULL};
  char bin[PATH_MAX + 8], lib[PATH_MAX + 16];
  snprintf(bin, sizeof bin, "%s/bin", stage);
  snprintf(lib, sizeof lib, "%s/lib/spotlab", stage);
  if ((r = sl_mkdir_p(bin, 0700)) < 0 || (r = sl_mkdir_p(lib, 0700)) < 0) {
    snprintf(err, err_size, "%s: %s", stage, sl_strerror(r));
    goto fail;
  }
  for (size_t i = 0; i < b->in.n; i++) {
    char dst[PATH_MAX + 256];
    snprintf(dst, sizeof dst, "%s/%s", stage, b->in.v[i].dest);
    char *cp[] = {"cp", "-L", "--", b->in.v[i].src, dst, NULL};
    if (run(cp, -1) != 0) {
      snprintf(err, err_size, "cannot copy %s", b->in.v[i].src);
      r = -EIO;
      goto fail;
    }
  }
  /* the copies' manifest: what the archive holds, even where a program
   * was replaced in between */
  if ((r = manifest(&b->in, stage, b->have, sizeof b->have, err, err_size)) < 0)
    goto fail;
  /* fixed owner, group and times: the same programs give the same archive */
  char *tar[] = {"tar", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "--sort=name",
                 "-czf", tmp, "-C", stage, "bin", "lib", NULL};
  r = run(tar, -1);
  run(rm, -1);
  if (r != 0 || rename(tmp, path) < 0) {
    snprintf(err, err_size, "tar failed (%d)", r);
    unlink(tmp);
    return r < 0 ? r : -EIO;
  }
  if ((r = sl_sha256_file(path, 0, sha256)) < 0) {
    snprintf(err, err_size, "%s: %s", path, sl_strerror(r));
    return r;
  }
  write_manifest(inputs_path, b->have, sha256);
  return 0;
fail:
  run(rm, -1);
  return r;
}

int gw_bundle_build(const char *dir, char *path, size_t path_size, char sha256[65], bool *reused,
                    char *err, size_t err_size) {
  char stage[PATH_MAX], inputs_path[PATH_MAX];
  if (reused)
    *reused = false;
  if ((size_t)snprintf(path, path_size, "%s/spotlab-worker.tar.gz", dir) >= path_size ||
      (size_t)snprintf(inputs_path, sizeof inputs_path, "%s/inputs", dir) >= sizeof inputs_path ||
      (size_t)snprintf(stage, sizeof stage, "%s/stage.XXXXXX", dir) >= sizeof stage)
    return SL_ELIMIT;
  struct build *b = calloc(1, sizeof *b);
  if (!b)
    return -ENOMEM;
  remove_stale(dir);
  int r = list_inputs(&b->in, err, err_size);
  if (r == 0 && (r = reusable(b, inputs_path, path, sha256, err, err_size)) == 1) {
    if (reused)
      *reused = true;
    r = 0;
  } else if (r == 0) {
    r = build(b, dir, path, inputs_path, stage, sha256, err, err_size);
  }
  free(b);
  return r;
}

static void *publish(void *arg) {
  struct gw_bundle *b = arg;
  char path[PATH_MAX], sha[65] = "", why[256] = "";
  bool reused;
  int64_t t0 = sl_time_mono_us();
  int r = gw_bundle_build(b->dir, path, sizeof path, sha, &reused, why, sizeof why);
  int64_t built_ms = (sl_time_mono_us() - t0) / 1000;
  char key[128];
  snprintf(key, sizeof key, "_spotlab/bundle-%.16s.tar.gz", sha);
  struct sl_s3_client *c = NULL;
  if (r == 0) {
    struct sl_s3_signer signer = gw_objstore_signer(b->store);
    struct sl_s3_opts opts = gw_objstore_opts(b->store);
    opts.mpu_event = gw_mpu_note_event;
    opts.mpu_event_ud = &b->note;
    if ((r = sl_s3_client_new(&signer, &opts, &c)) < 0)
      snprintf(why, sizeof why, "S3 client: %s", sl_strerror(r));
  }
  struct sl_s3_object head;
  if (r == 0 && (sl_s3_head(c, key, &head, why, sizeof why) < 0 || strcmp(head.sha256, sha))) {
    why[0] = 0;
    r = sl_s3_put_file(c, key, path, NULL, why, sizeof why);
  }
  sl_s3_client_free(c);
  pthread_mutex_lock(&b->mu);
  b->state = r < 0 ? r : 0;
  snprintf(b->key, sizeof b->key, "%s", key);
  snprintf(b->sha256, sizeof b->sha256, "%s", sha);
  snprintf(b->why, sizeof b->why, "%s", why);
  pthread_mutex_unlock(&b->mu);
  if (r == -ECANCELED)
    sl_info(T, "the publication of the worker bundle stopped with the gateway");
  else if (r < 0)
    sl_err(T, "the worker bundle could not be published: %s", why);
  else
    sl_info(T, "worker bundle published as %s (%s in %lld ms)", key,
            reused ? "the programs unchanged: the archive of an earlier start, checked" : "built",
            (long long)built_ms);
  return NULL;
}

int gw_bundle_start(struct gw_objstore *o, const char *state_dir, struct gw_bundle **ret) {
  struct gw_bundle *b = calloc(1, sizeof *b);
  if (!b)
    return -ENOMEM;
  b->store = o;
  b->state = -EAGAIN;
  gw_mpu_note_init(&b->note, state_dir, "bundle");
  snprintf(b->dir, sizeof b->dir, "%.3900s/bundle", state_dir);
  int r = sl_mkdir_p(b->dir, 0700);
  pthread_mutex_init(&b->mu, NULL);
  if (r < 0 || (r = -pthread_create(&b->thread, NULL, publish, b)) < 0) {
    pthread_mutex_destroy(&b->mu);
    free(b);
    return r;
  }
  *ret = b;
  return 0;
}

struct gw_bundle *gw_bundle_free(struct gw_bundle *b) {
  if (!b)
    return NULL;
  pthread_join(b->thread, NULL);
  pthread_mutex_destroy(&b->mu);
  free(b);
  return NULL;
}

int gw_bundle_url(struct gw_bundle *b, long expires_s, char *url, size_t url_size, char sha256[65],
                  char *err, size_t err_size) {
  pthread_mutex_lock(&b->mu);
  int r = b->state;
  char key[128];
  snprintf(key, sizeof key, "%s", b->key);
  snprintf(sha256, 65, "%s", b->sha256);
  if (r < 0 && r != -EAGAIN)
    snprintf(err, err_size, "%s", b->why);
  pthread_mutex_unlock(&b->mu);
  if (r < 0)
    return r;
  return gw_objstore_presign_get(b->store, key, expires_s, url, url_size, err, err_size);
}
