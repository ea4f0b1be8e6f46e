// SPDX-License-Identifier: GPL-3.0-or-later
// CudaBackend: device discovery, construction (stream, cuBLAS/cuBLASLt/cuDNN
// handles, the caching allocator), identity, and the memory ops (fill, copy
// with explicit layout conversion and f32<->f64 casts, sum of squares).
//
// Streams: one non-blocking stream per backend; every op is enqueued there in
// program order, so ops need no events between them. A copy that touches host
// memory synchronises that stream before returning (the caller may read or
// reuse the host buffer at once); overlapping H2D copies with compute
// (pinned staging, a copy stream, events) is later work.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/batchnorm/batchnorm_plan.h"

namespace tb {

// ---------------------------------------------------------------- errors

namespace cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line, size_t bytes) {
  const std::string msg = detail::concat("cuda: ", call, " failed: ", cudaGetErrorName(e), ": ",
                                         cudaGetErrorString(e), " (", file, ":", line, ")");
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // allocation errors are not sticky; clear the last-error slot
    throw OutOfMemory(bytes ? msg + detail::concat(" allocating ", bytes, " bytes") : msg, bytes);
  }
  throw Error(msg);
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  const std::string msg =
      detail::concat("cublas: ", call, " failed: ", cublasGetStatusName(st), ": ",
                     cublasGetStatusString(st), " (", file, ":", line, ")");
  if (st == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(msg, 0);
  throw Error(msg);
}

void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  const std::string msg = detail::concat("cudnn: ", call, " failed: ", cudnnGetErrorString(st),
                                         " (", file, ":", line, ")");
  if (st == CUDNN_STATUS_ALLOC_FAILED) throw OutOfMemory(msg, 0);
  throw Error(msg);
}

void check_on(const CudaBackend& b, const Tensor& t, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == b.device(), op, ": ", what, " ", t.describe(), " is not on ",
           b.device().str());
}

void check_f32(const Tensor& t, const char* op, const char* what) {
  TB_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be f32 on the cuda backend, got ",
           t.describe(), " (f16/bf16 compute arrives with mixed precision)");
}

}  // namespace cuda

// ---------------------------------------------------------------- discovery

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = detail::concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime found no device";
  return n;
}

std::vector<std::pair<std::string, std::string>> cuda_device_names() {
  std::vector<std::pair<std::string, std::string>> out;
  const int n = cuda_device_count(nullptr);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.emplace_back("cuda:" + std::to_string(i), std::string(p.name));
  }
  return out;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(index, options);
}

// ---------------------------------------------------------------- construction

namespace {
void release(CudaBackend::Impl& m) {
  // Best effort: a failing driver must not turn a destructor into a throw.
  // The allocator's stream is per device and read on the calling thread's
  // current device: this backend's, not whichever the thread was left on.
  (void)cudaSetDevice(m.device);
  if (m.stream) (void)cudaStreamSynchronize(m.stream);
  cuda::release_graphs(m);  // first: it may swap the compute stream back
  // New allocations must not be tagged with a destroyed stream. (Blocks cached
  // for this stream stay in the cache until empty_cache.)
  try {
    if (m.allocator && m.allocator->current_stream() == m.stream)
      m.allocator->set_current_stream(nullptr);
  } catch (const std::exception&) {  // the driver failing: nothing to untag
  }
  cuda::release_staging(m);
  cuda::release_peer(m);
  m.opt_consts_dev = Tensor{};
  if (m.cudnn) (void)cudnnDestroy(m.cudnn), m.cudnn = nullptr;
  if (m.cublaslt) (void)cublasLtDestroy(m.cublaslt), m.cublaslt = nullptr;
  if (m.cublas) (void)cublasDestroy(m.cublas), m.cublas = nullptr;
  m.cublas_workspace = Tensor{};
  if (m.stream) (void)cudaStreamDestroy(m.stream), m.stream = nullptr;
}
}  // namespace

CudaBackend::CudaBackend(int index, const BackendOptions& options)
    : index_(index), options_(options), impl_(std::make_unique<Impl>()) {
  std::string why;
  const int n = cuda_device_count(&why);
  TB_CHECK(n > 0, "cuda backend: no usable device (", why, ")");
  TB_CHECK(index >= 0 && index < n, "cuda backend: device cuda:", index, " does not exist (", n,
           " device(s))");
  Impl& m = *impl_;
  m.owner = this;
  m.device = index;
  pass_scratch_ = pass_scratch_setting(std::getenv("TRAINBENCH_CUDA_SCRATCH"));
  try {
    TB_CUDA_CHECK(cudaSetDevice(index));
    TB_CUDA_CHECK(cudaGetDeviceProperties(&m.prop, index));
    TB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    m.allocator = &cuda::CachingAllocator::instance();
    register_allocator(DeviceKind::CUDA, m.allocator);
    m.allocator->set_current_stream(m.stream);
    TB_CUBLAS_CHECK(cublasCreate(&m.cublas));
    TB_CUBLAS_CHECK(cublasSetStream(m.cublas, m.stream));
    // Plain FP32 GEMMs (no TF32) so results compare with the CPU at fp32
    // tolerances; TF32 becomes an option with mixed precision.
    TB_CUBLAS_CHECK(cublasSetMathMode(m.cublas, CUBLAS_DEFAULT_MATH));
    // cuBLAS reductions without atomics: the same result every run.
    TB_CUBLAS_CHECK(cublasSetAtomicsMode(m.cublas, CUBLAS_ATOMICS_NOT_ALLOWED));
    // Our workspace from the start, not cuBLAS's own pool: a capture
    // (graphs.cpp) must not let cuBLAS allocate, and cuBLAS picks kernels by
    // the workspace it has, so eager and captured steps must share one to
    // give the same bits. 32 MiB: cuBLAS's advice for Hopper.
    constexpr int64_t kCublasWorkspace = int64_t(32) << 20;
    m.cublas_workspace = Tensor::empty({kCublasWorkspace}, DType::U8, device());
    TB_CUBLAS_CHECK(
        cublasSetWorkspace(m.cublas, m.cublas_workspace.data(), m.cublas_workspace.nbytes()));
    TB_CUBLAS_CHECK(cublasLtCreate(&m.cublaslt));
    TB_CUDNN_CHECK(cudnnCreate(&m.cudnn));
    TB_CUDNN_CHECK(cudnnSetStream(m.cudnn, m.stream));
  } catch (...) {
    release(m);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  release_kernels();  // they hold streams' and handles' users; before impl_ goes
  if (impl_) release(*impl_);
}

std::string CudaBackend::name() const {
  const auto& p = impl_->prop;
  return detail::concat("cuda:", index_, " (", p.name, ", sm_", p.major, p.minor, ")");
}

namespace {
// What the batch-norm kernels' threads load ahead (batchnorm_plan.h), so runs
// made to compare TRAINBENCH_CUDA_BN_UNROLL values say which they had.
std::string batchnorm_unroll() {
  const int forced = batchnorm::unroll_from_environment();
  return forced ? detail::concat("forced ", forced, " (TRAINBENCH_CUDA_BN_UNROLL)")
                : detail::concat("by unroll_for: ", batchnorm::kBytesInFlight,
                                 " bytes of loads in flight a thread");
}
}  // namespace

nlohmann::json CudaBackend::describe() const {
  const Impl& m = *impl_;
  int driver = 0, runtime = 0, cublas_v = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cublasGetVersion(m.cublas, &cublas_v);
  auto ver = [](int v) {  // 12040 -> "12.4"
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  };
  const size_t cudnn_v = cudnnGetVersion();  // 91900 -> 9.19.0
  const auto st = m.allocator->stats();
  char pci_bus_id[32] = {};  // "0000:41:00.0": NVML finds the device by it
  if (cudaDeviceGetPCIBusId(pci_bus_id, int(sizeof pci_bus_id), m.device) != cudaSuccess) {
    (void)cudaGetLastError();
    pci_bus_id[0] = 0;
  }
  nlohmann::json d{
      {"backend", "cuda"},
      {"device", device().str()},
      {"device_name", m.prop.name},
      {"pci_bus_id", std::string(pci_bus_id)},
      {"compute_capability", std::to_string(m.prop.major) + "." + std::to_string(m.prop.minor)},
      {"multiprocessors", m.prop.multiProcessorCount},
      {"memory_bytes", m.prop.totalGlobalMem},
      {"l2_bytes", m.prop.l2CacheSize},
      {"driver", ver(driver)},
      {"runtime", ver(runtime)},
      {"cudnn", detail::concat(cudnn_v / 10000, ".", (cudnn_v % 10000) / 100, ".", cudnn_v % 100)},
      {"cublas",
       detail::concat(cublas_v / 10000, ".", (cublas_v % 10000) / 100, ".", cublas_v % 100)},
      {"cublaslt", size_t(cublasLtGetVersion())},
      {"deterministic", options_.deterministic},
      {"cudnn_benchmark", options_.cudnn_benchmark},
      {"batchnorm_unroll", batchnorm_unroll()},
      // Where ops' workspaces came from in a model's pass (Backend::scratch).
      {"scratch", pass_scratch_ ? "the pass's memory plan"
                                : "the caching allocator (TRAINBENCH_CUDA_SCRATCH=allocator)"},
      {"allocator",
       {{"allocated_bytes", st.allocated_bytes},
        {"reserved_bytes", st.reserved_bytes},
        {"peak_allocated_bytes", st.peak_allocated_bytes},
        {"cuda_malloc_count", st.cuda_malloc_count}}}};
  if (nlohmann::json paths = kernel_paths(); !paths.empty()) d["kernel_paths"] = std::move(paths);
#ifdef TRAINBENCH_EMULATED_BACKEND
  // A test build (TRAINBENCH_CUDA=EMULATED): the versions above are its
  // stand-ins', and a run stored from it must never read as a GPU's.
  d["emulated"] = "a host emulation of CUDA (tests/cuda_emulator): not a GPU result";
#endif
  return d;
}

void CudaBackend::synchronize() {
  impl_->activate();
  TB_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

// ---------------------------------------------------------------- fill / copy

void CudaBackend::fill(Tensor& t, double value) {
  const char* op = "fill";
  cuda::check_on(*this, t, op, "tensor");
  impl_->activate();
  uint64_t bits = 0;
  switch (t.dtype()) {
    case DType::F32: {
      const float v = float(value);
      std::memcpy(&bits, &v, 4);
      break;
    }
    case DType::F64:
      std::memcpy(&bits, &value, 8);
      break;
    case DType::I32: {
      const int32_t v = int32_t(value);
      std::memcpy(&bits, &v, 4);
      break;
    }
    case DType::U8:
      bits = uint8_t(value);
      break;
    case DType::F16:
      bits = cuda::half_bits(float(value));
      break;
    case DType::BF16:
      bits = cuda::bfloat16_bits(float(value));
      break;
  }
  cuda::launch_fill(t.data(), t.numel(), int(dtype_size(t.dtype())), bits, impl_->stream);
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  const char* op = "copy";
  TB_CHECK(src.defined() && dst.defined(), op, ": undefined tensor");
  TB_CHECK(src.shape() == dst.shape(), op, ": shape mismatch ", src.describe(), " -> ",
           dst.describe());
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    TB_CHECK(t->device().is_cpu() || t->device() == device(), op, ": ", t->describe(),
             " is neither on the host nor on ", device().str());
  Impl& m = *impl_;
  m.activate();
  const bool relayout = src.rank() == 4 && src.layout() != dst.layout();
  const bool cast = src.dtype() != dst.dtype();
  TB_CHECK(!(relayout && cast), op, ": dtype and layout change at once (", src.describe(), " -> ",
           dst.describe(), ")");
  const bool host_involved = src.device().is_cpu() || dst.device().is_cpu();
  if (src.numel() == 0) return;

  if (!relayout && !cast) {
    if (src.device().is_cpu() && dst.device().is_cpu()) {
      std::memmove(dst.data(), src.data(), src.nbytes());
      return;
    }
    if (src.data() != dst.data())
      TB_CUDA_CHECK(
          cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, m.stream));
    if (host_involved) TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    return;
  }

  // Conversions run on the device: stage host operands through device buffers.
  TB_CHECK(!cast || (src.dtype() == DType::F32 && dst.dtype() == DType::F64) ||
               (src.dtype() == DType::F64 && dst.dtype() == DType::F32),
           op, ": cannot convert ", src.describe(), " to ", dst.describe());
  Tensor s = src;
  if (src.device().is_cpu()) {
    s = Tensor::empty(src.shape(), src.dtype(), device(), src.layout());
    TB_CUDA_CHECK(
        cudaMemcpyAsync(s.data(), src.data(), src.nbytes(), cudaMemcpyHostToDevice, m.stream));
  }
  Tensor d =
      dst.device().is_cpu() ? Tensor::empty(dst.shape(), dst.dtype(), device(), dst.layout()) : dst;
  if (relayout) {
    TB_CHECK(s.data() != d.data(), op, ": a layout conversion cannot run in place");
    cuda::launch_convert_layout(s.data(), d.data(), src.n(), src.c(), src.h(), src.w(),
                                int(dtype_size(src.dtype())), dst.layout() == Layout::NHWC,
                                m.stream);
  } else if (src.dtype() == DType::F32) {
    cuda::launch_cast_f32_f64(s.data_as<float>(), d.data_as<double>(), src.numel(), m.stream);
  } else {
    cuda::launch_cast_f64_f32(s.data_as<double>(), d.data_as<float>(), src.numel(), m.stream);
  }
  if (dst.device().is_cpu())
    TB_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), d.data(), dst.nbytes(), cudaMemcpyDeviceToHost, m.stream));
  if (host_involved) TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

}  // namespace tb
