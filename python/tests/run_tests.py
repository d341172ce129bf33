"""CTest's entry to the Python tests (label python).

    run_tests.py               every test_*.py; the ones that need no torch (TORCH_FREE)
                               run in any case. Exit 1 if one fails; else 77, which
                               CTest reports as skipped, when torch cannot be imported
                               (the others did not run); else 0. (CTest: python_tests)
    run_tests.py --torch-free  only the TORCH_FREE modules; 0 or 1, never 77; 1 also
                               without TILEATTN_LAYOUT_EXE. (CTest: python_layout)

Environment: TILEATTN_LIB (the .so to test), TILEATTN_LAYOUT_EXE (test/abi_layout.c's
program) and PYTHONPATH (this package's source) are set by test/CMakeLists.txt."""
import os
import sys
import unittest

# Modules that import neither torch nor the tileattn package (whose __init__ does).
TORCH_FREE = ("test_mirror.py",)

here = os.path.dirname(os.path.abspath(__file__))
torch_free_only = "--torch-free" in sys.argv[1:]
if torch_free_only and not os.environ.get("TILEATTN_LAYOUT_EXE"):
    # test_mirror.TestLayout would skip, and this run would pass having checked nothing
    print("--torch-free: TILEATTN_LAYOUT_EXE is not set (test/CMakeLists.txt sets it)")
    sys.exit(1)
have_torch = False
if not torch_free_only:
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError as e:
        print(f"torch cannot be imported ({e}): only {', '.join(TORCH_FREE)} run, "
              "the other Python tests are skipped")

loader = unittest.defaultTestLoader
suite = unittest.TestSuite()
if have_torch:
    suite.addTests(loader.discover(here, pattern="test_*.py", top_level_dir=here))
else:
    for name in TORCH_FREE:
        suite.addTests(loader.discover(here, pattern=name, top_level_dir=here))
result = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(result.failures) + len(result.errors)
# a skipped class (setUpClass) counts as skipped, not as run
skipped_run = sum(1 for t, _ in result.skipped if hasattr(t, "_testMethodName"))
print(f"{result.testsRun - failed - skipped_run} passed, {failed} failed, "
      f"{len(result.skipped)} skipped")
if not result.wasSuccessful():
    sys.exit(1)
sys.exit(0 if torch_free_only or have_torch else 77)
