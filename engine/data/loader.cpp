// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/loader.h"

#include <chrono>
#include <cstring>
#include <numeric>

#include "engine/core/error.h"
#include "engine/data/sample_rng.h"

namespace tb {

namespace {
constexpr uint64_t kShuffleStream = 0x73687566666c65ull;  // "shuffle"

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t count_batches(int64_t n, const LoaderOptions& o) {
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}
}  // namespace

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    : dataset_(dataset),
      options_(std::move(options)),
      transform_(dataset.sample_shape(), options_.transform),
      num_batches_(0) {
  const LoaderOptions& o = options_;
  TB_CHECK(o.batch_size >= 1, "loader: batch_size must be positive, got ", o.batch_size);
  TB_CHECK(o.workers >= 0 && o.workers <= 256, "loader: workers must be 0..256, got ", o.workers);
  TB_CHECK(o.prefetch >= 1, "loader: prefetch must be at least 1, got ", o.prefetch);
  num_batches_ = shard_batches(count_batches(dataset_.size(), o), o.shard, o.drop_last);
  TB_CHECK(o.format != BatchFormat::Uint8Raw || dataset_.size() <= int64_t(0x7fffffff),
           "loader: ", dataset_.name(), " has ", dataset_.size(),
           " samples: too many for the i32 indices of raw batches");
  const TransformOptions& t = o.transform;
  identity_transform_ = t.pad_to_h == 0 && !t.random_crop && !t.random_hflip;
  caller_scratch_.raw.resize(static_cast<size_t>(dataset_.sample_numel()));
  caller_scratch_.transformed.resize(static_cast<size_t>(shape_numel(image_shape())));
  for (int i = 0; i < o.workers; ++i) threads_.emplace_back([this] { worker_main(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    abort_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void DataLoader::drop_ready_locked() {
  for (auto& [k, slot] : ready_)
    if (slot.batch.images.defined()) recycle(std::move(slot.batch));
  ready_.clear();
}

void DataLoader::start_epoch(int64_t epoch) {
  TB_CHECK(epoch >= 0, "loader: epoch must be >= 0, got ", epoch);
  std::unique_lock lock(mu_);
  // Stop handing out tasks, abandon batches being built, wait for the workers.
  ++generation_;
  epoch_active_ = false;
  abort_ = true;
  ready_cv_.wait(lock, [&] { return in_flight_ == 0; });
  abort_ = false;
  drop_ready_locked();

  const int64_t n = dataset_.size();
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  if (options_.shuffle) {
    // Fisher-Yates with our own generator: the same permutation everywhere.
    SampleRng rng(options_.seed, static_cast<uint64_t>(epoch), 0, kShuffleStream);
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order_[static_cast<size_t>(i)],
                order_[static_cast<size_t>(rng.uniform_int(static_cast<uint64_t>(i + 1)))]);
  }
  epoch_ = epoch;
  next_task_ = next_out_ = 0;
  epoch_wait_ = last_wait_ = 0.0;
  epoch_active_ = true;
  lock.unlock();
  work_cv_.notify_all();
}

Shape DataLoader::batch_image_shape() const {
  return options_.format == BatchFormat::Uint8Raw ? dataset_.sample_shape() : image_shape();
}

Batch DataLoader::acquire_buffers(int64_t rows) {
  {
    std::lock_guard lock(pool_mu_);
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i].images.dim(0) == rows) {
        Batch b = std::move(pool_[i]);
        pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
  }
  const Shape chw = batch_image_shape();
  const Shape ishape{rows, chw[0], chw[1], chw[2]};
  const DType idtype = options_.format == BatchFormat::Float32 ? DType::F32 : DType::U8;
  const bool raw = options_.format == BatchFormat::Uint8Raw;
  Batch b;
  if (options_.allocator) {
    b.images = options_.allocator(ishape, idtype);
    b.labels = options_.allocator(Shape{rows}, DType::I32);
    if (raw) {
      b.indices = options_.allocator(Shape{rows}, DType::I32);
      expect_shape(b.indices, Shape{rows}, "loader: batch allocator (indices)");
      expect_dtype(b.indices, DType::I32, "loader: batch allocator (indices)");
    }
    expect_shape(b.images, ishape, "loader: batch allocator (images)");
    expect_dtype(b.images, idtype, "loader: batch allocator (images)");
    expect_shape(b.labels, Shape{rows}, "loader: batch allocator (labels)");
    expect_dtype(b.labels, DType::I32, "loader: batch allocator (labels)");
  } else {
    b.images = Tensor::empty(ishape, idtype);
    b.labels = Tensor::empty(Shape{rows}, DType::I32);
    if (raw) b.indices = Tensor::empty(Shape{rows}, DType::I32);
  }
  return b;
}

void DataLoader::recycle(Batch&& batch) {
  if (!batch.images.defined() || !batch.labels.defined()) return;
  // Only buffers this loader would have made; a small cap bounds the pool.
  const Shape chw = batch_image_shape();
  const DType idtype = options_.format == BatchFormat::Float32 ? DType::F32 : DType::U8;
  const Shape& s = batch.images.shape();
  if (s.size() != 4 || s[1] != chw[0] || s[2] != chw[1] || s[3] != chw[2] ||
      batch.images.dtype() != idtype || batch.labels.dtype() != DType::I32 ||
      batch.labels.shape() != Shape{s[0]})
    return;
  if (options_.format == BatchFormat::Uint8Raw &&
      (!batch.indices.defined() || batch.indices.dtype() != DType::I32 ||
       batch.indices.shape() != Shape{s[0]}))
    return;
  std::lock_guard lock(pool_mu_);
  if (pool_.size() < static_cast<size_t>(options_.prefetch + options_.workers + 2)) {
    batch.index = batch.epoch = -1;
    pool_.push_back(std::move(batch));
  }
  batch = Batch{};
}

// Fills `out` with batch k of `epoch`. Returns false if abandoned (restart or
// shutdown); throws on bad data.
bool DataLoader::build_batch(int64_t k, int64_t epoch, Scratch& scratch, Batch& out) {
  const int64_t B = options_.batch_size;
  const int64_t begin = shard_global_batch(k, options_.shard) * B;
  const int64_t rows = std::min(B, dataset_.size() - begin);
  Batch b = acquire_buffers(rows);
  const bool raw = options_.format == BatchFormat::Uint8Raw;
  const int64_t out_numel = shape_numel(batch_image_shape());
  const int classes = dataset_.num_classes();
  int32_t* labels = b.labels.data_as<int32_t>();
  int32_t* indices = raw ? b.indices.data_as<int32_t>() : nullptr;
  for (int64_t i = 0; i < rows; ++i) {
    if (abort_.load(std::memory_order_relaxed)) {
      recycle(std::move(b));
      return false;
    }
    const int64_t idx = order_[static_cast<size_t>(begin + i)];
    uint8_t* u8_dst = options_.format != BatchFormat::Float32
                          ? b.images.data_as<uint8_t>() + i * out_numel
                          : scratch.transformed.data();
    int32_t label = -1;
    if (raw) {
      // As the data set gives it; the device transforms it (gpu_augment).
      dataset_.get(idx, u8_dst, &label);
      indices[i] = static_cast<int32_t>(idx);
    } else if (identity_transform_) {
      dataset_.get(idx, u8_dst, &label);
    } else {
      dataset_.get(idx, scratch.raw.data(), &label);
      transform_.apply(scratch.raw.data(), u8_dst, options_.seed, epoch, idx);
    }
    TB_CHECK(label >= 0 && label < classes, dataset_.name(), ": sample ", idx, " has label ", label,
             ", outside 0..", classes - 1);
    if (options_.format == BatchFormat::Float32)
      transform_.normalize(u8_dst, b.images.data_as<float>() + i * out_numel);
    labels[i] = label;
  }
  b.index = k;
  b.epoch = epoch;
  out = std::move(b);
  return true;
}

void DataLoader::worker_main() {
  Scratch scratch;
  scratch.raw.resize(static_cast<size_t>(dataset_.sample_numel()));
  scratch.transformed.resize(static_cast<size_t>(shape_numel(image_shape())));
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] {
      return stop_ || (epoch_active_ && next_task_ < num_batches_ &&
                       next_task_ < next_out_ + options_.prefetch);
    });
    if (stop_) return;
    const int64_t k = next_task_++;
    const uint64_t gen = generation_;
    const int64_t epoch = epoch_;
    ++in_flight_;
    lock.unlock();

    Slot slot;
    bool built = false;
    try {
      built = build_batch(k, epoch, scratch, slot.batch);
    } catch (...) {
      slot.error = std::current_exception();
      built = true;
    }

    lock.lock();
    --in_flight_;
    if (built && gen == generation_)
      ready_.emplace(k, std::move(slot));
    else if (slot.batch.images.defined())
      recycle(std::move(slot.batch));
    ready_cv_.notify_all();
  }
}

bool DataLoader::next(Batch& out, double* wait_seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  bool got = false;
  if (options_.workers == 0) {
    TB_CHECK(epoch_ >= 0, "loader: next() called before start_epoch()");
    if (next_out_ < num_batches_) {
      const int64_t k = next_out_++;
      try {
        got = build_batch(k, epoch_, caller_scratch_, out);
      } catch (...) {
        next_out_ = num_batches_;  // abandon the epoch, as with workers
        throw;
      }
    }
  } else {
    std::unique_lock lock(mu_);
    TB_CHECK(epoch_ >= 0, "loader: next() called before start_epoch()");
    if (next_out_ < num_batches_ && epoch_active_) {
      ready_cv_.wait(lock, [&] { return ready_.count(next_out_) > 0; });
      auto it = ready_.find(next_out_);
      Slot slot = std::move(it->second);
      ready_.erase(it);
      ++next_out_;
      if (slot.error) {
        // Abandon the rest of the epoch; start_epoch() starts afresh.
        ++generation_;
        epoch_active_ = false;
        abort_ = true;
        next_out_ = num_batches_;
        drop_ready_locked();
        lock.unlock();
        std::rethrow_exception(slot.error);
      }
      out = std::move(slot.batch);
      got = true;
      lock.unlock();
      work_cv_.notify_all();  // a prefetch slot is free
    }
  }
  last_wait_ = seconds_since(t0);
  epoch_wait_ += last_wait_;
  if (wait_seconds) *wait_seconds = last_wait_;
  return got;
}

}  // namespace tb
