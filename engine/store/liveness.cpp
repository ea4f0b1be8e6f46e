// SPDX-License-Identifier: GPL-3.0-or-later
// Whether a run's engine is still alive, so that a run whose engine died reads
// as interrupted to every reader without anyone marking it: the recorded pid
// when the run was written on this host, else the age of its heartbeat.
// Every run a reader reads passes through it (run_reader.cpp's read_run).
#include "engine/store/run_store.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include "engine/core/error.h"

namespace tb {

namespace {

std::optional<std::chrono::system_clock::time_point> parse_iso_utc(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  if (secs == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

// The process exists and is not a zombie (a killed engine its parent has not
// reaped yet is gone all the same).
bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

const std::string& cached_host_name() {
  static const std::string name = this_host_name();
  return name;
}

}  // namespace

std::string engine_gone_reason(const RunRecord& r, std::chrono::system_clock::time_point now,
                               std::chrono::milliseconds stale_after) {
  const std::string& status = r.recorded_status.empty() ? r.status : r.recorded_status;
  if (status != run_status::kQueued && status != run_status::kRunning) return "";
  if (r.engine_pid > 0 && !r.engine_host.empty() && r.engine_host == cached_host_name() &&
      !process_alive(r.engine_pid))
    return detail::concat("the engine (process ", r.engine_pid, " on ", r.engine_host,
                          ") ended without recording the end of the run (killed, crashed, or "
                          "its run store could not be written)");
  // Runs from schema v1 have no heartbeat; their start time stands in for it.
  const std::string& beat =
      !r.heartbeat_at.empty() ? r.heartbeat_at
                              : (!r.started_at.empty() ? r.started_at : r.created_at);
  const auto last = parse_iso_utc(beat);
  const auto age = last ? now - *last : std::chrono::system_clock::duration::max();
  if (age <= stale_after) return "";
  const std::string seen =
      last ? detail::concat("no heartbeat for ",
                            std::chrono::duration_cast<std::chrono::seconds>(age).count(), " s")
           : detail::concat("no readable heartbeat ('", beat, "')");
  return detail::concat(seen, ": the engine",
                        r.engine_pid > 0 ? detail::concat(" (process ", r.engine_pid, " on ",
                                                          r.engine_host.empty() ? "an unknown host"
                                                                                : r.engine_host,
                                                          ")")
                                         : std::string(),
                        " stopped without recording the end of the run");
}

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace tb
