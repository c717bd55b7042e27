"""Build the native kernels (everything else is declared in pyproject.toml)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "remat_core.kernels._native_ext",
            sources=["native/kernels.cpp"],
            language="c++",
            extra_compile_args=["-O3", "-std=c++17"],
        )
    ]
)
