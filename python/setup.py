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
import re
import shutil
import struct
import subprocess
import sys
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


# What a manylinux wheel's binaries may link (PEP 600: glibc's own libraries; the
# policy allows a few more, which libccl does not need).
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
                   "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def elf_needs(path):
    """(the libraries, the symbol versions) a 64-bit little-endian ELF file asks for:
    its DT_NEEDED entries and its SHT_GNU_verneed names; None for any other file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def string(table, at):
        start = sections[table][4] + at
        return data[start:data.index(b"\0", start)].decode()

    libraries, versions = set(), set()
    for _, kind, _, _, off, size, link, info, _, _ in sections:
        if kind == 6:  # SHT_DYNAMIC: (tag, value) pairs, DT_NEEDED = 1, DT_NULL = 0 ends
            for at in range(off, off + size, 16):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == 0:
                    break
                if tag == 1:
                    libraries.add(string(link, value))
        elif kind == 0x6FFFFFFE:  # SHT_GNU_verneed: info entries, each with its vernaux list
            at = off
            for _ in range(info):
                _, count, _, aux, following = struct.unpack_from("<HHIII", data, at)
                a = at + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, a)
                    versions.add(string(link, name))
                    a += next_aux
                at += following
    return libraries, versions


def manylinux_platform(root, platform):
    """``platform`` (linux_x86_64) as the manylinux_2_N one (PEP 600) that every ELF file
    under root satisfies: N is the newest glibc version they ask for (at least 17,
    manylinux2014's), when they link glibc's libraries alone and use no other symbol
    versions. Else ``platform`` itself, and why not."""
    if not platform.startswith("linux_"):
        return platform, f"not a Linux platform ({platform})"
    newest, files = 17, 0
    for path in sorted(Path(root).rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            needs = elf_needs(path)
        except (OSError, struct.error, ValueError, IndexError) as e:
            return platform, f"{path.name} could not be read as ELF ({e})"
        if needs is None:
            continue
        files += 1
        libraries, versions = needs
        if libraries - GLIBC_LIBRARIES:
            return platform, f"{path.name} links {', '.join(sorted(libraries - GLIBC_LIBRARIES))}"
        for v in versions:
            m = re.fullmatch(r"GLIBC_2\.(\d+)(\.\d+)?", v)
            if not m:
                return platform, f"{path.name} asks for symbol version {v}"
            newest = max(newest, int(m.group(1)))
    if not files:
        return platform, "no native files found"
    return f"manylinux_2_{newest}_{platform[len('linux_'):]}", ""


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-manylinux_2_N_ARCH: it holds native code (libccl, cclc) for
    one platform, but no extension module, so any Python 3 on that platform can use it
    (the package reaches libccl through ctypes); setuptools' default for a wheel with
    native code, cpXY-cpXY-linux_ARCH, is refused by pip on every other Python version
    and on every other machine's pip index. The manylinux tag (PEP 600) is read off the
    bundled binaries themselves (manylinux_platform): they link glibc's libraries
    alone, so they run on any glibc at least as new as the newest symbol version they
    ask for, which is the build machine's glibc when that is 2.34 or newer (2.34 moved
    libpthread into libc: a build on an older glibc, such as a manylinux_2_28 image,
    gets the older tag). Where that cannot be shown, the tag stays linux_ARCH."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        platform = super().get_tag()[2]
        tagged, why = manylinux_platform(self.bdist_dir, platform)
        if why:
            print(f"ccl: wheel tagged {platform}, not manylinux: {why}", file=sys.stderr)
        return ("py3", "none", tagged)


setup(cmdclass={"build_py": BuildPyWithLibccl, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
