// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "engine/core/error.h"

namespace tb {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, const char* value, int lo) {
  char* end = nullptr;
  const long x = std::strtol(value, &end, 10);
  TB_CHECK(end && *end == '\0' && x >= lo && x < (1L << 30), "launch: environment variable ",
           name, "='", value, "' is not an integer >= ", lo);
  return static_cast<int>(x);
}

// The first of the variables that is set, or null; *name receives it.
const char* first_env(std::initializer_list<const char*> names, const char** name) {
  for (const char* n : names)
    if (const char* v = env(n)) {
      *name = n;
      return v;
    }
  return nullptr;
}

}  // namespace

std::string LaunchInfo::describe() const {
  if (launcher == Launcher::None) return "single process";
  return std::string(launcher == Launcher::Mpi ? "mpirun" : "RANK/WORLD_SIZE") + ", rank " +
         std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + ")";
}

LaunchInfo launch_from_environment() {
  LaunchInfo l;
  const char *rank_name = nullptr, *size_name = nullptr, *local_name = nullptr;
  const char* rank = first_env({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}, &rank_name);
  const char* size = first_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, &size_name);
  const char* local = first_env({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, &local_name);
  const char* local_size_name = nullptr;
  const char* local_size =
      first_env({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, &local_size_name);
  if (rank && size) {
    l.launcher = LaunchInfo::Launcher::Mpi;
  } else {
    rank = first_env({"RANK", "SLURM_PROCID"}, &rank_name);
    size = first_env({"WORLD_SIZE", "SLURM_NTASKS"}, &size_name);
    local = first_env({"LOCAL_RANK", "SLURM_LOCALID"}, &local_name);
    local_size = first_env({"LOCAL_WORLD_SIZE"}, &local_size_name);  // torchrun
    // SLURM's variables alone are every job step's; they mean a data-parallel
    // launch only with a rendezvous address beside them.
    const bool slurm_only = rank_name && std::string(rank_name) == "SLURM_PROCID";
    if (!rank || !size || (slurm_only && !env("MASTER_ADDR"))) return l;
    l.launcher = LaunchInfo::Launcher::Env;
  }
  l.rank = env_int(rank_name, rank, 0);
  l.world_size = env_int(size_name, size, 1);
  l.local_rank = local ? env_int(local_name, local, 0) : 0;
  l.local_size = local_size ? env_int(local_size_name, local_size, 1) : 1;
  TB_CHECK(l.rank < l.world_size, "launch: ", rank_name, "=", l.rank, " is not below ", size_name,
           "=", l.world_size);
  if (const char* a = env("MASTER_ADDR")) l.master_addr = a;
  if (const char* p = env("MASTER_PORT")) l.master_port = env_int("MASTER_PORT", p, 1);
  // torchrun's agent serves its own store on MASTER_PORT and tells its
  // workers so: the NCCL id rendezvous takes the next port there.
  if (const char* p = env("TRAINBENCH_RENDEZVOUS_PORT"))
    l.master_port = env_int("TRAINBENCH_RENDEZVOUS_PORT", p, 1);
  else if (const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
           agent && std::string(agent) == "True" && l.master_port > 0)
    l.master_port += 1;
  TB_CHECK(l.master_port <= 65535, "launch: rendezvous port ", l.master_port, " is above 65535");
  return l;
}

int launch_rank() {
  try {
    return launch_from_environment().rank;
  } catch (const Error&) {
    return 0;
  }
}

std::string ddp_transport(DeviceKind kind) { return kind == DeviceKind::CUDA ? "nccl" : "mpi"; }

std::string ddp_unavailable_reason(DeviceKind kind) {
  if (kind == DeviceKind::CUDA) {
#ifdef TRAINBENCH_HAVE_NCCL
    return {};
#else
    return "this build has no NCCL (the CUDA transport of ddp): build with the CUDA toolkit's "
           "libnccl present";
#endif
  }
#ifdef TRAINBENCH_HAVE_MPI
  return {};
#else
  return "this build has no MPI (the CPU transport of ddp): install libopenmpi-dev "
         "(scripts/setup.sh) and rebuild";
#endif
}

std::string find_mpirun(std::string* why) {
  namespace fs = std::filesystem;
  if (const char* explicit_path = env("TRAINBENCH_MPIRUN")) {
    if (access(explicit_path, X_OK) == 0) return explicit_path;
    if (why) *why = std::string("TRAINBENCH_MPIRUN=") + explicit_path + " is not an executable";
    return {};
  }
  if (const char* path = env("PATH")) {
    std::string dirs = path;
    size_t begin = 0;
    while (begin <= dirs.size()) {
      const size_t end = std::min(dirs.find(':', begin), dirs.size());
      const fs::path candidate = fs::path(dirs.substr(begin, end - begin)) / "mpirun";
      if (end > begin && access(candidate.c_str(), X_OK) == 0) return candidate.string();
      begin = end + 1;
    }
  }
  if (why)
    *why = "mpirun was not found on PATH: install Open MPI (Debian: openmpi-bin, "
           "libopenmpi-dev; scripts/setup.sh does) or set TRAINBENCH_MPIRUN";
  return {};
}

MpirunCommand mpirun_command(int processes, const std::string& program,
                             const std::vector<std::string>& args) {
  TB_CHECK(processes >= 1, "mpirun: processes must be at least 1, got ", processes);
  std::string why;
  const std::string mpirun = find_mpirun(&why);
  TB_CHECK(!mpirun.empty(), why);
  MpirunCommand c;
  c.argv = {mpirun, "-np", std::to_string(processes), program};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  if (geteuid() == 0) {
    c.env.push_back({"OMPI_ALLOW_RUN_AS_ROOT", "1"});
    c.env.push_back({"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"});
  }
  if (processes > static_cast<int>(std::thread::hardware_concurrency()))
    c.env.push_back({"OMPI_MCA_rmaps_base_oversubscribe", "1"});
  return c;
}

}  // namespace tb
