// SPDX-License-Identifier: GPL-3.0-or-later
// The augment op family (engine/ops/augment): the ops that turn raw u8
// images into a normalised f32 batch on a backend (augment::normalize_u8 for
// h2d_uint8; augment::augment_normalize_u8 for gpu_augment: crop, flip,
// pad_to and normalise in one pass) and the draws they share with the host
// loader (augment_draw == SampleRng).
//
// The oracle is the host loader's own transform (SampleTransform::apply +
// normalize, transforms.h): every target (the CPU backend, CUDA) must give its
// bits exactly, over many samples, epochs and seeds, with crop, flip and pad_to
// on and off, 1 and 3 channels, NCHW and NHWC output. Bad arguments are refused.
// The CUDA kernels (normalize_u8.cu, augment.cu) also run on the CUDA
// emulator against the CPU op, bit for bit, both thread orders, with 16
// channels too (the *_emulated_* slots).
// The loaders and the trainer that use these ops are in test_device_data and
// test_staging. GPU rows QSKIP with the reason where there is no device.
// The family's test, beside its code (docs/architecture.md, "Op families").
#include <QtTest>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/data/augment_draw.h"
#include "engine/data/sample_rng.h"
#include "engine/data/transforms.h"
#include "engine/ops/augment/augment.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/augment/augment.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

// The loader's normalisation of every image of a u8 NCHW batch.
Tensor host_normalized(const Tensor& u8, const NormStats& stats) {
  Tensor f = Tensor::empty(u8.shape(), DType::F32);
  const Shape chw{u8.c(), u8.h(), u8.w()};
  const int64_t per = u8.c() * u8.h() * u8.w();
  for (int64_t n = 0; n < u8.n(); ++n)
    normalize(u8.data_as<uint8_t>() + n * per, f.data_as<float>() + n * per, chw, stats);
  return f;
}

// The host loader's result for a batch of raw samples: apply + normalize per row.
Tensor host_reference(const Tensor& raw, const std::vector<int32_t>& idx, const SampleTransform& t,
                      uint64_t seed, int64_t epoch) {
  const Shape o = t.output_shape();
  Tensor out = Tensor::empty({raw.n(), o[0], o[1], o[2]}, DType::F32);
  std::vector<uint8_t> tmp(size_t(shape_numel(o)));
  const int64_t in_per = raw.c() * raw.h() * raw.w(), out_per = shape_numel(o);
  for (int64_t n = 0; n < raw.n(); ++n) {
    t.apply(raw.data_as<uint8_t>() + n * in_per, tmp.data(), seed, epoch, idx[size_t(n)]);
    t.normalize(tmp.data(), out.data_as<float>() + n * out_per);
  }
  return out;
}

Tensor indices_tensor(const std::vector<int32_t>& idx) {
  Tensor t = Tensor::empty({int64_t(idx.size())}, DType::I32);
  std::memcpy(t.data(), idx.data(), idx.size() * sizeof(int32_t));
  return t;
}

// NHWC memory of an NCHW host tensor, for comparing NHWC outputs.
Tensor to_nhwc(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::cpu(), Layout::NHWC);
  CpuBackend().copy(x, y);
  return y;
}

struct Case {
  Shape chw;
  int64_t pad_to;  // 0: none
  bool crop;
  int64_t padding;
  bool flip;
  bool norm;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const Shape& chw : {Shape{1, 28, 28}, Shape{3, 7, 9}, Shape{3, 32, 32}})
    for (int64_t pad_to : {int64_t(0), int64_t(32)})
      for (bool crop : {false, true})
        for (bool flip : {false, true}) {
          if (pad_to > 0 && (chw[1] > pad_to || chw[2] > pad_to)) continue;
          const int64_t padding = chw[1] == 7 ? 2 : 4;
          v.push_back({chw, pad_to, crop, padding, flip, chw[0] != 1 || crop});
        }
  return v;
}

TransformOptions options_of(const Case& k) {
  TransformOptions o;
  o.pad_to_h = o.pad_to_w = k.pad_to;
  o.random_crop = k.crop;
  o.crop_padding = k.padding;
  o.random_hflip = k.flip;
  if (k.norm)
    o.norm =
        k.chw[0] == 3 ? standard_norm_stats("cifar10", 3) : standard_norm_stats("fashion-mnist", 1);
  return o;
}

#if defined(TRAINBENCH_CUDA_EMULATED)
namespace emu = tb::cuda_emu;

// An f32 tensor of NaN, so that an output a kernel fails to write shows.
Tensor nan_filled(const Shape& s, Layout l) {
  Tensor t = Tensor::empty(s, DType::F32, Device::cpu(), l);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = std::nanf("");
  return t;
}

// CudaKernels::normalize_u8 (augment_cuda.cpp) with the emulated launcher on
// host tensors: the constants in one buffer, the scales then the shifts.
void normalize_u8_emulated(const Tensor& src, const std::vector<float>& scale,
                           const std::vector<float>& shift, Tensor& dst) {
  std::vector<float> coef(scale);
  coef.insert(coef.end(), shift.begin(), shift.end());
  const int64_t C = src.c();
  emu::launch_normalize_u8(src.data_as<uint8_t>(), dst.data_as<float>(), coef.data(),
                           coef.data() + C, src.n(), C, src.h() * src.w(),
                           src.layout() == Layout::NHWC, nullptr);
}

// CudaKernels::augment_normalize_u8 likewise: the constants in the kernel's
// parameters.
void augment_emulated(const Tensor& src, const Tensor& indices, const AugmentSpec& spec,
                      const std::vector<float>& scale, const std::vector<float>& shift,
                      Tensor& dst) {
  emu::AugmentCoef coef{};
  for (int64_t c = 0; c < src.c(); ++c)
    coef.scale[c] = scale[size_t(c)], coef.shift[c] = shift[size_t(c)];
  emu::launch_augment_normalize_u8(src.data_as<uint8_t>(), indices.data_as<int32_t>(),
                                   dst.data_as<float>(), src.n(), src.c(), src.h(), src.w(), spec,
                                   coef, dst.layout() == Layout::NHWC, nullptr);
}
#endif

}  // namespace

class TestOpAugment : public QObject {
  Q_OBJECT

 private slots:
  // --- the draws: augment_draw restates SampleRng for the transform stream.
  void augment_draw_matches_sample_rng() {
    std::mt19937_64 pick(5);
    int flips = 0, shifted = 0;
    for (int i = 0; i < 20000; ++i) {
      AugmentSpec s;
      s.random_crop = i % 4 != 3;
      s.random_hflip = i % 4 != 2;
      s.crop_padding = int64_t(pick() % 9);
      s.seed = i % 7 == 0 ? pick() : uint64_t(i % 5);
      s.epoch = int64_t(pick() % (i % 3 == 0 ? 1000000007ull : 50));
      const uint64_t index = i % 11 == 0 ? pick() >> 33 : pick() % 70000;
      const AugmentDraw d = augment_draw(s, index);
      SampleRng rng(s.seed, uint64_t(s.epoch), index, kTransformStream);
      int64_t dy = 0, dx = 0;
      bool flip = false;
      if (s.random_crop) {
        const uint64_t n = uint64_t(2 * s.crop_padding + 1);
        dy = int64_t(rng.uniform_int(n)) - s.crop_padding;
        dx = int64_t(rng.uniform_int(n)) - s.crop_padding;
      }
      if (s.random_hflip) flip = rng.coin();
      QCOMPARE(d.dy, dy);
      QCOMPARE(d.dx, dx);
      QCOMPARE(d.flip, flip);
      flips += flip, shifted += dy != 0;
    }
    QVERIFY(flips > 5000 && shifted > 5000);  // the draws really vary
  }

  // --- normalize_u8: the device path of h2d_uint8 must give the host loader's bits.
  void cpu_normalize_u8_matches_loader_bits() {
    CpuBackend& be = cpu_fast();
    for (const char* ds : {"fashion-mnist", "cifar10", "synthetic"}) {
      const int64_t C = std::string(ds) == "fashion-mnist" ? 1 : 3;
      const NormStats stats = standard_norm_stats(ds, C);
      std::vector<float> scale, shift;
      norm_scale_shift(stats, C, scale, shift);
      Tensor u8 = random_u8({5, C, 7, 9}, 11 + C);
      Tensor ref = host_normalized(u8, stats);
      Tensor got = Tensor::empty(u8.shape(), DType::F32);
      augment::normalize_u8(be, u8, scale, shift, got);
      QVERIFY2(bitwise_equal(ref, got), ds);
    }
  }

  // The CUDA kernel against the CPU op (itself the loader's bits, above), NCHW and NHWC.
  void normalize_u8_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : cuda_targets()) QTest::newRow(t.name().c_str()) << t;
  }
  void normalize_u8_matches_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const Layout l = t.layout;
    const NormStats stats = standard_norm_stats("cifar10", 3);
    std::vector<float> scale, shift;
    norm_scale_shift(stats, 3, scale, shift);
    Tensor u8 = random_u8({6, 3, 11, 13}, 21, l);
    Tensor ref = Tensor::empty(u8.shape(), DType::F32, Device::cpu(), l);
    augment::normalize_u8(cpu_fast(), u8, scale, shift, ref);
    Tensor du8 = be.empty(u8.shape(), DType::U8, l), dout = be.empty(u8.shape(), DType::F32, l);
    be.copy(u8, du8);
    augment::normalize_u8(be, du8, scale, shift, dout);
    QVERIFY2(bitwise_equal(ref, to_host(be, dout)), layout_name(l));
    TB_GPU_CATCH
  }


  void normalize_u8_rejects_bad_arguments() {
    CpuBackend& be = cpu_fast();
    Tensor u8 = random_u8({2, 3, 4, 4}, 1);
    Tensor f = Tensor::empty({2, 3, 4, 4}, DType::F32);
    std::vector<float> one(1, 1.0f), three(3, 1.0f);
    // 1 scale, 3 channels
    QVERIFY_THROWS_EXCEPTION(Error, augment::normalize_u8(be, u8, one, one, f));
    Tensor wrong = Tensor::empty({2, 3, 4, 5}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, augment::normalize_u8(be, u8, three, three, wrong));
    QVERIFY_THROWS_EXCEPTION(Error, augment::normalize_u8(be, f, three, three, f));  // src not u8
  }

  // --- augment_normalize_u8: the CPU op against the host loader's transform, bit for bit.

  // --- the CPU op against the host loader's transform, bit for bit.
  void cpu_augment_matches_sample_transform() {
    CpuBackend& be = cpu_fast();
    int checked = 0;
    for (const Case& k : cases()) {
      const TransformOptions o = options_of(k);
      SampleTransform t(k.chw, o);
      std::vector<float> scale, shift;
      norm_scale_shift(o.norm, k.chw[0], scale, shift);
      const int64_t N = 37;
      Tensor raw = random_u8({N, k.chw[0], k.chw[1], k.chw[2]}, 100 + checked);
      std::mt19937_64 pick(checked);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(pick() % 2000000000);
      idx[0] = 0;
      Tensor ind = indices_tensor(idx);
      for (uint64_t seed : {uint64_t(0), uint64_t(77), ~uint64_t(0)})
        for (int64_t epoch : {int64_t(0), int64_t(1), int64_t(9), int64_t(123456)}) {
          const Tensor ref = host_reference(raw, idx, t, seed, epoch);
          Tensor got = Tensor::empty(ref.shape(), DType::F32);
          augment::augment_normalize_u8(be, raw, ind, augment_spec(t, seed, epoch), scale, shift,
                                        got);
          const std::string what = shape_str(k.chw) + " pad_to " + std::to_string(k.pad_to) +
                                   " crop " + std::to_string(k.crop) + " flip " +
                                   std::to_string(k.flip) + " seed " + std::to_string(seed) +
                                   " epoch " + std::to_string(epoch);
          QVERIFY2(bitwise_equal(ref, got), what.c_str());
          Tensor got_nhwc = Tensor::empty(ref.shape(), DType::F32, Device::cpu(), Layout::NHWC);
          augment::augment_normalize_u8(be, raw, ind, augment_spec(t, seed, epoch), scale, shift,
                                        got_nhwc);
          QVERIFY2(bitwise_equal(to_nhwc(ref), got_nhwc), ("nhwc " + what).c_str());
          ++checked;
        }
    }
    QVERIFY(checked >= 200);
  }


  // A wrong draw must show: shifting the epoch changes augmented images.
  void cpu_augment_depends_on_epoch_and_index() {
    CpuBackend& be = cpu_fast();
    TransformOptions o;
    o.random_crop = true;
    o.random_hflip = true;
    SampleTransform t({3, 16, 16}, o);
    std::vector<float> scale, shift;
    norm_scale_shift(o.norm, 3, scale, shift);
    Tensor raw = random_u8({8, 3, 16, 16}, 3);
    Tensor ind = indices_tensor({0, 1, 2, 3, 4, 5, 6, 7});
    Tensor a = Tensor::empty({8, 3, 16, 16}, DType::F32), b = clone(a);
    augment::augment_normalize_u8(be, raw, ind, augment_spec(t, 1, 0), scale, shift, a);
    augment::augment_normalize_u8(be, raw, ind, augment_spec(t, 1, 1), scale, shift, b);
    QVERIFY(!bitwise_equal(a, b));
    Tensor ind2 = indices_tensor({1, 2, 3, 4, 5, 6, 7, 8});
    augment::augment_normalize_u8(be, raw, ind2, augment_spec(t, 1, 0), scale, shift, b);
    QVERIFY(!bitwise_equal(a, b));
  }


  void augment_rejects_bad_arguments() {
    CpuBackend& be = cpu_fast();
    Tensor raw = random_u8({2, 3, 8, 8}, 1);
    Tensor ind = indices_tensor({0, 1});
    AugmentSpec s;
    s.out_h = s.out_w = 8;
    std::vector<float> three(3, 1.0f), one(1, 1.0f);
    Tensor out = Tensor::empty({2, 3, 8, 8}, DType::F32);
    augment::augment_normalize_u8(be, raw, ind, s, three, three, out);  // fine
    QVERIFY_THROWS_EXCEPTION(Error, augment::augment_normalize_u8(be, raw, ind, s, one, one, out));
    Tensor bad_out = Tensor::empty({2, 3, 8, 9}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error,
                             augment::augment_normalize_u8(be, raw, ind, s, three, three, bad_out));
    Tensor f_ind = Tensor::empty({2}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error,
                             augment::augment_normalize_u8(be, raw, f_ind, s, three, three, out));
    Tensor short_ind = indices_tensor({0});
    QVERIFY_THROWS_EXCEPTION(
        Error, augment::augment_normalize_u8(be, raw, short_ind, s, three, three, out));
    AugmentSpec small = s;
    small.out_h = 6;
    Tensor small_out = Tensor::empty({2, 3, 6, 8}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error,
                             augment::augment_normalize_u8(be, raw, ind, small, three, three,
                                                           small_out));
    Tensor nhwc_raw = Tensor::empty({2, 3, 8, 8}, DType::U8, Device::cpu(), Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(
        Error, augment::augment_normalize_u8(be, nhwc_raw, ind, s, three, three, out));
    Tensor neg = indices_tensor({0, -1});
    QVERIFY_THROWS_EXCEPTION(Error,
                             augment::augment_normalize_u8(be, raw, neg, s, three, three, out));
  }


  // ------------------------------------------------------------ GPU slots
  // The CUDA kernel against the CPU op, in the target's output layout.
  void augment_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : cuda_targets()) QTest::newRow(t.name().c_str()) << t;
  }
  void augment_matches_cpu() {
    FETCH_TARGET(target, be);
    TB_GPU_TRY
    CpuBackend& cpu = cpu_fast();
    int checked = 0;
    for (const Case& k : cases()) {
      const TransformOptions o = options_of(k);
      SampleTransform t(k.chw, o);
      std::vector<float> scale, shift;
      norm_scale_shift(o.norm, k.chw[0], scale, shift);
      const int64_t N = 67;
      Tensor raw = random_u8({N, k.chw[0], k.chw[1], k.chw[2]}, 500 + checked);
      std::mt19937_64 pick(checked);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(pick() % 2000000000);
      Tensor ind = indices_tensor(idx);
      Tensor draw = be.empty(raw.shape(), DType::U8), dind = be.empty(ind.shape(), DType::I32);
      be.copy(raw, draw);
      be.copy(ind, dind);
      for (Layout l : {target.layout})
        for (int64_t epoch : {int64_t(0), int64_t(3), int64_t(100000)}) {
          const AugmentSpec s = augment_spec(t, 1234567, epoch);
          const Shape os{N, t.output_shape()[0], t.output_shape()[1], t.output_shape()[2]};
          Tensor ref = Tensor::empty(os, DType::F32, Device::cpu(), l);
          augment::augment_normalize_u8(cpu, raw, ind, s, scale, shift, ref);
          Tensor dout = be.empty(os, DType::F32, l);
          augment::augment_normalize_u8(be, draw, dind, s, scale, shift, dout);
          Tensor got = Tensor::empty(os, DType::F32, Device::cpu(), l);
          be.copy(dout, got);
          QVERIFY2(bitwise_equal(ref, got), (shape_str(k.chw) + " " + layout_name(l)).c_str());
          ++checked;
        }
    }
    QVERIFY(checked > 0);
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ on the CUDA emulator
  // The same kernels on the CUDA emulator (tests/cuda_emulator), here on any
  // machine: the launches of augment_cuda.cpp on host tensors against the CPU
  // op, bit for bit as the GPU slots, under both of the emulator's thread
  // orders. What it does not reproduce (FMA contraction) __fmul_rn/__fadd_rn
  // forbid anyway.

  // normalize_u8: the GPU slot's 6x3x11x13 (11 blocks, the last partial) and
  // 16 channels over 5x7 planes (a channel index that wraps mid-plane in
  // NHWC), both layouts.
  void normalize_u8_emulated_matches_cpu_data() {
    QTest::addColumn<Layout>("layout");
    QTest::addColumn<Shape>("shape");
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (const Shape& s : {Shape{6, 3, 11, 13}, Shape{3, 16, 5, 7}})
        QTest::addRow("%s %s", layout_name(l), shape_str(s).c_str()) << l << s;
  }
  void normalize_u8_emulated_matches_cpu() {
    QFETCH(Layout, layout);
    QFETCH(Shape, shape);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const int64_t C = shape[1];
    std::vector<float> scale, shift;
    if (C == 3) {
      norm_scale_shift(standard_norm_stats("cifar10", 3), 3, scale, shift);
    } else {
      std::mt19937_64 rng(C);
      std::uniform_real_distribution<float> d(-2.0f, 2.0f);
      for (int64_t c = 0; c < C; ++c) scale.push_back(d(rng) / 255.0f), shift.push_back(d(rng));
    }
    const Tensor u8 = random_u8(shape, 21, layout);
    Tensor ref = Tensor::empty(shape, DType::F32, Device::cpu(), layout);
    augment::normalize_u8(cpu_fast(), u8, scale, shift, ref);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor got = nan_filled(shape, layout);
      normalize_u8_emulated(u8, scale, shift, got);
      QVERIFY2(bitwise_equal(ref, got), qPrintable(QString("%1: differs by %2")
                                                       .arg(schedule_name(order))
                                                       .arg(max_abs_diff(ref, got))));
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // augment_normalize_u8: every case of the GPU slot (1 and 3 channels,
  // pad_to, crop, flip; 7x9 leaves most of a block's 256 threads idle, 28x28
  // and 32x32 loop over several passes), 67 samples of random indices, three
  // epochs; and 16 channels (the kernel's most) on a 5x6 image padded to 8x9
  // with crop padding 3: odd placement offsets, outputs wholly in the
  // padding. Both output layouts.
  void augment_emulated_matches_cpu_data() {
    QTest::addColumn<Layout>("layout");
    for (Layout l : {Layout::NCHW, Layout::NHWC}) QTest::newRow(layout_name(l)) << l;
  }
  void augment_emulated_matches_cpu() {
    QFETCH(Layout, layout);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    CpuBackend& cpu = cpu_fast();
    const int64_t N = 67;
    // One batch: the CPU op, then the kernel under both thread orders.
    const auto check = [&](const Tensor& raw, const std::vector<int32_t>& idx,
                           const AugmentSpec& s, const std::vector<float>& scale,
                           const std::vector<float>& shift, const std::string& what) {
      const Tensor ind = indices_tensor(idx);
      const Shape os{raw.n(), raw.c(), s.out_h, s.out_w};
      Tensor ref = Tensor::empty(os, DType::F32, Device::cpu(), layout);
      augment::augment_normalize_u8(cpu, raw, ind, s, scale, shift, ref);
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        Tensor got = nan_filled(os, layout);
        augment_emulated(raw, ind, s, scale, shift, got);
        if (!bitwise_equal(ref, got))
          return what + " " + layout_name(layout) + ", " + schedule_name(order) + ": differs by " +
                 std::to_string(max_abs_diff(ref, got));
      }
      return std::string();
    };
    int checked = 0;
    for (const Case& k : cases()) {
      const TransformOptions o = options_of(k);
      SampleTransform t(k.chw, o);
      std::vector<float> scale, shift;
      norm_scale_shift(o.norm, k.chw[0], scale, shift);
      const Tensor raw = random_u8({N, k.chw[0], k.chw[1], k.chw[2]}, 700 + checked);
      std::mt19937_64 pick(checked);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(pick() % 2000000000);
      for (int64_t epoch : {int64_t(0), int64_t(3), int64_t(100000)}) {
        const std::string what = shape_str(k.chw) + " pad_to " + std::to_string(k.pad_to) +
                                 " crop " + std::to_string(k.crop) + " flip " +
                                 std::to_string(k.flip) + " epoch " + std::to_string(epoch);
        const std::string bad =
            check(raw, idx, augment_spec(t, 1234567, epoch), scale, shift, what);
        QVERIFY2(bad.empty(), bad.c_str());
        ++checked;
      }
    }
    QVERIFY(checked >= 24);
    {
      const int64_t C = emu::kAugmentMaxC;
      std::mt19937_64 rng(16);
      std::uniform_real_distribution<float> d(-2.0f, 2.0f);
      std::vector<float> scale, shift;
      for (int64_t c = 0; c < C; ++c) scale.push_back(d(rng) / 255.0f), shift.push_back(d(rng));
      const Tensor raw = random_u8({N, C, 5, 6}, 716);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(rng() % 100000);
      AugmentSpec s;
      s.out_h = 8, s.out_w = 9;
      s.random_crop = true, s.crop_padding = 3, s.random_hflip = true;
      s.seed = 99;
      for (int64_t epoch : {int64_t(0), int64_t(7)}) {
        s.epoch = epoch;
        const std::string bad =
            check(raw, idx, s, scale, shift, "16x5x6 to 8x9, epoch " + std::to_string(epoch));
        QVERIFY2(bad.empty(), bad.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }
};

QTEST_GUILESS_MAIN(TestOpAugment)
#include "test_op_augment.moc"
