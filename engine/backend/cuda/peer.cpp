// SPDX-License-Identifier: GPL-3.0-or-later
// Copies between the backends of two devices in one process (parallel: dp):
// the runtime's cudaMemcpyPeerAsync, direct over NVLink/PCIe when the devices
// may address each other (cudaDeviceEnablePeerAccess), else staged by the
// driver. Ordering across the two streams is by events:
//   source stream:  ... writes of src ... [record A]          [wait B] later writes
//   this stream:    ... [wait A] memcpy peer -> dst [record B] later reads of dst
// so the copy sees every write queued to src, this backend's later ops see dst,
// and the source's later ops cannot overwrite src before the copy has read it.
// NOT yet run on a GPU (written on a machine without one).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

namespace cuda {

void release_peer(CudaBackend::Impl& m) {
  if (m.peer_event) (void)cudaEventDestroy(m.peer_event), m.peer_event = nullptr;
}

namespace {

// The event this backend records for a peer to wait on; made on its device.
cudaEvent_t peer_event(CudaBackend::Impl& m) {
  if (!m.peer_event) TB_CUDA_CHECK(cudaEventCreateWithFlags(&m.peer_event, cudaEventDisableTiming));
  return m.peer_event;
}

// Lets this (current) device address `peer`'s memory when the hardware can;
// otherwise cudaMemcpyPeerAsync still works, through the host.
void enable_peer_access(CudaBackend::Impl& m, int peer) {
  if (std::find(m.peers_tried.begin(), m.peers_tried.end(), peer) != m.peers_tried.end()) return;
  m.peers_tried.push_back(peer);
  int can = 0;
  TB_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, m.device, peer));
  if (!can) return;
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  TB_CUDA_CHECK(e);
}

// Puts the calling thread's current device back when it goes: a peer copy
// leaves the caller where it was (the training thread stays on the first
// device between the dp steps' copies).
class DeviceRestorer {
 public:
  DeviceRestorer() { TB_CUDA_CHECK(cudaGetDevice(&device_)); }
  ~DeviceRestorer() { (void)cudaSetDevice(device_); }
  DeviceRestorer(const DeviceRestorer&) = delete;
  DeviceRestorer& operator=(const DeviceRestorer&) = delete;

 private:
  int device_ = 0;
};

}  // namespace
}  // namespace cuda

void CudaBackend::copy_from_peer(Backend& src_backend, const Tensor& src, Tensor& dst) {
  const char* op = "copy_from_peer";
  auto* peer = dynamic_cast<CudaBackend*>(&src_backend);
  TB_CHECK(peer, op, ": the source backend ", src_backend.name(), " is not a cuda backend");
  cuda::check_on(*peer, src, op, "src");
  cuda::check_on(*this, dst, op, "dst");
  TB_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype() &&
               (src.rank() != 4 || src.layout() == dst.layout()),
           op, ": ", src.describe(), " -> ", dst.describe(), " differ in shape, dtype or layout");
  if (peer == this) return copy(src, dst);
  if (src.numel() == 0) return;
  Impl& m = *impl_;
  Impl& p = peer->impl();
  const cuda::DeviceRestorer restore;
  p.activate();
  TB_CUDA_CHECK(cudaEventRecord(cuda::peer_event(p), p.stream));  // src written
  m.activate();
  cuda::enable_peer_access(m, p.device);
  TB_CUDA_CHECK(cudaStreamWaitEvent(m.stream, p.peer_event, 0));
  TB_CUDA_CHECK(
      cudaMemcpyPeerAsync(dst.data(), m.device, src.data(), p.device, src.nbytes(), m.stream));
  TB_CUDA_CHECK(cudaEventRecord(cuda::peer_event(m), m.stream));  // src read
  TB_CUDA_CHECK(cudaStreamWaitEvent(p.stream, m.peer_event, 0));
}

}  // namespace tb
