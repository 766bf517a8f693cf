"""Which PyTorch build fits a node: the CUDA wheel variant follows the CUDA version the driver supports (what
nvidia-smi prints), the ROCm variant the installed ROCm, the CPU build otherwise.

`pins` is the list from roles/tools/vars/main.yml (tools_torch_pins), newest release first:
    [{"torch": "2.9.1", "variants": ["cu130", "cu128", "cu126", "rocm6.4", "cpu"], "python": ["3.10", ...]}, ...]
The first release that has a variant the node can run wins, so an old driver gets the newest release that still
ships a build for it rather than a build it cannot load. A CUDA variant fits when its CUDA version is at most the
driver's (a wheel's runtime needs a driver at least that new; PyTorch bundles the runtime, not the driver); a ROCm
variant fits when it has the installed ROCm's major version and is not newer than it. Only where no pinned build
is that old does a CUDA build of the driver's major version count (CUDA's minor version compatibility).
"""

import re

DEFAULT_INDEX = "https://download.pytorch.org/whl/%s"


def _version(text):
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


def fits(variant, cuda=None, rocm=None, minor_compat=False):
    kind, ver = variant_version(variant)
    if kind == "cuda":
        have = _version(cuda)[:2]
        # minor version compatibility: a build for CUDA X.y runs on any driver for CUDA X (X >= 11)
        return bool(cuda) and (ver <= have or (minor_compat and ver[0] == have[0] and ver[0] >= 11))
    if kind == "rocm":
        have = _version(rocm)
        return bool(have) and ver[0] == have[0] and ver <= have[:len(ver)]
    return True


def choose(pins, cuda=None, rocm=None, python=None, index_url=""):
    """-> {torch, variant, index_url, why} for a node whose driver supports CUDA `cuda` ("12.4") and/or has ROCm
    `rocm` ("6.2.4"), running Python `python` ("3.11"). The GPU kind the node has decides the family: with a CUDA
    driver only CUDA variants (and the CPU build as the last resort) are considered, with ROCm only ROCm ones."""
    family = "cuda" if cuda else "rocm" if rocm else "cpu"
    # first a build no newer than the driver; only then one that relies on CUDA's minor version compatibility
    # (a GPU measured on the CPU would be worse than a build that may miss a newer driver's features)
    for minor_compat in (False, True):
        for pin in pins:
            if python and pin.get("python") and python not in pin["python"]:
                continue
            for variant in pin["variants"]:
                kind = variant_version(variant)[0]
                if kind == family and fits(variant, cuda, rocm, minor_compat):
                    why = {"cuda": "the driver supports CUDA %s" % cuda, "rocm": "ROCm %s is installed" % rocm,
                           "cpu": "no GPU driver (neither nvidia-smi nor ROCm)"}[family]
                    if minor_compat and family == "cuda":
                        why += ("; no pinned build is that old, so a %s build through CUDA's minor version "
                                "compatibility" % variant)
                    return {"torch": pin["torch"], "variant": variant, "why": why,
                            "index_url": index_url or DEFAULT_INDEX % variant}
    for pin in pins:
        if (not python or not pin.get("python") or python in pin["python"]) and "cpu" in pin["variants"]:
            why = ("no pinned torch release has a %s build for %s: the CPU build" %
                   (family.upper() if family == "cuda" else "ROCm",
                    "CUDA %s" % cuda if family == "cuda" else "ROCm %s" % rocm if family == "rocm" else family))
            return {"torch": pin["torch"], "variant": "cpu", "why": why if family != "cpu" else
                    "no GPU driver (neither nvidia-smi nor ROCm)", "index_url": index_url or DEFAULT_INDEX % "cpu"}
    return None
