/*
 * Shared by the libFuzzer harnesses of tests/fuzz/ (see run.sh): a check
 * that aborts (so libFuzzer saves the input), quiet logging, and helpers
 * to read fields from the fuzz input and to talk to the code under test
 * through a socketpair. Each harness is one fuzz_<name>.c with its seed
 * corpus in corpus/<name>/.
 */
#ifndef HC_FUZZ_COMMON_H_
#define HC_FUZZ_COMMON_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/util.h"

#define FUZZ_CHECK(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Every rejected input would write a WARN line; FUZZ_LOG=1 keeps them. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (getenv("FUZZ_LOG") == NULL) setenv("HETCCL_DEBUG", "NONE", 1);
  hc_log_init();
  return 0;
}

/* A cursor over the fuzz input; reads past its end yield zeroes. */
struct fuzz_in {
  const uint8_t *p;
  size_t n;
};
static inline uint32_t fuzz_take(struct fuzz_in *in, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; i++) {
    if (in->n == 0) break;
    v |= (uint32_t)in->p[0] << (8 * i);
    in->p++, in->n--;
  }
  return v;
}

/* Writes n bytes into fd (a socketpair end with room for them, whose far
 * end is still open). */
static inline void fuzz_write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    FUZZ_CHECK(w > 0);
    p += w, n -= (size_t)w;
  }
}

#endif
