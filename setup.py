"""Build and install cxlsim.

`fabric/` and `models/` are installed as `cxlsim.fabric` and `cxlsim.models`
(see package_dir), so the project never claims the global names `fabric` or
`models`.
"""
from glob import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

VERSION = "0.1.0"

# The emulator's compiled modules; each includes the one C data path, cxlsim/emulator/cxl_ops.h.
# `depends` names every header, since C includes one another (cxl_coll.h -> cxl_coll_*.h), and an edit to any of
# them must rebuild the modules.
C_HEADERS = sorted(glob("cxlsim/emulator/*.h"))
extensions = [
    Extension(
        f"cxlsim.emulator.{name}",
        [f"cxlsim/emulator/{name}.pyx"],
        include_dirs=["cxlsim/emulator", numpy.get_include()],
        extra_compile_args=["-O3"],
        depends=C_HEADERS,
    )
    for name in ("_kernels", "_pool_kernel", "_probes")
]
# The training modes' shared state (seqlock slots and the global counter): cxlsim/emulator/cxl_seqlock.h.
extensions.append(Extension("cxlsim.emulator.training._shared_state", ["cxlsim/emulator/training/_shared_state.pyx"],
                            include_dirs=["cxlsim/emulator"], extra_compile_args=["-O3"], depends=C_HEADERS))

setup(
    name="cxlsim",
    version=VERSION,
    description="Emulator and simulator for CXL shared-memory fabrics",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={
        "cxlsim": "cxlsim",
        "cxlsim.fabric": "fabric",
        "cxlsim.models": "models",
    },
    packages=[
        "cxlsim",
        "cxlsim.calibrate",
        "cxlsim.emulator",
        "cxlsim.emulator.training",
        "cxlsim.mpi",
        "cxlsim.replay",
        "cxlsim.fabric",
        "cxlsim.models",
        "cxlsim.models.collectives",
        "cxlsim.models.training",
    ],
    package_data={
        "cxlsim": ["py.typed", "data/*.yaml", "data/*.txt", "data/osu/*.txt"],
        "cxlsim.emulator": ["*.pyx", "*.pxd", "*.pxi", "*.h", "*.pyi"],
        "cxlsim.emulator.training": ["*.pyx"],
        "cxlsim.mpi": ["*.c", "*.h"],
        "cxlsim.models.training": ["*.yaml"],
    },
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    ),
    install_requires=[
        "numpy>=1.23",
        "simpy>=4.0",
        "networkx>=3.0",
        "matplotlib>=3.6",
        "tqdm>=4.60",
        "PyYAML>=6.0",
        "threadpoolctl>=3.0",
    ],
    extras_require={
        "mpi": ["mpi4py>=4.0", "mpich"],
        "digits": ["scikit-learn"],
        "otf2": ["otf2"],
        "test": ["pytest>=7", "hypothesis>=6", "pandas>=1.5", "scipy>=1.9"],
        # what a contributor and CI need: the test dependencies and the linter (.ci/run runs both)
        "dev": ["pytest>=7", "hypothesis>=6", "pandas>=1.5", "scipy>=1.9", "ruff>=0.6"],
    },
    entry_points={"console_scripts": ["cxlsim = cxlsim.cli:main"]},
    zip_safe=False,
)
