"""tools_build: nccl-tests (MPI=1), rccl-tests, nvbandwidth, IOR (with mdtest), elbencho and fio with its S3 engine
built from source into the tools prefix.

Each build goes to <prefix>/build/<tool>/<key>, the key a digest of what the binaries depend on: the source (git
URL and ref, or the tarball's sha256), the CPU architecture and OS release (detect.platform_tag), the CUDA toolkit
or ROCm version, NCCL's version and place, the MPI, and the GPU architectures compiled for. A build with a marker
under its key is reused (state `present`); sources are fetched into <prefix>/src. Builds run under an flock per
tool, so nodes sharing a prefix build once.

Build once, copy to the same image: with `build: false` a node only reports what it has (state `waiting` where
it would build); `archive_out` packs this node's builds for the role to copy, `archive_in` unpacks a copy from an
identical node before looking (state `copied`); `build_differing` then builds here what still waits under a key
other than the builder's (same image, another MPI or NCCL). nccl-tests is built the way its README says:
`make MPI=1 MPI_HOME=… CUDA_HOME=… NCCL_HOME=… NVCC_GENCODE=…`; a wheel's NCCL (no unversioned libnccl.so) gets
a link directory beside the build. Upstream links without an rpath: the libraries the binaries need are recorded
in ld_library_path, which the probe action puts in the environment of every later probe.

IOR and mdtest (github.com/hpc/ior) are built as IOR's README says: `./bootstrap` where the tree has no configure (a
git checkout; a release tarball has one), `./configure --prefix=<build> MPICC=<the MPI's mpicc>`, `make`, `make
install`. elbencho is built with its own Makefile (`make`, which fetches its external sources through git), or, from
upstream's static release archive (elbencho-static-x86_64.tar.gz: the executable alone), installed as it is. Both
are built in a copy of the source, removed once they are installed: the storage phase's io_tools_run finds them on
PATH. elbencho's make fetches its externals (Simple-Web-Server, ftxui) with git, so an air-gapped site gives
upstream's static archive, or a source tarball whose external/ is already filled; it is built without CUDA and
cuFile (CUDA_SUPPORT=0 CUFILE_SUPPORT=0: the probe uses no GPU buffers, and the build's key names no CUDA). An
elbencho that does not run here (`--version`: another CPU architecture's archive) is a failed build.

fio is built (`./configure`, `make`) for its http engine in S3 mode, which distributions leave out (Debian's
and RHEL's fio are built without libcurl): it is kept as `fio-http`, not `fio`, so the distribution's fio stays the
one every fio probe and fio's client/server mode across nodes use (two fio versions do not talk to each other), and
the object store probe takes fio-http for the bucket. A build without the http engine (libcurl's or OpenSSL's
headers missing) is a failed build naming the packages.

Facts: builds {name: {state, key, bin_dir, ld_library_path, reason, command, tail, controlled_by, deps}}, changed.
A failed or impossible build is recorded with the command, the last lines of its output and the variable that
controls it; the artifact is still ok (the tools section and the skips of the probes that need it say why).
"""

import glob
import hashlib
import os
import shutil
import tarfile

from probes.common.command import run_cmd
from probes.common.tools import fio_without_http
from probes.params import Param, Params
from probes.tools import detect
from probes.tools.install import LockTimeout, locked, read_marker, tail, write_marker

TOOLS = ("nccl_tests", "rccl_tests", "nvbandwidth", "ior", "elbencho", "fio_http")
PARAMS = Params(
    prefix=Param(str, "", "tools prefix (set by the role)"),
    builds=Param(dict, {}, "tool -> {enabled, git, ref, tarball} (assess_sources, tools_<tool>)"),
    sources_dir=Param(str, "", "where the role copied the source tarballs (<tool>-<file name>); empty: a tarball "
                               "path is a path on the node"),
    build=Param(bool, True, "build what is missing (false: only report, state waiting)"),
    archive_in=Param(str, "", "a tar.gz of another node's builds to unpack first"),
    archive_out=Param(str, "", "write this node's builds (present or built) to this tar.gz"),
    build_differing=Param(bool, False, "with build false: build what still waits (after archive_in) under a key "
                                       "other than the one in builder_builds (the node that builds for this image "
                                       "has another MPI, NCCL, ...: its copy cannot serve)"),
    builder_builds=Param(dict, {}, "the records of the node that builds for this image (build_differing)"),
    mpi_home=Param(str, "", "MPI to build with (tools_mpi_home)"),
    cuda_home=Param(str, "", "CUDA toolkit (tools_cuda_home)"),
    nccl_home=Param(str, "", "NCCL (tools_nccl_home)"),
    pythons=Param(list, [], "Pythons whose nvidia-nccl wheel may provide NCCL (the probe venv)"),
    jobs=Param(int, 0, "make -j (0: the node's CPUs)"),
    timeout=Param(float, 1800, "seconds one build may take"),
    offline=Param(bool, False, "air-gapped (assess_wheelhouse): a git source is asked first whether it answers, "
                               "and is missing with what to give when it does not"),
)
# How long an air-gapped run waits for a git source to answer `git ls-remote` (a blackholed route hangs until then).
OFFLINE_GIT_TIMEOUT_S = 30
MARKER = ".clustermax-build.json"
# Built in a copy of their source (out/src): their build writes into the tree it runs in.
IN_A_COPY = ("ior", "elbencho", "fio_http")
# the builds that use the MPI (IOR's configure and make call its mpicc; nccl-tests and rccl-tests link its libmpi)
MPI_TOOLS = ("ior", "nccl_tests", "rccl_tests")
# The variables that switch each build and name its source: every failure reason ends with them.
CONTROL = {tool: "tools_%s / assess_sources.%s" % (tool, tool) for tool in TOOLS}


def source_id(src):
    if src.get("tarball"):
        h = hashlib.sha256()
        with open(src["tarball"], "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return "sha256:" + h.hexdigest()
    return "git:%s@%s" % (src.get("git"), src.get("ref"))


def gencode(archs):
    """NVCC_GENCODE for the node's GPUs ("90" -> sm_90 and its PTX); None: nccl-tests' own default list."""
    if not archs:
        return None
    return " ".join("-gencode=arch=compute_%s,code=sm_%s" % (a, a) for a in archs) + \
        " -gencode=arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])


def needs(tool, env):
    """None when the tool can be built here, else (state, reason)."""
    if tool in ("nccl_tests", "nvbandwidth"):
        if not env["cuda"]:
            if not env["nvidia"]:
                return "not_applicable", "no NVIDIA driver and no CUDA toolkit on this node"
            return "missing", "no CUDA toolkit (nvcc) on this node (tools_cuda_home, CUDA_HOME, /usr/local/cuda, PATH)"
        driver_cuda = (env["nvidia"] or {}).get("cuda")
        if not detect.runs_on_driver(env["cuda"]["version"], driver_cuda):
            return "missing", (
                "the CUDA toolkit %s at %s is newer than the driver's CUDA %s (driver %s): what it builds would stop "
                "at its first call (\"CUDA driver version is insufficient for CUDA runtime version\"); install a "
                "CUDA %s.x toolkit or give tools_cuda_home" % (
                    env["cuda"]["version"], env["cuda"]["home"], driver_cuda, env["nvidia"].get("driver"),
                    driver_cuda.split(".")[0]))
        if tool == "nccl_tests" and not env["nccl"]:
            return "missing", ("no NCCL to build against (tools_nccl_home, NCCL_HOME, /usr/include/nccl.h, or the "
                               "probe venv's nvidia-nccl wheel)")
        if tool == "nvbandwidth" and not shutil.which("cmake"):
            return "missing", "no cmake on this node (tools_packages: cmake)"
    if tool == "rccl_tests" and not env["rocm"]:
        return "not_applicable", "no ROCm on this node"
    if tool == "ior" and not (env["mpi"] and os.access(os.path.join(env["mpi"]["bin"], "mpicc"), os.X_OK)):
        return "missing", ("no MPI with its compiler wrapper (mpicc) on this node (tools_mpi_home; "
                           "tools_packages_wanted: openmpi)")
    # elbencho's static release needs no make (a source tree without make fails at its make step, saying so)
    for exe in ("make", "tar") if tool != "elbencho" else ("tar",):
        if not shutil.which(exe):
            return "missing", "no %s on this node" % exe
    return None


def build_key(tool, src_id, env):
    # the CPU architecture and OS (release) first: a shared prefix holds one build per kind of node, never another
    # architecture's binaries (Exec format error) or ones linked against another distribution's libraries
    parts = [tool, src_id, "platform=%s" % (env.get("platform") or detect.platform_tag())]
    if tool in ("nccl_tests", "nvbandwidth"):
        parts += ["cuda=%s" % env["cuda"]["version"], "archs=%s" % ",".join(env["archs"])]
    if tool == "nccl_tests":
        parts += ["nccl=%s@%s" % (env["nccl"]["version"], env["nccl"]["lib"])]
    if tool == "rccl_tests":
        parts += ["rocm=%s" % env["rocm"]["version"], "archs=%s" % ",".join(env["rocm"]["archs"])]
    if tool in ("nccl_tests", "rccl_tests", "ior"):
        m = env["mpi"]
        parts += ["mpi=%s" % ("%s-%s@%s" % (m["kind"], m["version"], m["home"]) if m else "none")]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16], parts


def source_dir(tool, src_id, prefix):
    return os.path.join(prefix, "src", "%s-%s" % (tool, hashlib.sha256(src_id.encode()).hexdigest()[:12]))


def git_unanswered(src):
    """None when the git source answers `git ls-remote` for its ref within OFFLINE_GIT_TIMEOUT_S (an internal
    mirror of an air-gapped site), else what git said (upstream from a node with no route out)."""
    res = run_cmd(["git", "ls-remote", "--exit-code", src["git"], src["ref"]], timeout=OFFLINE_GIT_TIMEOUT_S,
                  env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
    if res.rc == 0:
        return None
    if res.timed_out:
        return "no answer within %d s" % OFFLINE_GIT_TIMEOUT_S
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else "git ls-remote rc=%s" % res.rc


def fetch_source(tool, src, src_id, prefix, timeout):
    """-> (source directory, None) or (None, (command, result))."""
    dest = source_dir(tool, src_id, prefix)
    if os.path.isfile(os.path.join(dest, ".clustermax-source")):
        return dest, None
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if src.get("tarball"):
        os.makedirs(dest)
        argv = ["tar", "-xzf", src["tarball"], "-C", dest] + (["--strip-components=1"] if one_top_dir(src["tarball"])
                                                              else [])
    else:
        argv = ["git", "-c", "advice.detachedHead=false", "clone", "--depth", "1", "--branch", src["ref"],
                src["git"], dest]
    # never a credentials prompt from a private URL: it would wait for no one until the timeout
    res = run_cmd(argv, timeout=min(timeout, 900), env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
    if res.rc != 0:
        shutil.rmtree(dest, ignore_errors=True)
        return None, (argv, res)
    with open(os.path.join(dest, ".clustermax-source"), "w") as fh:
        fh.write(src_id + "\n")
    return dest, None


def one_top_dir(tarball):
    """True when every member is under one top directory (a source release: nccl-tests-2.17.8/...), which the
    extraction strips; false for an archive of loose files (elbencho's static release: the executable alone)."""
    try:
        with tarfile.open(tarball, "r:*") as tar:
            names = [m.name.lstrip("./") for m in tar.getmembers() if m.name.lstrip("./")]
    except (OSError, tarfile.TarError):
        return True  # tar says what is wrong with it
    tops = {n.split("/", 1)[0] for n in names}
    return len(tops) == 1 and any("/" in n for n in names)


def nccl_link_dir(nccl, out):
    """NCCL_HOME for make: the NCCL itself when its lib has libnccl.so; a wheel has only libnccl.so.2, so a
    directory beside the build gets include -> its headers and lib/libnccl.so -> libnccl.so.2."""
    if os.path.exists(os.path.join(nccl["lib"], "libnccl.so")):
        return nccl["home"]
    shim = os.path.join(out, "nccl-home")
    os.makedirs(os.path.join(shim, "lib"), exist_ok=True)
    for link, target in ((os.path.join(shim, "include"), nccl["include"]),
                         (os.path.join(shim, "lib", "libnccl.so"), os.path.join(nccl["lib"], "libnccl.so.2")),
                         (os.path.join(shim, "lib", "libnccl.so.2"), os.path.join(nccl["lib"], "libnccl.so.2"))):
        if not os.path.lexists(link):
            os.symlink(target, link)
    return shim


def mpi_lib(mpi):
    """Where libmpi is (detect.mpi_dirs), for ld_library_path."""
    return mpi.get("lib") or os.path.join(mpi["home"], "lib")


def mpi_link_dir(mpi, out):
    """MPI_HOME for make (-I$(MPI_HOME)/include -L$(MPI_HOME)/lib): the MPI's home where mpi.h and libmpi are under
    it; else (RHEL's openmpi-devel: /usr/include/openmpi-x86_64 and /usr/lib64/openmpi/lib) a directory beside the
    build with include -> the wrapper's include dir and lib -> its lib dir."""
    home, inc, lib = mpi["home"], mpi.get("include"), mpi_lib(mpi)
    if not inc or (os.path.realpath(inc) == os.path.realpath(os.path.join(home, "include"))
                   and os.path.realpath(lib) == os.path.realpath(os.path.join(home, "lib"))):
        return home
    shim = os.path.join(out, "mpi-home")
    os.makedirs(shim, exist_ok=True)
    for link, target in ((os.path.join(shim, "include"), inc), (os.path.join(shim, "lib"), lib)):
        if not os.path.lexists(link):
            os.symlink(target, link)
    return shim


def recipe(tool, src_dir, out, env, jobs):
    """-> ([argv or (argv, cwd), ...], bin_dir, ld_library_path, executables to copy into bin_dir or None: paths,
    or (path, the name it gets there)).
    IOR and elbencho build in a copy of the source (work: out/src, removed once their executables are out)."""
    build = os.path.join(out, "build")
    mpi = env["mpi"]
    work = os.path.join(out, "src")
    if tool == "ior":
        configure = os.path.join(work, "configure")
        steps = [] if os.path.isfile(configure) else [([os.path.join(work, "bootstrap")], work)]
        steps += [([configure, "--prefix=%s" % out, "MPICC=%s" % os.path.join(mpi["bin"], "mpicc")], work),
                  (["make", "-j%d" % jobs], work), (["make", "install"], work)]
        return steps, os.path.join(out, "bin"), [mpi_lib(mpi)], None
    if tool == "fio_http":
        return ([([os.path.join(work, "configure")], work), (["make", "-j%d" % jobs], work)],
                os.path.join(out, "bin"), [], [(os.path.join(work, "fio"), "fio-http")])
    if tool == "elbencho":
        if not os.path.isfile(os.path.join(work, "Makefile")):
            # upstream's static release: its one executable (elbencho, or elbencho.aarch64 in the arm64 archive)
            found = [os.path.join(work, n) for n in sorted(os.listdir(work)) if n.startswith("elbencho")
                     and os.path.isfile(os.path.join(work, n)) and os.access(os.path.join(work, n), os.X_OK)]
            return [], os.path.join(out, "bin"), [], [(p, "elbencho") for p in found[:1]] or [
                os.path.join(work, "elbencho")]
        # without GPU buffers: elbencho's Makefile would otherwise link CUDA and cuFile where it finds them, which
        # the build's key does not name
        return ([(["make", "-j%d" % jobs, "CUDA_SUPPORT=0", "CUFILE_SUPPORT=0"], work)], os.path.join(out, "bin"),
                [], [os.path.join(work, "bin", "elbencho")])
    if tool == "nccl_tests":
        argv = ["make", "-C", src_dir, "-j%d" % jobs, "BUILDDIR=%s" % build, "CUDA_HOME=%s" % env["cuda"]["home"],
                "NCCL_HOME=%s" % nccl_link_dir(env["nccl"], out)]
        if mpi:
            argv += ["MPI=1", "MPI_HOME=%s" % mpi_link_dir(mpi, out)]
        code = gencode(env["archs"])
        if code:
            argv.append("NVCC_GENCODE=%s" % code)
        # nccl-tests link libcudart.so (its Makefile: -L$(CUDA_LIB) -lcudart), which the loader finds only where the
        # toolkit's installer registered it: the toolkit's lib64 goes with the build
        cudart = os.path.join(env["cuda"]["home"], "lib64")
        libs = [env["nccl"]["lib"]] + ([mpi_lib(mpi)] if mpi else []) + ([cudart] if os.path.isdir(cudart) else [])
        return [argv], build, libs, None
    if tool == "rccl_tests":
        rocm = env["rocm"]["home"]
        argv = ["make", "-C", src_dir, "-j%d" % jobs, "BUILDDIR=%s" % build, "HIP_HOME=%s" % rocm,
                "ROCM_HOME=%s" % rocm, "RCCL_HOME=%s" % rocm]
        if mpi:
            argv += ["MPI=1", "MPI_HOME=%s" % mpi_link_dir(mpi, out)]
        return [argv], build, [os.path.join(rocm, "lib")] + ([mpi_lib(mpi)] if mpi else []), None
    configure = ["cmake", "-S", src_dir, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_CUDA_COMPILER=%s" % env["cuda"]["nvcc"]]
    if env["archs"]:
        configure.append("-DCMAKE_CUDA_ARCHITECTURES=%s" % ";".join(env["archs"]))
    return [configure, ["cmake", "--build", build, "-j%d" % jobs]], build, [], None


def check_installed(tool, bin_dir):
    """None when what was built does what it is built for, else (why, what it printed): fio-http must list its
    http engine; elbencho must run here (an archive of another CPU architecture's release does not)."""
    if tool == "fio_http":
        why = fio_without_http(os.path.join(bin_dir, "fio-http"))
        if why:
            return ("fio was built without its http engine (S3): its configure found no libcurl or OpenSSL headers "
                    "(tools_packages_wanted: fio-build)", why)
    if tool == "elbencho":
        res = run_cmd([os.path.join(bin_dir, "elbencho"), "--version"], timeout=30)
        if res.rc != 0:
            return ("the installed elbencho does not run on this node (another CPU architecture's release?): "
                    "`elbencho --version`", (res.stdout + res.stderr).strip()[-500:] or "exit %s" % res.rc)
    return None


def executables(bin_dir):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(bin_dir, "*"))
                  if os.path.isfile(p) and os.access(p, os.X_OK) and not p.endswith((".o", ".so")))


def build_one(tool, src, env, params):
    """-> the tool's record (state, key, ...)."""
    rec = {"state": None, "controlled_by": CONTROL[tool]}
    if not src.get("enabled", True):
        return dict(rec, state="off", reason="switched off (tools_%s: false)" % tool)
    why = needs(tool, env)
    if why:
        return dict(rec, state=why[0], reason=why[1])
    if tool == "rccl_tests" and not src.get("tarball") and not src.get("ref"):
        src["ref"] = "rocm-%s" % env["rocm"]["version"]  # rccl-tests tags follow ROCm releases
    if src.get("tarball") and not os.path.isfile(src["tarball"]):
        return dict(rec, state="failed", reason="source tarball %s is not on the node (assess_sources.%s.tarball)"
                    % (src["tarball"], tool))
    if not src.get("tarball") and not (src.get("git") and src.get("ref")):
        return dict(rec, state="missing", reason="no source: set assess_sources.%s.git and ref, or tarball" % tool)
    if not src.get("tarball") and not shutil.which("git"):
        return dict(rec, state="missing", reason="no git on this node to fetch %s (or give a tarball: %s)"
                    % (src["git"], CONTROL[tool]))
    src_id = source_id(src)
    key, parts = build_key(tool, src_id, env)
    out = os.path.join(params["prefix"], "build", tool, key)
    rec.update(key=key, deps=parts, source=src_id)
    with locked(os.path.join(params["prefix"], "build", tool), timeout=params["timeout"]):
        marker = read_marker(os.path.join(out, MARKER))
        if marker and marker.get("key") == key:
            return dict(rec, state="present", bin_dir=marker["bin_dir"], ld_library_path=marker["ld_library_path"],
                        binaries=marker.get("binaries"))
        if not params["build"]:
            return dict(rec, state="waiting", reason="built on another node of the same image, then copied")
        fetched = os.path.isfile(os.path.join(source_dir(tool, src_id, params["prefix"]), ".clustermax-source"))
        if params["offline"] and not src.get("tarball") and not fetched:
            why = git_unanswered(src)
            if why:
                return dict(rec, state="missing", reason=(
                    "air-gapped run (assess_wheelhouse): %s did not answer (%s); give its source as a tarball "
                    "(assess_sources.%s.tarball) or a git mirror the nodes reach" % (src["git"], why, tool)))
        src_dir, failed = fetch_source(tool, src, src_id, params["prefix"], params["timeout"])
        if failed:
            argv, res = failed
            return dict(rec, state="failed", command=" ".join(argv), tail=tail(res),
                        reason="fetching the source failed (rc %s): `%s` (%s)" % (res.rc, " ".join(argv),
                                                                                 CONTROL[tool]))
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        work = os.path.join(out, "src")
        if tool in IN_A_COPY:
            shutil.copytree(src_dir, work, symlinks=True)
        jobs = params["jobs"] or max(1, os.cpu_count() or 1)
        steps, bin_dir, libs, collect = recipe(tool, src_dir, out, env, jobs)
        steps = [s if isinstance(s, tuple) else (s, None) for s in steps]
        # what the MPI's wrappers need (HPC-X's OPAL_PREFIX: detect.mpi_env), for the builds that call them
        wrapper_env = ((env.get("mpi") or {}).get("env") or {}) if tool in MPI_TOOLS else {}
        shown = ["export %s=%s" % kv for kv in sorted(wrapper_env.items())]
        here = None
        for argv, cwd in steps:  # as one would type it: cd where the next step runs, then the step
            shown += ["cd %s" % cwd] if cwd and cwd != here else []
            shown.append(" ".join(argv))
            here = cwd or here
        shown = " && ".join(shown)
        step_env = dict(os.environ, **wrapper_env) if wrapper_env else None
        for argv, cwd in steps:
            res = run_cmd(argv, timeout=params["timeout"], cwd=cwd, env=step_env)
            if res.rc != 0:
                shutil.rmtree(out, ignore_errors=True)
                return dict(rec, state="failed", command=" ".join(argv), tail=tail(res),
                            reason="the build failed (rc %s): `%s`%s (%s)" % (
                                "timeout" if res.timed_out else res.rc, " ".join(argv),
                                " in %s" % cwd if cwd else "", CONTROL[tool]))
        for exe in collect or []:
            exe, name = exe if isinstance(exe, tuple) else (exe, os.path.basename(exe))
            if os.path.isfile(exe) and os.access(exe, os.X_OK):
                os.makedirs(bin_dir, exist_ok=True)
                shutil.copy2(exe, os.path.join(bin_dir, name))
        if tool in IN_A_COPY:
            shutil.rmtree(work, ignore_errors=True)  # the executables are out; the objects are not needed
        binaries = executables(bin_dir)
        if not binaries:
            shutil.rmtree(out, ignore_errors=True)
            made = " ".join(steps[-1][0]) if steps else "extracting %s" % (src.get("tarball") or src.get("git"))
            return dict(rec, state="failed", command=made,
                        reason="the build made no executables in %s (%s)" % (
                            bin_dir if not collect else ", ".join(c[0] if isinstance(c, tuple) else c
                                                                   for c in collect), CONTROL[tool]))
        unusable = check_installed(tool, bin_dir)
        if unusable:
            shutil.rmtree(out, ignore_errors=True)
            return dict(rec, state="failed", command=shown or "extracting %s" % src.get("tarball"), tail=unusable[1],
                        reason="%s (%s)" % (unusable[0], CONTROL[tool]))
        write_marker(os.path.join(out, MARKER), {"key": key, "bin_dir": bin_dir, "ld_library_path": libs,
                                                 "binaries": binaries, "deps": parts, "command": shown})
        return dict(rec, state="built", bin_dir=bin_dir, ld_library_path=libs, binaries=binaries,
                    command=shown or "installed the release's executable (%s)" % ", ".join(binaries))


def unpack(archive, prefix):
    """Extract another node's builds into <prefix>/build (members must stay under it) -> keys unpacked."""
    root = os.path.join(prefix, "build")
    os.makedirs(root, exist_ok=True)
    keys = []
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar.getmembers():
            target = os.path.realpath(os.path.join(root, m.name))
            if not target.startswith(os.path.realpath(root) + os.sep) or m.isdev():
                raise ValueError("refusing archive member %s (outside %s)" % (m.name, root))
        for m in tar.getmembers():
            parts = m.name.split("/")
            if len(parts) == 3 and parts[2] == MARKER:
                keys.append(parts[1])
        # members checked above; the NCCL and MPI link directories hold absolute symlinks, which the "data" filter
        # (Python 3.14's default, PEP 706) refuses
        if hasattr(tarfile, "fully_trusted_filter"):
            tar.extractall(root, filter="fully_trusted")  # noqa: S202
        else:
            tar.extractall(root)  # noqa: S202
    return keys


def pack(archive, prefix, records):
    root = os.path.join(prefix, "build")
    with tarfile.open(archive, "w:gz") as tar:
        for tool, rec in sorted(records.items()):
            if rec.get("state") in ("present", "built", "copied"):
                tar.add(os.path.join(root, tool, rec["key"]), arcname="%s/%s" % (tool, rec["key"]))


def run(art, params, out_dir):
    if not params["prefix"]:
        art.error("no prefix given (assess_tools_prefix)")
        return
    nv = detect.nvidia()
    env = {"cuda": detect.cuda_toolkit(params["cuda_home"], (nv or {}).get("cuda")), "nvidia": nv,
           "rocm": detect.rocm(),
           "mpi": detect.mpi(params["mpi_home"]), "archs": (nv or {}).get("archs") or [],
           "platform": detect.platform_tag()}
    env["nccl"] = detect.nccl(params["nccl_home"], params["pythons"])
    unpacked = []
    if params["archive_in"]:
        try:
            unpacked = unpack(params["archive_in"], params["prefix"])
        except (OSError, ValueError, tarfile.TarError) as exc:
            art.facts["archive_error"] = "could not unpack %s: %s" % (params["archive_in"], exc)
    records = {}
    try:
        for tool in TOOLS:
            src = dict(params["builds"].get(tool) or {"enabled": False})
            if src.get("tarball") and params["sources_dir"]:
                src["tarball"] = os.path.join(params["sources_dir"], "%s-%s" % (tool, os.path.basename(src["tarball"])))
            rec = build_one(tool, src, env, params)
            if rec.get("key") in unpacked and rec["state"] == "present":
                rec["state"] = "copied"
            theirs = (params["builder_builds"].get(tool) or {}).get("key")
            if rec["state"] == "waiting" and params["build_differing"] and theirs != rec.get("key"):
                # same image, another key (its MPI or NCCL differs): the builder's copy cannot serve, so build here
                rec = dict(build_one(tool, src, env, dict(params, build=True)),
                           why_here="the node that builds for this image built under key %s, this node needs %s"
                           % (theirs, rec.get("key")))
            records[tool] = rec
    except LockTimeout as exc:
        art.error(str(exc))
        return
    if params["archive_out"]:
        pack(params["archive_out"], params["prefix"], records)
    art.facts.update(builds=records, mpi=env["mpi"], nccl=env["nccl"], cuda=env["cuda"],
                     changed=any(r["state"] in ("built", "copied") for r in records.values()))
