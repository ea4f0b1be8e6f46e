// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tb {

// Storage types. f64 exists for the CPU reference's finite-difference checks;
// f16/bf16 are storage for mixed precision on the GPU; u8 for raw images;
// i32 for labels and indices.
enum class DType { F32, F64, F16, BF16, U8, I32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::I32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws tb::Error

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }

}  // namespace tb
