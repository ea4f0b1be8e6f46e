// SPDX-License-Identifier: GPL-3.0-or-later
// Tensor ops with no arithmetic to speak of, on every backend, layout and dtype:
// copies (host <-> device, f32 <-> f64, layout conversion on the way), fills
// of every dtype, the layouts' strides, the CPU's blocked nChw16c layout (its
// conversions, what Tensor refuses) and the sum of squares (clipping's and
// the census' reduction). Channel padding (pad_channels_to) is the layout
// family's: engine/ops/layout/test_op_layout.cpp.
//
// All exact except sum_squares (1e-12 relative: a sum of up to 1.2 M squares
// in double, another order), each target against the CPU reference.
// The CUDA memory kernels (engine/backend/cuda/memory.cu: fill, f32 <-> f64
// casts, layout conversion) also run on the CUDA emulator
// (tests/cuda_emulator), on every machine, called as cuda_backend.cpp's fill
// and copy call them: bit for bit against the CPU backend, both thread
// orders, with the host roundings half_bits/bfloat16_bits against the
// emulator's and the CPU's (the *_emulated_* slots).
// GPU rows and slots QSKIP with the reason where there is no device.
#include <QtTest>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/conv/conv_cudnn.h"
#include "engine/ops/optimizer/optimizer.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/backend/cuda/kernels.h"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

#if defined(TRAINBENCH_CUDA_EMULATED)
// n elements of es bytes between two runs of guard bytes: what a kernel
// writes past either end of its range shows.
class Guarded {
 public:
  Guarded(int64_t n, size_t es) : size_(size_t(n) * es), bytes_(size_ + 2 * kGuard, kMark) {}
  void* data() { return bytes_.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (bytes_[i] != kMark || bytes_[kGuard + size_ + i] != kMark) return false;
    return true;
  }
  bool holds(const Tensor& t) const {
    return t.nbytes() == size_ && std::memcmp(bytes_.data() + kGuard, t.data(), size_) == 0;
  }

 private:
  static constexpr size_t kGuard = 64;  // keeps data() 16-byte aligned
  static constexpr unsigned char kMark = 0xA5;
  size_t size_;
  std::vector<unsigned char> bytes_;
};

// A host tensor of random bytes (every bit pattern, NaNs included: the
// kernels under test move bits).
Tensor random_bytes(const Shape& s, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor x = Tensor::empty(s, t);
  for (size_t i = 0; i < x.nbytes(); ++i)
    static_cast<unsigned char*>(x.data())[i] = static_cast<unsigned char>(rng());
  return x;
}

bool is_f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// CudaBackend::fill's element of `value` in dtype t (cuda_backend.cpp), with
// memory.cu's half_bits/bfloat16_bits as the emulator built them.
uint64_t emulated_fill_bits(DType t, double value) {
  uint64_t bits = 0;
  switch (t) {
    case DType::F32: {
      const float v = float(value);
      std::memcpy(&bits, &v, 4);
      break;
    }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::I32: {
      const int32_t v = int32_t(value);
      std::memcpy(&bits, &v, 4);
      break;
    }
    case DType::U8: bits = uint8_t(value); break;
    case DType::F16: bits = tb::cuda_emu::half_bits(float(value)); break;
    case DType::BF16: bits = tb::cuda_emu::bfloat16_bits(float(value)); break;
  }
  return bits;
}

// CudaBackend::copy's conversion of src (host) into dst's layout or dtype
// with memory.cu on the emulator, dst's bytes in `out`.
void emulated_convert(const Tensor& src, const Tensor& dst, Guarded& out) {
  if (src.dtype() != dst.dtype()) {
    if (src.dtype() == DType::F32)
      tb::cuda_emu::launch_cast_f32_f64(src.data_as<float>(), static_cast<double*>(out.data()),
                                        src.numel(), nullptr);
    else
      tb::cuda_emu::launch_cast_f64_f32(src.data_as<double>(), static_cast<float*>(out.data()),
                                        src.numel(), nullptr);
    return;
  }
  tb::cuda_emu::launch_convert_layout(src.data(), out.data(), src.n(), src.c(), src.h(), src.w(),
                                      int(dtype_size(src.dtype())),
                                      dst.layout() == Layout::NHWC, nullptr);
}
#endif

}  // namespace

class TestOpTensor : public QObject {
  Q_OBJECT

 private:
  // Host tensor -> the GPU (same layout), the GPU -> host (same layout).
  static Tensor up(const Tensor& h) { return to_device(cuda_backend(), h, h.layout()); }
  static Tensor down(const Tensor& d) { return to_host(cuda_backend(), d); }
  static Tensor up_as(const Tensor& h, Layout l) { return to_device(cuda_backend(), h, l); }
  static Tensor down_nchw(const Tensor& d) { return to_host_nchw(cuda_backend(), d); }

 private slots:
  // ------------------------------------------------------------ copies, fills, layouts


  void copy_round_trip() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &cuda_backend();
    CpuBackend& cpu = cpu_reference();
    const Tensor h = random_tensor({3, 5, 7, 9}, 1);
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


  void fill_values() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &cuda_backend();
    CpuBackend& cpu = cpu_reference();
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


  void layout_conversion() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &cuda_backend();
    CpuBackend& cpu = cpu_reference();
    // Odd sizes and a channel count above the 32-wide tile.
    for (Shape s :
         {Shape{2, 3, 5, 7}, Shape{3, 37, 6, 11}, Shape{1, 64, 1, 1}, Shape{2, 1, 33, 35}}) {
      const Tensor h = random_tensor(s, 11);
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


  // The CPU's blocked layout (nChw16c): offset4 as oneDNN lays it out, the
  // CPU copy's conversions both ways (f32 threaded, f64, i32) bit for bit and
  // at the places offset4 names, and what Tensor refuses.
  void blocked_layout_conversion() {
    // (n, c, h, w) = (1, 17, 2, 3) of (N, 32, 4, 5): block 1, lane 1.
    QCOMPARE(offset4(Layout::NCHW16C, 32, 4, 5, 1, 17, 2, 3),
             int64_t((((1 * 2 + 1) * 4 + 2) * 5 + 3) * 16 + 1));
    CpuBackend& cpu = cpu_fast();
    for (Shape s : {Shape{8, 32, 16, 16}, Shape{2, 16, 3, 5}, Shape{1, 48, 1, 1}}) {
      for (DType t : {DType::F32, DType::F64, DType::I32}) {
        Tensor h = Tensor::empty(s, t);
        for (int64_t i = 0; i < int64_t(h.nbytes()); ++i)
          static_cast<unsigned char*>(h.data())[i] = static_cast<unsigned char>(i * 7 + i / 251);
        Tensor b = Tensor::empty(s, t, Device::cpu(), Layout::NCHW16C);
        cpu.copy(h, b);
        const size_t es = dtype_size(t);
        for (int64_t n = 0; n < s[0]; ++n)
          for (int64_t c = 0; c < s[1]; ++c)
            for (int64_t y = 0; y < s[2]; ++y)
              for (int64_t x = 0; x < s[3]; ++x)
                QVERIFY(std::memcmp(static_cast<char*>(b.data()) +
                                        offset4(Layout::NCHW16C, s[1], s[2], s[3], n, c, y, x) * es,
                                    static_cast<char*>(h.data()) +
                                        offset4(Layout::NCHW, s[1], s[2], s[3], n, c, y, x) * es,
                                    es) == 0);
        Tensor back = Tensor::empty(s, t);
        cpu.copy(b, back);
        QVERIFY2(bitwise_equal(h, back), (shape_str(s) + " " + dtype_name(t)).c_str());
      }
    }
    auto refused = [](const std::function<void()>& f, const char* what) {
      try {
        f();
      } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(what), e.what());
        return;
      }
      QFAIL(qPrintable(QString("accepted: ") + what));
    };
    refused([] { Tensor::empty({2, 24, 3, 3}, DType::F32, Device::cpu(), Layout::NCHW16C); },
            "multiple of 16");
    refused([] { Tensor::empty({2, 32}, DType::F32, Device::cpu(), Layout::NCHW16C); },
            "rank-4");
    refused([] {
      Tensor::empty_with(allocator_for(Device::cpu()), {2, 16, 3, 3}, DType::F32,
                         Device::cuda(0), Layout::NCHW16C);
    }, "cpu backend's alone");
    const Tensor b = Tensor::empty({2, 16, 3, 3}, DType::F32, Device::cpu(), Layout::NCHW16C);
    refused([&] { b.reshaped({2, 144}); }, "not NCHW's");
    const Tensor p = Tensor::empty({2, 16, 1, 1}, DType::F32, Device::cpu(), Layout::NCHW16C);
    QCOMPARE(p.reshaped({2, 16}).layout(), Layout::NCHW);  // 1x1: the same memory as NCHW
  }

  void layout_strides() {
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

  // ------------------------------------------------------------ the memory kernels, emulated

  // CudaBackend::fill on the emulator: the element bits it computes (f16 and
  // bf16 through half_bits/bfloat16_bits) written by launch_fill over odd
  // sizes (a partial block; 70001: 274 blocks), against the CPU's fill (f16,
  // bf16: the CPU's cast of the f32 fill, the engine's rounding), nothing
  // written past either end. Values that round (1/3, -2/3, 0.1).
  void fill_emulated_matches_cpu_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<double>("value");
    const std::pair<DType, double> rows[] = {{DType::F32, -2.75},     {DType::F32, 0.1},
                                             {DType::F64, 1.0 / 3.0}, {DType::I32, -7},
                                             {DType::U8, 200},        {DType::F16, 1.0 / 3.0},
                                             {DType::F16, -70000},    {DType::BF16, -2.0 / 3.0}};
    for (const auto& [dt, v] : rows) QTest::addRow("%s %g", dtype_name(dt), v) << dt << v;
  }
  void fill_emulated_matches_cpu() {
    QFETCH(DType, dtype);
    QFETCH(double, value);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    CpuBackend& cpu = cpu_reference();
    const size_t es = dtype_size(dtype);
    for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(70001)}) {
      Tensor want = Tensor::empty({n}, dtype);
      if (dtype == DType::F16 || dtype == DType::BF16) {
        Tensor f = Tensor::empty({n}, DType::F32);
        cpu.fill(f, value);
        amp::cast(cpu, f, want);
      } else {
        cpu.fill(want, value);
      }
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        Guarded got(n, es);
        tb::cuda_emu::launch_fill(got.data(), n, int(es), emulated_fill_bits(dtype, value),
                                  nullptr);
        const QString what = QString("%1 elements, %2").arg(n).arg(schedule_name(order));
        QVERIFY2(got.holds(want), qPrintable("differs from the CPU's fill: " + what));
        QVERIFY2(got.guards_intact(), qPrintable("wrote outside its range: " + what));
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // launch_fill's contract on its own: each element is the pattern's low
  // elem_size bytes, for every size; n <= 0 launches nothing; another
  // element size is refused by name.
  void fill_emulated_writes_the_pattern() {
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const uint64_t pattern = 0x8877665544332211ull;
    for (int es : {1, 2, 4, 8})
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(257), int64_t(1025)}) {
        Guarded got(n, size_t(es));
        tb::cuda_emu::launch_fill(got.data(), n, es, pattern, nullptr);
        Tensor want = Tensor::empty({n * es}, DType::U8);
        for (int64_t i = 0; i < n * es; ++i)
          want.data_as<uint8_t>()[i] = uint8_t(pattern >> (8 * (i % es)));
        QVERIFY2(got.holds(want), qPrintable(QString("%1-byte elements, n = %2").arg(es).arg(n)));
        QVERIFY(got.guards_intact());
      }
    Guarded untouched(4, 8);
    const int64_t launches = tb_emu::counters().launches;
    tb::cuda_emu::launch_fill(untouched.data(), 0, 8, pattern, nullptr);
    tb::cuda_emu::launch_fill(untouched.data(), -3, 8, pattern, nullptr);
    QCOMPARE(tb_emu::counters().launches, launches);
    QVERIFY(untouched.guards_intact());
    const QString m =
        qerror_of([&] { tb::cuda_emu::launch_fill(untouched.data(), 4, 3, 0, nullptr); });
    QVERIFY2(m.contains("unsupported element size 3"), qPrintable(m));
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // memory.cu's host roundings (CudaBackend::fill's f16/bf16 values) as the
  // emulator built them, against the emulator's own conversion and the
  // CPU's (amp::cast): the same bits for every finite value probed, NaN a
  // NaN (the GPU's canonical 0x7fff; the CPU keeps the sign and payload).
  // Probes: every f16 and bf16 value, the midpoint to the next one (ties
  // to even) and the floats either side of it, both signs; overflow and the
  // subnormal edges; and every 4093rd f32 bit pattern.
  void half_bits_emulated_match_cpu_rounding() {
#if defined(TRAINBENCH_CUDA_EMULATED)
    std::vector<float> probes;
    const auto around = [&](float v) {
      for (float p : {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY)})
        probes.insert(probes.end(), {p, -p});
    };
    for (uint32_t h = 0; h < 0x7c00u; ++h) {
      const float v = float(f16_to_double(uint16_t(h)));
      const float next = h == 0x7bffu ? 65536.0f : float(f16_to_double(uint16_t(h + 1)));
      around(v);
      around((v + next) / 2);  // exact: 12 significant bits
    }
    for (uint32_t b = 0; b < 0x7f80u; ++b) {
      around(float_of_bits(b << 16));
      around(float_of_bits((b << 16) | 0x8000u));  // the midpoint to b + 1
    }
    for (uint32_t u : {0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00001u})
      probes.push_back(float_of_bits(u));
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093)
      probes.push_back(float_of_bits(uint32_t(u)));
    Tensor f = Tensor::empty({int64_t(probes.size())}, DType::F32);
    std::memcpy(f.data(), probes.data(), f.nbytes());
    CpuBackend& cpu = cpu_reference();
    for (DType dt : {DType::F16, DType::BF16}) {
      const bool f16 = dt == DType::F16;
      const Tensor c = amp::cast_to(cpu, f, dt);
      for (size_t i = 0; i < probes.size(); ++i) {
        const float v = probes[i];
        const uint16_t got = f16 ? tb::cuda_emu::half_bits(v) : tb::cuda_emu::bfloat16_bits(v);
        const uint16_t emu = f16 ? tb_emu::half_bits_rn(v) : tb_emu::bfloat16_bits_rn(v);
        const uint16_t want = c.data_as<uint16_t>()[i];
        const bool ok = std::isnan(v)
                            ? got == 0x7fffu && (f16 ? is_f16_nan(want) : is_bf16_nan(want))
                            : got == want && got == emu;
        if (!ok)
          QFAIL(qPrintable(QString("%1 of %2 (bits 0x%3): memory.cu 0x%4, emulator 0x%5, cpu 0x%6")
                               .arg(dtype_name(dt))
                               .arg(double(v), 0, 'g', 9)
                               .arg(tb_emu::float_bits(v), 8, 16, QChar('0'))
                               .arg(got, 4, 16, QChar('0'))
                               .arg(emu, 4, 16, QChar('0'))
                               .arg(want, 4, 16, QChar('0'))));
      }
    }
    // The hand-checked cases: ties to even, overflow, the smallest subnormal's half.
    QCOMPARE(tb::cuda_emu::half_bits(1.0f / 3.0f), uint16_t(0x3555));
    QCOMPARE(tb::cuda_emu::half_bits(65519.0f), uint16_t(0x7bff));
    QCOMPARE(tb::cuda_emu::half_bits(65520.0f), uint16_t(0x7c00));
    QCOMPARE(tb::cuda_emu::half_bits(std::ldexp(1.0f, -25)), uint16_t(0));
    QCOMPARE(tb::cuda_emu::half_bits(std::ldexp(3.0f, -25)), uint16_t(2));
    QCOMPARE(tb::cuda_emu::bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), uint16_t(0x3f80));
    QCOMPARE(tb::cuda_emu::bfloat16_bits(1.0f + std::ldexp(3.0f, -8)), uint16_t(0x3f82));
#else
    QSKIP(kNoEmulator);
#endif
  }

  // CudaBackend::copy's f32 <-> f64 conversion on the emulator (cast_kernel)
  // against the CPU's copy, bit for bit (NaN a NaN), over odd sizes: ±0,
  // ±inf, NaN, f32 subnormals, and doubles from 2^-160 to 2^140 (f32's
  // subnormals, overflow to inf, ties to even) ahead of random values.
  void cast_emulated_f32_f64_matches_cpu_data() {
    QTest::addColumn<DType>("from");
    QTest::newRow("f32 -> f64") << DType::F32;
    QTest::newRow("f64 -> f32") << DType::F64;
  }
  void cast_emulated_f32_f64_matches_cpu() {
    QFETCH(DType, from);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType to = from == DType::F32 ? DType::F64 : DType::F32;
    const double specials[] = {
        0.0, -0.0, INFINITY, -INFINITY, NAN, FLT_TRUE_MIN, -FLT_MIN, FLT_MAX, DBL_MAX, DBL_TRUE_MIN,
        1.0 + std::ldexp(1.0, -24), 1.0 + std::ldexp(3.0, -24),  // ties to even
        std::ldexp(1.0, -150), std::ldexp(3.0, -150),            // ties at f32's least subnormal
        double(FLT_MAX) + std::ldexp(1.0, 103),                  // the tie at overflow: inf
        double(FLT_MAX) + std::ldexp(1.0, 102)};
    for (int64_t n : {int64_t(1), int64_t(257), int64_t(70001)}) {
      std::mt19937_64 rng{uint64_t(n)};
      std::uniform_real_distribution<double> mant(-2.0, 2.0);
      std::uniform_int_distribution<int> exp2(-160, 140);
      Tensor src = Tensor::empty({n}, from);
      for (int64_t i = 0; i < n; ++i) {
        double v = mant(rng);
        if (i < int64_t(std::size(specials)))
          v = specials[i];
        else if (i < 4096)
          v = std::ldexp(v, exp2(rng));
        if (from == DType::F32)
          src.data_as<float>()[i] = float(v);
        else
          src.data_as<double>()[i] = v;
      }
      Tensor want = Tensor::empty({n}, to);
      cpu_reference().copy(src, want);
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        Guarded got(n, dtype_size(to));
        emulated_convert(src, want, got);
        QVERIFY(got.guards_intact());
        if (got.holds(want)) continue;
        Tensor g = Tensor::empty({n}, to);
        std::memcpy(g.data(), got.data(), g.nbytes());
        for (int64_t i = 0; i < n; ++i) {
          const double a = value_at(want, i), b = value_at(g, i);
          const bool same = std::isnan(a)
                                ? std::isnan(b)
                                : std::memcmp(static_cast<char*>(want.data()) + i * dtype_size(to),
                                              static_cast<char*>(g.data()) + i * dtype_size(to),
                                              dtype_size(to)) == 0;
          QVERIFY2(same, qPrintable(QString("%1 elements, %2: [%3] %4 -> cpu %5, emulated %6")
                                        .arg(n)
                                        .arg(schedule_name(order))
                                        .arg(i)
                                        .arg(value_at(src, i), 0, 'g', 17)
                                        .arg(a, 0, 'g', 17)
                                        .arg(b, 0, 'g', 17)));
        }
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // CudaBackend::copy's layout conversion on the emulator (transpose_kernel
  // through its 32x32 tile) against the CPU's copy, bit for bit, each
  // element size (u8, f16, f32, f64), NCHW -> NHWC and back, both thread
  // orders, nothing written past either end. Shapes: partial tiles both
  // ways, channels over a tile (37, 70), HW = 1, one channel of 1155, 40
  // images of one partial tile.
  void layout_conversion_emulated_matches_cpu_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<Shape>("shape");
    for (DType dt : {DType::U8, DType::F16, DType::F32, DType::F64})
      for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{3, 37, 6, 11}, Shape{1, 64, 1, 1},
                             Shape{2, 1, 33, 35}, Shape{2, 70, 5, 13}, Shape{40, 5, 3, 3}})
        QTest::addRow("%s %s", dtype_name(dt), shape_str(s).c_str()) << dt << s;
  }
  void layout_conversion_emulated_matches_cpu() {
    QFETCH(DType, dtype);
    QFETCH(Shape, shape);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    CpuBackend& cpu = cpu_reference();
    const Tensor nchw = random_bytes(shape, dtype, 17 + uint64_t(shape_numel(shape)));
    Tensor nhwc = Tensor::empty(shape, dtype, Device::cpu(), Layout::NHWC);
    cpu.copy(nchw, nhwc);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      for (const auto& [src, want] : {std::pair{nchw, nhwc}, std::pair{nhwc, nchw}}) {
        Guarded got(src.numel(), dtype_size(dtype));
        emulated_convert(src, want, got);
        const QString what =
            QString("%1 -> %2, %3")
                .arg(layout_name(src.layout()), layout_name(want.layout()), schedule_name(order));
        QVERIFY2(got.holds(want), qPrintable("differs from the CPU's copy: " + what));
        QVERIFY2(got.guards_intact(), qPrintable("wrote outside its range: " + what));
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // What launch_convert_layout refuses, by name, before launching: another
  // element size, and rows past the grid's y limit (65535 tiles); an empty
  // tensor launches nothing.
  void layout_conversion_emulated_refusals() {
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    std::vector<unsigned char> a(2 * 65536 * 32 + 64), b(a.size());
    QString m = qerror_of([&] {
      tb::cuda_emu::launch_convert_layout(a.data(), b.data(), 1, 2, 3, 4, 3, true, nullptr);
    });
    QVERIFY2(m.contains("unsupported element size 3"), qPrintable(m));
    const int64_t rows = 65535 * 32 + 1;  // one tile row past the grid
    m = qerror_of([&] {
      tb::cuda_emu::launch_convert_layout(a.data(), b.data(), 1, rows, 1, 1, 1, true, nullptr);
    });
    QVERIFY2(m.contains("rows exceed the kernel's grid"), qPrintable(m));
    const int64_t launches = tb_emu::counters().launches;
    tb::cuda_emu::launch_convert_layout(a.data(), b.data(), 0, 3, 4, 5, 4, true, nullptr);
    tb::cuda_emu::launch_convert_layout(a.data(), b.data(), 2, 3, 0, 5, 4, false, nullptr);
    QCOMPARE(tb_emu::counters().launches, launches);
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // ------------------------------------------------------------ sum of squares

  void sum_squares_matches_reference_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32}})
      QTest::newRow(t.name().c_str()) << t;
  }
  void sum_squares_matches_reference() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1234567)}) {
      const Tensor h = random_tensor({n}, uint64_t(41 + n));
      const double ref = optimizer::sum_squares(cpu_reference(), h);
      Tensor d = to_device(be, h);
      const double a = optimizer::sum_squares(be, d), b = optimizer::sum_squares(be, d);
      QVERIFY2(std::abs(a - ref) <= 1e-12 * ref, std::to_string(a - ref).c_str());
      QCOMPARE(a, b);  // deterministic
    }
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestOpTensor)
#include "test_op_tensor.moc"
