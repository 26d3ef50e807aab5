/*
 * device/kernel_cache: compiled kernel images on disk (kernel_cache.h).
 *
 * File layout, native byte order (a cache is one machine's): the header,
 * then key_len bytes of key, then image_len bytes of image.
 */
#include "kernel_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

#define MAGIC "HCKIMG1"

struct file_header {
  char magic[8];
  uint64_t key_hash, key_len, image_len, image_hash;
};

/* FNV-1a: names the file and checks the image; the key itself is compared
 * whole, so a collision costs a compile, not a wrong image. */
static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* HETCCL_KERNEL_CACHE_DIR, else $XDG_CACHE_HOME/hetccl, else
 * $HOME/.cache/hetccl; false when off or no home is known. */
static bool cache_dir(char *dir, size_t n) {
  const char *set = hc_param_str(HC_P_KERNEL_CACHE_DIR);
  if (strcmp(set, "none") == 0) return false;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int len;
  if (set[0]) len = snprintf(dir, n, "%s", set);
  else if (xdg && xdg[0] == '/') len = snprintf(dir, n, "%s/hetccl", xdg);
  else if (home && home[0] == '/') len = snprintf(dir, n, "%s/.cache/hetccl", home);
  else return false;
  return len > 0 && (size_t)len < n;
}

/* The file in dir of the key whose hash is key_hash. */
static bool file_in(const char *dir, uint64_t key_hash, char *path, size_t n) {
  const int len = snprintf(path, n, "%s/kernels-%016llx.bin", dir, (unsigned long long)key_hash);
  return len > 0 && (size_t)len < n;
}

bool hc_kernel_cache_path(const char *key, size_t key_len, char *path, size_t n) {
  char dir[4096];
  return cache_dir(dir, sizeof(dir)) && file_in(dir, fnv1a(key, key_len), path, n);
}

static bool read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= (size_t)got;
  }
  return true;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= (size_t)put;
  }
  return true;
}

bool hc_kernel_cache_load(const char *key, size_t key_len, void **image, size_t *size) {
  *image = NULL;
  *size = 0;
  char dir[4096], path[4200];
  const uint64_t key_hash = fnv1a(key, key_len);
  if (!cache_dir(dir, sizeof(dir)) || !file_in(dir, key_hash, path, sizeof(path))) return false;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) HC_INFO(HC_DEV, "kernel cache: %s: %s; compiling", path, strerror(errno));
    return false;
  }
  const char *why = NULL;
  struct file_header h;
  struct stat st;
  char *stored_key = NULL, *img = NULL;
  if (fstat(fd, &st) != 0 || !read_all(fd, &h, sizeof(h))) why = "unreadable header";
  else if (st.st_uid != geteuid()) why = "owned by another user, whose code this process would run";
  else if (memcmp(h.magic, MAGIC, sizeof(h.magic)) != 0) why = "not a kernel image file";
  else if (h.key_len != key_len || h.key_hash != key_hash) why = "another key";
  else if (h.image_len == 0 || (uint64_t)st.st_size != sizeof(h) + h.key_len + h.image_len) why = "wrong length";
  else if ((stored_key = malloc(key_len)) == NULL || (img = malloc(h.image_len)) == NULL) why = "out of host memory";
  else if (!read_all(fd, stored_key, key_len) || memcmp(stored_key, key, key_len) != 0) why = "another key";
  else if (!read_all(fd, img, h.image_len) || fnv1a(img, h.image_len) != h.image_hash) why = "damaged image";
  close(fd);
  free(stored_key);
  if (why != NULL) {
    HC_INFO(HC_DEV, "kernel cache: %s: %s; compiling", path, why);
    free(img);
    return false;
  }
  *image = img;
  *size = h.image_len;
  return true;
}

/* mkdir -p of dir, each level 0700 (the images are this user's code). */
static bool make_dirs(char *dir) {
  for (char *p = dir + 1;; p++) {
    const char c = *p;
    if (c != '/' && c != 0) continue;
    *p = 0;
    const bool ok = mkdir(dir, 0700) == 0 || errno == EEXIST;
    *p = c;
    if (!ok) return false;
    if (c == 0) return true;
  }
}

bool hc_kernel_cache_store(const char *key, size_t key_len, const void *image, size_t size) {
  char dir[4096], path[4200], tmp[4300];
  const uint64_t key_hash = fnv1a(key, key_len);
  if (!cache_dir(dir, sizeof(dir)) || !file_in(dir, key_hash, path, sizeof(path))) return false;
  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
  if (!make_dirs(dir)) {
    HC_INFO(HC_DEV, "kernel cache: cannot create %s: %s; the image is not kept", dir, strerror(errno));
    return false;
  }
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    HC_INFO(HC_DEV, "kernel cache: %s: %s; the image is not kept", tmp, strerror(errno));
    return false;
  }
  struct file_header h = {
      .key_hash = key_hash, .key_len = key_len, .image_len = size, .image_hash = fnv1a(image, size)};
  memcpy(h.magic, MAGIC, sizeof(h.magic));
  bool ok = write_all(fd, &h, sizeof(h)) && write_all(fd, key, key_len) && write_all(fd, image, size);
  ok = close(fd) == 0 && ok;
  ok = ok && rename(tmp, path) == 0;
  if (!ok) {
    HC_INFO(HC_DEV, "kernel cache: writing %s: %s; the image is not kept", path, strerror(errno));
    unlink(tmp);
  }
  return ok;
}
