"""Values as JSON has them: NumPy and pandas scalars become Python numbers, NaN and pandas' NA
become null (JSON has no NaN; a missing value is stored as unknown), paths become strings. One home
for what the store, the timeline, the analysis and the report each did by hand."""

from __future__ import annotations

import math
from pathlib import Path


def plain(v):
    """A scalar from a frame or an array as a plain Python value; NaN and NA as None."""
    if v is None or isinstance(v, (str, bytes)):
        return v
    if type(v).__name__ == "NAType":   # pandas.NA, recognised without importing pandas
        return None
    if getattr(v, "ndim", 0) > 0:   # an array cell of a frame (a list column read back from Parquet)
        return [plain(x) for x in v.tolist()]
    if hasattr(v, "item"):   # a NumPy scalar (np.float32, np.int64, np.bool_ ...)
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def json_default(o):
    """json.dumps(default=...): what the json module cannot write by itself."""
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
