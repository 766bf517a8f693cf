"""Build probes.pyz: the whole probes package as one zip application staged on nodes with a single copy.

`python3 probes.pyz <name> …` runs it; `PYTHONPATH=probes.pyz python3 -m probes <name>` works too.
The zip is byte-for-byte reproducible (fixed timestamps, sorted entries), so the controller's copy task
transfers it only when the probes changed.
"""

import os
import sys
import zipfile

_MAIN = b"import sys\nfrom probes.cli import main\nsys.exit(main())\n"
_EPOCH = (2020, 1, 1, 0, 0, 0)


def build(out_path):
    package_dir = os.path.dirname(os.path.abspath(__file__))
    entries = []
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                full = os.path.join(root, name)
                entries.append((os.path.join("probes", os.path.relpath(full, package_dir)), full))
    tmp = out_path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("__main__.py", _EPOCH)
        info.external_attr = 0o644 << 16
        zf.writestr(info, _MAIN, zipfile.ZIP_DEFLATED)
        for arcname, full in entries:
            info = zipfile.ZipInfo(arcname, _EPOCH)
            info.external_attr = 0o644 << 16
            with open(full, "rb") as fh:
                zf.writestr(info, fh.read(), zipfile.ZIP_DEFLATED)
    os.replace(tmp, out_path)
    return out_path


if __name__ == "__main__":
    print(build(sys.argv[1]))
