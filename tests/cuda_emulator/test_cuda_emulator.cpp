// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA emulator itself (emulator.h), on its own kernels
// (emulator_kernels.cu), before any op family trusts it:
// 1. every thread of 1-, 2- and 3-dimensional grids and blocks runs once,
//    with its coordinates;
// 2. barriers and warp shuffles give what CUDA defines (block_sum over
//    blocks of 32-1024 threads; xor and broadcast shuffles);
// 3. a missing __syncthreads is caught: the neighbour read without the
//    barrier gives stale values under one schedule or the other, with it
//    the right ones under both;
// 4. the faults it promises to report fail the launch with a message that
//    names them: different barriers, a barrier after an exit, a full-mask
//    shuffle in a partial warp, a shuffle after a lane exited, a deadlock
//    (a shuffle against a barrier), bad configurations;
// 5. f16 and bf16 conversions round to nearest even, checked against the
//    compiler's _Float16 and the definition of bf16 rounding on every float
//    bit pattern's class (normal, subnormal, overflow, NaN).
#include <QtTest>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/cuda_emulator/emulated_slot.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/begin_emulated.h"
#include "tests/cuda_emulator/emulator_kernels.cuh"
#include "tests/cuda_emulator/end_emulated.h"

namespace emu = tb::cuda_emu;
using tb::test::EmulatorSchedule;
using tb::test::error_of;

Q_DECLARE_METATYPE(dim3)

class TestCudaEmulator : public QObject {
  Q_OBJECT

 private slots:
  void every_thread_runs_once_data() {
    QTest::addColumn<dim3>("grid");
    QTest::addColumn<dim3>("block");
    QTest::newRow("1-d") << dim3(3) << dim3(40);
    QTest::newRow("2-d") << dim3(2, 3) << dim3(8, 4);
    QTest::newRow("3-d") << dim3(2, 2, 3) << dim3(4, 2, 3);
    QTest::newRow("1024 threads") << dim3(1) << dim3(32, 32);
  }
  void every_thread_runs_once() {
    QFETCH(dim3, grid);
    QFETCH(dim3, block);
    const int64_t n = int64_t(grid.x) * grid.y * grid.z * block.x * block.y * block.z;
    for (auto s : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(s);
      std::vector<int64_t> out(size_t(n), -1);
      emu::launch_write_global_index(out.data(), grid, block);
      for (int64_t i = 0; i < n; ++i) QCOMPARE(out[size_t(i)], i);
    }
  }

  void block_sum_over_block_sizes() {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> v(-50, 50);
    for (unsigned threads : {32u, 64u, 96u, 256u, 1024u})
      for (auto s : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(s);
        const int n = 1000, blocks = 3;
        // Integers: every order of addition gives the exact sum.
        std::vector<float> x(size_t(n * blocks));
        for (float& f : x) f = float(v(rng));
        std::vector<float> out(blocks, -1.0f);
        const tb_emu::Counters before = tb_emu::counters();
        emu::launch_block_sums(x.data(), out.data(), n, blocks, threads);
        for (int b = 0; b < blocks; ++b)
          QCOMPARE(out[size_t(b)], std::accumulate(x.begin() + b * n, x.begin() + (b + 1) * n, 0.0f));
        // block_sum: two barriers a block, and 5 shuffles a warp (10 with 32 warps' second round).
        const tb_emu::Counters after = tb_emu::counters();
        QCOMPARE(after.barriers - before.barriers, int64_t(2 * blocks));
        QVERIFY(after.shuffles - before.shuffles >= int64_t(5 * blocks * (threads / 32)));
      }
  }

  void shuffles_exchange_lanes() {
    std::vector<int> in(32), xo(32, -1), bo(32, -1);
    std::iota(in.begin(), in.end(), 100);
    emu::launch_shuffles(in.data(), xo.data(), bo.data());
    for (int t = 0; t < 32; ++t) {
      QCOMPARE(xo[size_t(t)], 100 + (t ^ 5));
      QCOMPARE(bo[size_t(t)], 107);
    }
  }

  // Without the barrier a thread reads its neighbour's slot before (forward:
  // thread t runs to the end before t + 1 writes) or after a stale write; so
  // the emulator turns a missing __syncthreads into wrong values.
  void missing_barrier_reads_stale_values() {
    const int n = 64;
    std::vector<int> in(n);
    std::iota(in.begin(), in.end(), 1);
    const auto right = [&](const std::vector<int>& out) {
      for (int t = 0; t < n; ++t)
        if (out[size_t(t)] != in[size_t((t + 1) % n)]) return false;
      return true;
    };
    bool stale_seen = false;
    for (int round = 0; round < 2; ++round)
      for (auto s : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(s);
        std::vector<int> with(n), without(n);
        for (int& v : in) v += 1000;  // new values: a stale slot holds the old ones
        emu::launch_neighbour(in.data(), with.data(), n, true);
        QVERIFY(right(with));
        for (int& v : in) v += 1000;
        emu::launch_neighbour(in.data(), without.data(), n, false);
        stale_seen = stale_seen || !right(without);
      }
    QVERIFY2(stale_seen, "the kernel without its barrier gave the right values under every schedule");
  }

  void faults_fail_the_launch_data() {
    QTest::addColumn<int>("which");
    QTest::addColumn<QString>("message");
    QTest::newRow("different barriers") << 0 << "wait at different barriers";
    QTest::newRow("barrier after an exit") << 1 << "after 1 of its block's 64 threads exited";
    QTest::newRow("partial warp shuffle") << 2 << "mask 0xffffffff where its warp's lanes are 0xffff";
    QTest::newRow("shuffle after an exit") << 6 << "lane 5 of its warp has exited";
    QTest::newRow("shuffle against a barrier") << 7 << "deadlock in block (0,0,0): 32 threads wait";
    QTest::newRow("block of 1025") << 3 << "over 1024 threads";
    QTest::newRow("grid.y of 65536") << 4 << "grid (1,65536,1)";
    QTest::newRow("empty grid") << 5 << "an empty grid or block";
  }
  void faults_fail_the_launch() {
    QFETCH(int, which);
    QFETCH(QString, message);
    std::vector<int> out(64);
    std::vector<float> f(64);
    const std::string got = error_of([&] {
      switch (which) {
        case 0: emu::launch_divergent_barrier(out.data()); break;
        case 1: emu::launch_barrier_after_exit(out.data()); break;
        case 2: emu::launch_partial_warp_shuffle(f.data()); break;
        case 3: emu::launch_empty(dim3(1), dim3(1025)); break;
        case 4: emu::launch_empty(dim3(1, 65536), dim3(32)); break;
        case 5: emu::launch_empty(dim3(0), dim3(32)); break;
        case 6: emu::launch_shuffle_after_exit(f.data()); break;
        case 7: emu::launch_shuffle_against_barrier(f.data()); break;
      }
    });
    QVERIFY2(got.find(message.toStdString()) != std::string::npos,
             qPrintable(QString("expected a failure naming \"%1\", got \"%2\"")
                            .arg(message, QString::fromStdString(got))));
    // The next launch runs: a fault does not stick.
    emu::launch_empty(dim3(2), dim3(32));
  }

  void half_rounds_as_float16() {
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> bits;
    const auto check = [](uint32_t u) {
      float f;
      std::memcpy(&f, &u, 4);
      const unsigned short h = __half_as_ushort(__float2half_rn(f));
      if (std::isnan(f)) return h == 0x7fff;
      const _Float16 want = static_cast<_Float16>(f);
      unsigned short w;
      std::memcpy(&w, &want, 2);
      return h == w && __half2float(__ushort_as_half(h)) == float(want);
    };
    for (int i = 0; i < 1000000; ++i) {
      const uint32_t u = bits(rng);
      QVERIFY2(check(u), qPrintable(QString("float bits 0x%1").arg(u, 8, 16, QChar('0'))));
    }
    // Every float around the half's limits: subnormals, the normal boundary, overflow.
    for (uint32_t base : {0x33000000u, 0x38800000u, 0x477fe000u})
      for (uint32_t d = 0; d < 0x10000u; ++d) {
        QVERIFY(check(base - 0x8000u + d));
        QVERIFY(check((base - 0x8000u + d) | 0x80000000u));
      }
  }

  void bfloat16_rounds_to_nearest_even() {
    std::mt19937 rng(13);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 1000000; ++i) {
      const uint32_t u = bits(rng);
      float f;
      std::memcpy(&f, &u, 4);
      const unsigned short b = __bfloat16_as_ushort(__float2bfloat16_rn(f));
      if (std::isnan(f)) {
        QCOMPARE(b, (unsigned short)0x7fff);
        continue;
      }
      // The nearest of the two bf16 neighbours (truncated, and one step away
      // from zero: past the largest finite value that step is inf, and its
      // distance the finite one's), in double; a tie to the even one.
      const unsigned short lo_bits = (unsigned short)(u >> 16), up_bits = lo_bits + 1;
      const double lo = double(__bfloat162float(__ushort_as_bfloat16(lo_bits)));
      const int e = (lo_bits >> 7) & 0xff;
      const double step = std::ldexp(1.0, (e == 0 ? 1 : e) - 127 - 7);
      const double hi = lo + (u >> 31 ? -step : step);
      const double dl = std::abs(double(f) - lo), dh = std::abs(hi - double(f));
      const unsigned short want =
          dl < dh || (dl == dh && (lo_bits & 1u) == 0) ? lo_bits : up_bits;
      QVERIFY2(b == want, qPrintable(QString("float bits 0x%1").arg(u, 8, 16, QChar('0'))));
    }
  }
};

QTEST_APPLESS_MAIN(TestCudaEmulator)
#include "test_cuda_emulator.moc"
