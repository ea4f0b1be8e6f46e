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
// GPU rows and slots QSKIP with the reason where there is no device.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/conv/conv_cudnn.h"
#include "engine/ops/optimizer/optimizer.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;

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
