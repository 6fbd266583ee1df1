"""hotpath_export: hotpath.export (python/hotpath/export.py) for scripts run from a checkout without the
package built or installed (`sys.path.insert(0, "python"); import hotpath_export`). It loads that one
file alone: importing the package itself would need its compiled module."""
import importlib.util
import pathlib
import sys

_spec = importlib.util.spec_from_file_location(
    "hotpath_export", pathlib.Path(__file__).resolve().parent / "hotpath" / "export.py")
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module
_spec.loader.exec_module(_module)
