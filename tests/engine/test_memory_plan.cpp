// SPDX-License-Identifier: GPL-3.0-or-later
// The model's memory plan (engine/nn/buffers.h): what a backward writes for
// part of one pass (activations, what a backward keeps of them, input
// gradients, a block's inner gradients) comes from TransientBuffers, whose
// regions of one block are handed out again once nobody holds them; and no
// layer computes an input gradient nobody reads.
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
#include "tests/engine/low_precision.h"
#include "tests/engine/tensor_helpers.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/caching_allocator.h"
#endif

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

// Asks the backend for scratch in its forward and backward, as a
// convolution asks for cuDNN's workspace, and records what the pass's pool
// was asked for meanwhile.
class ScratchAsker final : public Layer {
 public:
  explicit ScratchAsker(int64_t bytes) : Layer("asker"), bytes_(bytes) {}
  std::string kind() const override { return "scratch_asker"; }
  Shape setup(const Shape& in, ParamRegistry&) override { return in; }
  Tensor forward(Context& ctx, const Tensor& x) override { return ask(ctx, x); }
  Tensor backward(Context& ctx, const Tensor& dy, bool) override { return ask(ctx, dy); }
  std::vector<int64_t> pool_grew;  // requested bytes of the pool that each ask added

 private:
  Tensor ask(Context& ctx, const Tensor& t) {
    const int64_t before = ctx.transients->requested_bytes();
    Tensor w = ctx.backend.scratch(bytes_);
    pool_grew.push_back(w.nbytes() >= size_t(bytes_) ? ctx.transients->requested_bytes() - before
                                                     : -1);
    return t;
  }
  int64_t bytes_;
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
  // The pool's rules (buffers.h): a region someone holds, through any view,
  // is never handed out; a free range is, the smallest that fits, whatever
  // the dtype; neighbours given back merge; what finds no free range extends
  // the arena, in a block of its own until a request finds nothing alive and
  // the arena's block is made to hold the whole extent.
  void poolHandsOutOnlyFreeRegions() {
    constexpr int64_t A = TransientBuffers::kAlignment;
    TransientBuffers pool;
    auto take = [&](int64_t bytes, DType t = DType::F32) {
      return pool.take(cpu, {bytes / int64_t(dtype_size(t))}, t, Layout::NCHW);
    };
    // A first pass: no block yet, so each region is one of its own.
    Tensor a = take(4 * A), b = take(A / 2);
    QVERIFY(a.data() != b.data());
    QCOMPARE(pool.allocations(), int64_t(2));
    QCOMPARE(pool.extent(cpu.device()), 5 * A);  // b rounded up to the alignment
    a = Tensor{}, b = Tensor{};
    // Nothing alive: the block is made, as large as the extent, and the
    // request takes its start.
    Tensor c = take(A);
    QCOMPARE(pool.allocations(), int64_t(3));
    QCOMPARE(pool.blocks(), int64_t(1));
    QCOMPARE(pool.bytes(), 5 * A);
    const char* base = static_cast<const char*>(c.data());
    // Where t starts in the block (QCOMPARE on char* would compare strings).
    auto at = [&](const Tensor& t) {
      return int64_t(reinterpret_cast<uintptr_t>(t.data()) - reinterpret_cast<uintptr_t>(base));
    };
    // Taken in order from the free range after c; every region aligned.
    Tensor d = take(A, DType::BF16), e = take(2 * A);
    QCOMPARE(at(d), int64_t(A));
    QCOMPARE(at(e), int64_t(2 * A));
    QCOMPARE(d.dtype(), DType::BF16);
    // A view keeps its region held: c's range stays taken.
    Tensor view = c.reshaped({A / 4});
    c = Tensor{};
    Tensor f = take(A);
    QCOMPARE(at(f), int64_t(4 * A));
    QCOMPARE(pool.allocations(), int64_t(3));
    // Given back, c's range goes to another dtype.
    view = Tensor{};
    Tensor g = take(A / 2, DType::I32);
    QCOMPARE(at(g), int64_t(0));
    QCOMPARE(g.dtype(), DType::I32);
    // Best fit: of the free ranges 1 A (d's) and 2 A (e's), a request of 1 A
    // takes d's, one of 2 A then e's.
    d = Tensor{}, e = Tensor{};
    g = Tensor{};  // g's range merges with d's and e's: one range of 4 A at 0
    Tensor h = take(A), i = take(A), j = take(2 * A);
    QCOMPARE(at(h), int64_t(0));
    QCOMPARE(at(i), int64_t(A));
    QCOMPARE(at(j), int64_t(2 * A));
    h = Tensor{}, j = Tensor{};  // free: 1 A at 0 and 2 A at 2 A (i between)
    Tensor k = take(2 * A), l = take(A);
    QCOMPARE(at(k), int64_t(2 * A));
    QCOMPARE(at(l), int64_t(0));
    // No range fits: the extent grows, in a block of the region's own.
    Tensor m = take(3 * A);
    QCOMPARE(pool.extent(cpu.device()), 8 * A);
    QCOMPARE(pool.allocations(), int64_t(4));
    QCOMPARE(pool.blocks(), int64_t(2));
    QVERIFY(at(m) < 0 || at(m) >= 5 * A);
    // The next request that finds nothing alive makes the block hold all of it.
    f = Tensor{}, i = Tensor{}, k = Tensor{}, l = Tensor{}, m = Tensor{};
    Tensor n = take(8 * A);
    QCOMPARE(pool.allocations(), int64_t(5));
    QCOMPARE(pool.bytes(), 8 * A);
    QCOMPARE(pool.blocks(), int64_t(1));
    // Rank-4 requests keep their layout; the most alive at once is counted.
    n = Tensor{};
    Tensor nhwc = pool.take(cpu, {1, 2, 2, 2}, DType::F32, Layout::NHWC);
    QCOMPARE(nhwc.layout(), Layout::NHWC);
    QCOMPARE(pool.peak_live_bytes(), 8 * A);
  }

  // Ops' scratch (backend.h's ScratchSource): while a model's forward or
  // backward runs, Backend::scratch comes from the pass's pool, so a
  // workspace takes a range the activations leave free instead of adding to
  // their peak; outside a pass (and under TRAINBENCH_CUDA_SCRATCH=allocator)
  // from the allocator.
  void scratchComesFromThePassesPool() {
    constexpr int64_t A = TransientBuffers::kAlignment;
    TransientBuffers pool;
    QCOMPARE(cpu.scratch(3 * A).nbytes(), size_t(3 * A));  // no source: a tensor of its own
    QCOMPARE(pool.requested_bytes(), int64_t(0));
    Tensor a = pool.take(cpu, {2 * A}, DType::U8, Layout::NCHW);
    Tensor b = pool.take(cpu, {6 * A}, DType::U8, Layout::NCHW);
    b = Tensor{};  // 6 A free after a: the extent stays 8 A
    {
      ScratchScope scope(cpu, &pool);
      {
        TransientBuffers other;
        ScratchScope inner(cpu, &other);  // scopes nest
        Tensor w = cpu.scratch(A);
        QCOMPARE(other.requested_bytes(), A);
      }
      Tensor w = cpu.scratch(4 * A);  // the workspace fits where b was
      QCOMPARE(pool.requested_bytes(), 12 * A);
      QCOMPARE(pool.extent(cpu.device()), 8 * A);
      QCOMPARE(pool.peak_live_bytes(), 8 * A);
      // 2 A of b's range are left, at the extent's end: the extent grows by 1 A.
      Tensor v = cpu.scratch(3 * A);
      QCOMPARE(pool.extent(cpu.device()), 9 * A);
      // An operand rounded for one call (a bf16 copy) keeps shape, dtype and layout.
      Tensor t = cpu.scratch({2, 8, 4, 4}, DType::BF16, Layout::NHWC);
      QCOMPARE(t.shape(), Shape({2, 8, 4, 4}));
      QCOMPARE(t.dtype(), DType::BF16);
      QCOMPARE(t.layout(), Layout::NHWC);
      QCOMPARE(pool.requested_bytes(), 15 * A + 2 * 8 * 4 * 4 * 2);
      QCOMPARE(pool.extent(cpu.device()), 11 * A);  // nothing free: 2 A more at the end
    }
    const int64_t asked_in_scope = pool.requested_bytes();
    Tensor w = cpu.scratch(16 * A);  // the scope gone: nothing asked of the pool
    Tensor u = cpu.scratch({4, 4}, DType::F32);
    QCOMPARE(u.shape(), Shape({4, 4}));
    QCOMPARE(pool.requested_bytes(), asked_in_scope);
    QCOMPARE(pool.extent(cpu.device()), 11 * A);

    // Model::forward and backward install the context's pool.
    Model m("asker", {3}, 3);
    ScratchAsker* spy = &m.emplace<ScratchAsker>(5 * A);
    m.build(cpu, 1);
    Context ctx{cpu};
    const Tensor x = random_tensor({2, 3}, 7);
    m.backward(ctx, m.forward(ctx, x));
    QCOMPARE(spy->pool_grew, std::vector<int64_t>({5 * A, 5 * A}));
    const int64_t asked = ctx.transients->requested_bytes();
    Tensor after = cpu.scratch(A);
    QCOMPARE(ctx.transients->requested_bytes(), asked);

    QVERIFY(pass_scratch_setting(nullptr));
    QVERIFY(pass_scratch_setting(""));
    QVERIFY(pass_scratch_setting("pass"));
    QVERIFY(!pass_scratch_setting("allocator"));
    try {
      pass_scratch_setting("pool");
      QFAIL("TRAINBENCH_CUDA_SCRATCH=pool was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("TRAINBENCH_CUDA_SCRATCH=pool") != std::string::npos,
               e.what());
    }
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
  // gradients take their ranges. The second pass begins by making the one
  // block; the third allocates nothing, and all three give the same
  // gradients bit for bit (so no range was handed out while live, and a
  // captured graph would see the same addresses).
  void modelPassReusesBlocks_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QList<qint64>>("dims");
    QTest::addColumn<bool>("fused");
    QTest::addColumn<bool>("all_tricks");  // channels-last, padded to 8, no conv bias, bf16
    QTest::addColumn<int>("waste_percent");  // the block above the live peak (see below)
    QTest::newRow("mlp") << QString("mlp") << QList<qint64>{1, 8, 8} << false << false << 15;
    QTest::newRow("fmnist-cnn") << QString("fmnist-cnn") << QList<qint64>{1, 28, 28} << false
                                << false << 1;
    QTest::newRow("resnet18-cifar") << QString("resnet18-cifar") << QList<qint64>{3, 32, 32}
                                    << false << false << 1;
    QTest::newRow("resnet18-cifar fused") << QString("resnet18-cifar")
                                          << QList<qint64>{3, 32, 32} << true << false << 1;
    // The GPU's all-tricks model but for the fusion (the CPU fuses on NCHW
    // only; fused or not holds the same at once, as the rows above show).
    QTest::newRow("resnet18-cifar channels-last bf16")
        << QString("resnet18-cifar") << QList<qint64>{3, 32, 32} << false << true << 1;
  }
  void modelPassReusesBlocks() {
    QFETCH(QString, model);
    QFETCH(QList<qint64>, dims);
    QFETCH(bool, fused);
    QFETCH(bool, all_tricks);
    QFETCH(int, waste_percent);
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
    const Pass second = run_pass(*m, ctx, x, dl);  // begins by making the block
    const int64_t made = ctx.transients->allocations();
    const Pass third = run_pass(*m, ctx, x, dl);
    QCOMPARE(ctx.transients->allocations(), made);
    QCOMPARE(ctx.transients->blocks(), int64_t(1));
    QCOMPARE(third.requested, first.requested);
    QVERIFY(bitwise_equal(first.grads, second.grads));
    QVERIFY(bitwise_equal(first.grads, third.grads));

    const int64_t held = ctx.transients->bytes(), live = ctx.transients->peak_live_bytes();
    qInfo("%s: transient block %lld B, at most %lld B live at once, %lld B requested in a "
          "pass; kept by layers %lld B",
          QTest::currentDataTag(), (long long)held, (long long)live, (long long)third.requested,
          (long long)(third.census.bytes() - third.census.transient_bytes()));
    // Online best fit can leave a range too small for a later request and
    // place it higher, so the block may exceed the most alive at once.
    // Measured: 0 on fmnist-cnn, resnet18-cifar and its channels-last bf16
    // form, 24,576 B (0.09 %) on the fused one; on mlp 3,072 B (14 %: its
    // 6 KB gradient finds two free 3 KB ranges apart, which no rule without
    // knowing the rest of the pass avoids; first, last and worst fit do the
    // same). Best fit over whole blocks, before, lost 31 %, 14 %, 14 %, 14 %
    // and 1 %. Guards (1 %, mlp 15 %) from those figures, not derived bounds.
    QVERIFY2(held <= live + live * waste_percent / 100,
             qPrintable(QString("%1 B held, %2 B live").arg(held).arg(live)));
    QVERIFY2(held < third.requested, qPrintable(QString("%1 B held").arg(held)));
  }

  // What a layer keeps is what its backward reads. Under AMP a convolution
  // or linear layer reads its f16/bf16 operand, so an f32 input (the
  // model's batch, or the padded stem's input: 4 bytes a value) is not
  // kept once cast; nor is a linear layer's output without an activation
  // (the next layer keeps what it needs of it). In eval mode nothing is
  // kept. The gradients are those of a layer that kept everything (the
  // same ops on the same operands), checked by test_amp_training.
  void layersKeepOnlyWhatTheirBackwardReads() {
    Model m("conv-fc", {3, 6, 6}, 10);
    Layer& conv = m.emplace<Conv2d>("conv", 4, 3, 1, 1, true);
    m.emplace<Flatten>("flatten");
    Layer& fc = m.emplace<Linear>("fc", 10);
    m.build(cpu, 3);
    for (const bool training : {true, false}) {
      Context ctx{cpu};
      ctx.training = training;
      ctx.amp = PrecisionPolicy::from_config("bf16");
      const Tensor x = random_tensor({2, 3, 6, 6}, 61), v = random_tensor({2, 144}, 62);
      Tensor y = conv.forward(ctx, x), z = fc.forward(ctx, v);
      QCOMPARE(x.holders(), long(1));
      QCOMPARE(v.holders(), long(1));
      QCOMPARE(z.holders(), long(2));  // z and the pool's handle: fc kept nothing of it
      if (training) {
        conv.backward(ctx, lp_of(cpu, random_tensor({2, 4, 6, 6}, 63), DType::BF16), true);
        fc.backward(ctx, random_tensor({2, 10}, 64), true);
      } else {
        QVERIFY_THROWS_EXCEPTION(Error, conv.backward(ctx, y, true));
      }
      conv.release_saved(), fc.release_saved();
    }
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
  // the second pass (which makes the pool's block) the pool makes nothing,
  // and the device's allocator allocates nothing either, cuDNN's and
  // cuBLAS's workspaces included: its allocated bytes and cudaMalloc count
  // after the third pass are the second pass's. The peak and the pool's
  // figures are printed for bench/NOTES.md (attempt 6's prediction: 2.39 MB
  // a sample live, and the block as large; attempt 7's: the first pass's
  // peak near the live peak).
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
    mem->reset_peak();
    const DeviceMemoryStats before = mem->stats(false);
    pass();
    const DeviceMemoryStats first = mem->stats(false);
    pass();
    const int64_t made = ctx.transients->allocations();
    const DeviceMemoryStats second = mem->stats(false);
    mem->reset_peak();
    pass();
    const DeviceMemoryStats third = mem->stats(false);
    qInfo("resnet18-cifar all tricks bf16, batch %lld: pool %lld B in %lld block(s), at most %lld B "
          "live at once (%.3f MB a sample); device allocated before %lld B, after %lld B, peak "
          "of a steady pass %lld B, %lld cudaMalloc calls",
          (long long)N, (long long)ctx.transients->bytes(), (long long)ctx.transients->blocks(),
          (long long)ctx.transients->peak_live_bytes(),
          double(ctx.transients->peak_live_bytes()) / double(N) / 1e6,
          (long long)before.allocated_bytes, (long long)third.allocated_bytes,
          (long long)third.peak_allocated_bytes, (long long)third.malloc_count);
    // Attempt 7 (the allocator splits blocks): the first pass, each region a
    // block of the allocator's own, should peak near the live peak above
    // what was allocated before it, workspaces aside.
    qInfo("first pass: peak %lld B above what was allocated before it (%lld B live at most in "
          "the pool), reserved %lld B more, %lld cudaMalloc calls",
          (long long)(first.peak_allocated_bytes - before.allocated_bytes),
          (long long)ctx.transients->peak_live_bytes(),
          (long long)(first.peak_reserved_bytes - before.reserved_bytes),
          (long long)(first.malloc_count - before.malloc_count));
    QCOMPARE(ctx.transients->allocations(), made);
    QCOMPARE(third.allocated_bytes, second.allocated_bytes);
    QCOMPARE(third.malloc_count, second.malloc_count);
    // Every op's scratch in a pass (cuDNN's and cuBLASLt's workspaces,
    // partial sums, the bf16 weight gradient before its f32 cast) comes from
    // the pool (Backend::scratch), so a steady pass allocates nothing from
    // the device's allocator, not even for a moment: its peak is what stays.
    // Workspaces from the allocator instead would add the largest of them
    // (printed) on top.
    int64_t largest_workspace = 0;
    const nlohmann::json plans = be.describe()["kernel_paths"]["convolution"];
    for (const auto& r : plans)
      largest_workspace = std::max(largest_workspace, r.value("workspace_bytes", int64_t(0)));
    const int64_t excess = third.peak_allocated_bytes - third.allocated_bytes;
    qInfo("steady pass: peak %lld B above what stays allocated; %zu convolution plans, the "
          "largest workspace %lld B",
          (long long)excess, plans.size(), (long long)largest_workspace);
    QVERIFY2(be.pass_scratch(), "TRAINBENCH_CUDA_SCRATCH=allocator is set: this slot checks the default");
    QVERIFY2(excess == 0, qPrintable(QString("a steady pass allocated %1 B from the device's "
                                             "allocator beyond what stays")
                                         .arg(excess)));
    TB_GPU_CATCH
  }

  // On the GPU: when the pool's block (the run's largest allocation) does not
  // fit, the error says it is the activation pool and how much of it was live,
  // not only a byte count. The device is made full with the caching
  // allocator's cap at what the first pass left reserved.
  void cuda_pool_block_out_of_memory_names_the_pool() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    Backend& be = cuda_backend();
    DeviceMemory* mem = be.memory();
    QVERIFY(mem);
    const int64_t N = 16;
    std::unique_ptr<Model> m = make_model("resnet18-cifar", {3, 32, 32}, 10, ModelOptions{});
    m->build(be, 5, DType::F32, Layout::NCHW);
    const Tensor x = to_device(be, random_tensor({N, 3, 32, 32}, 53));
    const Tensor dl = to_device(be, random_tensor({N, 10}, 54, -0.1, 0.1));
    Context ctx{be};
    auto pass = [&] {
      m->forward(ctx, x);
      m->backward(ctx, dl);
      be.synchronize();
    };
    pass();  // the first pass: each region a block of the allocator's own
    mem->empty_cache();
    auto& allocator = tb::cuda::CachingAllocator::instance();
    allocator.set_reserved_limit(allocator.stats().reserved_bytes);
    struct Uncap {
      tb::cuda::CachingAllocator& a;
      ~Uncap() { a.set_reserved_limit(0); }
    } uncap{allocator};
    bool thrown = false;
    try {
      pass();  // begins by making the block
    } catch (const OutOfMemory& e) {
      thrown = true;
      qInfo("%s", e.what());
      QVERIFY2(std::string(e.what()).find("activation pool") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("limit") != std::string::npos, e.what());
    }
    QVERIFY2(thrown, "the second pass made its block under a cap that leaves no room");
#endif
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestMemoryPlan)
#include "test_memory_plan.moc"
