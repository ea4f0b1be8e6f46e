// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/dataset.h"
#include "engine/data/transforms.h"
#include "engine/parallel/distributed_sampler.h"

namespace tb {

// What the loader hands to the trainer: images {B, C, H, W} (NCHW, f32
// normalised or raw u8) and labels {B} (i32), both in host memory. index is
// the batch's position in the epoch (0, 1, 2, ...). With BatchFormat::Uint8Raw
// the images are the data set's bytes (not transformed) and indices {B} (i32)
// holds each row's data set index: with epoch and the loader's seed, what the
// device needs to redo the transform (gpu_augment).
struct Batch {
  Tensor images;
  Tensor labels;
  int64_t index = -1;
  Tensor indices;      // Uint8Raw only
  int64_t epoch = -1;  // the epoch the batch belongs to
};

enum class BatchFormat {
  Float32,   // transformed and normalised on the CPU
  Uint8,     // transformed bytes; the device normalises (4x less to copy)
  Uint8Raw,  // the data set's bytes + Batch::indices; the device transforms (gpu_augment)
};

// Allocates one host buffer of a batch (called for images and for labels).
// The default is Tensor::empty on the CPU; the CUDA backend passes one that
// returns page-locked memory so host-to-device copies can be asynchronous.
// It may be called from worker threads at the same time.
using BatchAllocator = std::function<Tensor(const Shape& shape, DType dtype)>;

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // permutation drawn from (seed, epoch)
  bool drop_last = false;  // drop a final batch smaller than batch_size
  uint64_t seed = 0;       // shuffle and augmentation
  int workers = 0;         // 0: load on the calling thread inside next()
  int prefetch = 4;        // at most this many batches built or waiting at once (workers > 0)
  TransformOptions transform;
  BatchFormat format = BatchFormat::Float32;
  BatchAllocator allocator;  // empty: Tensor::empty on the CPU
  // Data parallel: this rank's share of every epoch (distributed_sampler.h).
  // With drop_last every rank gets the same number of batches.
  Shard shard;
};

// Turns a Dataset into a stream of batches, epoch by epoch:
//
//   DataLoader loader(ds, opts);
//   for (int64_t epoch = 0; ...; ++epoch) {
//     loader.start_epoch(epoch);
//     Batch b;
//     while (loader.next(b)) { ...; loader.recycle(std::move(b)); }
//   }
//
// The sample order, the augmentation and therefore every batch's bytes are
// functions of (seed, epoch) only: the same for any worker count, and batch k
// always arrives k-th. An exception thrown while building a batch (bad data)
// is rethrown by the next() that would have returned that batch; the rest of
// that epoch is then abandoned (next() returns false until start_epoch).
// Destroying the loader mid-epoch stops and joins the workers.
// The Dataset must outlive the loader. One consumer thread only.
class DataLoader {
 public:
  DataLoader(const Dataset& dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or restarts) an epoch; batches of an unfinished one are dropped.
  void start_epoch(int64_t epoch);
  // The next batch of the epoch, or false at its end. wait_seconds (if not
  // null) receives how long this call blocked waiting for data; with
  // workers = 0 that is the whole time spent loading the batch.
  bool next(Batch& out, double* wait_seconds = nullptr);
  // Gives a batch's buffers back for reuse, so steady state allocates
  // nothing. Optional; only call it once nothing reads the batch any more.
  void recycle(Batch&& batch);

  int64_t num_batches() const { return num_batches_; }             // per epoch
  Shape image_shape() const { return transform_.output_shape(); }  // {C, H, W} after transforms
  // {C, H, W} of one row of Batch::images: image_shape(), or the data set's
  // sample shape with Uint8Raw.
  Shape batch_image_shape() const;
  const SampleTransform& transform() const { return transform_; }
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return dataset_; }
  // The current epoch's sample order (dataset indices).
  const std::vector<int64_t>& order() const { return order_; }
  double last_wait_seconds() const { return last_wait_; }
  double epoch_wait_seconds() const { return epoch_wait_; }  // sum over this epoch's next() calls

 private:
  struct Scratch {
    std::vector<uint8_t> raw, transformed;
  };
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  bool build_batch(int64_t k, int64_t epoch, Scratch& scratch, Batch& out);
  Batch acquire_buffers(int64_t rows);
  void worker_main();
  void drop_ready_locked();

  const Dataset& dataset_;
  LoaderOptions options_;
  SampleTransform transform_;
  bool identity_transform_;
  int64_t num_batches_;
  Scratch caller_scratch_;  // workers = 0

  // Epoch state, guarded by mu_. order_ is written only while no batch is in
  // flight, so workers read it without the lock.
  std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for tasks
  std::condition_variable ready_cv_;  // the consumer waits for batches / idle workers
  std::vector<int64_t> order_;
  int64_t epoch_ = -1;
  uint64_t generation_ = 0;  // bumped on every restart; stale results are discarded
  bool epoch_active_ = false;
  int64_t next_task_ = 0;  // next batch a worker will build
  int64_t next_out_ = 0;   // next batch next() will return
  int in_flight_ = 0;
  bool stop_ = false;
  std::atomic<bool> abort_{false};  // asks workers to abandon the batch they build
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> threads_;

  std::mutex pool_mu_;
  std::vector<Batch> pool_;

  double last_wait_ = 0.0, epoch_wait_ = 0.0;
};

}  // namespace tb
