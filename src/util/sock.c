/*
 * TCP helpers for bootstrap/ and net/socket: address resolution, interface
 * choice, listening, and blocking I/O that never outlives its deadline.
 *
 * Invariant: no call here blocks in the kernel for more than one poll slice
 * (100 ms). Every read and write is MSG_DONTWAIT and every wait is a poll(),
 * so the helpers behave the same on blocking and non-blocking fds, and an
 * abort flag set from another thread is seen within a slice.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"

#define SLICE_MS 100

/* ---- addresses ---- */

int hc_sock_port(const union hc_sockaddr *a) {
  if (a->sa.sa_family == AF_INET) return ntohs(a->sin.sin_port);
  if (a->sa.sa_family == AF_INET6) return ntohs(a->sin6.sin6_port);
  return -1;
}

socklen_t hc_sock_len(const union hc_sockaddr *a) {
  return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *hc_sock_str(const union hc_sockaddr *a, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (len == 0) return buf;
  if (a->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%d", host, hc_sock_port(a));
  } else if (a->sa.sa_family == AF_INET6) {
    char scope[IF_NAMESIZE + 1] = "";
    inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof(host));
    if (a->sin6.sin6_scope_id != 0 && if_indextoname(a->sin6.sin6_scope_id, scope + 1) != NULL) scope[0] = '%';
    snprintf(buf, len, "[%s%s]:%d", host, scope, hc_sock_port(a));
  } else if (a->sa.sa_family == AF_UNIX) {
    snprintf(buf, len, "local socket");
  } else {
    snprintf(buf, len, "<address family %d>", a->sa.sa_family);
  }
  return buf;
}

/* Names the far (peer) or near end of fd for messages; falls back to the
 * fd number. */
static const char *end_str(int fd, bool peer, char *buf, size_t len) {
  union hc_sockaddr a;
  socklen_t alen = sizeof(a);
  memset(&a, 0, sizeof(a));
  if ((peer ? getpeername(fd, &a.sa, &alen) : getsockname(fd, &a.sa, &alen)) != 0) {
    snprintf(buf, len, "fd %d", fd);
    return buf;
  }
  return hc_sock_str(&a, buf, len);
}

static const char *peer_str(int fd, char *buf, size_t len) { return end_str(fd, true, buf, len); }
static const char *local_str(int fd, char *buf, size_t len) { return end_str(fd, false, buf, len); }

/* HETCCL_SOCKET_FAMILY -> AF_*, AF_UNSPEC when empty. */
static hc_result_t param_family(int *family) {
  const char *f = hc_param_str(HC_P_SOCKET_FAMILY);
  if (f[0] == 0) *family = AF_UNSPEC;
  else if (!strcasecmp(f, "AF_INET") || !strcasecmp(f, "INET") || !strcmp(f, "4")) *family = AF_INET;
  else if (!strcasecmp(f, "AF_INET6") || !strcasecmp(f, "INET6") || !strcmp(f, "6")) *family = AF_INET6;
  else {
    char var[64];
    return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\" is not AF_INET or AF_INET6",
                   hc_param_source(HC_P_SOCKET_FAMILY, var, sizeof(var)), f);
  }
  return HC_OK;
}

hc_result_t hc_sock_resolve(const char *host, int port, union hc_sockaddr *out) {
  char name[256];
  size_t n = strlen(host);
  memset(out, 0, sizeof(*out));
  if (port < 0 || port > 65535) return HC_FAIL(HC_ERR_ARG, "port %d of host \"%s\" is out of range", port, host);
  /* "[::1]" is how IPv6 literals are written next to a port. */
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
    snprintf(name, sizeof(name), "%.*s", (int)(n - 2), host + 1);
  } else {
    snprintf(name, sizeof(name), "%s", host);
  }
  if (name[0] == 0) return HC_FAIL(HC_ERR_ARG, "empty host name");
  /* HETCCL_SOCKET_FAMILY picks among a name's addresses; a literal is
   * taken as written. */
  int family;
  HC_TRY(param_family(&family));
  struct in6_addr probe;
  if (inet_pton(AF_INET, name, &probe) == 1 || inet_pton(AF_INET6, name, &probe) == 1) family = AF_UNSPEC;
  struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(name, NULL, &hints, &res);
  if (rc != 0) {
    return HC_FAIL(HC_ERR_SYSTEM, "cannot resolve host \"%s\": %s", host,
                   rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  }
  bool found = false;
  for (struct addrinfo *ai = res; ai && !found; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (ai->ai_addrlen > sizeof(*out)) continue;
    memcpy(out, ai->ai_addr, ai->ai_addrlen);
    if (ai->ai_family == AF_INET) out->sin.sin_port = htons((uint16_t)port);
    else out->sin6.sin6_port = htons((uint16_t)port);
    found = true;
  }
  freeaddrinfo(res);
  if (!found) return HC_FAIL(HC_ERR_SYSTEM, "host \"%s\" has no IPv4 or IPv6 address", host);
  return HC_OK;
}

/* ---- interface choice ---- */

bool hc_sock_ifname_matches(const char *spec, const char *ifname) {
  bool exclude = false, exact = false, matched = false;
  if (spec == NULL || spec[0] == 0) return true;
  if (*spec == '^') exclude = true, spec++;
  if (*spec == '=') exact = true, spec++;
  while (*spec && !matched) {
    size_t len = strcspn(spec, ",");
    /* NCCL allows "eth0:port"; the port part never names an interface. */
    size_t name_len = strcspn(spec, ",:");
    if (name_len > len) name_len = len;
    if (name_len > 0) {
      if (exact) matched = strlen(ifname) == name_len && !strncmp(ifname, spec, name_len);
      else matched = !strncmp(ifname, spec, name_len);
    }
    spec += len;
    if (*spec == ',') spec++;
  }
  return exclude ? !matched : matched;
}

/* Addresses a peer on another host could reach: IPv6 link-local ones need a
 * scope id the peer does not know, so they are never chosen. */
static bool usable_addr(const struct ifaddrs *ifa, int family) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) return false;
  int f = ifa->ifa_addr->sa_family;
  if (f != AF_INET && f != AF_INET6) return false;
  if (family != AF_UNSPEC && f != family) return false;
  if (f == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr)) return false;
  return true;
}

static bool is_loopback(const struct ifaddrs *ifa) {
  return (ifa->ifa_flags & IFF_LOOPBACK) || !strncmp(ifa->ifa_name, "lo", 2);
}

/* Tiers of the default choice: 0 = ordinary interface, 1 = docker bridge,
 * 2 = loopback. */
static int default_tier(const struct ifaddrs *ifa) {
  if (is_loopback(ifa)) return 2;
  if (!strncmp(ifa->ifa_name, "docker", 6)) return 1;
  return 0;
}

static void take_addr(const struct ifaddrs *ifa, union hc_sockaddr *out, char *ifname, size_t ifname_len) {
  memset(out, 0, sizeof(*out));
  memcpy(out, ifa->ifa_addr,
         ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  if (out->sa.sa_family == AF_INET) out->sin.sin_port = 0;
  else out->sin6.sin6_port = 0;
  if (ifname && ifname_len) snprintf(ifname, ifname_len, "%s", ifa->ifa_name);
}

hc_result_t hc_sock_local_addr(union hc_sockaddr *out, char *ifname, size_t ifname_len) {
  int family;
  HC_TRY(param_family(&family));
  const char *spec = hc_param_str(HC_P_SOCKET_IFNAME);
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return HC_FAIL(HC_ERR_SYSTEM, "getifaddrs: %s", strerror(errno));
  /* With no family asked for, IPv4 wins over IPv6 on the same tier: it is
   * what every other host of the job most likely reaches us by. */
  const int families[2] = {family == AF_UNSPEC ? AF_INET : family, family == AF_UNSPEC ? AF_INET6 : -1};
  const struct ifaddrs *best = NULL;
  int best_rank = 1 << 30;
  for (int fi = 0; fi < 2; fi++) {
    if (families[fi] < 0) continue;
    for (const struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
      if (!usable_addr(ifa, families[fi])) continue;
      int rank;
      if (spec[0]) {
        if (!hc_sock_ifname_matches(spec, ifa->ifa_name)) continue;
        rank = fi;
      } else {
        rank = default_tier(ifa) * 2 + fi;
      }
      if (rank < best_rank) best = ifa, best_rank = rank;
    }
  }
  if (best == NULL) {
    char seen[512] = "";
    size_t o = 0;
    for (const struct ifaddrs *ifa = ifs; ifa && o + 1 < sizeof(seen); ifa = ifa->ifa_next) {
      if (!usable_addr(ifa, AF_UNSPEC) || strstr(seen, ifa->ifa_name)) continue;
      int w = snprintf(seen + o, sizeof(seen) - o, "%s%s", o ? ", " : "", ifa->ifa_name);
      if (w > 0) o += (size_t)w;
    }
    freeifaddrs(ifs);
    char ifname_var[64], family_var[64];
    return HC_FAIL(HC_ERR_USAGE, "no usable interface: %s=\"%s\" %s=\"%s\"; interfaces that are up with an address: %s",
                   hc_param_source(HC_P_SOCKET_IFNAME, ifname_var, sizeof(ifname_var)), spec,
                   hc_param_source(HC_P_SOCKET_FAMILY, family_var, sizeof(family_var)),
                   hc_param_str(HC_P_SOCKET_FAMILY), seen[0] ? seen : "none");
  }
  take_addr(best, out, ifname, ifname_len);
  char buf[64];
  HC_TRACE(HC_UTIL, "local address %s on %s", hc_sock_str(out, buf, sizeof(buf)), best->ifa_name);
  freeifaddrs(ifs);
  return HC_OK;
}

/* ---- listen ---- */

hc_result_t hc_sock_listen(const union hc_sockaddr *addr, int *fd, union hc_sockaddr *bound) {
  char buf[64];
  *fd = -1;
  int family = addr->sa.sa_family;
  if (family != AF_INET && family != AF_INET6)
    return HC_FAIL(HC_ERR_ARG, "listen: address family %d is not IPv4 or IPv6", family);
  /* Non-blocking, so a connection reset between poll() and accept() cannot
   * leave accept() sleeping past a deadline. */
  int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0)
    return HC_FAIL(HC_ERR_SYSTEM, "socket for listening on %s: %s", hc_sock_str(addr, buf, sizeof(buf)),
                   strerror(errno));
  int one = 1, zero = 0;
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) goto sys_fail;
  /* "::" should also take IPv4 peers: a root bound to the wildcard does not
   * know which family its ranks resolve its name to. */
  if (family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&addr->sin6.sin6_addr) &&
      setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0)
    goto sys_fail;
  if (bind(s, &addr->sa, hc_sock_len(addr)) != 0) goto sys_fail;
  if (listen(s, 1024) != 0) goto sys_fail;
  union hc_sockaddr b;
  socklen_t blen = sizeof(b);
  memset(&b, 0, sizeof(b));
  if (getsockname(s, &b.sa, &blen) != 0) goto sys_fail;
  if (bound) *bound = b;
  *fd = s;
  HC_TRACE(HC_UTIL, "listening on %s", hc_sock_str(&b, buf, sizeof(buf)));
  return HC_OK;
sys_fail:;
  int e = errno;
  close(s);
  return HC_FAIL(HC_ERR_SYSTEM, "listen on %s: %s", hc_sock_str(addr, buf, sizeof(buf)), strerror(e));
}

/* ---- waiting ---- */

static bool aborted(const atomic_bool *abort_flag) {
  return abort_flag != NULL && atomic_load_explicit(abort_flag, memory_order_acquire);
}

/* Outcomes of waiting, turned into one message by wait_fail(). */
enum wait_status { WAIT_OK, WAIT_TIMEOUT, WAIT_ABORTED, WAIT_ERROR };

/* One slice (<= 100 ms) of waiting for events on fd; *revents is 0 when the
 * slice passed without them. */
static enum wait_status wait_slice(int fd, short events, uint64_t deadline_ns, const atomic_bool *abort_flag,
                                   short *revents) {
  *revents = 0;
  if (aborted(abort_flag)) return WAIT_ABORTED;
  uint64_t now = hc_now_ns();
  if (now >= deadline_ns) return WAIT_TIMEOUT;
  uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
  struct pollfd p = {.fd = fd, .events = events};
  int rc = poll(&p, 1, (int)HC_MIN(left_ms, (uint64_t)SLICE_MS));
  if (rc < 0 && errno != EINTR) return WAIT_ERROR;
  if (rc > 0) *revents = p.revents;
  return WAIT_OK;
}

static hc_result_t wait_fail(enum wait_status st, const char *what, const char *who) {
  if (st == WAIT_ABORTED) return HC_FAIL(HC_ERR_REMOTE, "%s %s: aborted", what, who);
  if (st == WAIT_TIMEOUT) return HC_FAIL(HC_ERR_REMOTE, "%s %s: timed out (HETCCL_TIMEOUT)", what, who);
  return HC_FAIL(HC_ERR_SYSTEM, "%s %s: poll: %s", what, who, strerror(errno));
}

/* Sleeps ms in abort-checked slices, never past the deadline. */
static enum wait_status nap(int ms, uint64_t deadline_ns, const atomic_bool *abort_flag) {
  uint64_t until = hc_now_ns() + (uint64_t)ms * 1000000ull;
  if (until > deadline_ns) until = deadline_ns;
  for (;;) {
    if (aborted(abort_flag)) return WAIT_ABORTED;
    uint64_t now = hc_now_ns();
    if (now >= until) return WAIT_OK;
    uint64_t step = HC_MIN(until - now, (uint64_t)SLICE_MS * 1000000ull);
    struct timespec ts = {.tv_sec = (time_t)(step / 1000000000ull), .tv_nsec = (long)(step % 1000000000ull)};
    nanosleep(&ts, NULL);
  }
}

/* Errors after which the peer may simply not be listening yet. */
static bool connect_retryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == ENETUNREACH || e == EHOSTUNREACH || e == ECONNRESET ||
         e == ECONNABORTED || e == EAGAIN || e == EADDRNOTAVAIL;
}

/* What connect and accept hand back: a blocking fd without Nagle. Every
 * user starts with a handshake of small records written back to back, which
 * Nagle and the peer's delayed ACK would hold up by 40 ms each. */
static void set_fresh_fd(int fd) {
  int fl = fcntl(fd, F_GETFL), one = 1;
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* How often a connect that keeps being refused says so. */
#define CONNECT_REPORT_NS (10ull * 1000000000ull)

hc_result_t hc_sock_connect_blocking(const union hc_sockaddr *addr, const char *what, uint64_t deadline_ns,
                                     const atomic_bool *abort_flag, int *fd) {
  char who[160], at[80];
  snprintf(who, sizeof(who), "%s %s", what ? what : "a peer", hc_sock_str(addr, at, sizeof(at)));
  *fd = -1;
  int backoff_ms = 5, last_err = 0, tries = 0;
  enum wait_status st = WAIT_OK;
  uint64_t start = hc_now_ns(), next_report = start + CONNECT_REPORT_NS;
  for (;;) {
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return HC_FAIL(HC_ERR_SYSTEM, "connect to %s: socket: %s", who, strerror(errno));
    tries++;
    int rc = connect(s, &addr->sa, hc_sock_len(addr));
    int e = rc == 0 ? 0 : errno;
    if (rc != 0 && (e == EINPROGRESS || e == EINTR)) {
      /* The handshake runs in the kernel; SO_ERROR says how it ended. */
      short rev = 0;
      while (rev == 0 && (st = wait_slice(s, POLLOUT, deadline_ns, abort_flag, &rev)) == WAIT_OK) {}
      if (st != WAIT_OK) {
        close(s);
        break;
      }
      socklen_t elen = sizeof(e);
      if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &elen) != 0) e = errno;
    }
    if (e == 0) {
      set_fresh_fd(s);
      *fd = s;
      HC_TRACE(HC_UTIL, "connected to %s after %d attempts", who, tries);
      return HC_OK;
    }
    close(s);
    if (!connect_retryable(e)) return HC_FAIL(HC_ERR_SYSTEM, "connect to %s: %s", who, strerror(e));
    last_err = e;
    if (hc_now_ns() >= deadline_ns) {
      st = WAIT_TIMEOUT;
      break;
    }
    HC_TRACE(HC_UTIL, "connect to %s: %s, retrying in %d ms", who, strerror(e), backoff_ms);
    uint64_t now = hc_now_ns();
    if (now >= next_report) {
      next_report = now + CONNECT_REPORT_NS;
      HC_WARN(HC_UTIL,
              "%s has not answered for %llu s (%s; not started yet?); retrying for %llu s more "
              "(HETCCL_TIMEOUT)",
              who, (unsigned long long)((now - start) / 1000000000ull), strerror(e),
              (unsigned long long)((deadline_ns - now) / 1000000000ull));
    }
    if ((st = nap(backoff_ms, deadline_ns, abort_flag)) != WAIT_OK) break;
    backoff_ms = HC_MIN(backoff_ms * 2, SLICE_MS);
  }
  if (st == WAIT_TIMEOUT && last_err) {
    return HC_FAIL(HC_ERR_REMOTE, "connect to %s: timed out (HETCCL_TIMEOUT) after %d attempts, last: %s", who, tries,
                   strerror(last_err));
  }
  return wait_fail(st, "connect to", who);
}

hc_result_t hc_sock_accept_blocking(int listen_fd, uint64_t deadline_ns, const atomic_bool *abort_flag, int *fd) {
  char who[80];
  local_str(listen_fd, who, sizeof(who));
  *fd = -1;
  for (;;) {
    /* Poll before accept: on a blocking listener accept() would sleep with
     * no deadline. */
    short rev;
    enum wait_status st = wait_slice(listen_fd, POLLIN, deadline_ns, abort_flag, &rev);
    if (st != WAIT_OK) return wait_fail(st, "waiting for a connection on", who);
    if (rev == 0) continue;
    union hc_sockaddr a;
    socklen_t alen = sizeof(a);
    int s = accept4(listen_fd, &a.sa, &alen, SOCK_CLOEXEC);
    if (s >= 0) {
      set_fresh_fd(s);
      *fd = s;
      return HC_OK;
    }
    int e = errno;
    if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR && e != ECONNABORTED && e != EPROTO)
      return HC_FAIL(HC_ERR_SYSTEM, "accept on %s: %s", who, strerror(e));
  }
}

hc_result_t hc_sock_send_blocking(int fd, const void *buf, size_t n, uint64_t deadline_ns,
                                  const atomic_bool *abort_flag) {
  const char *p = buf;
  char who[80];
  /* Named now: once the peer resets the connection getpeername() fails. */
  if (n > 0) peer_str(fd, who, sizeof(who));
  while (n > 0) {
    if (aborted(abort_flag)) return HC_FAIL(HC_ERR_REMOTE, "send to %s: aborted", who);
    ssize_t w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    int e = errno;
    if (w < 0 && e == EINTR) continue;
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK)) {
      short rev;
      enum wait_status st = wait_slice(fd, POLLOUT, deadline_ns, abort_flag, &rev);
      if (st != WAIT_OK) return wait_fail(st, "send to", who);
      continue;
    }
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ETIMEDOUT || e == EHOSTUNREACH)
      return HC_FAIL(HC_ERR_REMOTE, "send to %s: connection lost (%s)", who, strerror(e));
    return HC_FAIL(HC_ERR_SYSTEM, "send to %s: %s", who, strerror(e));
  }
  return HC_OK;
}

hc_result_t hc_sock_recv_blocking(int fd, void *buf, size_t n, uint64_t deadline_ns, const atomic_bool *abort_flag) {
  char *p = buf;
  char who[80];
  if (n > 0) peer_str(fd, who, sizeof(who));
  while (n > 0) {
    if (aborted(abort_flag)) return HC_FAIL(HC_ERR_REMOTE, "receive from %s: aborted", who);
    ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= (size_t)got;
      continue;
    }
    if (got == 0)
      return HC_FAIL(HC_ERR_REMOTE, "receive from %s: connection closed by the peer (%zu bytes short)", who, n);
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      short rev;
      enum wait_status st = wait_slice(fd, POLLIN, deadline_ns, abort_flag, &rev);
      if (st != WAIT_OK) return wait_fail(st, "receive from", who);
      continue;
    }
    if (e == ECONNRESET || e == ENOTCONN || e == ETIMEDOUT || e == EHOSTUNREACH)
      return HC_FAIL(HC_ERR_REMOTE, "receive from %s: connection lost (%s)", who, strerror(e));
    return HC_FAIL(HC_ERR_SYSTEM, "receive from %s: %s", who, strerror(e));
  }
  return HC_OK;
}

hc_result_t hc_sock_tune(int fd) {
  char who[80];
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "O_NONBLOCK on socket to %s: %s", peer_str(fd, who, sizeof(who)), strerror(errno));
  /* A dead host sends no FIN: keepalive probes after 1 s idle, 1 s apart,
   * 3 unanswered -> the connection errors out about 4 s after the host died. */
  static const struct {
    int level, name, value;
    const char *what;
  } opts[] = {
      {IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY"},   {SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, 1, "TCP_KEEPIDLE"}, {IPPROTO_TCP, TCP_KEEPINTVL, 1, "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_KEEPCNT, 3, "TCP_KEEPCNT"},
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(opts); i++) {
    if (setsockopt(fd, opts[i].level, opts[i].name, &opts[i].value, sizeof(opts[i].value)) != 0)
      return HC_FAIL(HC_ERR_SYSTEM, "%s on socket to %s: %s", opts[i].what, peer_str(fd, who, sizeof(who)),
                     strerror(errno));
  }
  return HC_OK;
}
