// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How this engine process was started, read from the environment the
// launchers set, and the mpirun command line that starts N of them.
//
//   mpirun -np N trainbench-engine run ...   Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}
//                                            (MPICH/PMI: PMI_RANK, PMI_SIZE)
//   torchrun / a SLURM script                RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//                                            MASTER_PORT (SLURM_PROCID, SLURM_NTASKS,
//                                            SLURM_LOCALID stand in for the first three)
//
// A process no launcher started is rank 0 of 1.
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace tb {

struct LaunchInfo {
  enum class Launcher { None, Mpi, Env };
  Launcher launcher = Launcher::None;
  int rank = 0, world_size = 1, local_rank = 0;
  int local_size = 1;  // this launch's processes on this machine
  std::string master_addr;  // Env launches: where rank 0 listens (NCCL id rendezvous)
  // MASTER_PORT; MASTER_PORT + 1 under torchrun (TORCHELASTIC_USE_AGENT_STORE=True:
  // its agent's store holds MASTER_PORT); TRAINBENCH_RENDEZVOUS_PORT overrides both.
  int master_port = 0;

  bool is_root() const { return rank == 0; }
  // "mpirun, rank 1 of 4 (local 1)", "single process"
  std::string describe() const;
};

// Reads the launcher's variables. Throws tb::Error naming the variable when
// one is malformed (WORLD_SIZE=abc, RANK >= WORLD_SIZE).
LaunchInfo launch_from_environment();

// This process's rank for the callers that only need to know whether they
// are rank 0 (the store and the terminal belong to rank 0); 0 when the
// variables are missing or malformed (the trainer reports those).
int launch_rank();

// Why `parallel: ddp` cannot run on a device of this kind in this build
// (no MPI, no NCCL), or "" when it can.
std::string ddp_unavailable_reason(DeviceKind kind);
// The transport ddp uses on that kind: "mpi" or "nccl".
std::string ddp_transport(DeviceKind kind);

// The mpirun on PATH (or at $TRAINBENCH_MPIRUN), or "" with *why saying so.
std::string find_mpirun(std::string* why);

// How to start `processes` copies of `program args...` through mpirun:
// argv, and the variables to add to the environment: Open MPI refuses to run
// as root without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and more processes than
// cores need OMPI_MCA_rmaps_base_oversubscribe (the variables of
// --allow-run-as-root and --oversubscribe, which other MPIs ignore).
// Throws tb::Error when mpirun is missing.
struct MpirunCommand {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
};
MpirunCommand mpirun_command(int processes, const std::string& program,
                             const std::vector<std::string>& args);

}  // namespace tb
