"""deepnet_fairseq: DeepNet (DeepNorm) Transformers as a fairseq plugin.

Install with ``bash scripts/install.sh`` (README): fairseq-fixed must be installed with
``--no-deps`` because its metadata asks for torchaudio, which has no release for torch 2.13,
so it is not listed here.
"""

from setuptools import find_packages, setup

setup(
    name="deepnet_fairseq",
    version="0.1.0",
    description="DeepNet / DeepNorm Transformers (Wang et al. 2022) for fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # Measured 2026-11-25: 3.11, 3.12 and 3.13 install with scripts/install.sh and pass
    # tests/unit (910 each, at 68157d7); tests/integration passes on 3.11 and, at d688000, on
    # 3.13 (112 passed; 3.12 ran the prepare tests). A hang in multiprocessing's Pool.terminate
    # (3 of 3 full runs on 3.13) is gone since recipes/data/workers.py forks one process per task:
    # 0 hangs in 10 isolated runs of the test that hung, on each of 3.12 and 3.13. The floor is
    # transformers 5.24.0's (the deploy extra; torch 2.13.0 has no 3.9 wheel either); 3.14 is
    # left out until measured.
    python_requires=">=3.11,<3.14",
    author="The deepnet_fairseq authors",
    license="MIT",
    license_files=["LICENSE"],
    keywords="machine translation, transformer, deepnet, deepnorm, fairseq",
    classifiers=[
        "Development Status :: 4 - Beta",
        "Intended Audience :: Science/Research",
        "License :: OSI Approved :: MIT License",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Text Processing :: Linguistic",
    ],
    packages=find_packages(include=["deepnet_fairseq", "deepnet_fairseq.*"]),
    # Multi30k ships with the package: the quickstart, recipes and tests need no download.
    package_data={"deepnet_fairseq.corpora": ["multi30k/*.gz", "multi30k/README.md"]},
    # What the package imports at run time, from the lowest release it needs to the newest
    # tested (constraints.txt pins the tested set): torch 2.6 for FSDP2's fully_shard
    # (nn/fsdp.py); fairseq-fixed itself is installed by scripts/install.sh (--no-deps, above).
    install_requires=["torch>=2.6,<2.14", "sacrebleu>=2.0,<3", "sentencepiece>=0.1.99",
                      "sacremoses>=0.0.53", "matplotlib>=3.5", "numpy>=1.21.3",
                      "omegaconf>=2.3,<2.4", "hydra-core>=1.3,<1.4", "tensorboardX>=2.0"],
    # deepnet-export --ctranslate2 (CTranslate2's converter and runtime) and --transformers
    # (transformers' FSMT model and Marian tokenizer, safetensors weights; FSMT is tested with
    # 5.24.0, constraints.txt); scripts/install.sh installs them unless --no-deploy
    extras_require={"deploy": ["ctranslate2>=4.0", "transformers>=5.24,<6", "safetensors>=0.4"]},
    entry_points={
        "console_scripts": [
            "deepnet=deepnet_fairseq.front:main",  # one command for all of them
            "deepnet-average-checkpoints=deepnet_fairseq.average_checkpoints:cli_main",
            "deepnet-export=deepnet_fairseq.export:main",
            "deepnet-model-update=deepnet_fairseq.diagnostics.model_update:main",
            "deepnet-plot-monitors=deepnet_fairseq.diagnostics.plot_monitors:main",
            "deepnet-depth-study=deepnet_fairseq.recipes.depth_study:main",
            "deepnet-source-use=deepnet_fairseq.diagnostics.source_use:main",
            "deepnet-user-dir=deepnet_fairseq.cli:print_user_dir",
            "deepnet-model-options=deepnet_fairseq.cli:print_model_options",
        ]
    },
)
