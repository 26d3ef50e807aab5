/*
 * TCP helpers shared by bootstrap/ and net/socket: addresses (IPv4 and IPv6),
 * interface choice (HETCCL_SOCKET_IFNAME, NCCL_SOCKET_IFNAME's syntax),
 * listening, and deadline-bounded blocking I/O. Every *_blocking call returns
 * by its deadline (HC_ERR_REMOTE naming the address when it passes) and
 * checks *abort_flag (may be NULL) at least every 100 ms, returning
 * HC_ERR_REMOTE "aborted" once it is set.
 */
#ifndef HC_UTIL_SOCK_H_
#define HC_UTIL_SOCK_H_

#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "util.h"

union hc_sockaddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* Address for "host:port"-style use; host is a name, IPv4 or IPv6 literal. */
hc_result_t hc_sock_resolve(const char *host, int port, union hc_sockaddr *out);
/* The local address to bind, chosen by HETCCL_SOCKET_IFNAME and
 * HETCCL_SOCKET_FAMILY (port 0); ifname gets the interface's name. */
hc_result_t hc_sock_local_addr(union hc_sockaddr *out, char *ifname, size_t ifname_len);
/* Matches one interface name against an NCCL_SOCKET_IFNAME-style list:
 * "eth,ib" prefixes, "^docker" excludes, "=eth0" exact. Exposed for tests. */
bool hc_sock_ifname_matches(const char *spec, const char *ifname);
/* Listening socket on addr (port 0 = any free port); *bound gets the real
 * address and port. */
hc_result_t hc_sock_listen(const union hc_sockaddr *addr, int *fd, union hc_sockaddr *bound);
int hc_sock_port(const union hc_sockaddr *a);
socklen_t hc_sock_len(const union hc_sockaddr *a);
/* "1.2.3.4:5" or "[::1]:5" into buf; returns buf. */
const char *hc_sock_str(const union hc_sockaddr *a, char *buf, size_t len);

/* Retries refused connections until the deadline (the peer may not listen
 * yet), with a WARN every 10 s of retrying that names what (e.g. "the
 * bootstrap root"; NULL: "a peer"), its address and the time left. */
hc_result_t hc_sock_connect_blocking(const union hc_sockaddr *addr, const char *what, uint64_t deadline_ns,
                                     const atomic_bool *abort_flag, int *fd);
hc_result_t hc_sock_accept_blocking(int listen_fd, uint64_t deadline_ns, const atomic_bool *abort_flag, int *fd);
/* All n bytes or an error; a closed peer is HC_ERR_REMOTE. */
hc_result_t hc_sock_send_blocking(int fd, const void *buf, size_t n, uint64_t deadline_ns,
                                  const atomic_bool *abort_flag);
hc_result_t hc_sock_recv_blocking(int fd, void *buf, size_t n, uint64_t deadline_ns, const atomic_bool *abort_flag);
/* O_NONBLOCK, TCP_NODELAY, and keepalive probes that notice a dead peer
 * within seconds. */
hc_result_t hc_sock_tune(int fd);

#endif
