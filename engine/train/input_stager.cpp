// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/input_stager.h"

#include "engine/core/error.h"

namespace tb {

InputStager::InputStager(Backend& backend, InputOptions options)
    : be_(backend), options_(std::move(options)), on_host_(backend.device().is_cpu()) {}

InputStager::~InputStager() {
  try {
    release_all();
  } catch (...) {
    // A failed device: the run is failing already; do not throw from here.
  }
}

void InputStager::give_back(Slot& s) {
  if (!s.held.images.defined()) return;
  be_.wait_upload(s.ticket);  // the copy has read the host buffer
  s.loader->recycle(std::move(s.held));
  s.held = Batch{};
  s.ticket = 0;
}

void InputStager::release_all() {
  for (Slot& s : slots_) give_back(s);
}

void InputStager::stage(Batch&& b, DataLoader& loader, Tensor& images, Tensor& labels) {
  TB_CHECK(b.images.defined() && b.labels.defined(), "input: empty batch");
  last_bytes_ = 0;
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
  const Shape& shape = b.images.shape();
  const DType raw = options_.uint8 ? DType::U8 : DType::F32;
  TB_CHECK(b.images.dtype() == raw, "input: expected ", dtype_name(raw), " images, got ",
           b.images.describe());
  if (!s.images_raw.defined() || s.images_raw.shape() != shape) {
    // A new batch shape (the last, smaller batch of an evaluation): stream order
    // keeps the old buffers alive for work already queued on them.
    s.images_raw = be_.empty(shape, raw);
    s.images = options_.uint8 ? be_.empty(shape, DType::F32) : s.images_raw;
    s.images_act = options_.layout == Layout::NCHW
                       ? s.images
                       : be_.empty(shape, DType::F32, options_.layout);
    s.labels = be_.empty(b.labels.shape(), DType::I32);
  }
  if (options_.non_blocking) {
    be_.upload_async(b.images, s.images_raw, s.fence);
    s.ticket = be_.upload_async(b.labels, s.labels, s.fence);
    s.held = std::move(b);  // back to the loader once the copy has run
    s.loader = &loader;
  } else {
    be_.copy(b.images, s.images_raw);  // returns when the host buffer is free again
    be_.copy(b.labels, s.labels);
    last_bytes_ = int64_t(b.images.nbytes() + b.labels.nbytes());
    loader.recycle(std::move(b));
  }
  if (s.held.images.defined())
    last_bytes_ = int64_t(s.held.images.nbytes() + s.held.labels.nbytes());
  if (options_.uint8) be_.normalize_u8(s.images_raw, options_.scale, options_.shift, s.images);
  if (options_.layout != Layout::NCHW) be_.copy(s.images, s.images_act);  // the one relayout
  images = s.images_act, labels = s.labels;
}

void InputStager::consumed() {
  if (current_ < 0) return;
  if (!on_host_) slots_[current_].fence = be_.fence();
}

}  // namespace tb
