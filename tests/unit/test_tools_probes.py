"""The tools step's node side: wheel-variant choice from recorded nvidia-smi and ROCm outputs (tests/fixtures/tools,
sources in SOURCES.md), os-release families, the distro package maps, why-missing reasons, and real builds with
nvcc and NCCL from the nvidia-nccl-cu13 wheel where this machine has them."""

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from probes.artifact import Artifact
from probes.cli import run_probe
from probes.tools import detect, tools_build, tools_detect, variants
from probes.tools.install import pip_env

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "tools"
PINS = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())["tools_torch_pins"]
PACKAGES = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())["tools_package_names"]
DEFAULTS = yaml.safe_load((ROOT / "roles/tools/defaults/main.yml").read_text())
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from tool_sources import (  # noqa: E402
    elbencho_like_tree,
    elbencho_static_archive,
    ior_like_tree,
    nccl_tests_like_tree,
    tarball,
)

# (fixture, CUDA the driver supports, torch, variant): an old driver gets the newest pinned release that still has
# a build it can load, never one that needs a newer driver.
NVIDIA_CASES = [
    # no pinned build for 11.4 or 11.6: cu118 through CUDA's minor version compatibility
    ("470.57.02_geforce.txt", "11.4", "2.6.0", "cu118"),
    ("510.85.02_a100-80g.txt", "11.6", "2.6.0", "cu118"),
    ("525.60.13_a40.txt", "12.0", "2.6.0", "cu118"),
    ("535.104.05_t4.txt", "12.2", "2.6.0", "cu118"),
    ("535.247.01_a10g.txt", "12.2", "2.6.0", "cu118"),
    ("550.40.07_rtx4070.txt", "12.4", "2.6.0", "cu124"),
    ("550.135_tesla-p4.txt", "12.4", "2.6.0", "cu124"),
    # "CUDA Version: N/A": the driver branch says what it supports
    ("550.54.10_gtx1660_cuda-na.txt", "12.4", "2.6.0", "cu124"),
    ("575.57.08_header-only.txt", "12.9", "2.13.0", "cu126"),
    ("580.82.09_rtx5090-rtx4090.txt", "13.0", "2.13.0", "cu130"),
    ("580.126.09_a100-sxm4-40gb.txt", "13.0", "2.13.0", "cu130"),
    # drivers from 610 print "KMD Version" and "CUDA UMD Version"
    ("610.43.02_b200_kmd-umd-header.txt", "13.3", "2.13.0", "cu130"),
    ("q_450.80.02_quadro-p2200_header.txt", "11.0", "2.6.0", "cu118"),
]


def driver_cuda(text):
    version = detect.nvidia_cuda_version(text) or detect.cuda_for_driver(detect.nvidia_driver_version(text))
    return "%d.%d" % version if version else None


@pytest.mark.parametrize("fixture,cuda,torch,variant", NVIDIA_CASES)
def test_cuda_variant_follows_the_driver(fixture, cuda, torch, variant):
    text = (FIX / "nvidia-smi" / fixture).read_text()
    assert driver_cuda(text) == cuda
    chosen = variants.choose(PINS, cuda=cuda, python="3.11")
    assert (chosen["torch"], chosen["variant"]) == (torch, variant)
    assert chosen["index_url"] == "https://download.pytorch.org/whl/%s" % variant
    assert chosen["why"].startswith("the driver supports CUDA %s" % cuda)
    assert ("minor version compatibility" in chosen["why"]) == (cuda in ("11.0", "11.4", "11.6"))


@pytest.mark.parametrize("fixture", ["error_no-devices-found.txt", "error_couldnt-communicate.txt"])
def test_no_working_driver_gets_the_cpu_build(fixture):
    text = (FIX / "nvidia-smi" / fixture).read_text()
    assert driver_cuda(text) is None
    assert variants.choose(PINS, cuda=None, python="3.11")["variant"] == "cpu"


def test_the_driver_table_agrees_with_every_capture_that_prints_its_cuda():
    for path in sorted((FIX / "nvidia-smi").glob("*.txt")):
        text = path.read_text()
        printed, driver = detect.nvidia_cuda_version(text), detect.nvidia_driver_version(text)
        if printed and driver and not driver.startswith("610"):
            assert detect.cuda_for_driver(driver) == printed, path.name


@pytest.mark.parametrize("rocm,torch,variant", [
    ("6.3.1", "2.6.0", "rocm6.2.4"), ("6.2.4", "2.6.0", "rocm6.2.4"), ("6.1.2", "2.6.0", "rocm6.1"),
    ("7.2.0", "2.13.0", "rocm7.2"), ("7.14", "2.13.0", "rocm7.2"), ("6.0", "2.13.0", "cpu"),
    # MI355X shipped with ROCm 7.0: 2.13's rocm7.2 is newer than the node's ROCm, 2.10 has rocm7.1 and rocm7.0
    ("7.0.2", "2.10.0", "rocm7.0"), ("7.1.1", "2.10.0", "rocm7.1")])
def test_rocm_variant_follows_the_installed_rocm(rocm, torch, variant):
    chosen = variants.choose(PINS, rocm=rocm, python="3.11")
    assert (chosen["torch"], chosen["variant"]) == (torch, variant)


def test_rocm_version_from_the_directory_rocm_points_to():
    # a real `update-alternatives --display rocm`: /opt/rocm -> /opt/rocm-6.3.1 (ROCm 7 may lack .info/version)
    text = (FIX / "rocm" / "6.3.1_update-alternatives.txt").read_text()
    target = next(line.split()[-1] for line in text.splitlines() if "currently points to" in line)
    assert detect.rocm_version_text(Path(target).name) == "6.3.1"
    assert detect.rocm_version_text("6.2.4-120\n") == "6.2.4"


def test_python_too_old_for_the_newest_pin_gets_an_older_release():
    assert variants.choose(PINS, cuda="13.0", python="3.9")["torch"] == "2.6.0"
    assert variants.choose(PINS, cuda="13.0", python="3.8") is None


def test_a_forced_or_unknown_variant():
    with pytest.raises(ValueError, match="unknown torch wheel variant"):
        variants.variant_version("cuda12")
    assert variants.variant_version("rocm6.2.4") == ("rocm", (6, 2, 4))


@pytest.mark.parametrize("fixture,family", [("almalinux-9.2.txt", "redhat"), ("rocky-8.6.txt", "redhat"),
                                            ("ubuntu-22.04.txt", "debian")])
def test_os_release_family(fixture, family):
    assert detect.os_release((FIX / "os-release" / fixture).read_text())["family"] == family


def test_this_machines_os_release_and_package_database():
    osr = detect.os_release(Path("/etc/os-release").read_text())
    assert osr["family"] == "debian" and osr["id"] == "debian"
    have = detect.installed_packages("debian", ["openssh-server", "no-such-package-cmxa"])
    assert have == {"openssh-server": True, "no-such-package-cmxa": False}


def test_every_wanted_tool_has_a_package_on_every_family():
    for tool in DEFAULTS["tools_packages_wanted"] + ["cmake", "boost-program-options", "autotools", "elbencho-build"]:
        assert set(PACKAGES[tool]) == {"debian", "redhat", "suse"}, tool
        assert all(PACKAGES[tool][f] for f in PACKAGES[tool]), tool


@pytest.mark.skipif(not shutil.which("apt-cache"), reason="needs apt-cache (Debian)")
def test_every_debian_package_name_exists_in_the_archive():
    names = sorted({n for rec in PACKAGES.values() for n in rec["debian"]})
    res = subprocess.run(["apt-cache", "show", "--no-all-versions"] + names, capture_output=True, text=True)
    found = {line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("Package: ")}
    assert found == set(names)


def detect_params(**extra):
    return dict({"packages": {"nosuch": {"debian": ["no-such-package-cmxa"], "redhat": ["x"], "suse": ["x"]},
                              "ssh": {"debian": ["openssh-server"], "redhat": ["openssh-server"],
                                      "suse": ["openssh"]}},
                 "wanted": ["nosuch", "ssh", "unknown-tool"]}, **extra)


def test_detect_finds_what_is_missing(tmp_path):
    _, doc = run_probe("tools_detect", str(tmp_path), "r", "h", variant="before",
                       params=detect_params(prefix=str(tmp_path / "p")))
    f = doc["facts"]
    assert doc["status"] == "ok" and f["family"] == "debian" and f["prefix"] == str(tmp_path / "p")
    assert f["missing_packages"] == ["no-such-package-cmxa"] and f["unknown_tools"] == ["unknown-tool"]
    assert f["packages"]["ssh"]["installed"] is True and f["packages"]["nosuch"]["installed"] is False
    assert f["python"]["python"] == sys.executable
    assert "assess_tools" not in f  # only after the package step
    assert tools_detect.default_prefix(0, "/root") == "/opt/clustermax-assess"
    assert tools_detect.default_prefix(1000, "/home/u") == "/home/u/.clustermax-assess"


def test_a_failed_package_step_is_quoted_with_the_command_and_the_variable(tmp_path):
    step = {"asked": ["no-such-package-cmxa"], "ran": True, "failed": True, "rc": 100,
            "msg": "E: Unable to locate package no-such-package-cmxa", "venv": {},
            "builds": {"nccl_tests": {"state": "failed", "reason": "the build failed (rc 2): `make -C x` "
                                      "(tools_nccl_tests / assess_sources.nccl_tests)", "tail": "nccl.h: No such file"},
                       "rccl_tests": {"state": "not_applicable", "reason": "no ROCm on this node"}}}
    _, doc = run_probe("tools_detect", str(tmp_path), "r", "h", variant="after",
                       params=detect_params(prefix=str(tmp_path / "p"), package_step=step))
    env = doc["facts"]["assess_tools"]
    assert env["missing"]["nosuch"] == ("`apt-get install no-such-package-cmxa` failed (rc 100): E: Unable to locate "
                                        "package no-such-package-cmxa (tools_system_packages, tools_package_names)")
    assert env["missing"]["nccl_tests"].startswith("failed: the build failed (rc 2)")
    assert env["missing"]["nccl_tests"].endswith("\nnccl.h: No such file")
    assert "rccl_tests" not in env["missing"] and "ssh" not in env["missing"]
    assert env["python"] is None and env["path"] == []


def test_a_failed_venv_makes_torch_missing_with_its_reason(tmp_path):
    _, doc = run_probe("tools_venv", str(tmp_path), "r", "h", params={
        "prefix": str(tmp_path / "p"), "pins": PINS, "wheelhouse": str(tmp_path / "empty-wheelhouse")})
    assert doc["status"] == "error"
    assert "--no-index --find-links %s" % (tmp_path / "empty-wheelhouse") in doc["reason"]
    assert "assess_wheelhouse" in doc["reason"] and "torch==2.13.0" in doc["reason"]
    assert not (tmp_path / "p" / "venv" / doc["facts"]["key"]).exists()  # a half-made venv is not left
    env = tools_detect.tools_env({"packages": {}, "family": "debian", "mpi": None},
                                 {"venv": dict(doc["facts"], status=doc["status"], reason=doc["reason"])})
    assert env["missing"]["torch"].startswith("the probe venv was not made: `")


def test_an_archive_member_outside_the_prefix_is_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("../../escaped")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="refusing archive member"):
        tools_build.unpack(str(archive), str(tmp_path / "prefix"))
    assert not (tmp_path / "escaped").exists()


@pytest.fixture(scope="module")
def nccl_wheel(tmp_path_factory):
    """NCCL headers and library from the nvidia-nccl-cu13 wheel (PyPI), as a probe venv with CUDA torch has it."""
    if not shutil.which("nvcc"):
        pytest.skip("needs nvcc (this machine kind has CUDA 13.0)")
    tmp = tmp_path_factory.mktemp("nccl")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "nvidia-nccl-cu13", "-d", str(tmp)],
                   check=True, timeout=600)
    with zipfile.ZipFile(next(tmp.glob("*.whl"))) as whl:
        whl.extractall(tmp / "x", [n for n in whl.namelist() if n.startswith("nvidia/nccl/")])
    return tmp / "x" / "nvidia" / "nccl"


def run_build(tmp_path, params):
    """tools_build once, into a new output directory under tmp_path; its artifact."""
    _, doc = run_probe("tools_build", str(tmp_path / ("o%d" % len(list(tmp_path.glob("o*"))))), "r", "h",
                       params=params)
    return doc


def build(tmp_path, prefix, nccl_home, source, **extra):
    builds = {"nccl_tests": {"tarball": str(source)}, "nvbandwidth": {"enabled": False},
              "rccl_tests": {"enabled": True}}
    return run_build(tmp_path, dict({"prefix": str(prefix), "nccl_home": str(nccl_home), "builds": builds}, **extra))


def test_nccl_tests_builds_with_nvcc_and_the_wheels_nccl_then_is_reused_and_copied(tmp_path, nccl_wheel):
    source = tarball(nccl_tests_like_tree(tmp_path / "nccl-tests-2.17.8"), tmp_path / "nccl-tests-2.17.8.tar.gz")
    doc = build(tmp_path, tmp_path / "p", nccl_wheel, source)
    rec = doc["facts"]["builds"]["nccl_tests"]
    assert doc["facts"]["changed"] is True and rec["state"] == "built", rec
    assert rec["binaries"] == ["all_gather_perf", "all_reduce_perf"]
    assert "NCCL_HOME=%s" % (Path(rec["bin_dir"]).parent / "nccl-home") in rec["command"]  # the wheel has no libnccl.so
    assert rec["ld_library_path"][0] == str(nccl_wheel / "lib")
    assert doc["facts"]["builds"]["rccl_tests"]["state"] == "not_applicable"
    out = subprocess.run([str(Path(rec["bin_dir"]) / "all_reduce_perf")], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": rec["ld_library_path"][0], "PATH": "/usr/bin:/bin"})
    assert "nccl 23" in out.stdout  # it links the wheel's NCCL (2.3x); without a GPU CUDA then fails
    again = build(tmp_path, tmp_path / "p", nccl_wheel, source)
    assert again["facts"]["changed"] is False and again["facts"]["builds"]["nccl_tests"]["state"] == "present"
    assert again["facts"]["builds"]["nccl_tests"]["key"] == rec["key"]
    # build once, copy to an identical node: pack here, unpack into another prefix
    packed = build(tmp_path, tmp_path / "p", nccl_wheel, source, build=False,
                   archive_out=str(tmp_path / "builds.tar.gz"))
    assert packed["facts"]["changed"] is False
    waiting = build(tmp_path, tmp_path / "q", nccl_wheel, source, build=False)
    assert waiting["facts"]["builds"]["nccl_tests"]["state"] == "waiting"
    copied = build(tmp_path, tmp_path / "q", nccl_wheel, source, archive_in=str(tmp_path / "builds.tar.gz"))
    assert copied["facts"]["builds"]["nccl_tests"]["state"] == "copied" and copied["facts"]["changed"] is True


def test_a_failed_build_records_the_command_its_last_lines_and_the_variable(tmp_path, nccl_wheel):
    source = tarball(nccl_tests_like_tree(tmp_path / "nccl-tests-2.17.8"), tmp_path / "nccl-tests-2.17.8.tar.gz")
    fake = tmp_path / "fake-nccl"
    (fake / "include").mkdir(parents=True)
    (fake / "lib").mkdir()
    (fake / "include" / "nccl.h.not").write_text("")
    shutil.copy(nccl_wheel / "lib" / "libnccl.so.2", fake / "lib" / "libnccl.so.2")
    (fake / "include" / "nccl.h").write_text("#error not a usable nccl.h\n")
    doc = build(tmp_path, tmp_path / "p", fake, source)
    rec = doc["facts"]["builds"]["nccl_tests"]
    assert doc["status"] == "ok" and rec["state"] == "failed"
    assert rec["reason"].startswith("the build failed (rc 2): `make -C ")
    assert rec["reason"].endswith("(tools_nccl_tests / assess_sources.nccl_tests)")
    assert "not a usable nccl.h" in rec["tail"]
    assert not list((tmp_path / "p" / "build" / "nccl_tests").glob("*/build"))  # no half-made build is kept
    json.dumps(doc)


def test_the_venv_packages_come_from_pypi_or_the_sites_index_never_from_torchs(tmp_path):
    """pyarrow and av are not on PyTorch's index: tools_venv_packages are a pip call of their own after torch; a
    failure there is recorded and leaves the venv (with torch) in use."""
    from probes.tools import tools_venv

    params = {"packages": ["numpy", "av", "pyarrow"], "wheelhouse": "", "index_url": "", "extra_index_urls": [],
              "timeout": 60}
    venv = str(tmp_path / "venv")
    assert tools_venv.packages_argv(venv, params)[6:] == ["numpy", "av", "pyarrow"]  # PyPI, pip's default
    assert tools_venv.packages_argv(venv, dict(params, index_url="https://pypi.example/simple"))[-2:] == [
        "--index-url", "https://pypi.example/simple"]
    assert tools_venv.packages_argv(venv, dict(params, wheelhouse="/w"))[-3:] == ["--no-index", "--find-links", "/w"]
    torch_only = tools_venv.pip_argv(venv, {"torch": "2.13.0", "index_url": "https://download.pytorch.org/whl/cpu"},
                                     params)
    assert "av" not in torch_only and torch_only[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]
    # a venv whose pip finds nothing in an empty wheelhouse: the error is a fact, the marker keeps no packages
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    marker = tmp_path / "venv" / "marker.json"
    marker.write_text(json.dumps({"key": "k"}))
    art = Artifact("tools_venv", "r", "h")
    tools_venv.install_packages(art, venv, dict(params, wheelhouse=str(tmp_path / "empty")), str(marker),
                                pip_env())
    assert art.facts["packages_error"].startswith("`%s -m pip install" % (tmp_path / "venv" / "bin" / "python"))
    assert "tools_venv_packages" in art.facts["packages_error"] and json.loads(marker.read_text()) == {"key": "k"}


def test_gpu_builds_get_torchtitan_in_a_pip_call_of_their_own_with_torch_held(tmp_path):
    """tools_venv_gpu_packages (torchtitan) only on a GPU build, after the other packages and apart from them, with
    torch pinned to the venv's release: a failure there (an old torch pin) leaves numpy, av and pyarrow installed and
    the venv's torch untouched."""
    from probes.tools import tools_venv

    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    venv, marker = str(tmp_path / "venv"), tmp_path / "venv" / "marker.json"
    params = {"packages": ["no-such-package-cmxa"], "gpu_packages": ["torchtitan==0.3.0"],
              "wheelhouse": str(tmp_path / "empty"),
              "index_url": "", "extra_index_urls": [], "timeout": 60}
    env = pip_env()
    for variant, gpu in (("cpu", False), ("cu130", True)):
        marker.write_text(json.dumps({"key": "k"}))
        art = Artifact("tools_venv", "r", "h")
        tools_venv.install_all_packages(art, venv, params, {"torch": "2.13.0", "variant": variant}, str(marker), env)
        assert art.facts["pip_packages"].split()[6:7] == ["no-such-package-cmxa"] and "packages_error" in art.facts
        if not gpu:
            assert art.facts["gpu_packages_wanted"] is None and "pip_gpu_packages" not in art.facts
            continue
        assert art.facts["gpu_packages_wanted"] == ["torchtitan==0.3.0"]
        argv = art.facts["pip_gpu_packages"].split()
        assert argv[6:] == ["torchtitan==0.3.0", "torch==2.13.0", "--no-index", "--find-links", str(tmp_path / "empty")]
        assert "tools_venv_gpu_packages" in art.facts["gpu_packages_error"]
        assert json.loads(marker.read_text()) == {"key": "k"}  # neither call is marked done


def build_io_tools(tmp_path, prefix, mpi_home="", **sources):
    """tools_build of the given sources alone (a build not named is off)."""
    return run_build(tmp_path, {"prefix": str(prefix), "builds": sources, "mpi_home": mpi_home})


@pytest.mark.skipif(not detect.mpi(), reason="needs an MPI with mpicc (openmpi-bin, libopenmpi-dev)")
def test_ior_and_mdtest_build_with_the_nodes_mpicc_from_a_release_or_a_git_checkout(tmp_path):
    mpi = detect.mpi()
    release = tarball(ior_like_tree(tmp_path / "ior-4.0.0"), tmp_path / "ior-4.0.0.tar.gz")
    doc = build_io_tools(tmp_path, tmp_path / "p", ior={"tarball": str(release)})
    rec = doc["facts"]["builds"]["ior"]
    assert rec["state"] == "built" and rec["binaries"] == ["ior", "mdtest"], rec
    out = Path(rec["bin_dir"]).parent
    src = out / "src"
    assert rec["command"] == "cd %s && %s/configure --prefix=%s MPICC=%s/mpicc && make -j%d && make install" % (
        src, src, out, mpi["bin"], os.cpu_count())
    assert "mpi=%s-%s@%s" % (mpi["kind"], mpi["version"], mpi["home"]) in rec["deps"]
    assert rec["ld_library_path"] == [os.path.join(mpi["home"], "lib")]
    assert not src.exists()  # only the executables stay
    # the built program (io_tools_standin.c) runs IOR's command line as a singleton: real I/O, IOR's summary
    ran = subprocess.run([str(Path(rec["bin_dir"]) / "ior"), "-a", "POSIX", "-F", "-w", "-r", "-C", "-e", "-i", "1",
                          "-t", "64k", "-b", "1m", "-o", str(tmp_path / "testfile")],
                         capture_output=True, text=True, timeout=120)
    assert "IOR-standin: MPI Coordinated Test of Parallel I/O" in ran.stdout, ran.stderr[-2000:]
    assert "Summary of all tests:" in ran.stdout
    again = build_io_tools(tmp_path, tmp_path / "p", ior={"tarball": str(release)})
    assert again["facts"]["builds"]["ior"]["state"] == "present" and again["facts"]["changed"] is False
    # a git checkout has no configure: ./bootstrap makes it first
    checkout = tarball(ior_like_tree(tmp_path / "ior", release=False), tmp_path / "ior-git.tar.gz")
    rec = build_io_tools(tmp_path, tmp_path / "q", ior={"tarball": str(checkout)})["facts"]["builds"]["ior"]
    src = Path(rec["bin_dir"]).parent / "src"
    assert rec["state"] == "built" and rec["command"].startswith("cd %s && %s/bootstrap && %s/configure " % (
        src, src, src)), rec


def relocated_hpcx(root):
    """HPC-X's Open MPI as its tarball unpacks it: away from where it was built, so its wrappers find their files
    only through OPAL_PREFIX (hpcx-init.sh's hpcx_load exports it). mpicc here is Open MPI's wrapper as it behaves
    there: without OPAL_PREFIX it looks for its data file under the build prefix and fails with the wrapper's own
    messages; with it, it answers --showme from the relocated tree and compiles through this machine's mpicc (with
    OPAL_PREFIX unset, which would send that wrapper to HPC-X's tree)."""
    real = detect.mpi()
    ompi = root / "ompi"
    (ompi / "bin").mkdir(parents=True)
    (ompi / "include").symlink_to(real["include"])
    (ompi / "lib").symlink_to(real["lib"])
    built = "/build-result/hpcx-v2.24-gcc-doca_ofed-ubuntu24.04-cuda13-x86_64/ompi"
    (ompi / "bin" / "mpicc").write_text(
        '#!/bin/sh\nif [ -z "$OPAL_PREFIX" ]; then\n'
        '  echo "Cannot open configuration file %s/share/openmpi/mpicc-wrapper-data.txt" >&2\n'
        '  echo "Error parsing data file mpicc: Not found" >&2; exit 243\nfi\n'
        'case "$1" in\n--showme:incdirs) echo "$OPAL_PREFIX/include" ;;\n--showme:libdirs) echo "$OPAL_PREFIX/lib" ;;\n'
        '*) exec env -u OPAL_PREFIX %s "$@" ;;\nesac\n' % (built, os.path.join(real["bin"], "mpicc")))
    (ompi / "bin" / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Open MPI) 4.1.7rc1'\n")
    for exe in ("mpicc", "mpirun"):
        (ompi / "bin" / exe).chmod(0o755)
    return ompi


@pytest.mark.skipif(not detect.mpi(), reason="needs an MPI with mpicc (openmpi-bin, libopenmpi-dev)")
def test_ior_builds_with_a_relocated_hpcx_given_its_opal_prefix(tmp_path):
    ompi = relocated_hpcx(tmp_path / "hpcx-v2.24")
    mpi = detect.mpi(str(ompi))
    assert mpi["kind"] == "hpcx" and mpi["env"] == {"OPAL_PREFIX": str(ompi)}
    assert (mpi["include"], mpi["lib"], mpi["home"]) == (str(ompi / "include"), str(ompi / "lib"), str(ompi))
    release = tarball(ior_like_tree(tmp_path / "ior-4.0.0"), tmp_path / "ior-4.0.0.tar.gz")
    doc = build_io_tools(tmp_path, tmp_path / "p", ior={"tarball": str(release)}, mpi_home=str(ompi))
    rec = doc["facts"]["builds"]["ior"]
    assert rec["state"] == "built" and rec["binaries"] == ["ior", "mdtest"], rec
    # the command as one would type it again, with the variable it needed
    assert rec["command"].startswith("export OPAL_PREFIX=%s && cd " % ompi), rec["command"]
    assert "MPICC=%s/bin/mpicc" % ompi in rec["command"]


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_an_air_gapped_build_from_a_git_source_that_does_not_answer_is_missing_and_says_what_to_give(tmp_path):
    """With assess_wheelhouse (offline) a git source is asked first: upstream from a node with no route out is
    missing, naming the tarball to give, before a clone waits on it; a mirror the nodes reach is cloned."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nobody listens on: git is refused at once
    url = "http://127.0.0.1:%d/ior.git" % closed.getsockname()[1]
    try:
        doc = run_build(tmp_path, {"prefix": str(tmp_path / "p"), "offline": True,
                                   "builds": {"elbencho": {"git": url, "ref": "v3.1-11"}}})
    finally:
        closed.close()
    rec = doc["facts"]["builds"]["elbencho"]
    assert rec["state"] == "missing", rec
    assert rec["reason"].startswith("air-gapped run (assess_wheelhouse): %s did not answer (" % url), rec["reason"]
    assert rec["reason"].endswith("give its source as a tarball (assess_sources.elbencho.tarball) or a git mirror "
                                  "the nodes reach"), rec["reason"]
    assert not (tmp_path / "p" / "src").exists() or not any((tmp_path / "p" / "src").iterdir())
    # a mirror that answers (a repository on the node's own disk here) is cloned and built as online
    mirror = elbencho_like_tree(tmp_path / "mirror")
    git = ["git", "-C", str(mirror), "-c", "user.name=t", "-c", "user.email=t@t"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "elbencho"], ["tag", "v3.1-11"]):
        subprocess.run(git + argv, check=True, capture_output=True)
    if not shutil.which("g++"):
        return
    doc = run_build(tmp_path, {"prefix": str(tmp_path / "q"), "offline": True,
                               "builds": {"elbencho": {"git": "file://%s" % mirror, "ref": "v3.1-11"}}})
    assert doc["facts"]["builds"]["elbencho"]["state"] == "built", doc["facts"]["builds"]["elbencho"]


def test_ior_without_an_mpi_compiler_is_missing_naming_the_variables():
    env = {"mpi": None, "cuda": None, "nvidia": None, "rocm": None, "archs": []}
    assert tools_build.needs("ior", env) == ("missing", "no MPI with its compiler wrapper (mpicc) on this node "
                                                        "(tools_mpi_home; tools_packages_wanted: openmpi)")
    assert tools_build.needs("elbencho", env) is None


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_elbencho_builds_with_its_makefile_or_installs_upstreams_static_executable(tmp_path):
    source = tarball(elbencho_like_tree(tmp_path / "elbencho-3.1-11"), tmp_path / "elbencho-3.1-11.tar.gz")
    rec = build_io_tools(tmp_path, tmp_path / "p", elbencho={"tarball": str(source)})["facts"]["builds"]["elbencho"]
    out = Path(rec["bin_dir"]).parent
    assert rec["state"] == "built" and rec["binaries"] == ["elbencho"], rec  # not elbencho-unstripped
    assert rec["command"] == "cd %s/src && make -j%d CUDA_SUPPORT=0 CUFILE_SUPPORT=0" % (out, os.cpu_count())
    assert not (out / "src").exists()
    ran = subprocess.run([str(Path(rec["bin_dir"]) / "elbencho")], capture_output=True, text=True, timeout=60)
    assert "OPERATION" in ran.stdout and "WRITE" in ran.stdout
    # upstream's static archive is the executable alone (no top directory): installed as it is, nothing built
    static = elbencho_static_archive(tmp_path / "elbencho-static-x86_64.tar.gz")
    assert not tools_build.one_top_dir(str(static)) and tools_build.one_top_dir(str(source))
    rec = build_io_tools(tmp_path, tmp_path / "q", elbencho={"tarball": str(static)})["facts"]["builds"]["elbencho"]
    assert rec["state"] == "built" and rec["binaries"] == ["elbencho"], rec
    assert rec["command"] == "installed the release's executable (elbencho)"
    # the arm64 archive names its executable elbencho.aarch64: installed as elbencho
    arm = elbencho_static_archive(tmp_path / "elbencho-static-aarch64.tar.gz", member="elbencho.aarch64")
    rec = build_io_tools(tmp_path, tmp_path / "a", elbencho={"tarball": str(arm)})["facts"]["builds"]["elbencho"]
    assert rec["state"] == "built" and rec["binaries"] == ["elbencho"], rec
    # another architecture's executable does not run here: failed, saying so, nothing kept
    alien = elbencho_static_archive(tmp_path / "elbencho-static-other.tar.gz", runs=False)
    rec = build_io_tools(tmp_path, tmp_path / "x", elbencho={"tarball": str(alien)})["facts"]["builds"]["elbencho"]
    assert rec["state"] == "failed" and rec["reason"] == (
        "the installed elbencho does not run on this node (another CPU architecture's release?): `elbencho "
        "--version` (tools_elbencho / assess_sources.elbencho)"), rec
    assert not list((tmp_path / "x" / "build" / "elbencho").glob("*/*"))
    # a source tree that makes no elbencho: failed, naming where it looked and the variable
    broken = tmp_path / "broken"
    (broken / "Makefile").parent.mkdir()
    (broken / "Makefile").write_text("all:\n\t@echo nothing to build\n")
    rec = build_io_tools(tmp_path, tmp_path / "r", elbencho={"tarball": str(tarball(broken, tmp_path / "b.tar.gz"))})
    rec = rec["facts"]["builds"]["elbencho"]
    assert rec["state"] == "failed" and rec["reason"].startswith("the build made no executables in ")
    assert rec["reason"].endswith("/src/bin/elbencho (tools_elbencho / assess_sources.elbencho)")
    assert not list((tmp_path / "r" / "build" / "elbencho").glob("*/*"))  # nothing half-made is kept
