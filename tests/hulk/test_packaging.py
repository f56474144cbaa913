"""The wheel carries what an installed ``hulk`` reads from its own files: outside a
checkout (``pip install``, the image) ``hulk operator --install-crds`` read the CRDs from
the repository's ``crds/``, which no wheel holds (a review: FileNotFoundError)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_installed_wheel_finds_its_crds_weights_and_the_paper_cluster(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("hulk-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    for name in ("hulktrainingjobs.hulk.dev.yaml", "nodelatencies.hulk.dev.yaml"):
        packaged = site / "hulk_operator" / "crds" / name
        assert packaged.read_bytes() == (ROOT / "crds" / name).read_bytes(), name
    probe = (
        "import hulk_operator.crd as c, hulk_planner.datasets as d\n"
        "from hulk_planner.gnn.planner import shipped_weights\n"
        "print(c.__file__); print(len(c.documents(c.JOB_CRD)), len(c.documents(c.LATENCY_CRD)))\n"
        "print(len(d.paper_cluster().servers)); print(shipped_weights())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True,
        capture_output=True, text=True,
    ).stdout.split("\n")  # fmt: skip
    assert out[0].startswith(str(site)), out  # (not the checkout's)
    assert out[1:3] == ["1 1", "47"], out
    assert out[3].startswith(str(site)), out
