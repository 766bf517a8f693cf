"""The tools step on fresh real GPU nodes: apt's lists refreshed before the install, a torch that runs on the node's
GPUs (and is checked on them), RHEL's split Open MPI layout, keys per CPU architecture and OS on a shared prefix, an
MPI runtime without its development files, Python 3.14's tar filter, and nodes of one image whose keys differ."""

import io
import json
import os
import platform
import re
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from probes.artifact import Artifact
from probes.cli import run_probe
from probes.tools import detect, tools_build, tools_detect, tools_venv, variants

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "tools"
ROLE = ROOT / "roles" / "tools"
PINS = yaml.safe_load((ROLE / "vars/main.yml").read_text())["tools_torch_pins"]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from tool_sources import elbencho_static_archive  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# 1. apt's lists before the install


def tasks(name):
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_debian_nodes_refresh_apts_lists_before_the_install_and_a_failed_refresh_does_not_stop_it():
    """A fresh Ubuntu node has empty or stale lists: `apt install` then fails "No package matching". The lists are
    refreshed first, in a task of its own (ansible.builtin.apt with update_cache fails without installing when the
    refresh fails: a node with no mirror but a filled cache, like the test cluster's hosts, must still install)."""
    main = tasks("main.yml")
    names = [t["name"] for t in main]
    refresh = next(t for t in main if "ansible.builtin.apt" in t)
    install = next(t for t in main if t["name"] == "Tools | install the missing system packages")
    assert names.index(refresh["name"]) < names.index(install["name"])
    assert refresh["ansible.builtin.apt"]["update_cache"] is True
    assert refresh["ansible.builtin.apt"]["cache_valid_time"] == 3600
    assert "name" not in refresh["ansible.builtin.apt"]  # the refresh alone
    assert refresh["failed_when"] is False and refresh["changed_when"] is False
    assert "tools_found.family | default('') == 'debian'" in refresh["when"]
    assert refresh["become"] == install["become"]
    # the install never refreshes on its own (a failed refresh would fail it): the other families keep package
    assert "ansible.builtin.package" in install and "update_cache" not in install["ansible.builtin.package"]
    after = next(t for t in main if t["name"] == "Tools | what the node has now")
    assert "'refresh':" in after["clustermax.assess.probe"]["params"]["package_step"]


def test_a_failed_refresh_is_quoted_when_the_install_fails_too():
    step = {"asked": ["perftest"], "ran": True, "failed": True, "rc": 100,
            "msg": "No package matching 'perftest' is available",
            "refresh": {"ran": True, "failed": True,
                        "msg": "Failed to update apt cache after 3 retries: W:Failed to fetch "
                               "http://archive.ubuntu.com/ubuntu/dists/noble/InRelease"}}
    rec = {"names": ["perftest"], "installed": False, "note": None}
    why = tools_detect.package_reason("perftest", rec, step, "debian")
    assert why.startswith("`apt-get install perftest` failed (rc 100): No package matching 'perftest' is available; "
                          "`apt-get update` failed before it")
    assert "Failed to fetch http://archive.ubuntu.com" in why and why.endswith(
        "(tools_system_packages, tools_package_names)")
    ok = dict(step, refresh={"ran": True, "failed": False, "msg": ""})
    assert "apt-get update" not in tools_detect.package_reason("perftest", rec, ok, "debian")


# ---------------------------------------------------------------------------------------------------------------
# 2. a torch with kernels for the node's GPUs

# Compute capability of the GPUs the captures name (NVIDIA's "CUDA GPUs" table: developer.nvidia.com/cuda-gpus).
CC = {"NVIDIA B200": "100", "NVIDIA GeForce RTX 5090": "120", "NVIDIA GeForce RTX 4090": "89",
      "NVIDIA A100-SXM4-40GB": "80", "Tesla P4": "61"}


def capture(name):
    text = (FIX / "nvidia-smi" / name).read_text()
    version = detect.nvidia_cuda_version(text) or detect.cuda_for_driver(detect.nvidia_driver_version(text))
    gpus = sorted({g for g in CC if re.search(r"\| +\d+ +%s " % re.escape(g), text)})
    return "%d.%d" % version, gpus


@pytest.mark.parametrize("fixture,torch,variant", [
    ("610.43.02_b200_kmd-umd-header.txt", "2.13.0", "cu130"),
    ("580.82.09_rtx5090-rtx4090.txt", "2.13.0", "cu130"),  # sm_120 and sm_89 (sm_86 kernels) in one node
    ("580.126.09_a100-sxm4-40gb.txt", "2.13.0", "cu130"),
    ("550.135_tesla-p4.txt", "2.6.0", "cu124"),  # sm_61 runs cu124's sm_60 kernels
])
def test_the_variant_has_kernels_for_the_captured_gpus(fixture, torch, variant):
    cuda, gpus = capture(fixture)
    assert gpus, fixture
    chosen = variants.choose(PINS, cuda=cuda, python="3.11", archs=[CC[g] for g in gpus], names=gpus)
    assert (chosen["torch"], chosen["variant"]) == (torch, variant)


def test_volta_and_pascal_on_a_cuda_13_driver_get_cu126_not_cu130_which_starts_at_turing():
    cuda, _ = capture("580.126.09_a100-sxm4-40gb.txt")  # driver 580: CUDA 13.0
    for arch in ("70", "61"):  # V100, Tesla P4
        chosen = variants.choose(PINS, cuda=cuda, python="3.12", archs=[arch])
        assert (chosen["torch"], chosen["variant"]) == ("2.13.0", "cu126"), arch
    assert variants.runs_on("cu130", "75") and not variants.runs_on("cu130", "70")


# A site's pins without the cu128 release (tools_torch_pins set to 2.13 alone): what a node none of them covers gets.
ONLY_2_13 = [p for p in PINS if p["torch"] == "2.13.0"]


@pytest.mark.parametrize("driver", ["570.133.20", "575.57.08"])
def test_blackwell_on_a_cuda_12_8_or_12_9_driver_gets_the_cu128_release(driver):
    """torch 2.13's cu126 has kernels up to sm_90 and no PTX, and its cu130 needs driver 580: the shipped pins' 2.11
    cu128 (7.0-12.0) runs there; an H100 beside it keeps 2.13's cu126."""
    cuda = capture("575.57.08_header-only.txt")[0] if driver.startswith("575") else \
        "%d.%d" % detect.cuda_for_driver(driver)
    for archs, names in ((["100"], ["NVIDIA B200"]), (["103"], ["NVIDIA B300 SXM6 AC"])):
        chosen = variants.choose(PINS, cuda=cuda, python="3.12", archs=archs, names=names)
        assert (chosen["torch"], chosen["variant"]) == ("2.11.0", "cu128"), chosen
    chosen = variants.choose(PINS, cuda=cuda, python="3.12", archs=["90"], names=["NVIDIA H100 80GB HBM3"])
    assert (chosen["torch"], chosen["variant"]) == ("2.13.0", "cu126")


@pytest.mark.parametrize("driver", ["570.133.20", "575.57.08"])
def test_blackwell_on_a_cuda_12_8_or_12_9_driver_gets_no_torch_that_cannot_run_on_it(driver):
    """With pins that have no cu128 build (2.13 alone): torch 2.13's cu126 has kernels up to sm_90 and no PTX; its
    cu130 needs driver 580. Not cu126 (it would import, say is_available(), and fail its first kernel), but a reason
    naming the GPUs and the variants."""
    if driver.startswith("575"):
        cuda, _ = capture("575.57.08_header-only.txt")
    else:
        cuda = "%d.%d" % detect.cuda_for_driver(driver)
    for archs, names in ((["100"], ["NVIDIA B200"]), (["103"], ["NVIDIA B300 SXM6 AC"])):
        chosen = variants.choose(ONLY_2_13, cuda=cuda, python="3.12", archs=archs, names=names)
        assert chosen["variant"] is None and chosen["torch"] is None
        why = chosen["why"]
        assert "compute capability %s (%s)" % (variants.cc_text(archs[0]), names[0]) in why
        assert "CUDA %s" % cuda in why and "2.13.0 cu126" in why and "kernels for 5.0-9.0" in why
        assert "the driver is too old for torch 2.13.0 cu130" in why and "tools_torch_pins" in why


def test_tools_venv_refuses_a_blackwell_node_it_has_no_build_for(tmp_path, monkeypatch):
    monkeypatch.setattr(detect, "nvidia", lambda: {"driver": "570.133.20", "cuda": "12.8", "archs": ["100"],
                                                   "names": ["NVIDIA B200"], "gpus": 8, "error": None})
    monkeypatch.setattr(detect, "rocm", lambda: None)
    art = Artifact("tools_venv", "r", "h")
    tools_venv.run(art, {"prefix": str(tmp_path), "pins": ONLY_2_13, "index_url": "", "variant": "", "wheelhouse": "",
                         "extra_index_urls": [], "packages": [], "gpu_packages": [], "min_free_gib": 0,
                         "timeout": 60}, str(tmp_path))
    assert art.status == "error" and "NVIDIA B200" in art.reason and "no kernel image" in art.reason
    assert not (tmp_path / "venv").exists()  # nothing installed


# What torch prints for a GPU its build has no kernels for (its warning at import, then the kernel's error).
NO_KERNEL_OUTPUT = """\
/v/lib/python3.12/site-packages/torch/cuda/__init__.py:262: UserWarning:
NVIDIA B200 with CUDA capability sm_100 is not compatible with the current PyTorch installation.
The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.
Traceback (most recent call last):
  File "<string>", line 2, in <module>
RuntimeError: CUDA error: no kernel image is available for execution on the device
"""


def made_venv(prefix, key, device_output, device_rc):
    """A venv of `key` whose marker says it is made; its python answers python_info, and the device check as
    given."""
    venv = Path(prefix) / "venv" / key
    (venv / "bin").mkdir(parents=True)
    (venv / "marker-out.txt").write_text(device_output)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\ncase \"$2\" in\n*device=*) cat %s; exit %d ;;\n"
                      "*) echo '{\"version\": \"3.12\", \"torch\": \"2.13.0+cu126\"}' ;;\nesac\n"
                      % (venv / "marker-out.txt", device_rc))
    python.chmod(0o755)
    from probes.tools.install import VENV_MARKER, write_marker
    write_marker(str(venv / VENV_MARKER), {"key": key, "torch": "2.13.0+cu126", "variant": "cu126",
                                           "packages": [], "gpu_packages": []})
    return venv


@pytest.mark.parametrize("output,rc,status", [(NO_KERNEL_OUTPUT, 1, "error"),
                                              ("device-check 2.0 NVIDIA H100 80GB HBM3\n", 0, "ok")])
def test_the_venv_must_run_one_op_on_the_gpu(tmp_path, monkeypatch, output, rc, status):
    """torch imports and is_available() is True on a GPU it has no kernels for: one op on the device tells."""
    nv = {"driver": "570.133.20", "cuda": "12.8", "archs": ["90"], "names": ["NVIDIA H100 80GB HBM3"], "gpus": 8,
          "error": None}
    monkeypatch.setattr(detect, "nvidia", lambda: nv)
    monkeypatch.setattr(detect, "rocm", lambda: None)
    python, _, _, chosen = tools_venv.plan({"pins": PINS, "index_url": "", "variant": ""})
    assert chosen["variant"] == "cu126"
    made_venv(tmp_path, tools_venv.venv_key(python, chosen), output, rc)
    art = Artifact("tools_venv", "r", "h")
    tools_venv.run(art, {"prefix": str(tmp_path), "pins": ONLY_2_13, "index_url": "", "variant": "", "wheelhouse": "",
                         "extra_index_urls": [], "packages": [], "gpu_packages": [], "min_free_gib": 0,
                         "timeout": 60}, str(tmp_path))
    assert art.status == status, art.reason
    assert art.facts["device_check"]["ok"] is (status == "ok")
    if status == "error":
        assert "has no kernels for this node's GPUs (NVIDIA H100 80GB HBM3)" in art.reason
        assert "no kernel image is available" in art.reason and "tools_torch_pins" in art.reason


def test_the_cpu_build_is_not_checked_on_a_device(tmp_path):
    art = Artifact("tools_venv", "r", "h")
    assert tools_venv.check_device(art, "/nonexistent/python", {"torch": "2.13.0", "variant": "cpu"},
                                   {"gpus": 8}, None) is None
    assert tools_venv.check_device(art, "/nonexistent/python", {"torch": "2.13.0", "variant": "cu130"},
                                   None, None) is None
    assert "device_check" not in art.facts


# ---------------------------------------------------------------------------------------------------------------
# 3. RHEL's Open MPI: mpi.h and libmpi in two places


def rhel_openmpi(root):
    """openmpi-devel's layout on RHEL/Rocky (Fedora's MPI packaging guidelines, as the Fedora specs that build against
    it spell it: %{_includedir}/openmpi-%{_arch} and %{_libdir}/openmpi/lib): mpicc in /usr/lib64/openmpi/bin, a stub
    answering --showme:incdirs/--showme:libdirs with those two directories, as the real wrapper does."""
    inc = root / "usr/include/openmpi-x86_64"
    lib = root / "usr/lib64/openmpi/lib"
    bindir = root / "usr/lib64/openmpi/bin"
    for d in (inc, lib, bindir):
        d.mkdir(parents=True)
    (inc / "mpi.h").write_text("/* mpi.h */\n")
    (lib / "libmpi.so.40").write_text("")
    (lib / "libmpi.so").symlink_to("libmpi.so.40")
    (bindir / "mpicc").write_text("#!/bin/sh\ncase \"$1\" in\n--showme:incdirs) echo %s ;;\n"
                                  "--showme:libdirs) echo %s ;;\n*) exit 1 ;;\nesac\n" % (inc, lib))
    (bindir / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Open MPI) 4.1.1'\n")
    for exe in ("mpicc", "mpirun"):
        (bindir / exe).chmod(0o755)
    return inc, lib, bindir


def test_rhel_open_mpi_gets_an_mpi_home_with_include_and_lib(tmp_path):
    inc, lib, bindir = rhel_openmpi(tmp_path / "rhel")
    mpi = detect.mpi(str(bindir.parent))
    assert mpi["kind"] == "openmpi" and mpi["version"] == "4.1.1"
    assert (mpi["include"], mpi["lib"]) == (str(inc), str(lib))
    assert mpi["home"] != str(inc.parent)  # not /usr/include
    env = {"cuda": {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "12.8"},
           "nccl": {"home": "/usr", "include": "/usr/include", "lib": "/usr/lib64", "version": "2.27.3"},
           "mpi": mpi, "archs": ["90"], "rocm": None}
    out = tmp_path / "out"
    steps, _, libs, _ = tools_build.recipe("nccl_tests", "/src", str(out), env, 8)
    home = next(a.split("=", 1)[1] for a in steps[0] if a.startswith("MPI_HOME="))
    # nccl-tests' Makefile: -I$(MPI_HOME)/include -L$(MPI_HOME)/lib -lmpi
    assert os.path.isfile(os.path.join(home, "include", "mpi.h"))
    assert os.path.exists(os.path.join(home, "lib", "libmpi.so"))
    assert str(lib) in libs
    steps, _, libs, _ = tools_build.recipe("ior", "/src", str(tmp_path / "ior"), env, 8)
    assert libs == [str(lib)]


def test_debian_open_mpi_keeps_its_own_home():
    mpi = detect.mpi()
    if not mpi or not os.path.isfile(os.path.join(mpi["include"], "mpi.h")):
        pytest.skip("needs an MPI with its development files")
    assert tools_build.mpi_link_dir(mpi, "/nonexistent") in (mpi["home"], "/nonexistent/mpi-home")
    if os.path.isfile(os.path.join(mpi["home"], "include", "mpi.h")):
        assert tools_build.mpi_link_dir(mpi, "/nonexistent") == mpi["home"]


# ---------------------------------------------------------------------------------------------------------------
# 4. keys per CPU architecture and OS


@pytest.mark.parametrize("a,b", [(("x86_64", "24.04"), ("aarch64", "24.04")),
                                 (("x86_64", "22.04"), ("x86_64", "24.04"))])
def test_build_and_venv_keys_name_the_cpu_architecture_and_the_os(monkeypatch, a, b):
    env = {"cuda": {"version": "13.0"}, "archs": ["90"], "rocm": None,
           "nccl": {"version": "2.27.7", "lib": "/home/u/.clustermax-assess/venv/x/nvidia/nccl/lib"},
           "mpi": {"kind": "openmpi", "version": "4.1.6", "home": "/usr/lib/openmpi"}}
    chosen = {"torch": "2.13.0", "variant": "cu130"}
    keys = []
    for machine, version in (a, b):
        monkeypatch.setattr(platform, "machine", lambda m=machine: m)
        monkeypatch.setattr(detect, "read_text", lambda path, v=version: (
            'ID=ubuntu\nVERSION_ID="%s"\n' % v if path == "/etc/os-release" else None))
        keys.append({t: tools_build.build_key(t, "git:x@v", env)[0] for t in tools_build.TOOLS if t != "rccl_tests"}
                    | {"venv": tools_venv.venv_key("3.12", chosen)})
    for tool in keys[0]:
        assert keys[0][tool] != keys[1][tool], tool
    assert keys[1]["venv"] == "py3.12-%s-ubuntu%s-torch2.13.0-cu130" % b


# ---------------------------------------------------------------------------------------------------------------
# 5. an MPI runtime without mpicc and mpi.h


def test_an_open_mpi_runtime_alone_asks_for_the_dev_package(tmp_path, monkeypatch):
    runtime = tmp_path / "usr/bin"
    runtime.mkdir(parents=True)
    (runtime / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Open MPI) 4.1.6'\n")
    (runtime / "mpirun").chmod(0o755)
    mpi = {"kind": "openmpi", "version": "4.1.6", "home": str(tmp_path / "usr/lib/x86_64-linux-gnu/openmpi"),
           "include": str(tmp_path / "usr/lib/x86_64-linux-gnu/openmpi/include"),
           "lib": str(tmp_path / "usr/lib/x86_64-linux-gnu/openmpi/lib"), "mpirun": str(runtime / "mpirun"),
           "bin": str(runtime)}
    packages = yaml.safe_load((ROLE / "vars/main.yml").read_text())["tools_package_names"]
    monkeypatch.setattr(detect, "os_release", lambda text: {"id": "ubuntu", "version_id": "24.04", "family": "debian",
                                                            "id_like": "debian", "pretty_name": "Ubuntu 24.04"})
    monkeypatch.setattr(detect, "installed_packages", lambda fam, names, timeout=30: {
        n: n != "libopenmpi-dev" for n in names})
    monkeypatch.setattr(detect, "mpi", lambda home="": mpi)
    for f in ("cuda_toolkit", "nvidia", "rocm", "nccl"):
        monkeypatch.setattr(detect, f, lambda *a, **k: None)
    params = {"packages": packages, "wanted": ["openmpi", "fio"], "prefix": str(tmp_path / "p"), "mpi_home": "",
              "cuda_home": "", "nccl_home": "", "pins": [], "variant": "", "inference_pins": {}, "package_step": {}}
    art = Artifact("tools_detect", "r", "h")
    tools_detect.run(art, params, str(tmp_path))
    assert art.facts["missing_packages"] == ["libopenmpi-dev"]
    assert art.facts["packages"]["openmpi"]["installed"] is False
    assert "no development files (mpicc, mpi.h)" in art.facts["packages"]["openmpi"]["note"]
    # with them (HPC-X, or libopenmpi-dev's mpicc and mpi.h), nothing is asked for
    (runtime / "mpicc").write_text("#!/bin/sh\n")
    (runtime / "mpicc").chmod(0o755)
    Path(mpi["include"]).mkdir(parents=True)
    (Path(mpi["include"]) / "mpi.h").write_text("")
    art = Artifact("tools_detect", "r", "h")
    tools_detect.run(art, params, str(tmp_path))
    assert art.facts["missing_packages"] == [] and art.facts["packages"]["openmpi"]["installed"] is True


# ---------------------------------------------------------------------------------------------------------------
# 6. Python 3.14's default tar filter and the link directories' absolute symlinks


def test_a_copy_with_the_link_directories_unpacks_under_the_data_filter_default(tmp_path, monkeypatch):
    wheel = tmp_path / "venv/site-packages/nvidia/nccl"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    (wheel / "lib/libnccl.so.2").write_text("")
    out = tmp_path / "A/build/nccl_tests/k1"
    (out / "build").mkdir(parents=True)
    nccl = {"home": str(wheel), "include": str(wheel / "include"), "lib": str(wheel / "lib")}
    assert tools_build.nccl_link_dir(nccl, str(out)) == str(out / "nccl-home")
    (out / "build/all_reduce_perf").write_text("")
    tools_build.write_marker(str(out / tools_build.MARKER), {"key": "k1"})
    tools_build.pack(str(tmp_path / "a.tgz"), str(tmp_path / "A"), {"nccl_tests": {"state": "built", "key": "k1"}})
    # Python 3.14 extracts with filter="data" unless told otherwise (PEP 706), which refuses absolute links
    orig = tarfile.TarFile.extractall
    monkeypatch.setattr(tarfile.TarFile, "extractall", lambda self, path=".", members=None, **kw: orig(
        self, path, members, filter=kw.pop("filter", "data"), **kw))
    assert tools_build.unpack(str(tmp_path / "a.tgz"), str(tmp_path / "B")) == ["k1"]
    assert os.readlink(tmp_path / "B/build/nccl_tests/k1/nccl-home/include") == str(wheel / "include")
    # the members are still checked first
    with tarfile.open(tmp_path / "evil.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="refusing archive member"):
        tools_build.unpack(str(tmp_path / "evil.tgz"), str(tmp_path / "C"))


# ---------------------------------------------------------------------------------------------------------------
# 7. nodes of one image whose keys differ


def test_a_node_whose_key_differs_from_the_builders_builds_for_itself_after_the_unpack(tmp_path):
    archive = elbencho_static_archive(tmp_path / "elbencho-static-x86_64.tar.gz")
    params = {"prefix": str(tmp_path / "p"), "builds": {"elbencho": {"tarball": str(archive)}}, "build": False}
    _, waiting = run_probe("tools_build", str(tmp_path / "o1"), "r", "h", params=params)
    rec = waiting["facts"]["builds"]["elbencho"]
    assert rec["state"] == "waiting"
    # the builder's copy is under its own key (another MPI, NCCL): this node builds what it still waits for
    builder = {"elbencho": {"state": "built", "key": "0123456789abcdef"}}
    _, done = run_probe("tools_build", str(tmp_path / "o2"), "r", "h",
                        params=dict(params, build_differing=True, builder_builds=builder))
    built = done["facts"]["builds"]["elbencho"]
    assert built["state"] == "built" and built["key"] == rec["key"], built
    assert "0123456789abcdef" in built["why_here"]
    # under the builder's own key it waits for the builder's record (a failed build is not tried on every node)
    _, same = run_probe("tools_build", str(tmp_path / "o3"), "r", "h", params=dict(
        params, prefix=str(tmp_path / "q"), build_differing=True,
        builder_builds={"elbencho": {"state": "failed", "key": rec["key"]}}))
    assert same["facts"]["builds"]["elbencho"]["state"] == "waiting"


def test_the_role_unpacks_and_builds_on_the_nodes_that_still_wait():
    build = tasks("build.yml")
    unpack = next(t for t in build if t["name"].startswith("Tools | unpack the copy"))
    params = unpack["clustermax.assess.probe"]["params"]
    assert "'build_differing': true" in params and "builder_builds" in params
    assert "tools_builder != inventory_hostname and waiting | length > 0" in unpack["when"]
    json.dumps(unpack)


# ---------------------------------------------------------------------------------------------------------------
# 6. a CUDA toolkit newer than the driver's CUDA


def recorded_driver(fixture):
    """What detect.nvidia() makes of a recorded nvidia-smi."""
    text = (FIX / "nvidia-smi" / fixture).read_text()
    driver = detect.nvidia_driver_version(text)
    cuda = detect.nvidia_cuda_version(text) or detect.cuda_for_driver(driver)
    return {"driver": driver, "cuda": "%d.%d" % cuda, "archs": ["90"], "gpus": 8, "error": None}


def toolkit(root, release):
    """A toolkit directory whose nvcc prints `nvcc --version` as CUDA's does
    (tests/fixtures/audit/software/cuda-11.5_nvcc-version.txt), for that release."""
    (root / "bin").mkdir(parents=True)
    (root / "lib64").mkdir()
    (root / "bin" / "nvcc").write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release %s, V%s.0'\n"
        % (release, release))
    (root / "bin" / "nvcc").chmod(0o755)
    return root


def test_the_toolkit_that_runs_on_the_driver_is_taken_before_a_newer_one(tmp_path, monkeypatch):
    """/usr/local/cuda pointing at 13.0 beside a 12.8 on a driver 575 node (CUDA 12.9): the 12.8, whose builds
    run there (a 13.x build stops at its first call); on a driver 580 node (CUDA 13.0) the 13.0."""
    new, old = toolkit(tmp_path / "cuda-13.0", "13.0"), toolkit(tmp_path / "cuda-12.8", "12.8")
    (tmp_path / "cuda").symlink_to(new)
    monkeypatch.setattr(detect, "CUDA_ROOTS", [str(tmp_path / "cuda")])
    monkeypatch.setattr(detect, "CUDA_VERSIONED", str(tmp_path / "cuda-*"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    driver = recorded_driver("575.57.08_header-only.txt")
    assert driver["cuda"] == "12.9"
    chosen = detect.cuda_toolkit("", driver["cuda"])
    assert (chosen["version"], chosen["home"]) == ("12.8", str(old))
    assert detect.cuda_toolkit("", recorded_driver("580.126.09_a100-sxm4-40gb.txt")["cuda"])["home"] == str(new)
    # the user's tools_cuda_home is taken as given; the build then says why it cannot use it
    assert detect.cuda_toolkit(str(new), driver["cuda"])["home"] == str(new)
    env = {"cuda": detect.cuda_toolkit(str(new), driver["cuda"]), "nvidia": driver,
           "nccl": {"home": "/usr", "include": "/usr/include", "lib": "/usr/lib64", "version": "2.27.3"},
           "mpi": None, "archs": ["90"], "rocm": None}
    assert tools_build.needs("nccl_tests", env) == ("missing", (
        "the CUDA toolkit 13.0 at %s is newer than the driver's CUDA 12.9 (driver 575.57.08): what it builds would "
        "stop at its first call (\"CUDA driver version is insufficient for CUDA runtime version\"); install a "
        "CUDA 12.x toolkit or give tools_cuda_home" % new))
    # a 12.x toolkit on that driver builds, and nccl-tests' libcudart comes from its lib64
    env["cuda"] = chosen
    assert tools_build.needs("nccl_tests", env) is None
    _, _, libs, _ = tools_build.recipe("nccl_tests", "/src", str(tmp_path / "out"), env, 8)
    assert libs == ["/usr/lib64", str(old / "lib64")]

