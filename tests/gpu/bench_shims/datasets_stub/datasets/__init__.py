"""TEST-ONLY stand-in for Hugging Face ``datasets`` on the lent H200 (tests/gpu/bench_h200.sh).

SGLang's benchmark client imports ``datasets.load_dataset`` at module import (sglang/benchmark/datasets/mmmu.py)
even for the ``random-ids`` dataset, which never calls it; the real package (pyarrow, pandas) does not fit the
device's 64 MiB carry. Any use fails loudly."""

__version__ = "0.0.0+eaglestub"


def load_dataset(*args, **kwargs):
    raise RuntimeError("datasets is a TEST-ONLY stub here (tests/gpu/bench_shims): random-ids needs no dataset")


class Dataset:  # imported by name in some SGLang releases' dataset modules
    def __init__(self, *args, **kwargs):
        raise RuntimeError("datasets is a TEST-ONLY stub here (tests/gpu/bench_shims)")
