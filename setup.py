"""pip's build of the zeroshard package (pyproject.toml): CMake builds the
extension module and zeroshard-server in ZEROSHARD_BUILD_DIR (default:
build/ beside this file, so a tree the README's commands built is reused
and only what changed is compiled), then the package's Python files, the
extension and the server binary go into the wheel."""

import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        build = os.environ.get("ZEROSHARD_BUILD_DIR") or os.path.join(
            ROOT, "build")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(
                ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=Release"])
        subprocess.check_call(["cmake", "--build", build, "--target",
                               "zs_python", "zeroshard-server"])
        super().run()
        dest = os.path.join(self.build_lib, "zeroshard")
        for so in glob.glob(os.path.join(build, "python", "zeroshard",
                                         "_zeroshard*.so")):
            shutil.copy2(so, dest)
        os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(build, "bin", "zeroshard-server"),
                     os.path.join(dest, "bin", "zeroshard-server"))


class BinaryDistribution(Distribution):
    """A wheel for this platform: it carries a compiled module."""

    def has_ext_modules(self):
        return True


setup(
    # setuptools' own build and metadata folders inside CMake's build/ (which
    # git ignores), not beside the sources.
    options={"build": {"build_base": "build/pip"},
             "egg_info": {"egg_base": "build/pip"}},
    package_dir={"": "python"},
    packages=["zeroshard", "zeroshard.deepspeed"],
    package_data={"zeroshard": ["_shim/deepspeed/*.py"]},
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
)
