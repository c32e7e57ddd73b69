"""Fixtures of the Python module's tests: the tiny golden weights, the CLI beside the module."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def weights(config="tiny"):
    return str(DATA / config / "weights.hf.safetensors")


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    # the prepared-weights cache of these tests stays in a temporary folder
    os.environ["MIMI_CACHE_DIR"] = str(tmp_path_factory.mktemp("mimi-cache"))


@pytest.fixture(scope="session")
def codec():
    import mimi

    return mimi.Codec(weights(), n_q=8)


@pytest.fixture(scope="session")
def cli():
    """Runs the mimi CLI ($MIMI_BIN, else build/mimi) on the tiny weights; skips without it."""
    exe = os.environ.get("MIMI_BIN", str(ROOT / "build" / "mimi"))
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no mimi CLI at {exe} (set MIMI_BIN)")

    def run(*args, check=True, weights_flag=True):
        extra = ["--weights", weights(), "--quiet"] if weights_flag else ["--quiet"]
        r = subprocess.run([exe, *map(os.fsdecode, args), *extra], capture_output=True)
        if check and r.returncode != 0:
            raise AssertionError(f"mimi {args} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r

    return run
