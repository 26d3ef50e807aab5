/*
 * util/sock and util/auth: SHA-256 and HMAC-SHA256 against the standard
 * vectors, interface-list matching, address formatting, deadline-bounded
 * socket I/O (timeouts, abort, retrying connect, large interleaved
 * transfers), and the authentication handshake: success, wrong secret,
 * wrong purpose and garbage, each failing cleanly on both sides.
 */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/auth.h"
#include "util/sock.h"
#include "testutil.h"

static void hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", p[i]);
}

static size_t unhex(const char *s, uint8_t *out) {
  size_t n = strlen(s) / 2;
  for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", &out[i]);
  return n;
}

static uint64_t ms_since(uint64_t t0) { return (hc_now_ns() - t0) / 1000000; }

/* ---- hashes ---- */

static void test_sha256(void) {
  static const struct {
    const char *msg, *digest;
  } v[] = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrst"
       "u",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  char got[65];
  uint8_t d[32];
  for (size_t i = 0; i < HC_ARRAY_LEN(v); i++) {
    hc_sha256(v[i].msg, strlen(v[i].msg), d);
    hex(d, 32, got);
    CHECK(!strcmp(got, v[i].digest), "sha256(\"%s\") = %s, want %s", v[i].msg, got, v[i].digest);
  }
  /* One million 'a': exercises many blocks and the length encoding. */
  char *a = malloc(1000000);
  memset(a, 'a', 1000000);
  hc_sha256(a, 1000000, d);
  free(a);
  hex(d, 32, got);
  CHECK(!strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "sha256(1M 'a') = %s", got);
  /* Lengths around the padding boundary (55, 56, 63, 64 bytes) must differ
   * from each other and from prefixes: a cheap check on the padding code. */
  char buf[130];
  memset(buf, 'x', sizeof(buf));
  uint8_t prev[32] = {0};
  for (size_t n = 50; n < 130; n++) {
    hc_sha256(buf, n, d);
    CHECK(memcmp(d, prev, 32) != 0, "sha256 of %zu and %zu bytes collide", n, n - 1);
    memcpy(prev, d, 32);
  }
}

static void test_hmac(void) {
  /* RFC 4231. key_hex NULL: the key is 131 bytes of 0xaa (longer than a
   * block, so HMAC hashes it first). */
  static const struct {
    const char *key_hex, *data_hex, *mac;
  } v[] = {
      /* test case 1 */
      {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      /* test case 2: "Jefe", "what do ya want for nothing?" */
      {"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      /* test case 6: "Test Using Larger Than Block-Size Key - Hash Key First" */
      {NULL,
       "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669"
       "727374",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      /* test case 7: long key and data longer than a block */
      {NULL,
       "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d73697a65206b657920616e"
       "642061206c6172676572207468616e20626c6f636b2d73697a6520646174612e20546865206b6579206e6565647320746f20626520"
       "686173686564206265666f7265206265696e6720757365642062792074686520484d414320616c676f726974686d2e",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(v); i++) {
    uint8_t key[256], data[256], mac[32];
    char got[65];
    size_t kn = 131;
    if (v[i].key_hex) kn = unhex(v[i].key_hex, key);
    else memset(key, 0xaa, kn);
    size_t dn = unhex(v[i].data_hex, data);
    hc_hmac_sha256(key, kn, data, dn, mac);
    hex(mac, 32, got);
    CHECK(!strcmp(got, v[i].mac), "HMAC vector %zu = %s, want %s", i, got, v[i].mac);
  }
}

/* ---- addresses ---- */

static void test_ifname_matches(void) {
  static const struct {
    const char *spec, *ifname;
    bool want;
  } v[] = {
      {"", "eth0", true},         {"eth", "eth0", true},       {"eth", "ens1", false},
      {"eth,ib", "ib0", true},    {"eth,ib", "lo", false},     {"^docker", "docker0", false},
      {"^docker", "eth0", true},  {"^docker,lo", "lo", false}, {"^docker,lo", "ens5", true},
      {"=eth0", "eth0", true},    {"=eth0", "eth01", false},   {"=eth0,ib0", "ib0", true},
      {"^=eth0", "eth0", false},  {"^=eth0", "eth01", true},   {"eth0:1234", "eth0", true},
      {"ens,,eth", "eth2", true}, {"e", "eth0", true},         {"=eth", "eth0", false},
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(v); i++) {
    bool got = hc_sock_ifname_matches(v[i].spec, v[i].ifname);
    CHECK(got == v[i].want, "ifname_matches(\"%s\", \"%s\") = %d", v[i].spec, v[i].ifname, got);
  }
}

static bool have_ipv6_loopback(void) {
  union hc_sockaddr a;
  int fd;
  if (hc_sock_resolve("::1", 0, &a) != HC_OK) return false;
  if (hc_sock_listen(&a, &fd, NULL) != HC_OK) return false;
  close(fd);
  return true;
}

static void set_param(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  hc_params_reset();
  CHECK(hc_params_load() == HC_OK, "params load after %s=%s", name, value ? value : "(unset)");
}

static void test_addresses(void) {
  union hc_sockaddr a;
  char buf[80];
  CHECK(hc_sock_resolve("127.0.0.1", 80, &a) == HC_OK, "resolve 127.0.0.1");
  CHECK(!strcmp(hc_sock_str(&a, buf, sizeof(buf)), "127.0.0.1:80"), "str = %s", buf);
  CHECK(hc_sock_port(&a) == 80 && hc_sock_len(&a) == sizeof(struct sockaddr_in), "port/len");
  CHECK(hc_sock_resolve("::1", 5, &a) == HC_OK, "resolve ::1");
  CHECK(!strcmp(hc_sock_str(&a, buf, sizeof(buf)), "[::1]:5"), "str = %s", buf);
  CHECK(hc_sock_len(&a) == sizeof(struct sockaddr_in6), "v6 len");
  CHECK(hc_sock_resolve("[::1]", 6, &a) == HC_OK && a.sa.sa_family == AF_INET6 && hc_sock_port(&a) == 6,
        "resolve [::1]");
  CHECK(hc_sock_resolve("localhost", 7, &a) == HC_OK && hc_sock_port(&a) == 7, "resolve localhost");
  CHECK(hc_sock_resolve("127.0.0.1", 70000, &a) == HC_ERR_ARG, "port out of range");
  CHECK(hc_sock_resolve("", 1, &a) == HC_ERR_ARG, "empty host");

  char ifname[64] = "";
  CHECK(hc_sock_local_addr(&a, ifname, sizeof(ifname)) == HC_OK && ifname[0], "default local address");
  CHECK(hc_sock_port(&a) == 0, "local address has port 0");
  printf("default interface: %s %s\n", ifname, hc_sock_str(&a, buf, sizeof(buf)));

  set_param("HETCCL_SOCKET_IFNAME", "lo");
  CHECK(hc_sock_local_addr(&a, ifname, sizeof(ifname)) == HC_OK && !strcmp(ifname, "lo") &&
            !strcmp(hc_sock_str(&a, buf, sizeof(buf)), "127.0.0.1:0"),
        "IFNAME=lo -> %s %s", ifname, buf);
  set_param("HETCCL_SOCKET_IFNAME", "=no_such_if0");
  hc_result_t r = hc_sock_local_addr(&a, ifname, sizeof(ifname));
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "no_such_if0"), "unmatched IFNAME -> %d", r);
  set_param("HETCCL_SOCKET_IFNAME", "^lo");
  r = hc_sock_local_addr(&a, ifname, sizeof(ifname));
  CHECK(r == HC_ERR_USAGE || strcmp(ifname, "lo") != 0, "^lo chose lo");
  if (have_ipv6_loopback()) {
    set_param("HETCCL_SOCKET_IFNAME", "lo");
    set_param("HETCCL_SOCKET_FAMILY", "AF_INET6");
    CHECK(hc_sock_local_addr(&a, ifname, sizeof(ifname)) == HC_OK &&
              !strcmp(hc_sock_str(&a, buf, sizeof(buf)), "[::1]:0"),
          "IFNAME=lo FAMILY=AF_INET6 -> %s", buf);
  } else {
    printf("skipped: IPv6 loopback not available\n");
  }
  set_param("HETCCL_SOCKET_FAMILY", "AF_UNIX");
  CHECK(hc_sock_local_addr(&a, ifname, sizeof(ifname)) == HC_ERR_USAGE, "bad family accepted");
  set_param("HETCCL_SOCKET_FAMILY", NULL);
  set_param("HETCCL_SOCKET_IFNAME", NULL);
}

/* ---- socket I/O ---- */

struct pipe_pair {
  int a, b;
};

/* A connected loopback TCP pair. */
static struct pipe_pair tcp_pair(void) {
  union hc_sockaddr lo, bound;
  int lfd;
  struct pipe_pair p = {-1, -1};
  hc_sock_resolve("127.0.0.1", 0, &lo);
  if (hc_sock_listen(&lo, &lfd, &bound) != HC_OK) return p;
  uint64_t dl = hc_now_ns() + 2000000000ull;
  hc_sock_connect_blocking(&bound, NULL, dl, NULL, &p.a);
  hc_sock_accept_blocking(lfd, dl, NULL, &p.b);
  close(lfd);
  return p;
}

struct xfer {
  int fd;
  uint8_t *buf;
  size_t n;
  hc_result_t r;
};

static void *send_thread(void *arg) {
  struct xfer *x = arg;
  x->r = hc_sock_send_blocking(x->fd, x->buf, x->n, hc_now_ns() + 5000000000ull, NULL);
  return NULL;
}

static void test_io(void) {
  struct pipe_pair p = tcp_pair();
  CHECK(p.a >= 0 && p.b >= 0, "loopback pair");
  if (p.a < 0 || p.b < 0) return;
  CHECK(hc_sock_tune(p.a) == HC_OK, "tune");
  int fl = fcntl(p.a, F_GETFL), v = 0;
  socklen_t vl = sizeof(v);
  CHECK(fl & O_NONBLOCK, "tune sets O_NONBLOCK");
  getsockopt(p.a, IPPROTO_TCP, TCP_NODELAY, &v, &vl);
  CHECK(v == 1, "TCP_NODELAY");
  getsockopt(p.a, SOL_SOCKET, SO_KEEPALIVE, &v, &vl);
  CHECK(v == 1, "SO_KEEPALIVE");
  getsockopt(p.a, IPPROTO_TCP, TCP_KEEPCNT, &v, &vl);
  CHECK(v == 3, "TCP_KEEPCNT = %d", v);

  /* 8 MiB both ways at once: far beyond the socket buffers, so each side's
   * send must keep going while the other drains (nonblocking fd a). */
  size_t n = 8u << 20;
  uint8_t *s1 = malloc(n), *s2 = malloc(n), *r1 = malloc(n), *r2 = malloc(n);
  for (size_t i = 0; i < n; i++) s1[i] = (uint8_t)(i * 7 + 1), s2[i] = (uint8_t)(i * 13 + 5);
  struct xfer x1 = {p.a, s1, n, HC_ERR_INTERNAL}, x2 = {p.b, s2, n, HC_ERR_INTERNAL};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, send_thread, &x1);
  pthread_create(&t2, NULL, send_thread, &x2);
  uint64_t dl = hc_now_ns() + 5000000000ull;
  CHECK(hc_sock_recv_blocking(p.b, r1, n, dl, NULL) == HC_OK, "recv 8M on b");
  CHECK(hc_sock_recv_blocking(p.a, r2, n, dl, NULL) == HC_OK, "recv 8M on a");
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  CHECK(x1.r == HC_OK && x2.r == HC_OK, "senders");
  CHECK(!memcmp(s1, r1, n) && !memcmp(s2, r2, n), "8M data intact");
  free(s1), free(s2), free(r1), free(r2);

  /* Nothing arrives: the deadline ends the wait, with the peer named. */
  uint8_t byte;
  uint64_t t0 = hc_now_ns();
  hc_result_t r = hc_sock_recv_blocking(p.a, &byte, 1, hc_now_ns() + 300000000ull, NULL);
  uint64_t ms = ms_since(t0);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "127.0.0.1") && strstr(hc_last_error(), "timed out"),
        "recv timeout -> %d", r);
  CHECK(ms >= 250 && ms < 1500, "recv timeout took %llu ms", (unsigned long long)ms);

  /* Abort flag already set: returns at once. */
  atomic_bool abort_flag = true;
  t0 = hc_now_ns();
  r = hc_sock_recv_blocking(p.a, &byte, 1, hc_now_ns() + 5000000000ull, &abort_flag);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "aborted") && ms_since(t0) < 500, "abort -> %d", r);

  /* Peer closes: a remote error, not a hang. */
  close(p.b);
  r = hc_sock_recv_blocking(p.a, &byte, 1, hc_now_ns() + 2000000000ull, NULL);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "closed"), "recv after close -> %d", r);
  uint8_t big[65536] = {0};
  r = HC_OK;
  for (int i = 0; i < 100 && r == HC_OK; i++)
    r = hc_sock_send_blocking(p.a, big, sizeof(big), hc_now_ns() + 2000000000ull, NULL);
  CHECK(r == HC_ERR_REMOTE, "send after close -> %d", r);
  close(p.a);
}

struct late_listener {
  union hc_sockaddr addr;
  int delay_ms;
  hc_result_t r;
};

static void *late_listen_thread(void *arg) {
  struct late_listener *l = arg;
  usleep((useconds_t)l->delay_ms * 1000);
  int lfd, fd;
  l->r = hc_sock_listen(&l->addr, &lfd, NULL);
  if (l->r != HC_OK) return NULL;
  l->r = hc_sock_accept_blocking(lfd, hc_now_ns() + 3000000000ull, NULL, &fd);
  if (l->r == HC_OK) close(fd);
  close(lfd);
  return NULL;
}

/* A free loopback port: bound, then released. */
static union hc_sockaddr free_port(const char *host) {
  union hc_sockaddr a, bound;
  int fd;
  hc_sock_resolve(host, 0, &a);
  hc_sock_listen(&a, &fd, &bound);
  close(fd);
  return bound;
}

static void test_connect(void) {
  /* Nobody listens: retries until the deadline, then names the address. */
  union hc_sockaddr a = free_port("127.0.0.1");
  char want[80];
  hc_sock_str(&a, want, sizeof(want));
  int fd;
  uint64_t t0 = hc_now_ns();
  hc_result_t r = hc_sock_connect_blocking(&a, NULL, hc_now_ns() + 400000000ull, NULL, &fd);
  uint64_t ms = ms_since(t0);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), want) && fd == -1, "connect to nobody -> %d", r);
  CHECK(ms >= 350 && ms < 1500, "connect retry took %llu ms", (unsigned long long)ms);

  /* The listener comes up 300 ms late: the retry finds it. */
  struct late_listener l = {a, 300, HC_ERR_INTERNAL};
  pthread_t t;
  pthread_create(&t, NULL, late_listen_thread, &l);
  r = hc_sock_connect_blocking(&a, NULL, hc_now_ns() + 3000000000ull, NULL, &fd);
  CHECK(r == HC_OK, "connect to late listener -> %d", r);
  if (r == HC_OK) close(fd);
  pthread_join(t, NULL);
  CHECK(l.r == HC_OK, "late listener accepted");

  /* Abort from another thread while connect retries. */
  atomic_bool abort_flag = true;
  t0 = hc_now_ns();
  r = hc_sock_connect_blocking(&a, NULL, hc_now_ns() + 3000000000ull, &abort_flag, &fd);
  CHECK(r == HC_ERR_REMOTE && ms_since(t0) < 500, "aborted connect -> %d", r);

  /* accept times out too. */
  union hc_sockaddr lo;
  int lfd;
  hc_sock_resolve("127.0.0.1", 0, &lo);
  CHECK(hc_sock_listen(&lo, &lfd, NULL) == HC_OK, "listen");
  t0 = hc_now_ns();
  r = hc_sock_accept_blocking(lfd, hc_now_ns() + 200000000ull, NULL, &fd);
  CHECK(r == HC_ERR_REMOTE && ms_since(t0) < 1000, "accept timeout -> %d", r);
  /* Listening twice on one port fails and names it. */
  union hc_sockaddr bound;
  socklen_t bl = sizeof(bound);
  getsockname(lfd, &bound.sa, &bl);
  int lfd2;
  r = hc_sock_listen(&bound, &lfd2, NULL);
  CHECK(r == HC_ERR_SYSTEM && lfd2 == -1, "second listen on a port -> %d", r);
  close(lfd);
}

/* ---- handshake ---- */

static const uint8_t secret_a[HC_SECRET_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t secret_b[HC_SECRET_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17};

enum peer_kind { PEER_CLIENT, PEER_WRONG_PURPOSE, PEER_GARBAGE, PEER_SHORT_THEN_CLOSE, PEER_SERVER };

struct peer {
  int fd;
  enum peer_kind kind;
  const uint8_t *secret;
  hc_result_t r;
};

static void *peer_thread(void *arg) {
  struct peer *p = arg;
  uint64_t dl = hc_now_ns() + 3000000000ull;
  switch (p->kind) {
  case PEER_CLIENT: p->r = hc_auth_client_blocking(p->fd, p->secret, HC_AUTH_BOOT_RING, dl, NULL); break;
  case PEER_WRONG_PURPOSE: p->r = hc_auth_client_blocking(p->fd, p->secret, HC_AUTH_NET_SOCKET, dl, NULL); break;
  case PEER_SERVER: p->r = hc_auth_server_blocking(p->fd, p->secret, HC_AUTH_BOOT_RING, dl, NULL); break;
  case PEER_GARBAGE: {
    /* An HTTP client, say: the server must drop it after one fixed read. */
    const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    p->r = hc_sock_send_blocking(p->fd, req, sizeof(req) - 1, dl, NULL);
    uint8_t b;
    if (p->r == HC_OK) p->r = hc_sock_recv_blocking(p->fd, &b, 1, dl, NULL);
    break;
  }
  case PEER_SHORT_THEN_CLOSE:
    p->r = hc_sock_send_blocking(p->fd, "HCA", 3, dl, NULL);
    usleep(100000);
    shutdown(p->fd, SHUT_RDWR);
    break;
  }
  /* As every caller does: a failed handshake drops the connection. */
  if (p->r != HC_OK) shutdown(p->fd, SHUT_RDWR);
  return NULL;
}

/* Runs the server side here against peer kind on a fresh pair; returns the
 * server's result and fills *peer_r. Both sides must end well within the
 * deadline. */
static hc_result_t handshake(enum peer_kind kind, const uint8_t *server_secret, const uint8_t *peer_secret, bool tcp,
                             hc_result_t *peer_r) {
  int fds[2];
  if (tcp) {
    struct pipe_pair pp = tcp_pair();
    fds[0] = pp.a, fds[1] = pp.b;
    hc_sock_tune(fds[0]);
  } else {
    socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  }
  struct peer p = {fds[1], kind, peer_secret, HC_ERR_INTERNAL};
  pthread_t t;
  uint64_t t0 = hc_now_ns();
  pthread_create(&t, NULL, peer_thread, &p);
  hc_result_t r = hc_auth_server_blocking(fds[0], server_secret, HC_AUTH_BOOT_RING, hc_now_ns() + 3000000000ull, NULL);
  /* The server drops a failed peer: that is what unblocks it. */
  close(fds[0]);
  pthread_join(t, NULL);
  close(fds[1]);
  CHECK(ms_since(t0) < 1500, "handshake kind %d took %llu ms", kind, (unsigned long long)ms_since(t0));
  *peer_r = p.r;
  return r;
}

static void test_handshake(void) {
  hc_result_t pr, r;
  for (int tcp = 0; tcp < 2; tcp++) {
    r = handshake(PEER_CLIENT, secret_a, secret_a, tcp, &pr);
    CHECK(r == HC_OK && pr == HC_OK, "good handshake (tcp %d): server %d client %d", tcp, r, pr);
  }
  r = handshake(PEER_CLIENT, secret_a, secret_b, true, &pr);
  CHECK(r == HC_ERR_REMOTE && pr == HC_ERR_REMOTE, "wrong secret: server %d client %d", r, pr);
  CHECK(strstr(hc_last_error(), "authentication failed") && strstr(hc_last_error(), "127.0.0.1"),
        "server message names the failure and the peer");
  r = handshake(PEER_WRONG_PURPOSE, secret_a, secret_a, true, &pr);
  CHECK(r == HC_ERR_REMOTE && pr == HC_ERR_REMOTE && strstr(hc_last_error(), "purpose"),
        "wrong purpose: server %d client %d", r, pr);
  r = handshake(PEER_GARBAGE, secret_a, secret_a, true, &pr);
  CHECK(r == HC_ERR_REMOTE && pr == HC_ERR_REMOTE && strstr(hc_last_error(), "not a hetccl hello"),
        "garbage: server %d peer %d", r, pr);
  r = handshake(PEER_SHORT_THEN_CLOSE, secret_a, secret_a, true, &pr);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "authentication failed"), "short hello: server %d", r);

  /* The client side against a server with another secret, and against a
   * silent peer (deadline). */
  int fds[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  struct peer p = {fds[1], PEER_SERVER, secret_b, HC_ERR_INTERNAL};
  pthread_t t;
  pthread_create(&t, NULL, peer_thread, &p);
  r = hc_auth_client_blocking(fds[0], secret_a, HC_AUTH_BOOT_RING, hc_now_ns() + 3000000000ull, NULL);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "did not prove"), "client vs wrong server -> %d", r);
  close(fds[0]);
  pthread_join(t, NULL);
  close(fds[1]);
  CHECK(p.r == HC_ERR_REMOTE, "wrong server sees the client leave -> %d", p.r);

  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  uint64_t t0 = hc_now_ns();
  r = hc_auth_client_blocking(fds[0], secret_a, HC_AUTH_BOOT_RING, hc_now_ns() + 300000000ull, NULL);
  CHECK(r == HC_ERR_REMOTE && ms_since(t0) < 1500 && strstr(hc_last_error(), "timed out"), "silent server -> %d", r);
  close(fds[0]);
  close(fds[1]);
}

/* The step functions alone, in memory: what net/socket.c runs without
 * blocking. A pair with one secret passes both ways; a wrong secret or a
 * flipped byte fails on the side that checks it. */
static void test_handshake_steps(void) {
  struct hc_auth_state cli, srv;
  uint8_t hello[HC_AUTH_HELLO_BYTES], reply[HC_AUTH_REPLY_BYTES], proof[HC_AUTH_PROOF_BYTES];
  CHECK(hc_auth_client_start(&cli, secret_a, HC_AUTH_NET_SOCKET, hello) == HC_OK, "steps: client start");
  CHECK(hc_auth_server_on_hello(&srv, secret_a, HC_AUTH_NET_SOCKET, hello, reply, "c") == HC_OK, "steps: hello");
  CHECK(hc_auth_client_on_reply(&cli, reply, proof, "s") == HC_OK, "steps: reply");
  CHECK(hc_auth_server_on_proof(&srv, proof, "c") == HC_OK, "steps: proof");
  proof[5] ^= 1;
  CHECK(hc_auth_server_on_proof(&srv, proof, "c") == HC_ERR_REMOTE && strstr(hc_last_error(), "did not prove"),
        "steps: flipped proof");
  CHECK(hc_auth_client_start(&cli, secret_a, HC_AUTH_NET_SOCKET, hello) == HC_OK, "steps: client start 2");
  CHECK(hc_auth_server_on_hello(&srv, secret_b, HC_AUTH_NET_SOCKET, hello, reply, "c") == HC_OK, "steps: hello 2");
  CHECK(hc_auth_client_on_reply(&cli, reply, proof, "s") == HC_ERR_REMOTE && strstr(hc_last_error(), "did not prove"),
        "steps: wrong server secret");
  CHECK(hc_auth_server_on_hello(&srv, secret_a, HC_AUTH_BOOT_RING, hello, reply, "c") == HC_ERR_REMOTE &&
            strstr(hc_last_error(), "purpose"),
        "steps: wrong purpose");
  hello[0] ^= 0xff;
  CHECK(hc_auth_server_on_hello(&srv, secret_a, HC_AUTH_NET_SOCKET, hello, reply, "c") == HC_ERR_REMOTE &&
            strstr(hc_last_error(), "not a hetccl hello"),
        "steps: bad magic");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  /* Failures are expected in this test; keep their WARN lines out of the
   * output unless asked for. */
  if (getenv("HETCCL_DEBUG") == NULL) setenv("HETCCL_DEBUG", "NONE", 1);
  hc_params_reset();
  hc_params_load();
  test_sha256();
  test_hmac();
  test_ifname_matches();
  test_addresses();
  test_io();
  test_connect();
  test_handshake();
  test_handshake_steps();
  return tu_finish("test_util_sock_auth");
}
