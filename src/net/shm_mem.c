/*
 * net/shm: registered host memory (hetcclMemAlloc). Owns the process-wide
 * registry of the buffers it handed out: address range -> memfd.
 *
 * A buffer is a memfd (anonymous shared memory: nothing appears in
 * /dev/shm, and the kernel frees it when the last fd and mapping go, crash
 * or not), mapped here. Its first page holds {magic, id, size}; the user's
 * pointer starts one page in, so it is page-aligned. The fd stays open until
 * hetcclMemFree: a peer on the same host maps the buffer by opening
 * /proc/<pid>/fd/<fd> (ptrace read access, which same-user processes have
 * even where Yama or a container's seccomp forbid process_vm_readv), checks
 * the magic and id, and then copies straight out of it, with no syscall per
 * message (shm_progress.c, kind REG).
 *
 * Cost: one fd per buffer; a peer that mapped a buffer keeps its memory
 * alive until its connection closes or the fd number is reused.
 *
 * Threading: any thread may allocate, free and look up; one mutex guards
 * the table, and a lookup with nothing registered takes no lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_priv.h"

struct region {
  uint8_t *map;     /* the whole mapping: header page, then the user's bytes */
  size_t map_bytes; /* also the memfd's size */
  size_t user_bytes;
  int fd;
  uint64_t id;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions;
static int nregions, cap_regions;
static atomic_int reg_count; /* = nregions, readable without the lock */

hc_result_t hc_net_mem_alloc(void **ptr, size_t size) {
  if (ptr == NULL) return HC_FAIL(HC_ERR_ARG, "MemAlloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0) return HC_FAIL(HC_ERR_ARG, "MemAlloc: size is 0");
  if (size > SIZE_MAX / 2) return HC_FAIL(HC_ERR_ARG, "MemAlloc: size %zu is too large", size);
  size_t map_bytes = HC_SHM_PAGE + (size + HC_SHM_PAGE - 1) / HC_SHM_PAGE * HC_SHM_PAGE;
  uint64_t id;
  HC_TRY(hc_random_bytes(&id, sizeof(id)));
  int fd = memfd_create("hetccl-mem", MFD_CLOEXEC);
  if (fd < 0) return HC_FAIL(HC_ERR_SYSTEM, "MemAlloc of %zu bytes: memfd_create: %s", size, strerror(errno));
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)map_bytes) == 0) p = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return HC_FAIL(HC_ERR_SYSTEM, "MemAlloc of %zu bytes: %s", size, strerror(e));
  }
  struct hc_shm_reg_hdr *h = p;
  *h = (struct hc_shm_reg_hdr){.magic = HC_SHM_REG_MAGIC, .id = id, .bytes = map_bytes};
  pthread_mutex_lock(&reg_lock);
  if (nregions == cap_regions) {
    int cap = HC_MAX(16, 2 * cap_regions);
    struct region *grown = realloc(regions, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      pthread_mutex_unlock(&reg_lock);
      munmap(p, map_bytes);
      close(fd);
      return HC_FAIL(HC_ERR_SYSTEM, "MemAlloc: out of host memory for the registry");
    }
    regions = grown;
    cap_regions = cap;
  }
  regions[nregions++] = (struct region){.map = p, .map_bytes = map_bytes, .user_bytes = size, .fd = fd, .id = id};
  atomic_store(&reg_count, nregions);
  pthread_mutex_unlock(&reg_lock);
  *ptr = (uint8_t *)p + HC_SHM_PAGE;
  HC_TRACE(HC_NET, "MemAlloc: %zu bytes at %p (memfd %d)", size, *ptr, fd);
  return HC_OK;
}

hc_result_t hc_net_mem_free(void *ptr) {
  if (ptr == NULL) return HC_OK;
  struct region r = {.map = NULL};
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < nregions; i++)
    if (regions[i].map + HC_SHM_PAGE == (uint8_t *)ptr) {
      r = regions[i];
      regions[i] = regions[--nregions];
      break;
    }
  atomic_store(&reg_count, nregions);
  if (nregions == 0) {
    free(regions);
    regions = NULL;
    cap_regions = 0;
  }
  pthread_mutex_unlock(&reg_lock);
  if (r.map == NULL) return HC_FAIL(HC_ERR_ARG, "MemFree: %p was not returned by hetcclMemAlloc", ptr);
  munmap(r.map, r.map_bytes);
  close(r.fd);
  return HC_OK;
}

bool hc_net_shm_reg_lookup(const void *buf, size_t n, struct hc_shm_reg_ref *out) {
  if (atomic_load_explicit(&reg_count, memory_order_relaxed) == 0) return false;
  uintptr_t b = (uintptr_t)buf;
  bool found = false;
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < nregions && !found; i++) {
    uintptr_t lo = (uintptr_t)regions[i].map + HC_SHM_PAGE;
    if (b >= lo && b - lo <= regions[i].user_bytes && n <= regions[i].user_bytes - (b - lo)) {
      *out = (struct hc_shm_reg_ref){
          .fd = regions[i].fd, .id = regions[i].id, .seg_bytes = regions[i].map_bytes, .off = HC_SHM_PAGE + (b - lo)};
      found = true;
    }
  }
  pthread_mutex_unlock(&reg_lock);
  return found;
}
