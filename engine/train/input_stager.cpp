// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/input_stager.h"

#include "engine/core/error.h"
#include "engine/ops/augment/augment.h"

namespace tb {

InputStager::InputStager(Backend& backend, InputOptions options)
    : be_(backend),
      staging_(backend.staging()),
      options_(std::move(options)),
      on_host_(backend.device().is_cpu()) {
  TB_CHECK(on_host_ || staging_, "input: the ", backend.name(),
           " backend has no host-to-device uploads");
  TB_CHECK(!options_.augment || options_.uint8,
           "input: augment (gpu_augment) ships u8 batches: set uint8 too");
}

InputStager::~InputStager() {
  try {
    release_all();
  } catch (...) {
    // A failed device: the run is failing already; do not throw from here.
  }
}

void InputStager::give_back(Slot& s) {
  if (!s.held.images.defined()) return;
  if (s.ticket != 0) staging_->wait_upload(s.ticket);  // the copy has read the host buffer
  s.loader->recycle(std::move(s.held));
  s.held = Batch{};
  s.ticket = 0;
}

void InputStager::release_all() {
  for (Slot& s : slots_) give_back(s);
}

void InputStager::to_float(const Tensor& raw, const Tensor& indices, int64_t epoch,
                           const DataLoader& loader, Tensor& out) {
  if (options_.augment)
    augment::augment_normalize_u8(be_, raw, indices,
                                  augment_spec(loader.transform(), loader.options().seed, epoch),
                                  options_.scale, options_.shift, out);
  else
    augment::normalize_u8(be_, raw, options_.scale, options_.shift, out);
}

void InputStager::stage(Batch&& b, DataLoader& loader, Tensor& images, Tensor& labels) {
  TB_CHECK(b.images.defined() && b.labels.defined(), "input: empty batch");
  last_bytes_ = 0;
  const Shape& shape = b.images.shape();
  Shape out_shape = shape;  // f32 images {N, C, H, W} after to_float
  if (options_.augment) {
    TB_CHECK(b.indices.defined() && b.epoch >= 0,
             "input: gpu_augment takes raw batches with indices (BatchFormat::Uint8Raw), got ",
             b.images.describe(), " without them");
    const Shape o = loader.image_shape();
    out_shape = {shape[0], o[0], o[1], o[2]};
  }
  if (on_host_ && options_.uint8) {
    // u8 batches on a host backend (the trainer sends f32 there; the tests use
    // this to run the device path's ops on the CPU): converted where they are.
    Slot& s = slots_[0];
    give_back(s);
    current_ = 0;
    TB_CHECK(b.images.dtype() == DType::U8, "input: expected u8 images, got ", b.images.describe());
    if (!s.images.defined() || s.images.shape() != out_shape)
      s.images = Tensor::empty(out_shape, DType::F32);
    to_float(b.images, b.indices, b.epoch, loader, s.images);
    s.held = std::move(b);
    s.loader = &loader;
    images = s.images, labels = s.held.labels;
    return;
  }
  if (on_host_) {
    TB_CHECK(b.images.dtype() == DType::F32, "input: the cpu backend takes f32 batches, got ",
             b.images.describe());
    // The host batch is the input; the caller recycles it through this stager too.
    Slot& s = slots_[0];
    give_back(s);
    s.held = std::move(b);
    s.loader = &loader;
    images = s.held.images, labels = s.held.labels;
    current_ = 0;
    return;
  }
  current_ = int(count_++ % 2);
  Slot& s = slots_[current_];
  give_back(s);  // the batch this slot carried two uploads ago
  const DType raw = options_.uint8 ? DType::U8 : DType::F32;
  TB_CHECK(b.images.dtype() == raw, "input: expected ", dtype_name(raw), " images, got ",
           b.images.describe());
  if (!s.images_raw.defined() || s.images_raw.shape() != shape || s.images.shape() != out_shape) {
    // A new batch shape (the last, smaller batch of an evaluation): stream order
    // keeps the old buffers alive for work already queued on them. The new
    // buffers come from the allocator's compute-stream pool, which may hand
    // out a block that queued compute work still reads or writes (its tensor
    // was freed on the host, safe for the compute stream's own order). The
    // copy stream is not in that order: its uploads into these buffers must
    // wait for everything enqueued on the compute stream so far.
    s.images_raw = be_.empty(shape, raw);
    s.images = options_.uint8 ? be_.empty(out_shape, DType::F32) : s.images_raw;
    s.images_act = options_.layout == Layout::NCHW
                       ? s.images
                       : be_.empty(out_shape, DType::F32, options_.layout);
    s.labels = be_.empty(b.labels.shape(), DType::I32);
    s.indices = options_.augment ? be_.empty(b.labels.shape(), DType::I32) : Tensor{};
    if (options_.non_blocking) s.fence = staging_->fence();
  }
  const int64_t epoch = b.epoch;
  const int64_t bytes =
      int64_t(b.images.nbytes() + b.labels.nbytes() + (options_.augment ? b.indices.nbytes() : 0));
  if (options_.non_blocking) {
    staging_->upload_async(b.images, s.images_raw, s.fence);
    if (options_.augment) staging_->upload_async(b.indices, s.indices, s.fence);
    s.ticket = staging_->upload_async(b.labels, s.labels, s.fence);  // the last: waits for all
    s.held = std::move(b);  // back to the loader once the copy has run
    s.loader = &loader;
  } else {
    be_.copy(b.images, s.images_raw);  // returns when the host buffer is free again
    if (options_.augment) be_.copy(b.indices, s.indices);
    be_.copy(b.labels, s.labels);
    loader.recycle(std::move(b));
  }
  last_bytes_ = bytes;
  if (options_.uint8) to_float(s.images_raw, s.indices, epoch, loader, s.images);
  if (options_.layout != Layout::NCHW) be_.copy(s.images, s.images_act);  // the one relayout
  images = s.images_act, labels = s.labels;
}

void InputStager::consumed() {
  if (current_ < 0) return;
  if (!on_host_) slots_[current_].fence = staging_->fence();
}

}  // namespace tb
