/*
 * net/ib without an RDMA device: HETCCL_IB_HCA matching (NCCL_IB_HCA's
 * syntax), the setup record's parser against hostile bytes, and what a host
 * without a usable port does: open fails with a message and leaks nothing,
 * a comm forced onto ib (HETCCL_NET=IB) fails init naming the reason, and
 * a comm left to choose goes over sockets.
 */
#include <stdio.h>
#include <stdlib.h>

#include "net/ib_wire.h"
#include "testutil.h"

static void test_hca(void) {
  static const struct {
    const char *rule, *device;
    int port;
    bool matches;
  } cases[] = {
      /* clang-format off */
      {"", "mlx5_0", 1, true},
      {"mlx5", "mlx5_0", 1, true},
      {"mlx5", "mlx5_10", 2, true},
      {"mlx4", "mlx5_0", 1, false},
      {"mlx5_0:1", "mlx5_0", 1, true},
      {"mlx5_0:2", "mlx5_0", 1, false},
      {"mlx4_0,mlx5_1:1", "mlx5_1", 1, true},
      {"mlx4_0,mlx5_1:1", "mlx5_0", 1, false},
      {"=mlx5_1", "mlx5_1", 1, true},
      {"=mlx5_1", "mlx5_10", 1, false},
      {"^mlx5_0", "mlx5_0", 1, false},
      {"^mlx5_0", "rxe0", 1, true},
      {"^=rxe0:1", "rxe0", 1, false},
      {"^=rxe0:1", "rxe0", 2, true},
      {"rxe0:1,", "rxe0", 1, true},
      /* clang-format on */
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(cases); i++)
    CHECK(hc_ib_hca_matches(cases[i].rule, cases[i].device, cases[i].port) == cases[i].matches,
          "HETCCL_IB_HCA=\"%s\" %s %s port %d", cases[i].rule, cases[i].matches ? "takes" : "leaves", cases[i].device,
          cases[i].port);
}

static void test_setup_record(void) {
  struct hc_ib_setup s = {.magic = HC_IB_MAGIC,
                          .rank = 3,
                          .nqps = 2,
                          .eager_slots = 16,
                          .eager_bytes = 8192,
                          .cts_slots = HC_IB_CTS_SLOTS,
                          .chunk = 1 << 19,
                          .lid = 7,
                          .link_layer = 2,
                          .mtu = 5,
                          .qpn = {17, 18},
                          .eager_addr = 0x1000,
                          .eager_rkey = 99,
                          .cts_addr = 0x2000,
                          .cts_rkey = 98,
                          .flags = HC_IB_SETUP_DEVICE_RECV};
  for (int i = 0; i < 16; i++) s.gid[i] = (uint8_t)i;
  uint8_t buf[HC_IB_SETUP_BYTES];
  struct hc_ib_setup back;
  hc_ib_setup_encode(&s, buf);
  CHECK(hc_ib_setup_parse(buf, sizeof(buf), &back), "the setup record's round trip and its rejections");
  CHECK(back.rank == 3 && back.nqps == 2 && back.qpn[1] == 18 && back.cts_rkey == 98 && back.gid[15] == 15 &&
            back.chunk == (1u << 19) && back.eager_addr == 0x1000 && back.flags == HC_IB_SETUP_DEVICE_RECV,
        "the setup record's round trip and its rejections");
  CHECK(!hc_ib_setup_parse(buf, sizeof(buf) - 1, &back), "the setup record's round trip and its rejections");
  struct hc_ib_setup bad = s;
  bad.nqps = HC_IB_MAX_QPS + 1;
  hc_ib_setup_encode(&bad, buf);
  CHECK(!hc_ib_setup_parse(buf, sizeof(buf), &back), "the setup record's round trip and its rejections");
  bad = s;
  bad.eager_slots = 65;
  hc_ib_setup_encode(&bad, buf);
  CHECK(!hc_ib_setup_parse(buf, sizeof(buf), &back), "the setup record's round trip and its rejections");
  bad = s;
  bad.magic = 0;
  hc_ib_setup_encode(&bad, buf);
  CHECK(!hc_ib_setup_parse(buf, sizeof(buf), &back), "the setup record's round trip and its rejections");
  /* Random bytes: never accepted by accident often, never out of bounds. */
  srand(1);
  int accepted = 0;
  for (int t = 0; t < 10000; t++) {
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (uint8_t)rand();
    accepted += hc_ib_setup_parse(buf, sizeof(buf), &back);
  }
  CHECK(accepted == 0, "the setup record's round trip and its rejections");
}

static void test_open_without_device(void) {
  bool usable = true;
  char what[256];
  hc_net_ib_probe(&usable, what, sizeof(what));
  printf("ib here: %s (%s)\n", usable ? "usable" : "not usable", what);
  if (usable) return; /* a host with a real port: nothing more to check here */
  struct hc_net_args a = {.rank = 0, .nranks = 2};
  struct hc_net_handle h;
  void *ctx = (void *)1;
  hc_result_t r = hc_net_ib.open(&a, NULL, &h, &ctx);
  CHECK(r == HC_ERR_SYSTEM, "ib open on a host without a usable port");
  CHECK(ctx == NULL, "ib open on a host without a usable port");
  CHECK(strstr(hc_last_error(), "ib:") != NULL, "ib open on a host without a usable port");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  CHECK(hc_params_load() == HC_OK, "hetccl's parameters load");
  test_hca();
  test_setup_record();
  test_open_without_device();
  return tu_finish("net_ib");
}
