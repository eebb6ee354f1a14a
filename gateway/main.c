/* spotlab-gateway: command line, configuration layering, the state-folder
 * lock, the embedded default and daemon mode.
 *
 * Order of configuration: table defaults (or the embedded defaults), the
 * file named by --config or SPOTLAB_CONFIG, the environment (SPOTLAB_HOME
 * sets state_dir in embedded mode), then the command line. One gateway per
 * state folder: an flock on state_dir/gateway.lock, held for the life of the
 * process. The folder and all in it are the gateway's user's alone (0700,
 * files 0600 through umask 077); what an older gateway left open to others
 * is tightened at start, with a warning. With --daemon the process
 * detaches (setsid, double fork) and the command returns only once the
 * sockets are bound, so a kernel that starts it can connect at once. */
#include "conf.h"
#include "config.h"
#include "gateway.h"
#include "provider.h"

#include "sl_err.h"
#include "sl_file.h"
#include "sl_hmac.h"
#include "sl_log.h"
#include "sl_path.h"
#include "sl_sigpipe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define T "gateway"
#define TOKEN_LINE_MAX 4096 /* of state_dir/token's first line, as the clients read it */

static void usage(FILE *out) {
  fputs("usage: spotlab-gateway [--embedded] [--daemon] [--config FILE] [--state-dir DIR]\n"
        "                       [--listen ADDR] [--workers ADDR] [--dump-config]\n"
        "                       [--check NAME]\n"
        "       spotlab-gateway --help | --version\n"
        "  --embedded       per-user gateway: state in $SPOTLAB_HOME, the local provider\n"
        "  --daemon         detach once the sockets are bound\n"
        "  --config FILE    INI configuration (default: $SPOTLAB_CONFIG)\n"
        "  --state-dir DIR  sets [gateway] state_dir, the folder of the database and keys\n"
        "  --listen ADDR    sets [gateway] listen, the kernel/CLI socket (tcp://, ipc://)\n"
        "  --workers ADDR   sets [gateway] workers, the workers' socket (tcp://, ipc://)\n"
        "  --dump-config    print the effective configuration and exit\n"
        "  --check NAME     check what provider NAME needs in its cloud (aws: every EC2\n"
        "                   call it makes, with DryRun, naming each missing IAM\n"
        "                   permission; docs/aws.md)\n"
        "  --help           print this help and exit\n"
        "  --version        print the version and exit\n"
        "See docs/admin.md for every option.\n", out);
}

struct args {
  const char *config, *state_dir, *listen, *workers;
  bool embedded, daemon, dump;
  const char *check;            /* --check PROVIDER */
};

static int parse_args(int argc, char **argv, struct args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    const char **dst = !strcmp(s, "--config") ? &a->config
                     : !strcmp(s, "--state-dir") ? &a->state_dir
                     : !strcmp(s, "--listen") ? &a->listen
                     : !strcmp(s, "--workers") ? &a->workers
                     : !strcmp(s, "--check") ? &a->check : NULL;
    if (dst) {
      if (i + 1 >= argc) {
        fprintf(stderr, "spotlab-gateway: %s needs a value\n", s);
        return 2;
      }
      *dst = argv[++i];
      if (dst == &a->config && !**dst) {
        fprintf(stderr, "spotlab-gateway: --config: the path is empty (leave --config out to"
                " run without a file)\n");
        return 2;
      }
    } else if (!strcmp(s, "--embedded")) {
      a->embedded = true;
    } else if (!strcmp(s, "--daemon")) {
      a->daemon = true;
    } else if (!strcmp(s, "--dump-config")) {
      a->dump = true;
    } else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(s, "--version")) {
      printf("spotlab-gateway %s\n", SPOTLAB_VERSION);
      return 1;
    } else {
      fprintf(stderr, "spotlab-gateway: unknown argument %s\n", s);
      usage(stderr);
      return 2;
    }
  }
  return 0;
}

static int build_config(const struct args *a, struct gw_config *cfg, char *err, size_t size) {
  gw_config_defaults(cfg);
  char home[1024];
  if (a->embedded) {
    int r = sl_spotlab_home(home, sizeof home);
    if (r < 0)
      return snprintf(err, size, "cannot find SPOTLAB_HOME: %s", sl_strerror(r)), r;
    gw_config_embedded(cfg, home);
  }
  /* An empty SPOTLAB_CONFIG is refused, not read as unset: nothing in
   * spotlab sets it empty, and a variable that lost its value (a script's
   * SPOTLAB_CONFIG="$CONF" with CONF unset) would otherwise start a team
   * gateway on the built-in defaults. */
  const char *file = a->config ? a->config : getenv("SPOTLAB_CONFIG");
  if (file && !*file)
    return snprintf(err, size, "SPOTLAB_CONFIG is set but empty (unset it to run without a"
                    " file)"), SL_ECONFIG;
  if (file) {
    int r = gw_config_load_file(cfg, file, err, size);
    if (r < 0)
      return r;
  }
  if (a->embedded && getenv("SPOTLAB_HOME"))
    snprintf(cfg->state_dir, sizeof cfg->state_dir, "%s", home);
  struct { const char *v, *name, *flag; } cl[] = {
    {a->state_dir, "state_dir", "--state-dir"}, {a->listen, "listen", "--listen"},
    {a->workers, "workers", "--workers"},
  };
  for (size_t i = 0; i < 3; i++) {
    char msg[512];
    if (cl[i].v && gw_config_set(cfg, "gateway", cl[i].name, cl[i].v, msg, sizeof msg) < 0)
      return snprintf(err, size, "%s: %s", cl[i].flag, msg), SL_ECONFIG;
  }
  return 0;
}

/* Whether token is one the clients send as the file holds it: at least 16
 * characters, printable ASCII without blanks (they read the file's first
 * line up to its first blank, and a hello carries UTF-8 only). */
static bool usable_token(const char *token) {
  size_t n = strlen(token);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f)
      return false;
  return n >= 16;
}

/* The embedded gateway's user: a token kept in state_dir/token (0600); a
 * file without a usable one gets a new one, and says so. */
static int embedded_user(struct gw_config *cfg, char *err, size_t size) {
  char path[1200], token[TOKEN_LINE_MAX] = "";
  snprintf(path, sizeof path, "%s/token", cfg->state_dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(token, sizeof token, f))
      token[0] = 0;
    fclose(f);
    token[strcspn(token, "\r\n")] = 0;
    if (!usable_token(token))
      sl_warn(T, "%s: its first line is not a token of 16 or more printable characters without"
                 " blanks; a new one is written", path);
  }
  if (!usable_token(token)) {
    uint8_t rnd[24];
    sl_random_bytes(rnd, sizeof rnd);
    for (size_t i = 0; i < sizeof rnd; i++)
      sprintf(token + 2 * i, "%02x", rnd[i]);
    token[2 * sizeof rnd] = '\n';
    int r = sl_file_write_atomic(path, token, 2 * sizeof rnd + 1, 0600); /* never a torn token */
    token[2 * sizeof rnd] = 0;
    if (r < 0) {
      snprintf(err, size, "%s: %s", path, sl_strerror(r));
      return r;
    }
  }
  chmod(path, 0600);
  if (cfg->n_users >= GW_MAX_USERS)
    return snprintf(err, size, "too many users"), SL_ELIMIT;
  struct gw_user_cfg *u = &cfg->users[cfg->n_users++];
  memset(u, 0, sizeof *u);
  const struct passwd *pw = getpwuid(getuid());
  const char *name = pw ? pw->pw_name : getenv("USER");
  snprintf(u->name, sizeof u->name, "%s", name && *name ? name : "local");
  sl_sha256_hex(token, strlen(token), u->token_sha256);
  return 0;
}

/* The state folder holds token hashes, notebook variables, keys and models:
 * only the gateway's user may enter it. An existing folder that others
 * could enter is tightened to 0700, with a warning; one that another user
 * owns, or that every user may write (/tmp), is no state folder and is
 * refused: whoever can write there could have put files in it, and
 * tightening a shared folder would lock its users out. */
static int private_folder(const char *dir, char *err, size_t size) {
  int r = sl_mkdir_p(dir, 0700);
  if (r < 0)
    return snprintf(err, size, "%s: %s", dir, sl_strerror(r)), r;
  struct stat st;
  if (stat(dir, &st) < 0)
    r = -errno;
  else if (!S_ISDIR(st.st_mode))
    r = -ENOTDIR;
  if (r < 0)
    return snprintf(err, size, "%s: %s", dir, sl_strerror(r)), r;
  if (st.st_uid != geteuid())
    return snprintf(err, size, "the state folder %s belongs to uid %u, not to the gateway's"
                    " user (uid %u)", dir, (unsigned)st.st_uid, (unsigned)geteuid()), -EPERM;
  if (st.st_mode & (S_IWOTH | S_ISVTX))
    return snprintf(err, size, "the state folder %s is writable by every user (mode %04o); give"
                    " the gateway a folder of its own", dir, (unsigned)(st.st_mode & 07777)),
           -EPERM;
  if (!(st.st_mode & 077))
    return 0;
  if (chmod(dir, 0700) < 0) {
    r = -errno;
    return snprintf(err, size, "the state folder %s is mode %03o and cannot be made private: %s",
                    dir, (unsigned)(st.st_mode & 0777), sl_strerror(r)), r;
  }
  sl_warn(T, "the state folder %s was mode %03o (other users could read it); now 0700", dir,
          (unsigned)(st.st_mode & 0777));
  return 0;
}

struct tighten {
  size_t n, failed;
  char first[256];
};

/* Takes the group and other bits off everything under the folder open as
 * fd (taken), depth levels at most, never following a link. gateway.key is
 * left to keys.c, which refuses a secret key that others could read. */
static void tighten_tree(int fd, const char *rel, int depth, struct tighten *t) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  const struct dirent *e;
  while ((e = readdir(d))) {
    struct stat st;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
        (!*rel && !strcmp(e->d_name, "gateway.key")) ||
        fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISLNK(st.st_mode))
      continue;
    if ((st.st_mode & 077) && fchmodat(fd, e->d_name, st.st_mode & 0700, 0) < 0) {
      t->failed++;
    } else if (st.st_mode & 077 && t->n++ == 0) {
      snprintf(t->first, sizeof t->first, "%s%s", rel, e->d_name);
    }
    int sub;
    char path[4096];
    if (S_ISDIR(st.st_mode) && depth > 0 &&
        snprintf(path, sizeof path, "%s%s/", rel, e->d_name) < (int)sizeof path &&
        (sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
      tighten_tree(sub, path, depth - 1, t);
  }
  closedir(d);
}

/* Every file under the state folder readable by its owner only: files an
 * older gateway (or SQLite, copying the database's mode to -wal and -shm)
 * left open to others are tightened, with one warning. */
static void private_files(const char *dir) {
  struct tighten t = {0};
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    tighten_tree(fd, "", 32, &t);
  if (t.n)
    sl_warn(T, "%zu files under %s could be read by other users (%s, ...); now by this user only",
            t.n, dir, t.first);
  if (t.failed)
    sl_warn(T, "%zu files under %s that other users can read could not be tightened", t.failed,
            dir);
}

/* Takes state_dir/gateway.lock; returns the fd (kept open) or an error. */
static int lock_state(const struct gw_config *cfg, char *err, size_t size) {
  char path[1200];
  int r = private_folder(cfg->state_dir, err, size);
  if (r < 0)
    return r;
  snprintf(path, sizeof path, "%s/gateway.lock", cfg->state_dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(err, size, "%s: %s", path, strerror(e));
    return -e;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    char pidpath[1200], pid[32] = "?";
    snprintf(pidpath, sizeof pidpath, "%s/gateway.pid", cfg->state_dir);
    FILE *f = fopen(pidpath, "r");
    if (f) {
      if (fgets(pid, sizeof pid, f))
        pid[strcspn(pid, "\n")] = 0;
      fclose(f);
    }
    snprintf(err, size, "another spotlab-gateway (pid %s) is already running on %s", pid,
             cfg->state_dir);
    close(fd);
    return -EBUSY;
  }
  return fd;
}

/* Forks twice; the grandchild returns 0 with *ret_ready the pipe to report
 * on. The original process waits for that report and exits with it. */
static int daemonize(const struct gw_config *cfg, int *ret_ready) {
  int p[2];
  if (pipe(p) < 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0)
    return -errno;
  if (pid > 0) {
    close(p[1]);
    char buf[1024];
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    waitpid(pid, NULL, 0);
    if (n == 1 && buf[0] == 0)
      _exit(0);
    if (n > 0) {
      buf[n] = 0;
      fprintf(stderr, "spotlab-gateway: %s\n", buf);
    } else {
      fprintf(stderr, "spotlab-gateway: the daemon exited before it was ready\n");
    }
    _exit(1);
  }
  close(p[0]);
  setsid();
  pid = fork();
  if (pid < 0)
    _exit(1);
  if (pid > 0)
    _exit(0);
  char log[1200];
  snprintf(log, sizeof log, "%s/gateway.log", cfg->state_dir);
  sl_mkdir_p(cfg->state_dir, 0700);
  int null = open("/dev/null", O_RDWR);
  int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
  }
  if (lf >= 0)
    dup2(lf, 2);
  *ret_ready = p[1];
  return 0;
}

static void report(int ready, const char *err) {
  if (ready < 0)
    return;
  if (err)
    (void)!write(ready, err, strlen(err));
  else
    (void)!write(ready, "", 1);
  close(ready);
}

/* Whole or absent for a reader (a second gateway naming this one, the CLI):
 * written in place, an empty file could be read between its creation and
 * its write. */
static int write_pid(const struct gw_config *cfg) {
  char path[1200], text[32];
  snprintf(path, sizeof path, "%s/gateway.pid", cfg->state_dir);
  int n = snprintf(text, sizeof text, "%d\n", (int)getpid());
  int r = sl_file_replace(path, text, (size_t)n, 0600);
  if (r < 0)
    sl_warn(T, "cannot write %s: %s", path, sl_strerror(r));
  return r;
}

int gw_main(int argc, char **argv) {
  sl_log_init("spotlab-gateway");
  struct args a = {0};
  int r = parse_args(argc, argv, &a);
  if (r)
    return r == 1 ? 0 : 2;
  static struct gw_config cfg;
  char err[4096] = "";
  if (build_config(&a, &cfg, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab-gateway: %s\n", err);
    return 2;
  }
  if (a.dump)
    return gw_config_dump(&cfg, stdout) < 0 ? 1 : 0;
  if (a.check) {
    const struct gw_provider_class *cls = gw_provider_find(a.check);
    if (!cls || !cls->check) {
      fprintf(stderr, "spotlab-gateway: --check: the provider \"%s\" has no check\n", a.check);
      return 2;
    }
    return cls->check(&cfg, stdout) < 0 ? 1 : 0;
  }
  if (sl_crypto_init() < 0) {
    fprintf(stderr, "spotlab-gateway: libsodium failed to initialise\n");
    return 1;
  }
  /* whatever the gateway and its local workers create (the database and
   * the -wal and -shm SQLite makes beside it, logs, checkpoints) is theirs
   * alone */
  umask(077);
  int ready = -1;
  if (a.daemon && (r = daemonize(&cfg, &ready)) < 0) {
    fprintf(stderr, "spotlab-gateway: cannot detach: %s\n", sl_strerror(r));
    return 1;
  }
  int lock = lock_state(&cfg, err, sizeof err);
  if (lock < 0 || (cfg.embedded && embedded_user(&cfg, err, sizeof err) < 0)) {
    fprintf(stderr, "spotlab-gateway: %s\n", err);
    report(ready, err);
    return 1;
  }
  private_files(cfg.state_dir);
  if ((r = sl_file_sweep_temporaries(cfg.state_dir)) > 0)
    sl_info(T, "removed %d temporary files a stopped gateway left in %s", r, cfg.state_dir);
  /* the loop polls the signal pipe; a write a signal comes in (a log line to
   * a full pipe) goes on */
  if ((r = sl_sigpipe_catch(SIGTERM, NULL)) < 0 || (r = sl_sigpipe_catch(SIGINT, NULL)) < 0) {
    snprintf(err, sizeof err, "cannot catch signals: %s", sl_strerror(r));
    fprintf(stderr, "spotlab-gateway: %s\n", err);
    report(ready, err);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  struct gw *g = NULL;
  if ((r = gw_new(&cfg, &g, err, sizeof err)) < 0) {
    fprintf(stderr, "spotlab-gateway: %s\n", err);
    report(ready, err);
    return r == SL_ECONFIG ? 2 : 1; /* a configuration error only the start can find */
  }
  write_pid(&cfg);
  report(ready, NULL);
  r = gw_run(g, sl_sigpipe_fd());
  gw_free(g);
  char pidpath[1200];
  snprintf(pidpath, sizeof pidpath, "%s/gateway.pid", cfg.state_dir);
  unlink(pidpath);
  close(lock);
  return r < 0 ? 1 : 0;
}
