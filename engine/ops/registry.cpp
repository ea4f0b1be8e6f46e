// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/ops/registry.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

struct Entry {
  std::string family_name;
  OpKernelsFactory make = nullptr;
};

using Table = std::map<std::pair<std::type_index, DeviceKind>, Entry>;

Table& table() {
  static Table t;
  return t;
}

const char* kind_name(DeviceKind kind) { return kind == DeviceKind::CUDA ? "cuda" : "cpu"; }

}  // namespace

void register_op_kernels(std::type_index family, const char* family_name, DeviceKind kind,
                         OpKernelsFactory make) {
  const auto [it, added] = table().try_emplace({family, kind}, Entry{family_name, make});
  TB_CHECK(added, "op family '", family_name, "' registered twice for the ", kind_name(kind),
           " backend");
}

OpKernelsFactory find_op_kernels(std::type_index family, DeviceKind kind) {
  static std::once_flag once;
  std::call_once(once, register_op_families);
  const auto it = table().find({family, kind});
  return it == table().end() ? nullptr : it->second.make;
}

void require_dtype(bool supported, const Backend& be, const char* family, DType t,
                   const char* op) {
  TB_CHECK(supported, op, ": ", dtype_name(t), " ", family, " is not supported by the ", be.name(),
           " backend");
}

}  // namespace tb
