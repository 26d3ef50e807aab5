/*
 * device/kernel_cache: compiled kernel images kept on disk, so that a
 * process finds the image its runtime compiler would build instead of
 * building it again. NVRTC took 6.7-7.2 s per process for the reduction
 * kernels (H200 and the 2-core build machine, 7 Dec 2026), and every rank
 * of a job pays it at its first reduction.
 *
 * An image is stored under a key that names everything its bytes depend
 * on: the compiler (name, version, library file), the target, the options
 * and the kernel source. The file holds the whole key and a hash of the
 * image, and a file that does not match both is a miss: a stale, truncated
 * or foreign file costs a compile, never a wrong kernel, and so does a
 * file of another user (its code would run here). Files are written
 * under a temporary name and renamed: ranks that start together on an
 * empty cache each compile, as without it, and none reads a half-written
 * file. HETCCL_KERNEL_CACHE_DIR says where; none turns the cache off.
 */
#ifndef HC_KERNEL_CACHE_H_
#define HC_KERNEL_CACHE_H_

#include <stdbool.h>
#include <stddef.h>

/* The file that holds key's image: false when the cache is off or the
 * path does not fit in n bytes. */
bool hc_kernel_cache_path(const char *key, size_t key_len, char *path, size_t n);
/* The image stored under key: true with *image (malloc'd, free() it) of
 * *size bytes; false, with an INFO line unless the file is simply absent,
 * on any miss. */
bool hc_kernel_cache_load(const char *key, size_t key_len, void **image, size_t *size);
/* Stores image under key, creating the directory (mode 0700) if need be.
 * Best effort: false with an INFO line when it cannot. */
bool hc_kernel_cache_store(const char *key, size_t key_len, const void *image, size_t size);

#endif
