// SPDX-License-Identifier: GPL-3.0-or-later
// Whole-step capture (trick 24, cuda_graphs): record a training step as a CUDA
// graph once, then replay it with one launch instead of hundreds.
//
// Capture runs on a dedicated stream. For its duration m.stream IS that
// stream, so every op (own kernels, cuBLAS, cuDNN: their handles are pointed
// at it) enqueues into the capture without knowing, and the caching allocator
// tags the blocks allocated meanwhile with the capture stream. The allocator
// keeps free lists per stream, so those blocks, once freed on the host, are
// handed out again only to later captures and never to eager work on the
// compute stream: they are the graphs' private pool, and a replay never finds
// its intermediates overwritten by eager ops (the evaluation, a warm-up step).
// Blocks allocated before the capture (parameters, layer buffers, stager slots)
// are used in place; the caller must keep them alive and recapture after it
// reallocates them (drop_all). Until drop_all, empty_cache leaves the
// capture stream's free blocks alone (CachingAllocator::keep_stream_pool): a
// graph still addresses them.
//
// Backend state a captured op reads in place is part of the contract too: the
// optimizer's descriptor arrays (one set per backend: an eager optimizer_step
// over other parameters rewrites them) and its constants (read from
// opt_consts_dev, see set_optimizer_constants).
//
// Capture mode is thread-local: an unsafe call from the capturing thread (a
// synchronous copy, a host read) fails the capture
// instead of silently running, while other threads (the data loaders, whose
// cudaHostAlloc for pinned batches is such a call) are not affected. Global
// mode would fail the capture on their allocations too. The caching allocator
// may still grow inside the capture: it is told (set_capturing) and runs its
// cudaMalloc in relaxed mode, and defers empty_cache, whose cudaFree would
// fail the capture (caching_allocator.h). Replays launch on the
// compute stream, in order with eager work.
//
// cuBLAS: cublasSetStream resets the handle's workspace to cuBLAS's own pool,
// which would then allocate inside the capture; bind_cublas() sets ours again
// after every stream change.
//
// Ran on an H200 (2026-11-26, b0014f2: training bit-identical to eager);
// the capability-object split (f2ecf67) and the cache emptied before a
// capture are not run on a GPU yet.
#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

namespace {

// cuBLAS on stream s with our workspace (when we have one): cublasSetStream
// alone would put cuBLAS back on its default workspace pool.
cublasStatus_t bind_cublas(CudaBackend::Impl& m, cudaStream_t s) {
  cublasStatus_t st = cublasSetStream(m.cublas, s);
  if (st == CUBLAS_STATUS_SUCCESS && m.cublas_workspace.defined())
    st = cublasSetWorkspace(m.cublas, m.cublas_workspace.data(), m.cublas_workspace.nbytes());
  return st;
}

// Points the compute-stream users (m.stream, the allocator, cuBLAS, cuDNN) at s.
void point_at(CudaBackend::Impl& m, cudaStream_t s) {
  m.stream = s;
  m.allocator->set_current_stream(s);
  TB_CUBLAS_CHECK(bind_cublas(m, s));
  TB_CUDNN_CHECK(cudnnSetStream(m.cudnn, s));
}

// Back to the compute stream after a capture ended or failed; no throw.
void restore_eager(CudaBackend::Impl& m) noexcept {
  if (!m.capturing) return;
  m.capturing = false;
  m.allocator->set_capturing(false);
  m.stream = m.eager_stream;
  m.allocator->set_current_stream(m.stream);
  (void)bind_cublas(m, m.stream);
  (void)cudnnSetStream(m.cudnn, m.stream);
}

}  // namespace

namespace cuda {
void release_graphs(CudaBackend::Impl& m) {
  if (m.capturing) {
    cudaGraph_t g = nullptr;
    // Ends and discards the half-recorded step.
    (void)cudaStreamEndCapture(m.capture_stream, &g);
    if (g) (void)cudaGraphDestroy(g);
    restore_eager(m);
  }
  if (m.stream) (void)cudaStreamSynchronize(m.stream);
  for (cudaGraphExec_t e : m.graph_execs)
    if (e) (void)cudaGraphExecDestroy(e);
  for (cudaGraph_t g : m.graphs)
    if (g) (void)cudaGraphDestroy(g);
  m.graph_execs.clear();
  m.graphs.clear();
  if (m.allocator) m.allocator->keep_stream_pool(nullptr);
  if (m.capture_stream) (void)cudaStreamDestroy(m.capture_stream), m.capture_stream = nullptr;
}
}  // namespace cuda

void CudaBackend::Graphs::begin_capture() {
  Impl& m = be_.impl();
  TB_CHECK(!m.capturing, "begin_capture: a capture is already in progress");
  m.activate();
  if (!m.capture_stream)
    TB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.capture_stream, cudaStreamNonBlocking));
  // Made before the capture: cudaMalloc inside it is legal, but this buffer
  // must be the compute stream's (written there by set_optimizer_constants).
  if (!m.opt_consts_dev.defined())
    m.opt_consts_dev =
        Tensor::empty({int64_t(cuda::kOptConstsBytes)}, DType::U8, be_.device());
  // The capture starts with nothing pending: what eager work enqueued runs
  // first (capture is rare; its cost is one wait).
  TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  // Graph intermediates freed on the host stay in the capture stream's pool;
  // empty_cache must not give them back while a graph addresses them.
  m.allocator->keep_stream_pool(m.capture_stream);
  // The capture's temporaries (cuDNN workspaces among them) come from the
  // capture stream's own pool, and inside the capture nothing cached can be
  // given back: the eager pools' free segments go back to the driver now, or
  // a run that fits eagerly could run out of memory at its first capture.
  m.allocator->empty_cache();
  m.eager_stream = m.stream;
  m.capturing = true;
  try {
    point_at(m, m.capture_stream);
    m.allocator->set_capturing(true);
    TB_CUDA_CHECK(cudaStreamBeginCapture(m.capture_stream, cudaStreamCaptureModeThreadLocal));
  } catch (...) {
    restore_eager(m);
    throw;
  }
}

int CudaBackend::Graphs::end_capture() {
  Impl& m = be_.impl();
  TB_CHECK(m.capturing, "end_capture: no capture in progress (begin_capture first)");
  cudaGraph_t graph = nullptr;
  const cudaError_t st = cudaStreamEndCapture(m.capture_stream, &graph);
  restore_eager(m);  // whatever happened, eager ops go to the compute stream again
  if (st != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // clear the (non-sticky) capture error
    TB_FAIL("end_capture: the captured step is invalid (", cudaGetErrorString(st),
            "); a host read, a synchronising call or an op on another stream "
            "ran inside it");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // reported here, not by the next launch check
    TB_FAIL("end_capture: cudaGraphInstantiate failed: ", cudaGetErrorString(inst));
  }
  m.graphs.push_back(graph);
  m.graph_execs.push_back(exec);
  return int(m.graph_execs.size()) - 1;
}

void CudaBackend::Graphs::launch(int id) {
  Impl& m = be_.impl();
  TB_CHECK(!m.capturing, "launch: called while capturing");
  TB_CHECK(id >= 0 && size_t(id) < m.graph_execs.size(), "launch: no graph ", id, " (",
           m.graph_execs.size(), " captured)");
  m.activate();
  TB_CUDA_CHECK(cudaGraphLaunch(m.graph_execs[size_t(id)], m.stream));
}

void CudaBackend::Graphs::drop_all() {
  Impl& m = be_.impl();
  TB_CHECK(!m.capturing, "drop_all: called while capturing (end_capture first)");
  m.activate();
  TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // no replay may still be running
  for (cudaGraphExec_t e : m.graph_execs) TB_CUDA_CHECK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : m.graphs) TB_CUDA_CHECK(cudaGraphDestroy(g));
  m.graph_execs.clear();
  m.graphs.clear();
  m.allocator->keep_stream_pool(nullptr);  // no graph addresses the pool any more
}

}  // namespace tb
