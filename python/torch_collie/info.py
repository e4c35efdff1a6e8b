"""`python -m torch_collie.info`: the versions and places of what torch_collie runs on.

Prints torch_collie's version, the libcollie it loaded (file and version), torch and
Python; exits non-zero when the backend is not registered with torch.distributed.
"""

import os
import sys

import torch
import torch.distributed as dist

import torch_collie
from torch_collie import _C


def main():
    library = os.path.realpath(_C.library_path())
    lines = [
        ("torch_collie", f"{torch_collie.__version__} ({os.path.dirname(torch_collie.__file__)})"),
        ("libcollie", f"{_C.collie_version()} ({library})"),
        ("torch", f"{torch.__version__} ({os.path.dirname(torch.__file__)})"),
        ("python", sys.version.split()[0]),
        ("backend", "collie registered" if "collie" in dist.Backend.backend_list
         else "collie NOT registered"),
    ]
    for key, text in lines:
        print(f"{key:13} {text}")
    return 0 if "collie" in dist.Backend.backend_list else 1


if __name__ == "__main__":
    sys.exit(main())
