"""CTest's entry to the Python tests (label python): exit 77, which CTest reports as
skipped, when torch cannot be imported; else the unittest run's verdict (0 or 1).
Environment: TILEATTN_LIB (the .so to test) and PYTHONPATH (this package's source)
are set by test/CMakeLists.txt."""
import os
import sys
import unittest

try:
    import torch  # noqa: F401
except ImportError as e:
    print(f"torch cannot be imported ({e}): the Python tests are skipped")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
result = unittest.TextTestRunner(verbosity=2).run(suite)
print(f"{result.testsRun - len(result.failures) - len(result.errors) - len(result.skipped)} "
      f"passed, {len(result.failures) + len(result.errors)} failed, "
      f"{len(result.skipped)} skipped")
sys.exit(0 if result.wasSuccessful() else 1)
