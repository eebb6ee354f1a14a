/* `spotlab-kernel install`: the Jupyter kernelspec for the running binary.
 *
 * Writes <data>/jupyter/kernels/<name>/kernel.json and copies the three logos
 * next to it. kernel.json names the executable by the absolute path that
 * /proc/self/exe resolves to, so whichever build ran `install` is the one a
 * front end starts. Every file is written to a temporary name and renamed, so
 * a front end scanning the folder never reads half a kernel.json. The logos
 * are looked up first beside an installed binary (<exe_dir>/../share/spotlab/
 * kernelspec), then in the source tree this binary was built from. */
#include "install.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "sl_err.h"
#include "sl_file.h"

#define KERNEL_NAME_DEFAULT "spotlab"
#define DISPLAY_NAME_DEFAULT "Spot GPU (spotlab)"
#define KERNEL_NAME_MAX 64
#define LOGO_MAX_BYTES (4 * 1024 * 1024)

static const char *const logo_files[] = {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"};

enum dest { DEST_USER, DEST_PREFIX, DEST_SYS_PREFIX };

struct options {
  enum dest dest;
  bool dest_given;
  const char *prefix;       /* DEST_PREFIX: borrowed from argv */
  const char *name;         /* borrowed */
  const char *display_name; /* borrowed */
  bool help;
};

static void usage(FILE *f) {
  fputs("usage: spotlab-kernel install [--user | --prefix DIR | --sys-prefix]\n"
        "                              [--name NAME] [--display-name TEXT]\n"
        "\n"
        "Installs the Jupyter kernelspec for this spotlab-kernel binary.\n"
        "  --user          into $XDG_DATA_HOME/jupyter (default ~/.local/share/jupyter);\n"
        "                  the default\n"
        "  --prefix DIR    into DIR/share/jupyter\n"
        "  --sys-prefix    into $VIRTUAL_ENV, $CONDA_PREFIX or /usr, then share/jupyter\n"
        "  --name NAME     kernelspec name (default " KERNEL_NAME_DEFAULT ")\n"
        "  --display-name  name shown in front ends (default \"" DISPLAY_NAME_DEFAULT "\")\n",
        f);
}

/* Matches "--opt VALUE" and "--opt=VALUE"; advances *i past a separate value. */
static int take_value(int argc, char **argv, int *i, const char *opt, const char **ret) {
  const char *arg = argv[*i];
  size_t n = strlen(opt);
  if (strncmp(arg, opt, n) != 0)
    return 0;
  if (arg[n] == '=') {
    *ret = arg + n + 1;
    return 1;
  }
  if (arg[n] != '\0')
    return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "spotlab-kernel install: %s needs a value\n", opt);
    return -EINVAL;
  }
  *ret = argv[++*i];
  return 1;
}

static int set_dest(struct options *o, enum dest d, const char *arg) {
  if (o->dest_given) {
    fprintf(stderr, "spotlab-kernel install: %s: choose one of --user, --prefix, --sys-prefix\n",
            arg);
    return -EINVAL;
  }
  o->dest = d;
  o->dest_given = true;
  return 0;
}

static bool valid_kernel_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > KERNEL_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok)
      return false;
  }
  return true;
}

static int parse_options(int argc, char **argv, struct options *ret) {
  struct options o = {.dest = DEST_USER,
                      .name = KERNEL_NAME_DEFAULT,
                      .display_name = DISPLAY_NAME_DEFAULT};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *value = NULL;
    int r;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      o.help = true;
    } else if (strcmp(arg, "--user") == 0) {
      if ((r = set_dest(&o, DEST_USER, arg)) < 0)
        return r;
    } else if (strcmp(arg, "--sys-prefix") == 0) {
      if ((r = set_dest(&o, DEST_SYS_PREFIX, arg)) < 0)
        return r;
    } else if ((r = take_value(argc, argv, &i, "--prefix", &value)) != 0) {
      if (r < 0 || (r = set_dest(&o, DEST_PREFIX, arg)) < 0)
        return r;
      if (value[0] == '\0') {
        fprintf(stderr, "spotlab-kernel install: --prefix needs a folder\n");
        return -EINVAL;
      }
      o.prefix = value;
    } else if ((r = take_value(argc, argv, &i, "--name", &value)) != 0) {
      if (r < 0)
        return r;
      o.name = value;
    } else if ((r = take_value(argc, argv, &i, "--display-name", &value)) != 0) {
      if (r < 0)
        return r;
      o.display_name = value;
    } else {
      fprintf(stderr, "spotlab-kernel install: unknown argument '%s'\n", arg);
      return -EINVAL;
    }
  }
  if (!valid_kernel_name(o.name)) {
    fprintf(stderr,
            "spotlab-kernel install: kernel name '%s' must be 1-%d letters, digits, '.', '_' "
            "or '-'\n",
            o.name, KERNEL_NAME_MAX);
    return -EINVAL;
  }
  *ret = o;
  return 0;
}

static int path_join(char *buf, size_t size, const char *a, const char *b) {
  int n = snprintf(buf, size, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= size)
    return -ENAMETOOLONG;
  return 0;
}

/* The folder that holds jupyter/ for the chosen destination, into ret (PATH_MAX). */
static int data_dir(const struct options *o, char *ret) {
  const char *base;
  const char *rest;
  switch (o->dest) {
  case DEST_PREFIX:
    base = o->prefix;
    rest = "share";
    break;
  case DEST_SYS_PREFIX:
    base = getenv("VIRTUAL_ENV");
    if (!base || !base[0])
      base = getenv("CONDA_PREFIX");
    if (!base || !base[0])
      base = "/usr"; /* sys.prefix of the system /usr/bin/python3 */
    rest = "share";
    break;
  case DEST_USER:
  default:
    base = getenv("XDG_DATA_HOME");
    rest = NULL;
    if (!base || !base[0]) {
      base = getenv("HOME");
      rest = ".local/share";
    }
    if (!base || !base[0]) {
      fprintf(stderr, "spotlab-kernel install: --user needs $HOME or $XDG_DATA_HOME\n");
      return -ENOENT;
    }
    break;
  }
  if (!rest) {
    if (strlen(base) >= PATH_MAX)
      return -ENAMETOOLONG;
    strcpy(ret, base);
    return 0;
  }
  return path_join(ret, PATH_MAX, base, rest);
}

/* Creates path and its missing parents (mode 0755). */
static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return -ENAMETOOLONG;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
      return -errno;
    buf[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) < 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Reads a whole regular file of at most max_bytes into an owned buffer. */
static int read_file(const char *path, size_t max_bytes, char **ret, size_t *ret_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int r = 0;
  char *buf = NULL;
  size_t size = 0, got = 0;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    r = -errno;
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    r = -EINVAL;
    goto out;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    r = SL_ELIMIT;
    goto out;
  }
  size = (size_t)st.st_size;
  buf = malloc(size ? size : 1);
  if (!buf) {
    r = -ENOMEM;
    goto out;
  }
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = -errno;
      goto out;
    }
    if (n == 0)
      break;
    got += (size_t)n;
  }
  *ret = buf;
  *ret_len = got;
  buf = NULL;
out:
  free(buf);
  close(fd);
  return r;
}

/* Absolute path of the running executable and its folder (both PATH_MAX). */
static int self_exe(char *ret_path, char *ret_dir) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0)
    return -errno;
  if ((size_t)n >= sizeof buf - 1)
    return -ENAMETOOLONG;
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (!slash)
    return -EINVAL;
  strcpy(ret_path, buf);
  *slash = '\0';
  strcpy(ret_dir, buf[0] ? buf : "/");
  return 0;
}

/* First folder holding every logo: the installed share dir, then the source tree. */
static int find_logo_dir(const char *exe_dir, char *ret) {
  char candidates[2][PATH_MAX];
  if (path_join(candidates[0], PATH_MAX, exe_dir, "../share/spotlab/kernelspec") < 0)
    candidates[0][0] = '\0';
  if (path_join(candidates[1], PATH_MAX, SPOTLAB_SOURCE_ROOT, "kernelspec") < 0)
    candidates[1][0] = '\0';
  for (size_t c = 0; c < 2; c++) {
    if (!candidates[c][0])
      continue;
    bool all = true;
    for (size_t i = 0; i < sizeof logo_files / sizeof logo_files[0] && all; i++) {
      char p[PATH_MAX];
      all = path_join(p, sizeof p, candidates[c], logo_files[i]) == 0 && access(p, R_OK) == 0;
    }
    if (all) {
      strcpy(ret, candidates[c]);
      return 0;
    }
  }
  return -ENOENT;
}

/* kernel.json's text for exe, owned (free()), into *ret. */
static int render_kernel_json(const char *exe, const struct options *o, char **ret) {
  json_t *spec = json_pack("{s:[s,s,s], s:s, s:s, s:s, s:{s:b}}",
                           "argv", exe, "-f", "{connection_file}",
                           "display_name", o->display_name,
                           "language", "spotlab",
                           "interrupt_mode", "message",
                           "metadata", "debugger", 0);
  if (!spec) /* jansson refuses strings that are not UTF-8 */
    return SL_EJSON;
  char *text = json_dumps(spec, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(spec);
  if (!text)
    return -ENOMEM;
  size_t len = strlen(text);
  char *with_nl = realloc(text, len + 2);
  if (!with_nl) {
    free(text);
    return -ENOMEM;
  }
  with_nl[len] = '\n';
  with_nl[len + 1] = '\0';
  *ret = with_nl;
  return 0;
}

static int copy_logos(const char *from, const char *to) {
  for (size_t i = 0; i < sizeof logo_files / sizeof logo_files[0]; i++) {
    char src[PATH_MAX], dst[PATH_MAX];
    int r = path_join(src, sizeof src, from, logo_files[i]);
    if (r == 0)
      r = path_join(dst, sizeof dst, to, logo_files[i]);
    char *data = NULL;
    size_t len = 0;
    if (r == 0)
      r = read_file(src, LOGO_MAX_BYTES, &data, &len);
    if (r == 0)
      r = sl_file_write_atomic(dst, data, len, 0644);
    free(data);
    if (r < 0) {
      fprintf(stderr, "spotlab-kernel install: cannot copy %s to %s: %s\n", src, to,
              sl_strerror(r));
      return r;
    }
  }
  return 0;
}

int jk_install_main(int argc, char **argv) {
  struct options o;
  if (parse_options(argc, argv, &o) < 0) {
    fputs("try 'spotlab-kernel install --help'\n", stderr);
    return 2;
  }
  if (o.help) {
    usage(stdout);
    return 0;
  }

  char exe[PATH_MAX], exe_dir[PATH_MAX];
  int r = self_exe(exe, exe_dir);
  if (r < 0) {
    fprintf(stderr, "spotlab-kernel install: cannot resolve /proc/self/exe: %s\n",
            sl_strerror(r));
    return 1;
  }

  char *json_text = NULL;
  if (render_kernel_json(exe, &o, &json_text) < 0) {
    fprintf(stderr, "spotlab-kernel install: the display name and the binary's path must be "
                    "valid UTF-8\n");
    return 1;
  }

  int status = 1;
  char data[PATH_MAX], jupyter[PATH_MAX], kernels[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
  if ((r = data_dir(&o, data)) < 0 ||
      (r = path_join(jupyter, sizeof jupyter, data, "jupyter")) < 0 ||
      (r = path_join(kernels, sizeof kernels, jupyter, "kernels")) < 0 ||
      (r = path_join(dir, sizeof dir, kernels, o.name)) < 0 ||
      (r = path_join(path, sizeof path, dir, "kernel.json")) < 0) {
    fprintf(stderr, "spotlab-kernel install: cannot build the kernelspec folder name: %s\n",
            sl_strerror(r));
    goto out;
  }
  if ((r = mkdir_p(dir)) < 0) {
    fprintf(stderr, "spotlab-kernel install: cannot create %s: %s\n", dir, sl_strerror(r));
    goto out;
  }
  if ((r = sl_file_write_atomic(path, json_text, strlen(json_text), 0644)) < 0) {
    fprintf(stderr, "spotlab-kernel install: cannot write %s: %s\n", path, sl_strerror(r));
    goto out;
  }

  char logos[PATH_MAX];
  if (find_logo_dir(exe_dir, logos) < 0)
    fprintf(stderr,
            "spotlab-kernel install: warning: logos not found in %s/../share/spotlab/kernelspec "
            "or %s/kernelspec; the kernelspec has none\n",
            exe_dir, SPOTLAB_SOURCE_ROOT);
  else if (copy_logos(logos, dir) < 0)
    goto out;

  printf("installed kernelspec %s in %s\n", o.name, dir);
  status = 0;
out:
  free(json_text);
  return status;
}
