// SPDX-License-Identifier: GPL-3.0-or-later
// CpuBackend: construction, identity, and the memory ops (fill, copy with
// explicit layout conversion, sum of squares).
#include "engine/backend/cpu/cpu_backend.h"

#include <cblas.h>
#ifdef TRAINBENCH_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "engine/core/cpu_features.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/error.h"

namespace tb {

CpuBackend::CpuBackend(const BackendOptions& options) : options_(options) {
  if (options.threads > 0) {
    threads_ = options.threads;
    threads_source_ = "cpu_threads setting";
  } else {
    const CpuThreadCount c = default_cpu_threads(options.local_ranks);
    threads_ = c.threads;
    threads_source_ = c.source;
  }
  cpu_isa();  // decided here: a TRAINBENCH_CPU_ISA this processor cannot run fails now
#ifdef _OPENMP
  // The fast kernels split their work across threads_ OpenMP threads and call
  // single-threaded GEMMs: OpenBLAS's own pool, next to ours, would spin-wait
  // (sched_yield) on the same cores between the many small GEMMs.
  openblas_set_num_threads(1);
#else
  openblas_set_num_threads(threads_);
#endif
}

std::string CpuBackend::host_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "CPU";
}

std::string CpuBackend::name() const {
  if (options_.reference) return "cpu (reference kernels)";
  return "cpu (OpenBLAS " + std::string(OPENBLAS_VERSION).substr(9) + ", " +
         std::to_string(threads_) + " threads)";
}

bool cpu_has_onednn() {
#ifdef TRAINBENCH_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

namespace {
#ifdef TRAINBENCH_HAVE_ONEDNN
// Whether oneDNN's effective ISA here includes `isa` (its values are bit sets).
bool onednn_isa_has(dnnl_cpu_isa_t isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & want) == want;
}
#endif
}  // namespace

bool onednn_blocks_of_16() {
#ifdef TRAINBENCH_HAVE_ONEDNN
  return onednn_isa_has(dnnl_cpu_isa_avx512_core);
#else
  return false;
#endif
}

bool cpu_has_bf16_kernels() {
#ifdef TRAINBENCH_HAVE_ONEDNN
  return onednn_isa_has(dnnl_cpu_isa_avx512_core_bf16);
#else
  return false;
#endif
}

nlohmann::json CpuBackend::describe() const {
  nlohmann::json d = {{"backend", "cpu"},
                      {"device", "cpu"},
                      {"device_name", host_name()},
                      {"threads", threads_},
                      {"threads_source", threads_source_},
                      {"kernels", options_.reference ? "reference" : "fast"},
                      // The copy of the fast loops that runs (engine/core/cpu_features.h).
                      {"cpu_isa", cpu_isa_name(cpu_isa())},
                      {"cpu_isa_source", cpu_isa_source()},
                      {"openblas", openblas_get_config()}};
#ifdef TRAINBENCH_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  d["onednn"] = detail::concat(v->major, ".", v->minor, ".", v->patch, " (", v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other threading", ")");
#endif
  if (nlohmann::json paths = kernel_paths(); !paths.empty()) d["kernel_paths"] = std::move(paths);
  return d;
}

namespace {

template <typename T>
void fill_typed(Tensor& t, double value) {
  std::fill_n(t.data_as<T>(), t.numel(), static_cast<T>(value));
}

// nChw16c <-> NCHW of one element type: run (n, b) of the blocked tensor is
// HW vectors of channels 16b .. 16b+15, each a plane HW apart in NCHW.
// Runs split over `threads` (a model's Flatten converts every step).
template <typename T>
void convert_blocked(const Tensor& src, Tensor& dst, [[maybe_unused]] int threads) {
  const int64_t N = src.n(), B = src.c() / kLayoutBlock, HW = src.h() * src.w();
  const bool to_blocked = dst.layout() == Layout::NCHW16C;
  const T* s = src.data_as<T>();
  T* d = dst.data_as<T>();
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (src.numel() >= (1 << 16))
#endif
  for (int64_t r = 0; r < N * B; ++r) {
    const int64_t run = r * HW * kLayoutBlock;  // the run's first element, in both layouts
    for (int64_t l = 0; l < kLayoutBlock; ++l)
      for (int64_t i = 0; i < HW; ++i) {
        if (to_blocked)
          d[run + i * kLayoutBlock + l] = s[run + l * HW + i];
        else
          d[run + l * HW + i] = s[run + i * kLayoutBlock + l];
      }
  }
}

// dst (layout L_dst) <- src (layout L_src), same logical (N,C,H,W), element size es.
void convert_layout(const Tensor& src, Tensor& dst, int threads) {
  const int64_t N = src.n(), C = src.c(), H = src.h(), W = src.w();
  const size_t es = dtype_size(src.dtype());
  const bool nchw_blocked = (src.layout() == Layout::NCHW && dst.layout() == Layout::NCHW16C) ||
                            (src.layout() == Layout::NCHW16C && dst.layout() == Layout::NCHW);
  if (nchw_blocked && es == 4) return convert_blocked<uint32_t>(src, dst, threads);
  if (nchw_blocked && es == 8) return convert_blocked<uint64_t>(src, dst, threads);
  const char* s = static_cast<const char*>(src.data());
  char* d = static_cast<char*>(dst.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          std::memcpy(d + offset4(dst.layout(), C, H, W, n, c, h, w) * es,
                      s + offset4(src.layout(), C, H, W, n, c, h, w) * es, es);
}

}  // namespace

void CpuBackend::fill(Tensor& t, double value) {
  TB_CHECK(t.device().is_cpu(), "cpu fill on ", t.describe());
  switch (t.dtype()) {
    case DType::F32: fill_typed<float>(t, value); break;
    case DType::F64: fill_typed<double>(t, value); break;
    case DType::I32: fill_typed<int32_t>(t, value); break;
    case DType::U8: fill_typed<uint8_t>(t, value); break;
    default:
      TB_CHECK(value == 0.0, "cpu fill of ", t.describe(), " supports only zero");
      std::memset(t.data(), 0, t.nbytes());
  }
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  TB_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "cpu copy between ", src.describe(),
           " and ", dst.describe());
  TB_CHECK(src.shape() == dst.shape(), "copy: shape mismatch ", src.describe(), " -> ",
           dst.describe());
  if (src.dtype() == dst.dtype()) {
    if (src.rank() == 4 && src.layout() != dst.layout()) {
      convert_layout(src, dst, threads_);
    } else if (src.data() != dst.data()) {
      std::memmove(dst.data(), src.data(), src.nbytes());
    }
    return;
  }
  // f32 <-> f64 (gradient checks move weights between precisions).
  TB_CHECK(src.layout() == dst.layout() || src.rank() != 4, "copy: dtype and layout change at once");
  const int64_t n = src.numel();
  if (src.dtype() == DType::F32 && dst.dtype() == DType::F64) {
    std::copy_n(src.data_as<float>(), n, dst.data_as<double>());
  } else if (src.dtype() == DType::F64 && dst.dtype() == DType::F32) {
    std::transform(src.data_as<double>(), src.data_as<double>() + n, dst.data_as<float>(),
                   [](double v) { return float(v); });
  } else {
    TB_FAIL("copy: cannot convert ", src.describe(), " to ", dst.describe());
  }
}

}  // namespace tb
