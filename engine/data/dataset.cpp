// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/data/cifar10_dataset.h"
#include "engine/data/idx_dataset.h"
#include "engine/data/synthetic_dataset.h"

namespace tb {

void Dataset::check_index(int64_t index) const {
  TB_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range 0..",
           size() - 1);
}

InMemoryDataset::InMemoryDataset(std::string name, Shape sample_shape, int num_classes,
                                 std::vector<uint8_t> pixels, std::vector<int32_t> labels)
    : name_(std::move(name)),
      shape_(std::move(sample_shape)),
      num_classes_(num_classes),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)) {
  TB_CHECK(shape_.size() == 3, name_, ": sample shape must be {C, H, W}, got ", shape_str(shape_));
  TB_CHECK(pixels_.size() == labels_.size() * static_cast<size_t>(shape_numel(shape_)), name_, ": ",
           pixels_.size(), " pixel bytes do not hold ", labels_.size(), " samples of ",
           shape_str(shape_));
}

void InMemoryDataset::get(int64_t index, uint8_t* pixels, int32_t* label) const {
  check_index(index);
  const size_t n = static_cast<size_t>(shape_numel(shape_));
  std::memcpy(pixels, pixels_.data() + static_cast<size_t>(index) * n, n);
  *label = labels_[static_cast<size_t>(index)];
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, int64_t first_n)
    : base_(std::move(base)), is_prefix_(true) {
  TB_CHECK(base_, "subset of a null data set");
  TB_CHECK(first_n >= 0 && first_n <= base_->size(), base_->name(), ": subset of the first ",
           first_n, " samples, but it has ", base_->size());
  indices_.resize(static_cast<size_t>(first_n));
  for (int64_t i = 0; i < first_n; ++i) indices_[static_cast<size_t>(i)] = i;
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  TB_CHECK(base_, "subset of a null data set");
  for (size_t i = 0; i < indices_.size(); ++i)
    TB_CHECK(indices_[i] >= 0 && indices_[i] < base_->size(), base_->name(), ": subset index ",
             indices_[i], " (entry ", i, ") out of range 0..", base_->size() - 1);
}

std::string SubsetDataset::name() const {
  if (is_prefix_) return detail::concat(base_->name(), "[:", indices_.size(), "]");
  return detail::concat(base_->name(), "[", indices_.size(), " chosen]");
}

void SubsetDataset::get(int64_t index, uint8_t* pixels, int32_t* label) const {
  check_index(index);
  base_->get(indices_[static_cast<size_t>(index)], pixels, label);
}

// ---- open_dataset -----------------------------------------------------------

namespace {

using nlohmann::json;

void check_fields(const json& spec, const std::string& name, const std::set<std::string>& allowed) {
  for (const auto& [key, value] : spec.items()) {
    if (allowed.count(key)) continue;
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    TB_FAIL("dataset spec: unknown field '", key, "' (value ", value.dump(), ") for dataset '",
            name, "' (allowed: ", list, ")");
  }
}

std::string string_field(const json& spec, const char* field, const char* fallback) {
  if (!spec.contains(field)) {
    TB_CHECK(fallback, "dataset spec: missing field '", field, "' for dataset '",
             spec.value("name", std::string()), "'");
    return fallback;
  }
  const json& v = spec[field];
  TB_CHECK(v.is_string(), "dataset spec: field '", field, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

// The spec's "path", else the data set's default folder (none: an error naming the field).
std::string folder_of(const json& spec, const std::string& name) {
  const std::string fallback = default_data_dir(name);
  return string_field(spec, "path", fallback.empty() ? nullptr : fallback.c_str());
}

int64_t int_field(const json& spec, const char* field, int64_t fallback, int64_t min, int64_t max) {
  if (!spec.contains(field)) return fallback;
  const json& v = spec[field];
  TB_CHECK(v.is_number_integer(), "dataset spec: field '", field, "' must be an integer, got ",
           v.dump());
  // Unsigned values above INT64_MAX would wrap; compare them separately.
  TB_CHECK(!(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(max)) &&
               v.get<int64_t>() >= min && v.get<int64_t>() <= max,
           "dataset spec: field '", field, "' = ", v.dump(), " out of range ", min, "..", max);
  return v.get<int64_t>();
}

constexpr int64_t kBig = int64_t(1) << 40;

[[noreturn]] void unknown_dataset(const std::string& name) {
  TB_FAIL("dataset spec: unknown dataset name '", name,
          "' (expected fashion-mnist, mnist, cifar10 or synthetic)");
}

}  // namespace

std::string default_data_dir(const std::string& dataset) {
  return dataset == "fashion-mnist" ? kFashionMnistDefaultDir : "";
}

std::unique_ptr<Dataset> open_dataset(const nlohmann::json& spec, const std::string& split) {
  TB_CHECK(spec.is_object(), "dataset spec must be a JSON object, got ", spec.dump());
  TB_CHECK(split == "train" || split == "test", "dataset: unknown split '", split,
           "' (expected train or test)");
  TB_CHECK(spec.contains("name"), "dataset spec: missing field 'name' in ", spec.dump());
  const std::string name = string_field(spec, "name", nullptr);

  std::unique_ptr<Dataset> ds;
  if (name == "fashion-mnist" || name == "mnist") {
    check_fields(spec, name, {"name", "path", "limit"});
    const std::string dir = folder_of(spec, name);
    ds = name == "fashion-mnist" ? open_fashion_mnist(dir, split) : open_mnist(dir, split);
  } else if (name == "cifar10") {
    check_fields(spec, name, {"name", "path", "limit"});
    ds = open_cifar10(folder_of(spec, name), split);
  } else if (name == "synthetic") {
    check_fields(spec, name,
                 {"name", "shape", "classes", "size", "test_size", "seed", "noise", "limit"});
    SyntheticOptions o;
    if (spec.contains("shape")) {
      const json& s = spec["shape"];
      TB_CHECK(s.is_array() && s.size() == 3 &&
                   std::all_of(s.begin(), s.end(),
                               [](const json& d) {
                                 return d.is_number_integer() && d.get<int64_t>() >= 1 &&
                                        d.get<int64_t>() <= 4096;
                               }),
               "dataset spec: field 'shape' must be [C, H, W] of integers 1..4096, got ", s.dump());
      o.shape = {s[0].get<int64_t>(), s[1].get<int64_t>(), s[2].get<int64_t>()};
    }
    o.classes = static_cast<int>(int_field(spec, "classes", 10, 2, 100000));
    const int64_t train_size = int_field(spec, "size", 1000, 1, kBig);
    o.size = split == "train"
                 ? train_size
                 : int_field(spec, "test_size", std::max<int64_t>(1, train_size / 5), 1, kBig);
    o.seed = static_cast<uint64_t>(int_field(spec, "seed", 0, 0, INT64_MAX));
    if (spec.contains("noise")) {
      const json& v = spec["noise"];
      TB_CHECK(v.is_number() && v.get<double>() >= 0.0 && v.get<double>() <= 1000.0,
               "dataset spec: field 'noise' must be a number 0..1000, got ", v.dump());
      o.noise = v.get<float>();
    }
    ds = std::make_unique<SyntheticDataset>(o, split);
  } else {
    unknown_dataset(name);
  }

  if (spec.contains("limit")) {
    const int64_t limit = int_field(spec, "limit", 0, 1, kBig);
    if (limit < ds->size()) {
      std::shared_ptr<const Dataset> base(std::move(ds));
      ds = std::make_unique<SubsetDataset>(std::move(base), limit);
    }
  }
  return ds;
}

std::vector<std::string> check_dataset_files(const nlohmann::json& spec) {
  try {
    TB_CHECK(spec.is_object() && spec.contains("name"), "dataset spec: missing field 'name' in ",
             spec.dump());
    const std::string name = string_field(spec, "name", nullptr);
    if (name == "fashion-mnist" || name == "mnist") return check_mnist_folder(folder_of(spec, name), name);
    if (name == "cifar10") return check_cifar10_folder(folder_of(spec, name));
    if (name == "synthetic") return {};
    unknown_dataset(name);
  } catch (const Error& e) {
    return {e.what()};
  }
}

}  // namespace tb
