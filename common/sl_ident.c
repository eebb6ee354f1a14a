/* File hashes and ELF build ids.
 *
 * The build id is read from the file's section headers (SHT_NOTE sections),
 * falling back to its program headers (PT_NOTE segments) for a stripped
 * file whose section table is gone. Every offset and size read from the
 * file is checked against the file's size before use: a truncated or
 * hostile file gives SL_EFORMAT, never a read out of bounds. Files are
 * opened without blocking, so a path naming a FIFO cannot hang the caller. */
#include "sl_ident.h"

#include "sl_err.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOTE_MAX (1u << 20) /* notes are small; more is not a note section */

const char *const sl_image_set_files[SL_IMAGE_SET_FILES] = {
    "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz"};

void sl_image_set_sha256(const char *const hexes[], size_t n, char ret_hex[SL_SHA256_HEX_LEN + 1]) {
  crypto_hash_sha256_state h;
  crypto_hash_sha256_init(&h);
  for (size_t i = 0; i < n && i < SL_IMAGE_SET_FILES; i++) {
    char line[SL_SHA256_HEX_LEN + 64];
    int len = snprintf(line, sizeof line, "%.64s  %s\n", hexes[i], sl_image_set_files[i]);
    crypto_hash_sha256_update(&h, (const unsigned char *)line, (unsigned long long)len);
  }
  unsigned char md[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&h, md);
  sodium_bin2hex(ret_hex, SL_SHA256_HEX_LEN + 1, md, sizeof md);
}

static int read_at(int fd, void *buf, size_t len, uint64_t off, uint64_t file_size) {
  if (off > file_size || len > file_size - off)
    return SL_EFORMAT;
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? -errno : SL_EFORMAT;
    got += (size_t)n;
  }
  return 0;
}

/* Looks for the GNU build id among the notes at [off, off + len). 0 found,
 * SL_ENAME not there, else an error. */
static int scan_notes(int fd, uint64_t off, uint64_t len, uint64_t file_size, char *ret_hex,
                      size_t size) {
  if (len > NOTE_MAX)
    return SL_EFORMAT;
  unsigned char *buf = malloc(len ? len : 1);
  if (!buf)
    return -ENOMEM;
  int r = read_at(fd, buf, len, off, file_size);
  for (uint64_t p = 0; r == 0 && p + sizeof(Elf64_Nhdr) <= len;) {
    Elf64_Nhdr nh;
    memcpy(&nh, buf + p, sizeof nh);
    uint64_t name_at = p + sizeof nh, desc_at = name_at + ((nh.n_namesz + 3u) & ~3u);
    uint64_t next = desc_at + ((nh.n_descsz + 3u) & ~3u);
    if (desc_at > len || nh.n_descsz > len - desc_at)
      break;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(buf + name_at, "GNU", 4)) {
      if (!nh.n_descsz || nh.n_descsz > 64 || size < 2 * nh.n_descsz + 1) {
        r = SL_EFORMAT;
        break;
      }
      sodium_bin2hex(ret_hex, size, buf + desc_at, nh.n_descsz);
      free(buf);
      return 0;
    }
    p = next;
  }
  free(buf);
  return r < 0 ? r : SL_ENAME;
}

int sl_build_id(const char *path, char *ret_hex, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return -errno;
  struct stat st;
  Elf64_Ehdr eh;
  int r = fstat(fd, &st) < 0 ? -errno : read_at(fd, &eh, sizeof eh, 0, (uint64_t)st.st_size);
  if (r == 0 && (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
                 eh.e_ident[EI_DATA] != ELFDATA2LSB))
    r = SL_EFORMAT;
  uint64_t fsize = (uint64_t)st.st_size;
  bool found = false;
  /* sections first: the note section of a linked program */
  if (r == 0 && eh.e_shentsize == sizeof(Elf64_Shdr))
    for (unsigned i = 0; i < eh.e_shnum && !found && r == 0; i++) {
      Elf64_Shdr sh;
      if ((r = read_at(fd, &sh, sizeof sh, eh.e_shoff + (uint64_t)i * sizeof sh, fsize)) < 0)
        break;
      if (sh.sh_type == SHT_NOTE) {
        int s = scan_notes(fd, sh.sh_offset, sh.sh_size, fsize, ret_hex, size);
        if (s == 0)
          found = true;
        else if (s != SL_ENAME)
          r = s;
      }
    }
  if (r == 0 && !found && eh.e_phentsize == sizeof(Elf64_Phdr))
    for (unsigned i = 0; i < eh.e_phnum && !found && r == 0; i++) {
      Elf64_Phdr ph;
      if ((r = read_at(fd, &ph, sizeof ph, eh.e_phoff + (uint64_t)i * sizeof ph, fsize)) < 0)
        break;
      if (ph.p_type == PT_NOTE) {
        int s = scan_notes(fd, ph.p_offset, ph.p_filesz, fsize, ret_hex, size);
        if (s == 0)
          found = true;
        else if (s != SL_ENAME)
          r = s;
      }
    }
  close(fd);
  return r < 0 ? r : found ? 0 : SL_ENAME;
}

bool sl_sha256_hex_ok(const char *s) {
  return s && strlen(s) == SL_SHA256_HEX_LEN && strspn(s, "0123456789abcdef") == SL_SHA256_HEX_LEN;
}

char *sl_job_id_str(int64_t id, char *buf, size_t size) {
  snprintf(buf, size, "J%06lld", (long long)id);
  return buf;
}

int64_t sl_job_id_parse(const char *s) {
  if (!s || s[0] != 'J' || strlen(s) < 7 || strlen(s) > 12)
    return -1;
  int64_t v = 0;
  for (const char *p = s + 1; *p; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    v = v * 10 + (*p - '0');
  }
  return v > 0 ? v : -1;
}
