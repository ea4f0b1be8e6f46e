// SPDX-License-Identifier: GPL-3.0-or-later
// A test double of cuDNN's convolutions for the CUDA emulator: ConvPlanCache
// (engine/ops/conv/conv_cudnn.h) on the host, in place of conv_cudnn_cuda.cpp
// in the emulated build (TRAINBENCH_CUDA=EMULATED), so the engine's
// convolution host code (conv_cuda.cpp: keys, workspaces, scratch, casts,
// graph capture) runs without a GPU. Its results are never GPU results:
// every op is one host path (im2col and a double GEMM), whatever the key.
//
// Same contract as conv_cudnn_cuda.cpp: one entry per ConvPlanKey (with the
// operands' alignments), built on first use; benchmark keys are "autotuned"
// on their first run (refused while the stream is captured, with the real
// file's message; an OutOfMemory from the autotune workspace keeps the
// heuristics' choice and says why); describe() has the same fields, with
// path "cudnn-emulated". The arithmetic, by op (cross-correlation, dilation
// 1, the key's stride and zero padding):
//   Fprop  y[n,k,oh,ow]  = Σ_{c,r,s} x[n,c,oh·st−p+r,ow·st−p+s] · w[k,c,r,s]
//   Dgrad  dx[n,c,h,w]   = Σ_{k,r,s; h+p−r = oh·st, w+p−s = ow·st} dy[n,k,oh,ow] · w[k,c,r,s]
//   Wgrad  dw[k,c,r,s]   = Σ_{n,oh,ow} dy[n,k,oh,ow] · x[n,c,oh·st−p+r,ow·st−p+s]
// Inputs widened exactly to double, products summed in double (im2col and
// OpenBLAS's dgemm, an image at a time), each output rounded once to the
// dtype and written (alpha 1, beta 0: never accumulated).
// Tensors are addressed through layout_strides, as the real graph's are
// described: NCHW or NHWC activations, KCRS or KRSC filters.
//
// What it checks, to catch host-code bugs before a GPU does (each a tb::Error
// naming the convolution's key and the operand):
// - every operand and workspace is device memory (tb_emu::is_device_memory)
//   over the bytes it spans: on a GPU a host pointer is an illegal address;
// - each pointer is aligned to its elements' size;
// - out overlaps neither input (cuDNN convolves out of place), and the
//   workspace none of a, b, out;
// - the workspace is asked for (non-zero, deterministic: a quarter of out's
//   bytes rounded up to a multiple of 256, at least 256; autotuning's twice
//   that) and overwritten with 0xff bytes before each convolution, so a
//   workspace that shares memory with data still needed shows in the results;
// - the work is enqueued on the handle's stream (tb_emu::enqueue): recorded
//   while the stream is captured and run at each replay, where the operands
//   are checked again (memory freed before a replay is a GPU fault; here the
//   tb::Error comes out of cudaGraphLaunch).
#include <cblas.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/conv/conv_cudnn.h"
#include "tests/cuda_emulator/emulator.h"

namespace tb::cuda {

namespace {

// ---------------------------------------------------------------- element types

// Round-to-odd narrowing of a double to float: the float nearest toward zero
// with its last bit set when inexact. Rounding that to f16/bf16 (13 and 16
// bits narrower) is then the double's own correct rounding, so the output is
// rounded once as the contract says, not twice.
float narrow_to_odd(double d) {
  float f = float(d);
  if (std::isfinite(d) && double(f) != d) {
    if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    f = tb_emu::bits_float(tb_emu::float_bits(f) | 1u);
  }
  return f;
}

struct F32Io {
  using T = float;
  static double in(float v) { return v; }
  static float out(double v) { return float(v); }
};
struct F64Io {
  using T = double;
  static double in(double v) { return v; }
  static double out(double v) { return v; }
};
struct F16Io {
  using T = uint16_t;
  static double in(uint16_t v) { return tb_emu::half_to_float(v); }
  static uint16_t out(double v) { return tb_emu::half_bits_rn(narrow_to_odd(v)); }
};
struct BF16Io {
  using T = uint16_t;
  static double in(uint16_t v) { return tb_emu::bfloat16_to_float(v); }
  static uint16_t out(double v) { return tb_emu::bfloat16_bits_rn(narrow_to_odd(v)); }
};

// ---------------------------------------------------------------- the host path

struct Strides {
  int64_t n, c, h, w;
  int64_t at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return i0 * n + i1 * c + i2 * h + i3 * w;
  }
};
Strides strides_of(Layout l, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t s[4];
  layout_strides(l, d0, d1, d2, d3, s);
  return {s[0], s[1], s[2], s[3]};
}

// The three tensors' strides of a key: activations in, activations out, filters.
struct KeyStrides {
  Strides x, y, w;
  explicit KeyStrides(const ConvPlanKey& k)
      : x(strides_of(k.x_layout, k.N, k.C, k.H, k.W)),
        y(strides_of(k.x_layout, k.N, k.K, k.H_out(), k.W_out())),
        w(strides_of(k.w_layout, k.K, k.C, k.R, k.S)) {}
};

// One image's activations as double [C][H][W], whatever its layout.
template <typename Io>
void gather_image(const typename Io::T* t, const Strides& st, int64_t n, int64_t C, int64_t H,
                  int64_t W, double* out) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) *out++ = Io::in(t[st.at(n, c, h, w)]);
}

// The filters as double [K][C·R·S], whatever their layout.
template <typename Io>
std::vector<double> gather_filters(const ConvPlanKey& k, const typename Io::T* w,
                                   const Strides& st) {
  std::vector<double> out(size_t(k.K * k.C * k.R * k.S));
  double* o = out.data();
  for (int64_t ko = 0; ko < k.K; ++ko)
    for (int64_t c = 0; c < k.C; ++c)
      for (int64_t r = 0; r < k.R; ++r)
        for (int64_t s = 0; s < k.S; ++s) *o++ = Io::in(w[st.at(ko, c, r, s)]);
  return out;
}

// im2col: col[(c·R + r)·S + s][oh·Wo + ow] = x[c, oh·stride − pad + r, ow·stride − pad + s],
// zero outside the image (the padding).
void im2col(const ConvPlanKey& k, const double* x, double* col) {
  const int64_t Ho = k.H_out(), Wo = k.W_out();
  for (int64_t c = 0; c < k.C; ++c)
    for (int64_t r = 0; r < k.R; ++r)
      for (int64_t s = 0; s < k.S; ++s)
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t h = oh * k.stride - k.pad + r;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t w = ow * k.stride - k.pad + s;
            *col++ = h >= 0 && h < k.H && w >= 0 && w < k.W ? x[(c * k.H + h) * k.W + w] : 0.0;
          }
        }
}

// col2im: the sum into each input position of the columns that read it.
void col2im(const ConvPlanKey& k, const double* col, double* x) {
  const int64_t Ho = k.H_out(), Wo = k.W_out();
  std::fill(x, x + k.C * k.H * k.W, 0.0);
  for (int64_t c = 0; c < k.C; ++c)
    for (int64_t r = 0; r < k.R; ++r)
      for (int64_t s = 0; s < k.S; ++s)
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t h = oh * k.stride - k.pad + r;
          for (int64_t ow = 0; ow < Wo; ++ow, ++col) {
            const int64_t w = ow * k.stride - k.pad + s;
            if (h >= 0 && h < k.H && w >= 0 && w < k.W) x[(c * k.H + h) * k.W + w] += *col;
          }
        }
}

// The three ops as im2col and double GEMMs (OpenBLAS), an image at a time:
// exact products, sums in double, each output rounded once to the dtype.
// (Only the order of the double sums differs from a direct loop's.)
template <typename Io>
void convolve_as(const ConvPlanKey& k, const void* a, const void* b, void* out) {
  using T = typename Io::T;
  const KeyStrides st(k);
  const int64_t Ho = k.H_out(), Wo = k.W_out(), P = Ho * Wo, CRS = k.C * k.R * k.S;
  std::vector<double> col(size_t(CRS * P)), img(size_t(k.C * k.H * k.W)), map(size_t(k.K * P));
  auto put_image = [&](T* t, const Strides& s, int64_t n, int64_t C, int64_t H, int64_t W,
                       const double* v) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) t[s.at(n, c, h, w)] = Io::out(*v++);
  };
  switch (k.op) {
    case ConvOp::Fprop: {  // a = x, b = w, out = y
      const std::vector<double> wd = gather_filters<Io>(k, static_cast<const T*>(b), st.w);
      for (int64_t n = 0; n < k.N; ++n) {
        gather_image<Io>(static_cast<const T*>(a), st.x, n, k.C, k.H, k.W, img.data());
        im2col(k, img.data(), col.data());
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(k.K), int(P), int(CRS), 1.0,
                    wd.data(), int(CRS), col.data(), int(P), 0.0, map.data(), int(P));
        put_image(static_cast<T*>(out), st.y, n, k.K, Ho, Wo, map.data());
      }
      return;
    }
    case ConvOp::Dgrad: {  // a = dy, b = w, out = dx
      const std::vector<double> wd = gather_filters<Io>(k, static_cast<const T*>(b), st.w);
      for (int64_t n = 0; n < k.N; ++n) {
        gather_image<Io>(static_cast<const T*>(a), st.y, n, k.K, Ho, Wo, map.data());
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(CRS), int(P), int(k.K), 1.0,
                    wd.data(), int(CRS), map.data(), int(P), 0.0, col.data(), int(P));
        col2im(k, col.data(), img.data());
        put_image(static_cast<T*>(out), st.x, n, k.C, k.H, k.W, img.data());
      }
      return;
    }
    case ConvOp::Wgrad: {  // a = x, b = dy, out = dw
      std::vector<double> dw(size_t(k.K * CRS), 0.0);
      for (int64_t n = 0; n < k.N; ++n) {
        gather_image<Io>(static_cast<const T*>(a), st.x, n, k.C, k.H, k.W, img.data());
        im2col(k, img.data(), col.data());
        gather_image<Io>(static_cast<const T*>(b), st.y, n, k.K, Ho, Wo, map.data());
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(k.K), int(CRS), int(P), 1.0,
                    map.data(), int(P), col.data(), int(P), 1.0, dw.data(), int(CRS));
      }
      T* o = static_cast<T*>(out);
      const double* v = dw.data();
      for (int64_t ko = 0; ko < k.K; ++ko)
        for (int64_t c = 0; c < k.C; ++c)
          for (int64_t r = 0; r < k.R; ++r)
            for (int64_t s2 = 0; s2 < k.S; ++s2) o[st.w.at(ko, c, r, s2)] = Io::out(*v++);
      return;
    }
  }
}

void convolve(const ConvPlanKey& k, const void* a, const void* b, void* out) {
  switch (k.dtype) {
    case DType::F32: return convolve_as<F32Io>(k, a, b, out);
    case DType::F64: return convolve_as<F64Io>(k, a, b, out);
    case DType::F16: return convolve_as<F16Io>(k, a, b, out);
    case DType::BF16: return convolve_as<BF16Io>(k, a, b, out);
    default: TB_FAIL("convolution: unsupported dtype ", dtype_name(k.dtype));
  }
}

// ---------------------------------------------------------------- the key's operands

// An operand of run(): its name by op (conv_cudnn.h) and the bytes it spans.
struct Operand {
  const char* name;
  const void* p;
  int64_t bytes;
};

struct Operands {
  Operand a, b, out;
};

Operands operands_of(const ConvPlanKey& k, const void* a, const void* b, const void* out) {
  const int64_t e = int64_t(dtype_size(k.dtype));
  const int64_t x = k.N * k.C * k.H * k.W * e, w = k.K * k.C * k.R * k.S * e,
                y = k.N * k.K * k.H_out() * k.W_out() * e;
  switch (k.op) {
    case ConvOp::Fprop: return {{"a (x)", a, x}, {"b (w)", b, w}, {"out (y)", out, y}};
    case ConvOp::Dgrad: return {{"a (dy)", a, y}, {"b (w)", b, w}, {"out (dx)", out, x}};
    case ConvOp::Wgrad: return {{"a (x)", a, x}, {"b (dy)", b, y}, {"out (dw)", out, w}};
  }
  return {};
}

const char* work_name(ConvOp op) {
  switch (op) {
    case ConvOp::Fprop: return "cudnn convolution (emulated fprop)";
    case ConvOp::Dgrad: return "cudnn convolution (emulated dgrad)";
    case ConvOp::Wgrad: return "cudnn convolution (emulated wgrad)";
  }
  return "cudnn convolution (emulated)";
}

const char* plan_name(ConvOp op) {
  switch (op) {
    case ConvOp::Fprop: return "host: fprop, im2col and a double GEMM";
    case ConvOp::Dgrad: return "host: dgrad, a double GEMM and col2im";
    case ConvOp::Wgrad: return "host: wgrad, im2col and a double GEMM";
  }
  return "?";
}

std::string address(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// What cuDNN's graph validation and support check would refuse, at build.
void validate(const ConvPlanKey& k) {
  switch (k.dtype) {
    case DType::F32:
    case DType::F64:
    case DType::F16:
    case DType::BF16: break;
    default: TB_FAIL("convolution: unsupported dtype ", dtype_name(k.dtype));
  }
  // layout_strides gives every layout but NCHW channels-last strides: a
  // blocked layout here would be convolved as NHWC without a word.
  for (Layout l : {k.x_layout, k.w_layout})
    if (l != Layout::NCHW && l != Layout::NHWC)
      TB_FAIL("cudnn (emulated): graph validation failed for convolution ", k.str(),
              ": layout ", layout_name(l), " is neither NCHW nor NHWC (KCRS/KRSC)");
  if (k.N < 1 || k.C < 1 || k.H < 1 || k.W < 1 || k.K < 1 || k.R < 1 || k.S < 1 ||
      k.stride < 1 || k.pad < 0 || k.H + 2 * k.pad < k.R || k.W + 2 * k.pad < k.S)
    TB_FAIL("cudnn (emulated): graph validation failed for convolution ", k.str(),
            ": no such convolution (a dimension below 1, a negative padding, or a filter "
            "larger than the padded input)");
}

// A quarter of the output's bytes, rounded up to 256 (at least 256): not
// zero, so the caller's workspace path always runs.
int64_t execution_workspace_bytes(const ConvPlanKey& k) {
  const int64_t out = operands_of(k, nullptr, nullptr, nullptr).out.bytes;
  const int64_t q = (out / 4 + 255) / 256 * 256;
  return q < 256 ? 256 : q;
}

bool overlap(const void* p, int64_t pb, const void* q, int64_t qb) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + uintptr_t(qb) && b < a + uintptr_t(pb);
}

// What a GPU would fault on or compute garbage from: each a tb::Error naming
// the key and the operand.
void check_operands(const ConvPlanKey& k, const Operands& o, const void* ws, int64_t ws_bytes,
                    const char* ws_name) {
  const size_t e = dtype_size(k.dtype);
  const int aligns[3] = {k.align_a, k.align_b, k.align_out};
  int i = 0;
  for (const Operand& op : {o.a, o.b, o.out}) {
    if (!tb_emu::is_device_memory(op.p, size_t(op.bytes)))
      TB_FAIL("cudnn (emulated): convolution ", k.str(), ": operand ", op.name, " at ",
              address(op.p), " (", op.bytes, " bytes) is not device memory (an illegal "
              "address on a GPU)");
    if (size_t(aligns[i++]) < e)
      TB_FAIL("cudnn (emulated): convolution ", k.str(), ": operand ", op.name, " at ",
              address(op.p), " is not aligned to its ", dtype_name(k.dtype), " elements (",
              e, " bytes): CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER on a GPU");
  }
  for (const Operand& in : {o.a, o.b})
    if (overlap(o.out.p, o.out.bytes, in.p, in.bytes))
      TB_FAIL("cudnn (emulated): convolution ", k.str(), ": operand ", o.out.name,
              " overlaps operand ", in.name, " (cuDNN convolves out of place)");
  if (!tb_emu::is_device_memory(ws, size_t(ws_bytes)))
    TB_FAIL("cudnn (emulated): convolution ", k.str(), ": ", ws_name, " at ", address(ws), " (",
            ws_bytes, " bytes) is not device memory (an illegal address on a GPU)");
  for (const Operand& op : {o.a, o.b, o.out})
    if (overlap(ws, ws_bytes, op.p, op.bytes))
      TB_FAIL("cudnn (emulated): convolution ", k.str(), ": ", ws_name, " overlaps operand ",
              op.name, " (the convolution would overwrite it, or read its own scratch)");
}

// Enqueues one convolution on `stream` with workspace `ws`: now, or as a
// node of the capture (its copies of the key and the pointers run at each
// replay, checked again then).
void enqueue_convolution(cudaStream_t stream, const ConvPlanKey& k, const void* a, const void* b,
                         void* out, void* ws, int64_t ws_bytes, const char* ws_name) {
  const Operands o = operands_of(k, a, b, out);
  check_operands(k, o, ws, ws_bytes, ws_name);
  const std::string wsn = ws_name;
  auto work = [k, a, b, out, ws, ws_bytes, wsn] {
    check_operands(k, operands_of(k, a, b, out), ws, ws_bytes, wsn.c_str());
    std::memset(ws, 0xff, size_t(ws_bytes));  // whatever the caller kept there is gone
    convolve(k, a, b, out);
  };
  const cudaError_t e = tb_emu::enqueue(stream, std::move(work), work_name(k.op));
  if (e != cudaSuccess)
    TB_FAIL("cudnn (emulated): execution failed for convolution ", k.str(), ": ",
            cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

cudaStream_t stream_of(cudnnHandle_t handle, const ConvPlanKey& k) {
  cudaStream_t stream = nullptr;
  const cudnnStatus_t st = cudnnGetStream(handle, &stream);
  if (st != CUDNN_STATUS_SUCCESS)
    TB_FAIL("cudnn (emulated): cudnnGetStream failed for convolution ", k.str(), ": ",
            cudnnGetErrorString(st));
  return stream;
}

// As conv_cudnn_cuda.cpp's: autotuning synchronises the device, which would
// void a capture; the same message.
void refuse_while_capturing(cudnnHandle_t handle, const ConvPlanKey& k) {
  cudaStream_t stream = nullptr;
  if (cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) return;
  if (status != cudaStreamCaptureStatusNone)
    TB_FAIL("cudnn: convolution ", k.str(), " has no autotuned plan and a CUDA graph is being "
            "captured (autotuning synchronises the device, which would void the capture); the "
            "eager warm-up steps before a capture should have met this shape");
}

}  // namespace

struct ConvPlanCache::Entry {
  int built = 1;           // plans "built": autotune's candidates (the host path alone)
  int64_t workspace = -1;  // an execution's, once asked (after autotune chose)
  bool tuned = false;      // benchmark keys: autotune ran (or was given up, untuned_why)
  std::string untuned_why;
};

struct ConvPlanCache::State {
  cudnnHandle_t handle = nullptr;
  mutable std::mutex mutex;
  std::unordered_map<ConvPlanKey, Entry, ConvPlanKeyHash> plans;
};

ConvPlanCache::ConvPlanCache(void* cudnn_handle) : state_(std::make_unique<State>()) {
  state_->handle = static_cast<cudnnHandle_t>(cudnn_handle);
}

ConvPlanCache::~ConvPlanCache() = default;

size_t ConvPlanCache::size() const {
  std::lock_guard lock(state_->mutex);
  return state_->plans.size();
}

nlohmann::json ConvPlanCache::describe() const {
  nlohmann::json out = nlohmann::json::object();
  std::lock_guard lock(state_->mutex);
  for (const auto& [key, e] : state_->plans) {
    nlohmann::json r{{"path", "cudnn-emulated"}, {"plan", plan_name(key.op)}};
    if (e.workspace >= 0) r["workspace_bytes"] = e.workspace;
    r["chosen_by"] = plan_chosen_by(key.benchmark, e.tuned, e.untuned_why, e.built);
    out[key.str()] = std::move(r);
  }
  return out;
}

void ConvPlanCache::run(const ConvPlanKey& shape_key, const void* a, const void* b, void* out,
                        const std::function<void*(size_t, bool)>& workspace) {
  const ConvPlanKey key = with_alignments(shape_key, a, b, out);
  // The real cuDNN 9.19's f32 wgrad engine stored 16 bytes at a time into an
  // output declared 4-byte aligned and the device stopped (H200, 2026-11-28):
  // conv_cuda.cpp gives it 16-byte aligned outputs only, which this holds it to.
  if (key.align_out < 16)
    TB_FAIL("cudnn (emulated): execution failed for convolution ", key.str(), ": output at ", out,
            " is not 16-byte aligned (the real cuDNN's kernels may store 16 bytes at a time "
            "there: misaligned address)");
  std::unique_lock lock(state_->mutex);
  auto it = state_->plans.find(key);
  const bool tune = key.benchmark && (it == state_->plans.end() || !it->second.tuned);
  if (tune) refuse_while_capturing(state_->handle, key);
  if (it == state_->plans.end()) {
    validate(key);
    it = state_->plans.emplace(key, Entry{}).first;
  }
  Entry& e = it->second;
  const cudaStream_t stream = stream_of(state_->handle, key);
  const int64_t ws = execution_workspace_bytes(key);
  if (tune) {
    // Autotune runs its candidates on these very buffers (out is overwritten
    // again below), in the largest candidate's workspace; where that does not
    // fit, the heuristics' choice runs and the record says why, once.
    const int64_t tune_ws = 2 * ws;
    void* w = nullptr;
    try {
      w = workspace(size_t(tune_ws), true);
    } catch (const OutOfMemory&) {
      e.untuned_why =
          "autotuning's workspace of " + std::to_string(tune_ws) + " bytes did not fit";
    }
    if (e.untuned_why.empty())
      enqueue_convolution(stream, key, a, b, out, w, tune_ws, "autotuning's workspace");
    e.tuned = true;
  }
  e.workspace = ws;
  void* w = workspace(size_t(ws), false);
  enqueue_convolution(stream, key, a, b, out, w, ws, "workspace");
}

}  // namespace tb::cuda
