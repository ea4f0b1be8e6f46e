// SPDX-License-Identifier: GPL-3.0-or-later
// CIFAR-10 binary batch files: any bytes give records or a tb::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/cifar10_dataset.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tb_fuzz::MemoryFile file(data, size);
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  try {
    tb::read_cifar10_batch(file.path(), pixels, labels);
    if (pixels.size() != labels.size() * 3 * 32 * 32) __builtin_trap();
    for (int32_t label : labels)
      if (label < 0 || label >= 10) __builtin_trap();
  } catch (const tb::Error&) {
  }
  return 0;
}
