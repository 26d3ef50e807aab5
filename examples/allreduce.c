/* Every rank adds its rank + 1 into a vector; all must see 1 + 2 + ... + n.
 * Start it with a launcher: build/tools/hetccl-run -n 2 build/examples/allreduce */
#include <hetccl.h>
#include <stdio.h>

#define CHECK(call)                                                 \
  do {                                                              \
    hetcclResult_t r_ = (call);                                     \
    if (r_ != hetcclSuccess) {                                      \
      fprintf(stderr, "%s: %s\n", #call, hetcclGetLastError(NULL)); \
      return 1;                                                     \
    }                                                               \
  } while (0)

int main(void) {
  enum { N = 1024 };
  static float in[N], out[N];
  hetcclComm_t comm;
  int rank, nranks;
  CHECK(hetcclCommInitFromEnv(&comm, NULL)); /* or GetUniqueId + CommInitRank */
  CHECK(hetcclCommUserRank(comm, &rank));
  CHECK(hetcclCommCount(comm, &nranks));
  for (int i = 0; i < N; i++) in[i] = (float)(rank + 1);
  CHECK(hetcclAllReduce(in, out, N, hetcclFloat, hetcclSum, comm, NULL));
  const float want = nranks * (nranks + 1) / 2.0f;
  for (int i = 0; i < N; i++) {
    if (out[i] != want) {
      fprintf(stderr, "rank %d: out[%d] = %g, want %g\n", rank, i, out[i], want);
      return 1;
    }
  }
  printf("rank %d of %d: all-reduce sum %g, as expected\n", rank, nranks, want);
  CHECK(hetcclCommDestroy(comm));
  return 0;
}
