// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace tb {

// A labelled image-classification data set. Samples are uint8 images of
// shape {C, H, W} stored CHW, labels are in [0, num_classes()).
// get() must be safe to call from many loader threads at once: readers load
// everything in open and never mutate afterwards.
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::string name() const = 0;  // "fashion-mnist/train", used in logs and errors
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // {C, H, W}
  virtual int num_classes() const = 0;
  // pixels: C*H*W bytes, CHW order. Throws tb::Error for an index out of range.
  virtual void get(int64_t index, uint8_t* pixels, int32_t* label) const = 0;

  int64_t sample_numel() const { return shape_numel(sample_shape()); }

 protected:
  void check_index(int64_t index) const;
};

// Base of the file readers: the whole split decoded into two flat arrays.
class InMemoryDataset : public Dataset {
 public:
  // pixels: size * C*H*W bytes; labels: size entries, already range-checked.
  InMemoryDataset(std::string name, Shape sample_shape, int num_classes,
                  std::vector<uint8_t> pixels, std::vector<int32_t> labels);

  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  void get(int64_t index, uint8_t* pixels, int32_t* label) const override;

  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  std::string name_;
  Shape shape_;
  int num_classes_;
  std::vector<uint8_t> pixels_;
  std::vector<int32_t> labels_;
};

// A view of some samples of another data set: its first n, or a list of
// indices (which may repeat). Keeps the base alive.
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, int64_t first_n);
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

  std::string name() const override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  void get(int64_t index, uint8_t* pixels, int32_t* label) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  bool is_prefix_ = false;  // only for name()
};

// The folder a data set is read from when the configuration names none: the
// installed Debian package's for Fashion-MNIST, none (empty) for the others.
std::string default_data_dir(const std::string& dataset);

// Opens a data set from a run configuration's "dataset" object, e.g.
//   {"name":"fashion-mnist","path":"/usr/share/datasets/fashion-mnist","limit":1000}
//   {"name":"mnist","path":"/data/mnist"}
//   {"name":"cifar10","path":"/data/cifar-10-batches-bin"}
//   {"name":"synthetic","shape":[3,32,32],"classes":10,"size":5000,"test_size":1000,"seed":1}
// split is "train" or "test". "limit" keeps the first min(limit, size) samples.
// Unknown names, unknown fields and bad values throw tb::Error naming them.
std::unique_ptr<Dataset> open_dataset(const nlohmann::json& spec, const std::string& split);

// What a front end checks before it starts a run, cheaply (headers and sizes,
// no decoding): the folder exists, every file of both splits is there, and
// each file's header and length are what the readers expect. Returns one
// message per problem in the readers' own words (empty: none found). Takes
// the spec open_dataset takes; synthetic data has no files to check.
std::vector<std::string> check_dataset_files(const nlohmann::json& spec);

}  // namespace tb
