"""Builds libccl with the repository's Makefile and bundles it into the package.

``pip install ./python`` (from the repository) runs ``make`` in the repository root for
``$(BUILD)/libccl.so``, ``cclc`` and ``ccl-tune`` (BUILD: ``$CCL_BUILD``, default
``build``; an up-to-date build is reused) and copies them, with ``algorithms/``, into
``ccl/_native/`` laid out as an installed prefix (``lib/libccl.so``, ``bin/cclc``,
``bin/ccl-tune``, ``share/ccl/algorithms``), where libccl and the tools find the
algorithms by themselves. Needs what ``make`` needs (a C compiler, Flex, Bison: ``make deps``).
``CCL_PIP_NO_BUILD=1`` skips the build: the package then finds an installed libccl
(``$CCL_LIBRARY``, the loader path, pkg-config) at import. Outside the repository (an
sdist) nothing is built either.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class BuildPyWithLibccl(build_py):
    def run(self):
        super().run()
        if os.environ.get("CCL_PIP_NO_BUILD") or not (ROOT / "Makefile").exists() or \
                not (ROOT / "runtime" / "include" / "ccl.h").exists():
            return
        build = os.environ.get("CCL_BUILD", "build")
        bdir = Path(build) if os.path.isabs(build) else ROOT / build
        targets = [f"{build}/libccl.so", f"{build}/cclc", f"{build}/ccl-tune"]
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["make", "-C", str(ROOT), f"BUILD={build}", "-j", jobs] + targets, check=True)
        native = Path(self.build_lib) / "ccl" / "_native"
        if native.exists():
            shutil.rmtree(native)
        (native / "lib").mkdir(parents=True)
        (native / "bin").mkdir()
        shutil.copy2(os.path.realpath(bdir / "libccl.so"), native / "lib" / "libccl.so")
        for tool in ("cclc", "ccl-tune"):
            shutil.copy2(bdir / tool, native / "bin" / tool)
        (native / "share" / "ccl").mkdir(parents=True)
        shutil.copytree(ROOT / "algorithms", native / "share" / "ccl" / "algorithms")


class BinaryDistribution(Distribution):
    """The wheel carries a native library: it is platform-specific."""

    def has_ext_modules(self):
        return True


try:  # setuptools >= 70.1 has its own; before that, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-PLATFORM: it holds native code (libccl, cclc) for one
    platform, but no extension module, so any Python 3 on that platform can use it (the
    package reaches libccl through ctypes). setuptools' default for a wheel with native
    code is cpXY-cpXY-PLATFORM, which pip refuses on every other Python version. The
    platform is the build machine's (linux_x86_64); a manylinux tag would need
    auditwheel to check the bundled binaries against the manylinux policy first."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none") + tuple(super().get_tag()[2:])


setup(cmdclass={"build_py": BuildPyWithLibccl, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
