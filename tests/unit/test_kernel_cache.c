/*
 * The on-disk kernel image cache (device/kernel_cache.c), with no GPU:
 * - an image stored under a key loads back byte for byte, and leaves no
 *   temporary file; the directory is made, 0700, however deep;
 * - every file that does not hold exactly this key and an intact image is
 *   a miss, never a wrong image: another key's file at this key's path,
 *   a truncated file, a changed image byte, a changed key byte, a foreign
 *   file, an empty file; so is a file of another user (as root only);
 * - HETCCL_KERNEL_CACHE_DIR=none turns it off; unset, XDG_CACHE_HOME then
 *   HOME name the directory; a directory that cannot be made makes the
 *   store fail without harm.
 * The end-to-end use (test_device_gpu under the fake driver, compiled in
 * the first process, read back in the second) is ctest
 * gpu_kernel_cache_fake_cuda (tests/gpu/kernel_cache.sh).
 * Run: ./test_kernel_cache (no arguments).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/kernel_cache.h"
#include "testutil.h"

static char root[256];

static void fill(unsigned char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

/* Loads key: true when it hits with exactly want (want NULL: must miss). */
static bool loads(const char *key, const unsigned char *want, size_t want_len) {
  void *img = NULL;
  size_t len = 0;
  const bool hit = hc_kernel_cache_load(key, strlen(key), &img, &len);
  const bool ok = want == NULL ? !hit && img == NULL : hit && len == want_len && memcmp(img, want, len) == 0;
  free(img);
  return ok;
}

static size_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* Rewrites path through edit(bytes, n), which may shorten n. */
static void edit_file(const char *path, void (*edit)(unsigned char *b, size_t *n)) {
  size_t n = file_size(path);
  unsigned char *b = malloc(n ? n : 1);
  FILE *f = fopen(path, "rb");
  CHECK(b && f && fread(b, 1, n, f) == n, "reading %s", path);
  if (f) fclose(f);
  if (b) edit(b, &n);
  f = fopen(path, "wb");
  CHECK(b && f && fwrite(b, 1, n, f) == n, "writing %s", path);
  if (f) fclose(f);
  free(b);
}
static void truncate_last(unsigned char *b, size_t *n) {
  (void)b;
  *n -= 1;
}
static void flip_last(unsigned char *b, size_t *n) { b[*n - 1] ^= 1; }
static void flip_key_byte(unsigned char *b, size_t *n) {
  (void)n;
  b[40 + 3] ^= 1; /* the header is 40 bytes; then the key */
}
static void foreign(unsigned char *b, size_t *n) { memcpy(b, "ELF\x7f....", *n < 8 ? *n : 8); }
static void empty(unsigned char *b, size_t *n) {
  (void)b;
  *n = 0;
}

static int count_tmp_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += strstr(e->d_name, ".tmp") != NULL;
  if (d) closedir(d);
  return n;
}

static void round_trip(void) {
  tu_set_case("store, load back");
  char dir[320], path[512];
  snprintf(dir, sizeof(dir), "%s/a/b/c", root);
  setenv("HETCCL_KERNEL_CACHE_DIR", dir, 1);
  static unsigned char img[300000], other[1000];
  fill(img, sizeof(img), 1);
  fill(other, sizeof(other), 2);
  const char *key = "NVRTC 13.0 /x/libnvrtc.so 1 2\n--gpu-architecture=sm_90 bin\n-opt\nsource";
  CHECK(loads(key, NULL, 0), "an empty cache misses");
  CHECK(hc_kernel_cache_store(key, strlen(key), img, sizeof(img)), "store");
  CHECK(loads(key, img, sizeof(img)), "the stored image loads back, byte for byte");
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700, "%s made, mode 0700", dir);
  CHECK(count_tmp_files(dir) == 0, "no temporary file left in %s", dir);
  CHECK(hc_kernel_cache_path(key, strlen(key), path, sizeof(path)) && strncmp(path, dir, strlen(dir)) == 0,
        "the file lies in the directory: %s", path);

  tu_set_case("another key's file at this key's path");
  const char *key2 = "NVRTC 13.0 /x/libnvrtc.so 1 2\n--gpu-architecture=sm_80 bin\n-opt\nsource";
  char path2[512];
  CHECK(hc_kernel_cache_store(key2, strlen(key2), other, sizeof(other)), "store of a second key");
  CHECK(loads(key2, other, sizeof(other)), "the second key loads its own image");
  CHECK(loads(key, img, sizeof(img)), "the first key still loads its own");
  CHECK(hc_kernel_cache_path(key2, strlen(key2), path2, sizeof(path2)) && strcmp(path, path2) != 0,
        "two keys, two files");
  CHECK(rename(path2, path) == 0, "rename");
  CHECK(loads(key, NULL, 0), "the first key misses on the second key's file");

  const struct {
    const char *what;
    void (*edit)(unsigned char *b, size_t *n);
  } damage[] = {{"truncated by a byte", truncate_last},
                {"last image byte changed", flip_last},
                {"a key byte changed", flip_key_byte},
                {"foreign bytes", foreign},
                {"empty", empty}};
  tu_set_case("a file of another user");
  CHECK(hc_kernel_cache_store(key, strlen(key), img, sizeof(img)), "store");
  if (chown(path, geteuid() + 1, (gid_t)-1) == 0) CHECK(loads(key, NULL, 0), "a miss");
  else printf("SKIP a file of another user: chown needs root\n");
  CHECK(unlink(path) == 0, "unlink");
  for (size_t i = 0; i < sizeof(damage) / sizeof(damage[0]); i++) {
    tu_set_case("file %s", damage[i].what);
    CHECK(hc_kernel_cache_store(key, strlen(key), img, sizeof(img)), "store");
    edit_file(path, damage[i].edit);
    CHECK(loads(key, NULL, 0), "a miss");
    CHECK(hc_kernel_cache_store(key, strlen(key), img, sizeof(img)) && loads(key, img, sizeof(img)),
          "a store over it mends it");
  }
}

static void where(void) {
  const char *key = "k";
  const unsigned char img[3] = {1, 2, 3};
  char path[512], want[512];

  tu_set_case("HETCCL_KERNEL_CACHE_DIR=none");
  setenv("HETCCL_KERNEL_CACHE_DIR", "none", 1);
  CHECK(!hc_kernel_cache_path(key, 1, path, sizeof(path)), "no path");
  CHECK(!hc_kernel_cache_store(key, 1, img, sizeof(img)) && loads(key, NULL, 0), "store and load both off");

  tu_set_case("default directory");
  unsetenv("HETCCL_KERNEL_CACHE_DIR");
  snprintf(want, sizeof(want), "%s/xdg", root);
  setenv("XDG_CACHE_HOME", want, 1);
  CHECK(hc_kernel_cache_path(key, 1, path, sizeof(path)) && strstr(path, "/xdg/hetccl/kernels-") != NULL,
        "$XDG_CACHE_HOME/hetccl: %s", path);
  unsetenv("XDG_CACHE_HOME");
  snprintf(want, sizeof(want), "%s/home", root);
  setenv("HOME", want, 1);
  CHECK(hc_kernel_cache_path(key, 1, path, sizeof(path)) && strstr(path, "/home/.cache/hetccl/kernels-") != NULL,
        "$HOME/.cache/hetccl: %s", path);
  CHECK(hc_kernel_cache_store(key, 1, img, sizeof(img)) && loads(key, img, sizeof(img)), "stored under $HOME");

  tu_set_case("a directory that cannot be made");
  snprintf(want, sizeof(want), "%s/file", root);
  FILE *f = fopen(want, "w");
  CHECK(f != NULL, "creating %s", want);
  if (f) fclose(f);
  snprintf(want, sizeof(want), "%s/file/sub", root);
  setenv("HETCCL_KERNEL_CACHE_DIR", want, 1);
  CHECK(!hc_kernel_cache_store(key, 1, img, sizeof(img)), "the store fails");
  CHECK(loads(key, NULL, 0), "and the load misses");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  snprintf(root, sizeof(root), "/tmp/hetccl-kernel-cache-%ld", (long)getpid());
  round_trip();
  where();
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  CHECK(system(cmd) == 0, "%s", cmd);
  return tu_finish("test_kernel_cache");
}
