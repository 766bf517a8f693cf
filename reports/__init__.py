"""Controller side of clustermax.assess: load artifacts, grade checks, render reports.

All judgement lives here and in reports/data/*.yml; the probes only measure.
"""

__version__ = "0.1.0"

import os

# Judgement as data: the rubric, GPU expectations, minimum versions, tiers (one folder for every module).
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
