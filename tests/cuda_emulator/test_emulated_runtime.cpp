// SPDX-License-Identifier: GPL-3.0-or-later
// The emulator's CUDA runtime (runtime.h, emulated_device.cpp), before the
// emulated backend trusts it: devices from the environment, device memory
// (filled, bounded, counted), copies that check their kind, events on the
// host clock, and capture: work recorded and replayed with the arguments it
// was launched with, and the calls CUDA forbids during a capture failing it.
#include <QtTest>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/cuda_emulator/emulator.h"

namespace {

// A kernel as rewrite_launches.py passes one: out[thread] += value.
void add_kernel(int* out, int value) { out[tb_emu::g_thread->thread_idx.x] += value; }

void launch_add(cudaStream_t s, int* out, int value, unsigned threads) {
  tb_emu::launch(tb_emu::Config(dim3(1), dim3(threads), 0, s),
                 [](auto&&... a) { add_kernel(a...); }, out, value);
}

}  // namespace

class TestEmulatedRuntime : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    // Before the first runtime call, which reads them.
    setenv("TRAINBENCH_EMULATED_GPUS", "2", 1);
    setenv("TRAINBENCH_EMULATED_GPU_MEMORY", "67108864", 1);  // 64 MiB
    setenv("TRAINBENCH_EMULATED_SMS", "7", 1);
  }

  void devices_come_from_the_environment() {
    int n = 0;
    QCOMPARE(cudaGetDeviceCount(&n), cudaSuccess);
    QCOMPARE(n, 2);
    cudaDeviceProp p{};
    QCOMPARE(cudaGetDeviceProperties(&p, 1), cudaSuccess);
    QCOMPARE(p.multiProcessorCount, 7);
    QCOMPARE(p.totalGlobalMem, size_t(64) << 20);
    QVERIFY(QByteArray(p.name).contains("emulated"));
    QCOMPARE(cudaSetDevice(2), cudaErrorInvalidDevice);
    QCOMPARE(cudaGetLastError(), cudaErrorInvalidDevice);
    QCOMPARE(cudaGetLastError(), cudaSuccess);  // read once, then clear
    QCOMPARE(cudaSetDevice(0), cudaSuccess);
  }

  void device_memory_is_filled_bounded_and_counted() {
    size_t free0 = 0, total = 0;
    QCOMPARE(cudaMemGetInfo(&free0, &total), cudaSuccess);
    void* p = nullptr;
    QCOMPARE(cudaMalloc(&p, 1000), cudaSuccess);
    const auto* bytes = static_cast<const unsigned char*>(p);
    for (int i = 0; i < 1000; ++i) QCOMPARE(int(bytes[i]), 0xff);  // NaN in every float type
    float f;
    std::memcpy(&f, p, 4);
    QVERIFY(std::isnan(f));
    size_t free1 = 0;
    QCOMPARE(cudaMemGetInfo(&free1, &total), cudaSuccess);
    QCOMPARE(free0 - free1, size_t(1024));  // counted in 512-byte units
    QVERIFY(tb_emu::is_device_memory(p, 1000));
    QVERIFY(!tb_emu::is_device_memory(p, 1001));  // bounded by what was asked
    int on_stack = 0;
    QVERIFY(!tb_emu::is_device_memory(&on_stack, 4));
    void* big = nullptr;
    QCOMPARE(cudaMalloc(&big, size_t(64) << 20), cudaErrorMemoryAllocation);
    QCOMPARE(big, nullptr);
    QCOMPARE(cudaGetLastError(), cudaErrorMemoryAllocation);
    QCOMPARE(cudaFree(&on_stack), cudaErrorInvalidValue);
    QCOMPARE(cudaFree(p), cudaSuccess);
    QVERIFY(!tb_emu::is_device_memory(p, 4));
    QCOMPARE(cudaMemGetInfo(&free1, &total), cudaSuccess);
    QCOMPARE(free1, free0);
    (void)cudaGetLastError();
  }

  void copies_check_their_kind() {
    void* d = nullptr;
    QCOMPARE(cudaMalloc(&d, 64), cudaSuccess);
    std::vector<char> h(64, 7), back(64, 0);
    QCOMPARE(cudaMemcpyAsync(d, h.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
    QCOMPARE(cudaMemcpyAsync(back.data(), d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    QCOMPARE(back, h);
    // Host memory where the kind says device, and a copy past the allocation.
    QCOMPARE(cudaMemcpyAsync(back.data(), h.data(), 64, cudaMemcpyHostToDevice),
             cudaErrorInvalidValue);
    QCOMPARE(cudaMemcpyAsync(h.data(), h.data(), 64, cudaMemcpyDeviceToHost),
             cudaErrorInvalidValue);
    QCOMPARE(cudaMemcpyAsync(d, h.data(), 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    QCOMPARE(cudaMemcpyAsync(d, h.data(), 65, cudaMemcpyDefault), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    QCOMPARE(cudaFree(d), cudaSuccess);
  }

  void events_read_the_host_clock() {
    cudaEvent_t a, b, untimed;
    QCOMPARE(cudaEventCreate(&a), cudaSuccess);
    QCOMPARE(cudaEventCreate(&b), cudaSuccess);
    QCOMPARE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    float ms = -1;
    QCOMPARE(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);  // not recorded
    QCOMPARE(cudaEventRecord(a), cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    QCOMPARE(cudaEventRecord(b), cudaSuccess);
    QCOMPARE(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    QVERIFY2(ms >= 19.5f && ms < 2000.0f, qPrintable(QString::number(ms)));
    QCOMPARE(cudaEventRecord(untimed), cudaSuccess);
    QCOMPARE(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    for (cudaEvent_t e : {a, b, untimed}) QCOMPARE(cudaEventDestroy(e), cudaSuccess);
    QCOMPARE(cudaEventDestroy(a), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
  }

  // A captured launch keeps its arguments; a captured copy reads its source
  // at each replay, as on a GPU.
  void capture_records_and_replays() {
    cudaStream_t s;
    QCOMPARE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    int* out = nullptr;
    QCOMPARE(cudaMalloc(reinterpret_cast<void**>(&out), 4 * sizeof(int)), cudaSuccess);
    const int zeros[4] = {0, 0, 0, 0};
    QCOMPARE(cudaMemcpyAsync(out, zeros, sizeof zeros, cudaMemcpyHostToDevice, s), cudaSuccess);
    int* src = nullptr;
    QCOMPARE(cudaMalloc(reinterpret_cast<void**>(&src), sizeof(int)), cudaSuccess);
    int host = 0;

    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaStreamCaptureStatus status{};
    QCOMPARE(cudaStreamIsCapturing(s, &status), cudaSuccess);
    QCOMPARE(status, cudaStreamCaptureStatusActive);
    int value = 5;
    launch_add(s, out, value, 4);
    value = 100;  // after the launch: the graph keeps 5
    QCOMPARE(cudaMemcpyAsync(&host, src, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
    int now[4];
    std::memcpy(now, out, sizeof now);
    QCOMPARE(now[0], 0);  // recorded, not run

    cudaGraphExec_t x = nullptr;
    QCOMPARE(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    const int first = 11, second = 22;
    QCOMPARE(cudaMemcpyAsync(src, &first, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
    QCOMPARE(host, 11);
    QCOMPARE(cudaMemcpyAsync(src, &second, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
    QCOMPARE(host, 22);
    std::memcpy(now, out, sizeof now);
    for (int v : now) QCOMPARE(v, 10);  // two replays of += 5
    QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    QCOMPARE(cudaFree(out), cudaSuccess);
    QCOMPARE(cudaFree(src), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
  }

  // What CUDA forbids during a capture fails it: cudaMalloc from the
  // capturing thread outside relaxed mode, a sync of the capturing stream,
  // the legacy stream beside a blocking stream's capture. Relaxed mode
  // (cudaThreadExchangeStreamCaptureMode, as the caching allocator uses)
  // allows the allocation.
  void capture_refuses_what_cuda_refuses() {
    cudaStream_t s;
    QCOMPARE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t g = nullptr;
    void* p = nullptr;

    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    QCOMPARE(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    QCOMPARE(cudaMalloc(&p, 256), cudaSuccess);
    QCOMPARE(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);  // back
    QCOMPARE(mode, cudaStreamCaptureModeRelaxed);
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
    QVERIFY(g);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    QCOMPARE(cudaFree(p), cudaSuccess);

    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    QCOMPARE(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    QCOMPARE(g, nullptr);

    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    QCOMPARE(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);

    // Another thread's allocation does not touch a thread-local capture.
    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaError_t other = cudaErrorInvalidValue;
    std::thread([&] {
      void* q = nullptr;
      other = cudaMalloc(&q, 256);
      if (q) (void)cudaFree(q);
    }).join();
    QCOMPARE(other, cudaSuccess);
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);

    cudaStream_t blocking;
    QCOMPARE(cudaStreamCreate(&blocking), cudaSuccess);
    QCOMPARE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    int* d = nullptr;
    mode = cudaStreamCaptureModeRelaxed;
    QCOMPARE(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    QCOMPARE(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(int)), cudaSuccess);
    QCOMPARE(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    launch_add(nullptr, d, 1, 4);  // the legacy stream
    QCOMPARE(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
    QCOMPARE(cudaStreamEndCapture(blocking, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    QCOMPARE(cudaFree(d), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(blocking), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
  }

  // A stream that waits on an event recorded in a capture joins it (CUDA's
  // fork): its work is a node of the same graph.
  void waiting_on_a_captured_event_joins_the_capture() {
    cudaStream_t s, t;
    cudaEvent_t e;
    QCOMPARE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    QCOMPARE(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    QCOMPARE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    int* d = nullptr;
    QCOMPARE(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)), cudaSuccess);
    const int zero = 0;
    QCOMPARE(cudaMemcpyAsync(d, &zero, sizeof zero, cudaMemcpyHostToDevice, s), cudaSuccess);
    QCOMPARE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    QCOMPARE(cudaEventRecord(e, s), cudaSuccess);
    QCOMPARE(cudaStreamWaitEvent(t, e, 0), cudaSuccess);
    launch_add(t, d, 3, 1);
    cudaStreamCaptureStatus status{};
    QCOMPARE(cudaStreamIsCapturing(t, &status), cudaSuccess);
    QCOMPARE(status, cudaStreamCaptureStatusActive);
    cudaGraph_t g = nullptr;
    QCOMPARE(cudaStreamEndCapture(s, &g), cudaSuccess);
    QCOMPARE(*d, 0);
    cudaGraphExec_t x = nullptr;
    QCOMPARE(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    QCOMPARE(cudaGraphLaunch(x, s), cudaSuccess);
    QCOMPARE(*d, 3);
    QCOMPARE(cudaStreamIsCapturing(t, &status), cudaSuccess);
    QCOMPARE(status, cudaStreamCaptureStatusNone);
    QCOMPARE(cudaGraphExecDestroy(x), cudaSuccess);
    QCOMPARE(cudaGraphDestroy(g), cudaSuccess);
    QCOMPARE(cudaFree(d), cudaSuccess);
    QCOMPARE(cudaEventDestroy(e), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(t), cudaSuccess);
    QCOMPARE(cudaStreamDestroy(s), cudaSuccess);
  }
};

QTEST_GUILESS_MAIN(TestEmulatedRuntime)
#include "test_emulated_runtime.moc"
