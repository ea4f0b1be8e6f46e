// SPDX-License-Identifier: GPL-3.0-or-later
// The cuDNN test double of the CUDA emulator (include/cudnn.h,
// emulated_cudnn.cpp, emulated_conv_plans.cpp), before the engine's
// convolution host code trusts it:
// 1. the handle calls: version, status names, the stream a handle keeps, a
//    destroyed handle refused;
// 2. ConvPlanCache on emulated device memory against the engine's CPU
//    reference (conv_cpu.cpp's loops, run in f64 on the very values the
//    emulator got, in the same layouts): every op, every activation/filter
//    layout pair, f32, f16, bf16 and f64, a padded stride-1, a padded
//    stride-2, a 1x1 and a 1x1 stride-2 geometry (where dgrad leaves rows
//    and columns of dx untouched by any filter tap: written as zeros);
// 3. the output overwritten, never accumulated;
// 4. the workspace: asked with the declared sizes (a quarter of the output's
//    bytes rounded up to 256, at least 256; twice that for autotuning) and
//    overwritten with 0xff bytes;
// 5. describe()'s fields and the cache's keys (alignment is part of them);
// 6. what a GPU would fault on, refused with a message naming the key and
//    the operand: host memory, freed memory, a misaligned pointer, an output
//    or workspace overlapping an input; keys cuDNN would not build;
// 7. autotuning: once per benchmark key, its workspace first; an
//    OutOfMemory from it keeps the heuristics' plan and says why; refused
//    while the stream is captured;
// 8. capture: the convolution recorded, not run, and run at each replay
//    with the memory's contents then; an operand freed before a replay fails
//    it.
// Tolerances (relative to max|ref|, the reduction being in double on both
// sides so that the output's one rounding dominates): f32 sqrt(k)·2^-24·4,
// f16 2^-11, bf16 2^-8 (their unit roundoffs), f64 0; plus, for all, the two
// double sums' own error bound 2·k²·2^-53 (inputs in [-1, 1), so every
// partial sum is at most k), k the reduction's length.
#include <QtTest>

#include <cudnn.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/conv/conv_cudnn.h"
#include "tests/cuda_emulator/emulator.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"

using tb::DType;
using tb::Layout;
using tb::Tensor;
using tb::cuda::ConvOp;
using tb::cuda::ConvPlanCache;
using tb::cuda::ConvPlanKey;
using tb::test::error_of;

namespace {

// ---------------------------------------------------------------- device memory

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw tb::Error(std::string(what) + ": " + cudaGetErrorName(e));
}

// cudaMalloc'd bytes (0xff-filled by the emulator), freed at the end of scope
// unless freed early (release()).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda_ok(cudaMalloc(&p_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  unsigned char* bytes_ptr() const { return static_cast<unsigned char*>(p_); }
  size_t size() const { return bytes_; }
  void release() {
    if (p_) (void)cudaFree(p_), p_ = nullptr;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

void upload(void* dst, const void* src, size_t bytes) {
  cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, nullptr), "upload");
}

std::vector<unsigned char> download(const void* src, size_t bytes) {
  std::vector<unsigned char> out(bytes);
  cuda_ok(cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDeviceToHost, nullptr), "download");
  return out;
}

// ---------------------------------------------------------------- element values

double value_of(const unsigned char* raw, DType t, int64_t i) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, raw + 4 * i, 4);
      return f;
    }
    case DType::F64: {
      double d;
      std::memcpy(&d, raw + 8 * i, 8);
      return d;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, raw + 2 * i, 2);
      return t == DType::F16 ? tb::test::f16_to_double(h) : tb::test::bf16_to_double(h);
    }
    default: break;
  }
  return NAN;
}

// n values uniform in [-1, 1) (never 0), rounded to t, as t's bytes.
std::vector<unsigned char> random_bytes(int64_t n, DType t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const size_t e = tb::dtype_size(t);
  std::vector<unsigned char> raw(size_t(n) * e);
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(rng);
    if (v == 0.0) v = 0.5;
    const float f = float(v);
    uint16_t h = 0;
    switch (t) {
      case DType::F32: std::memcpy(&raw[size_t(i) * e], &f, 4); break;
      case DType::F64: std::memcpy(&raw[size_t(i) * e], &v, 8); break;
      case DType::F16: h = tb_emu::half_bits_rn(f); std::memcpy(&raw[size_t(i) * e], &h, 2); break;
      case DType::BF16:
        h = tb_emu::bfloat16_bits_rn(f);
        std::memcpy(&raw[size_t(i) * e], &h, 2);
        break;
      default: break;
    }
  }
  return raw;
}

// An f64 host tensor in layout l holding raw's values in the same memory order.
Tensor f64_tensor(const tb::Shape& s, Layout l, const std::vector<unsigned char>& raw, DType t) {
  Tensor x = Tensor::empty(s, DType::F64, tb::Device::cpu(), l);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<double>()[i] = value_of(raw.data(), t, i);
  return x;
}

// ---------------------------------------------------------------- problems

struct Geometry {
  const char* name;
  int64_t N, C, H, W, K, kernel, stride, pad;
};
const Geometry kGeometries[] = {
    {"3x3 stride 1 pad 1", 2, 3, 7, 6, 5, 3, 1, 1},
    {"3x3 stride 2 pad 1", 2, 3, 9, 8, 4, 3, 2, 1},
    {"1x1", 2, 4, 5, 6, 6, 1, 1, 0},
    {"1x1 stride 2", 1, 3, 7, 6, 2, 1, 2, 0},
};

ConvPlanKey key_of(ConvOp op, const Geometry& g, DType t, Layout xl, Layout wl) {
  ConvPlanKey k;
  k.op = op;
  k.N = g.N, k.C = g.C, k.H = g.H, k.W = g.W, k.K = g.K, k.R = g.kernel, k.S = g.kernel;
  k.stride = g.stride, k.pad = g.pad;
  k.dtype = t;
  k.x_layout = xl;
  k.w_layout = wl;
  return k;
}

tb::ConvGeometry geometry_of(const ConvPlanKey& k) {
  return tb::ConvGeometry::make(k.N, k.C, k.H, k.W, k.K, k.R, k.stride, k.pad);
}

// Logical shapes and layouts of run()'s operands by op (conv_cudnn.h).
struct OperandShapes {
  tb::Shape a, b, out;
  Layout la, lb, lout;
};
OperandShapes shapes_of(const ConvPlanKey& k) {
  const tb::Shape x{k.N, k.C, k.H, k.W}, w{k.K, k.C, k.R, k.S}, y{k.N, k.K, k.H_out(), k.W_out()};
  switch (k.op) {
    case ConvOp::Fprop: return {x, w, y, k.x_layout, k.w_layout, k.x_layout};
    case ConvOp::Dgrad: return {y, w, x, k.x_layout, k.w_layout, k.x_layout};
    case ConvOp::Wgrad: return {x, y, w, k.x_layout, k.x_layout, k.w_layout};
  }
  return {};
}

// The sum each output element is: its length (an upper bound for dgrad).
int64_t reduction_length(const ConvPlanKey& k) {
  switch (k.op) {
    case ConvOp::Fprop: return k.C * k.R * k.S;
    case ConvOp::Dgrad: return k.K * k.R * k.S;
    case ConvOp::Wgrad: return k.N * k.H_out() * k.W_out();
  }
  return 0;
}

// One convolution's operands: random inputs on the host and on the device,
// the output on the device (0xff bytes until written).
struct Problem {
  ConvPlanKey key;
  OperandShapes shapes;
  std::vector<unsigned char> a, b;
  std::unique_ptr<DeviceBuffer> da, db, dout;

  Problem(const ConvPlanKey& k, uint64_t seed) : key(k), shapes(shapes_of(k)) {
    std::mt19937_64 rng(seed);
    a = random_bytes(tb::shape_numel(shapes.a), k.dtype, rng);
    b = random_bytes(tb::shape_numel(shapes.b), k.dtype, rng);
    da = std::make_unique<DeviceBuffer>(a.size());
    db = std::make_unique<DeviceBuffer>(b.size());
    dout = std::make_unique<DeviceBuffer>(out_bytes());
    upload(da->get(), a.data(), a.size());
    upload(db->get(), b.data(), b.size());
  }
  size_t out_bytes() const {
    return size_t(tb::shape_numel(shapes.out)) * tb::dtype_size(key.dtype);
  }
  std::vector<unsigned char> out() const { return download(dout->get(), out_bytes()); }
  void set_a(std::vector<unsigned char> v) {
    a = std::move(v);
    upload(da->get(), a.data(), a.size());
  }
  void set_b(std::vector<unsigned char> v) {
    b = std::move(v);
    upload(db->get(), b.data(), b.size());
  }

  // The CPU reference backend's convolution in f64 on the same values and
  // layouts: out's values in its memory order.
  std::vector<double> reference() const {
    tb::Backend& cpu = tb::test::cpu_reference();
    const tb::ConvGeometry g = geometry_of(key);
    const Tensor ta = f64_tensor(shapes.a, shapes.la, a, key.dtype);
    const Tensor tbb = f64_tensor(shapes.b, shapes.lb, b, key.dtype);
    Tensor out = Tensor::empty(shapes.out, DType::F64, tb::Device::cpu(), shapes.lout), none;
    switch (key.op) {
      case ConvOp::Fprop: tb::conv::forward(cpu, g, ta, tbb, none, out); break;
      case ConvOp::Dgrad: {
        const Tensor x = Tensor::zeros(g.input_shape(), DType::F64, cpu.device(), key.x_layout);
        tb::conv::backward(cpu, g, x, tbb, ta, out, none, none, false);
        break;
      }
      case ConvOp::Wgrad: {
        const Tensor w = Tensor::zeros(g.weight_shape(), DType::F64, cpu.device(), key.w_layout);
        tb::conv::backward(cpu, g, ta, w, tbb, none, out, none, false);
        break;
      }
    }
    return std::vector<double>(out.data_as<double>(), out.data_as<double>() + out.numel());
  }

  // "" when out (as on the device now) matches reference() at the key's tolerance.
  QString mismatch() const {
    const std::vector<double> ref = reference();
    const std::vector<unsigned char> got = out();
    double max_ref = 0;
    for (double v : ref) max_ref = std::max(max_ref, std::abs(v));
    const double k = double(reduction_length(key));
    const double rel = key.dtype == DType::F32    ? std::sqrt(k) * std::ldexp(1.0, -24) * 4
                       : key.dtype == DType::F16  ? std::ldexp(1.0, -11)
                       : key.dtype == DType::BF16 ? std::ldexp(1.0, -8)
                                                  : 0.0;
    const double tol = rel * max_ref + 2 * k * k * std::ldexp(1.0, -53);
    if (!(max_ref > 0)) return "the reference is all zeros";
    for (size_t i = 0; i < ref.size(); ++i) {
      const double v = value_of(got.data(), key.dtype, int64_t(i));
      if (!(std::abs(v - ref[i]) <= tol))
        return QString("%1: element %2 (memory order) is %3, the reference %4 (tolerance %5)")
            .arg(QString::fromStdString(key.str()))
            .arg(i)
            .arg(v, 0, 'g', 17)
            .arg(ref[i], 0, 'g', 17)
            .arg(tol, 0, 'g', 3);
    }
    return "";
  }
};

// ---------------------------------------------------------------- a handle and its cache

struct WorkspaceCall {
  size_t bytes;
  bool autotuning;
  void* p;
};

// A cuDNN handle on a stream of its own, its ConvPlanCache, and a workspace
// callback that records its calls and hands out fresh device memory filled
// with zero bytes (so the scribble shows), or what `serve` returns.
class Plans {
 public:
  Plans() {
    if (cudnnCreate(&handle_) != CUDNN_STATUS_SUCCESS) throw tb::Error("cudnnCreate failed");
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cudnnSetStream(handle_, stream_) != CUDNN_STATUS_SUCCESS)
      throw tb::Error("cudnnSetStream failed");
    cache_ = std::make_unique<ConvPlanCache>(handle_);
  }
  ~Plans() {
    cache_.reset();
    (void)cudnnDestroy(handle_);
    (void)cudaStreamDestroy(stream_);
  }
  ConvPlanCache& cache() { return *cache_; }
  cudaStream_t stream() const { return stream_; }

  std::function<void*(size_t, bool)> workspace() {
    return [this](size_t bytes, bool autotuning) {
      void* p = nullptr;
      if (serve) {
        p = serve(bytes, autotuning);
      } else {
        buffers_.push_back(std::make_unique<DeviceBuffer>(bytes));
        p = buffers_.back()->get();
        cuda_ok(cudaMemsetAsync(p, 0, bytes, nullptr), "cudaMemsetAsync");
      }
      calls.push_back({bytes, autotuning, p});
      return p;
    };
  }
  void run(const ConvPlanKey& k, const Problem& p) {
    cache_->run(k, p.da->get(), p.db->get(), p.dout->get(), workspace());
  }
  void run(const Problem& p) { run(p.key, p); }

  std::vector<WorkspaceCall> calls;
  std::function<void*(size_t, bool)> serve;

 private:
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<ConvPlanCache> cache_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

bool all_bytes(const std::vector<unsigned char>& v, unsigned char b) {
  for (unsigned char c : v)
    if (c != b) return false;
  return true;
}

nlohmann::json record_of(const ConvPlanCache& c, const ConvPlanKey& k) {
  const nlohmann::json d = c.describe();
  return d.contains(k.str()) ? d[k.str()] : nlohmann::json();
}

const Geometry& basic() { return kGeometries[0]; }

// f16 or bf16 bytes of values the type holds exactly.
std::vector<unsigned char> lp_bytes(DType t, std::initializer_list<double> values) {
  std::vector<unsigned char> raw;
  for (double v : values) {
    const uint16_t h =
        t == DType::F16 ? tb_emu::half_bits_rn(float(v)) : tb_emu::bfloat16_bits_rn(float(v));
    raw.push_back(uint8_t(h & 0xff));
    raw.push_back(uint8_t(h >> 8));
  }
  return raw;
}

}  // namespace

// A slot's unexpected exception fails it with its message (and the next
// slots still run).
#define CONV_TRY try {
#define CONV_CATCH                                                        \
  }                                                                       \
  catch (const std::exception& e) {                                       \
    QFAIL(qPrintable(QString("unexpected exception: ") + e.what()));     \
  }

class TestEmulatedConv : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    // One emulated device unless the environment says otherwise (read at
    // the runtime's first call, which is after this).
    if (qEnvironmentVariableIsEmpty("TRAINBENCH_EMULATED_GPUS"))
      qputenv("TRAINBENCH_EMULATED_GPUS", "1");
    int n = 0;
    QCOMPARE(cudaGetDeviceCount(&n), cudaSuccess);
    QVERIFY(n >= 1);
  }

  void handle_calls() {
    CONV_TRY
    QCOMPARE(cudnnGetVersion(), size_t(91900));
    QCOMPARE(std::string(cudnnGetErrorString(CUDNN_STATUS_SUCCESS)), "CUDNN_STATUS_SUCCESS");
    QCOMPARE(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)), "CUDNN_STATUS_BAD_PARAM");
    QCOMPARE(int(CUDNN_STATUS_ALLOC_FAILED), 4003);  // cuDNN 9's value of the old name
    QCOMPARE(std::string(cudnnGetErrorString(CUDNN_STATUS_ALLOC_FAILED)),
             "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED");
    cudnnHandle_t h = nullptr;
    QCOMPARE(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    cudaStream_t s = nullptr, got = reinterpret_cast<cudaStream_t>(1);
    QCOMPARE(cudnnGetStream(h, &got), CUDNN_STATUS_SUCCESS);
    QVERIFY(got == nullptr);  // the legacy default stream at first
    QCOMPARE(cudaStreamCreate(&s), cudaSuccess);
    QCOMPARE(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
    QCOMPARE(cudnnGetStream(h, &got), CUDNN_STATUS_SUCCESS);
    QVERIFY(got == s);
    // A cache whose handle is gone says so on its next run.
    {
      ConvPlanCache cache(h);
      QCOMPARE(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
      Problem p(key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NCHW), 1);
      DeviceBuffer ws(1 << 16);
      const std::string e = error_of([&] {
        cache.run(p.key, p.da->get(), p.db->get(), p.dout->get(),
                  [&](size_t, bool) { return ws.get(); });
      });
      QVERIFY2(e.find("cudnnGetStream failed") != std::string::npos &&
                   e.find("CUDNN_STATUS_BAD_PARAM") != std::string::npos,
               e.c_str());
    }
    QCOMPARE(cudnnGetStream(h, &got), CUDNN_STATUS_BAD_PARAM);
    QCOMPARE(cudnnSetStream(h, s), CUDNN_STATUS_BAD_PARAM);
    QCOMPARE(cudnnDestroy(h), CUDNN_STATUS_BAD_PARAM);  // twice
    QCOMPARE(cudnnCreate(nullptr), CUDNN_STATUS_BAD_PARAM);
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
    CONV_CATCH
  }

  void matches_cpu_reference_data() {
    QTest::addColumn<int>("op");
    QTest::addColumn<int>("x_layout");
    QTest::addColumn<int>("w_layout");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<int>("geometry");
    const char* ops[] = {"fprop", "dgrad", "wgrad"};
    for (int op = 0; op < 3; ++op)
      for (Layout xl : {Layout::NCHW, Layout::NHWC})
        for (Layout wl : {Layout::NCHW, Layout::NHWC})
          for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
            for (int g = 0; g < int(std::size(kGeometries)); ++g)
              QTest::addRow("%s x=%s w=%s %s %s", ops[op], tb::layout_name(xl),
                            wl == Layout::NCHW ? "KCRS" : "KRSC", tb::dtype_name(t),
                            kGeometries[g].name)
                  << op << int(xl) << int(wl) << int(t) << g;
  }
  void matches_cpu_reference() {
    CONV_TRY
    QFETCH(int, op);
    QFETCH(int, x_layout);
    QFETCH(int, w_layout);
    QFETCH(int, dtype);
    QFETCH(int, geometry);
    const ConvPlanKey k = key_of(ConvOp(op), kGeometries[geometry], DType(dtype),
                                 Layout(x_layout), Layout(w_layout));
    Plans plans;
    Problem p(k, 1000 + uint64_t(op * 100 + geometry * 10 + dtype));
    plans.run(p);
    const QString m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    CONV_CATCH
  }

  // cuDNN's alpha 1, beta 0: what out held is gone (0x3f bytes: finite in
  // every dtype), and a second run writes the same bits.
  void output_is_overwritten() {
    CONV_TRY
    for (ConvOp op : {ConvOp::Fprop, ConvOp::Dgrad, ConvOp::Wgrad}) {
      Plans plans;
      Problem p(key_of(op, basic(), DType::F32, Layout::NHWC, Layout::NCHW), 7);
      cuda_ok(cudaMemsetAsync(p.dout->get(), 0x3f, p.out_bytes(), nullptr), "memset");
      plans.run(p);
      const QString m = p.mismatch();
      QVERIFY2(m.isEmpty(), qPrintable(m));
      const std::vector<unsigned char> first = p.out();
      plans.run(p);
      QVERIFY2(p.out() == first, "a second run changed out");
    }
    CONV_CATCH
  }

  // Each f16/bf16 output is the exact sum rounded once: 1 + u + 2^-30 (u half
  // the type's ulp at 1) lies just above the tie, so it rounds up to 1 + 2u;
  // a detour through float would make it the tie and round it to even, 1.
  void low_precision_output_rounded_once() {
    CONV_TRY
    const Geometry one{"1x1 pixel", 1, 3, 1, 1, 1, 1, 1, 0};
    for (DType t : {DType::F16, DType::BF16}) {
      Plans plans;
      Problem p(key_of(ConvOp::Fprop, one, t, Layout::NCHW, Layout::NCHW), 1);
      const double u = std::ldexp(1.0, t == DType::F16 ? -11 : -8), q = std::ldexp(1.0, -15);
      p.set_a(lp_bytes(t, {1.0, u, q}));
      p.set_b(lp_bytes(t, {1.0, 1.0, q}));
      plans.run(p);
      QCOMPARE(p.out(), lp_bytes(t, {1.0 + 2 * u}));
    }
    CONV_CATCH
  }

  // Sizes worked out by hand from the rule (a quarter of out's bytes, up to
  // a multiple of 256, at least 256), not from the implementation's function.
  void workspace_sizes_and_scribble() {
    CONV_TRY
    struct Case {
      ConvPlanKey key;
      size_t want;
    };
    const Geometry big{"big", 4, 3, 16, 16, 16, 3, 1, 1};
    const Geometry tiny{"tiny", 1, 1, 1, 1, 1, 1, 1, 0};
    const Case cases[] = {
        // y 2·5·7·6 f32 = 1680 bytes -> 420 -> 512
        {key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NCHW), 512},
        // dx 2·3·7·6 f16 = 504 bytes -> 126 -> 256
        {key_of(ConvOp::Dgrad, basic(), DType::F16, Layout::NHWC, Layout::NHWC), 256},
        // dw 16·3·3·3 f64 = 3456 bytes -> 864 -> 1024
        {key_of(ConvOp::Wgrad, big, DType::F64, Layout::NCHW, Layout::NHWC), 1024},
        // y 4·16·16·16 f32 = 65536 bytes -> 16384
        {key_of(ConvOp::Fprop, big, DType::F32, Layout::NCHW, Layout::NCHW), 16384},
        // y 1 bf16 = 2 bytes -> 0 -> at least 256
        {key_of(ConvOp::Fprop, tiny, DType::BF16, Layout::NCHW, Layout::NCHW), 256},
    };
    for (const Case& c : cases) {
      Plans plans;
      Problem p(c.key, 11);
      plans.run(p);
      QCOMPARE(plans.calls.size(), size_t(1));
      QCOMPARE(plans.calls[0].bytes, c.want);
      QCOMPARE(plans.calls[0].autotuning, false);
      QCOMPARE(record_of(plans.cache(), c.key).value("workspace_bytes", int64_t(-1)),
               int64_t(c.want));
      QVERIFY2(all_bytes(download(plans.calls[0].p, c.want), 0xff),
               "the workspace was not overwritten with 0xff bytes");
    }
    CONV_CATCH
  }

  void describe_and_cache_keys() {
    CONV_TRY
    Plans plans;
    QCOMPARE(plans.cache().size(), size_t(0));
    QVERIFY(plans.cache().describe().empty());
    Problem f(key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NCHW), 21);
    Problem d(key_of(ConvOp::Dgrad, basic(), DType::BF16, Layout::NHWC, Layout::NHWC), 22);
    Problem w(key_of(ConvOp::Wgrad, basic(), DType::F16, Layout::NHWC, Layout::NCHW), 23);
    for (const Problem* p : {&f, &d, &w}) plans.run(*p);
    plans.run(f);  // the same key: the same entry
    QCOMPARE(plans.cache().size(), size_t(3));
    const char* loops[] = {"host: fprop", "host: dgrad", "host: wgrad"};
    for (const Problem* p : {&f, &d, &w}) {
      const nlohmann::json r = record_of(plans.cache(), p->key);
      QVERIFY2(r.is_object(), p->key.str().c_str());
      QCOMPARE(r.size(), size_t(4));
      QCOMPARE(r.value("path", ""), std::string("cudnn-emulated"));
      QVERIFY2(r.value("plan", "").rfind(loops[int(p->key.op)], 0) == 0, r.dump().c_str());
      QVERIFY(r.value("workspace_bytes", int64_t(-1)) >= 256);
      QCOMPARE(r.value("chosen_by", ""), std::string("heuristics' first choice"));
    }
    // Operands aligned to less than 16 bytes are another key (as cuDNN's
    // graphs declare the alignment): x 4 bytes into its buffer.
    DeviceBuffer shifted(f.a.size() + 16);
    upload(shifted.bytes_ptr() + 4, f.a.data(), f.a.size());
    plans.cache().run(f.key, shifted.bytes_ptr() + 4, f.db->get(), f.dout->get(), plans.workspace());
    QCOMPARE(plans.cache().size(), size_t(4));
    ConvPlanKey k4 = f.key;
    k4.align_a = 4;
    QVERIFY(k4.str().find("align=4/16/16") != std::string::npos);
    QVERIFY2(record_of(plans.cache(), k4).is_object(), plans.cache().describe().dump().c_str());
    CONV_CATCH
  }

  // What a GPU would fault on or corrupt: refused before anything is
  // enqueued, naming the key and the operand.
  void bad_operands_refused() {
    CONV_TRY
    Plans plans;
    Problem p(key_of(ConvOp::Wgrad, basic(), DType::F32, Layout::NCHW, Layout::NCHW), 31);
    const std::string key = p.key.str();
    std::vector<float> host(1 << 14);
    auto run_with = [&](const void* a, const void* b, void* out) {
      return error_of([&] { plans.cache().run(p.key, a, b, out, plans.workspace()); });
    };
    auto expect = [&](const std::string& e, const char* what, const char* why) {
      QVERIFY2(e.find(key) != std::string::npos && e.find(what) != std::string::npos &&
                   e.find(why) != std::string::npos,
               e.c_str());
    };
    expect(run_with(host.data(), p.db->get(), p.dout->get()), "a (x)", "not device memory");
    expect(run_with(p.da->get(), host.data(), p.dout->get()), "b (dy)", "not device memory");
    expect(run_with(p.da->get(), p.db->get(), host.data()), "out (dw)", "not device memory");
    // Past its allocation's end: dy's buffer is the operand a (x) needs less of.
    Problem small(key_of(ConvOp::Wgrad, kGeometries[3], DType::F32, Layout::NCHW, Layout::NCHW), 1);
    expect(run_with(small.da->get(), p.db->get(), p.dout->get()), "a (x)", "not device memory");
    // The workspace, and autotuning's.
    plans.serve = [&](size_t, bool) { return host.data(); };
    expect(run_with(p.da->get(), p.db->get(), p.dout->get()), "workspace", "not device memory");
    {
      ConvPlanKey bench = p.key;
      bench.benchmark = true;
      const std::string e = error_of([&] {
        plans.cache().run(bench, p.da->get(), p.db->get(), p.dout->get(), plans.workspace());
      });
      QVERIFY2(e.find("autotuning's workspace at") != std::string::npos &&
                   e.find(bench.str()) != std::string::npos,
               e.c_str());
    }
    plans.serve = nullptr;
    // Out of place only; a workspace of its own.
    expect(run_with(p.da->get(), p.db->get(), p.da->get()), "out (dw) overlaps operand a (x)", "");
    plans.serve = [&](size_t, bool) { return p.db->get(); };
    expect(run_with(p.da->get(), p.db->get(), p.dout->get()), "workspace overlaps operand b (dy)",
           "");
    plans.serve = nullptr;
    // An f32 operand 2 bytes into its buffer.
    DeviceBuffer odd(p.a.size() + 16);
    upload(odd.bytes_ptr() + 2, p.a.data(), p.a.size());
    expect(run_with(odd.bytes_ptr() + 2, p.db->get(), p.dout->get()), "a (x)", "not aligned");
    // An output 4 bytes in: aligned for its floats, but not for the 16-byte
    // stores the real cuDNN made there.
    DeviceBuffer shifted(p.out_bytes() + 16);
    expect(run_with(p.da->get(), p.db->get(), shifted.bytes_ptr() + 4), "output at",
           "not 16-byte aligned");
    // Freed memory is no longer device memory.
    DeviceBuffer gone(p.out_bytes());
    void* stale = gone.get();
    gone.release();
    expect(run_with(p.da->get(), p.db->get(), stale), "out (dw)", "not device memory");
    CONV_CATCH
  }

  // Keys cuDNN would not build: refused, nothing cached.
  void bad_keys_refused() {
    CONV_TRY
    Plans plans;
    Problem p(key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NCHW), 41);
    auto error_for = [&](const ConvPlanKey& k) {
      return error_of([&] {
        plans.cache().run(k, p.da->get(), p.db->get(), p.dout->get(), plans.workspace());
      });
    };
    ConvPlanKey k = p.key;
    k.dtype = DType::I32;
    QVERIFY(error_for(k).find("unsupported dtype i32") != std::string::npos);
    k = p.key;
    k.x_layout = Layout::NCHW16C;
    QVERIFY(error_for(k).find("is neither NCHW nor NHWC") != std::string::npos);
    k = p.key;
    k.w_layout = Layout::NCHW16C;
    QVERIFY(error_for(k).find("is neither NCHW nor NHWC") != std::string::npos);
    // A filter one row taller than the padded input, which H_out's rounding
    // toward zero would turn into one output row at stride 2.
    k = p.key;
    k.R = k.H + 2 * k.pad + 1;
    k.stride = 2;
    QCOMPARE(k.H_out(), int64_t(1));
    QVERIFY(error_for(k).find("no such convolution") != std::string::npos);
    QCOMPARE(plans.cache().size(), size_t(0));
    QVERIFY(plans.calls.empty());
    CONV_CATCH
  }

  void autotune_once_with_its_workspace_first() {
    CONV_TRY
    Plans plans;
    ConvPlanKey k = key_of(ConvOp::Dgrad, kGeometries[1], DType::F16, Layout::NHWC, Layout::NHWC);
    k.benchmark = true;
    Problem p(k, 51);
    const size_t ws = 256;  // dx 2·3·9·8 f16 = 864 bytes -> 216 -> 256
    QCOMPARE(record_of(plans.cache(), k), nlohmann::json());
    plans.run(p);
    QCOMPARE(plans.calls.size(), size_t(2));
    QCOMPARE(plans.calls[0].bytes, 2 * ws);
    QCOMPARE(plans.calls[0].autotuning, true);
    QCOMPARE(plans.calls[1].bytes, ws);
    QCOMPARE(plans.calls[1].autotuning, false);
    QVERIFY(all_bytes(download(plans.calls[0].p, 2 * ws), 0xff));  // autotuning used it
    QCOMPARE(record_of(plans.cache(), k).value("chosen_by", ""),
             std::string("autotune over 1 plans"));
    QString m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    plans.run(p);  // tuned: the execution's workspace only
    QCOMPARE(plans.calls.size(), size_t(3));
    QCOMPARE(plans.calls[2].autotuning, false);
    m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    CONV_CATCH
  }

  // As PyTorch's benchmark mode skips an algorithm whose workspace it cannot
  // allocate: the heuristics' plan runs, once and for all, and says why.
  void autotune_out_of_memory_keeps_the_heuristics_plan() {
    CONV_TRY
    Plans plans;
    ConvPlanKey k = key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NHWC);
    k.benchmark = true;
    Problem p(k, 61);
    DeviceBuffer ws(512);
    int tuning_asks = 0;
    plans.serve = [&](size_t bytes, bool autotuning) -> void* {
      if (autotuning) {
        ++tuning_asks;
        throw tb::OutOfMemory("emulated: no room for " + std::to_string(bytes), bytes);
      }
      return ws.get();
    };
    plans.run(p);
    QCOMPARE(tuning_asks, 1);
    QCOMPARE(record_of(plans.cache(), k).value("chosen_by", ""),
             std::string("heuristics' first choice (autotuning's workspace of 1024 bytes did not "
                         "fit)"));
    QString m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    plans.run(p);
    QCOMPARE(tuning_asks, 1);  // no second try
    m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    // Any other failure of the callback is the run's, and the key stays untuned.
    ConvPlanKey k2 = k;
    k2.op = ConvOp::Wgrad;
    Problem q(k2, 62);
    plans.serve = [](size_t, bool) -> void* { throw tb::Error("emulated: the callback broke"); };
    QCOMPARE(error_of([&] { plans.run(q); }), std::string("emulated: the callback broke"));
    QCOMPARE(record_of(plans.cache(), k2).value("chosen_by", ""), std::string("not yet autotuned"));
    CONV_CATCH
  }

  // Autotuning synchronises the device: refused while the stream is
  // captured, with conv_cudnn_cuda.cpp's message; a tuned key is captured.
  void autotune_refused_while_capturing() {
    CONV_TRY
    Plans plans;
    ConvPlanKey k = key_of(ConvOp::Fprop, basic(), DType::F32, Layout::NCHW, Layout::NCHW);
    k.benchmark = true;
    Problem p(k, 71);
    DeviceBuffer ws(1 << 12);
    plans.serve = [&](size_t, bool) { return ws.get(); };
    QCOMPARE(cudaStreamBeginCapture(plans.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const std::string e = error_of([&] { plans.run(p); });
    QVERIFY2(e == "cudnn: convolution " + k.str() +
                      " has no autotuned plan and a CUDA graph is being captured (autotuning "
                      "synchronises the device, which would void the capture); the eager "
                      "warm-up steps before a capture should have met this shape",
             e.c_str());
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(plans.stream(), &g), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    plans.run(p);  // eager: tuned
    QCOMPARE(cudaStreamBeginCapture(plans.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    plans.run(p);
    QCOMPARE(cudaStreamEndCapture(plans.stream(), &g), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    CONV_CATCH
  }

  // Captured: recorded, not run; each replay runs it on the memory as it is
  // then (new inputs, a scribbled workspace); a freed operand fails a replay.
  void capture_records_and_replays() {
    CONV_TRY
    Plans plans;
    Problem p(key_of(ConvOp::Wgrad, kGeometries[1], DType::BF16, Layout::NHWC, Layout::NCHW), 81);
    DeviceBuffer ws(1 << 12);
    plans.serve = [&](size_t, bool) { return ws.get(); };
    cuda_ok(cudaMemsetAsync(ws.get(), 0, ws.size(), nullptr), "memset");
    QCOMPARE(cudaStreamBeginCapture(plans.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    plans.run(p);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(plans.stream(), &g), cudaSuccess);
    QVERIFY2(all_bytes(p.out(), 0xff), "the captured convolution ran at capture");
    QVERIFY2(all_bytes(download(ws.get(), 256), 0), "the captured convolution ran at capture");
    cudaGraphExec_t x = nullptr;
    QCOMPARE(cudaGraphInstantiate(&x, g), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, plans.stream()), cudaSuccess);
    QString m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    QVERIFY(all_bytes(download(ws.get(), plans.calls.back().bytes), 0xff));
    std::mt19937_64 rng(82);
    p.set_a(random_bytes(tb::shape_numel(p.shapes.a), p.key.dtype, rng));
    QCOMPARE(cudaGraphLaunch(x, plans.stream()), cudaSuccess);
    m = p.mismatch();
    QVERIFY2(m.isEmpty(), qPrintable(m));
    p.db->release();
    const std::string e = error_of([&] { (void)cudaGraphLaunch(x, plans.stream()); });
    QVERIFY2(e.find(p.key.str()) != std::string::npos && e.find("b (dy)") != std::string::npos &&
                 e.find("not device memory") != std::string::npos,
             e.c_str());
    QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    CONV_CATCH
  }
};

QTEST_GUILESS_MAIN(TestEmulatedConv)
#include "test_emulated_conv.moc"
