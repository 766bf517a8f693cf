"""A local wheelhouse for the lifecycle phase's tests (no internet): writes the source tree of a small real package
with many modules (`cmxlife`, which imports all of them, so its import reads many small files like a real
framework does) plus a dependency (`cmxlife-base`), and builds both wheels offline with
`pip wheel --no-index --no-build-isolation` (setuptools from the running environment).

    python tests/integration/lifecycle_wheelhouse.py DIR   # DIR/wheels/*.whl
"""

import subprocess
import sys
from pathlib import Path

MODULES = 150
VERSION = "1.4.2"
BUILD_SYSTEM = "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_sources(root):
    root = Path(root)
    base = root / "src-base"
    _write(base / "pyproject.toml", BUILD_SYSTEM +
           "[project]\nname = \"cmxlife-base\"\nversion = \"%s\"\n[tool.setuptools]\npackages = [\"cmxlife_base\"]\n"
           % VERSION)
    _write(base / "cmxlife_base" / "__init__.py", "def scale(x):\n    return 2 * x\n")
    pkg = root / "src"
    _write(pkg / "pyproject.toml", BUILD_SYSTEM +
           "[project]\nname = \"cmxlife\"\nversion = \"%s\"\ndependencies = [\"cmxlife-base==%s\"]\n"
           "[tool.setuptools]\npackages = [\"cmxlife\", \"cmxlife.ops\"]\n" % (VERSION, VERSION))
    for i in range(MODULES):
        sub = "ops" if i % 2 else ""
        body = ("from cmxlife_base import scale\n\nCONST_%d = %d\n\n\ndef op_%d(x):\n"
                "    return scale(x) + CONST_%d\n" % (i, i, i, i))
        _write(pkg / "cmxlife" / sub / ("m%03d.py" % i), body)
    _write(pkg / "cmxlife" / "ops" / "__init__.py",
           "".join("from cmxlife.ops import m%03d  # noqa: F401\n" % i for i in range(MODULES) if i % 2))
    _write(pkg / "cmxlife" / "__init__.py",
           "".join("from cmxlife import m%03d  # noqa: F401\n" % i for i in range(MODULES) if not i % 2)
           + "from cmxlife import ops  # noqa: F401\n__version__ = \"%s\"\n" % VERSION)
    return [base, pkg]


def build(root, python=sys.executable):
    """DIR/wheels with the two wheels; returns that directory."""
    root = Path(root)
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for src in write_sources(root):
        subprocess.run([python, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", "-q", "-w", str(wheels), str(src)], check=True,
                       capture_output=True, text=True, timeout=300)
    return wheels


if __name__ == "__main__":
    print(build(sys.argv[1]))
