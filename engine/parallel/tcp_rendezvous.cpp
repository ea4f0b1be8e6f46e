// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/tcp_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>

#include "engine/core/error.h"

namespace tb {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x54425256;  // "TBRV"

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() { if (fd >= 0) ::close(fd); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

double left_s(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const double left = left_s(deadline);
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min(left * 1000.0, 1000.0)) + 1);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

void io_all(int fd, void* data, size_t n, bool send, Clock::time_point deadline,
            const std::string& where) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    TB_CHECK(wait_fd(fd, send ? POLLOUT : POLLIN, deadline), where, ": timed out");
    const ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TB_CHECK(k > 0, where, ": ", k == 0 ? "the peer closed the connection" : std::strerror(errno));
    p += k, n -= size_t(k);
  }
}

addrinfo* resolve(const std::string& address, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &res);
  TB_CHECK(rc == 0 && res, "rendezvous: cannot resolve MASTER_ADDR '", address, "': ",
           gai_strerror(rc));
  return res;
}

}  // namespace

void tcp_rendezvous_broadcast(const std::string& address, int port, int rank, int size, void* data,
                              size_t bytes, double timeout_s) {
  if (size <= 1) return;
  TB_CHECK(!address.empty() && port > 0 && port < 65536,
           "rendezvous: MASTER_ADDR and MASTER_PORT must be set for a RANK/WORLD_SIZE launch "
           "(got '", address, "':", port, ")");
  const std::string where = "rendezvous at " + address + ":" + std::to_string(port);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  addrinfo* res = resolve(address, port, rank == 0);
  struct Free {
    addrinfo* r;
    ~Free() { ::freeaddrinfo(r); }
  } free_res{res};

  if (rank == 0) {
    Fd listener(::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol));
    TB_CHECK(listener.fd >= 0, where, ": socket: ", std::strerror(errno));
    const int yes = 1;
    ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    TB_CHECK(::bind(listener.fd, res->ai_addr, res->ai_addrlen) == 0, where,
             ": rank 0 cannot listen: ", std::strerror(errno));
    TB_CHECK(::listen(listener.fd, size) == 0, where, ": listen: ", std::strerror(errno));
    std::set<int> seen;
    while (int(seen.size()) < size - 1) {
      TB_CHECK(wait_fd(listener.fd, POLLIN, deadline), where, ": ", seen.size(), " of ", size - 1,
               " ranks connected within ", timeout_s, " s");
      Fd peer(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (peer.fd < 0) continue;
      uint32_t hello[2] = {0, 0};
      io_all(peer.fd, hello, sizeof hello, false, deadline, where);
      TB_CHECK(hello[0] == kMagic && int(hello[1]) > 0 && int(hello[1]) < size, where,
               ": a connection that is no rank of this job (rank ", hello[1], ")");
      TB_CHECK(seen.insert(int(hello[1])).second, where, ": rank ", hello[1], " connected twice");
      io_all(peer.fd, data, bytes, true, deadline, where);
    }
    return;
  }
  // The other ranks retry while rank 0 is not listening yet.
  for (;;) {
    Fd s(::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol));
    TB_CHECK(s.fd >= 0, where, ": socket: ", std::strerror(errno));
    if (::connect(s.fd, res->ai_addr, res->ai_addrlen) == 0) {
      uint32_t hello[2] = {kMagic, uint32_t(rank)};
      io_all(s.fd, hello, sizeof hello, true, deadline, where);
      io_all(s.fd, data, bytes, false, deadline, where);
      return;
    }
    TB_CHECK(left_s(deadline) > 0, where, ": rank ", rank, " could not reach rank 0 within ",
             timeout_s, " s (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace tb
