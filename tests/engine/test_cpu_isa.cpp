// SPDX-License-Identifier: GPL-3.0-or-later
// The copies of the CPU backend's own loops (engine/core/cpu_features.h): for
// every ISA this build has copies for and this processor runs, the fast f32
// path of each family with dispatched loops (batch norm, pointwise, the
// optimizer, the convolution's im2col/col2im) gives the bits the baseline copy
// gives. The tolerance is zero by derivation: no copy has FMA, the engine is
// built with -ffp-contract=off and without -ffast-math, so a wider register
// does the same operations in the same order. The family suites (test_op_*)
// check the fast path against the reference within their derived tolerances
// on the copy this processor selects; equal bits carry that to every copy.
// Also: the names TRAINBENCH_CPU_ISA takes, the refusal of an ISA this
// processor cannot run, and the choice recorded in a run's environment.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cpu_features.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/ops/pointwise/pointwise.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"

using json = nlohmann::json;

Q_DECLARE_METATYPE(tb::CpuIsa)

namespace tb::test {
namespace {

// One case: runs ops on the fast CPU backend from fixed inputs (made inside,
// from fixed seeds) and returns every tensor they wrote.
using Case = std::function<std::vector<Tensor>(Backend&)>;

// Odd sizes on purpose: rows that are not a multiple of any vector width, so
// every copy runs its vector body and its scalar tail.
Tensor rnd(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random_tensor(s, seed, lo, hi);
}

Case batchnorm_train(Shape s, Activation act, bool residual) {
  return [=](Backend& be) {
    const int64_t C = s[1];
    Tensor x = rnd(s, 1, -2.0, 3.0), gamma = rnd({C}, 2, 0.5, 1.5), beta = rnd({C}, 3);
    Tensor rmean = rnd({C}, 4), rvar = rnd({C}, 5, 0.5, 2.0);
    Tensor y = Tensor::empty(s, DType::F32), mean = Tensor::empty({C}, DType::F32),
           invstd = Tensor::empty({C}, DType::F32);
    Epilogue ep{.act = act};
    if (residual) ep.residual = rnd(s, 6);
    batchnorm::forward_train(be, x, gamma, beta, rmean, rvar, 0.1f, 1e-5f, y, mean, invstd, ep);
    return std::vector<Tensor>{y, rmean, rvar, mean, invstd};
  };
}

Case batchnorm_eval(Shape s, Activation act) {
  return [=](Backend& be) {
    const int64_t C = s[1];
    Tensor x = rnd(s, 11), gamma = rnd({C}, 12), beta = rnd({C}, 13);
    Tensor rmean = rnd({C}, 14), rvar = rnd({C}, 15, 0.5, 2.0);
    Tensor y = Tensor::empty(s, DType::F32);
    batchnorm::forward_eval(be, x, gamma, beta, rmean, rvar, 1e-5f, y, Epilogue{.act = act});
    return std::vector<Tensor>{y};
  };
}

Case batchnorm_backward(Shape s, Activation act, bool dresidual, bool accumulate) {
  return [=](Backend& be) {
    const int64_t C = s[1];
    Tensor x = rnd(s, 21), dy = rnd(s, 22), gamma = rnd({C}, 23, 0.5, 1.5);
    Tensor mean = rnd({C}, 24, -0.1, 0.1), invstd = rnd({C}, 25, 0.5, 2.0);
    Tensor dx = Tensor::empty(s, DType::F32), dgamma = rnd({C}, 26), dbeta = rnd({C}, 27);
    EpilogueGrad ep{.act = act};
    if (act == Activation::ReLU) ep.y = rnd(s, 28);  // about half the mask open
    if (dresidual) ep.dresidual = Tensor::empty(s, DType::F32);
    batchnorm::backward(be, x, dy, gamma, mean, invstd, dx, dgamma, dbeta, accumulate, ep);
    std::vector<Tensor> out{dx, dgamma, dbeta};
    if (dresidual) out.push_back(ep.dresidual);
    return out;
  };
}

// Values on every edge of the ReLU select: NaN, ±0, ±inf, tiny and huge.
Tensor edgy(int64_t n, uint64_t seed) {
  Tensor t = rnd({n}, seed, -3.0, 3.0);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(), -1e-38f, 3e38f};
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < n; i += 7) p[i] = special[(i / 7) % 8];
  return t;
}

// in_place: y aliases x (dx aliases dy), as the layers call them.
Case pointwise_case(int64_t n, bool in_place) {
  return [=](Backend& be) {
    Tensor x = edgy(n, 31), dy = edgy(n, 32), a = rnd({n}, 33), b = rnd({n}, 34);
    Tensor y = in_place ? x : Tensor::empty({n}, DType::F32);
    pointwise::relu_forward(be, x, y);
    Tensor dx = in_place ? dy : Tensor::empty({n}, DType::F32);
    pointwise::relu_backward(be, edgy(n, 35), dy, dx);
    Tensor sum = in_place ? a : Tensor::empty({n}, DType::F32);
    pointwise::add(be, a, b, sum);
    Tensor acc = rnd({n}, 36);
    pointwise::accumulate(be, b, acc);
    return std::vector<Tensor>{y, dx, sum, acc};
  };
}

Case optimizer_case(OptimizerKind kind, bool multi_tensor) {
  return [=](Backend& be) {
    OptimizerStep st;
    st.kind = kind;
    st.lr = 0.05f;
    st.momentum = kind == OptimizerKind::AdamW || kind == OptimizerKind::LAMB ? 0.0f : 0.9f;
    st.nesterov = kind == OptimizerKind::SGD;
    st.weight_decay = 5e-4f;
    st.step = 3;
    st.grad_scale = 0.5f;
    const optimizer::States states = optimizer::needed_states(st);
    std::vector<ParamSlot> param_slots;
    std::vector<Tensor> out;
    uint64_t seed = 40;
    for (int64_t n : {int64_t(1), int64_t(37), int64_t(1000), int64_t(70001)}) {
      ParamSlot s;
      s.param = rnd({n}, seed++);
      s.grad = rnd({n}, seed++);
      if (states.state1) s.state1 = rnd({n}, seed++, 0.0, 0.1);
      if (states.state2) s.state2 = rnd({n}, seed++, 0.0, 0.1);
      s.weight_decay = n != 37;
      param_slots.push_back(s);
      for (const Tensor* t : {&s.param, &s.state1, &s.state2})
        if (t->defined()) out.push_back(*t);
    }
    for (int repeat = 0; repeat < 2; ++repeat) optimizer::step(be, st, param_slots, multi_tensor);
    return out;
  };
}

Case conv_case(int64_t N, int64_t C_in, int64_t H, int64_t C_out, int64_t k, int64_t stride,
               int64_t pad) {
  return [=](Backend& be) {
    const ConvGeometry g = ConvGeometry::make(N, C_in, H, H + 2, C_out, k, stride, pad);
    Tensor x = rnd(g.input_shape(), 51), w = rnd(g.weight_shape(), 52), b = rnd({C_out}, 53);
    Tensor y = Tensor::empty(g.output_shape(), DType::F32);
    conv::forward(be, g, x, w, b, y);
    Tensor dy = rnd(g.output_shape(), 54);
    Tensor dx = Tensor::empty(g.input_shape(), DType::F32), dw = rnd(g.weight_shape(), 55),
           db = rnd({C_out}, 56);
    conv::backward(be, g, x, w, dy, dx, dw, db, /*accumulate=*/true);
    return std::vector<Tensor>{y, dx, dw, db};
  };
}

// The first element whose bits differ, or an empty string.
std::string first_difference(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  if (want.size() != got.size()) return "a different number of outputs";
  for (size_t t = 0; t < want.size(); ++t) {
    const float* a = want[t].data_as<float>();
    const float* b = got[t].data_as<float>();
    for (int64_t i = 0; i < want[t].numel(); ++i)
      if (std::memcmp(a + i, b + i, sizeof(float)) != 0) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "output %zu element %lld: baseline %a (%.9g), got %a (%.9g)",
                      t, static_cast<long long>(i), double(a[i]), double(a[i]), double(b[i]),
                      double(b[i]));
        return buf;
      }
  }
  return {};
}

// Copies of every output, so a later run cannot change them.
std::vector<Tensor> kept(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(clone(t));
  return out;
}

}  // namespace
}  // namespace tb::test

using namespace tb;
using namespace tb::test;

class TestCpuIsa : public QObject {
  Q_OBJECT

 private:
  CpuIsa selected_ = CpuIsa::Default;

 private slots:
  void initTestCase() {
    cpu_fast();  // the backend decides the ISA (and refuses a bad TRAINBENCH_CPU_ISA) first
    selected_ = cpu_isa();
    QString supported;
    for (CpuIsa i : cpu_isas_supported()) supported += QString(" ") + cpu_isa_name(i);
    qInfo("selected ISA %s (%s); this processor runs:%s", cpu_isa_name(selected_),
          cpu_isa_source().c_str(), qPrintable(supported));
  }
  void cleanup() { set_cpu_isa(selected_); }

  void names_round_trip() {
    for (CpuIsa i : cpu_isas_supported()) QCOMPARE(parse_cpu_isa(cpu_isa_name(i)), i);
    try {
      parse_cpu_isa("avx1024");
      QFAIL("an unknown name was accepted");
    } catch (const Error& e) {
      const QString m = e.what();
      QVERIFY2(m.contains("'avx1024'") && m.contains("default") && m.contains("auto"),
               e.what());
    }
  }

  // Every ISA this build has a copy for but this processor lacks is refused,
  // naming what it needs.
  void unsupported_isa_is_refused() {
    int refused = 0;
    for (CpuIsa i : cpu_isas_built()) {
      if (cpu_supports(i)) continue;
      try {
        set_cpu_isa(i);
        QFAIL(qPrintable(QString("set_cpu_isa(%1) accepted on a processor without it")
                             .arg(cpu_isa_name(i))));
      } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("cannot run on this processor"), e.what());
        QCOMPARE(cpu_isa(), selected_);  // nothing changed
        ++refused;
      }
    }
    if (refused == 0) QSKIP("this processor runs every ISA this build has copies for");
  }

  // TRAINBENCH_CPU_ISA picks the copy, the run's environment records it, and a
  // name that is not an ISA fails the run naming the variable.
  void environment_variable_picks_and_is_recorded() {
    QTemporaryDir dir;
    const QString db = dir.filePath("isa.db");
    auto engine = [&](const QStringList& args, const QString& isa, QString* out, QString* err) {
      QProcess p;
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("TRAINBENCH_CPU_ISA", isa);
      p.setProcessEnvironment(env);
      p.start(TRAINBENCH_ENGINE_BIN, args);
      p.waitForFinished(120000);
      *out = QString::fromUtf8(p.readAllStandardOutput());
      *err = QString::fromUtf8(p.readAllStandardError());
      return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    };
    const QStringList run = {"run", "--db", db, "--quiet", "--device", "cpu", "--dataset",
                             "synthetic", "--model", "mlp", "--steps", "2", "-b", "16",
                             "--set", "synthetic_size=64", "--test-limit", "32"};
    QString out, err;
    QCOMPARE(engine(run, "default", &out, &err), 0);
    QCOMPARE(engine({"export", "1", "--db", db, "--format", "json"}, "", &out, &err), 0);
    const json env = json::parse(out.toStdString()).at("environment");
    QCOMPARE(env.at("cpu_isa").get<std::string>(), std::string("default"));
    QCOMPARE(env.at("cpu_isa_source").get<std::string>(), std::string("TRAINBENCH_CPU_ISA"));

    const int code = engine(run, "sse9", &out, &err);
    QVERIFY2(code != 0, "a run with TRAINBENCH_CPU_ISA=sse9 succeeded");
    QVERIFY2(err.contains("TRAINBENCH_CPU_ISA=sse9") && err.contains("unknown CPU instruction set"),
             qPrintable(err));
  }

  void copies_give_the_baseline_bits_data() {
    QTest::addColumn<CpuIsa>("isa");
    QTest::addColumn<QString>("op");
    const std::vector<std::pair<const char*, Case>> cases = {
        {"bn train 3x5x7x9", batchnorm_train({3, 5, 7, 9}, Activation::None, false)},
        {"bn train relu+res 2x3x28x28", batchnorm_train({2, 3, 28, 28}, Activation::ReLU, true)},
        {"bn eval relu 3x5x7x9", batchnorm_eval({3, 5, 7, 9}, Activation::ReLU)},
        {"bn backward 3x5x7x9", batchnorm_backward({3, 5, 7, 9}, Activation::None, false, false)},
        {"bn backward relu 2x3x28x28",
         batchnorm_backward({2, 3, 28, 28}, Activation::ReLU, false, true)},
        {"bn backward relu+dres 3x5x7x9",
         batchnorm_backward({3, 5, 7, 9}, Activation::ReLU, true, false)},
        {"pointwise 1001", pointwise_case(1001, false)},
        {"pointwise in place 1001", pointwise_case(1001, true)},
        {"pointwise in place 200003 (threads)", pointwise_case(200003, true)},
        {"sgd", optimizer_case(OptimizerKind::SGD, false)},
        {"sgd multi-tensor", optimizer_case(OptimizerKind::SGD, true)},
        {"adamw multi-tensor", optimizer_case(OptimizerKind::AdamW, true)},
        {"rmsprop", optimizer_case(OptimizerKind::RMSProp, false)},
        {"lars", optimizer_case(OptimizerKind::LARS, false)},
        {"lamb multi-tensor", optimizer_case(OptimizerKind::LAMB, true)},
        {"conv 3x3 s1 p1", conv_case(3, 3, 11, 5, 3, 1, 1)},
        {"conv 3x3 s2 p1", conv_case(2, 4, 13, 6, 3, 2, 1)},
        {"conv 5x5 s1 p0", conv_case(2, 2, 9, 3, 5, 1, 0)},
        {"conv 1x1 s2 p0", conv_case(2, 8, 10, 4, 1, 2, 0)},
    };
    cases_ = cases;
    for (CpuIsa isa : cpu_isas_built())
      for (size_t c = 0; isa != CpuIsa::Default && c < cases.size(); ++c)
        QTest::addRow("%s: %s", cpu_isa_name(isa), cases[c].first)
            << isa << QString::fromLatin1(cases[c].first);
  }

  void copies_give_the_baseline_bits() {
    QFETCH(CpuIsa, isa);
    QFETCH(QString, op);
    if (!cpu_supports(isa))
      QSKIP(qPrintable(QString("this processor cannot run %1").arg(cpu_isa_name(isa))));
    const Case* c = nullptr;
    for (const auto& [name, f] : cases_)
      if (op == name) c = &f;
    QVERIFY(c);
    set_cpu_isa(CpuIsa::Default);
    const std::vector<Tensor> want = kept((*c)(cpu_fast()));
    set_cpu_isa(isa);
    QCOMPARE(cpu_isa(), isa);
    const std::vector<Tensor> got = kept((*c)(cpu_fast()));
    const std::string diff = first_difference(want, got);
    QVERIFY2(diff.empty(), diff.c_str());
  }

 private:
  std::vector<std::pair<const char*, Case>> cases_;
};

QTEST_GUILESS_MAIN(TestCpuIsa)
#include "test_cpu_isa.moc"
