// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Puts the loader's host batches on the training device (tricks 4, 5 and 6).
//
//   pin_memory    the loader fills page-locked buffers (Backend::pinned_host_empty)
//   non_blocking  uploads go through Backend::upload_async on a copy stream:
//                 batch k+1 is copied while step k still computes. Two device
//                 slots alternate; a slot is written again only after the
//                 fence of the step that last read it, and a host batch goes
//                 back to the loader only once its copy has finished.
//   uint8         the loader ships transformed bytes, the device normalises
//                 them (augment::normalize_u8), 4x fewer bytes per image
//   NHWC layout   (channels_last) the NCHW batch is converted once on the
//                 device, by an explicit Backend::copy
//   augment       gpu_augment (trick 15): the loader ships the data set's bytes
//                 and each row's index (BatchFormat::Uint8Raw); the device
//                 pads, crops, flips and normalises them in one op
//                 (augment::augment_normalize_u8), with the loader's draws
//
// On a host backend the batch is used where it is (nothing is copied). Off,
// on a device: a blocking copy per tensor, as before.
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/data/loader.h"

namespace tb {

struct InputOptions {
  bool non_blocking = false;
  bool uint8 = false;              // batches arrive as u8 and are normalised here
  bool augment = false;            // ...and untransformed (Uint8Raw; implies uint8)
  std::vector<float> scale, shift;  // normalize_u8's constants (uint8 only)
  Layout layout = Layout::NCHW;     // of the images handed to the model
};

class InputStager {
 public:
  InputStager(Backend& backend, InputOptions options);
  ~InputStager();  // waits for uploads still reading host batches
  InputStager(const InputStager&) = delete;
  InputStager& operator=(const InputStager&) = delete;

  // Takes batch `b` from `loader` and returns its images (f32, options.layout) and labels
  // (i32) on the backend's device. The batch goes back to the loader (recycle)
  // once nothing reads its host memory any more.
  void stage(Batch&& b, DataLoader& loader, Tensor& images, Tensor& labels);
  // Call after enqueuing the last work that reads the tensors stage() returned
  // (the micro-batch's backward, or an evaluation batch's loss).
  void consumed();
  // Bytes the last stage() copied to the device (0 on a host backend).
  int64_t last_bytes() const { return last_bytes_; }
  // Hands every held batch back to its loader (waits for their uploads).
  void release_all();

 private:
  struct Slot {
    Tensor indices;     // augment: the device copy of Batch::indices
    Tensor images_raw;  // the device copy of the host images (u8 or f32)
    Tensor images;      // f32 NCHW images (images_raw itself unless uint8)
    Tensor images_act;  // in the model's layout (images itself for NCHW)
    Tensor labels;
    uint64_t fence = 0;   // the last step that read this slot
    uint64_t ticket = 0;  // the upload into this slot
    Batch held;           // host batch of that upload, until it is done
    DataLoader* loader = nullptr;
  };
  void give_back(Slot& s);
  // u8 images (and, with augment, indices) -> f32 images on the backend.
  void to_float(const Tensor& raw, const Tensor& indices, int64_t epoch, const DataLoader& loader,
                Tensor& out);

  Backend& be_;
  Staging* staging_;  // be_.staging(): device backends only
  InputOptions options_;
  bool on_host_;
  Slot slots_[2];
  int current_ = -1;
  int64_t count_ = 0;
  int64_t last_bytes_ = 0;
};

}  // namespace tb
