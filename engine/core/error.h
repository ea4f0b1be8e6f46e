// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tb {

// Every error the engine raises for bad input, bad configuration or a failed
// device call. The message names the problem (file, field, value) so the user
// can act on it without reading the source.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Raised when a device (or host) allocation fails; trainers turn it into a
// failed run whose message names the batch size and the bytes asked for.
class OutOfMemory : public Error {
 public:
  OutOfMemory(const std::string& what, size_t requested_bytes)
      : Error(what), requested_bytes(requested_bytes) {}
  size_t requested_bytes;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace tb

// TB_CHECK(cond, "message parts", value, ...): throws tb::Error when cond is false.
#define TB_CHECK(cond, ...)                                      \
  do {                                                           \
    if (!(cond)) throw ::tb::Error(::tb::detail::concat(__VA_ARGS__)); \
  } while (0)

#define TB_FAIL(...) throw ::tb::Error(::tb::detail::concat(__VA_ARGS__))
