"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing page in the
navigation or an API target that no longer exists fails the suite. About 10 s."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "theory/inverse/index.html", "api/bea/index.html", "reliability/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "bea" / "index.html").read_text(encoding="utf-8")
    # the API page is generated from the docstrings (bea.modified_lagrangian's, rendered with its math)
    assert 'id="bea.modified_lagrangian"' in api and 'class="arithmatex"' in api
