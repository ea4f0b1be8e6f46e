// SPDX-License-Identifier: GPL-3.0-or-later
// A test double of cuBLAS and cuBLASLt for the CUDA emulator
// (include/cublas_api.h, include/cublasLt.h): the calls the engine's CUDA
// backend makes, with cuBLAS's argument checks and statuses, computed by
// plain host loops. Its results are never GPU results: the inputs are
// widened exactly to double, the products summed in double in k order, and
// alpha, beta, the bias and ReLU applied in double before one rounding to
// C's (D's) type. A GPU sums in f32 and may differ in the last bits.
//
// Each GEMM is work on its stream (tb_emu::enqueue): it runs at once, or is
// recorded while the stream is being captured and runs at each replay, with
// the values of host alpha and beta as they were at the call.
//
// Beyond cuBLAS's own checks it refuses, with one line on stderr naming the
// call and the operand, what would fault or silently corrupt on a GPU: an
// operand that is not emulated device memory (a host pointer, a freed or too
// short buffer: EXECUTION_FAILED, and at a replay a launch failure), an
// output overlapping another operand, host alpha/beta pointing into device
// memory, a pointer less aligned than the cuBLASLt algorithm was chosen for.
// A workspace (cublasSetWorkspace's, or the one given to cublasLtMatmul) is
// overwritten with 0xff bytes by every GEMM that gets it, as a real GEMM may
// use it, so a caller that keeps live data there sees it destroyed.
//
// Emulated: f32, f16 and bf16 inputs (f64 too) with CUBLAS_COMPUTE_32F and
// its variants (TF32, f16 and bf16 input rounding where the compute type or
// the handle's math mode allows it, as the least precise choice cuBLAS may
// make), column-major unbatched matrices, the DEFAULT, RELU, BIAS and
// RELU_BIAS epilogues. cuBLAS's default workspace pool is not emulated (a
// handle without cublasSetWorkspace scribbles nothing).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;  // the legacy default stream until set
  // cublasSetWorkspace's buffer; without one, cuBLAS's own pool (not emulated).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

struct cublasLtContext {
  int unused = 0;
};

namespace {

constexpr int kVersion = CUBLAS_VERSION;  // 130100: 13.1.0
constexpr size_t kLtAlgoWorkspace = size_t(1) << 20;

std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// Returns st, having said why on stderr: cuBLAS has no message of its own.
cublasStatus_t refuse(cublasStatus_t st, const char* call, const std::string& why) {
  std::fprintf(stderr, "cublas emulator: %s: %s: %s\n", call, cublasGetStatusName(st),
               why.c_str());
  return st;
}

// ---------------------------------------------------------------- handles

// The live handles, so a destroyed (or never created) one is refused instead
// of read after free; a destroyed handle's few bytes are kept so that no new
// handle takes its address and makes it look alive. Leaked on purpose:
// handles may be destroyed from static destructors.
template <typename H>
struct Registry {
  std::mutex mutex;
  std::unordered_set<H> live, destroyed;
};

template <typename H>
Registry<H>& registry() {
  static auto* r = new Registry<H>;
  return *r;
}

template <typename H>
bool alive(H h) {
  Registry<H>& r = registry<H>();
  std::lock_guard lock(r.mutex);
  return h && r.live.count(h) != 0;
}

template <typename H>
void add(H h) {
  Registry<H>& r = registry<H>();
  std::lock_guard lock(r.mutex);
  r.live.insert(h);
}

template <typename H>
bool retire(H h) {
  Registry<H>& r = registry<H>();
  std::lock_guard lock(r.mutex);
  if (!h || !r.live.erase(h)) return false;
  r.destroyed.insert(h);
  return true;
}

// cuBLAS needs a device: without one its handles are not created.
bool have_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

// ---------------------------------------------------------------- element types

size_t type_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

std::string type_name(int t) {
  switch (t) {
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return format("cudaDataType %d", t);
  }
}

double load(const void* base, cudaDataType_t t, int64_t i) {
  const char* p = static_cast<const char*>(base) + i * int64_t(type_bytes(t));
  switch (t) {
    case CUDA_R_64F: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case CUDA_R_32F: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case CUDA_R_16F: {
      unsigned short h;
      std::memcpy(&h, p, 2);
      return tb_emu::half_to_float(h);
    }
    case CUDA_R_16BF: {
      unsigned short h;
      std::memcpy(&h, p, 2);
      return tb_emu::bfloat16_to_float(h);
    }
    default: return std::nan("");
  }
}

// v rounded to a float toward zero, its last bit set when that was inexact
// (round to odd): rounding this float to nearest f16 or bf16 (13 or more
// bits narrower) gives v rounded once, where v rounded to the nearest float
// first could round twice.
float round_to_odd(double v) {
  float f = float(v);
  if (std::isnan(v) || double(f) == v) return f;
  if (std::isinf(f) || std::fabs(double(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return tb_emu::bits_float(tb_emu::float_bits(f) | 1u);
}

void store(void* base, cudaDataType_t t, int64_t i, double v) {
  char* p = static_cast<char*>(base) + i * int64_t(type_bytes(t));
  switch (t) {
    case CUDA_R_64F: std::memcpy(p, &v, 8); break;
    case CUDA_R_32F: {
      const float f = float(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case CUDA_R_16F: {
      const unsigned short h = tb_emu::half_bits_rn(round_to_odd(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case CUDA_R_16BF: {
      const unsigned short h = tb_emu::bfloat16_bits_rn(round_to_odd(v));
      std::memcpy(p, &h, 2);
      break;
    }
    default: break;
  }
}

// How f32 inputs are narrowed before the products (TF32 or f16/bf16 Tensor
// Core math); f16 and bf16 inputs are used as they are.
enum class Narrowing { none, tf32, f16, bf16 };

double narrow(double v, Narrowing n) {
  if (n == Narrowing::none) return v;
  const float f = float(v);  // an f32 input: exact
  switch (n) {
    case Narrowing::none: return v;
    case Narrowing::tf32: {  // 10 mantissa bits, to nearest, ties away (cvt.rna.tf32)
      uint32_t u = tb_emu::float_bits(f);
      if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
      return tb_emu::bits_float(u);
    }
    case Narrowing::f16: return tb_emu::half_to_float(tb_emu::half_bits_rn(f));
    case Narrowing::bf16: return tb_emu::bfloat16_to_float(tb_emu::bfloat16_bits_rn(f));
  }
  return v;
}

// What a GEMM with these types computes with: the type of alpha and beta,
// and the narrowing of f32 inputs. `math` is the cuBLAS handle's math mode
// (-1 for cuBLASLt, which has none). cuBLAS's table of supported types,
// restricted to the real types the stand-in knows.
struct Plan {
  cudaDataType_t scale = CUDA_R_32F;
  Narrowing narrowing = Narrowing::none;
};

cublasStatus_t plan_types(int compute, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                          int math, Plan* plan, std::string* why) {
  const auto unsupported = [&](const char* what) {
    *why = format("A %s, B %s, C/D %s with compute type %d: %s", type_name(at).c_str(),
                  type_name(bt).c_str(), type_name(ct).c_str(), compute, what);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  };
  if (at != bt) return unsupported("A and B must have one type");
  const bool all_f32 = at == CUDA_R_32F && ct == CUDA_R_32F;
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: {
      const bool lp = (at == CUDA_R_16F || at == CUDA_R_16BF) && (ct == at || ct == CUDA_R_32F);
      if (!all_f32 && !lp) return unsupported("not a combination cuBLAS supports");
      plan->scale = CUDA_R_32F;
      plan->narrowing = Narrowing::none;
      // The handle's math mode may let plain COMPUTE_32F use Tensor Cores.
      const int base =
          math < 0 ? 0 : (math & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
      if (compute == CUBLAS_COMPUTE_32F && all_f32 && base == CUBLAS_TF32_TENSOR_OP_MATH)
        plan->narrowing = Narrowing::tf32;
      if (compute == CUBLAS_COMPUTE_32F && all_f32 && base == CUBLAS_TENSOR_OP_MATH)
        plan->narrowing = Narrowing::f16;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
      if (!all_f32) return unsupported("this compute type takes f32 A, B and C only");
      plan->scale = CUDA_R_32F;
      plan->narrowing = compute == CUBLAS_COMPUTE_32F_FAST_TF32   ? Narrowing::tf32
                        : compute == CUBLAS_COMPUTE_32F_FAST_16F  ? Narrowing::f16
                        : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? Narrowing::bf16
                                                                  : Narrowing::none;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      if (at != CUDA_R_64F || ct != CUDA_R_64F) return unsupported("COMPUTE_64F takes f64 only");
      plan->scale = CUDA_R_64F;
      plan->narrowing = Narrowing::none;
      return CUBLAS_STATUS_SUCCESS;
    default: return unsupported("compute type not emulated");
  }
}

// ---------------------------------------------------------------- operands

// A column-major matrix as stored: rows x cols, ld elements apart.
struct Matrix {
  const void* ptr = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
  size_t bytes() const {
    return rows > 0 && cols > 0 ? size_t((cols - 1) * ld + rows) * type_bytes(type) : 0;
  }
};

// Bytes a call reads or writes, for the memory checks.
struct Span {
  const char* name;
  const void* ptr;
  size_t bytes;
  bool written;
};

bool overlap(const Span& a, const Span& b) {
  const auto p = reinterpret_cast<uintptr_t>(a.ptr), q = reinterpret_cast<uintptr_t>(b.ptr);
  return a.bytes && b.bytes && p < q + b.bytes && q < p + a.bytes;
}

// What would fault or corrupt on a GPU: an operand outside emulated device
// memory; a written operand overlapping another (the result would depend on
// the order the GPU's threads run). "" when none.
std::string memory_problem(const std::vector<Span>& spans) {
  for (const Span& s : spans)
    if (s.bytes && !tb_emu::is_device_memory(s.ptr, s.bytes))
      return format("%s (%zu bytes at %p) is not emulated device memory: a host pointer, a freed "
                    "buffer, or one too short",
                    s.name, s.bytes, s.ptr);
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j)
      if ((spans[i].written || spans[j].written) && overlap(spans[i], spans[j]))
        return format("%s (%zu bytes at %p) overlaps %s (%zu bytes at %p)", spans[i].name,
                      spans[i].bytes, spans[i].ptr, spans[j].name, spans[j].bytes, spans[j].ptr);
  return {};
}

std::string ld_problem(const char* name, const Matrix& x) {
  if (x.ld >= std::max<int64_t>(1, x.rows)) return {};
  return format("ld%s = %lld, less than max(1, its %lld rows)", name, (long long)x.ld,
                (long long)x.rows);
}

// The largest power of two (up to 256) that p is a multiple of.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t r = 1;
  while (r < 256 && !(a & r)) r <<= 1;
  return r;
}

// ---------------------------------------------------------------- the GEMM

// D (m, n) = act(alpha·op(A)·op(B) + beta·C + bias), everything it needs by
// value: a graph replays it after the call returned.
struct Job {
  const char* call = "";
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  Matrix a, b, c, d;
  const char* d_name = "D";  // "C" in cublasGemmEx, "C/D" in place
  Plan plan;
  bool device_scalars = false;  // alpha and beta read from device memory when it runs
  const void* alpha_ptr = nullptr;
  const void* beta_ptr = nullptr;
  double alpha = 0, beta = 0;
  const void* bias = nullptr;  // m entries, one per row of D
  cudaDataType_t bias_type = CUDA_R_32F;
  bool relu = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<Span> spans;
};

void run(const Job& j) {
  // A replay may come after an operand was freed.
  if (const std::string bad = memory_problem(j.spans); !bad.empty()) {
    std::fprintf(stderr, "cublas emulator: %s failed when it ran: %s\n", j.call, bad.c_str());
    tb_emu::set_last_error(cudaErrorLaunchFailure);
    return;
  }
  if (j.workspace_bytes) std::memset(j.workspace, 0xff, j.workspace_bytes);
  double alpha = j.alpha, beta = j.beta;
  if (j.device_scalars) {
    alpha = load(j.alpha_ptr, j.plan.scale, 0);
    beta = load(j.beta_ptr, j.plan.scale, 0);
  }
  const int64_t m = j.m, n = j.n, k = j.k;
  // As BLAS: alpha = 0 reads neither A nor B, beta = 0 does not read C.
  const bool use_ab = alpha != 0 && k > 0, use_c = beta != 0;
  // op(A)'s rows and op(B)'s columns, widened once, each contiguous in k.
  std::vector<double> a(use_ab ? size_t(m * k) : 0), b(use_ab ? size_t(n * k) : 0);
  if (use_ab) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        a[size_t(i * k + p)] = narrow(
            load(j.a.ptr, j.a.type, j.trans_a ? p + i * j.a.ld : i + p * j.a.ld), j.plan.narrowing);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t p = 0; p < k; ++p)
        b[size_t(c * k + p)] = narrow(
            load(j.b.ptr, j.b.type, j.trans_b ? c + p * j.b.ld : p + c * j.b.ld), j.plan.narrowing);
  }
  void* d = const_cast<void*>(j.d.ptr);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < m; ++i) {
      double v = 0;
      if (use_ab) {
        const double* ar = &a[size_t(i * k)];
        const double* bc = &b[size_t(c * k)];
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += ar[p] * bc[p];
        v = alpha * acc;
      }
      if (use_c) v += beta * load(j.c.ptr, j.c.type, i + c * j.c.ld);
      if (j.bias) v += load(j.bias, j.bias_type, i);
      if (j.relu) v = v > 0 ? v : 0.0;  // max(v, 0); NaN to 0, as fmaxf (assumed)
      store(d, j.d.type, i + c * j.d.ld, v);
    }
}

// Checks the memory the job touches and puts it on the stream.
cublasStatus_t submit(Job j, cudaStream_t stream) {
  const char* call = j.call;
  const size_t scalar_bytes = type_bytes(j.plan.scale);
  if (!j.device_scalars) {
    // Host pointer mode: the values now (a graph replays them).
    if (tb_emu::is_device_memory(j.alpha_ptr, scalar_bytes) ||
        tb_emu::is_device_memory(j.beta_ptr, scalar_bytes))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "alpha or beta points into device memory, but the pointer mode is host");
    j.alpha = load(j.alpha_ptr, j.plan.scale, 0);
    j.beta = load(j.beta_ptr, j.plan.scale, 0);
  }
  const bool read_ab = j.k > 0 && (j.device_scalars || j.alpha != 0);
  const bool read_c = j.device_scalars || j.beta != 0;
  if (read_c && !j.c.ptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "C is null, beta is not 0");
  if (read_ab) {
    j.spans.push_back({"A", j.a.ptr, j.a.bytes(), false});
    j.spans.push_back({"B", j.b.ptr, j.b.bytes(), false});
  }
  if (read_c && j.c.ptr != j.d.ptr) j.spans.push_back({"C", j.c.ptr, j.c.bytes(), false});
  j.spans.push_back({j.d_name, j.d.ptr, j.d.bytes(), true});
  if (j.bias) j.spans.push_back({"bias", j.bias, size_t(j.m) * type_bytes(j.bias_type), false});
  if (j.device_scalars) {
    j.spans.push_back({"alpha", j.alpha_ptr, scalar_bytes, false});
    j.spans.push_back({"beta", j.beta_ptr, scalar_bytes, false});
  }
  if (j.workspace_bytes) j.spans.push_back({"workspace", j.workspace, j.workspace_bytes, true});

  std::lock_guard lock(tb_emu::device_lock());
  if (const std::string bad = memory_problem(j.spans); !bad.empty())
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, call, bad);
  const cudaError_t e = tb_emu::enqueue(stream, [j = std::move(j)] { run(j); }, call);
  if (e != cudaSuccess)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, call,
                  format("its stream did not take the work: %s", cudaGetErrorName(e)));
  return CUBLAS_STATUS_SUCCESS;
}

bool known_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool known_algo(int algo) {
  return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

const char* const kNoHandle = "the handle was not created, or was destroyed";

}  // namespace

// ---------------------------------------------------------------- cuBLAS

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library or the handle was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "a resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an argument has an invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the device lacks a feature the call needs";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to run";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the operation is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "a license check failed";
  }
  return "unknown status";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate", "handle is null");
  *handle = nullptr;
  if (!have_device())
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate", "no emulated CUDA device");
  *handle = new cublasContext;
  add(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!retire(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy", kNoHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion(cublasHandle_t, int* version) {
  if (!version) return CUBLAS_STATUS_NOT_INITIALIZED;  // as cuBLAS documents it
  *version = kVersion;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// As cuBLAS: a new stream puts the handle back on cuBLAS's own workspace pool.
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream", kNoHandle);
  handle->stream = stream;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetStream", kNoHandle);
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  constexpr const char* call = "cublasSetWorkspace";
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, kNoHandle);
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("workspace %p is not 256-byte aligned", workspace));
  if (!workspace && bytes)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null workspace of a nonzero size");
  if (bytes && !tb_emu::is_device_memory(workspace, bytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("workspace (%zu bytes at %p) is not emulated device memory", bytes,
                         workspace));
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode", kNoHandle);
  const int base = int(mode) & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
      base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
      base != CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode",
                  format("math mode %d", int(mode)));
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetMathMode", kNoHandle);
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  if (!alive(handle))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetAtomicsMode", kNoHandle);
  if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetAtomicsMode",
                  format("atomics mode %d", int(mode)));
  handle->atomics = mode;  // the host loops use no atomics either way
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  if (!alive(handle))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetAtomicsMode", kNoHandle);
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->atomics;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!alive(handle))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetPointerMode", kNoHandle);
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode",
                  format("pointer mode %d", int(mode)));
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (!alive(handle))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetPointerMode", kNoHandle);
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  constexpr const char* call = "cublasGemmEx";
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, kNoHandle);
  if (m < 0 || n < 0 || k < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, format("m=%d n=%d k=%d", m, n, k));
  if (!known_op(transa) || !known_op(transb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("transa=%d transb=%d", int(transa), int(transb)));
  Job j;
  j.call = call;
  j.trans_a = transa != CUBLAS_OP_N;  // C is T for real types
  j.trans_b = transb != CUBLAS_OP_N;
  j.m = m;
  j.n = n;
  j.k = k;
  j.a = {A, Atype, j.trans_a ? k : m, j.trans_a ? m : k, lda};
  j.b = {B, Btype, j.trans_b ? n : k, j.trans_b ? k : n, ldb};
  j.c = {C, Ctype, m, n, ldc};
  j.d = j.c;
  j.d_name = "C";
  for (const auto& [name, x] : {std::pair{"a", &j.a}, std::pair{"b", &j.b}, std::pair{"c", &j.c}})
    if (std::string why = ld_problem(name, *x); !why.empty())
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, why);
  if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is null");
  if (!known_algo(algo))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, format("algo %d", int(algo)));
  std::string why;
  if (const cublasStatus_t st =
          plan_types(computeType, Atype, Btype, Ctype, int(handle->math), &j.plan, &why);
      st != CUBLAS_STATUS_SUCCESS)
    return refuse(st, call, why);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  j.device_scalars = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  j.alpha_ptr = alpha;
  j.beta_ptr = beta;
  if (!j.device_scalars && (k == 0 || load(alpha, j.plan.scale, 0) == 0) &&
      load(beta, j.plan.scale, 0) == 1)
    return CUBLAS_STATUS_SUCCESS;  // C stays C: BLAS's quick return
  j.workspace = handle->workspace;
  j.workspace_bytes = handle->workspace_bytes;
  return submit(std::move(j), handle->stream);
}

// ---------------------------------------------------------------- cuBLASLt

namespace {

// The descriptors' contents, kept in their opaque arrays; a magic number
// tells a live descriptor of the kind from anything else.
constexpr uint64_t kDescMagic = 0x5442'4c54'4445'5343ull;    // "TBLTDESC"
constexpr uint64_t kLayoutMagic = 0x5442'4c54'4c41'594full;  // "TBLTLAYO"
constexpr uint64_t kPrefMagic = 0x5442'4c54'5052'4546ull;    // "TBLTPREF"
constexpr uint64_t kAlgoMagic = 0x5442'4c54'414c'474full;    // "TBLTALGO"

struct DescState {
  uint64_t magic = kDescMagic;
  int32_t compute = 0, scale = 0;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  int32_t fill = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t bias_type = -1;  // -1: D's type
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
};

struct LayoutState {
  uint64_t magic = kLayoutMagic;
  int32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

struct PrefState {
  uint64_t magic = kPrefMagic;
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
  float max_waves = 0;
  uint64_t impl_mask = ~uint64_t(0);
};

// What the heuristic promised: the workspace the algorithm needs, and the
// alignments it was chosen for (the preference's; the bias pointer's own).
struct AlgoState {
  uint64_t magic = kAlgoMagic;
  uint64_t workspace = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0, align_bias = 0;
};

static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(AlgoState) <= sizeof(cublasLtMatmulAlgo_t));

template <typename S, typename O>
bool get(const O* o, S* s) {
  if (!o) return false;
  std::memcpy(static_cast<void*>(s), o->data, sizeof(S));
  return s->magic == S{}.magic;
}

template <typename S, typename O>
void put(O* o, const S& s) {
  std::memset(o->data, 0, sizeof o->data);
  std::memcpy(o->data, static_cast<const void*>(&s), sizeof(S));
}

// Copies an attribute's value of exactly sizeof(T) bytes.
template <typename T>
bool take(T* out, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

// Destroys a descriptor made by put(): null is a no-op, a dead one refused.
template <typename State, typename O>
cublasStatus_t destroy(O* o, const char* call, const char* what) {
  State s;
  if (!o) return CUBLAS_STATUS_SUCCESS;
  if (!get(o, &s))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, std::string("not a live ") + what);
  std::memset(o->data, 0, sizeof o->data);
  delete o;
  return CUBLAS_STATUS_SUCCESS;
}

bool emulated_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU ||
         e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS;
}

// A matmul's descriptors made into a job (its pointers not yet set), after
// the checks cuBLASLt makes of them.
cublasStatus_t lt_problem(const char* call, cublasLtMatmulDesc_t opd, cublasLtMatrixLayout_t ad,
                          cublasLtMatrixLayout_t bd, cublasLtMatrixLayout_t cd,
                          cublasLtMatrixLayout_t dd, DescState* op, Job* j) {
  if (!get(opd, op))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live cublasLtMatmulDesc_t");
  LayoutState l[4];
  const char* const names[4] = {"Adesc", "Bdesc", "Cdesc", "Ddesc"};
  const cublasLtMatrixLayout_t ls[4] = {ad, bd, cd, dd};
  for (int i = 0; i < 4; ++i) {
    if (!get(ls[i], &l[i]))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    format("%s is not a live cublasLtMatrixLayout_t", names[i]));
    if (l[i].order != CUBLASLT_ORDER_COL)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    format("%s: order %d not emulated", names[i], l[i].order));
    if (l[i].rows >= (uint64_t(1) << 40) || l[i].cols >= (uint64_t(1) << 40))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, format("%s: too large", names[i]));
  }
  if (!known_op(op->transa) || !known_op(op->transb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("TRANSA %d, TRANSB %d", op->transa, op->transb));
  if (op->transc != CUBLAS_OP_N || op->fill != CUBLAS_FILL_MODE_FULL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "TRANSC must be N and FILL_MODE FULL");
  const auto as_matrix = [](const LayoutState& s) {
    return Matrix{nullptr, cudaDataType_t(s.type), int64_t(s.rows), int64_t(s.cols), s.ld};
  };
  j->call = call;
  j->trans_a = op->transa != CUBLAS_OP_N;
  j->trans_b = op->transb != CUBLAS_OP_N;
  j->a = as_matrix(l[0]);
  j->b = as_matrix(l[1]);
  j->c = as_matrix(l[2]);
  j->d = as_matrix(l[3]);
  j->m = j->d.rows;
  j->n = j->d.cols;
  j->k = j->trans_a ? j->a.rows : j->a.cols;
  const int64_t a_m = j->trans_a ? j->a.cols : j->a.rows;
  const int64_t b_k = j->trans_b ? j->b.cols : j->b.rows, b_n = j->trans_b ? j->b.rows : j->b.cols;
  if (a_m != j->m || b_k != j->k || b_n != j->n || j->c.rows != j->m || j->c.cols != j->n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("shapes do not match: op(A) %lldx%lld, op(B) %lldx%lld, C %lldx%lld, "
                         "D %lldx%lld",
                         (long long)a_m, (long long)j->k, (long long)b_k, (long long)b_n,
                         (long long)j->c.rows, (long long)j->c.cols, (long long)j->m,
                         (long long)j->n));
  for (const auto& [name, x] :
       {std::pair{"a", &j->a}, std::pair{"b", &j->b}, std::pair{"c", &j->c}, std::pair{"d", &j->d}})
    if (std::string why = ld_problem(name, *x); !why.empty())
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, why);
  if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
      op->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  format("pointer mode %d not emulated", op->pointer_mode));
  std::string why;
  if (const cublasStatus_t st = plan_types(op->compute, j->a.type, j->b.type, j->d.type, -1,
                                           &j->plan, &why);
      st != CUBLAS_STATUS_SUCCESS)
    return refuse(st, call, why);
  if (j->c.type != j->d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  format("C %s, D %s: they must have one type", type_name(j->c.type).c_str(),
                         type_name(j->d.type).c_str()));
  if (op->scale != j->plan.scale)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  format("scale type %s, not %s", type_name(op->scale).c_str(),
                         type_name(j->plan.scale).c_str()));
  if (!emulated_epilogue(op->epilogue))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  format("epilogue %u not emulated (DEFAULT, RELU, BIAS, RELU_BIAS are)",
                         op->epilogue));
  j->relu = op->epilogue & CUBLASLT_EPILOGUE_RELU;
  if (op->epilogue & CUBLASLT_EPILOGUE_BIAS) {
    // The bias has D's type (cublasLt.h: other types only for the IMMA and
    // fp8 kernels, not emulated). An f32 bias with a bf16 D: the real
    // cuBLASLt 13.1's heuristic answered CUBLAS_STATUS_INVALID_VALUE (H200,
    // 2026-11-28).
    const int bt = op->bias_type == -1 ? int(j->d.type) : op->bias_type;
    if (bt != j->d.type)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    format("bias of %s with D of %s", type_name(bt).c_str(),
                           type_name(j->d.type).c_str()));
    j->bias_type = cudaDataType_t(bt);
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "handle is null");
  *handle = nullptr;
  if (!have_device())
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate", "no emulated CUDA device");
  *handle = new cublasLtContext;
  add(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!retire(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", kNoHandle);
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion() { return size_t(kVersion); }

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  return cublasGetProperty(type, value);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  DescState s;
  s.compute = computeType;
  s.scale = scaleType;
  *desc = new cublasLtMatmulDescOpaque_t;
  put(*desc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy<DescState>(desc, "cublasLtMatmulDescDestroy", "cublasLtMatmulDesc_t");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  constexpr const char* call = "cublasLtMatmulDescSetAttribute";
  DescState s;
  if (!get(desc, &s))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live cublasLtMatmulDesc_t");
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: ok = take(&s.compute, buf, size); break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: ok = take(&s.scale, buf, size); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: ok = take(&s.pointer_mode, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = take(&s.transa, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = take(&s.transb, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSC: ok = take(&s.transc, buf, size); break;
    case CUBLASLT_MATMUL_DESC_FILL_MODE: ok = take(&s.fill, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = take(&s.epilogue, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = take(&s.bias, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: ok = take(&s.bias_batch_stride, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = take(&s.bias_type, buf, size); break;
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    format("attribute %d not emulated", int(attr)));
  }
  if (!ok)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("attribute %d: null buffer or a size of %zu bytes, not its own",
                         int(attr), size));
  put(desc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  LayoutState s;
  s.type = type;
  s.rows = rows;
  s.cols = cols;
  s.ld = ld;
  *layout = new cublasLtMatrixLayoutOpaque_t;
  put(*layout, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy<LayoutState>(layout, "cublasLtMatrixLayoutDestroy", "cublasLtMatrixLayout_t");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  put(*pref, PrefState{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy<PrefState>(pref, "cublasLtMatmulPreferenceDestroy",
                            "cublasLtMatmulPreference_t");
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  constexpr const char* call = "cublasLtMatmulPreferenceSetAttribute";
  PrefState s;
  if (!get(pref, &s))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live cublasLtMatmulPreference_t");
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: ok = take(&s.search_mode, buf, size); break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = take(&s.max_workspace, buf, size); break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: ok = take(&s.reduction_mask, buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = take(&s.align[0], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = take(&s.align[1], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = take(&s.align[2], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = take(&s.align[3], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: ok = take(&s.max_waves, buf, size); break;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: ok = take(&s.impl_mask, buf, size); break;
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    format("attribute %d not emulated", int(attr)));
  }
  if (!ok)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("attribute %d: null buffer or a size of %zu bytes, not its own",
                         int(attr), size));
  put(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm for anything lt_problem accepts (it splits no reduction, so
// every REDUCTION_SCHEME_MASK admits it), needing min(the preference's
// maximum, 1 MiB) of workspace so that callers' workspace paths run.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t opd, cublasLtMatrixLayout_t ad,
    cublasLtMatrixLayout_t bd, cublasLtMatrixLayout_t cd, cublasLtMatrixLayout_t dd,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  constexpr const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (returned) *returned = 0;
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, kNoHandle);
  if (requested <= 0 || !results || !returned)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("requestedAlgoCount %d, results %p, returnAlgoCount %p", requested,
                         static_cast<void*>(results), static_cast<void*>(returned)));
  DescState op;
  Job j;
  if (const cublasStatus_t st = lt_problem(call, opd, ad, bd, cd, dd, &op, &j);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  PrefState p;
  if (pref && !get(pref, &p))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live cublasLtMatmulPreference_t");
  if (p.search_mode != CUBLASLT_SEARCH_BEST_FIT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  format("search mode %u not emulated", p.search_mode));
  AlgoState algo;
  algo.workspace = std::min<uint64_t>(p.max_workspace, kLtAlgoWorkspace);
  algo.align_a = p.align[0];
  algo.align_b = p.align[1];
  algo.align_c = p.align[2];
  algo.align_d = p.align[3];
  // The bias is not read here, but its address tells its alignment.
  algo.align_bias = op.bias ? std::min(p.align[3], alignment_of(op.bias)) : p.align[3];
  // No algorithm reads an operand at less than its element's alignment.
  const std::pair<uint32_t, cudaDataType_t> needs[] = {
      {algo.align_a, j.a.type}, {algo.align_b, j.b.type}, {algo.align_c, j.c.type},
      {algo.align_d, j.d.type}};
  for (const auto& [align, type] : needs)
    if (align < type_bytes(type)) return CUBLAS_STATUS_NOT_SUPPORTED;  // none found
  if ((op.epilogue & CUBLASLT_EPILOGUE_BIAS) && algo.align_bias < type_bytes(j.bias_type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  put(&results[0].algo, algo);
  results[0].workspaceSize = size_t(algo.workspace);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t opd,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t ad,
                              const void* B, cublasLtMatrixLayout_t bd, const void* beta,
                              const void* C, cublasLtMatrixLayout_t cd, void* D,
                              cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* call = "cublasLtMatmul";
  if (!alive(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, kNoHandle);
  DescState op;
  Job j;
  if (const cublasStatus_t st = lt_problem(call, opd, ad, bd, cd, dd, &op, &j);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is null");
  // Without an algorithm cuBLASLt chooses one for these pointers: no promise to keep.
  AlgoState a;
  a.align_a = a.align_b = a.align_c = a.align_d = a.align_bias = 1;
  if (algo && !get(algo, &a))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "algo is not one cublasLtMatmulAlgoGetHeuristic returned");
  if (workspace_bytes < a.workspace || (!workspace && workspace_bytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  format("workspace of %zu bytes at %p; the algorithm needs %llu bytes",
                         workspace_bytes, workspace, (unsigned long long)a.workspace));
  const bool bias = op.epilogue & CUBLASLT_EPILOGUE_BIAS;
  if (bias && !op.bias)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a bias epilogue without BIAS_POINTER");
  if (C && C == D && (j.c.type != j.d.type || j.c.ld != j.d.ld))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "C is D (in place) with another layout");
  const std::tuple<const char*, const void*, uint32_t> aligned[] = {
      {"A", A, a.align_a}, {"B", B, a.align_b}, {"C", C, a.align_c},
      {"D", D, a.align_d}, {"bias", bias ? op.bias : nullptr, a.align_bias}};
  for (const auto& [name, ptr, need] : aligned)
    if (ptr && alignment_of(ptr) < need)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    format("%s at %p is %u-byte aligned; the algorithm was chosen for %u", name,
                           ptr, alignment_of(ptr), need));
  if (j.m == 0 || j.n == 0) return CUBLAS_STATUS_SUCCESS;
  j.a.ptr = A;
  j.b.ptr = B;
  j.c.ptr = C;
  j.d.ptr = D;
  j.d_name = C == D ? "C/D" : "D";
  j.bias = bias ? op.bias : nullptr;
  j.device_scalars = op.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  j.alpha_ptr = alpha;
  j.beta_ptr = beta;
  j.workspace = workspace;
  j.workspace_bytes = workspace_bytes;
  return submit(std::move(j), stream);
}
