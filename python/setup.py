"""Builds torch_collie._C against an installed PyTorch and libcollie.

    COLLIE_BUILD_DIR=build python setup.py build --build-base build/python

libcollie comes from COLLIE_BUILD_DIR (a CMake build tree: <dir>/libcollie.so and
the source tree's include/) or COLLIE_PREFIX (an install prefix: <prefix>/lib,
<prefix>/include). The extension records the library's directory as its rpath.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
prefix = os.environ.get("COLLIE_PREFIX")
if prefix:
    include_dir = os.path.join(prefix, "include")
    lib_dir = next(
        d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64"))
        if os.path.exists(os.path.join(d, "libcollie.so"))
    )
else:
    include_dir = os.path.join(root, "include")
    lib_dir = os.path.abspath(os.environ.get("COLLIE_BUILD_DIR", os.path.join(root, "build")))
if not os.path.exists(os.path.join(lib_dir, "libcollie.so")):
    raise SystemExit(f"torch_collie: no libcollie.so in {lib_dir}; build collie first")

csrc = os.path.join("torch_collie", "csrc")
setup(
    name="torch_collie",
    version="0.1.0",
    description="collie as a torch.distributed backend",
    packages=["torch_collie"],
    ext_modules=[
        CppExtension(
            "torch_collie._C",
            [os.path.join(csrc, f) for f in sorted(os.listdir(csrc)) if f.endswith(".cc")],
            include_dirs=[include_dir, os.path.join(here, csrc)],
            library_dirs=[lib_dir],
            libraries=["collie"],
            extra_compile_args=["-std=c++20", "-O2", "-Wall", "-Wno-unused-parameter"],
            extra_link_args=[f"-Wl,-rpath,{lib_dir}"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
