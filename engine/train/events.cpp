// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/events.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include "engine/core/error.h"
#include "engine/metrics/layer_profile.h"
#include "engine/store/run_store.h"

namespace tb {

using json = nlohmann::json;

EventBus::EventBus() : start_(std::chrono::steady_clock::now()) {}

double EventBus::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void EventBus::publish(const std::string& type, json fields) {
  json e = {{"v", kEventsVersion}, {"type", type}, {"t", seconds()}};
  for (auto& [k, v] : fields.items()) e[k] = std::move(v);
  for (EventSink* s : sinks_) {
    try {
      s->on_event(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "trainbench: an event sink failed on '%s': %s\n", type.c_str(), ex.what());
    }
  }
}

void JsonlSink::on_event(const json& event) {
  if (closed_) return;
  // Non-finite numbers (a diverged loss) become null: JSON has no NaN.
  std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  // One write per line; a reader that went away (EPIPE) closes the stream.
  if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fflush(out_) != 0) {
    closed_ = true;
    std::fprintf(stderr,
                 "trainbench: the event stream's reader went away (%s); no more events are "
                 "written to it, the run goes on and is recorded in the run store\n",
                 std::strerror(errno));
  }
}

// --- ProgressSink

ProgressSink::ProgressSink(std::FILE* out, bool terminal, bool quiet)
    : out_(out), terminal_(terminal), quiet_(quiet) {}

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string duration_str(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600),
                  (long long)(t / 60 % 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return buf;
}
}  // namespace

void ProgressSink::draw_bar(const json& e) {
  const int64_t step = e.value("step", int64_t(0));
  const json& m = e["metrics"];
  if (m.contains("loss") && m["loss"].is_number()) last_loss_ = fmt("%.4f", m["loss"].get<double>());
  const double t = e.value("t", 0.0);
  const double frac = total_steps_ > 0 ? double(step) / double(total_steps_) : 0.0;
  const double eta = frac > 0 ? t / frac - t : NAN;
  std::string line = "epoch " + std::to_string(e.value("epoch", int64_t(0)) + 1) + "/" +
                     std::to_string(epochs_) + " ";
  if (terminal_) {
    const int width = 24, filled = static_cast<int>(frac * width);
    line += '[';
    line.append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(width - filled), '.');
    line += "] ";
  }
  line += "step " + std::to_string(step) + "/" + std::to_string(total_steps_);
  if (!last_loss_.empty()) line += "  loss " + last_loss_;
  if (m.contains("step_time_ms")) line += "  " + fmt("%.1f", m["step_time_ms"].get<double>()) + " ms/step";
  if (m.contains("samples_per_s")) line += "  " + fmt("%.0f", m["samples_per_s"].get<double>()) + " samples/s";
  line += "  elapsed " + duration_str(t) + "  eta " + duration_str(eta);
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    bar_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressSink::on_event(const json& e) {
  const std::string type = e.value("type", "");
  auto end_bar = [&]() {
    if (bar_open_) std::fputc('\n', out_), bar_open_ = false;
  };
  if (type == "run_started") {
    total_steps_ = e.value("total_steps", int64_t(0));
    steps_per_epoch_ = e.value("steps_per_epoch", int64_t(0));
    epochs_ = e["config"].value("epochs", int64_t(1));
    log_every_ = std::max<int64_t>(1, e["config"].value("log_every", int64_t(50)));
    if (steps_per_epoch_ > 0 && e["config"].value("max_steps", int64_t(0)) > 0)
      epochs_ = (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_;
    if (quiet_) return;
    std::fprintf(out_, "run %lld: %s on %s, %lld parameters, %lld steps (%lld per epoch)\n",
                 (long long)e.value("run_id", int64_t(0)), e["config"].value("model", "").c_str(),
                 e["environment"].value("device_name", "").c_str(),
                 (long long)e.value("parameters", int64_t(0)), (long long)total_steps_,
                 (long long)steps_per_epoch_);
  } else if (type == "step") {
    if (quiet_) return;
    const double t = e.value("t", 0.0);
    const int64_t step = e.value("step", int64_t(0));
    if (terminal_ ? (t - last_draw_ >= 0.1 || step == total_steps_)
                  : (step % log_every_ == 0 || step == total_steps_)) {
      last_draw_ = t;
      draw_bar(e);
    }
  } else if (type == "epoch") {
    if (quiet_) return;
    end_bar();
    const json& m = e["metrics"];
    std::fprintf(out_, "epoch %lld: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.1f s\n",
                 (long long)e.value("epoch", int64_t(0)) + 1, m.value("train_loss", NAN),
                 m.value("train_accuracy", NAN), m.value("test_loss", NAN),
                 m.value("test_accuracy", NAN), m.value("epoch_time_s", NAN));
  } else if (type == "log") {
    if (quiet_ && e.value("level", "") == "info") return;
    end_bar();
    std::fprintf(out_, "%s: %s\n", e.value("level", "info").c_str(),
                 e.value("message", "").c_str());
  } else if (type == "finished") {
    end_bar();
    const json& s = e["summary"];
    std::fprintf(out_, "%s: %lld steps, median step %.2f ms, %.0f samples/s, test accuracy %.4f\n",
                 e.value("status", "").c_str(), (long long)s.value("steps", int64_t(0)),
                 s.value("median_step_time_ms", NAN), s.value("samples_per_s", NAN),
                 s.value("final_test_accuracy", NAN));
  } else if (type == "failed") {
    end_bar();
  }
  std::fflush(out_);
}

// --- StoreSink

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kRetryInterval = std::chrono::milliseconds(1000);
constexpr const char* kStopNow = "_stop_now";  // internal: record_stop_now()
}  // namespace

StoreSink::StoreSink(RunStore& store, int64_t run_id, StoreSinkOptions options)
    : store_(store), run_(run_id), options_(options), thread_([this] { loop(); }) {}

StoreSink::~StoreSink() {
  if (thread_.joinable()) close(std::chrono::milliseconds(0));
}

void StoreSink::on_event(const json& event) {
  std::lock_guard lock(mutex_);
  if (ended_) return;
  queue_.push_back(event);
  if (queue_.size() > options_.max_queued_events) {
    // The front may be being written right now: never drop that one.
    auto it = std::find_if(queue_.begin() + 1, queue_.end(),
                           [](const json& q) { return q.value("type", "") == "step"; });
    if (it != queue_.end()) {
      queue_.erase(it);
      ++dropped_events_;
    }
  }
  wake_.notify_one();
}

void StoreSink::record_stop_now(const std::string& error) {
  on_event({{"type", kStopNow}, {"error", error}});
}

std::string StoreSink::close(std::chrono::milliseconds timeout) {
  std::lock_guard closing(close_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return end_recorded_ ? "" : last_error_;
    closing_ = true;
    close_deadline_ = Clock::now() + timeout;
  }
  wake_.notify_one();
  thread_.join();
  std::lock_guard lock(mutex_);
  ended_ = true;
  if (end_recorded_) return "";
  if (!last_error_.empty()) return last_error_;
  return "the run store got no final status for the run";
}

// One event into the store. False when it must be retried (nothing of it was
// written); metric points are always taken: the store buffers and retries them.
bool StoreSink::apply(const json& e) {
  const std::string type = e.value("type", "");
  const double t = e.value("t", 0.0);
  try {
    // An evaluation between epochs (eval_every_steps, target_accuracy) is a step series too.
    if (type == "step" || type == "evaluation") {
      const int64_t step = e.value("step", int64_t(0));
      std::vector<MetricPoint> points;
      for (const auto& [name, value] : e["metrics"].items())
        if (value.is_number()) points.push_back({name, step, t, value.get<double>()});
      try {
        store_.append_step_metrics(run_, points);
      } catch (const std::exception& ex) {
        note_error(ex.what());  // the points stay buffered in the store
      }
    } else if (type == "epoch") {
      const int64_t epoch = e.value("epoch", int64_t(0)), step = e.value("step", int64_t(0));
      std::vector<EpochPoint> points;
      for (const auto& [name, value] : e["metrics"].items())
        if (value.is_number()) points.push_back({name, epoch, step, t, value.get<double>()});
      try {
        store_.append_epoch_metrics(run_, points);
        store_.flush();
      } catch (const std::exception& ex) {
        note_error(ex.what());
      }
    } else if (type == "layer_profile") {
      // A malformed profile is reported and dropped (a retry would fail the same way).
      std::optional<LayerProfileStep> profile;
      try {
        profile = LayerProfileStep::from_json(e);
      } catch (const Error& ex) {
        note_error(ex.what());
      }
      if (profile) store_.append_layer_profile(run_, *profile);
    } else if (type == "log") {
      store_.append_event(run_, e.value("level", "info"), e.value("message", ""));
    } else if (type == "run_started") {
      // How long the run is, for readers that follow it from the store.
      json plan = json::object();
      for (const char* key : {"steps_per_epoch", "total_steps"})
        if (e.contains(key)) plan[key] = e[key];
      environment_ = e.value("environment", json::object());
      store_.start_run(run_, environment_, e.value("tricks", json::object()), plan);
    } else if (type == "finished" || type == "failed") {
      const std::string status = type == "failed" ? "failed" : e.value("status", "finished");
      if (e.contains("kernel_paths") && environment_.is_object() && !environment_.empty()) {
        environment_["kernel_paths"] = e["kernel_paths"];
        store_.set_environment(run_, environment_);
      }
      store_.finish_run(run_, status, e.value("summary", json::object()), e.value("error", ""));
      std::lock_guard lock(mutex_);
      end_recorded_ = true;
    } else if (type == kStopNow) {
      store_.set_status(run_, run_status::kStopped, e.value("error", ""));
      std::lock_guard lock(mutex_);
      end_recorded_ = true;
    }
  } catch (const std::exception& ex) {
    note_error(ex.what());
    return false;
  }
  return true;
}

void StoreSink::note_error(const std::string& error) {
  std::lock_guard lock(mutex_);
  // The first failure at once, then at most one line per 10 s.
  const auto now = Clock::now();
  if (last_error_.empty() || (error != last_error_ && now - last_printed_ >= std::chrono::seconds(10))) {
    std::fprintf(stderr, "trainbench: run store: %s (training goes on; retrying)\n", error.c_str());
    last_printed_ = now;
  }
  last_error_ = error;
}

void StoreSink::loop() {
  auto next_beat = Clock::now() + options_.heartbeat_interval;
  Clock::time_point retry_at{};
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto now = Clock::now();
    if (closing_ && (queue_.empty() || now >= close_deadline_)) break;
    if (queue_.empty() || now < retry_at) {
      auto until = next_beat;
      if (!queue_.empty()) until = std::min(until, retry_at);
      if (closing_) until = std::min(until, close_deadline_);
      wake_.wait_until(lock, until);
    }
    // In order: an event that cannot be written yet holds back those after it.
    while (!queue_.empty() && Clock::now() >= retry_at) {
      const json event = queue_.front();
      lock.unlock();
      const bool ok = apply(event);
      lock.lock();
      if (ok) {
        queue_.pop_front();
      } else {
        retry_at = Clock::now() + kRetryInterval;
        if (closing_ && Clock::now() >= close_deadline_) break;
      }
    }
    if (Clock::now() >= next_beat) {
      lock.unlock();
      try {
        store_.heartbeat(run_);
        if (store_.pending_points() > 0) store_.flush();  // retries a failed batch
        std::lock_guard relock(mutex_);
        if (!last_error_.empty() && queue_.empty()) {
          std::fprintf(stderr, "trainbench: run store: writing again\n");
          last_error_.clear();
        }
      } catch (const std::exception& ex) {
        note_error(ex.what());
      }
      lock.lock();
      next_beat = Clock::now() + options_.heartbeat_interval;
    }
  }
  const int64_t dropped = dropped_events_;
  lock.unlock();
  try {
    store_.flush();  // points that came after the end (a stop recorded early)
  } catch (const std::exception& ex) {
    note_error(ex.what());
  }
  if (dropped > 0)
    std::fprintf(stderr, "trainbench: run store: %lld step events dropped while the store could "
                 "not be written\n", static_cast<long long>(dropped));
}

}  // namespace tb
