/* Replays fuzz corpora through a fuzz target without libFuzzer, so every
 * test run exercises the saved inputs with the regular compiler.
 * usage: replay-TARGET FILE|DIR... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) < 0) {
      fprintf(stderr, "cannot stat %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]);
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      bad += run_file(path);
      files++;
    }
    if (d)
      closedir(d);
  }
  printf("replayed %d inputs\n", files);
  /* An empty corpus means the test checks nothing: fail loudly. */
  return bad || files == 0 ? 1 : 0;
}
