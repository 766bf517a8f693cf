"""Stand-in source trees for the tools the collection builds from source (nccl-tests, nvbandwidth, IOR with mdtest,
elbencho), for tests.

The real upstream sources (github.com/NVIDIA/nccl-tests release tarballs) cannot be fetched from the test
machines, so a test writes a tiny tree here that mirrors nccl-tests' layout and build interface instead: a
top-level Makefile that delegates to src/ (`make` == `make -C src build`), src/common.mk + src/Makefile that take
the same variables with the same flag spellings as upstream (CUDA_HOME, NCCL_HOME, MPI=1 + MPI_HOME,
NVCC_GENCODE, BUILDDIR, NAME_SUFFIX, VERBOSE, DEBUG), and binaries with upstream's names
(build/all_reduce_perf, build/all_gather_perf).  The programs only print the NCCL version they link against and
then fail the way upstream does on a machine without a GPU ("Cuda failure ..."), so a build of this tree goes
through the same nvcc / NCCL / MPI include and link steps as the real one.  `tarball()` packs a tree like a
GitHub release tarball (one top directory).  Stdlib only.

IOR's tree has a release tarball's interface (`./configure --prefix= MPICC=`, `make`, `make install`; without
configure, a git checkout's `./bootstrap` makes it); its program is io_tools_standin.c, compiled by the node's mpicc:
IOR's and mdtest's command lines, real file I/O from every rank, their summary formats, version "standin".
elbencho's tree has its Makefile's interface (`make` -> bin/elbencho), a C++ program that prints a real capture of
elbencho (tests/fixtures/io_tools/elbencho/, whose README names the source); its static release archive is
upstream's layout: the executable alone, no directory.

    python tests/integration/tool_sources.py DEST [VERSION]   # writes DEST/ and DEST.tar.gz
"""

import hashlib
import sys
import tarfile
import urllib.request
from pathlib import Path

NCCL_TESTS_VERSION = "2.17.8"
OPS = ("all_reduce", "all_gather")

TOP_MAKEFILE = """\
# Stand-in for NVIDIA nccl-tests' top-level Makefile: delegates to src/.
.PHONY : all clean

default : src.build

TARGETS=src

all:   ${TARGETS:%=%.build}
clean: ${TARGETS:%=%.clean}

%.build:
\t${MAKE} -C $* build

%.clean:
\t${MAKE} -C $* clean
"""

COMMON_MK = """\
# Stand-in for nccl-tests' src/common.mk (same variables and defaults).
CUDA_HOME ?= /usr/local/cuda
PREFIX ?= /usr/local
VERBOSE ?= 0
DEBUG ?= 0

CUDA_LIB ?= $(CUDA_HOME)/lib64
CUDA_INC ?= $(CUDA_HOME)/include
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDARTLIB ?= cudart

NVCC_GENCODE ?= -gencode=arch=compute_80,code=sm_80 \\
\t\t-gencode=arch=compute_90,code=sm_90 \\
\t\t-gencode=arch=compute_90,code=compute_90

NVCUFLAGS  := -ccbin $(CXX) $(NVCC_GENCODE) -std=c++11
NVLDFLAGS  := -L${CUDA_LIB} -l${CUDARTLIB} -lrt

ifeq ($(DEBUG), 0)
NVCUFLAGS += -O3 -g
else
NVCUFLAGS += -O0 -G -g
endif

ifneq ($(VERBOSE), 0)
NVCUFLAGS += -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
else
.SILENT:
endif
"""

SRC_MAKEFILE = """\
# Stand-in for nccl-tests' src/Makefile (same NCCL_HOME / MPI / BUILDDIR / NAME_SUFFIX handling).
include common.mk

.PHONY: build clean

BUILDDIR ?= ../build
ifneq ($(NCCL_HOME), "")
NVCUFLAGS += -I$(NCCL_HOME)/include/
NVLDFLAGS += -L$(NCCL_HOME)/lib
endif

ifeq ($(MPI), 1)
NVCUFLAGS += -DMPI_SUPPORT -I$(MPI_HOME)/include
NVLDFLAGS += -L$(MPI_HOME)/lib -L$(MPI_HOME)/lib64 -lmpi
endif
LIBRARIES += nccl
NVLDFLAGS += $(LIBRARIES:%=-l%)

DST_DIR := $(BUILDDIR)
BIN_FILES_LIST := @OPS@
BIN_FILES := $(BIN_FILES_LIST:%=${DST_DIR}/%_perf${NAME_SUFFIX})

build: ${BIN_FILES}

clean:
\trm -rf ${DST_DIR}

${DST_DIR}/%.o: %.cu common.h
\t@printf "Compiling  %-35s > %s\\n" $< $@
\t@mkdir -p ${DST_DIR}
\t$(NVCC) -o $@ $(NVCUFLAGS) -c $<

${DST_DIR}/%_perf${NAME_SUFFIX}: ${DST_DIR}/%.o ${DST_DIR}/common.o
\t@printf "Linking  %-35s > %s\\n" $< $@
\t@mkdir -p ${DST_DIR}
\t$(NVCC) -o $@ $(NVCUFLAGS) $^ ${NVLDFLAGS}
"""

COMMON_H = """\
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include "nccl.h"
#ifdef MPI_SUPPORT
#include "mpi.h"
#endif

#define NCCL_TESTS_LIKE_VERSION "@VERSION@"
extern const char* testName;  // defined by each <op>.cu
"""

COMMON_CU = """\
#include "common.h"

int main(int argc, char* argv[]) {
  int rank = 0, nranks = 1;
#ifdef MPI_SUPPORT
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
#endif
  int v = 0;
  ncclResult_t r = ncclGetVersion(&v);
  printf("# nccl-tests-like %s %s: nccl %d (%s), rank %d of %d, mpi %s\\n", NCCL_TESTS_LIKE_VERSION, testName, v,
         ncclGetErrorString(r), rank, nranks,
#ifdef MPI_SUPPORT
         "yes");
#else
         "no");
#endif
  fflush(stdout);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  int rc = 0;
  if (e != cudaSuccess) {
    printf("Cuda failure %s:%d '%s'\\n", __FILE__, __LINE__, cudaGetErrorString(e));
    rc = 1;
  } else {
    printf("# %d CUDA device(s)\\n", ndev);
  }
#ifdef MPI_SUPPORT
  MPI_Finalize();
#endif
  return rc;
}
"""

OP_CU = """\
#include "common.h"

const char* testName = "@OP@";
"""


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def nccl_tests_like_tree(dest: Path, version: str = NCCL_TESTS_VERSION) -> Path:
    """Write the stand-in nccl-tests tree into dest (which becomes the tree's root) and return dest."""
    dest = Path(dest)
    _write(dest / "Makefile", TOP_MAKEFILE)
    _write(dest / "README.md", "Stand-in for NVIDIA nccl-tests %s (tests only): `make MPI=1 MPI_HOME=...`.\n"
           % version)
    src = dest / "src"
    _write(src / "common.mk", COMMON_MK)
    _write(src / "Makefile", SRC_MAKEFILE.replace("@OPS@", " ".join(OPS)))
    _write(src / "common.h", COMMON_H.replace("@VERSION@", version))
    _write(src / "common.cu", COMMON_CU)
    for op in OPS:
        _write(src / ("%s.cu" % op), OP_CU.replace("@OP@", op))
    return dest


NVBANDWIDTH_CMAKE = """\
# Stand-in for NVIDIA nvbandwidth's CMakeLists.txt: the same requirements (CUDA, C++17, Boost program_options).
cmake_minimum_required(VERSION 3.20)
project(nvbandwidth LANGUAGES CUDA CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(Boost COMPONENTS program_options REQUIRED)
add_executable(nvbandwidth nvbandwidth.cu)
target_link_libraries(nvbandwidth Boost::program_options cuda)
"""
NVBANDWIDTH_CU = """\
#include <cstdio>
#include <boost/program_options.hpp>
int main() { printf("nvbandwidth Version: v0.8-stand-in\\n"); return 0; }
"""


def nvbandwidth_like_tree(dest: Path) -> Path:
    """A stand-in for nvbandwidth's source: `cmake -S . -B build && cmake --build build`, needing Boost
    program_options as upstream does (where Boost is not installed, configuring fails the way upstream's does)."""
    _write(dest / "CMakeLists.txt", NVBANDWIDTH_CMAKE)
    _write(dest / "nvbandwidth.cu", NVBANDWIDTH_CU)
    return dest


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "io_tools"
# IOR's and mdtest's command lines, real POSIX I/O from every MPI rank, their summary formats (version "standin")
IO_TOOLS_STANDIN = Path(__file__).resolve().with_name("io_tools_standin.c")
STANDIN_START = IO_TOOLS_STANDIN.with_name("standin_start.h")
ELBENCHO_CAPTURE = FIXTURES / "elbencho" / "elbencho-2.1-0-multihost-4hosts-mkdirs-write-direct-resfile.txt"

IOR_CONFIGURE = """\
#!/bin/sh
# Stand-in for IOR's autoconf configure: --prefix=DIR and MPICC=... (arguments or environment), AX_PROG_CC_MPI's check
prefix=/usr/local
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix="${arg#--prefix=}" ;;
    MPICC=*) MPICC="${arg#MPICC=}" ;;
    *) echo "configure: WARNING: unrecognized option: $arg" ;;
  esac
done
MPICC="${MPICC:-mpicc}"
printf 'checking for MPI_Init... '
printf '#include <mpi.h>\\nint main(int c, char **v) { MPI_Init(&c, &v); MPI_Finalize(); return 0; }\\n' > conftest.c
if "$MPICC" -o conftest conftest.c >config.log 2>&1; then echo yes; else
  echo no; cat config.log; echo "configure: error: MPI compiler requested, but could not use MPI."; exit 1; fi
rm -f conftest conftest.c
sed -e "s|@prefix@|$prefix|g" -e "s|@MPICC@|$MPICC|g" Makefile.in > Makefile
echo "config.status: creating Makefile"
"""
IOR_BOOTSTRAP = """\
#!/bin/sh
# Stand-in for IOR's bootstrap (autoreconf): makes configure from what autoconf would read
cp config/configure.sh configure && chmod +x configure && echo "bootstrap: configure made"
"""
IOR_MAKEFILE_IN = """\
# Stand-in for IOR's Makefile (automake): src/ior and src/mdtest, installed into $(prefix)/bin. One program, which
# takes its role from its name (io_tools_standin.c).
prefix = @prefix@
MPICC = @MPICC@

all: src/ior src/mdtest

src/ior: src/io_tools_standin.c src/standin_start.h
\t$(MPICC) -O2 -o $@ $< $(shell pkg-config --cflags --libs pmix)

src/mdtest: src/ior
\tcp src/ior src/mdtest

install: all
\tmkdir -p $(prefix)/bin
\tinstall -m 755 src/ior src/mdtest $(prefix)/bin/

.PHONY: all install
"""
ELBENCHO_MAKEFILE = """\
# Stand-in for elbencho's Makefile: the same variables and layout (source/ -> bin/elbencho, stripped from
# bin/elbencho-unstripped).
EXE_NAME ?= elbencho
BIN_PATH ?= ./bin
SOURCE_PATH ?= ./source
EXE ?= $(BIN_PATH)/$(EXE_NAME)
EXE_UNSTRIPPED ?= $(EXE)-unstripped
CXX ?= g++
STRIP ?= strip

all: $(EXE)

$(EXE): $(EXE_UNSTRIPPED)
\t@echo [STRIP] $@
\t@$(STRIP) --strip-debug $(EXE_UNSTRIPPED) -o $(EXE)

$(EXE_UNSTRIPPED): $(SOURCE_PATH)/Main.cpp
\t@echo [LINK] $@
\t@mkdir -p $(BIN_PATH)
\t@$(CXX) -std=c++17 -O2 -pthread -o $@ $<

.PHONY: all
"""
ELBENCHO_MAIN_CPP = """\
#include <iostream>
// Stand-in for elbencho (tests only): a real C++ program that prints a real capture of elbencho's output.
static const char *capture = @CAPTURE@;
int main() { std::cout << capture; return 0; }
"""


def c_string(text):
    """text as a C string literal, one source line per line of text."""
    lines = text.splitlines(keepends=True) or [""]
    return "\n".join('"%s"' % line.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
                     .replace("\r", "\\r").replace("\n", "\\n") for line in lines)


def ior_like_tree(dest: Path, release: bool = True) -> Path:
    """IOR's tree (IOR and mdtest). release: with configure, as in ior-4.0.0.tar.gz; else a git checkout's, which
    needs ./bootstrap first."""
    dest = Path(dest)
    _write(dest / ("configure" if release else "config/configure.sh"), IOR_CONFIGURE)
    if not release:
        _write(dest / "bootstrap", IOR_BOOTSTRAP)
        (dest / "bootstrap").chmod(0o755)
    else:
        (dest / "configure").chmod(0o755)
    _write(dest / "Makefile.in", IOR_MAKEFILE_IN)
    _write(dest / "src" / "io_tools_standin.c", IO_TOOLS_STANDIN.read_text())
    _write(dest / "src" / "standin_start.h", STANDIN_START.read_text())  # its start (MPI_Init, then a PMIx fence)
    return dest


def elbencho_like_tree(dest: Path) -> Path:
    """elbencho's source tree: `make` builds bin/elbencho."""
    dest = Path(dest)
    _write(dest / "Makefile", ELBENCHO_MAKEFILE)
    _write(dest / "source" / "Main.cpp", ELBENCHO_MAIN_CPP.replace("@CAPTURE@",
                                                                     c_string(ELBENCHO_CAPTURE.read_text())))
    return dest


def elbencho_static_archive(out: Path, member: str = "elbencho", runs: bool = True) -> Path:
    """Upstream's static release archive (elbencho-static-x86_64.tar.gz): the executable alone, at the top (named
    elbencho.aarch64 in the arm64 one). Here a shell script that prints the capture; runs=False: bytes this node
    cannot execute, as another CPU architecture's build."""
    out = Path(out)
    exe = out.parent / ("%s-static" % out.name) / member
    _write(exe, "#!/bin/sh\n# stand-in for elbencho's static executable (tests only)\ncat <<'EOF'\n%sEOF\n"
           % ELBENCHO_CAPTURE.read_text() if runs else "\x7fELF\x02\x01\x01 not this machine's\n")
    exe.chmod(0o755)
    with tarfile.open(out, "w:gz") as tar:
        tar.add(exe, arcname=member)
    return out


# fio's real release source: upstream's fio-3.33 tarball as Debian's archive keeps it (fio_3.33.orig.tar.gz, the
# source of Debian 12's fio package), checked against the sha256 in Debian's fio_3.33-3.dsc.
FIO_ORIG = "http://deb.debian.org/debian/pool/main/f/fio/fio_3.33.orig.tar.gz"
FIO_ORIG_SHA256 = "d2410e13e0f379d061d077cc5ae325835bb7c6186aa7bafc1df954cbc9b014fc"


def fio_release_tarball(cache_dir: Path) -> Path:
    """fio 3.33's release tarball in cache_dir (downloaded once, its sha256 checked); OSError when it cannot be
    fetched."""
    out = Path(cache_dir) / "fio-3.33.tar.gz"
    if not out.exists() or hashlib.sha256(out.read_bytes()).hexdigest() != FIO_ORIG_SHA256:
        out.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(FIO_ORIG, timeout=120) as resp:  # noqa: S310 - a fixed https-less mirror URL
            data = resp.read()
        if hashlib.sha256(data).hexdigest() != FIO_ORIG_SHA256:
            raise OSError("%s: sha256 does not match Debian's fio_3.33-3.dsc" % FIO_ORIG)
        tmp = out.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(out)
    return out


def tarball(tree: Path, out: Path) -> Path:
    """Pack tree into the .tar.gz out with one top directory named like tree (as GitHub release tarballs)."""
    tree, out = Path(tree), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def _owner(info):
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w:gz") as tar:
        tar.add(tree, arcname=tree.name, filter=_owner)
    return out


if __name__ == "__main__":
    root = nccl_tests_like_tree(Path(sys.argv[1]), *sys.argv[2:3])
    print(tarball(root, root.with_name(root.name + ".tar.gz")))
