// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A plain-text table with columns sized to their content, for list/show/compare.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

namespace tb {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) {
    row.resize(header_.size());
    rows_.push_back(std::move(row));
  }
  size_t rows() const { return rows_.size(); }

  void print(std::ostream& out) const {
    std::vector<size_t> w(header_.size());
    for (size_t i = 0; i < header_.size(); ++i) w[i] = header_[i].size();
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    auto line = [&](const std::vector<std::string>& r) {
      std::string text = " ";
      for (size_t i = 0; i < r.size(); ++i)
        text += " " + r[i] + std::string(w[i] - r[i].size(), ' ') + " ";
      text.erase(text.find_last_not_of(' ') + 1);  // no trailing blanks
      out << text << "\n";
    };
    line(header_);
    std::vector<std::string> rule;
    for (size_t x : w) rule.push_back(std::string(x, '-'));
    line(rule);
    for (const auto& r : rows_) line(r);
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tb
