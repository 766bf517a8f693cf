"""Build the nccl-tests stand-in (nccl_tests_standin.c): an MPI program that takes nccl-tests' command line and
prints its text format from real MPI collectives on CPU buffers, for testing how srun / mpirun start nccl-tests
across nodes on machines without GPUs. It measures MPI on CPUs, not GPUs or NCCL: its first line says so and it
prints no `# nccl-tests version` line.

    build_standin(dest_dir) -> dest_dir with all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf
                               and broadcast_perf (one binary, copied under each name; it picks the collective
                               from its name)
    build_hpl_mxp_standin(dest_dir) -> dest_dir with xhpl_mxp: the same for HPL-MxP (hpl_mxp_standin.c: xhpl_mxp's
                               command line and result format, MPI broadcasts of HPL's panels on CPU, not a solve)
    build_io_tools_standin(dest_dir) -> dest_dir with ior and mdtest (io_tools_standin.c: their command lines and
                               summary formats, real POSIX file I/O from every rank, not IOR or mdtest)

Needs mpicc and PMIx from pkg-config (Debian: apt-get install -y --no-install-recommends openmpi-bin
libopenmpi-dev pkgconf; libpmix-dev comes with libopenmpi-dev). Every stand-in starts with standin_start.h (MPI_Init,
then a PMIx fence with data: why is written there). Fault tests:
STANDIN_FAIL_RANK=R STANDIN_FAIL_MODE=exit|kill|hang make rank R exit(3), die of SIGKILL, or hang once the first
size's row is printed (every rank needs the variables: mpirun -x, srun --export).
"""

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("nccl_tests_standin.c")
HPL_SOURCE = Path(__file__).resolve().with_name("hpl_mxp_standin.c")
IO_TOOLS_SOURCE = Path(__file__).resolve().with_name("io_tools_standin.c")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
PROGRAMS = tuple("%s_perf" % c for c in COLLECTIVES)


class StandinBuildError(RuntimeError):
    """mpicc is missing or the stand-in did not compile."""


def build_standin(dest_dir, mpicc=None):
    """Compile the stand-in with `mpicc -O2` into dest_dir under the five `<collective>_perf` names; returns
    dest_dir (a Path). Raises StandinBuildError when mpicc is missing or the compile fails."""
    dest = _compile(SOURCE, Path(dest_dir), PROGRAMS[0], mpicc)
    first = dest / PROGRAMS[0]
    for name in PROGRAMS[1:]:
        target = dest / name
        if target.exists() or target.is_symlink():
            target.unlink()
        shutil.copy2(first, target)  # copies, not links: the directory can be copied to other nodes as it is
        os.chmod(target, 0o755)
    return dest


def build_hpl_mxp_standin(dest_dir, mpicc=None):
    """Compile the HPL-MxP stand-in into dest_dir/xhpl_mxp; returns dest_dir (a Path)."""
    return _compile(HPL_SOURCE, Path(dest_dir), "xhpl_mxp", mpicc)


def build_io_tools_standin(dest_dir, mpicc=None):
    """Compile the IOR and mdtest stand-in into dest_dir/ior and a copy as dest_dir/mdtest (it picks its role from
    its name); returns dest_dir (a Path)."""
    dest = _compile(IO_TOOLS_SOURCE, Path(dest_dir), "ior", mpicc)
    shutil.copy2(dest / "ior", dest / "mdtest")
    return dest


def _pmix_flags(name):
    """Compiler and linker flags for PMIx (standin_start.h: the fence after MPI_Init), from pkg-config."""
    try:
        res = subprocess.run(["pkg-config", "--cflags", "--libs", "pmix"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise StandinBuildError("pkg-config not found: the %s stand-in links PMIx (Debian: apt-get install -y "
                                "--no-install-recommends pkgconf libpmix-dev)" % name) from None
    if res.returncode != 0:
        raise StandinBuildError("pkg-config --cflags --libs pmix failed (exit %s): %s: the %s stand-in links PMIx "
                                "(Debian: libpmix-dev)" % (res.returncode, (res.stderr or res.stdout).strip(), name))
    return res.stdout.split()


def _compile(source, dest, name, mpicc=None):
    """mpicc -O2 source -o dest/name with PMIx; returns dest."""
    mpicc = mpicc or shutil.which("mpicc")
    if not mpicc:
        raise StandinBuildError("mpicc not found on PATH: the %s stand-in needs an MPI compiler "
                                "(Debian: apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev)"
                                % name)
    dest.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([mpicc, "-O2", "-o", str(dest / name), str(source)] + _pmix_flags(name), capture_output=True,
                         text=True, timeout=120)
    if res.returncode != 0:
        raise StandinBuildError("mpicc -O2 %s failed (exit %s): %s" % (source, res.returncode,
                                                                       (res.stderr or res.stdout).strip()[-2000:]))
    return dest
