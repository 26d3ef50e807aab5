/*
 * The hello both ends of a socket transport stream send after the
 * handshake: {magic, rank, stream, nstreams, chunk}. What parses must be
 * safe to index a stream table of nstreams entries with, as the accepting
 * side does (ASan sees an out-of-bounds index).
 */
#include "fuzz_common.h"
#include "net/socket_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_sock_hello h;
  bool ok = hc_net_socket_hello_parse(data, size, &h);
  if (size != HC_SOCK_HELLO_BYTES) {
    FUZZ_CHECK(!ok && h.magic == 0 && h.nstreams == 0);
    return 0;
  }
  FUZZ_CHECK(h.chunk == hc_sock_get_le64(data + 16));
  if (!ok) return 0;
  FUZZ_CHECK(h.magic == HC_SOCK_MAGIC);
  FUZZ_CHECK(h.nstreams >= 1 && h.nstreams <= HC_SOCK_MAX_STREAMS && h.stream < h.nstreams);
  struct hc_sock_stream *streams = calloc(h.nstreams, sizeof(*streams));
  FUZZ_CHECK(streams != NULL);
  streams[h.stream].index = (int)h.stream;
  free(streams);
  return 0;
}
