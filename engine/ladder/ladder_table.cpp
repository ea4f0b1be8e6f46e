// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/ladder/ladder_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "engine/store/run_store.h"

namespace tb {

using json = nlohmann::json;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// {median, min, max, n}; null when empty.
json spread(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return {{"median", median(v)},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())},
          {"n", v.size()}};
}

double num(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// Repetition -> samples/s of a rung's finished speed runs.
std::map<int, double> samples_by_repetition(const json& row) {
  std::map<int, double> m;
  // A failed run has no samples_per_s; const json's [] on a missing key is UB.
  if (!row.is_object() || !row.contains("runs")) return m;
  for (const json& r : row.at("runs")) {
    const double v = num(r, "samples_per_s");
    if (std::isfinite(v) && r.contains("repetition")) m[r.at("repetition").get<int>()] = v;
  }
  return m;
}

// a[r] / b[r] for every repetition both have (inverted: b[r] / a[r]).
std::vector<double> paired_ratios(const std::map<int, double>& a, const std::map<int, double>& b,
                                  bool inverted) {
  std::vector<double> out;
  for (const auto& [r, x] : a)
    if (auto it = b.find(r); it != b.end() && x > 0 && it->second > 0)
      out.push_back(inverted ? it->second / x : x / it->second);
  return out;
}

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string bytes_text(double b) {
  if (!std::isfinite(b) || b <= 0) return "–";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(u == 0 ? "%.0f" : "%.1f", b) + " " + units[u];
}

// A spread as "median (min–max)": "1.23× (1.20–1.26)", "3456 (3400–3500)".
std::string spread_text(const json& s, const char* median_format, const char* range_format) {
  if (!s.is_object()) return "–";
  std::string t = fmt(median_format, s["median"].get<double>());
  if (s["n"].get<int>() > 1)
    t += " (" + fmt(range_format, s["min"].get<double>()) + "–" + fmt(range_format, s["max"].get<double>()) + ")";
  return t;
}

}  // namespace

std::string ladder_verdict(const std::vector<double>& r) {
  if (r.size() < 2) return "not judged";
  const double med = median(r);
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  if (*lo > 1.0 && med >= 1.0 + kMinEffect) return "faster";
  if (*hi < 1.0 && med <= 1.0 - kMinEffect) return "slower";
  return "no measurable change";
}

json ladder_table(const LadderPlan& plan,
                  const std::map<int, std::vector<RungMeasurement>>& measurements) {
  json rows = json::array();
  for (const PlannedRung& rung : plan.rungs) {
    const json& c = rung.config;
    json row = {{"index", rung.index},
                {"id", rung.id},
                {"title", rung.title},
                {"adds", rung.adds},
                {"batch", c.at("batch_size").get<int64_t>() * c.at("accumulation_steps").get<int64_t>()},
                {"reference", rung.reference},
                {"runs", json::array()},
                {"failed", json::array()}};
    if (!rung.skipped.empty()) {
      row["status"] = "skipped";
      row["skipped"] = rung.skipped;
      rows.push_back(row);
      continue;
    }
    std::vector<double> step_ms, sps, peaks;
    auto it = measurements.find(rung.index);
    int speed_runs = 0;
    if (it != measurements.end())
      for (const RungMeasurement& m : it->second) {
        const LadderRunOutcome& o = m.outcome;
        if (o.status == run_status::kFailed)
          row["failed"].push_back({{"run_id", m.run_id}, {"kind", m.kind}, {"error", o.error}});
        if (m.kind == "accuracy") {
          json acc = {{"run_id", m.run_id}, {"status", o.status}};
          for (const char* k : {"final_test_accuracy", "total_time_s", "time_to_target_s",
                                "steps_to_target", "target_accuracy"})
            if (std::isfinite(num(o.summary, k))) acc[k] = num(o.summary, k);
          if (o.summary.is_object() && o.summary.contains("target_reached"))
            acc["target_reached"] = o.summary["target_reached"];
          row["accuracy"] = acc;
          continue;
        }
        ++speed_runs;
        json r = {{"run_id", m.run_id}, {"repetition", m.repetition}, {"status", o.status}};
        if (o.status == run_status::kFinished && !o.measured_step_ms.empty()) {
          const double ms = median(o.measured_step_ms);
          r["median_step_ms"] = ms;
          r["samples_per_s"] = 1e3 * double(row["batch"].get<int64_t>()) / ms;
          r["measured_steps"] = o.measured_step_ms.size();
          step_ms.push_back(ms);
          sps.push_back(r["samples_per_s"]);
          const double peak = num(o.summary, "peak_memory_bytes");
          if (std::isfinite(peak)) r["peak_memory_bytes"] = peak, peaks.push_back(peak);
        }
        row["runs"].push_back(r);
      }
    row["median_step_ms"] = step_ms.empty() ? json(nullptr) : json(median(step_ms));
    row["samples_per_s"] = spread(sps);
    row["peak_memory_bytes"] =
        peaks.empty() ? json(nullptr) : json(*std::max_element(peaks.begin(), peaks.end()));
    row["status"] = speed_runs >= plan.repeats ? "done" : speed_runs > 0 ? "running" : "pending";
    rows.push_back(row);
  }
  // Ratios need the rows they compare with: a second pass.
  for (json& row : rows) {
    if (row["status"] == "skipped" || row["index"] == 0) continue;
    const auto mine = samples_by_repetition(row);
    row["speedup"] = spread(paired_ratios(mine, samples_by_repetition(rows[0]), false));
    const int ref = row["reference"].get<int>();
    const PlannedRung& rung = plan.rungs[row["index"].get<size_t>()];
    if (ref >= 0) {
      const std::vector<double> effect =
          paired_ratios(mine, samples_by_repetition(rows[ref]), rung.effect_inverted);
      row["effect"] = spread(effect);
      row["effect_against"] = rows[ref]["title"];
      row["verdict"] = ladder_verdict(effect);
    }
  }
  if (!rows.empty() && rows[0]["status"] != "skipped") {
    const auto base = samples_by_repetition(rows[0]);
    rows[0]["speedup"] = spread(paired_ratios(base, base, false));
  }
  return {{"name", plan.name},
          {"mode", plan.mode},
          {"device", plan.device},
          {"repeats", plan.repeats},
          {"warmup_steps", plan.warmup_steps},
          {"measured_steps", plan.measured_steps},
          {"min_effect", kMinEffect},
          {"rows", rows}};
}

bool ladder_table_has_accuracy(const json& table) {
  for (const json& row : table["rows"])
    if (row.contains("accuracy")) return true;
  return false;
}

std::vector<std::string> ladder_table_header(bool with_accuracy) {
  std::vector<std::string> h = {"rung", "batch", "peak memory", "median step",
                                "samples/s (min–max)", "vs baseline (min–max)",
                                "effect of the rung (min–max)", "verdict"};
  if (with_accuracy) h.insert(h.end(), {"test accuracy", "time to target"});
  return h;
}

std::vector<std::string> ladder_row_cells(const json& row, bool with_accuracy) {
  std::vector<std::string> cells = {row["title"].get<std::string>()};
  if (row["status"] == "skipped") {
    cells.resize(7);
    cells.push_back("skipped: " + row["skipped"].get<std::string>());
    if (with_accuracy) cells.resize(10);
    return cells;
  }
  std::string verdict = row.value("verdict", row["index"] == 0 ? "" : "–");
  if (row["status"] != "done")
    verdict = row["status"].get<std::string>() + (verdict.empty() ? "" : ", " + verdict);
  if (!row["failed"].empty()) verdict += " (" + std::to_string(row["failed"].size()) + " failed)";
  cells.insert(cells.end(), {std::to_string(row["batch"].get<int64_t>()),
                             bytes_text(num(row, "peak_memory_bytes")),
                             fmt("%.2f ms", num(row, "median_step_ms")),
                             spread_text(row["samples_per_s"], "%.0f", "%.0f"),
                             spread_text(row.value("speedup", json()), "%.2f×", "%.2f"),
                             spread_text(row.value("effect", json()), "%.2f×", "%.2f"), verdict});
  if (with_accuracy) {
    const json acc = row.value("accuracy", json());
    cells.push_back(fmt("%.4f", num(acc, "final_test_accuracy")));
    if (acc.is_object() && acc.value("target_reached", false))
      cells.push_back(fmt("%.1f s", num(acc, "time_to_target_s")) + " (" +
                      fmt("%.0f", num(acc, "steps_to_target")) + " steps)");
    else
      cells.push_back(acc.is_object() && acc.contains("target_reached") ? "not reached" : "–");
  }
  return cells;
}

std::string ladder_table_markdown(const json& table) {
  const bool accuracy = ladder_table_has_accuracy(table);
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    out << "|";
    for (const std::string& c : cells) out << " " << c << " |";
    out << "\n";
  };
  const std::vector<std::string> header = ladder_table_header(accuracy);
  line(header);
  std::vector<std::string> rule(header.size(), "---:");
  rule[0] = "---", rule[7] = "---";
  line(rule);
  for (const json& row : table["rows"]) line(ladder_row_cells(row, accuracy));
  return out.str();
}

std::string ladder_table_csv(const json& table) {
  std::ostringstream out;
  out << "rung,title,status,batch,peak_memory_bytes,median_step_ms,samples_per_s,samples_per_s_min,"
         "samples_per_s_max,speedup,speedup_min,speedup_max,effect,effect_min,effect_max,verdict,"
         "test_accuracy,time_to_target_s,steps_to_target,skipped\n";
  auto n = [](double v) {
    if (!std::isfinite(v)) return std::string();
    std::ostringstream s;
    s.precision(9);
    s << v;
    return s.str();
  };
  auto quoted = [](std::string s) {
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (const json& row : table["rows"]) {
    const json sps = row.value("samples_per_s", json()), up = row.value("speedup", json()),
               eff = row.value("effect", json()), acc = row.value("accuracy", json());
    out << row["id"].get<std::string>() << "," << quoted(row["title"]) << "," << row["status"].get<std::string>()
        << "," << row["batch"].get<int64_t>() << "," << n(num(row, "peak_memory_bytes")) << ","
        << n(num(row, "median_step_ms")) << "," << n(num(sps, "median")) << "," << n(num(sps, "min"))
        << "," << n(num(sps, "max")) << "," << n(num(up, "median")) << "," << n(num(up, "min")) << ","
        << n(num(up, "max")) << "," << n(num(eff, "median")) << "," << n(num(eff, "min")) << ","
        << n(num(eff, "max")) << "," << row.value("verdict", "") << ","
        << n(num(acc, "final_test_accuracy")) << "," << n(num(acc, "time_to_target_s")) << ","
        << n(num(acc, "steps_to_target")) << "," << quoted(row.value("skipped", "")) << "\n";
  }
  return out.str();
}

}  // namespace tb
