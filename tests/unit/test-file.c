/* common/sl_file: whole-file writes (the old file or the new one, the
 * temporary name gone, a failed folder fsync reported), the sweep of the
 * temporary files a killed writer left, and a folder's removal that follows
 * no link. fsync is wrapped at link time (-Wl,--wrap=fsync). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sl_file.h"

static char root[64];

/* When set, fsync of a folder fails with EIO; fsyncs of folders are counted. */
static bool fail_dir_fsync;
static int dir_fsyncs;
int __real_fsync(int fd);
int __wrap_fsync(int fd);
int __wrap_fsync(int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    dir_fsyncs++;
    if (fail_dir_fsync) {
      errno = EIO;
      return -1;
    }
  }
  return __real_fsync(fd);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static int count_entries(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

static void write_atomic(void) {
  char path[128], buf[16] = {0};
  snprintf(path, sizeof path, "%s/a.txt", root);
  CHECK_INT(sl_file_write_atomic(path, "first", 5, 0600), 0);
  CHECK_INT(sl_file_write_atomic(path, "second", 6, 0600), 0);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) == 6);
  if (fd >= 0) close(fd);
  CHECK_STR(buf, "second");
  CHECK_INT(count_entries(root), 1); /* no temporary file left */
  snprintf(path, sizeof path, "%s/no/such/folder/a.txt", root);
  CHECK(sl_file_write_atomic(path, "x", 1, 0600) < 0);
  unlink(path);

  /* The folder's fsync fails: the error comes back, the new file is in place. */
  snprintf(path, sizeof path, "%s/a.txt", root);
  int before = dir_fsyncs;
  fail_dir_fsync = true;
  CHECK_INT(sl_file_write_atomic(path, "third", 5, 0600), -EIO);
  fail_dir_fsync = false;
  CHECK_INT(dir_fsyncs, before + 1);
  memset(buf, 0, sizeof buf);
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) == 5);
  if (fd >= 0) close(fd);
  CHECK_STR(buf, "third");
  /* sl_file_replace makes no durability promise, so it flushes no folder. */
  before = dir_fsyncs;
  CHECK_INT(sl_file_replace(path, "fourth", 6, 0600), 0);
  CHECK_INT(dir_fsyncs, before);
  CHECK_INT(count_entries(root), 1);
  unlink(path);
}

/* The pid of a process that has exited. */
static pid_t gone_pid(void) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

/* A killed writer's temporary file goes; one whose writer still runs (this
 * process, or its parent), other files, look-alikes and folders stay. */
static void sweep_temporaries(void) {
  char dir[128], path[256];
  snprintf(dir, sizeof dir, "%s/sweep", root);
  CHECK_INT(mkdir(dir, 0700), 0);
  snprintf(path, sizeof path, "%s/instance.json.tmp.%d", dir, (int)gone_pid());
  write_text(path, "{\"half");
  snprintf(path, sizeof path, "%s/keys.json.tmp.%d", dir, (int)gone_pid());
  write_text(path, "");
  snprintf(path, sizeof path, "%s/mine.json.tmp.%d", dir, (int)getpid());
  write_text(path, "x");
  snprintf(path, sizeof path, "%s/parent.json.tmp.%d", dir, (int)getppid());
  write_text(path, "x");
  snprintf(path, sizeof path, "%s/instance.json", dir);
  write_text(path, "{}");
  snprintf(path, sizeof path, "%s/notes.tmp.12a", dir);
  write_text(path, "x");
  snprintf(path, sizeof path, "%s/.tmp.%d", dir, (int)gone_pid());
  write_text(path, "x");
  snprintf(path, sizeof path, "%s/folder.tmp.%d", dir, (int)gone_pid());
  CHECK_INT(mkdir(path, 0700), 0);
  CHECK_INT(count_entries(dir), 8);

  CHECK_INT(sl_file_sweep_temporaries(dir), 2);
  CHECK_INT(count_entries(dir), 6);
  snprintf(path, sizeof path, "%s/mine.json.tmp.%d", dir, (int)getpid());
  CHECK(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/instance.json", dir);
  CHECK(access(path, F_OK) == 0);
  CHECK_INT(sl_file_sweep_temporaries(dir), 0);
  snprintf(path, sizeof path, "%s/absent", root);
  CHECK_INT(sl_file_sweep_temporaries(path), 0);
  CHECK_INT(sl_file_remove_tree(dir), 0);
}

/* A tree with nested folders, an empty one, and links to a file and a
 * folder outside it: the tree goes, what the links name stays. */
static void remove_tree(void) {
  char tree[128], path[256], outside[128], kept[160];
  snprintf(tree, sizeof tree, "%s/tree", root);
  snprintf(outside, sizeof outside, "%s/outside", root);
  snprintf(kept, sizeof kept, "%s/kept.txt", outside);
  CHECK_INT(mkdir(outside, 0700), 0);
  write_text(kept, "keep me");
  CHECK_INT(mkdir(tree, 0700), 0);
  snprintf(path, sizeof path, "%s/a", tree);
  CHECK_INT(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/a/b", tree);
  CHECK_INT(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/a/b/file", tree);
  write_text(path, "x");
  snprintf(path, sizeof path, "%s/empty", tree);
  CHECK_INT(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/a/to-file", tree);
  CHECK_INT(symlink(kept, path), 0);
  snprintf(path, sizeof path, "%s/to-folder", tree);
  CHECK_INT(symlink(outside, path), 0);
  snprintf(path, sizeof path, "%s/dangling", tree);
  CHECK_INT(symlink("/nonexistent/x", path), 0);

  CHECK_INT(sl_file_remove_tree(tree), 0);
  CHECK(access(tree, F_OK) != 0 && errno == ENOENT);
  CHECK(access(kept, R_OK) == 0);
  CHECK_INT(count_entries(outside), 1);
  CHECK_INT(sl_file_remove_tree(tree), 0);   /* gone already: nothing to do */
  CHECK_INT(sl_file_remove_tree(kept), 0);   /* a file alone */
  CHECK(access(kept, F_OK) != 0);
  CHECK_INT(sl_file_remove_tree(outside), 0);
  CHECK_INT(count_entries(root), 0);
}

static void size_text(void) {
  char buf[32];
  CHECK_STR(sl_file_size_text(512, buf, sizeof buf), "512 B");
  CHECK_STR(sl_file_size_text(1024, buf, sizeof buf), "1.0 KiB");
  CHECK_STR(sl_file_size_text(1048575, buf, sizeof buf), "1.0 MiB");
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/sl-file-XXXXXX");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  write_atomic();
  sweep_temporaries();
  remove_tree();
  size_text();
  sl_file_remove_tree(root);
  TEST_MAIN_END();
}
