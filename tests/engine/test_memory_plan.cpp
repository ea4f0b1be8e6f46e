// SPDX-License-Identifier: GPL-3.0-or-later
// The model's memory plan (engine/nn/buffers.h): what a backward writes for
// part of one pass (input gradients, a block's inner gradients) comes from
// TransientBuffers, whose blocks are handed out again once nobody holds them;
// and no layer computes an input gradient nobody reads.
#include <QtTest>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/amp/precision_policy.h"
#include "engine/nn/activations.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layer_work.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/nn/pad_channels.h"
#include "engine/nn/pooling.h"
#include "engine/nn/residual.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gpu_slot.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;

namespace {

// Records the need_dx every layer's backward was called with.
class NeedDxSpy final : public LayerScopes {
 public:
  std::map<std::string, bool> backward_need_dx;
  void enter(const Layer& layer, LayerPass pass, int64_t, bool need_dx) override {
    if (pass == LayerPass::Backward) backward_need_dx[layer.name()] = need_dx;
  }
  void exit() override {}
};

// One forward and backward of `m` on a fixed batch, its buffers counted.
struct Pass {
  Tensor grads;  // host copy of the gradient block
  BufferCensus census;
  int64_t requested = 0;  // bytes asked of the pool in this pass
};
Pass run_pass(Model& m, Context& ctx, const Tensor& x, const Tensor& dlogits) {
  Pass p;
  ctx.census = &p.census;
  const int64_t before = ctx.transients->requested_bytes();
  m.forward(ctx, x);
  m.backward(ctx, dlogits);
  p.requested = ctx.transients->requested_bytes() - before;
  p.grads = clone(m.grad_block());
  ctx.census = nullptr;
  return p;
}

}  // namespace

class TestMemoryPlan : public QObject {
  Q_OBJECT
  CpuBackend cpu{BackendOptions{}};

 private slots:
  // The pool's rules: a block someone holds is never handed out; a freed
  // one is, the smallest free one that fits, of the same dtype; a request
  // no free block fits makes a new one.
  void poolHandsOutOnlyFreeBlocks() {
    TransientBuffers pool;
    Tensor a = pool.take(cpu, {4, 8}, DType::F32, Layout::NCHW);
    Tensor b = pool.take(cpu, {4, 8}, DType::F32, Layout::NCHW);
    QVERIFY(a.data() != b.data());
    QCOMPARE(pool.allocations(), int64_t(2));
    void* a_block = a.data();
    a = Tensor{};  // freed: the next request of its size gets it back
    Tensor c = pool.take(cpu, {2, 16}, DType::F32, Layout::NCHW);
    QCOMPARE(c.data(), a_block);
    QCOMPARE(c.shape(), (Shape{2, 16}));
    QCOMPARE(pool.allocations(), int64_t(2));
    // A view keeps its block held too.
    Tensor view = c.reshaped({32});
    c = Tensor{};
    Tensor d = pool.take(cpu, {32}, DType::F32, Layout::NCHW);
    QVERIFY(d.data() != a_block);
    QCOMPARE(pool.allocations(), int64_t(3));
    // Another dtype never shares a block.
    view = Tensor{}, b = Tensor{}, d = Tensor{};
    Tensor h = pool.take(cpu, {32}, DType::BF16, Layout::NCHW);
    QCOMPARE(h.dtype(), DType::BF16);
    QCOMPARE(pool.blocks(), int64_t(4));
    // A larger request never takes a smaller block: its new block replaces
    // a free one that is too small (three f32 blocks of 32 are free).
    Tensor big = pool.take(cpu, {64}, DType::F32, Layout::NCHW);
    QCOMPARE(pool.allocations(), int64_t(5));
    QCOMPARE(pool.blocks(), int64_t(4));
    QCOMPARE(pool.bytes(), int64_t((64 + 32 + 32) * 4 + 32 * 2));
    // Of two free blocks that fit, the smaller: a small request leaves the big block free.
    big = Tensor{};
    Tensor small = pool.take(cpu, {8}, DType::F32, Layout::NCHW);
    Tensor big_again = pool.take(cpu, {64}, DType::F32, Layout::NCHW);
    QCOMPARE(pool.allocations(), int64_t(5));
    // The last free f32 block (32) is replaced; then none is free at all,
    // and a new block joins the others.
    Tensor more = pool.take(cpu, {64}, DType::F32, Layout::NCHW);
    QCOMPARE(pool.blocks(), int64_t(4));
    Tensor more2 = pool.take(cpu, {64}, DType::F32, Layout::NCHW);
    QCOMPARE(pool.blocks(), int64_t(5));
    QCOMPARE(pool.allocations(), int64_t(7));
    QVERIFY(more.data() != big_again.data() && more2.data() != more.data());
    // Rank-4 requests keep their layout.
    small = Tensor{};
    Tensor nhwc = pool.take(cpu, {1, 2, 2, 2}, DType::F32, Layout::NHWC);
    QCOMPARE(nhwc.layout(), Layout::NHWC);
  }

  // Residual blocks hold the most gradients at once (the block's dy, the
  // shortcut's, the main path's input and output, the sum): their backward
  // against finite differences in double precision, with a downsampling
  // shortcut and with the identity, fused tail and not.
  void residualBlockGradcheck_data() {
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("out_channels");
    QTest::addColumn<bool>("fused");
    QTest::newRow("identity shortcut") << 1 << 3 << false;
    QTest::newRow("identity shortcut, fused tail") << 1 << 3 << true;
    QTest::newRow("conv shortcut") << 2 << 4 << false;
    QTest::newRow("conv shortcut, fused tail") << 2 << 4 << true;
  }
  void residualBlockGradcheck() {
    QFETCH(int, stride);
    QFETCH(int, out_channels);
    QFETCH(bool, fused);
    const auto r = gradcheck_layer(make_basic_block("block", 3, out_channels, stride, true, fused),
                                   {2, 3, 4, 4}, 31);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  // A whole model's pass: every activation and gradient comes from the
  // pool, saved activations are given up as the backward passes them, and
  // gradients take their blocks. A second and a third pass on the same batch
  // allocate nothing and give the same gradients bit for bit (so no block was
  // handed out while live, and a captured graph would see the same blocks).
  void modelPassReusesBlocks_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QList<qint64>>("dims");
    QTest::addColumn<bool>("fused");
    QTest::addColumn<bool>("all_tricks");  // channels-last, padded to 8, no conv bias, bf16
    QTest::newRow("mlp") << QString("mlp") << QList<qint64>{1, 8, 8} << false << false;
    QTest::newRow("fmnist-cnn") << QString("fmnist-cnn") << QList<qint64>{1, 28, 28} << false
                                << false;
    QTest::newRow("resnet18-cifar") << QString("resnet18-cifar") << QList<qint64>{3, 32, 32}
                                    << false << false;
    QTest::newRow("resnet18-cifar fused") << QString("resnet18-cifar")
                                          << QList<qint64>{3, 32, 32} << true << false;
    // The GPU's all-tricks model but for the fusion (the CPU fuses on NCHW
    // only; fused or not holds the same at once, as the rows above show).
    QTest::newRow("resnet18-cifar channels-last bf16")
        << QString("resnet18-cifar") << QList<qint64>{3, 32, 32} << false << true;
  }
  void modelPassReusesBlocks() {
    QFETCH(QString, model);
    QFETCH(QList<qint64>, dims);
    QFETCH(bool, fused);
    QFETCH(bool, all_tricks);
    const Shape img(dims.begin(), dims.end());
    const int64_t N = 6;
    ModelOptions options;
    options.fuse_pointwise = fused;
    if (all_tricks) options.pad_channels_to = 8, options.conv_bias_before_bn = false;
    const Layout layout = all_tricks ? Layout::NHWC : Layout::NCHW;
    std::unique_ptr<Model> m = make_model(model.toStdString(), img, 10, options);
    m->build(cpu, 5, DType::F32, layout);
    Shape xs = img;
    xs.insert(xs.begin(), N);
    const Tensor x = random_tensor(xs, 51, -1.0, 1.0, DType::F32, layout);
    const Tensor dl = random_tensor({N, 10}, 52, -0.1, 0.1);
    Context ctx{cpu};
    ctx.layout = layout;
    if (all_tricks) ctx.amp = PrecisionPolicy::from_config("bf16");
    const Pass first = run_pass(*m, ctx, x, dl);
    const int64_t made = ctx.transients->allocations();
    const Pass second = run_pass(*m, ctx, x, dl);
    const Pass third = run_pass(*m, ctx, x, dl);
    QCOMPARE(ctx.transients->allocations(), made);
    QCOMPARE(third.requested, first.requested);
    QVERIFY(bitwise_equal(first.grads, second.grads));
    QVERIFY(bitwise_equal(first.grads, third.grads));

    const int64_t held = third.census.transient_bytes(), live = ctx.transients->peak_live_bytes();
    qInfo("%s: transient blocks %lld B (%lld blocks), at most %lld B live at once, %lld B "
          "requested in a pass; kept by layers %lld B",
          QTest::currentDataTag(), (long long)held,
          (long long)ctx.transients->blocks(), (long long)live, (long long)third.requested,
          (long long)(third.census.bytes() - held));
    // Best fit's loss to mismatched sizes, against the least any plan could
    // hold: measured 1 % (mlp), 31 % (fmnist-cnn: a pooled output takes the
    // freed block of the convolution before it), 14 % (resnet18-cifar); a
    // guard of 40 %, not a derived bound.
    QVERIFY2(held <= live * 7 / 5, qPrintable(QString("%1 B held, %2 B live").arg(held).arg(live)));
    QVERIFY2(held < third.requested, qPrintable(QString("%1 B held").arg(held)));
  }

  // Only a layer with a parameter before it needs its input gradient:
  // behind a channel padding (channels_last's pad_channels) the first
  // convolution computes no dx and the padding is asked for none; the
  // layers after it are. The counted work (model_work) follows the same
  // rule: the first convolution's backward counts no input-gradient FLOPs.
  void firstLayerWithParametersComputesNoInputGradient() {
    Model m("padded", {3, 6, 6}, 10);
    m.emplace<PadChannels>("pad", 4);
    m.emplace<Conv2d>("conv", 8, 3, 1, 1, true);
    m.emplace<ReLU>("relu");
    m.emplace<Conv2d>("conv2", 8, 3, 1, 1, true);
    m.emplace<Flatten>("flatten");
    m.emplace<Linear>("fc", 10);
    m.build(cpu, 3);
    NeedDxSpy spy;
    Context ctx{cpu};
    ctx.scopes = &spy;
    const int64_t N = 2;
    m.forward(ctx, random_tensor({N, 3, 6, 6}, 4));
    const int64_t before = ctx.transients->requested_bytes();
    m.backward(ctx, random_tensor({N, 10}, 5));
    QCOMPARE(spy.backward_need_dx["pad"], false);
    QCOMPARE(spy.backward_need_dx["conv"], false);
    QCOMPARE(spy.backward_need_dx["relu"], true);
    QCOMPARE(spy.backward_need_dx["conv2"], true);
    QCOMPARE(spy.backward_need_dx["fc"], true);
    // Transients: fc's dx (flatten passes a view of it on), conv2's dx, relu's dx (4 B
    // an element, N × 8 × 6 × 6 each): none of the padded input's size.
    const int64_t act = N * 8 * 6 * 6 * 4;
    QCOMPARE(ctx.transients->requested_bytes() - before, 3 * act);

    const auto rows = model_work(m, WorkQuery{.batch = N});
    QCOMPARE(QString::fromStdString(rows[1].name), QString("conv"));
    QCOMPARE(rows[1].backward.matrix_flops, rows[1].forward.matrix_flops);  // dw only
    QCOMPARE(rows[3].backward.matrix_flops, 2 * rows[3].forward.matrix_flops);  // dw and dx
  }

  // On the GPU: the all-tricks resnet18-cifar (channels-last, padded to 8,
  // no conv bias, fused BN+ReLU(+add), bf16 activations) at batch 64. After
  // the first pass the pool makes no block, and the device's allocator
  // allocates nothing either, cuDNN's and cuBLAS's workspaces included: its
  // allocated bytes and cudaMalloc count after the third pass are the second
  // pass's. The peak and the pool's figures are printed for bench/NOTES.md
  // (attempt 5's prediction: ≈ 2.42 MB a sample live).
  void cuda_steady_pass_allocates_nothing() {
    NEED_GPU();
    TB_GPU_TRY
    Backend& be = cuda_backend();
    DeviceMemory* mem = be.memory();
    QVERIFY(mem);
    const int64_t N = 64;
    ModelOptions options;
    options.fuse_pointwise = true, options.pad_channels_to = 8;
    options.conv_bias_before_bn = false;
    std::unique_ptr<Model> m = make_model("resnet18-cifar", {3, 32, 32}, 10, options);
    m->build(be, 5, DType::F32, Layout::NHWC);
    const Tensor x = to_device(be, random_tensor({N, 3, 32, 32}, 51), Layout::NHWC);
    const Tensor dl = to_device(be, random_tensor({N, 10}, 52, -0.1, 0.1));
    Context ctx{be};
    ctx.layout = Layout::NHWC;
    ctx.amp = PrecisionPolicy::from_config("bf16");
    auto pass = [&] {
      m->forward(ctx, x);
      m->backward(ctx, dl);
      be.synchronize();
    };
    const DeviceMemoryStats before = mem->stats(false);
    pass();
    const int64_t made = ctx.transients->allocations();
    pass();
    const DeviceMemoryStats second = mem->stats(false);
    mem->reset_peak();
    pass();
    const DeviceMemoryStats third = mem->stats(false);
    qInfo("resnet18-cifar all tricks bf16, batch %lld: pool %lld B in %lld blocks, at most %lld B "
          "live at once (%.3f MB a sample); device allocated before %lld B, after %lld B, peak "
          "of a steady pass %lld B, %lld cudaMalloc calls",
          (long long)N, (long long)ctx.transients->bytes(), (long long)ctx.transients->blocks(),
          (long long)ctx.transients->peak_live_bytes(),
          double(ctx.transients->peak_live_bytes()) / double(N) / 1e6,
          (long long)before.allocated_bytes, (long long)third.allocated_bytes,
          (long long)third.peak_allocated_bytes, (long long)third.malloc_count);
    QCOMPARE(ctx.transients->allocations(), made);
    QCOMPARE(third.allocated_bytes, second.allocated_bytes);
    QCOMPARE(third.malloc_count, second.malloc_count);
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestMemoryPlan)
#include "test_memory_plan.moc"
