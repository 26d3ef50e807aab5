/*
 * The transport table (net/net.c): for every pair of published records -
 * one host or two, each transport open or not at each end - the link the
 * table chooses is the one the rule hetccl has always followed (shm on one
 * host, else ib where both ends have it, else sockets; nothing when no
 * transport is open at both ends), and both ends of a pair choose the same.
 * Pure: no transport is opened.
 */
#include <stdio.h>
#include <string.h>

#include "net/net.h"
#include "testutil.h"

static int index_of(const char *name) {
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++)
    if (!strcmp(hc_transports[t].ops->name, name)) return t;
  return -1;
}

/* The rule, written out: the transport's index, or -1 for none. */
static int expected(const struct hc_net_record *a, const struct hc_net_record *b) {
  const int shm = index_of("shm"), ib = index_of("ib"), sock = index_of("socket");
  if (a->host == b->host && a->open[shm] && b->open[shm]) return shm;
  if (a->open[ib] && b->open[ib]) return ib;
  if (a->open[sock] && b->open[sock]) return sock;
  return -1;
}

static void record_of(unsigned bits, uint64_t host, struct hc_net_record *r) {
  *r = (struct hc_net_record){.host = host};
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) {
    r->open[t] = (bits >> t) & 1;
    r->handle[t].bytes[0] = (uint8_t)(t + 1); /* which handle the link took */
  }
}

static void check_pairs(void) {
  struct hc_net_set set = {0};
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) set.ctx[t] = &set.caps[t]; /* distinct, never used */
  for (int hosts = 1; hosts <= 2; hosts++)
    for (unsigned a = 0; a < 1u << HC_NET_NTRANSPORTS; a++)
      for (unsigned b = 0; b < 1u << HC_NET_NTRANSPORTS; b++) {
        struct hc_net_record ra, rb;
        record_of(a, 7, &ra);
        record_of(b, hosts == 1 ? 7 : 8, &rb);
        tu_set_case("%d host(s), open here 0x%x, there 0x%x", hosts, a, b);
        const int want = expected(&ra, &rb);
        struct hc_link ab, ba;
        int tab = -1, tba = -1;
        hc_result_t r1 = hc_net_link_choose(&set, 0, &ra, 1, &rb, &ab, &tab);
        hc_result_t r2 = hc_net_link_choose(&set, 1, &rb, 0, &ra, &ba, &tba);
        if (want < 0) {
          CHECK(r1 == HC_ERR_USAGE && r2 == HC_ERR_USAGE, "a pair with no common transport was connected");
          CHECK(strstr(hc_last_error(), "rank 1 cannot reach rank 0") != NULL, "the failure names both ranks: %s",
                hc_last_error());
          continue;
        }
        if (!CHECK(r1 == HC_OK && r2 == HC_OK, "no link: %s", hc_last_error())) continue;
        CHECK(tab == want && tba == want, "chose %d and %d, the rule says %s", tab, tba, hc_transports[want].ops->name);
        CHECK(ab.net == hc_transports[want].ops && ab.ctx == set.ctx[want] && ab.conn == NULL,
              "link of the wrong transport or context");
        CHECK(ab.handle.bytes[0] == want + 1, "the link took the peer's handle of another transport");
      }
  tu_set_case("%s", "");
}

static void check_caps(void) {
  struct hc_link links[3] = {{0}};
  CHECK(hc_net_links_reach_device(links, 3), "no links: nothing to stage");
  links[1] = (struct hc_link){.net = &hc_net_socket, .caps = {.device_memory = true}};
  CHECK(hc_net_links_reach_device(links, 3), "every link reaches device memory");
  links[2] = (struct hc_link){.net = &hc_net_shm, .caps = {.device_memory = false}};
  CHECK(!hc_net_links_reach_device(links, 3), "one link without device memory: staging");
  links[2] = (struct hc_link){.net = &hc_net_ib, .caps = {.device_memory = true, .device_min_bytes = 8192}};
  CHECK(!hc_net_links_reach_device(links, 3), "small messages of a link staged: staging");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  CHECK(index_of("shm") >= 0 && index_of("ib") >= 0 && index_of("socket") >= 0, "a transport is not in the table");
  check_pairs();
  check_caps();
  return tu_finish("test_net_table");
}
