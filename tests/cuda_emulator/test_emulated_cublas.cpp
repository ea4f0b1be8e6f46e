// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA emulator's cuBLAS and cuBLASLt test double (emulated_cublas.cpp)
// against a plain double reference, on one emulated device:
// 1. cublasGemmEx for each transpose pair and each type combination the
//    engine uses (f32, f16 and bf16 A/B; f32 or A's type C), a 5x3x7 product
//    with padded leading dimensions (NaN padding: reading it shows, writing
//    it is caught), alpha and beta other than 1, beta = 0 over a NaN C;
// 2. cublasLtMatmul the same, with each epilogue (DEFAULT, RELU, BIAS,
//    RELU_BIAS) and the bias in D's type or f32 for an f16/bf16 D, through
//    the heuristic's algorithm and workspace;
// 3. one rounding from the exact sum to an f16/bf16 result (where rounding
//    to f32 first would round twice), TF32 and f16/bf16 input rounding
//    where the math mode or compute type allows it;
// 4. cuBLAS's statuses for bad arguments, and the emulator's refusals of
//    what would fault on a GPU: host or freed or too short operands,
//    overlapping outputs, an unaligned operand, a short workspace;
// 5. workspaces overwritten by every GEMM that gets one, cublasSetStream
//    dropping the handle's workspace, as cuBLAS does;
// 6. stream capture: nothing runs while captured, replays use the alpha of
//    the call (host mode) or of the moment (device mode), and new inputs.
// The test's values are multiples of 2^-4 below 4 in magnitude, so every sum
// is exact in double and the reference rounds once, independently of the
// implementation's rounding helpers.
#include <QtTest>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

const char* status_name(cublasStatus_t st) { return cublasGetStatusName(st); }

#define EXPECT_STATUS(call, want) QCOMPARE(status_name(call), status_name(want))

size_t elem_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

const char* type_str(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "f32";
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    default: return "?";
  }
}

// v rounded to nearest even with `digits` significant bits, exponents from
// emin on (below, the subnormal step), inf past max_finite: the definition,
// independent of emulator.h's bit tricks.
double round_to_format(double v, int digits, int emin, double max_finite) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e;
  (void)std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const double step = std::ldexp(1.0, std::max(e - 1, emin) - (digits - 1));
  const double r = std::nearbyint(v / step) * step;
  return std::fabs(r) > max_finite ? std::copysign(INFINITY, v) : r;
}

double round_to(double v, cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return double(float(v));
    case CUDA_R_16F: return round_to_format(v, 11, -14, 65504.0);
    case CUDA_R_16BF: return round_to_format(v, 8, -126, 0x1.fep127);
    default: return std::nan("");
  }
}

// v (exact in t) stored as t; NaN as all-ones bytes, the emulated cudaMalloc's fill.
void put_elem(unsigned char* p, cudaDataType_t t, double v) {
  if (std::isnan(v)) {
    std::memset(p, 0xff, elem_bytes(t));
    return;
  }
  if (t == CUDA_R_32F) {
    const float f = float(v);
    std::memcpy(p, &f, 4);
  } else {
    const float f = float(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    // Exact values only: the top bits are the value (bf16), or the fields moved (f16).
    uint16_t h;
    if (t == CUDA_R_16BF) {
      h = uint16_t(u >> 16);
    } else {
      h = uint16_t(tb_emu::half_bits_rn(f));
    }
    std::memcpy(p, &h, 2);
  }
}

double get_elem(const unsigned char* p, cudaDataType_t t) {
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == CUDA_R_16BF) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // f16 by its fields.
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0    ? std::ldexp(mant, -24)
             : exp == 31 ? (mant ? std::nan("") : INFINITY)
                         : std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

// A column-major matrix on the host: rows x cols, ld apart, NaN padding.
struct HostMatrix {
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<double> v;  // v[r + c * ld]
  double at(int64_t r, int64_t c) const { return v[size_t(r + c * ld)]; }
  size_t nbytes() const { return size_t(ld * cols) * elem_bytes(type); }
  std::vector<unsigned char> encode() const {
    std::vector<unsigned char> out(nbytes());
    for (size_t i = 0; i < v.size(); ++i) put_elem(&out[i * elem_bytes(type)], type, v[i]);
    return out;
  }
};

// Multiples of 2^-4 in [-4, 4]: exact in f16, bf16 and f32, products exact
// in 2^-8 steps, sums of a few of them exact in double.
HostMatrix random_matrix(std::mt19937& rng, cudaDataType_t t, int64_t rows, int64_t cols,
                         int64_t ld) {
  HostMatrix m{t, rows, cols, ld, std::vector<double>(size_t(ld * cols), std::nan(""))};
  std::uniform_int_distribution<int> d(-64, 64);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) m.v[size_t(r + c * ld)] = d(rng) / 16.0;
  return m;
}

// A cudaMalloc'd buffer (0xff bytes at first).
struct Dev {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  Dev(Dev&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)), bytes(o.bytes) {}
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    if (ptr) (void)cudaFree(ptr);
  }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> h(bytes);
    (void)cudaMemcpyAsync(h.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
  void write(const std::vector<unsigned char>& h) {
    (void)cudaMemcpyAsync(ptr, h.data(), std::min(bytes, h.size()), cudaMemcpyHostToDevice);
  }
  void fill(int byte) { (void)cudaMemsetAsync(ptr, byte, bytes); }
  bool all(unsigned char byte) const {
    for (unsigned char b : read())
      if (b != byte) return false;
    return true;
  }
  char* at(size_t offset) const { return static_cast<char*>(ptr) + offset; }
};

Dev upload(const HostMatrix& m) {
  Dev d(m.nbytes());
  d.write(m.encode());
  return d;
}

// act(alpha·op(A)·op(B) + beta·C + bias), exact, rounded once to `out`:
// m x n, dense column-major. C and bias may be null.
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                              const HostMatrix& A, const HostMatrix& B, double beta,
                              const HostMatrix* C, const std::vector<double>* bias, bool relu,
                              cudaDataType_t out) {
  std::vector<double> d(size_t(m * n));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = 0; r < m; ++r) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? A.at(p, r) : A.at(r, p)) * (tb ? B.at(c, p) : B.at(p, c));
      double v = alpha * s;
      if (C && beta != 0) v += beta * C->at(r, c);
      if (bias) v += (*bias)[size_t(r)];
      if (relu && !(v > 0)) v = 0;
      d[size_t(r + c * m)] = round_to(v, out);
    }
  return d;
}

// "" when the m x n result (ld apart, type t) in `got` is `want` and the
// padding below each column still holds the 0xff bytes it had.
QString mismatch(const std::vector<unsigned char>& got, cudaDataType_t t, int64_t m, int64_t n,
                 int64_t ld, const std::vector<double>& want) {
  const size_t eb = elem_bytes(t);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = 0; r < ld; ++r) {
      const unsigned char* p = &got[size_t(r + c * ld) * eb];
      if (r >= m) {
        for (size_t b = 0; b < eb; ++b)
          if (p[b] != 0xff) return QString("padding (%1, %2) was written").arg(r).arg(c);
        continue;
      }
      const double g = get_elem(p, t), w = want[size_t(r + c * m)];
      if (!(g == w || (std::isnan(g) && std::isnan(w))))
        return QString("(%1, %2): got %3, want %4")
            .arg(r)
            .arg(c)
            .arg(g, 0, 'g', 17)
            .arg(w, 0, 'g', 17);
    }
  return {};
}

// The cuBLASLt descriptors of one matmul, destroyed at the end of scope.
struct Lt {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Lt() = default;
  Lt(const Lt&) = delete;
  Lt& operator=(const Lt&) = delete;
  ~Lt() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {a, b, c, d})
      if (l) (void)cublasLtMatrixLayoutDestroy(l);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
};

struct LtShape {
  bool ta = false, tb = false;
  int64_t m = 5, n = 3, k = 7;
  cudaDataType_t ab = CUDA_R_32F, dt = CUDA_R_32F;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
};

// The descriptors of D (m, n) = epi(alpha·op(A)·op(B) + beta·C); a failed
// status when a call refused.
cublasStatus_t make_lt(Lt& lt, const LtShape& s, cublasLtEpilogue_t epi, const void* bias,
                       int bias_type, size_t max_ws) {
  cublasStatus_t st = cublasLtMatmulDescCreate(&lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const uint32_t e = epi;
  if (!st) st = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4);
  if (!st) st = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4);
  if (!st) st = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
  if (!st && bias)
    st = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias);
  if (!st && bias_type >= 0)
    st = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, 4);
  const uint64_t ar = s.ta ? s.k : s.m, ac = s.ta ? s.m : s.k;
  const uint64_t br = s.tb ? s.n : s.k, bc = s.tb ? s.k : s.n;
  if (!st) st = cublasLtMatrixLayoutCreate(&lt.a, s.ab, ar, ac, s.lda);
  if (!st) st = cublasLtMatrixLayoutCreate(&lt.b, s.ab, br, bc, s.ldb);
  if (!st) st = cublasLtMatrixLayoutCreate(&lt.c, s.dt, s.m, s.n, s.ldc);
  if (!st) st = cublasLtMatrixLayoutCreate(&lt.d, s.dt, s.m, s.n, s.ldd);
  if (!st) st = cublasLtMatmulPreferenceCreate(&lt.pref);
  if (!st)
    st = cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &max_ws, sizeof max_ws);
  return st;
}

cublasStatus_t heuristic(cublasLtHandle_t h, const Lt& lt, cublasLtMatmulHeuristicResult_t* r,
                         int* found) {
  return cublasLtMatmulAlgoGetHeuristic(h, lt.op, lt.a, lt.b, lt.c, lt.d, lt.pref, 1, r, found);
}

std::vector<double> random_bias(std::mt19937& rng, int64_t m) {
  std::vector<double> b(static_cast<size_t>(m));
  std::uniform_int_distribution<int> d(-64, 64);
  for (double& x : b) x = d(rng) / 16.0;
  return b;
}

Dev upload_vector(const std::vector<double>& v, cudaDataType_t t) {
  HostMatrix m{t, int64_t(v.size()), 1, int64_t(v.size()), v};
  return upload(m);
}

}  // namespace

class TestEmulatedCublas : public QObject {
  Q_OBJECT

  cublasHandle_t h_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;

 private slots:
  void initTestCase() {
    // One emulated device (the runtime reads this at its first call).
    const char* gpus = std::getenv("TRAINBENCH_EMULATED_GPUS");
    if (!gpus || std::atoi(gpus) < 1) setenv("TRAINBENCH_EMULATED_GPUS", "1", 1);
    int n = 0;
    QCOMPARE(cudaGetDeviceCount(&n), cudaSuccess);
    QVERIFY(n >= 1);
    EXPECT_STATUS(cublasCreate(&h_), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS);
  }

  void cleanupTestCase() {
    EXPECT_STATUS(cublasLtDestroy(lt_), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasDestroy(h_), CUBLAS_STATUS_SUCCESS);
  }

  // Every test starts from the handle as cuda_backend.cpp leaves it.
  void init() {
    EXPECT_STATUS(cublasSetStream(h_, nullptr), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  }

  void versions_and_names() {
    int v = 0;
    EXPECT_STATUS(cublasGetVersion(h_, &v), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(v, 130100);
    QCOMPARE(cublasLtGetVersion(), size_t(130100));
    int major = 0, minor = -1;
    EXPECT_STATUS(cublasGetProperty(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasGetProperty(MINOR_VERSION, &minor), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(major, 13);
    QCOMPARE(minor, 1);
    QCOMPARE(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
    QCOMPARE(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
    QVERIFY(std::strlen(cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED)) > 0);
    // The numbers are cuBLAS's: code built against the real headers agrees.
    QCOMPARE(int(CUBLAS_STATUS_EXECUTION_FAILED), 13);
    QCOMPARE(int(CUBLAS_COMPUTE_32F), 68);
    QCOMPARE(int(CUDA_R_16BF), 14);
    QCOMPARE(int(CUBLASLT_EPILOGUE_RELU_BIAS), 6);
    QCOMPARE(int(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), 26);
    QCOMPARE(int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 8);
    cudaStream_t s = reinterpret_cast<cudaStream_t>(&v), got = nullptr;
    EXPECT_STATUS(cublasSetStream(h_, s), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasGetStream(h_, &got), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(got, s);
    EXPECT_STATUS(cublasSetStream(h_, nullptr), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(sizeof(cublasLtMatmulHeuristicResult_t), size_t(96));
  }

  void gemm_ex_matches_reference_data() {
    QTest::addColumn<bool>("ta");
    QTest::addColumn<bool>("tb");
    QTest::addColumn<int>("ab");
    QTest::addColumn<int>("ct");
    QTest::addColumn<double>("alpha");
    QTest::addColumn<double>("beta");
    // linear_cuda.cpp's combinations: f32 throughout; f16/bf16 A and B with
    // an f32 C (amp) or a C of their type (low-precision activations).
    const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_32F, CUDA_R_32F},
                                                               {CUDA_R_16F, CUDA_R_32F},
                                                               {CUDA_R_16F, CUDA_R_16F},
                                                               {CUDA_R_16BF, CUDA_R_32F},
                                                               {CUDA_R_16BF, CUDA_R_16BF}};
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [ab, ct] : types)
          for (auto [alpha, beta] : {std::pair{1.5, 0.0}, std::pair{-0.5, 0.75}})
            QTest::addRow("%s%s %s->%s alpha=%g beta=%g", ta ? "T" : "N", tb ? "T" : "N",
                          type_str(ab), type_str(ct), alpha, beta)
                << ta << tb << int(ab) << int(ct) << alpha << beta;
  }
  void gemm_ex_matches_reference() {
    QFETCH(bool, ta);
    QFETCH(bool, tb);
    QFETCH(int, ab);
    QFETCH(int, ct);
    QFETCH(double, alpha);
    QFETCH(double, beta);
    const auto abt = cudaDataType_t(ab), ctt = cudaDataType_t(ct);
    const int m = 5, n = 3, k = 7;
    std::mt19937 rng(uint32_t(ab * 1000 + ct * 100 + ta * 10 + tb));
    // Stored shapes, with padding (NaN) below each column.
    const HostMatrix A = random_matrix(rng, abt, ta ? k : m, ta ? m : k, (ta ? k : m) + 2);
    const HostMatrix B = random_matrix(rng, abt, tb ? n : k, tb ? k : n, (tb ? n : k) + 1);
    HostMatrix C = random_matrix(rng, ctt, m, n, m + 3);
    Dev a = upload(A), b = upload(B), c(C.nbytes());
    if (beta != 0) c.write(C.encode());  // else C stays NaN: beta = 0 must not read it
    const float fa = float(alpha), fb = float(beta);
    EXPECT_STATUS(cublasGemmEx(h_, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               m, n, k, &fa, a.ptr, abt, int(A.ld), b.ptr, abt, int(B.ld), &fb,
                               c.ptr, ctt, int(C.ld), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
    const auto want = reference(ta, tb, m, n, k, alpha, A, B, beta, &C, nullptr, false, ctt);
    const QString bad = mismatch(c.read(), ctt, m, n, C.ld, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
  }

  // f16/bf16 results are rounded once from the exact sum: 1 + 2^-11 + 2^-40
  // is 1 + 2^-10 in f16, where rounding to f32 first (1 + 2^-11, a tie)
  // would give 1; likewise 1 + 2^-8 + 2^-40 in bf16.
  void gemm_ex_rounds_once() {
    for (auto [t, half_ulp, want] :
         {std::tuple{CUDA_R_16F, std::ldexp(1.0, -11), 1 + std::ldexp(1.0, -10)},
          std::tuple{CUDA_R_16BF, std::ldexp(1.0, -8), 1 + std::ldexp(1.0, -7)}}) {
      const double tiny = std::ldexp(1.0, -20);
      const HostMatrix A{t, 1, 3, 1, {1.0, half_ulp, tiny}};  // a row of op(A)
      const HostMatrix B{t, 3, 1, 3, {1.0, 1.0, tiny}};
      Dev a = upload(A), b = upload(B), c(2);
      const float one = 1, zero = 0;
      EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 3, &one, a.ptr, t, 1, b.ptr,
                                 t, 3, &zero, c.ptr, t, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
      QCOMPARE(get_elem(c.read().data(), t), want);
    }
  }

  // f32 inputs narrowed only where cuBLAS may: TF32 math mode or compute
  // type, FAST_16BF; never under the default math mode or PEDANTIC.
  void gemm_ex_input_narrowing() {
    const double x = 1 + std::ldexp(1.0, -12);  // TF32 and bf16 round it to 1
    const HostMatrix A{CUDA_R_32F, 1, 1, 1, {x}}, B{CUDA_R_32F, 1, 1, 1, {1.0}};
    Dev a = upload(A), b = upload(B), c(4);
    const float one = 1, zero = 0;
    const auto run = [&](cublasComputeType_t ct) {
      c.fill(0xff);
      const cublasStatus_t st =
          cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.ptr, CUDA_R_32F, 1, b.ptr,
                       CUDA_R_32F, 1, &zero, c.ptr, CUDA_R_32F, 1, ct, CUBLAS_GEMM_DEFAULT);
      return st == CUBLAS_STATUS_SUCCESS ? get_elem(c.read().data(), CUDA_R_32F) : -1.0;
    };
    QCOMPARE(run(CUBLAS_COMPUTE_32F), x);
    QCOMPARE(run(CUBLAS_COMPUTE_32F_FAST_TF32), 1.0);
    QCOMPARE(run(CUBLAS_COMPUTE_32F_FAST_16BF), 1.0);
    EXPECT_STATUS(cublasSetMathMode(h_, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(run(CUBLAS_COMPUTE_32F), 1.0);
    QCOMPARE(run(CUBLAS_COMPUTE_32F_PEDANTIC), x);
  }

  // alpha = 0 reads neither A nor B (NaN here), as BLAS; beta = 1 then
  // leaves C as it is without running anything.
  void gemm_ex_alpha_zero() {
    const int m = 2, n = 2, k = 3;
    Dev a(m * k * 4), b(k * n * 4), c(m * n * 4);  // A and B NaN
    std::mt19937 rng(5);
    const HostMatrix C = random_matrix(rng, CUDA_R_32F, m, n, m);
    c.write(C.encode());
    const float zero = 0, half = 0.5f, one = 1;
    EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &zero, a.ptr, CUDA_R_32F, m,
                               b.ptr, CUDA_R_32F, k, &half, c.ptr, CUDA_R_32F, m,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
    std::vector<double> want(C.v);
    for (double& w : want) w *= 0.5;
    QString bad = mismatch(c.read(), CUDA_R_32F, m, n, m, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    // k = 0: C = beta·C, the empty sum.
    EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, &one, a.ptr, CUDA_R_32F, m,
                               b.ptr, CUDA_R_32F, 1, &half, c.ptr, CUDA_R_32F, m,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
    for (double& w : want) w *= 0.5;
    bad = mismatch(c.read(), CUDA_R_32F, m, n, m, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
  }

  void gemm_ex_refuses_bad_arguments() {
    const int m = 4, n = 3, k = 5;
    Dev a(64 * 4), b(64 * 4), c(64 * 4);
    const float one = 1, zero = 0;
    const auto gemm = [&](cublasHandle_t h, cublasOperation_t ta, int mm, int lda, int ldb, int ldc,
                          cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                          cublasComputeType_t comp, const float* alpha) {
      return cublasGemmEx(h, ta, CUBLAS_OP_N, mm, n, k, alpha, a.ptr, at, lda, b.ptr, bt, ldb,
                          &zero, c.ptr, ct, ldc, comp, CUBLAS_GEMM_DEFAULT);
    };
    const auto f32 = CUDA_R_32F, f16 = CUDA_R_16F, bf16 = CUDA_R_16BF;
    const auto c32 = CUBLAS_COMPUTE_32F;
    const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f32, f32, f32, c32, &one), CUBLAS_STATUS_SUCCESS);
    c.fill(0xff);
    // Leading dimensions below the stored rows: A is m x k (N) or k x m (T).
    EXPECT_STATUS(gemm(h_, N, m, m - 1, k, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, T, m, k - 1, k, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, T, m, k, k, m, f32, f32, f32, c32, &one), CUBLAS_STATUS_SUCCESS);
    c.fill(0xff);
    EXPECT_STATUS(gemm(h_, N, m, m, k - 1, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m - 1, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, N, -1, m, k, m, f32, f32, f32, c32, &one), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, cublasOperation_t(7), m, m, k, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f32, f32, f32, c32, nullptr),
                  CUBLAS_STATUS_INVALID_VALUE);
    // Type combinations cuBLAS has no GEMM for.
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f16, f32, f32, c32, &one), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f32, f32, f16, c32, &one), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f16, f16, bf16, c32, &one), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f16, f16, f32, CUBLAS_COMPUTE_32F_FAST_TF32, &one),
                  CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_STATUS(gemm(h_, N, m, m, k, m, f16, f16, f16, CUBLAS_COMPUTE_16F, &one),
                  CUBLAS_STATUS_NOT_SUPPORTED);
    // No handle, or a destroyed one.
    EXPECT_STATUS(gemm(nullptr, N, m, m, k, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_NOT_INITIALIZED);
    cublasHandle_t gone = nullptr;
    EXPECT_STATUS(cublasCreate(&gone), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(cublasDestroy(gone), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(gemm(gone, N, m, m, k, m, f32, f32, f32, c32, &one),
                  CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_STATUS(cublasDestroy(gone), CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_STATUS(cublasSetMathMode(h_, cublasMath_t(5)), CUBLAS_STATUS_INVALID_VALUE);
    QVERIFY2(c.all(0xff), "a refused GEMM wrote C");
  }

  // What would fault on a GPU is refused before anything runs.
  void gemm_ex_refuses_what_would_fault() {
    const int m = 4, n = 3, k = 5;
    Dev a(m * k * 4), b(k * n * 4), c(m * n * 4);
    std::vector<float> host(64, 1.0f);
    const float one = 1, zero = 0;
    const auto gemm = [&](const void* A, const void* B, void* C, int lda, const void* alpha) {
      return cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, A, CUDA_R_32F, lda, B,
                          CUDA_R_32F, k, &zero, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    };
    EXPECT_STATUS(gemm(host.data(), b.ptr, c.ptr, m, &one), CUBLAS_STATUS_EXECUTION_FAILED);
    EXPECT_STATUS(gemm(a.ptr, host.data(), c.ptr, m, &one), CUBLAS_STATUS_EXECUTION_FAILED);
    EXPECT_STATUS(gemm(a.ptr, b.ptr, host.data(), m, &one), CUBLAS_STATUS_EXECUTION_FAILED);
    QCOMPARE(host[0], 1.0f);
    // A's columns lda apart run past its allocation.
    EXPECT_STATUS(gemm(a.ptr, b.ptr, c.ptr, 1000, &one), CUBLAS_STATUS_EXECUTION_FAILED);
    // C overlapping an input.
    EXPECT_STATUS(gemm(a.ptr, b.ptr, a.at(16), m, &one), CUBLAS_STATUS_EXECUTION_FAILED);
    // Host pointer mode with alpha in device memory.
    EXPECT_STATUS(gemm(a.ptr, b.ptr, c.ptr, m, a.ptr), CUBLAS_STATUS_INVALID_VALUE);
    QVERIFY2(c.all(0xff), "a refused GEMM wrote C");
    EXPECT_STATUS(gemm(a.ptr, b.ptr, c.ptr, m, &one), CUBLAS_STATUS_SUCCESS);
  }

  void gemm_ex_overwrites_its_workspace() {
    const int m = 2, n = 2, k = 2;
    Dev a(16), b(16), c(16), ws(64 << 10);
    alignas(256) static unsigned char host[1024];
    const float one = 1, zero = 0;
    const auto gemm = [&] {
      return cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.ptr, CUDA_R_32F, m, b.ptr,
                          CUDA_R_32F, k, &zero, c.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    };
    a.fill(0);
    b.fill(0);
    EXPECT_STATUS(cublasSetWorkspace(h_, host, sizeof host), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(cublasSetWorkspace(h_, ws.at(128), 1024), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(cublasSetWorkspace(h_, ws.ptr, ws.bytes), CUBLAS_STATUS_SUCCESS);
    ws.fill(0);
    EXPECT_STATUS(gemm(), CUBLAS_STATUS_SUCCESS);
    QVERIFY2(ws.all(0xff), "the workspace was not overwritten");
    // cublasSetStream puts the handle back on cuBLAS's pool: ws is not used.
    EXPECT_STATUS(cublasSetStream(h_, nullptr), CUBLAS_STATUS_SUCCESS);
    ws.fill(0);
    EXPECT_STATUS(gemm(), CUBLAS_STATUS_SUCCESS);
    QVERIFY2(ws.all(0), "cublasSetStream kept the workspace");
    // A workspace freed while set faults.
    {
      Dev gone(4096);
      EXPECT_STATUS(cublasSetWorkspace(h_, gone.ptr, gone.bytes), CUBLAS_STATUS_SUCCESS);
    }
    EXPECT_STATUS(gemm(), CUBLAS_STATUS_EXECUTION_FAILED);
    EXPECT_STATUS(cublasSetWorkspace(h_, nullptr, 0), CUBLAS_STATUS_SUCCESS);
    EXPECT_STATUS(gemm(), CUBLAS_STATUS_SUCCESS);
  }

  // Captured, a GEMM runs at each replay: alpha as it was at the call (host
  // mode) or as it is in device memory then (device mode), B as it is then.
  void gemm_ex_in_a_graph() {
    const int m = 3, n = 2, k = 4;
    std::mt19937 rng(11);
    const HostMatrix A = random_matrix(rng, CUDA_R_32F, m, k, m);
    HostMatrix B = random_matrix(rng, CUDA_R_32F, k, n, k);
    Dev a = upload(A), b(B.nbytes()), c(size_t(m * n * 4)), dalpha(4), ws(4096);
    cudaStream_t s = nullptr;
    QCOMPARE(cudaStreamCreate(&s), cudaSuccess);
    for (bool device_mode : {false, true}) {
      EXPECT_STATUS(cublasSetStream(h_, s), CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(cublasSetWorkspace(h_, ws.ptr, ws.bytes), CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(cublasSetPointerMode(h_, device_mode ? CUBLAS_POINTER_MODE_DEVICE
                                                         : CUBLAS_POINTER_MODE_HOST),
                    CUBLAS_STATUS_SUCCESS);
      c.fill(0xff);
      ws.fill(0);
      float alpha = 2, zero = 0;
      Dev dzero(4);
      dzero.fill(0);
      dalpha.write(std::vector<unsigned char>{0, 0, 0, 0x40});  // 2.0f
      QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
      EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
                                 device_mode ? dalpha.ptr : &alpha, a.ptr, CUDA_R_32F, m, b.ptr,
                                 CUDA_R_32F, k, device_mode ? dzero.ptr : &zero, c.ptr,
                                 CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
      cudaGraph_t g = nullptr;
      QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
      EXPECT_STATUS(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
      QVERIFY2(c.all(0xff), "the captured GEMM ran");
      QVERIFY2(ws.all(0), "the captured GEMM used its workspace");
      alpha = 3;
      dalpha.write(std::vector<unsigned char>{0, 0, 0x40, 0x40});  // 3.0f
      cudaGraphExec_t x = nullptr;
      QCOMPARE(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
      const double used = device_mode ? 3 : 2;
      for (int replay = 0; replay < 2; ++replay) {
        B = random_matrix(rng, CUDA_R_32F, k, n, k);
        b.write(B.encode());
        QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
        const auto want = reference(false, false, m, n, k, used, A, B, 0, nullptr, nullptr, false,
                                    CUDA_R_32F);
        const QString bad = mismatch(c.read(), CUDA_R_32F, m, n, m, want);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
        QVERIFY2(ws.all(0xff), "the replayed GEMM did not overwrite its workspace");
        ws.fill(0);
      }
      QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
      QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    }
    // On the legacy stream while a blocking stream captures: the launch fails.
    EXPECT_STATUS(cublasSetStream(h_, nullptr), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.ptr, CUDA_R_32F, m,
                               b.ptr, CUDA_R_32F, k, &zero, c.ptr, CUDA_R_32F, m,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_EXECUTION_FAILED);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
  }

  // A replay after an operand was freed fails as the launch would (an
  // illegal address on a GPU), touching nothing.
  void gemm_ex_replay_after_free() {
    const int m = 2, n = 2, k = 2;
    Dev a(16), c(16);
    auto b = std::make_unique<Dev>(16);
    a.fill(0);
    b->fill(0);
    cudaStream_t s = nullptr;
    QCOMPARE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_STATUS(cublasSetStream(h_, s), CUBLAS_STATUS_SUCCESS);
    const float one = 1, zero = 0;
    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_STATUS(cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.ptr, CUDA_R_32F, m,
                               b->ptr, CUDA_R_32F, k, &zero, c.ptr, CUDA_R_32F, m,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaGraphExec_t x = nullptr;
    QCOMPARE(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
    QCOMPARE(cudaGetLastError(), cudaSuccess);
    QVERIFY2(c.all(0), "the replay did not run");
    c.fill(0xff);
    b.reset();
    QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
    QCOMPARE(cudaGetLastError(), cudaErrorLaunchFailure);
    QVERIFY2(c.all(0xff), "the replay over a freed B wrote C");
    QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    EXPECT_STATUS(cublasSetStream(h_, nullptr), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
  }

  void lt_matmul_matches_reference_data() {
    QTest::addColumn<bool>("ta");
    QTest::addColumn<bool>("tb");
    QTest::addColumn<int>("ab");
    QTest::addColumn<int>("dt");
    QTest::addColumn<int>("epilogue");
    const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_32F, CUDA_R_32F},
                                                               {CUDA_R_16F, CUDA_R_16F},
                                                               {CUDA_R_16BF, CUDA_R_16BF},
                                                               {CUDA_R_16F, CUDA_R_32F},
                                                               {CUDA_R_16BF, CUDA_R_32F}};
    const std::pair<cublasLtEpilogue_t, const char*> epis[] = {
        {CUBLASLT_EPILOGUE_DEFAULT, "DEFAULT"},
        {CUBLASLT_EPILOGUE_RELU, "RELU"},
        {CUBLASLT_EPILOGUE_BIAS, "BIAS"},
        {CUBLASLT_EPILOGUE_RELU_BIAS, "RELU_BIAS"}};
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [ab, dt] : types)
          for (auto [epi, name] : epis)
            QTest::addRow("%s%s %s->%s %s", ta ? "T" : "N", tb ? "T" : "N", type_str(ab),
                          type_str(dt), name)
                << ta << tb << int(ab) << int(dt) << int(epi);
  }
  void lt_matmul_matches_reference() {
    QFETCH(bool, ta);
    QFETCH(bool, tb);
    QFETCH(int, ab);
    QFETCH(int, dt);
    QFETCH(int, epilogue);
    LtShape s;
    s.ta = ta;
    s.tb = tb;
    s.ab = cudaDataType_t(ab);
    s.dt = cudaDataType_t(dt);
    std::mt19937 rng(uint32_t(ab * 7 + dt * 13 + epilogue * 17 + ta * 2 + tb));
    const HostMatrix A =
        random_matrix(rng, s.ab, ta ? s.k : s.m, ta ? s.m : s.k, (ta ? s.k : s.m) + 1);
    const HostMatrix B =
        random_matrix(rng, s.ab, tb ? s.n : s.k, tb ? s.k : s.n, (tb ? s.n : s.k) + 2);
    s.lda = A.ld;
    s.ldb = B.ld;
    s.ldc = s.ldd = s.m + 2;
    const bool has_bias = epilogue & CUBLASLT_EPILOGUE_BIAS;
    const bool relu = epilogue & CUBLASLT_EPILOGUE_RELU;
    const std::vector<double> bias = random_bias(rng, s.m);  // of D's type, cuBLASLt's rule
    Dev a = upload(A), b = upload(B), bias_dev = upload_vector(bias, s.dt);
    Dev d(size_t(s.ldd * s.n) * elem_bytes(s.dt));  // NaN: beta = 0 must not read it
    Lt lt;
    EXPECT_STATUS(make_lt(lt, s, cublasLtEpilogue_t(epilogue), has_bias ? bias_dev.ptr : nullptr,
                          -1, size_t(4) << 20),
                  CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(found, 1);
    Dev ws(heur.workspaceSize);
    ws.fill(0);
    const float alpha = 1.5f, beta = 0;
    // As linear_cuda.cpp: C is D, in place.
    EXPECT_STATUS(cublasLtMatmul(lt_, lt.op, &alpha, a.ptr, lt.a, b.ptr, lt.b, &beta, d.ptr, lt.d,
                                 d.ptr, lt.d, &heur.algo, ws.ptr, heur.workspaceSize, nullptr),
                  CUBLAS_STATUS_SUCCESS);
    const auto want = reference(ta, tb, s.m, s.n, s.k, 1.5, A, B, 0, nullptr,
                                has_bias ? &bias : nullptr, relu, s.dt);
    const QString bad = mismatch(d.read(), s.dt, s.m, s.n, s.ldd, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    QVERIFY2(ws.all(0xff), "the workspace was not overwritten");
  }

  // beta != 0 with a C apart from D (another leading dimension).
  void lt_matmul_reads_c() {
    LtShape s;
    s.ta = true;
    s.lda = s.k;
    s.ldb = s.k;
    s.ldc = s.m + 3;
    s.ldd = s.m;
    std::mt19937 rng(23);
    const HostMatrix A = random_matrix(rng, s.ab, s.k, s.m, s.lda);
    const HostMatrix B = random_matrix(rng, s.ab, s.k, s.n, s.ldb);
    const HostMatrix C = random_matrix(rng, s.dt, s.m, s.n, s.ldc);
    const std::vector<double> bias = random_bias(rng, s.m);
    Dev a = upload(A), b = upload(B), c = upload(C), bias_dev = upload_vector(bias, s.dt);
    Dev d(size_t(s.ldd * s.n) * 4);
    Lt lt;
    EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_RELU_BIAS, bias_dev.ptr, -1, 0),
                  CUBLAS_STATUS_SUCCESS);
    const float alpha = -1, beta = 0.25f;
    EXPECT_STATUS(cublasLtMatmul(lt_, lt.op, &alpha, a.ptr, lt.a, b.ptr, lt.b, &beta, c.ptr, lt.c,
                                 d.ptr, lt.d, nullptr, nullptr, 0, nullptr),
                  CUBLAS_STATUS_SUCCESS);
    const auto want = reference(true, false, s.m, s.n, s.k, -1, A, B, 0.25, &C, &bias, true, s.dt);
    const QString bad = mismatch(d.read(), s.dt, s.m, s.n, s.ldd, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    QVERIFY2(c.read() == C.encode(), "the matmul wrote C");
  }

  void lt_heuristic_workspace() {
    LtShape s;
    s.lda = s.m;
    s.ldb = s.k;
    s.ldc = s.ldd = s.m;
    for (auto [max_ws, want] : {std::pair{size_t(4) << 20, size_t(1) << 20},
                                std::pair{size_t(64) << 10, size_t(64) << 10},
                                std::pair{size_t(0), size_t(0)}}) {
      Lt lt;
      EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, max_ws),
                    CUBLAS_STATUS_SUCCESS);
      cublasLtMatmulHeuristicResult_t heur[2]{};
      int found = -1;
      EXPECT_STATUS(cublasLtMatmulAlgoGetHeuristic(lt_, lt.op, lt.a, lt.b, lt.c, lt.d, lt.pref, 2,
                                                   heur, &found),
                    CUBLAS_STATUS_SUCCESS);
      QCOMPARE(found, 1);
      QCOMPARE(heur[0].workspaceSize, want);
      QCOMPARE(status_name(heur[0].state), status_name(CUBLAS_STATUS_SUCCESS));
      EXPECT_STATUS(cublasLtMatmulAlgoGetHeuristic(lt_, lt.op, lt.a, lt.b, lt.c, lt.d, lt.pref, 0,
                                                   heur, &found),
                    CUBLAS_STATUS_INVALID_VALUE);
      QCOMPARE(found, 0);
    }
    // The preference's default maximum is 0.
    Lt lt;
    EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, 0), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t fresh = nullptr;
    EXPECT_STATUS(cublasLtMatmulPreferenceCreate(&fresh), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    heur.workspaceSize = 99;
    int found = 0;
    EXPECT_STATUS(cublasLtMatmulAlgoGetHeuristic(lt_, lt.op, lt.a, lt.b, lt.c, lt.d, fresh, 1,
                                                 &heur, &found),
                  CUBLAS_STATUS_SUCCESS);
    QCOMPARE(heur.workspaceSize, size_t(0));
    EXPECT_STATUS(cublasLtMatmulPreferenceDestroy(fresh), CUBLAS_STATUS_SUCCESS);
  }

  void lt_matmul_checks_its_workspace() {
    LtShape s;
    s.lda = s.m;
    s.ldb = s.k;
    s.ldc = s.ldd = s.m;
    Dev a(size_t(s.m * s.k) * 4), b(size_t(s.k * s.n) * 4), d(size_t(s.m * s.n) * 4);
    a.fill(0);
    b.fill(0);
    Lt lt;
    EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, size_t(256) << 10),
                  CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_SUCCESS);
    QCOMPARE(heur.workspaceSize, size_t(256) << 10);
    Dev ws(heur.workspaceSize + 4096);
    std::vector<unsigned char> host(heur.workspaceSize);
    const float one = 1, zero = 0;
    const auto matmul = [&](void* w, size_t bytes, void* out) {
      return cublasLtMatmul(lt_, lt.op, &one, a.ptr, lt.a, b.ptr, lt.b, &zero, out, lt.d, out,
                            lt.d, &heur.algo, w, bytes, nullptr);
    };
    EXPECT_STATUS(matmul(ws.ptr, heur.workspaceSize - 1, d.ptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(matmul(nullptr, 0, d.ptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(matmul(nullptr, heur.workspaceSize, d.ptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_STATUS(matmul(host.data(), host.size(), d.ptr), CUBLAS_STATUS_EXECUTION_FAILED);
    // D inside the workspace: each destroys the other.
    EXPECT_STATUS(matmul(ws.ptr, heur.workspaceSize, ws.at(256)), CUBLAS_STATUS_EXECUTION_FAILED);
    QVERIFY2(d.all(0xff), "a refused matmul wrote D");
    // More than needed is fine, and all of it is overwritten.
    ws.fill(0);
    EXPECT_STATUS(matmul(ws.ptr, ws.bytes, d.ptr), CUBLAS_STATUS_SUCCESS);
    QVERIFY2(ws.all(0xff), "the workspace was not overwritten");
    QVERIFY2(!d.all(0xff), "the matmul did not write D");
  }

  void lt_refuses_what_cublaslt_refuses() {
    LtShape s;
    s.lda = s.m;
    s.ldb = s.k;
    s.ldc = s.ldd = s.m;
    Dev bias16(64);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = -1;
    {  // A bias not of D's type, either way: refused (cuBLASLt 13.1 on an
       // H200 answered INVALID_VALUE for linear_cuda.cpp's former f32 bias of
       // a bf16 D, 2026-11-28).
      LtShape lp = s;
      lp.ab = lp.dt = CUDA_R_16BF;
      for (auto [shape, type] : {std::pair{s, CUDA_R_16F}, std::pair{lp, CUDA_R_32F}}) {
        Lt lt;
        EXPECT_STATUS(make_lt(lt, shape, CUBLASLT_EPILOGUE_BIAS, bias16.ptr, type, 0),
                      CUBLAS_STATUS_SUCCESS);
        EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_INVALID_VALUE);
        QCOMPARE(found, 0);
      }
    }
    {  // An epilogue the double does not emulate.
      Lt lt;
      EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_GELU_BIAS, bias16.ptr, -1, 0),
                    CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {  // A bias epilogue without a bias: the heuristic answers, the matmul refuses.
      Lt lt;
      EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_BIAS, nullptr, -1, 0), CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_SUCCESS);
      Dev a(256), b(256), d(256);
      const float one = 1, zero = 0;
      EXPECT_STATUS(cublasLtMatmul(lt_, lt.op, &one, a.ptr, lt.a, b.ptr, lt.b, &zero, d.ptr, lt.d,
                                   d.ptr, lt.d, &heur.algo, nullptr, 0, nullptr),
                    CUBLAS_STATUS_INVALID_VALUE);
      QVERIFY(d.all(0xff));
    }
    {  // Shapes that do not chain, a leading dimension below the rows.
      LtShape bad = s;
      bad.ldb = s.k - 1;
      Lt lt;
      EXPECT_STATUS(make_lt(lt, bad, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, 0),
                    CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_INVALID_VALUE);
      cublasLtMatrixLayout_t wrong = nullptr;
      EXPECT_STATUS(cublasLtMatrixLayoutCreate(&wrong, CUDA_R_32F, uint64_t(s.k + 1),
                                               uint64_t(s.n), s.k + 1),
                    CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(cublasLtMatmulAlgoGetHeuristic(lt_, lt.op, lt.a, wrong, lt.c, lt.d, lt.pref, 1,
                                                   &heur, &found),
                    CUBLAS_STATUS_INVALID_VALUE);
      EXPECT_STATUS(cublasLtMatrixLayoutDestroy(wrong), CUBLAS_STATUS_SUCCESS);
    }
    {  // C and D of different types; attribute sizes not their own.
      Lt lt;
      EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, 0),
                    CUBLAS_STATUS_SUCCESS);
      cublasLtMatrixLayout_t c16 = nullptr;
      EXPECT_STATUS(cublasLtMatrixLayoutCreate(&c16, CUDA_R_16F, uint64_t(s.m), uint64_t(s.n), s.m),
                    CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(cublasLtMatmulAlgoGetHeuristic(lt_, lt.op, lt.a, lt.b, c16, lt.d, lt.pref, 1,
                                                   &heur, &found),
                    CUBLAS_STATUS_NOT_SUPPORTED);
      EXPECT_STATUS(cublasLtMatrixLayoutDestroy(c16), CUBLAS_STATUS_SUCCESS);
      const int64_t wide = CUBLAS_OP_T;
      EXPECT_STATUS(
          cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
          CUBLAS_STATUS_INVALID_VALUE);
      const uint32_t narrow = 1;
      EXPECT_STATUS(cublasLtMatmulPreferenceSetAttribute(
                        lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &narrow, sizeof narrow),
                    CUBLAS_STATUS_INVALID_VALUE);
      EXPECT_STATUS(heuristic(nullptr, lt, &heur, &found), CUBLAS_STATUS_NOT_INITIALIZED);
    }
  }

  // The heuristic's algorithm assumes the alignment the preference promised
  // (256 bytes unless told): a less aligned pointer at the matmul is refused.
  void lt_matmul_holds_to_the_alignment() {
    LtShape s;
    s.lda = s.m;
    s.ldb = s.k;
    s.ldc = s.ldd = s.m;
    std::mt19937 rng(3);
    const HostMatrix A = random_matrix(rng, s.ab, s.m, s.k, s.lda);
    const HostMatrix B = random_matrix(rng, s.ab, s.k, s.n, s.ldb);
    const std::vector<double> bias = random_bias(rng, s.m);
    Dev a(A.nbytes() + 128), b = upload(B), d(size_t(s.m * s.n) * 4), bias_dev(256);
    (void)cudaMemcpyAsync(a.at(128), A.encode().data(), A.nbytes(), cudaMemcpyHostToDevice);
    HostMatrix bias_m{s.dt, s.m, 1, s.m, bias};
    (void)cudaMemcpyAsync(bias_dev.at(4), bias_m.encode().data(), bias_m.nbytes(),
                          cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    for (uint32_t align_a : {256u, 128u, 2u}) {
      Lt lt;
      EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_BIAS, bias_dev.at(4), -1, 0),
                    CUBLAS_STATUS_SUCCESS);
      if (align_a != 256)
        EXPECT_STATUS(cublasLtMatmulPreferenceSetAttribute(
                          lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, 4),
                      CUBLAS_STATUS_SUCCESS);
      cublasLtMatmulHeuristicResult_t heur{};
      int found = 0;
      if (align_a < 4) {  // below an f32's own alignment: no algorithm
        EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_NOT_SUPPORTED);
        QCOMPARE(found, 0);
        continue;
      }
      EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_SUCCESS);
      d.fill(0xff);
      const cublasStatus_t st =
          cublasLtMatmul(lt_, lt.op, &one, a.at(128), lt.a, b.ptr, lt.b, &zero, d.ptr, lt.d, d.ptr,
                         lt.d, &heur.algo, nullptr, 0, nullptr);
      if (align_a == 256) {
        EXPECT_STATUS(st, CUBLAS_STATUS_INVALID_VALUE);
        QVERIFY(d.all(0xff));
        continue;
      }
      // The bias 4 bytes past an allocation: its own alignment was judged.
      EXPECT_STATUS(st, CUBLAS_STATUS_SUCCESS);
      const auto want =
          reference(false, false, s.m, s.n, s.k, 1, A, B, 0, nullptr, &bias, false, s.dt);
      const QString bad = mismatch(d.read(), s.dt, s.m, s.n, s.ldd, want);
      QVERIFY2(bad.isEmpty(), qPrintable(bad));
      // The same algorithm with a bias less aligned than the heuristic saw.
      const void* shifted = bias_dev.at(2);
      EXPECT_STATUS(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &shifted, sizeof shifted),
                    CUBLAS_STATUS_SUCCESS);
      EXPECT_STATUS(cublasLtMatmul(lt_, lt.op, &one, a.at(128), lt.a, b.ptr, lt.b, &zero, d.ptr,
                                   lt.d, d.ptr, lt.d, &heur.algo, nullptr, 0, nullptr),
                    CUBLAS_STATUS_INVALID_VALUE);
    }
  }

  // Captured, the matmul runs at each replay with the alpha of the call and
  // overwrites its workspace then.
  void lt_matmul_in_a_graph() {
    LtShape s;
    s.lda = s.m;
    s.ldb = s.k;
    s.ldc = s.ldd = s.m;
    std::mt19937 rng(8);
    const HostMatrix A = random_matrix(rng, s.ab, s.m, s.k, s.lda);
    const HostMatrix B = random_matrix(rng, s.ab, s.k, s.n, s.ldb);
    const std::vector<double> bias = random_bias(rng, s.m);
    Dev a = upload(A), b = upload(B), bias_dev = upload_vector(bias, s.dt);
    Dev d(size_t(s.m * s.n) * 4);
    Lt lt;
    EXPECT_STATUS(make_lt(lt, s, CUBLASLT_EPILOGUE_RELU_BIAS, bias_dev.ptr, -1, size_t(1) << 16),
                  CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    EXPECT_STATUS(heuristic(lt_, lt, &heur, &found), CUBLAS_STATUS_SUCCESS);
    Dev ws(heur.workspaceSize);
    ws.fill(0);
    cudaStream_t st = nullptr;
    QCOMPARE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    float alpha = 0.5f;
    const float zero = 0;
    QCOMPARE(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_STATUS(cublasLtMatmul(lt_, lt.op, &alpha, a.ptr, lt.a, b.ptr, lt.b, &zero, d.ptr, lt.d,
                                 d.ptr, lt.d, &heur.algo, ws.ptr, heur.workspaceSize, st),
                  CUBLAS_STATUS_SUCCESS);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(st, &g), cudaSuccess);
    QVERIFY2(d.all(0xff) && ws.all(0), "the captured matmul ran");
    alpha = 4;
    cudaGraphExec_t x = nullptr;
    QCOMPARE(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, st), cudaSuccess);
    const auto want =
        reference(false, false, s.m, s.n, s.k, 0.5, A, B, 0, nullptr, &bias, true, s.dt);
    const QString bad = mismatch(d.read(), s.dt, s.m, s.n, s.ldd, want);
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    QVERIFY2(ws.all(0xff), "the replay did not overwrite the workspace");
    QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(st), cudaSuccess);
  }
};

QTEST_APPLESS_MAIN(TestEmulatedCublas)
#include "test_emulated_cublas.moc"
