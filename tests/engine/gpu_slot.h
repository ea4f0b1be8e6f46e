// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What every GPU test slot shares (the suites include it directly or through
// run_fixture.h):
//
// - TB_GPU_TRY ... TB_GPU_CATCH around a slot's body. Qt Test (6.4) treats an
//   exception that leaves a slot as fatal: it stops the whole suite, so one
//   tb::Error from the device would hide every later result. Caught here, it
//   fails that slot alone, with the error's message.
// - Tolerances derived from the arithmetic a comparison runs in, and one
//   "tb-tolerance" line per checked comparison, from which
//   scripts/gpu-check.sh reports the worst error/tolerance ratio per precision.
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#define TB_GPU_TRY try {
#define TB_GPU_CATCH                                                          \
  }                                                                           \
  catch (const std::exception& e_) {                                          \
    QFAIL(qPrintable(QStringLiteral("uncaught exception: ") + e_.what()));    \
  }                                                                           \
  catch (...) {                                                               \
    QFAIL("uncaught exception of an unknown type");                           \
  }

namespace tb::test {

// Unit roundoff of a precision: "fp32", "tf32", "fp16", "bf16", "fp64".
inline double roundoff_of(const std::string& precision) {
  if (precision == "fp64") return std::ldexp(1.0, -53);
  if (precision == "fp32") return std::ldexp(1.0, -24);
  if (precision == "tf32" || precision == "fp16") return std::ldexp(1.0, -11);
  if (precision == "bf16") return std::ldexp(1.0, -8);
  return NAN;  // an unknown name fails every comparison made with it
}

// A whole network's forward and backward against another implementation in
// the same precision, compared as max|a - b| / max|a|. Each operation rounds
// about sqrt(k)·u relative to its output, k its longest reduction (C·R·S of a
// convolution, N·Ho·Wo of its weight gradient, the features of a linear
// layer); independent roundings over `depth` operations (weight and batch-norm
// layers, forward plus backward) add like a random walk: sqrt(depth·k)·u, with
// a margin of 4. fp32 here means strict fp32 engines (the CUDA backend picks
// no TF32 and no down-converting cuDNN engine for fp32), so a TF32 engine,
// 2^13 times coarser, fails it.
inline double network_tolerance(const std::string& precision, int depth, int64_t k) {
  return 4.0 * std::sqrt(double(depth) * double(k)) * roundoff_of(precision);
}

// "tb-tolerance precision=fp32 ratio=0.0123 err=8e-07 tol=6.5e-05 what=..."
// (ratio = err / tol; > 1 fails). Returns err <= tol (NaN fails).
inline bool report_tolerance(const std::string& precision, double err, double tol,
                             const std::string& what) {
  const double ratio = err / tol;
  qInfo("tb-tolerance precision=%s ratio=%.4g err=%.4g tol=%.4g what=%s", precision.c_str(),
        ratio, err, tol, what.c_str());
  return err <= tol;
}

}  // namespace tb::test
