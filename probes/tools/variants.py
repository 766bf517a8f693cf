"""Which PyTorch build fits a node: the CUDA wheel variant follows the CUDA version the driver supports (what
nvidia-smi prints), the ROCm variant the installed ROCm, the CPU build otherwise.

`pins` is the list from roles/tools/vars/main.yml (tools_torch_pins), newest release first:
    [{"torch": "2.9.1", "variants": ["cu130", "cu128", "cu126", "rocm6.4", "cpu"], "python": ["3.10", ...]}, ...]
The first release that has a variant the node can run wins, so an old driver gets the newest release that still
ships a build for it rather than a build it cannot load. A CUDA variant fits when its CUDA version is at most the
driver's (a wheel's runtime needs a driver at least that new; PyTorch bundles the runtime, not the driver); a ROCm
variant fits when it has the installed ROCm's major version and is not newer than it. Only where no pinned build
is that old does a CUDA build of the driver's major version count (CUDA's minor version compatibility).

A CUDA variant must also carry kernels for every GPU of the node (`archs`, nvidia-smi's compute_cap: "90", "100"):
a wheel without them imports, torch.cuda.is_available() is True, and the first kernel fails "no kernel image is
available for execution on the device". CUDA_ARCHS lists what each variant is built for, from PyTorch's RELEASE.md
("12.6.3 Maxwell(5.0)..Hopper(9.0); 13.0.2 and 13.2.1 Turing(7.5)..Blackwell(10.0, 12.0+PTX)"; the cu128 wheels
cover Volta(7.0)..Blackwell(10.0, 12.0); tests/fixtures/tools/pytorch-variants.md). A GPU runs a kernel built for
its major version and an equal or lower minor one (sm_86 code on sm_89, sm_100 on sm_103), or PTX of an equal or
older architecture (JIT). A node whose GPUs no pinned variant covers gets no variant (`variant` None) and a `why`
naming its GPUs and the variants, not a torch that cannot run on them.
"""

import re

DEFAULT_INDEX = "https://download.pytorch.org/whl/%s"


def version_tuple(text):
    """"12.8" -> (12, 8): the numbers of a version, for comparing; () when there are none."""
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


def variant_version(variant):
    """"cu128" -> ("cuda", (12, 8)); "cu118" -> ("cuda", (11, 8)); "rocm6.4" -> ("rocm", (6, 4));
    "cpu" -> ("cpu", ())."""
    if variant == "cpu":
        return "cpu", ()
    m = re.match(r"^cu(\d+)(\d)$", variant)
    if m:
        return "cuda", (int(m.group(1)), int(m.group(2)))
    m = re.match(r"^rocm(\d+)\.(\d+)(?:\.(\d+))?$", variant)
    if m:
        return "rocm", tuple(int(g) for g in m.groups() if g is not None)
    raise ValueError("unknown torch wheel variant %r (expected cpu, cuNNN or rocmX.Y)" % variant)


# CUDA wheel variant -> (compute capabilities with kernels (SASS), the one with PTX or None). Variants not listed
# (a newer cuNNN) are taken to cover every GPU: nothing is known against them.
_MAXWELL_TO_HOPPER = ("50", "60", "70", "75", "80", "86", "90")
CUDA_ARCHS = {
    "cu118": (_MAXWELL_TO_HOPPER, None), "cu121": (_MAXWELL_TO_HOPPER, None), "cu124": (_MAXWELL_TO_HOPPER, None),
    "cu126": (_MAXWELL_TO_HOPPER, None),
    "cu128": (("70", "75", "80", "86", "90", "100", "120"), None),
    "cu129": (("70", "75", "80", "86", "90", "100", "120"), None),
    "cu130": (("75", "80", "86", "90", "100", "120"), "120"),
    "cu132": (("75", "80", "86", "90", "100", "120"), "120"),
}


def cc(arch):
    """"90" -> (9, 0); "100" -> (10, 0); "8.6" -> (8, 6): nvidia-smi's compute_cap with or without its dot."""
    text = str(arch).replace(".", "")
    return int(text[:-1] or 0), int(text[-1])


def cc_text(arch):
    return "%d.%d" % cc(arch)


def runs_on(variant, arch):
    """True when the CUDA variant has kernels (or PTX) that run on a GPU of compute capability `arch`."""
    if variant not in CUDA_ARCHS:
        return True
    sass, ptx = CUDA_ARCHS[variant]
    major, minor = cc(arch)
    return (any(cc(a)[0] == major and cc(a)[1] <= minor for a in sass)
            or (ptx is not None and cc(ptx) <= (major, minor)))


def arch_range(variant):
    """"cu126" -> "5.0-9.0"; "cu130" -> "7.5-12.0+PTX"."""
    if variant not in CUDA_ARCHS:
        return "unknown"
    sass, ptx = CUDA_ARCHS[variant]
    return "%s-%s%s" % (cc_text(sass[0]), cc_text(sass[-1]), "+PTX" if ptx else "")


def fits(variant, cuda=None, rocm=None, minor_compat=False):
    kind, ver = variant_version(variant)
    if kind == "cuda":
        have = version_tuple(cuda)[:2]
        # minor version compatibility: a build for CUDA X.y runs on any driver for CUDA X (X >= 11)
        return bool(cuda) and (ver <= have or (minor_compat and ver[0] == have[0] and ver[0] >= 11))
    if kind == "rocm":
        have = version_tuple(rocm)
        return bool(have) and ver[0] == have[0] and ver <= have[:len(ver)]
    return True


def choose(pins, cuda=None, rocm=None, python=None, index_url="", archs=(), names=()):
    """-> {torch, variant, index_url, why} for a node whose driver supports CUDA `cuda` ("12.4") and/or has ROCm
    `rocm` ("6.2.4"), running Python `python` ("3.11"), with NVIDIA GPUs of compute capabilities `archs` ("90",
    "100"; names: their product names, for the reason). The GPU kind the node has decides the family: with a CUDA
    driver only CUDA variants (and the CPU build as the last resort) are considered, with ROCm only ROCm ones.
    A CUDA node whose GPUs no loadable pinned variant has kernels for gets variant None and the reason in why."""
    family = "cuda" if cuda else "rocm" if rocm else "cpu"
    archs = sorted(set(archs or ()), key=cc)
    passed_over = []  # (torch, variant, the GPUs' archs it has no kernels for)
    # first a build no newer than the driver; only then one that relies on CUDA's minor version compatibility
    # (a GPU measured on the CPU would be worse than a build that may miss a newer driver's features)
    for minor_compat in (False, True):
        for pin in pins:
            if python and pin.get("python") and python not in pin["python"]:
                continue
            for variant in pin["variants"]:
                kind = variant_version(variant)[0]
                if kind == family and fits(variant, cuda, rocm, minor_compat):
                    lacking = [a for a in archs if not runs_on(variant, a)] if family == "cuda" else []
                    if lacking:
                        passed_over.append((pin["torch"], variant, lacking))
                        continue
                    why = {"cuda": "the driver supports CUDA %s" % cuda, "rocm": "ROCm %s is installed" % rocm,
                           "cpu": "no GPU driver (neither nvidia-smi nor ROCm)"}[family]
                    if minor_compat and family == "cuda":
                        why += ("; no pinned build is that old, so a %s build through CUDA's minor version "
                                "compatibility" % variant)
                    return {"torch": pin["torch"], "variant": variant, "why": why,
                            "index_url": index_url or DEFAULT_INDEX % variant}
    if passed_over:
        return {"torch": None, "variant": None, "index_url": None, "archs": archs,
                "why": uncovered_reason(pins, cuda, python, archs, names, passed_over)}
    for pin in pins:
        if (not python or not pin.get("python") or python in pin["python"]) and "cpu" in pin["variants"]:
            why = ("no pinned torch release has a %s build for %s: the CPU build" %
                   (family.upper() if family == "cuda" else "ROCm",
                    "CUDA %s" % cuda if family == "cuda" else "ROCm %s" % rocm if family == "rocm" else family))
            return {"torch": pin["torch"], "variant": "cpu", "why": why if family != "cpu" else
                    "no GPU driver (neither nvidia-smi nor ROCm)", "index_url": index_url or DEFAULT_INDEX % "cpu"}
    return None


def uncovered_reason(pins, cuda, python, archs, names, passed_over):
    """Why no pinned torch build runs on the node's GPUs: each loadable variant and what it lacks, and the variants
    the driver is too old for."""
    gpus = ", ".join("compute capability %s" % cc_text(a) for a in archs)
    if names:
        gpus += " (%s)" % ", ".join(sorted(set(names)))
    groups = {}  # the variants the driver loads, by the architectures they have kernels for
    for torch, variant, _ in passed_over:
        builds = groups.setdefault(arch_range(variant), [])
        if "%s %s" % (torch, variant) not in builds:
            builds.append("%s %s" % (torch, variant))
    loadable = ["torch %s (kernels for %s)" % (", ".join(b), r) for r, b in groups.items()]
    newer = sorted({"torch %s %s" % (pin["torch"], v) for pin in pins
                    if not python or not pin.get("python") or python in pin["python"]
                    for v in pin["variants"] if variant_version(v)[0] == "cuda" and not fits(v, cuda, None, True)
                    and all(runs_on(v, a) for a in archs)})
    return ("no pinned torch build runs on this node's GPUs, %s, with a driver that supports CUDA %s: %s%s. A torch "
            "without kernels for them imports and then fails \"no kernel image is available\" (tools_torch_pins: "
            "pin a release with a variant for them, e.g. cu128 of torch 2.7 to 2.11; tools_torch_variant)" % (
                gpus, cuda, "; ".join(loadable),
                "; the driver is too old for %s" % ", ".join(newer) if newer else ""))
