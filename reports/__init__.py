"""Controller side of clustermax.assess: load artifacts, grade checks, render reports.

All judgement lives here and in reports/data/*.yml; the probes only measure.
"""

__version__ = "0.1.0"
