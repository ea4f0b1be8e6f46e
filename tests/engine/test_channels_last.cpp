// SPDX-License-Identifier: GPL-3.0-or-later
// Tricks 8 (channels_last) and 22 (pad_channels_to).
//
// 1. CPU reference kernels, NHWC (KRSC filters) vs NCHW on fresh random inputs:
//    conv forward/dgrad/wgrad/bias grad (3x3, stride 2, 1x1, 5x5, and NHWC
//    activations with either filter layout), max/avg/global pooling forward and
//    backward (argmax included), batch norm train/eval/backward. The reference
//    visits the same elements in the same order in both layouts, so the results
//    must be bit-identical: tolerance 0. The fast backend given NHWC routes to
//    the reference and must be bit-identical too.
// 2. Finite differences in f64 (tests/engine/gradcheck.h) of conv, pooling, BN,
//    Flatten and PadChannels with NHWC activations: max relative error < 1e-6.
// 3. Whole models on the reference backend, built NHWC vs NCHW with one seed:
//    fmnist-cnn (1x28x28, batch 4) and resnet18-cifar (3x8x8, batch 2): same
//    parameters, logits, loss and parameter gradients (logical order), train and
//    eval forward: bit-identical (tolerance 0).
// 4. PadChannels forward/backward in both layouts (exact), make_model's
//    placement of the layer, and a padded fmnist-cnn training a few SGD steps on
//    the CPU in both layouts (finite, decreasing loss; NHWC = NCHW losses).
// 5. GPU slots (QSKIP without a CUDA device or a CUDA build): the CUDA backend's
//    NHWC model step vs the CPU NCHW reference (strict fp32 engines on both:
//    tb::test::network_tolerance from the model's depth and longest
//    reduction, relative to the largest magnitude), and the pad kernels vs
//    the CPU (exact).
//    NOTE: written on a machine without a GPU; the GPU slots compiled and
//    skipped there and have not been run on a GPU.
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/nn/pad_channels.h"
#include "engine/nn/pooling.h"
#include "engine/optim/optimizer.h"
#include "tests/engine/gradcheck.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "tests/engine/gpu_slot.h"

using namespace tb;

namespace {

constexpr double kGradTol = 1e-6;  // f64 finite differences

// Random values in [-1, 1), never exactly zero, logical NCHW order, then laid
// out as `l` by an explicit copy.
Tensor random_tensor(const Shape& s, DType t, std::mt19937_64& rng, Layout l = Layout::NCHW) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Tensor x = Tensor::empty(s, t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = d(rng);
    if (v == 0.0) v = 0.25;
    if (t == DType::F64)
      x.data_as<double>()[i] = v;
    else
      x.data_as<float>()[i] = float(v);
  }
  if (s.size() != 4 || l == Layout::NCHW) return x;
  CpuBackend be;
  Tensor y = Tensor::empty(s, t, Device::cpu(), l);
  be.copy(x, y);
  return y;
}

// The tensor (CPU, any layout) as an NCHW host tensor (converted by copy).
Tensor to_nchw(const Tensor& t) {
  CpuBackend be;
  Tensor y = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), Layout::NCHW);
  be.copy(t, y);
  return y;
}

Tensor like(const Tensor& t, Layout l) {
  return Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.rank() == 4 ? l : Layout::NCHW);
}

double value(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F64:
      return t.data_as<double>()[i];
    case DType::I32:
      return t.data_as<int32_t>()[i];
    default:
      return t.data_as<float>()[i];
  }
}

// max |a - b| over logical positions (both converted to NCHW first); INFINITY
// when shapes or dtypes differ.
double max_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  const Tensor x = a.rank() == 4 ? to_nchw(a) : a, y = b.rank() == 4 ? to_nchw(b) : b;
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = std::abs(value(x, i) - value(y, i));
    if (!(d <= m)) m = d;  // NaN counts as the worst
  }
  return m;
}

// max |got - ref| / max |ref| (logical order).
double scaled_diff(const Tensor& ref, const Tensor& got) {
  const Tensor r = ref.rank() == 4 ? to_nchw(ref) : ref;
  double scale = 1e-30;
  for (int64_t i = 0; i < r.numel(); ++i) scale = std::max(scale, std::abs(value(r, i)));
  return max_diff(ref, got) / scale;
}

#define EXPECT_SAME(a, b, what)                                                                  \
  do {                                                                                           \
    const double d_ = max_diff(a, b);                                                            \
    QVERIFY2(                                                                                    \
        d_ == 0.0,                                                                               \
        qPrintable(QString("%1: NHWC differs from NCHW by %2 (expected 0)").arg(what).arg(d_))); \
  } while (0)

Tensor i32_tensor(const Shape& s, Layout l) {
  return Tensor::empty(s, DType::I32, Device::cpu(), l);
}

// Mean softmax cross-entropy loss of logits against labels, with dlogits.
double loss_and_grad(Backend& be, const Tensor& logits, const Tensor& labels, Tensor& dlogits) {
  Tensor stats = be.empty({2}, DType::F64);
  be.fill(stats, 0.0);
  be.softmax_cross_entropy(logits, labels, 0.0f, 1.0f, dlogits, stats);
  Tensor host = Tensor::empty({2}, DType::F64);
  be.copy(stats, host);
  return host.data_as<double>()[0] / double(logits.dim(0));
}

Tensor random_labels(int64_t n, int64_t classes, std::mt19937_64& rng) {
  Tensor y = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) y.data_as<int32_t>()[i] = int32_t(rng() % uint64_t(classes));
  return y;
}

}  // namespace

class TestChannelsLast : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ 1. ops, NHWC vs NCHW

  void conv_nhwc_matches_nchw_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("Cin");
    QTest::addColumn<int>("H");
    QTest::addColumn<int>("W");
    QTest::addColumn<int>("Cout");
    QTest::addColumn<int>("K");
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("pad");
    QTest::newRow("3x3 s1 p1") << 2 << 3 << 9 << 7 << 5 << 3 << 1 << 1;
    QTest::newRow("3x3 s2 p1") << 2 << 4 << 9 << 8 << 6 << 3 << 2 << 1;
    QTest::newRow("1x1 s1") << 3 << 6 << 5 << 5 << 4 << 1 << 1 << 0;
    QTest::newRow("1x1 s2 (shortcut)") << 2 << 4 << 6 << 6 << 8 << 1 << 2 << 0;
    QTest::newRow("5x5 s2 p2") << 1 << 2 << 11 << 10 << 3 << 5 << 2 << 2;
    QTest::newRow("3x3 s1 p0 C=1") << 2 << 1 << 6 << 6 << 8 << 3 << 1 << 0;
  }
  void conv_nhwc_matches_nchw() {
    QFETCH(int, N);
    QFETCH(int, Cin);
    QFETCH(int, H);
    QFETCH(int, W);
    QFETCH(int, Cout);
    QFETCH(int, K);
    QFETCH(int, stride);
    QFETCH(int, pad);
    const ConvGeometry g = ConvGeometry::make(N, Cin, H, W, Cout, K, stride, pad);
    CpuBackend ref(BackendOptions{.reference = true});
    CpuBackend fast(BackendOptions{.threads = 2});
    for (DType t : {DType::F32, DType::F64}) {
      std::mt19937_64 rng(1000 + N * 100 + K * 10 + stride);
      const Tensor x = random_tensor(g.input_shape(), t, rng);
      const Tensor w = random_tensor(g.weight_shape(), t, rng);
      const Tensor b = random_tensor({g.C_out}, t, rng);
      const Tensor dy = random_tensor(g.output_shape(), t, rng);

      // NCHW oracle on the reference kernels.
      Tensor y0 = like(dy, Layout::NCHW), dx0 = like(x, Layout::NCHW), dw0 = like(w, Layout::NCHW),
             db0 = like(b, Layout::NCHW);
      ref.conv2d_forward(g, x, w, b, y0);
      ref.conv2d_backward(g, x, w, dy, dx0, dw0, db0, false);

      // NHWC activations with KRSC filters (cuDNN channels-last), and with KCRS
      // filters; on the reference backend and on the fast one (which routes
      // NHWC to the reference).
      for (Layout wl : {Layout::NHWC, Layout::NCHW})
        for (CpuBackend* be : {&ref, &fast}) {
          const QString what = QString("%1 filters %2 %3")
                                   .arg(layout_name(wl))
                                   .arg(be->reference() ? "reference" : "fast")
                                   .arg(t == DType::F64 ? "f64" : "f32");
          Tensor xn = like(x, Layout::NHWC), wn = like(w, wl), dyn = like(dy, Layout::NHWC);
          be->copy(x, xn);
          be->copy(w, wn);
          be->copy(dy, dyn);
          Tensor y1 = like(dy, Layout::NHWC), dx1 = like(x, Layout::NHWC), dw1 = like(w, wl),
                 db1 = like(b, Layout::NCHW);
          be->conv2d_forward(g, xn, wn, b, y1);
          be->conv2d_backward(g, xn, wn, dyn, dx1, dw1, db1, false);
          EXPECT_SAME(y0, y1, qPrintable("y " + what));
          EXPECT_SAME(dx0, dx1, qPrintable("dx " + what));
          EXPECT_SAME(dw0, dw1, qPrintable("dw " + what));
          EXPECT_SAME(db0, db1, qPrintable("db " + what));
          // accumulate=true adds the same gradient again: dw = 2·dw0 exactly.
          Tensor none;
          be->conv2d_backward(g, xn, wn, dyn, none, dw1, db1, true);
          Tensor two_dw0 = like(w, Layout::NCHW);
          be->copy(dw0, two_dw0);
          be->scale(two_dw0, 2.0);
          EXPECT_SAME(two_dw0, dw1, qPrintable("accumulated dw " + what));
        }
    }
  }

  void conv_layout_errors() {
    CpuBackend be(BackendOptions{.reference = true});
    const ConvGeometry g = ConvGeometry::make(1, 2, 4, 4, 3, 3, 1, 1);
    std::mt19937_64 rng(7);
    const Tensor x = random_tensor(g.input_shape(), DType::F32, rng, Layout::NHWC);
    const Tensor w = random_tensor(g.weight_shape(), DType::F32, rng, Layout::NHWC);
    Tensor y_nchw = Tensor::empty(g.output_shape(), DType::F32);  // mixed activations
    QVERIFY_THROWS_EXCEPTION(tb::Error, be.conv2d_forward(g, x, w, Tensor{}, y_nchw));
    Tensor dy = random_tensor(g.output_shape(), DType::F32, rng, Layout::NHWC);
    Tensor dx_nchw = Tensor::empty(g.input_shape(), DType::F32), none;
    QVERIFY_THROWS_EXCEPTION(tb::Error,
                             be.conv2d_backward(g, x, w, dy, dx_nchw, none, none, false));
  }

  void pool_nhwc_matches_nchw_data() {
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("pad");
    QTest::newRow("2/2/0") << 2 << 2 << 0;
    QTest::newRow("3/2/1 overlapping") << 3 << 2 << 1;
    QTest::newRow("3/1/1") << 3 << 1 << 1;
  }
  void pool_nhwc_matches_nchw() {
    QFETCH(int, kernel);
    QFETCH(int, stride);
    QFETCH(int, pad);
    const PoolGeometry g = PoolGeometry::make(2, 5, 9, 8, kernel, stride, pad);
    CpuBackend ref(BackendOptions{.reference = true});
    CpuBackend fast(BackendOptions{.threads = 2});
    for (DType t : {DType::F32, DType::F64}) {
      std::mt19937_64 rng(300 + kernel * 10 + stride);
      const Tensor x = random_tensor(g.input_shape(), t, rng);
      const Tensor dy = random_tensor(g.output_shape(), t, rng);
      Tensor my0 = like(dy, Layout::NCHW), am0 = i32_tensor(g.output_shape(), Layout::NCHW),
             mdx0 = like(x, Layout::NCHW), ay0 = like(dy, Layout::NCHW),
             adx0 = like(x, Layout::NCHW);
      ref.maxpool2d_forward(g, x, my0, am0);
      ref.maxpool2d_backward(g, dy, am0, mdx0);
      ref.avgpool2d_forward(g, x, ay0);
      ref.avgpool2d_backward(g, dy, adx0);
      for (CpuBackend* be : {&ref, &fast}) {
        const QString what =
            QString(be->reference() ? "reference" : "fast") + (t == DType::F64 ? " f64" : " f32");
        Tensor xn = like(x, Layout::NHWC), dyn = like(dy, Layout::NHWC);
        be->copy(x, xn);
        be->copy(dy, dyn);
        Tensor my1 = like(dy, Layout::NHWC), am1 = i32_tensor(g.output_shape(), Layout::NHWC),
               mdx1 = like(x, Layout::NHWC), ay1 = like(dy, Layout::NHWC),
               adx1 = like(x, Layout::NHWC);
        be->maxpool2d_forward(g, xn, my1, am1);
        be->maxpool2d_backward(g, dyn, am1, mdx1);
        be->avgpool2d_forward(g, xn, ay1);
        be->avgpool2d_backward(g, dyn, adx1);
        EXPECT_SAME(my0, my1, qPrintable("max y " + what));
        // argmax: the (H, W) plane index in both layouts (as pool.cu defines it).
        EXPECT_SAME(am0, am1, qPrintable("argmax " + what));
        EXPECT_SAME(mdx0, mdx1, qPrintable("max dx " + what));
        EXPECT_SAME(ay0, ay1, qPrintable("avg y " + what));
        EXPECT_SAME(adx0, adx1, qPrintable("avg dx " + what));
      }
    }
  }

  // The argmax of an NHWC max pool is the plane index ih*W + iw (not a memory
  // offset): planted maxima at known cells.
  void maxpool_nhwc_argmax_known() {
    CpuBackend be(BackendOptions{.reference = true});
    const PoolGeometry g = PoolGeometry::make(1, 3, 4, 4, 2, 2, 0);
    std::mt19937_64 rng(11);
    Tensor x = random_tensor(g.input_shape(), DType::F32, rng);  // values in [-1, 1)
    // channel c: the maximum of output cell (0, 1) at input (1, 2 + c % 2).
    for (int c = 0; c < 3; ++c) x.data_as<float>()[(c * 4 + 1) * 4 + 2 + c % 2] = 5.0f + c;
    Tensor xn = like(x, Layout::NHWC);
    be.copy(x, xn);
    Tensor y = Tensor::empty(g.output_shape(), DType::F32, Device::cpu(), Layout::NHWC);
    Tensor am = i32_tensor(g.output_shape(), Layout::NHWC);
    be.maxpool2d_forward(g, xn, y, am);
    for (int c = 0; c < 3; ++c) {
      const int64_t o = offset4(Layout::NHWC, 3, 2, 2, 0, c, 0, 1);
      QCOMPARE(am.data_as<int32_t>()[o], 1 * 4 + 2 + c % 2);
      QCOMPARE(y.data_as<float>()[o], 5.0f + c);
    }
  }

  void global_pool_nhwc_matches_nchw() {
    CpuBackend ref(BackendOptions{.reference = true});
    CpuBackend fast(BackendOptions{.threads = 2});
    for (DType t : {DType::F32, DType::F64}) {
      std::mt19937_64 rng(21);
      const Tensor x = random_tensor({3, 7, 5, 6}, t, rng);
      const Tensor dy = random_tensor({3, 7}, t, rng);
      Tensor y0 = like(dy, Layout::NCHW), dx0 = like(x, Layout::NCHW);
      ref.global_avgpool_forward(x, y0);
      ref.global_avgpool_backward(dy, dx0);
      for (CpuBackend* be : {&ref, &fast}) {
        Tensor xn = like(x, Layout::NHWC), y1 = like(dy, Layout::NCHW), dx1 = like(x, Layout::NHWC);
        be->copy(x, xn);
        be->global_avgpool_forward(xn, y1);
        be->global_avgpool_backward(dy, dx1);
        EXPECT_SAME(y0, y1, "global avgpool y");
        EXPECT_SAME(dx0, dx1, "global avgpool dx");
      }
    }
  }

  void batchnorm_nhwc_matches_nchw() {
    CpuBackend ref(BackendOptions{.reference = true});
    CpuBackend fast(BackendOptions{.threads = 2});
    for (DType t : {DType::F32, DType::F64}) {
      std::mt19937_64 rng(31);
      const int64_t C = 6;
      Tensor x = random_tensor({3, C, 5, 4}, t, rng);
      // An offset per channel so means and variances differ between channels.
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t c = (i / 20) % C;
        if (t == DType::F64)
          x.data_as<double>()[i] = x.data_as<double>()[i] * (1 + c) + 0.5 * c;
        else
          x.data_as<float>()[i] = x.data_as<float>()[i] * float(1 + c) + 0.5f * float(c);
      }
      const Tensor dy = random_tensor(x.shape(), t, rng);
      const Tensor gamma = random_tensor({C}, t, rng), beta = random_tensor({C}, t, rng);
      const Tensor rm_init = random_tensor({C}, t, rng);
      Tensor rv_init = random_tensor({C}, t, rng);
      for (int64_t i = 0; i < C; ++i)  // positive running variances
        if (t == DType::F64)
          rv_init.data_as<double>()[i] = 1.5 + rv_init.data_as<double>()[i];
        else
          rv_init.data_as<float>()[i] = 1.5f + rv_init.data_as<float>()[i];
      auto vec = [&](const Tensor& init) {
        Tensor v = like(init, Layout::NCHW);
        std::memcpy(v.data(), init.data(), init.nbytes());
        return v;
      };
      // NCHW oracle.
      Tensor rm0 = vec(rm_init), rv0 = vec(rv_init), sm0 = like(gamma, Layout::NCHW),
             si0 = like(gamma, Layout::NCHW), y0 = like(x, Layout::NCHW),
             ye0 = like(x, Layout::NCHW), dx0 = like(x, Layout::NCHW),
             dg0 = like(gamma, Layout::NCHW), db0 = like(gamma, Layout::NCHW);
      ref.batchnorm_forward_train(x, gamma, beta, rm0, rv0, 0.1f, 1e-5f, y0, sm0, si0);
      ref.batchnorm_backward(x, dy, gamma, sm0, si0, dx0, dg0, db0, false);
      ref.batchnorm_forward_eval(x, gamma, beta, rm_init, rv_init, 1e-5f, ye0);
      for (CpuBackend* be : {&ref, &fast}) {
        const QString what =
            QString(be->reference() ? "reference" : "fast") + (t == DType::F64 ? " f64" : " f32");
        Tensor xn = like(x, Layout::NHWC), dyn = like(x, Layout::NHWC);
        be->copy(x, xn);
        be->copy(dy, dyn);
        Tensor rm1 = vec(rm_init), rv1 = vec(rv_init), sm1 = like(gamma, Layout::NCHW),
               si1 = like(gamma, Layout::NCHW), y1 = like(x, Layout::NHWC),
               ye1 = like(x, Layout::NHWC), dx1 = like(x, Layout::NHWC),
               dg1 = like(gamma, Layout::NCHW), db1 = like(gamma, Layout::NCHW);
        be->batchnorm_forward_train(xn, gamma, beta, rm1, rv1, 0.1f, 1e-5f, y1, sm1, si1);
        be->batchnorm_backward(xn, dyn, gamma, sm1, si1, dx1, dg1, db1, false);
        be->batchnorm_forward_eval(xn, gamma, beta, rm_init, rv_init, 1e-5f, ye1);
        EXPECT_SAME(y0, y1, qPrintable("bn train y " + what));
        EXPECT_SAME(rm0, rm1, qPrintable("bn running_mean " + what));
        EXPECT_SAME(rv0, rv1, qPrintable("bn running_var " + what));
        EXPECT_SAME(sm0, sm1, qPrintable("bn save_mean " + what));
        EXPECT_SAME(si0, si1, qPrintable("bn save_invstd " + what));
        EXPECT_SAME(dx0, dx1, qPrintable("bn dx " + what));
        EXPECT_SAME(dg0, dg1, qPrintable("bn dgamma " + what));
        EXPECT_SAME(db0, db1, qPrintable("bn dbeta " + what));
        EXPECT_SAME(ye0, ye1, qPrintable("bn eval y " + what));
      }
    }
  }

  // ------------------------------------------------------------ 2. finite differences, NHWC

  void gradcheck_nhwc_data() {
    QTest::addColumn<QString>("layer");
    QTest::addColumn<bool>("training");
    QTest::newRow("conv 3x3 s1 p1") << "conv3" << true;
    QTest::newRow("conv 3x3 s2 p1") << "conv3s2" << true;
    QTest::newRow("conv 1x1 s2") << "conv1s2" << true;
    QTest::newRow("maxpool 3/2/1") << "maxpool" << true;
    QTest::newRow("avgpool 3/2/1") << "avgpool" << true;
    QTest::newRow("global avgpool") << "gap" << true;
    QTest::newRow("batchnorm train") << "bn" << true;
    QTest::newRow("batchnorm eval") << "bn" << false;
    QTest::newRow("flatten") << "flatten" << true;
    QTest::newRow("pad_channels 3 -> 8") << "pad" << true;
  }
  void gradcheck_nhwc() {
    QFETCH(QString, layer);
    QFETCH(bool, training);
    std::unique_ptr<Layer> l;
    if (layer == "conv3") l = std::make_unique<Conv2d>("conv", 4, 3, 1, 1, true);
    if (layer == "conv3s2") l = std::make_unique<Conv2d>("conv", 4, 3, 2, 1, true);
    if (layer == "conv1s2") l = std::make_unique<Conv2d>("conv", 5, 1, 2, 0, false);
    if (layer == "maxpool") l = std::make_unique<MaxPool2d>("pool", 3, 2, 1);
    if (layer == "avgpool") l = std::make_unique<AvgPool2d>("pool", 3, 2, 1);
    if (layer == "gap") l = std::make_unique<GlobalAvgPool>("pool");
    if (layer == "bn") l = std::make_unique<BatchNorm2d>("bn");
    if (layer == "flatten") l = std::make_unique<Flatten>("flatten");
    if (layer == "pad") l = std::make_unique<PadChannels>("pad", 8);
    QVERIFY(l);
    const auto r =
        test::gradcheck_layer(std::move(l), {2, 3, 6, 5}, 77, training, 1e-6, Layout::NHWC);
    QVERIFY2(r.max_rel_error_dx < kGradTol, qPrintable(QString("dx rel error %1 at %2")
                                                           .arg(r.max_rel_error_dx)
                                                           .arg(QString::fromStdString(r.worst))));
    QVERIFY2(r.max_rel_error_params < kGradTol,
             qPrintable(QString("param rel error %1 at %2")
                            .arg(r.max_rel_error_params)
                            .arg(QString::fromStdString(r.worst))));
  }

  // ------------------------------------------------------------ 3. whole models

  void model_nhwc_matches_nchw_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("HW");
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("pad");
    QTest::newRow("fmnist-cnn 1x28x28") << "fmnist-cnn" << 1 << 28 << 4 << 0;
    QTest::newRow("fmnist-cnn 1x28x28 pad 8") << "fmnist-cnn" << 1 << 28 << 4 << 8;
    QTest::newRow("resnet18-cifar 3x8x8") << "resnet18-cifar" << 3 << 8 << 2 << 0;
  }
  void model_nhwc_matches_nchw() {
    QFETCH(QString, model);
    QFETCH(int, C);
    QFETCH(int, HW);
    QFETCH(int, batch);
    QFETCH(int, pad);
    const int64_t classes = 10;
    CpuBackend be(BackendOptions{.reference = true});
    ModelOptions mo;
    mo.pad_channels_to = pad;
    auto a = make_model(model.toStdString(), {C, HW, HW}, classes, mo);
    auto b = make_model(model.toStdString(), {C, HW, HW}, classes, mo);
    a->build(be, 42, DType::F32, Layout::NCHW);
    b->build(be, 42, DType::F32, Layout::NHWC);
    QCOMPARE(a->params().size(), b->params().size());
    bool some_nhwc = false;
    for (size_t i = 0; i < a->params().size(); ++i) {
      some_nhwc |=
          b->params()[i].value.rank() == 4 && b->params()[i].value.layout() == Layout::NHWC;
      EXPECT_SAME(a->params()[i].value, b->params()[i].value,
                  qPrintable(QString::fromStdString("initial " + a->params()[i].name)));
    }
    QVERIFY(some_nhwc);  // the conv weights really are KRSC

    std::mt19937_64 rng(5);
    const Tensor x = random_tensor({batch, C, HW, HW}, DType::F32, rng);
    const Tensor labels = random_labels(batch, classes, rng);
    Tensor xn = like(x, Layout::NHWC);
    be.copy(x, xn);

    Context ca{be}, cb{be};
    ca.layout = Layout::NCHW;
    cb.layout = Layout::NHWC;
    Tensor la = a->forward(ca, x), lb = b->forward(cb, xn);
    EXPECT_SAME(la, lb, "logits");
    Tensor da = Tensor::empty(la.shape(), DType::F32), db = Tensor::empty(lb.shape(), DType::F32);
    const double loss_a = loss_and_grad(be, la, labels, da);
    const double loss_b = loss_and_grad(be, lb, labels, db);
    QVERIFY(std::isfinite(loss_a));
    QCOMPARE(loss_b, loss_a);
    a->backward(ca, da);
    b->backward(cb, db);
    double grad_norm = 0.0;
    for (size_t i = 0; i < a->params().size(); ++i) {
      EXPECT_SAME(a->params()[i].grad, b->params()[i].grad,
                  qPrintable(QString::fromStdString("grad " + a->params()[i].name)));
      grad_norm += be.sum_squares(a->params()[i].grad);
    }
    QVERIFY(grad_norm > 0.0);  // gradients that are all zero would compare equal trivially
    for (size_t i = 0; i < a->buffers().size(); ++i)
      EXPECT_SAME(a->buffers()[i].value, b->buffers()[i].value,
                  qPrintable(QString::fromStdString(a->buffers()[i].name)));

    // Eval mode (BN on running statistics).
    ca.training = cb.training = false;
    EXPECT_SAME(a->forward(ca, x), b->forward(cb, xn), "eval logits");
  }

  // ------------------------------------------------------------ 4. PadChannels

  void pad_channels_op() {
    CpuBackend be(BackendOptions{.reference = true});
    for (DType t : {DType::F32, DType::F64}) {
      std::mt19937_64 rng(9);
      const Tensor x = random_tensor({2, 3, 4, 5}, t, rng);
      const Tensor dy = random_tensor({2, 8, 4, 5}, t, rng);
      Tensor y0 = Tensor::empty({2, 8, 4, 5}, t), dx0 = like(x, Layout::NCHW);
      be.pad_channels_forward(x, y0);
      be.pad_channels_backward(dy, dx0);
      // Against the definition, element by element (logical order).
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 8; ++c)
          for (int64_t i = 0; i < 20; ++i) {
            const double got = value(y0, (n * 8 + c) * 20 + i);
            const double want = c < 3 ? value(x, (n * 3 + c) * 20 + i) : 0.0;
            QCOMPARE(got, want);
            if (c < 3) QCOMPARE(value(dx0, (n * 3 + c) * 20 + i), value(dy, (n * 8 + c) * 20 + i));
          }
      // NHWC gives the same logical tensors.
      Tensor xn = like(x, Layout::NHWC), dyn = like(dy, Layout::NHWC);
      be.copy(x, xn);
      be.copy(dy, dyn);
      Tensor y1 = like(dy, Layout::NHWC), dx1 = like(x, Layout::NHWC);
      be.pad_channels_forward(xn, y1);
      be.pad_channels_backward(dyn, dx1);
      EXPECT_SAME(y0, y1, "pad forward");
      EXPECT_SAME(dx0, dx1, "pad backward");
    }
    // Errors: fewer channels out than in, mixed layouts.
    std::mt19937_64 rng(3);
    const Tensor x = random_tensor({1, 4, 2, 2}, DType::F32, rng);
    Tensor narrow = Tensor::empty({1, 2, 2, 2}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(tb::Error, be.pad_channels_forward(x, narrow));
    Tensor mixed = Tensor::empty({1, 8, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(tb::Error, be.pad_channels_forward(x, mixed));
  }

  void pad_channels_in_models() {
    ModelOptions mo;
    mo.pad_channels_to = 8;
    struct Case {
      std::string model;
      Shape in;
      int64_t want_in, want_out;  // 0: no PadChannels layer
    };
    for (const Case& k :
         {Case{"fmnist-cnn", {1, 28, 28}, 1, 8}, Case{"resnet18-cifar", {3, 32, 32}, 3, 8},
          Case{"resnet9", {3, 32, 32}, 3, 8}, Case{"fmnist-cnn", {8, 28, 28}, 0, 0}}) {
      auto m = make_model(k.model, k.in, 10, mo);
      const auto* pad = dynamic_cast<const PadChannels*>(m->layers().front().get());
      QCOMPARE(pad != nullptr, k.want_in > 0);
      CpuBackend be;
      m->build(be, 1);
      if (pad) {
        QCOMPARE(pad->in_channels(), k.want_in);
        QCOMPARE(pad->out_channels(), k.want_out);
        // The first convolution's weight is (Cout, 8, 3, 3).
        QCOMPARE(m->params().front().value.dim(1), int64_t(8));
      }
      QCOMPARE(m->layers().back()->kind(), std::string("linear"));  // classes never padded
    }
    // pad_channels_to = 0: no layer.
    auto plain = make_model("fmnist-cnn", {1, 28, 28}, 10, ModelOptions{});
    QVERIFY(dynamic_cast<const PadChannels*>(plain->layers().front().get()) == nullptr);
  }

  // A padded fmnist-cnn trains on the CPU, NCHW and NHWC (reference kernels, so
  // the two runs must give the same losses), on one fixed random batch.
  void padded_model_trains() {
    const int64_t batch = 8, classes = 10, steps = 5;
    std::mt19937_64 rng(17);
    const Tensor x = random_tensor({batch, 1, 28, 28}, DType::F32, rng);
    const Tensor labels = random_labels(batch, classes, rng);
    std::vector<double> losses[2];
    for (int li = 0; li < 2; ++li) {
      const Layout l = li == 0 ? Layout::NCHW : Layout::NHWC;
      CpuBackend be(BackendOptions{.reference = true});
      ModelOptions mo;
      mo.pad_channels_to = 8;
      auto m = make_model("fmnist-cnn", {1, 28, 28}, classes, mo);
      m->build(be, 3, DType::F32, l);
      OptimizerConfig oc;
      oc.kind = OptimizerKind::SGD;
      oc.lr = 0.01f;
      oc.momentum = 0.9f;
      Optimizer opt(oc, *m, be);
      Context ctx{be};
      ctx.layout = l;
      Tensor xl = like(x, l);
      be.copy(x, xl);
      Tensor dlogits = Tensor::empty({batch, classes}, DType::F32);
      for (int64_t s = 0; s < steps; ++s) {
        Tensor logits = m->forward(ctx, xl);
        losses[li].push_back(loss_and_grad(be, logits, labels, dlogits));
        ctx.accumulate_grads = false;
        m->backward(ctx, dlogits);
        opt.step(oc.lr);
      }
    }
    qDebug("padded fmnist-cnn losses (NCHW): %g %g %g %g %g", losses[0][0], losses[0][1],
           losses[0][2], losses[0][3], losses[0][4]);
    for (int li = 0; li < 2; ++li) {
      for (double v : losses[li]) QVERIFY(std::isfinite(v));
      // SGD lr 0.01, momentum 0.9 on one batch: about 2.35 -> 0.45, every step lower.
      for (int64_t s = 1; s < steps; ++s) QVERIFY(losses[li][s] < losses[li][s - 1]);
      QVERIFY2(losses[li].back() < 0.5 * losses[li].front(),
               qPrintable(QString("loss %1 -> %2").arg(losses[li].front()).arg(losses[li].back())));
    }
    for (int64_t s = 0; s < steps; ++s)
      QVERIFY2(std::abs(losses[1][s] - losses[0][s]) <= 1e-6 * std::abs(losses[0][s]),
               qPrintable(QString("step %1: NHWC loss %2 vs NCHW %3")
                              .arg(s)
                              .arg(losses[1][s], 0, 'g', 10)
                              .arg(losses[0][s], 0, 'g', 10)));
  }

  // ------------------------------------------------------------ 5. GPU slots

  void cuda_nhwc_model_step_matches_cpu_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("HW");
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("pad");
    // depth: 2 x (conv + linear + batch-norm layers); k: the longest reduction
    // (fc1's 3136 features and N·H·W = 3136; ResNet's 512·3·3).
    QTest::addColumn<int>("depth");
    QTest::addColumn<int>("k");
    QTest::newRow("fmnist-cnn") << "fmnist-cnn" << 1 << 28 << 4 << 0 << 12 << 3136;
    QTest::newRow("fmnist-cnn pad 8") << "fmnist-cnn" << 1 << 28 << 4 << 8 << 12 << 3136;
    QTest::newRow("resnet18-cifar 3x16x16 pad 8")
        << "resnet18-cifar" << 3 << 16 << 2 << 8 << 84 << 4608;
  }
  void cuda_nhwc_model_step_matches_cpu() {
#ifndef TRAINBENCH_HAVE_CUDA
    QSKIP("no CUDA device (this build has no CUDA backend)");
#else
    std::string why;
    if (cuda_device_count(&why) == 0)
      QSKIP(qPrintable(QString::fromStdString("no CUDA device: " + why)));
    TB_GPU_TRY
    QFETCH(QString, model);
    QFETCH(int, C);
    QFETCH(int, HW);
    QFETCH(int, batch);
    QFETCH(int, pad);
    QFETCH(int, depth);
    QFETCH(int, k);
    const double tol = tb::test::network_tolerance("fp32", depth, k);
    const std::string row = QTest::currentDataTag();
    const int64_t classes = 10;
    CpuBackend cpu(BackendOptions{.reference = true});
    auto gpu = make_cuda_backend(0, BackendOptions{});
    ModelOptions mo;
    mo.pad_channels_to = pad;
    auto a = make_model(model.toStdString(), {C, HW, HW}, classes, mo);
    auto b = make_model(model.toStdString(), {C, HW, HW}, classes, mo);
    a->build(cpu, 42, DType::F32, Layout::NCHW);
    b->build(*gpu, 42, DType::F32, Layout::NHWC);
    std::mt19937_64 rng(5);
    const Tensor x = random_tensor({batch, C, HW, HW}, DType::F32, rng);
    const Tensor labels = random_labels(batch, classes, rng);
    // The trainer's input path: host NCHW -> device NHWC in one explicit copy.
    Tensor xd = gpu->empty(x.shape(), DType::F32, Layout::NHWC);
    gpu->copy(x, xd);
    Tensor yd = gpu->empty(labels.shape(), DType::I32);
    gpu->copy(labels, yd);
    Context ca{cpu}, cb{*gpu};
    cb.layout = Layout::NHWC;
    Tensor la = a->forward(ca, x), lb = b->forward(cb, xd);
    Tensor da = Tensor::empty(la.shape(), DType::F32), db = gpu->empty(lb.shape(), DType::F32);
    const double loss_a = loss_and_grad(cpu, la, labels, da);
    const double loss_b = loss_and_grad(*gpu, lb, yd, db);
    a->backward(ca, da);
    b->backward(cb, db);
    auto host = [&](const Tensor& t) {  // device (any layout) -> host NCHW, by copy
      Tensor h = Tensor::empty(t.shape(), t.dtype());
      gpu->copy(t, h);
      return h;
    };
    const double e_logits = scaled_diff(la, host(lb));
    QVERIFY2(tb::test::report_tolerance("fp32", e_logits, tol, row + " logits"),
             qPrintable(QString("logits: %1 > %2").arg(e_logits).arg(tol)));
    QVERIFY2(tb::test::report_tolerance("fp32", std::abs(loss_b - loss_a) / std::abs(loss_a), tol,
                                        row + " loss"),
             qPrintable(QString("loss %1 vs %2").arg(loss_b).arg(loss_a)));
    for (size_t i = 0; i < a->params().size(); ++i) {
      const double e = scaled_diff(a->params()[i].grad, host(b->params()[i].grad));
      const std::string name = a->params()[i].name;
      QVERIFY2(tb::test::report_tolerance("fp32", e, tol, row + " grad " + name),
               qPrintable(QString("grad %1: %2 > %3")
                              .arg(QString::fromStdString(name))
                              .arg(e)
                              .arg(tol)));
    }
    TB_GPU_CATCH
#endif
  }

  void cuda_pad_channels_matches_cpu() {
#ifndef TRAINBENCH_HAVE_CUDA
    QSKIP("no CUDA device (this build has no CUDA backend)");
#else
    std::string why;
    if (cuda_device_count(&why) == 0)
      QSKIP(qPrintable(QString::fromStdString("no CUDA device: " + why)));
    TB_GPU_TRY
    CpuBackend cpu(BackendOptions{.reference = true});
    auto gpu = make_cuda_backend(0, BackendOptions{});
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (DType t : {DType::F32, DType::F64}) {
        std::mt19937_64 rng(13);
        const Tensor x = random_tensor({3, 3, 5, 7}, t, rng, l);
        const Tensor dy = random_tensor({3, 8, 5, 7}, t, rng, l);
        Tensor y0 = like(dy, l), dx0 = like(x, l);
        cpu.pad_channels_forward(x, y0);
        cpu.pad_channels_backward(dy, dx0);
        Tensor xd = gpu->empty(x.shape(), t, l), dyd = gpu->empty(dy.shape(), t, l);
        gpu->copy(x, xd);
        gpu->copy(dy, dyd);
        Tensor yd = gpu->empty(dy.shape(), t, l), dxd = gpu->empty(x.shape(), t, l);
        gpu->fill(yd, 7.0);  // the zero channels must be written, not left as they were
        gpu->pad_channels_forward(xd, yd);
        gpu->pad_channels_backward(dyd, dxd);
        Tensor y1 = like(dy, l), dx1 = like(x, l);
        gpu->copy(yd, y1);
        gpu->copy(dxd, dx1);
        EXPECT_SAME(y0, y1, qPrintable(QString("cuda pad forward %1").arg(layout_name(l))));
        EXPECT_SAME(dx0, dx1, qPrintable(QString("cuda pad backward %1").arg(layout_name(l))));
      }
    TB_GPU_CATCH
#endif
  }
};

QTEST_GUILESS_MAIN(TestChannelsLast)
#include "test_channels_last.moc"
