// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The one piece of wiring a RANK/WORLD_SIZE launch (torchrun, a SLURM
// script) needs before NCCL can connect its ranks: rank 0's unique id handed
// to every other rank. Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other
// rank connects (retrying while rank 0 starts), says who it is, and receives
// the bytes. Only this handshake goes over the socket; NCCL moves the data.
#include <cstddef>
#include <string>

namespace tb {

// On rank 0 sends `data` to every other rank; on the others fills it.
// Throws tb::Error naming the address when it cannot listen, connect, or
// finish within timeout_s.
void tcp_rendezvous_broadcast(const std::string& address, int port, int rank, int size, void* data,
                              size_t bytes, double timeout_s = 120.0);

}  // namespace tb
