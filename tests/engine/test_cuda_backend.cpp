// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend against the CPU reference backend (the oracle): every op on
// fresh random inputs (never zeros), run on both, compared with tolerances
// stated per op and precision:
//   exact        copies, fills, layout conversion, ReLU, add, max-pool
//                values/argmax/gradient, optimizer per-tensor vs multi-tensor
//   fp32 1e-5    pointwise math (GELU uses erff/expf), losses, pooling sums, BN
//   fp32 1e-4    cuBLAS GEMMs (FP32 compute, other summation order), relative
//                to the largest reference magnitude
//   fp32 conv    cuDNN convolutions: strict fp32 engines (no TF32, no
//                down-converted inputs: conv_engine_filter), so a tolerance
//                from fp32's roundoff and the reduction length
//                (tb::test::network_tolerance with a margin of 4 layers for
//                the Winograd/FFT transforms), relative to the output's size
// Each comparison prints a "tb-tolerance" line (gpu_slot.h) with its worst
// error over its tolerance, for scripts/gpu-check.sh's summary.
// Slots that need a device begin with QSKIP when there is none (or the build
// has no CUDA backend); the allocator size classes and the convolution plan
// key need no device and run everywhere.
//
// NOTE: written on a machine without a GPU. The GPU slots compiled there and
// skipped; their first real run is scripts/gpu-check.sh (docs/gpu-check.md).
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/conv_cudnn.h"
#include "engine/core/error.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "tests/engine/gpu_slot.h"

using namespace tb;

namespace {

Tensor random_host(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0,
                   Layout l = Layout::NCHW) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(s, DType::F32, Device::cpu(), l);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    if (v == 0.0) v = 0.5;  // never an exact zero
    t.data_as<float>()[i] = float(v);
  }
  return t;
}

// Worst element of |got − ref| > atol + rtol·scale, where scale is the largest
// |ref| (so near-zero elements of a GEMM output are judged against the output's size).
struct Cmp {
  bool ok = true;
  std::string msg;
};
Cmp compare(const Tensor& ref, const Tensor& got, double rtol, double atol, const char* what,
            bool scale_by_max = false) {
  Cmp c;
  if (ref.shape() != got.shape() || ref.dtype() != got.dtype()) {
    c.ok = false;
    c.msg = std::string(what) + ": " + ref.describe() + " vs " + got.describe();
    return c;
  }
  auto val = [](const Tensor& t, int64_t i) -> double {
    switch (t.dtype()) {
      case DType::F64:
        return t.data_as<double>()[i];
      case DType::I32:
        return t.data_as<int32_t>()[i];
      default:
        return t.data_as<float>()[i];
    }
  };
  double mx = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) mx = std::max(mx, std::abs(val(ref, i)));
  double worst = 0.0;
  int64_t at = -1;
  double worst_ratio = -1.0, ratio_err = 0.0, ratio_tol = 1.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = val(ref, i), g = val(got, i);
    const double tol = atol + rtol * (scale_by_max ? mx : std::abs(r));
    const double err = std::abs(r - g);
    if (!(err <= tol) && (at < 0 || err > worst)) worst = err, at = i;  // NaN counts as failure
    if (tol > 0 && !(err / tol <= worst_ratio)) worst_ratio = err / tol, ratio_err = err, ratio_tol = tol;
  }
  if (ref.numel() > 0 && (rtol > 0 || atol > 0))
    tb::test::report_tolerance(ref.dtype() == DType::F64 ? "fp64" : "fp32", ratio_err, ratio_tol,
                               what);
  if (at >= 0) {
    c.ok = false;
    c.msg = std::string(what) + ": element " + std::to_string(at) + " ref " +
            std::to_string(val(ref, at)) + " got " + std::to_string(val(got, at)) + " (|diff| " +
            std::to_string(worst) + ", rtol " + std::to_string(rtol) + ", atol " +
            std::to_string(atol) + ")";
  }
  return c;
}

#define EXPECT_CLOSE(ref, got, rtol, atol, what)                \
  do {                                                          \
    const Cmp c_ = compare((ref), (got), (rtol), (atol), what); \
    QVERIFY2(c_.ok, c_.msg.c_str());                            \
  } while (0)
#define EXPECT_CLOSE_SCALED(ref, got, rtol, what)                  \
  do {                                                             \
    const Cmp c_ = compare((ref), (got), (rtol), 0.0, what, true); \
    QVERIFY2(c_.ok, c_.msg.c_str());                               \
  } while (0)

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

#ifdef TRAINBENCH_HAVE_CUDA
// A stand-in for the CUDA runtime calls of the caching allocator
// (AllocatorRuntime): device memory is made-up addresses, the thread's stream
// capture mode a thread_local, and every call is recorded.
namespace fake_runtime {
thread_local int capture_mode = 0;  // 0 = global, the runtime's default
std::vector<int> modes_at_malloc;   // the calling thread's mode at each cudaMalloc
int exchanges = 0, frees = 0, fail_next = 0;
uintptr_t next_address = 0x10000000;
void reset() {
  capture_mode = 0;
  modes_at_malloc.clear();
  exchanges = frees = fail_next = 0;
}
tb::cuda::AllocatorRuntime runtime() {
  tb::cuda::AllocatorRuntime rt;
  rt.malloc = [](void** p, size_t bytes) {
    modes_at_malloc.push_back(capture_mode);
    if (fail_next > 0) {
      --fail_next;
      return tb::cuda::kCudaErrorMemoryAllocation;
    }
    *p = reinterpret_cast<void*>(next_address);
    next_address += bytes;
    return tb::cuda::kCudaSuccess;
  };
  rt.free = [](void*) { return ++frees, tb::cuda::kCudaSuccess; };
  rt.get_device = [](int* d) { return *d = 0, tb::cuda::kCudaSuccess; };
  rt.set_device = [](int) { return tb::cuda::kCudaSuccess; };
  rt.mem_get_info = [](size_t* f, size_t* t) {
    *f = size_t(1) << 30, *t = size_t(2) << 30;
    return tb::cuda::kCudaSuccess;
  };
  rt.clear_last_error = [] { return tb::cuda::kCudaSuccess; };
  rt.exchange_capture_mode = [](int* mode) {
    std::swap(*mode, capture_mode);
    ++exchanges;
    return tb::cuda::kCudaSuccess;
  };
  return rt;
}
}  // namespace fake_runtime
#endif

}  // namespace

class TestCudaBackend : public QObject {
  Q_OBJECT

 private:
  bool cuda_available = false;
  QByteArray why;
  CpuBackend cpu{BackendOptions{.reference = true}};
  std::unique_ptr<Backend> gpu;

  Tensor up(const Tensor& h) {
    Tensor d = gpu->empty(h.shape(), h.dtype(), h.layout());
    gpu->copy(h, d);
    return d;
  }
  Tensor down(const Tensor& d) {
    Tensor h = Tensor::empty(d.shape(), d.dtype(), Device::cpu(), d.layout());
    gpu->copy(d, h);
    return h;
  }
  // A host NCHW tensor in `l` (through the GPU's explicit conversion).
  Tensor up_as(const Tensor& h, Layout l) {
    Tensor d = gpu->empty(h.shape(), h.dtype(), l);
    gpu->copy(h, d);
    return d;
  }
  Tensor down_nchw(const Tensor& d) {
    Tensor h = Tensor::empty(d.shape(), d.dtype(), Device::cpu(), Layout::NCHW);
    gpu->copy(d, h);
    return h;
  }
#ifdef TRAINBENCH_HAVE_CUDA
  CudaBackend& cuda() { return static_cast<CudaBackend&>(*gpu); }
#endif

#define NEED_GPU() \
  if (!cuda_available) QSKIP(("no CUDA device: " + why).constData())

 private slots:
  void initTestCase() {
#ifdef TRAINBENCH_HAVE_CUDA
    std::string reason;
    const int n = cuda_device_count(&reason);
    if (n > 0) {
      gpu = make_cuda_backend(0, BackendOptions{});
      cuda_available = true;
      qInfo("%s", gpu->describe().dump().c_str());
    } else {
      why = QByteArray::fromStdString(reason);
    }
#else
    why = "this build has no CUDA backend (TRAINBENCH_HAVE_CUDA is not defined)";
#endif
  }

  // ------------------------------------------------------------ no device needed

  void allocatorSizeClasses() {
    using namespace tb::cuda;
    QCOMPARE(round_size(0), size_t(512));
    QCOMPARE(round_size(1), size_t(512));
    QCOMPARE(round_size(512), size_t(512));
    QCOMPARE(round_size(513), size_t(1024));
    QCOMPARE(round_size(1000 * 1000), size_t(1000448));  // 1954 · 512
    QCOMPARE(round_size(kSmallLimit), kSmallLimit);
    QCOMPARE(round_size(kSmallLimit + 1), size_t(2) << 20);
    QCOMPARE(round_size((size_t(2) << 20) + 1), size_t(4) << 20);
    QCOMPARE(round_size(size_t(7) << 20), size_t(8) << 20);
    QVERIFY(is_small(round_size(kSmallLimit)));
    QVERIFY(!is_small(round_size(kSmallLimit + 1)));
    for (size_t b : {size_t(3), size_t(4097), size_t(123457), size_t(3) << 21, size_t(99999999)}) {
      const size_t r = round_size(b);
      QVERIFY(r >= b);
      QVERIFY(r % (is_small(r) ? kSmallRound : kLargeRound) == 0);
      QVERIFY(r - b < (is_small(r) ? kSmallRound : kLargeRound));
    }
  }

  // The allocator's bookkeeping against a fake runtime (no GPU): while a CUDA
  // graph is being captured, every cudaMalloc runs in relaxed capture mode and
  // the thread's mode is restored after it, also when it fails; an OOM inside
  // a capture releases no cached block (cudaFree would void the capture).
  void allocatorCaptureModeAroundCudaMalloc() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int stream_a = 0;
    a.set_current_stream(&stream_a);
    void* p = a.allocate(1000);  // eager: the thread's mode is left alone
    QCOMPARE(fr::modes_at_malloc, std::vector<int>{0});
    QCOMPARE(fr::exchanges, 0);
    a.set_capturing(true);
    QVERIFY(a.capturing());
    void* q = a.allocate(3 << 20);
    QCOMPARE(fr::modes_at_malloc.back(), kCaptureModeRelaxed);
    QCOMPARE(fr::capture_mode, 0);  // restored
    QCOMPARE(fr::exchanges, 2);
    fr::capture_mode = 1;  // a thread in thread-local mode gets it back as it was
    void* r = a.allocate(5 << 20);
    QCOMPARE(fr::modes_at_malloc.back(), kCaptureModeRelaxed);
    QCOMPARE(fr::capture_mode, 1);
    fr::capture_mode = 0;
    a.deallocate(p, 1000);
    QVERIFY(a.allocate(1000) == p);  // a cache hit calls nothing
    QCOMPARE(fr::exchanges, 4);
    QCOMPARE(fr::modes_at_malloc.size(), size_t(3));
    // Out of memory inside the capture: one attempt, nothing released, the
    // mode restored, and the message says why.
    a.deallocate(q, 3 << 20);  // a cached block an eager OOM would free
    fr::fail_next = 1;
    bool oom = false;
    try {
      (void)a.allocate(64 << 20);
    } catch (const OutOfMemory& e) {
      oom = true;
      QCOMPARE(e.requested_bytes, size_t(64) << 20);
      QVERIFY2(std::string(e.what()).find("capture") != std::string::npos, e.what());
    }
    QVERIFY(oom);
    QCOMPARE(fr::frees, 0);
    QCOMPARE(fr::capture_mode, 0);
    QCOMPARE(a.stats().oom_retries, int64_t(0));
    // Eager again: the OOM retry gives the cached blocks back and succeeds.
    a.set_capturing(false);
    fr::fail_next = 1;
    const int exchanges = fr::exchanges;
    void* big = a.allocate(64 << 20);
    QVERIFY(big != nullptr);
    QCOMPARE(fr::frees, 1);
    QCOMPARE(a.stats().oom_retries, int64_t(1));
    QCOMPARE(fr::exchanges, exchanges);
    QCOMPARE(fr::modes_at_malloc.back(), 0);
    a.deallocate(r, 5 << 20);
    a.deallocate(big, 64 << 20);
    a.deallocate(p, 1000);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  // Which cuDNN engines each convolution key may use (numerical and behaviour
  // notes), decided without a GPU.
  void convEngineFilter() {
    using namespace tb::cuda;
    ConvPlanKey k;
    k.dtype = DType::F32;
    ConvEngineFilter f = conv_engine_filter(k);
    QVERIFY(f.no_down_convert && f.no_tensor_core);  // strict fp32: no TF32, no narrowing
    QVERIFY(!f.no_reduced_precision_reduction && !f.no_nondeterministic);
    QVERIFY(!f.no_runtime_compiled);
    QCOMPARE(f.max_candidates, 1);
    QVERIFY(!conv_engine_filter(k, /*allow_tf32=*/true).no_tensor_core);
    QVERIFY(conv_engine_filter(k, true).no_down_convert);
    for (DType t : {DType::F16, DType::BF16}) {
      k.dtype = t;
      f = conv_engine_filter(k);
      QVERIFY(f.no_reduced_precision_reduction);  // fp32 accumulation
      QVERIFY(!f.no_tensor_core && !f.no_down_convert);
    }
    k.dtype = DType::F64;
    f = conv_engine_filter(k);
    QVERIFY(f.no_down_convert && !f.no_tensor_core && !f.no_reduced_precision_reduction);
    k.dtype = DType::F32;
    k.deterministic = true;
    QVERIFY(conv_engine_filter(k).no_nondeterministic);
    k.benchmark = true;
    f = conv_engine_filter(k);
    QVERIFY(f.no_runtime_compiled);  // no NVRTC compiles while autotuning
    QCOMPARE(f.max_candidates, kAutotuneCandidates);
    QVERIFY(kAutotuneCandidates > 1 && kAutotuneCandidates <= 16);
    QCOMPARE(QString::fromStdString(f.str()),
             QStringLiteral("no DOWN_CONVERT_INPUTS, no TENSOR_CORE (TF32 off), no "
                            "NONDETERMINISTIC, no RUNTIME_COMPILATION, 10 candidates at most"));
  }

  void convPlanKey() {
    using namespace tb::cuda;
    ConvPlanKey a;
    a.N = 8, a.C = 3, a.H = 32, a.W = 30, a.K = 16, a.R = 3, a.S = 3, a.stride = 2, a.pad = 1;
    QCOMPARE(a.H_out(), int64_t(16));
    QCOMPARE(a.W_out(), int64_t(15));
    const ConvPlanKeyHash hash;
    QVERIFY(a == a);
    QCOMPARE(hash(a), hash(ConvPlanKey(a)));
    // Every field takes part in equality and (for these values) in the hash.
    std::vector<ConvPlanKey> variants;
    auto vary = [&](auto&& f) {
      ConvPlanKey b = a;
      f(b);
      variants.push_back(b);
    };
    vary([](ConvPlanKey& k) { k.op = ConvOp::Dgrad; });
    vary([](ConvPlanKey& k) { k.op = ConvOp::Wgrad; });
    vary([](ConvPlanKey& k) { k.N = 9; });
    vary([](ConvPlanKey& k) { k.C = 4; });
    vary([](ConvPlanKey& k) { k.H = 31; });
    vary([](ConvPlanKey& k) { k.W = 31; });
    vary([](ConvPlanKey& k) { k.K = 17; });
    vary([](ConvPlanKey& k) { k.R = 1; });
    vary([](ConvPlanKey& k) { k.S = 1; });
    vary([](ConvPlanKey& k) { k.stride = 1; });
    vary([](ConvPlanKey& k) { k.pad = 0; });
    vary([](ConvPlanKey& k) { k.dtype = DType::F16; });
    vary([](ConvPlanKey& k) { k.x_layout = Layout::NHWC; });
    vary([](ConvPlanKey& k) { k.w_layout = Layout::NHWC; });
    vary([](ConvPlanKey& k) { k.deterministic = true; });
    vary([](ConvPlanKey& k) { k.benchmark = true; });
    for (size_t i = 0; i < variants.size(); ++i) {
      QVERIFY2(!(variants[i] == a), variants[i].str().c_str());
      QVERIFY2(hash(variants[i]) != hash(a), variants[i].str().c_str());
      QVERIFY(variants[i].str() != a.str());
      for (size_t j = i + 1; j < variants.size(); ++j) QVERIFY(!(variants[i] == variants[j]));
    }
    QCOMPARE(QString::fromStdString(a.str()),
             QStringLiteral("fprop N=8 C=3 H=32 W=30 K=16 R=3 S=3 stride=2 pad=1 f32 x=NCHW "
                            "w=NCHW heuristic"));
  }

  void layoutStrides() {
    int64_t s[4];
    tb::cuda::layout_strides(Layout::NCHW, 2, 3, 4, 5, s);
    QCOMPARE(s[0], int64_t(60));
    QCOMPARE(s[1], int64_t(20));
    QCOMPARE(s[2], int64_t(5));
    QCOMPARE(s[3], int64_t(1));
    tb::cuda::layout_strides(Layout::NHWC, 2, 3, 4, 5, s);
    QCOMPARE(s[0], int64_t(60));
    QCOMPARE(s[1], int64_t(1));
    QCOMPARE(s[2], int64_t(15));
    QCOMPARE(s[3], int64_t(3));
    // The strides agree with offset4 for every element.
    for (Layout l : {Layout::NCHW, Layout::NHWC}) {
      tb::cuda::layout_strides(l, 2, 3, 4, 5, s);
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t h = 0; h < 4; ++h)
            for (int64_t w = 0; w < 5; ++w)
              QCOMPARE(n * s[0] + c * s[1] + h * s[2] + w * s[3], offset4(l, 3, 4, 5, n, c, h, w));
    }
  }

  void noDeviceReasonIsClear() {
    if (cuda_available) QSKIP("a CUDA device is present; this slot checks the no-device path");
    QVERIFY(!why.isEmpty());
    std::string note;
    auto be = make_backend("auto", BackendOptions{}, &note);
    QCOMPARE(be->device(), Device::cpu());
    QVERIFY(!note.empty());
    QVERIFY_THROWS_EXCEPTION(tb::Error, make_backend("cuda:0", BackendOptions{}));
  }

  // ------------------------------------------------------------ device

  void describeAndName() {
    NEED_GPU();
    TB_GPU_TRY
    const auto j = gpu->describe();
    for (const char* k : {"device_name", "compute_capability", "driver", "runtime", "cudnn",
                          "cublas", "multiprocessors"})
      QVERIFY2(j.contains(k), k);
    QVERIFY(QString::fromStdString(gpu->name()).startsWith("cuda:0 ("));
    QCOMPARE(gpu->device(), Device::cuda(0));
#ifdef TRAINBENCH_HAVE_CUDA
    QVERIFY(!cuda_device_names().empty());
    QCOMPARE(QString::fromStdString(cuda_device_names().front().first), QStringLiteral("cuda:0"));
#endif
    TB_GPU_CATCH
  }

  void copyRoundTrip() {
    NEED_GPU();
    TB_GPU_TRY
    const Tensor h = random_host({3, 5, 7, 9}, 1);
    Tensor d1 = up(h);
    Tensor d2 = gpu->empty(h.shape(), DType::F32);
    gpu->copy(d1, d2);  // D2D
    QVERIFY(bitwise_equal(h, down(d2)));
    // f32 <-> f64 on the device.
    Tensor d64 = gpu->empty(h.shape(), DType::F64);
    gpu->copy(d1, d64);
    Tensor h64 = down(d64);
    for (int64_t i = 0; i < h.numel(); ++i)
      QCOMPARE(h64.data_as<double>()[i], double(h.data_as<float>()[i]));
    Tensor back = gpu->empty(h.shape(), DType::F32);
    gpu->copy(d64, back);
    QVERIFY(bitwise_equal(h, down(back)));
    // Host f64 straight into device f32 (staged).
    Tensor d32 = gpu->empty(h.shape(), DType::F32);
    gpu->copy(h64, d32);
    QVERIFY(bitwise_equal(h, down(d32)));
    TB_GPU_CATCH
  }

  void fillValues() {
    NEED_GPU();
    TB_GPU_TRY
    Tensor f = gpu->empty({1001}, DType::F32);
    gpu->fill(f, -2.75);
    Tensor hf = down(f);
    for (int64_t i = 0; i < 1001; ++i) QCOMPARE(hf.data_as<float>()[i], -2.75f);
    Tensor d = gpu->empty({77}, DType::F64);
    gpu->fill(d, 1.0 / 3.0);
    for (int64_t i = 0; i < 77; ++i) QCOMPARE(down(d).data_as<double>()[i], 1.0 / 3.0);
    Tensor n = gpu->empty({33}, DType::I32);
    gpu->fill(n, -7);
    Tensor hn = down(n);
    for (int64_t i = 0; i < 33; ++i) QCOMPARE(hn.data_as<int32_t>()[i], -7);
    Tensor b = gpu->empty({65}, DType::U8);
    gpu->fill(b, 200);
    Tensor hb = down(b);
    for (int64_t i = 0; i < 65; ++i) QCOMPARE(int(hb.data_as<uint8_t>()[i]), 200);
    Tensor h16 = gpu->empty({9}, DType::F16);
    gpu->fill(h16, 1.0);
    Tensor hh = down(h16);
    for (int64_t i = 0; i < 9; ++i) QCOMPARE(hh.data_as<uint16_t>()[i], uint16_t(0x3C00));
    Tensor b16 = gpu->empty({9}, DType::BF16);
    gpu->fill(b16, -2.0);
    Tensor hb16 = down(b16);
    for (int64_t i = 0; i < 9; ++i) QCOMPARE(hb16.data_as<uint16_t>()[i], uint16_t(0xC000));
    TB_GPU_CATCH
  }

  void layoutConversion() {
    NEED_GPU();
    TB_GPU_TRY
    // Odd sizes and a channel count above the 32-wide tile.
    for (Shape s :
         {Shape{2, 3, 5, 7}, Shape{3, 37, 6, 11}, Shape{1, 64, 1, 1}, Shape{2, 1, 33, 35}}) {
      const Tensor h = random_host(s, 11);
      Tensor ref = Tensor::empty(s, DType::F32, Device::cpu(), Layout::NHWC);
      cpu.copy(h, ref);
      Tensor d = up_as(h, Layout::NHWC);  // H2D with conversion (staged)
      Tensor got = down(d);               // D2H, stays NHWC
      QCOMPARE(got.layout(), Layout::NHWC);
      QVERIFY2(bitwise_equal(ref, got), shape_str(s).c_str());
      QVERIFY(bitwise_equal(h, down_nchw(d)));  // and back, D2H with conversion
      Tensor d2 = gpu->empty(s, DType::F32, Layout::NCHW);
      gpu->copy(d, d2);  // D2D with conversion
      QVERIFY(bitwise_equal(h, down(d2)));
    }
    TB_GPU_CATCH
  }

  void pointwise() {
    NEED_GPU();
    TB_GPU_TRY
    const Shape s{4, 3, 17, 19};
    const Tensor x = random_host(s, 21, -4, 4), dy = random_host(s, 22), b = random_host(s, 23);
    auto run2 = [&](auto&& op_cpu, auto&& op_gpu, double rtol, double atol, const char* what) {
      Tensor yc = Tensor::empty(s, DType::F32);
      op_cpu(yc);
      Tensor yg = gpu->empty(s, DType::F32);
      op_gpu(yg);
      return compare(yc, down(yg), rtol, atol, what);
    };
    const Tensor dx_ = up(x), ddy = up(dy), db = up(b);
    Cmp c;
    c = run2([&](Tensor& y) { cpu.relu_forward(x, y); },
             [&](Tensor& y) { gpu->relu_forward(dx_, y); }, 0, 0, "relu_forward");
    QVERIFY2(c.ok, c.msg.c_str());
    c = run2([&](Tensor& y) { cpu.relu_backward(x, dy, y); },
             [&](Tensor& y) { gpu->relu_backward(dx_, ddy, y); }, 0, 0, "relu_backward");
    QVERIFY2(c.ok, c.msg.c_str());
    c = run2([&](Tensor& y) { cpu.gelu_forward(x, y); },
             [&](Tensor& y) { gpu->gelu_forward(dx_, y); }, 1e-5, 1e-6, "gelu_forward");
    QVERIFY2(c.ok, c.msg.c_str());
    c = run2([&](Tensor& y) { cpu.gelu_backward(x, dy, y); },
             [&](Tensor& y) { gpu->gelu_backward(dx_, ddy, y); }, 1e-5, 1e-6, "gelu_backward");
    QVERIFY2(c.ok, c.msg.c_str());
    c = run2([&](Tensor& y) { cpu.add(x, b, y); }, [&](Tensor& y) { gpu->add(dx_, db, y); }, 0, 0,
             "add");
    QVERIFY2(c.ok, c.msg.c_str());
    // accumulate and scale in place; ReLU in place (y aliases x).
    Tensor acc_c = Tensor::empty(s, DType::F32);
    cpu.copy(b, acc_c);
    cpu.accumulate(x, acc_c);
    cpu.scale(acc_c, -0.37);
    Tensor acc_g = up(b);
    gpu->accumulate(dx_, acc_g);
    gpu->scale(acc_g, -0.37);
    EXPECT_CLOSE(acc_c, down(acc_g), 0, 0, "accumulate+scale");
    Tensor inplace = up(x);
    gpu->relu_forward(inplace, inplace);
    Tensor rc = Tensor::empty(s, DType::F32);
    cpu.relu_forward(x, rc);
    EXPECT_CLOSE(rc, down(inplace), 0, 0, "relu in place");
    TB_GPU_CATCH
  }

  void softmaxCrossEntropy() {
    NEED_GPU();
    TB_GPU_TRY
    for (auto [N, K, eps] :
         {std::tuple{67, 10, 0.1f}, std::tuple{5, 1000, 0.0f}, std::tuple{33, 37, 0.3f}}) {
      const Tensor z = random_host({N, K}, 31 + K, -6, 6);
      Tensor labels = Tensor::empty({N}, DType::I32);
      std::mt19937 rng(7);
      for (int n = 0; n < N; ++n) labels.data_as<int32_t>()[n] = int32_t(rng() % K);
      // Make some predictions right so the count is not trivially zero.
      for (int n = 0; n < N; n += 3) {
        int32_t y = labels.data_as<int32_t>()[n];
        z.data_as<float>()[n * K + y] = 9.0f;
      }
      Tensor stats_c = Tensor::zeros({2}, DType::F64);
      stats_c.data_as<double>()[0] = 1.5, stats_c.data_as<double>()[1] = 2.0;
      Tensor dz_c = Tensor::empty({N, K}, DType::F32);
      cpu.softmax_cross_entropy(z, labels, eps, 0.5f, dz_c, stats_c);
      Tensor stats_g = up(Tensor::zeros({2}, DType::F64));
      Tensor init = Tensor::zeros({2}, DType::F64);
      init.data_as<double>()[0] = 1.5, init.data_as<double>()[1] = 2.0;
      gpu->copy(init, stats_g);
      Tensor dz_g = gpu->empty({N, K}, DType::F32);
      gpu->softmax_cross_entropy(up(z), up(labels), eps, 0.5f, dz_g, stats_g);
      Tensor sg = down(stats_g);
      QVERIFY(std::abs(sg.data_as<double>()[0] - stats_c.data_as<double>()[0]) <=
              1e-5 * std::abs(stats_c.data_as<double>()[0]));
      QCOMPARE(sg.data_as<double>()[1], stats_c.data_as<double>()[1]);  // exact count
      QVERIFY(stats_c.data_as<double>()[1] > 2.0);
      EXPECT_CLOSE(dz_c, down(dz_g), 1e-5, 1e-8, "dlogits");
      // Without a gradient, host labels (checked on the host).
      Tensor none;
      gpu->softmax_cross_entropy(up(z), labels, eps, 1.0f, none, stats_g);
      QVERIFY(down(stats_g).data_as<double>()[1] > sg.data_as<double>()[1]);
      labels.data_as<int32_t>()[1] = K;  // out of range: rejected on the host path
      QVERIFY_THROWS_EXCEPTION(tb::Error,
                               gpu->softmax_cross_entropy(up(z), labels, eps, 1.0f, none, stats_g));
    }
    TB_GPU_CATCH
  }

  void sumSquares() {
    NEED_GPU();
    TB_GPU_TRY
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1234567)}) {
      const Tensor h = random_host({n}, 41 + n);
      const double ref = cpu.sum_squares(h);
      Tensor d = up(h);
      const double a = gpu->sum_squares(d), b = gpu->sum_squares(d);
      QVERIFY2(std::abs(a - ref) <= 1e-12 * ref, std::to_string(a - ref).c_str());
      QCOMPARE(a, b);  // deterministic
    }
    TB_GPU_CATCH
  }

  void pooling_data() {
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("pad");
    QTest::addColumn<bool>("nhwc");
    for (bool nhwc : {false, true}) {
      const char* l = nhwc ? "NHWC" : "NCHW";
      QTest::addRow("k2s2p0 %s", l) << 2 << 2 << 0 << nhwc;
      QTest::addRow("k3s2p1 %s", l) << 3 << 2 << 1 << nhwc;
      QTest::addRow("k3s1p1 overlap %s", l) << 3 << 1 << 1 << nhwc;
    }
  }
  void pooling() {
    NEED_GPU();
    TB_GPU_TRY
    QFETCH(int, kernel);
    QFETCH(int, stride);
    QFETCH(int, pad);
    QFETCH(bool, nhwc);
    const Layout L = nhwc ? Layout::NHWC : Layout::NCHW;
    const auto g = PoolGeometry::make(3, 5, 13, 11, kernel, stride, pad);
    const Tensor x = random_host(g.input_shape(), 51);
    const Tensor dy = random_host(g.output_shape(), 52);
    // max
    Tensor y_c = Tensor::empty(g.output_shape(), DType::F32),
           a_c = Tensor::empty(g.output_shape(), DType::I32);
    cpu.maxpool2d_forward(g, x, y_c, a_c);
    Tensor y_g = gpu->empty(g.output_shape(), DType::F32, L),
           a_g = gpu->empty(g.output_shape(), DType::I32, L);
    gpu->maxpool2d_forward(g, up_as(x, L), y_g, a_g);
    EXPECT_CLOSE(y_c, down_nchw(y_g), 0, 0, "maxpool y");
    EXPECT_CLOSE(a_c, down_nchw(a_g), 0, 0, "maxpool argmax");
    Tensor dx_c = Tensor::empty(g.input_shape(), DType::F32);
    cpu.maxpool2d_backward(g, dy, a_c, dx_c);
    Tensor dx_g = gpu->empty(g.input_shape(), DType::F32, L);
    gpu->maxpool2d_backward(g, up_as(dy, L), a_g, dx_g);
    EXPECT_CLOSE(dx_c, down_nchw(dx_g), 0, 0, "maxpool dx");
    // avg
    cpu.avgpool2d_forward(g, x, y_c);
    gpu->avgpool2d_forward(g, up_as(x, L), y_g);
    EXPECT_CLOSE(y_c, down_nchw(y_g), 1e-5, 1e-7, "avgpool y");
    cpu.avgpool2d_backward(g, dy, dx_c);
    gpu->avgpool2d_backward(g, up_as(dy, L), dx_g);
    EXPECT_CLOSE(dx_c, down_nchw(dx_g), 1e-5, 1e-7, "avgpool dx");
    // global
    Tensor gy_c = Tensor::empty({3, 5}, DType::F32), gy_g = gpu->empty({3, 5}, DType::F32);
    cpu.global_avgpool_forward(x, gy_c);
    gpu->global_avgpool_forward(up_as(x, L), gy_g);
    EXPECT_CLOSE(gy_c, down(gy_g), 1e-6, 1e-7, "global avgpool y");
    const Tensor gdy = random_host({3, 5}, 53);
    Tensor gdx_c = Tensor::empty(g.input_shape(), DType::F32);
    cpu.global_avgpool_backward(gdy, gdx_c);
    Tensor gdx_g = gpu->empty(g.input_shape(), DType::F32, L);
    gpu->global_avgpool_backward(up(gdy), gdx_g);
    EXPECT_CLOSE(gdx_c, down_nchw(gdx_g), 1e-6, 0, "global avgpool dx");
    TB_GPU_CATCH
  }

  void linear() {
    NEED_GPU();
    TB_GPU_TRY
    const int64_t N = 33, K = 70, M = 19;
    const Tensor x = random_host({N, K}, 61), w = random_host({M, K}, 62), b = random_host({M}, 63);
    const Tensor dy = random_host({N, M}, 64);
    Tensor y_c = Tensor::empty({N, M}, DType::F32);
    cpu.linear_forward(x, w, b, y_c);
    Tensor y_g = gpu->empty({N, M}, DType::F32);
    gpu->linear_forward(up(x), up(w), up(b), y_g);
    EXPECT_CLOSE_SCALED(y_c, down(y_g), 1e-4, "linear y");
    Tensor none;
    cpu.linear_forward(x, w, none, y_c);
    gpu->linear_forward(up(x), up(w), none, y_g);
    EXPECT_CLOSE_SCALED(y_c, down(y_g), 1e-4, "linear y without bias");
    for (bool accumulate : {false, true}) {
      const Tensor dw0 = random_host({M, K}, 65), db0 = random_host({M}, 66);
      Tensor dx_c = Tensor::empty({N, K}, DType::F32), dw_c = Tensor::empty({M, K}, DType::F32),
             db_c = Tensor::empty({M}, DType::F32);
      cpu.copy(dw0, dw_c), cpu.copy(db0, db_c);
      cpu.linear_backward(x, w, dy, dx_c, dw_c, db_c, accumulate);
      Tensor dx_g = gpu->empty({N, K}, DType::F32), dw_g = up(dw0), db_g = up(db0);
      gpu->linear_backward(up(x), up(w), up(dy), dx_g, dw_g, db_g, accumulate);
      EXPECT_CLOSE_SCALED(dx_c, down(dx_g), 1e-4, "linear dx");
      EXPECT_CLOSE_SCALED(dw_c, down(dw_g), 1e-4, "linear dw");
      EXPECT_CLOSE(db_c, down(db_g), 1e-5, 1e-6, "linear db");
    }
    TB_GPU_CATCH
  }

  void batchnorm_data() {
    QTest::addColumn<bool>("nhwc");
    QTest::newRow("NCHW") << false;
    QTest::newRow("NHWC") << true;
  }
  void batchnorm() {
    NEED_GPU();
    TB_GPU_TRY
    QFETCH(bool, nhwc);
    const Layout L = nhwc ? Layout::NHWC : Layout::NCHW;
    const Shape s{6, 7, 9, 5};
    const Tensor x = random_host(s, 71, -2, 3), dy = random_host(s, 72);
    const Tensor gamma = random_host({7}, 73, 0.5, 1.5), beta = random_host({7}, 74);
    const Tensor rm0 = random_host({7}, 75), rv0 = random_host({7}, 76, 0.5, 2.0);
    Tensor rm_c = Tensor::empty({7}, DType::F32), rv_c = Tensor::empty({7}, DType::F32);
    cpu.copy(rm0, rm_c), cpu.copy(rv0, rv_c);
    Tensor y_c = Tensor::empty(s, DType::F32), sm_c = Tensor::empty({7}, DType::F32),
           si_c = Tensor::empty({7}, DType::F32);
    cpu.batchnorm_forward_train(x, gamma, beta, rm_c, rv_c, 0.1f, 1e-5f, y_c, sm_c, si_c);
    Tensor xg = up_as(x, L), rm_g = up(rm0), rv_g = up(rv0), gg = up(gamma), bg = up(beta);
    Tensor y_g = gpu->empty(s, DType::F32, L), sm_g = gpu->empty({7}, DType::F32),
           si_g = gpu->empty({7}, DType::F32);
    gpu->batchnorm_forward_train(xg, gg, bg, rm_g, rv_g, 0.1f, 1e-5f, y_g, sm_g, si_g);
    EXPECT_CLOSE(y_c, down_nchw(y_g), 1e-5, 1e-5, "bn y");
    EXPECT_CLOSE(sm_c, down(sm_g), 1e-6, 1e-7, "bn save_mean");
    EXPECT_CLOSE(si_c, down(si_g), 1e-6, 0, "bn save_invstd");
    EXPECT_CLOSE(rm_c, down(rm_g), 1e-6, 1e-7, "bn running_mean");
    EXPECT_CLOSE(rv_c, down(rv_g), 1e-6, 0, "bn running_var (unbiased)");
    // eval with the updated running statistics
    cpu.batchnorm_forward_eval(x, gamma, beta, rm_c, rv_c, 1e-5f, y_c);
    gpu->batchnorm_forward_eval(xg, gg, bg, rm_g, rv_g, 1e-5f, y_g);
    EXPECT_CLOSE(y_c, down_nchw(y_g), 1e-5, 1e-5, "bn eval y");
    for (bool accumulate : {false, true}) {
      const Tensor dg0 = random_host({7}, 77), db0 = random_host({7}, 78);
      Tensor dx_c = Tensor::empty(s, DType::F32), dg_c = Tensor::empty({7}, DType::F32),
             db_c = Tensor::empty({7}, DType::F32);
      cpu.copy(dg0, dg_c), cpu.copy(db0, db_c);
      cpu.batchnorm_backward(x, dy, gamma, sm_c, si_c, dx_c, dg_c, db_c, accumulate);
      Tensor dx_g = gpu->empty(s, DType::F32, L), dg_g = up(dg0), db_g = up(db0);
      gpu->batchnorm_backward(xg, up_as(dy, L), gg, sm_g, si_g, dx_g, dg_g, db_g, accumulate);
      EXPECT_CLOSE_SCALED(dx_c, down_nchw(dx_g), 1e-5, "bn dx");
      EXPECT_CLOSE(dg_c, down(dg_g), 1e-5, 1e-5, "bn dgamma");
      EXPECT_CLOSE(db_c, down(db_g), 1e-5, 1e-5, "bn dbeta");
    }
    TB_GPU_CATCH
  }

  void convolution_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("H");
    QTest::addColumn<int>("W");
    QTest::addColumn<int>("K");
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("pad");
    QTest::addColumn<bool>("nhwc");
    for (bool nhwc : {false, true}) {
      const char* l = nhwc ? "NHWC" : "NCHW";
      QTest::addRow("3x3 same %s", l) << 4 << 3 << 16 << 16 << 8 << 3 << 1 << 1 << nhwc;
      QTest::addRow("3x3 stride 2 odd %s", l) << 3 << 5 << 15 << 13 << 7 << 3 << 2 << 1 << nhwc;
      QTest::addRow("1x1 %s", l) << 2 << 16 << 7 << 9 << 24 << 1 << 1 << 0 << nhwc;
      QTest::addRow("5x5 pad 2 %s", l) << 2 << 8 << 12 << 12 << 8 << 5 << 1 << 2 << nhwc;
    }
  }
  void convolution() {
    NEED_GPU();
    TB_GPU_TRY
    QFETCH(int, N);
    QFETCH(int, C);
    QFETCH(int, H);
    QFETCH(int, W);
    QFETCH(int, K);
    QFETCH(int, kernel);
    QFETCH(int, stride);
    QFETCH(int, pad);
    QFETCH(bool, nhwc);
    const Layout L = nhwc ? Layout::NHWC : Layout::NCHW;
    const auto g = ConvGeometry::make(N, C, H, W, K, kernel, stride, pad);
    const Tensor x = random_host(g.input_shape(), 81), w = random_host(g.weight_shape(), 82);
    const Tensor b = random_host({K}, 83), dy = random_host(g.output_shape(), 84);
    Tensor y_c = Tensor::empty(g.output_shape(), DType::F32);
    cpu.conv2d_forward(g, x, w, b, y_c);
    Tensor xg = up_as(x, L), wg = up_as(w, L), dyg = up_as(dy, L);
    Tensor y_g = gpu->empty(g.output_shape(), DType::F32, L);
    gpu->conv2d_forward(g, xg, wg, up(b), y_g);
    // Strict fp32 (see the file comment), relative to the output's size; the
    // longest reduction: C·R·S (y), K·R·S (dx) or N·Ho·Wo (dw).
    const int64_t k = std::max({int64_t(C) * kernel * kernel, int64_t(K) * kernel * kernel,
                                int64_t(N) * g.H_out * g.W_out});
    const double tol = tb::test::network_tolerance("fp32", 4, k);
    EXPECT_CLOSE_SCALED(y_c, down_nchw(y_g), tol, "conv y");
    for (bool accumulate : {false, true}) {
      const Tensor dw0 = random_host(g.weight_shape(), 85), db0 = random_host({K}, 86);
      Tensor dx_c = Tensor::empty(g.input_shape(), DType::F32),
             dw_c = Tensor::empty(g.weight_shape(), DType::F32),
             db_c = Tensor::empty({K}, DType::F32);
      cpu.copy(dw0, dw_c), cpu.copy(db0, db_c);
      cpu.conv2d_backward(g, x, w, dy, dx_c, dw_c, db_c, accumulate);
      Tensor dx_g = gpu->empty(g.input_shape(), DType::F32, L), dw_g = up_as(dw0, L),
             db_g = up(db0);
      gpu->conv2d_backward(g, xg, wg, dyg, dx_g, dw_g, db_g, accumulate);
      EXPECT_CLOSE_SCALED(dx_c, down_nchw(dx_g), tol, "conv dx");
      EXPECT_CLOSE_SCALED(dw_c, down_nchw(dw_g), tol, "conv dw");
      EXPECT_CLOSE(db_c, down(db_g), 1e-5, 1e-5, "conv db");
    }
    TB_GPU_CATCH
  }

  void convPlanCacheAndPolicies() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    const auto g = ConvGeometry::make(2, 4, 10, 10, 6, 3, 1, 1);
    const Tensor x = random_host(g.input_shape(), 91), w = random_host(g.weight_shape(), 92);
    Tensor none;
    auto run = [&](Backend& be) {
      Tensor y = be.empty(g.output_shape(), DType::F32);
      Tensor xd = be.empty(x.shape(), DType::F32), wd = be.empty(w.shape(), DType::F32);
      be.copy(x, xd), be.copy(w, wd);
      be.conv2d_forward(g, xd, wd, none, y);
      Tensor h = Tensor::empty(y.shape(), DType::F32);
      be.copy(y, h);
      return h;
    };
    auto fresh = make_cuda_backend(0, BackendOptions{});
    auto& cb = static_cast<CudaBackend&>(*fresh);
    QCOMPARE(cb.conv_plan_count(), size_t(0));
    const Tensor y1 = run(cb);
    QCOMPARE(cb.conv_plan_count(), size_t(1));
    const Tensor y2 = run(cb);
    QCOMPARE(cb.conv_plan_count(), size_t(1));  // same shape: the cached plan
    QVERIFY(bitwise_equal(y1, y2));
    // Autotune and deterministic backends agree with the heuristic choice.
    auto bench = make_cuda_backend(0, BackendOptions{.cudnn_benchmark = true});
    auto det = make_cuda_backend(0, BackendOptions{.deterministic = true});
    // Other fp32 engines: another summation order (C·R·S = 36 terms).
    const double tol = tb::test::network_tolerance("fp32", 4, 4 * 3 * 3);
    EXPECT_CLOSE_SCALED(y1, run(*bench), tol, "conv autotuned");
    const Tensor d1 = run(*det), d2 = run(*det);
    EXPECT_CLOSE_SCALED(y1, d1, tol, "conv deterministic");
    QVERIFY(bitwise_equal(d1, d2));
#endif
    TB_GPU_CATCH
  }

  void optimizers_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<float>("momentum");
    QTest::addColumn<bool>("nesterov");
    QTest::addColumn<float>("wd");
    QTest::newRow("sgd") << int(OptimizerKind::SGD) << 0.0f << false << 0.0f;
    QTest::newRow("sgd momentum wd") << int(OptimizerKind::SGD) << 0.9f << false << 5e-4f;
    QTest::newRow("sgd nesterov") << int(OptimizerKind::SGD) << 0.9f << true << 1e-4f;
    QTest::newRow("adamw") << int(OptimizerKind::AdamW) << 0.0f << false << 0.05f;
    QTest::newRow("rmsprop") << int(OptimizerKind::RMSProp) << 0.0f << false << 1e-4f;
    QTest::newRow("rmsprop momentum") << int(OptimizerKind::RMSProp) << 0.8f << false << 0.0f;
    QTest::newRow("lars") << int(OptimizerKind::LARS) << 0.9f << false << 5e-4f;
    QTest::newRow("lamb") << int(OptimizerKind::LAMB) << 0.0f << false << 0.01f;
  }
  void optimizers() {
    NEED_GPU();
    TB_GPU_TRY
    QFETCH(int, kind);
    QFETCH(float, momentum);
    QFETCH(bool, nesterov);
    QFETCH(float, wd);
    OptimizerStep st;
    st.kind = OptimizerKind(kind);
    st.lr = 0.01f, st.momentum = momentum, st.nesterov = nesterov, st.weight_decay = wd;
    st.grad_scale = 0.5f;
    // Sizes around the 65536-element chunk; the last slot takes no decay.
    const std::vector<int64_t> sizes{1, 300, 65536, 70001, 131073, 17};
    struct Set {
      std::vector<Tensor> p, g, s1, s2;
    };
    auto make = [&](Backend& be, bool device) {
      Set s;
      for (size_t i = 0; i < sizes.size(); ++i) {
        auto mk = [&](uint64_t seed, double lo, double hi) {
          Tensor h = random_host({sizes[i]}, seed, lo, hi);
          if (!device) return h;
          Tensor d = be.empty(h.shape(), DType::F32);
          be.copy(h, d);
          return d;
        };
        s.p.push_back(mk(100 + i, -1, 1));
        s.g.push_back(mk(200 + i, -1, 1));
        s.s1.push_back(mk(300 + i, -0.1, 0.1));
        s.s2.push_back(mk(400 + i, 0.01, 0.1));  // second moments are positive
      }
      return s;
    };
    auto slot_list = [&](Set& s) {
      std::vector<ParamSlot> v;
      for (size_t i = 0; i < sizes.size(); ++i)
        v.push_back({s.p[i], s.g[i], s.s1[i], s.s2[i], i + 1 != sizes.size()});
      return v;
    };
    Set c = make(cpu, false), per = make(*gpu, true), multi = make(*gpu, true);
    for (int64_t t = 1; t <= 3; ++t) {
      st.step = t;
      cpu.optimizer_step(st, slot_list(c), false);
      gpu->optimizer_step(st, slot_list(per), false);
      gpu->optimizer_step(st, slot_list(multi), true);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor pp = down(per.p[i]), pm = down(multi.p[i]);
      QVERIFY2(bitwise_equal(pp, pm),
               ("per-tensor vs multi-tensor, slot " + std::to_string(i)).c_str());
      QVERIFY2(bitwise_equal(down(per.s1[i]), down(multi.s1[i])), "state1 per vs multi");
      QVERIFY2(bitwise_equal(down(per.s2[i]), down(multi.s2[i])), "state2 per vs multi");
      EXPECT_CLOSE(c.p[i], pp, 1e-5, 1e-6, "parameters vs cpu");
      EXPECT_CLOSE(c.s1[i], down(per.s1[i]), 1e-5, 1e-6, "state1 vs cpu");
      EXPECT_CLOSE(c.s2[i], down(per.s2[i]), 1e-5, 1e-6, "state2 vs cpu");
      // Every parameter moved.
      const Tensor p0 = random_host({sizes[i]}, 100 + i, -1, 1);
      QVERIFY(!bitwise_equal(p0, pp));
    }
    TB_GPU_CATCH
  }

  void allocatorStatistics() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    auto& a = tb::cuda::CachingAllocator::instance();
    gpu->synchronize();
    a.empty_cache();
    a.reset_peak();
    const auto s0 = a.stats();
    const size_t big = (size_t(5) << 20) + 3;  // rounds to 6 MiB
    {
      Tensor t = gpu->empty({int64_t(big)}, DType::U8);
      const auto s1 = a.stats();
      QCOMPARE(s1.allocated_bytes - s0.allocated_bytes, size_t(6) << 20);
      QCOMPARE(s1.requested_bytes - s0.requested_bytes, big);
      QCOMPARE(s1.cuda_malloc_count, s0.cuda_malloc_count + 1);
      QVERIFY(s1.peak_allocated_bytes >= s1.allocated_bytes);
    }
    const auto s2 = a.stats();
    QCOMPARE(s2.allocated_bytes, s0.allocated_bytes);                    // freed to the cache ...
    QCOMPARE(s2.reserved_bytes, s0.reserved_bytes + (size_t(6) << 20));  // ... not to the driver
    {
      Tensor t = gpu->empty({int64_t(big) - 100}, DType::U8);  // same class: a cache hit
      const auto s3 = a.stats();
      QCOMPARE(s3.cuda_malloc_count, s2.cuda_malloc_count);
      QCOMPARE(s3.cache_hits, s2.cache_hits + 1);
    }
    a.reset_peak();
    QCOMPARE(a.stats().peak_allocated_bytes, a.stats().allocated_bytes);
    gpu->synchronize();
    a.empty_cache();
    const auto s4 = a.stats();
    QCOMPARE(s4.cached_blocks, int64_t(0));
    QCOMPARE(s4.reserved_bytes, s0.reserved_bytes);  // the 6 MiB block went back
    QVERIFY(s4.cuda_free_count > s2.cuda_free_count);
#endif
    TB_GPU_CATCH
  }

  void outOfMemory() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    auto& a = tb::cuda::CachingAllocator::instance();
    gpu->synchronize();
    a.empty_cache();
    // Far beyond any card: 2^50 bytes.
    const int64_t n = int64_t(1) << 48;
    try {
      Tensor t = gpu->empty({n}, DType::F32);
      QFAIL("a 1 PiB allocation succeeded");
    } catch (const tb::OutOfMemory& e) {
      QCOMPARE(e.requested_bytes, size_t(n) * 4);
      QVERIFY2(QString(e.what()).contains(QString::number(qulonglong(n) * 4)), e.what());
      QVERIFY2(QString(e.what()).contains("out of memory"), e.what());
    }
    // One injected failure: the allocator empties its cache and retries.
    const auto before = a.stats();
    a.inject_malloc_failures(1);
    { Tensor t = gpu->empty({int64_t(3) << 20}, DType::F32); }
    QCOMPARE(a.stats().oom_retries, before.oom_retries + 1);
    // Two: the retry fails too.
    a.inject_malloc_failures(2);
    QVERIFY_THROWS_EXCEPTION(tb::OutOfMemory, gpu->empty({int64_t(5) << 20}, DType::F32));
    a.inject_malloc_failures(0);
    // The device still works afterwards.
    Tensor ok = gpu->empty({10}, DType::F32);
    gpu->fill(ok, 1.0);
    QCOMPARE(down(ok).data_as<float>()[9], 1.0f);
#endif
    TB_GPU_CATCH
  }

  void argumentErrors() {
    NEED_GPU();
    TB_GPU_TRY
    const Tensor h = random_host({2, 3, 4, 5}, 99);
    Tensor d = up(h);
    try {
      gpu->relu_forward(h, d);  // a host tensor given to the GPU
      QFAIL("no error for a host operand");
    } catch (const tb::Error& e) {
      QVERIFY2(QString(e.what()).contains("is not on cuda:0"), e.what());
    }
    Tensor nhwc = gpu->empty(h.shape(), DType::F32, Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(tb::Error, gpu->add(d, d, nhwc));  // layouts differ
    Tensor f64 = gpu->empty(h.shape(), DType::F64);
    QVERIFY_THROWS_EXCEPTION(tb::Error, gpu->copy(f64, nhwc));  // dtype + layout at once
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestCudaBackend)
#include "test_cuda_backend.moc"
