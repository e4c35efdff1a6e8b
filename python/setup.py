"""Builds torch_collie: the extension torch_collie._C against the installed PyTorch,
with libcollie inside the package.

    pip install --no-build-isolation ./python       # from a clone: builds libcollie too
    COLLIE_BUILD_DIR=$PWD/build pip install --no-build-isolation ./python   # reuse a tree
    COLLIE_BUILD_DIR=build python setup.py build --build-base build/python   # the tests

libcollie comes from COLLIE_BUILD_DIR (a CMake build tree of this project:
<dir>/libcollie.so, headers from the source tree), COLLIE_PREFIX (an install prefix:
<prefix>/lib, <prefix>/include) or, with neither, a Release build of the project's
CMake made here (target `collie` only, under <build base>/libcollie; minutes on two
cores). Its library is copied next to the extension (debug info stripped) and the
extension finds it through RUNPATH $ORIGIN, so an installed torch_collie needs neither
PYTHONPATH nor LD_LIBRARY_PATH, and `pip uninstall torch_collie` removes both.

With COLLIE_BUILD_DIR, pip's build also puts its objects under <dir>/python, where the
tests' in-tree build keeps them: a tree the tests built is only relinked.
--no-build-isolation: the extension is compiled against the torch of the environment
(an isolated build would fetch another torch from PyPI); install setuptools, wheel and
ninja there first (scripts/python-env.sh does).
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build import build
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
csrc = os.path.join("torch_collie", "csrc")
LIBRARY = "libcollie.so.0"  # libcollie's SONAME: what the extension's DT_NEEDED names


def project_version():
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        match = re.search(r"project\(collie VERSION ([0-9.]+)", f.read())
    if not match:
        raise SystemExit("torch_collie: no project(collie VERSION ...) in CMakeLists.txt")
    return match.group(1)


def build_libcollie(build_base):
    """A Release build of libcollie alone, from this source tree."""
    out = os.path.abspath(os.path.join(build_base, "libcollie"))
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.check_call(["cmake", "-S", root, "-B", out, *generator,
                           "-DCMAKE_BUILD_TYPE=Release", "-DCOLLIE_BUILD_TESTS=OFF",
                           "-DCOLLIE_BUILD_BENCH=OFF"])
    subprocess.check_call(["cmake", "--build", out, "--target", "collie",
                           "--parallel", os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))])
    return out


def libcollie_dirs(build_base):
    """(include dir, directory of libcollie.so) from the environment, or built here."""
    prefix = os.environ.get("COLLIE_PREFIX")
    if prefix:
        for lib in ("lib", "lib64"):
            if os.path.exists(os.path.join(prefix, lib, "libcollie.so")):
                return os.path.join(prefix, "include"), os.path.join(prefix, lib)
        raise SystemExit(f"torch_collie: no libcollie.so under {prefix}/lib or lib64")
    tree = os.environ.get("COLLIE_BUILD_DIR")
    lib_dir = os.path.abspath(tree) if tree else build_libcollie(build_base)
    if not os.path.exists(os.path.join(lib_dir, "libcollie.so")):
        raise SystemExit(f"torch_collie: no libcollie.so in {lib_dir}; build collie first")
    return os.path.join(root, "include"), lib_dir


class Build(build):
    """With COLLIE_BUILD_DIR the build lives under <dir>/python (the tests' objects)."""

    def initialize_options(self):
        super().initialize_options()
        if os.environ.get("COLLIE_BUILD_DIR"):
            self.build_base = os.path.join(os.path.abspath(os.environ["COLLIE_BUILD_DIR"]),
                                           "python")


def unity_sources(sources, out_dir, groups):
    """The sources as `groups` unity files under out_dir (each #includes its share), or
    as they are for groups = 0. Every source includes torch's headers, whose parsing is
    most of a compile: 11 files took 180 s of CPU one by one on the 2-core VM and 60 s as
    two unity files. A file is rewritten only when its text changes, so that a rebuild
    stays incremental (ninja follows the included sources through the depfiles).
    COLLIE_TORCH_UNITY=0 compiles one file at a time: the check that each stands alone."""
    if groups <= 0:
        return sources
    os.makedirs(out_dir, exist_ok=True)
    unity = []
    for g in range(groups):
        path = os.path.join(out_dir, f"torch_collie_unity_{g}.cc")
        text = "".join(f'#include "{os.path.join(here, src)}"\n' for src in sources[g::groups])
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
        unity.append(path)
    return unity


class BuildWithLibrary(BuildExtension):
    """Finds (or builds) libcollie, compiles the extension, and puts the library next to
    it in the package."""

    def run(self):
        build_base = self.get_finalized_command("build").build_base
        include_dir, lib_dir = libcollie_dirs(build_base)
        groups = int(os.environ.get("COLLIE_TORCH_UNITY", "2"))
        for ext in self.extensions:
            ext.include_dirs.append(include_dir)
            ext.library_dirs.append(lib_dir)
            ext.sources = unity_sources(ext.sources, os.path.join(self.build_temp, "unity"),
                                        groups)
            if groups > 0:
                # GCC takes an included .cc for a header and then warns about its types
                # in anonymous namespaces (-Wsubobject-linkage) and pybind11's lambdas
                # over them (-Wattributes), which it does not for the file compiled alone.
                ext.extra_compile_args += ["-Wno-subobject-linkage", "-Wno-attributes"]
        super().run()
        source = os.path.realpath(os.path.join(lib_dir, "libcollie.so"))
        target = os.path.join(os.path.dirname(self.get_ext_fullpath("torch_collie._C")), LIBRARY)
        if os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(source):
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.exists(target):
            os.remove(target)
        # Debug info stays in the build tree: the packaged copy is a tenth of the size.
        if not (shutil.which("strip") and
                subprocess.call(["strip", "--strip-debug", "-o", target, source]) == 0):
            shutil.copy2(source, target)


setup(
    name="torch_collie",
    version=project_version(),
    description="collie as a torch.distributed backend",
    packages=["torch_collie"],
    exclude_package_data={"torch_collie": ["csrc/*"]},
    # The extension is built against this torch's C++ ABI.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}"],
    ext_modules=[
        CppExtension(
            "torch_collie._C",
            [os.path.join(csrc, f) for f in sorted(os.listdir(os.path.join(here, csrc)))
             if f.endswith(".cc")],
            include_dirs=[os.path.join(here, csrc)],
            libraries=["collie"],
            # The tree's version: libcollie is always packaged from the tree the
            # extension is built against.
            define_macros=[("COLLIE_VERSION", f'"{project_version()}"')],
            # -g1 overrides the -g of Python's CFLAGS: line tables for backtraces, not the
            # full debug info of torch's headers, which took half of each file's compile
            # (backend.cc: 10.8 s against 19.0 s). The linked extension (in the wheel)
            # keeps none: 0.8 MB.
            extra_compile_args=["-std=c++20", "-O2", "-g1", "-Wall", "-Wno-unused-parameter"],
            extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,--strip-debug"],
        )
    ],
    cmdclass={"build": Build, "build_ext": BuildWithLibrary},
)
