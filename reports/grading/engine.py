"""Transitional: the names the audit and reliability graders, the renderer and a few tests still import from here.
The engine is reports.grading (rows, select, preconditions, kinds, rubric); import from there. Remove this module
once nothing imports it."""

from reports import DATA_DIR
from reports.grading import grade
from reports.grading.kinds import majority_value
from reports.grading.preconditions import ungradable
from reports.grading.rows import CHECK_COLUMNS, make_row, summarize, text_of
from reports.grading.rubric import load_rubric

__all__ = ["CHECK_COLUMNS", "DATA_DIR", "grade", "load_rubric", "majority_value", "make_row", "summarize", "text_of",
           "ungradable"]
