"""Node-side measurement programs of clustermax.assess.

Every probe measures and writes raw facts and numbers into one artifact (schema v1, see artifact.py);
none of them decides pass or fail. Standard library only (torch where a probe measures with it), so the
package runs on any node with Python 3.8+: `python3 probes.pyz <name> --out DIR` or `python3 -m probes <name>`.
"""

__version__ = "0.1.0"
