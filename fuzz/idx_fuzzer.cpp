// SPDX-License-Identifier: GPL-3.0-or-later
// IDX (MNIST / Fashion-MNIST) images and labels, plain or gzip: any bytes give
// data or a tb::Error, never a crash, a hang or an allocation beyond the input.
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/data/idx_dataset.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tb_fuzz::MemoryFile file(data, size);
  try {
    tb::IdxImages images = tb::read_idx_images(file.path());
    if (images.pixels.size() != static_cast<size_t>(images.count * images.rows * images.cols))
      __builtin_trap();  // the reader's promise: count * rows * cols pixels
  } catch (const tb::Error&) {
  }
  try {
    for (int32_t label : tb::read_idx_labels(file.path(), 10))
      if (label < 0 || label >= 10) __builtin_trap();
  } catch (const tb::Error&) {
  }
  return 0;
}
