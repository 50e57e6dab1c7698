"""Shared fixtures: offline hubs, tiny random models loaded once per session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under `pytest -n N` each worker (and the processes it starts) gets one OpenMP thread, set before torch is
    # imported: N workers of torch's default threads each on a few cores spin against each other, and the tiny
    # models' short ops took several times longer (a 2-core machine, 2 workers).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import stat
import subprocess
from pathlib import Path

import pytest

from .clocks import ScrambledTime
from .hostile import guard_renames  # noqa: F401 -- a fixture: imported here, any test can ask for it

# Tests read only the fixtures in tests/data, never a data directory named by the caller's environment.
os.environ.pop("POPTUNE_DATA", None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--scramble-clock", type=int, default=None, metavar="SEED",
        help="time every measurement with a clock that stretches each interval it reads by a random factor in "
             "[1/4, 4] (seeded): a test that fails only with it depends on the machine's speed or load")


def pytest_configure(config: pytest.Config) -> None:
    seed = config.getoption("--scramble-clock")
    if seed is not None:  # for the whole session: module-scoped studies are timed on it too
        import poptune.measure.timer

        poptune.measure.timer.time = ScrambledTime(str(seed))


@pytest.fixture(scope="session", autouse=True)
def _float32_default_on_every_cpu():
    """The default dtype on a CPU is float32 here whatever the CPU (with AMX it would be bfloat16,
    :func:`poptune.device.native_bf16`): the suite's figures and tolerances do not depend on the machine running it.
    A test of the rule patches torch's probe itself."""
    import torch

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
        yield


@pytest.fixture(scope="session", autouse=True)
def _kv_maps_folder(tmp_path_factory):
    """Fitted K/V maps go to a folder of the test session, never the user's cache."""
    previous = os.environ.get("POPTUNE_KV_MAPS")
    os.environ["POPTUNE_KV_MAPS"] = str(tmp_path_factory.mktemp("kv-maps"))
    yield
    if previous is None:
        os.environ.pop("POPTUNE_KV_MAPS", None)
    else:
        os.environ["POPTUNE_KV_MAPS"] = previous

#: Small verbatim cuts of the evaluation data, laid out like the full data directory (see tests/data/README.md).
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def eval_data() -> Path:
    """The fixture evaluation data directory (``tests/data``): the same on every checkout; never skips.

    A check that needs the full data sets belongs in ``benchmarks/``, not here.
    """
    return DATA


TINY_MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3-vl", "tiny-gemma3-vl")
#: The vision-language architectures, prompted with images.
TINY_VLMS = ("tiny-qwen3-vl", "tiny-gemma3-vl")
# The engine's guarantees hold on every tiny architecture and on the real embedded Gemma-3-270M.
ENGINE_MODELS = (*TINY_MODELS, pytest.param("gemma-3", marks=pytest.mark.integration))

_loaded: dict[str, tuple] = {}


def _shared(name: str) -> tuple:
    """(model, tokenizer) of ``name``, loaded once per session."""
    from poptune import load_model

    if name not in _loaded:
        _loaded[name] = load_model(name)
    return _loaded[name]


@pytest.fixture(params=ENGINE_MODELS)
def arch(request):
    """(model, tokenizer) for each supported architecture; loaded once, POP removed after each test."""
    from poptune import remove_pop

    model, tokenizer = _shared(request.param)
    yield model, tokenizer
    remove_pop(model)


@pytest.fixture(params=TINY_VLMS)
def vlm(request):
    """(model, tokenizer) for each vision-language architecture, shared with ``arch``."""
    from poptune import remove_pop

    model, tokenizer = _shared(request.param)
    yield model, tokenizer
    remove_pop(model)


@pytest.fixture
def shared():
    """A loader of shared models by name: ``shared("tiny-gemma3-vl") -> (model, tokenizer)``."""
    return _shared


@pytest.fixture
def gemma():
    """The real embedded Gemma-3-270M (integration tests only), shared with ``arch``."""
    from poptune import remove_pop

    model, tokenizer = _shared("gemma-3")
    yield model, tokenizer
    remove_pop(model)


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server on loopback for the session (skips, saying why, where none can start)."""
    from poptune.testing.pgserver import LocalPostgres, PostgresUnavailable

    server = LocalPostgres()
    try:
        server.start()
    except PostgresUnavailable as e:
        server.stop()
        pytest.skip(f"no local PostgreSQL server could be started: {e}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres, request):
    """A new, empty database on the session's server."""
    import uuid

    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nothing can be created in: a read-only tmpfs as root (root ignores permission bits), else 0o500."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)]).returncode:
            pytest.skip("root without mount: no read-only folder to test with")
        yield folder
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
        yield folder
        folder.chmod(stat.S_IRWXU)


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading any model fails the test: a refusal of bad input must come before a model loads."""
    import poptune.models.registry as registry

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(registry, "_random_model", refuse)
    monkeypatch.setattr(registry, "_from_pretrained", refuse)
