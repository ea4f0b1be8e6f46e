// SPDX-License-Identifier: GPL-3.0-or-later
// The op registry (engine/ops/registry.h): a backend finds a family's kernels
// by (family, device kind), makes them once and keeps them; a family it has
// none of is refused in words that name both; a pair registered twice is a
// programming error; every family add_op_family lists is registered for the
// CPU backend (the test oracle implements every family).
#include <QtTest>

#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/registry.h"

using namespace tb;

namespace {

// A family of this test only: registered for the CPU by registered_once().
class ProbeKernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "registry probe";
  virtual CpuBackend& backend() = 0;
};

int probes_made = 0;

class CpuProbe final : public ProbeKernels {
 public:
  explicit CpuProbe(CpuBackend& be) : be_(be) { ++probes_made; }
  CpuBackend& backend() override { return be_; }

 private:
  CpuBackend& be_;
};

// Never registered anywhere.
class UnregisteredKernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "unregistered";
};

}  // namespace

class TestOpRegistry : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { register_kernels<ProbeKernels, CpuProbe, CpuBackend>(DeviceKind::CPU); }

  void kernels_are_made_once_per_backend() {
    probes_made = 0;
    CpuBackend a, b;
    QVERIFY(a.has_kernels<ProbeKernels>());
    QCOMPARE(probes_made, 0);  // asking does not make them
    ProbeKernels& ka = a.kernels<ProbeKernels>();
    QCOMPARE(&ka.backend(), &a);
    QCOMPARE(&a.kernels<ProbeKernels>(), &ka);
    QCOMPARE(probes_made, 1);
    QVERIFY(&b.kernels<ProbeKernels>() != &ka);
    QCOMPARE(&b.kernels<ProbeKernels>().backend(), &b);
    QCOMPARE(probes_made, 2);
  }

  void missing_family_names_family_and_backend() {
    CpuBackend be;
    QVERIFY(!be.has_kernels<UnregisteredKernels>());
    try {
      be.kernels<UnregisteredKernels>();
      QFAIL("no error for a family without kernels");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("unregistered ops") != std::string::npos, m.c_str());
      QVERIFY2(m.find(be.name()) != std::string::npos, m.c_str());
    }
  }

  void second_registration_is_refused() {
    QVERIFY_THROWS_EXCEPTION(
        Error, (register_kernels<ProbeKernels, CpuProbe, CpuBackend>(DeviceKind::CPU)));
    QVERIFY(!find_op_kernels(typeid(ProbeKernels), DeviceKind::CUDA));
  }

  // The generated registration list reached the CPU backend.
  void cpu_backend_has_the_moved_families() {
    CpuBackend be;
    QVERIFY(be.has_kernels<batchnorm::Kernels>());
  }
};

QTEST_GUILESS_MAIN(TestOpRegistry)
#include "test_op_registry.moc"
