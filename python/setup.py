"""Builds libtileattn_shared.so from the repository's sources with CMake and puts it
in the package (README.md, "Install"). Environment, read at install time:

  TILEATTN_CUDA=ON           also build the CUDA backend (needs nvcc); default OFF
  TILEATTN_SOURCE_DIR=PATH   the tileattn source tree (default: this folder's parent)
  TILEATTN_BUILD_DIR=PATH    the CMake build folder (default: build/cmake here; kept,
                             so a second install rebuilds only what changed)
  TILEATTN_BUILD_JOBS=N      parallel build jobs (default: the CPU count)
  CMAKE=PATH                 the cmake to run (default: cmake on PATH, >= 3.24)
"""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_NAME = "libtileattn_shared.so"


def _cmake_build():
    src = os.path.abspath(os.environ.get("TILEATTN_SOURCE_DIR", os.path.join(HERE, "..")))
    if not os.path.exists(os.path.join(src, "include", "tileattn.h")):
        raise RuntimeError(f"tileattn: no source tree at {src} (include/tileattn.h missing): "
                           "install from a checkout (`pip install ./python`) or set "
                           "TILEATTN_SOURCE_DIR")
    build = os.path.abspath(os.environ.get("TILEATTN_BUILD_DIR",
                                           os.path.join(HERE, "build", "cmake")))
    cuda = os.environ.get("TILEATTN_CUDA", "OFF").upper()
    cuda = "ON" if cuda in ("1", "ON", "TRUE", "YES") else "OFF"
    cmake = os.environ.get("CMAKE", "cmake")
    jobs = os.environ.get("TILEATTN_BUILD_JOBS", str(os.cpu_count() or 1))
    # Warnings are not errors here: the library's CI builds with -Werror, a user's
    # newer compiler may warn about something new and should still get a library.
    subprocess.check_call([cmake, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                           "-DTILEATTN_SHARED=ON", f"-DTILEATTN_CUDA={cuda}",
                           "-DTILEATTN_TESTS=OFF", "-DTILEATTN_BENCH=OFF",
                           "-DTILEATTN_WERROR=OFF"])
    subprocess.check_call([cmake, "--build", build, "--target", "tileattn_shared", "-j", jobs])
    return os.path.join(build, LIB_NAME)


class BuildPyWithLibrary(build_py):
    """build_py, then the shared library into the built package."""

    def run(self):
        super().run()
        lib = _cmake_build()
        dest = os.path.join(self.build_lib, "tileattn")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, LIB_NAME))


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not 'any'."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
